/*
 * bench_pipeline.c - mg-bench-pipeline: pipeline-parallel training steps
 * of an MLP under mpirun -np S (memgrad_pipeline.h), one row per
 * schedule, policy and microbatch count: the bytes of a stage's
 * parameters (caller memory, outside the pool), each rank's predicted and
 * measured pool peak (the largest over the ranks), whether every rank fits
 * --max-bytes, the median step time, and the bubble: the share of the step
 * a rank spends outside mg_exec_forward/backward (waiting for its
 * neighbours), its mean and largest over the ranks, beside GPipe's
 * (S - 1) / (M + S - 1). At -np 1 it is the one-rank baseline: the same
 * pipeline code with one stage.
 *
 *   mpirun -np S mg-bench-pipeline [--depth D] [--width W] [--batch B]
 *       [--micro 1,2,4,8] [--schedule gpipe,1f1b] [--policy none,memory]
 *       [--steps N] [--warmup N] [--max-bytes BYTES]
 */
#include <memgrad_models.h>
#include <memgrad_pipeline.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_list(const char *s, char out[][16], int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len >= 16) len = 15;
        memcpy(out[n], s, len);
        out[n++][len] = 0;
        s = e ? e + 1 : NULL;
    }
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int depth = 16, width = 512, batch = 64, steps = 5, warmup = 1;
    size_t max_bytes = 0;
    const char *micro_s = "1,2,4,8", *sched_s = "gpipe,1f1b",
               *pol_s = "none,memory";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--depth")) depth = atoi(v);
        else if (!strcmp(k, "--width")) width = atoi(v);
        else if (!strcmp(k, "--batch")) batch = atoi(v);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--warmup")) warmup = atoi(v);
        else if (!strcmp(k, "--micro")) micro_s = v;
        else if (!strcmp(k, "--schedule")) sched_s = v;
        else if (!strcmp(k, "--policy")) pol_s = v;
        else if (!strcmp(k, "--max-bytes"))
            max_bytes = (size_t)strtoull(v, NULL, 10);
        else {
            if (rank == 0) fprintf(stderr, "unknown option %s\n", k);
            MPI_Finalize();
            return 2;
        }
    }
    char micros[8][16], scheds[2][16], pols[5][16];
    int n_micro = parse_list(micro_s, micros, 8);
    int n_sched = parse_list(sched_s, scheds, 2);
    int n_pol = parse_list(pol_s, pols, 5);
    mg_model *m = mg_model_mlp(depth, width, batch, width, 10, 0, MG_F32, 1);
    if (!m || steps < 1) {
        if (rank == 0) fprintf(stderr, "bad model: %s\n", mg_last_error());
        MPI_Finalize();
        return 2;
    }
    int np = m->n_params, nb = 2 + np, maxM = 0;
    for (int i = 0; i < n_micro; i++)
        if (atoi(micros[i]) > maxM) maxM = atoi(micros[i]);
    void **w = calloc((size_t)np, sizeof *w),
         **gr = calloc((size_t)np, sizeof *gr);
    mg_binding *gb = malloc((size_t)np * sizeof *gb);
    for (int i = 0; i < np; i++) {
        size_t n = mg_tensor_nbytes(m->g, m->params[i]);
        w[i] = malloc(n);
        gr[i] = malloc(n);
        gb[i] = (mg_binding){m->params[i], gr[i]};
    }
    mg_model_init_params(m, 7, w);
    mg_binding *binds = malloc((size_t)maxM * (size_t)nb * sizeof *binds);
    void **x = calloc((size_t)maxM, sizeof *x),
         **y = calloc((size_t)maxM, sizeof *y);
    for (int k = 0; k < maxM; k++) {
        x[k] = malloc(mg_tensor_nbytes(m->g, m->input));
        y[k] = malloc(mg_tensor_nbytes(m->g, m->target));
        mg_model_init_data(m, (uint64_t)k, x[k], y[k]);
        mg_binding *b = binds + (size_t)k * (size_t)nb;
        b[0] = (mg_binding){m->input, x[k]};
        b[1] = (mg_binding){m->target, y[k]};
        for (int i = 0; i < np; i++)
            b[2 + i] = (mg_binding){m->params[i], w[i]};
    }
    mg_dist_comm *c = NULL;
    if (mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c) != MG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, mg_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("%-3s %-6s %-7s %3s %11s %13s %13s %4s %9s %8s %8s %8s\n", "S",
               "sched", "policy", "M", "param_B", "predicted_B", "measured_B",
               "fits", "step_ms", "bubble", "max", "(S-1)/(M+S-1)");
    int failed = 0;
    for (int si = 0; si < n_sched; si++)
        for (int pi = 0; pi < n_pol; pi++)
            for (int mi = 0; mi < n_micro; mi++) {
                int M = atoi(micros[mi]);
                mg_pipe_options o = {.schedule = strcmp(scheds[si], "gpipe")
                                                     ? MG_PIPE_1F1B
                                                     : MG_PIPE_GPIPE,
                                     .n_micro = M,
                                     .num_threads = 1,
                                     .max_bytes = max_bytes};
                if (mg_ckpt_policy_parse(pols[pi], &o.checkpoints.policy) !=
                    MG_OK) {
                    failed = 1;
                    break;
                }
                mg_pipe *p = NULL;
                mg_status s = mg_pipe_new(c, m->g, m->loss, NULL, 0, &o, &p);
                if (s != MG_OK) {
                    /* A stage over max_bytes (refused on every rank): the
                     * row says what the largest stage would need. */
                    mg_status refused = s;
                    o.max_bytes = 0;
                    s = mg_pipe_new(c, m->g, m->loss, NULL, 0, &o, &p);
                    unsigned long long need = 0, most = 0;
                    mg_pipe_stats ps;
                    if (s == MG_OK && mg_pipe_get_stats(p, &ps) == MG_OK)
                        need = ps.predicted_peak;
                    MPI_Allreduce(&need, &most, 1, MPI_UNSIGNED_LONG_LONG,
                                  MPI_MAX, MPI_COMM_WORLD);
                    if (rank == 0)
                        printf("%-3d %-6s %-7s %3d refused: the largest "
                               "stage needs %llu > max_bytes\n",
                               size, scheds[si], pols[pi], M, most);
                    /* out of memory on the ranks over it, MG_ERR_COMM on
                     * the others */
                    if (s != MG_OK ||
                        (refused != MG_ERR_NOMEM && refused != MG_ERR_COMM) ||
                        most <= max_bytes)
                        failed = 1;
                    mg_pipe_free(p);
                    continue;
                }
                double *t = malloc((size_t)steps * sizeof *t);
                double comp = 0, tot = 0;
                for (int k = 0; k < warmup + steps && s == MG_OK; k++) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    s = mg_pipe_step(p, binds, nb, 1, gb, np, NULL);
                    double dt = MPI_Wtime() - t0, slowest = 0;
                    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX,
                                  MPI_COMM_WORLD);
                    mg_pipe_stats ps;
                    mg_pipe_get_stats(p, &ps);
                    if (k >= warmup) {
                        t[k - warmup] = slowest;
                        comp += ps.compute_seconds;
                        tot += ps.step_seconds;
                    }
                }
                if (s != MG_OK) {
                    fprintf(stderr, "rank %d: %s\n", rank, mg_last_error());
                    failed = 1;
                }
                mg_pipe_stats ps;
                mg_pipe_get_stats(p, &ps);
                qsort(t, (size_t)steps, sizeof *t, cmp_double);
                double bubble = 1 - comp / tot, bmean = 0, bmax = 0;
                mg_tensor mine[512];
                int n_mine = mg_pipe_stage_params(p, mine, 512);
                unsigned long long pb = 0;
                for (int j = 0; j < n_mine && j < 512; j++)
                    pb += mg_tensor_nbytes(m->g, mine[j]);
                unsigned long long pk[3] = {ps.predicted_peak, ps.measured_peak,
                                            pb},
                                   mx[3];
                int fits = !max_bytes || ps.measured_peak <= max_bytes, all;
                int same = ps.measured_peak == ps.predicted_peak, all_same;
                MPI_Allreduce(&bubble, &bmean, 1, MPI_DOUBLE, MPI_SUM,
                              MPI_COMM_WORLD);
                MPI_Allreduce(&bubble, &bmax, 1, MPI_DOUBLE, MPI_MAX,
                              MPI_COMM_WORLD);
                MPI_Allreduce(pk, mx, 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                              MPI_COMM_WORLD);
                MPI_Allreduce(&fits, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
                MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN,
                              MPI_COMM_WORLD);
                if (!all_same) failed = 1;
                if (rank == 0)
                    printf("%-3d %-6s %-7s %3d %11llu %13llu %13llu %4s "
                           "%9.1f %8.3f %8.3f %8.3f%s\n",
                           size, scheds[si], pols[pi], M, mx[2], mx[0], mx[1],
                           all ? "yes" : "NO", 1e3 * t[(steps - 1) / 2],
                           bmean / size, bmax,
                           (double)(size - 1) / (M + size - 1),
                           all_same ? "" : "  (a rank's peak differs)");
                fflush(stdout);
                free(t);
                mg_pipe_free(p);
            }
    mg_dist_comm_free(c);
    for (int i = 0; i < np; i++) {
        free(w[i]);
        free(gr[i]);
    }
    for (int k = 0; k < maxM; k++) {
        free(x[k]);
        free(y[k]);
    }
    free(w);
    free(gr);
    free(gb);
    free(x);
    free(y);
    free(binds);
    mg_model_free(m);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
