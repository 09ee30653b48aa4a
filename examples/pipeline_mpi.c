/*
 * pipeline_mpi.c - pipeline-parallel training with memgrad_pipeline.h:
 * one rank per stage, cuts chosen by mg_pipe_balance, M microbatches per
 * step under 1F1B (or GPipe), SGD on each stage's own parameters. Every
 * rank makes the same initial weights from the seed, so nothing is
 * broadcast. Prints each stage's predicted and measured pool peak and the
 * last stage's loss per step; exits non-zero if a step fails, a measured
 * peak differs from its prediction, or the loss is not finite.
 *
 *   mpirun -np 2 memgrad-pipeline_mpi [mlp|resnet] [steps] [micro] [gpipe|1f1b]
 *                                     [none|memory|speed]
 */
#include <memgrad_models.h>
#include <memgrad_pipeline.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *kind = argc > 1 ? argv[1] : "mlp";
    int steps = argc > 2 ? atoi(argv[2]) : 3;
    int M = argc > 3 ? atoi(argv[3]) : 4;
    mg_pipe_schedule sched =
        argc > 4 && !strcmp(argv[4], "gpipe") ? MG_PIPE_GPIPE : MG_PIPE_1F1B;
    mg_ckpt_policy pol = MG_CKPT_MEMORY;
    int ok = steps >= 1 && M >= 1 && M <= 64 &&
             (argc <= 5 || mg_ckpt_policy_parse(argv[5], &pol) == MG_OK);
    mg_model *m = NULL;
    if (ok)
        m = !strcmp(kind, "resnet")
                ? mg_model_resnet(4 * size, 8, 4, 16, 10, MG_F32, 1)
                : mg_model_mlp(8 * size, 64, 32, 32, 10, 0.1, MG_F32, 1);
    if (!m) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpirun -np S %s [mlp|resnet] [steps] [micro "
                    "1..64] [gpipe|1f1b] [none|memory|speed] (%s)\n",
                    argv[0], ok ? mg_last_error() : "bad arguments");
        MPI_Finalize();
        return 2;
    }
    int np = m->n_params, nb = 2 + np;
    /* Every rank holds every weight here, for simplicity; a stage reads
     * only its own (mg_pipe_stage_params). */
    float **w = calloc((size_t)np, sizeof *w),
          **gr = calloc((size_t)np, sizeof *gr);
    mg_binding *gb = malloc((size_t)np * sizeof *gb);
    for (int i = 0; i < np; i++) {
        size_t n = mg_tensor_nbytes(m->g, m->params[i]);
        w[i] = malloc(n);
        gr[i] = malloc(n);
        gb[i] = (mg_binding){m->params[i], gr[i]};
    }
    mg_model_init_params(m, 7, (void *const *)w);
    void **x = calloc((size_t)M, sizeof *x), **y = calloc((size_t)M, sizeof *y);
    mg_binding *binds = malloc((size_t)M * (size_t)nb * sizeof *binds);
    for (int k = 0; k < M; k++) {
        x[k] = malloc(mg_tensor_nbytes(m->g, m->input));
        y[k] = malloc(mg_tensor_nbytes(m->g, m->target));
        mg_binding *b = binds + (size_t)k * (size_t)nb;
        b[0] = (mg_binding){m->input, x[k]};
        b[1] = (mg_binding){m->target, y[k]};
        for (int i = 0; i < np; i++)
            b[2 + i] = (mg_binding){m->params[i], w[i]};
    }

    int status = 0, bad_loss = 0;
    mg_dist_comm *c = NULL;
    mg_pipe *p = NULL;
    mg_pipe_options o = {.schedule = sched,
                         .n_micro = M,
                         .checkpoints = {.policy = pol},
                         .num_threads = 1};
    if (mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c) != MG_OK ||
        mg_pipe_new(c, m->g, m->loss, NULL, 0, &o, &p) != MG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, mg_last_error());
        status = 1;
    }
    mg_tensor mine[256];
    int n_mine = p ? mg_pipe_stage_params(p, mine, 256) : 0;
    double *losses = calloc((size_t)M, sizeof *losses);
    for (int s = 0; !status && s < steps; s++) {
        for (int k = 0; k < M; k++)
            mg_model_init_data(m, 1000 * (uint64_t)s + (uint64_t)k, x[k], y[k]);
        mg_status st =
            mg_pipe_step(p, binds, nb, 17 * (uint64_t)s, gb, np, losses);
        if (st != MG_OK) {
            fprintf(stderr, "rank %d: step %d: %s\n", rank, s, mg_last_error());
            status = 1;
            break;
        }
        /* SGD on this stage's parameters, gradients averaged over M */
        for (int j = 0; j < n_mine && j < 256; j++) {
            int i = 0;
            while (m->params[i] != mine[j]) i++;
            int64_t n = mg_tensor_numel(m->g, m->params[i]);
            for (int64_t e = 0; e < n; e++) w[i][e] -= 0.05f / M * gr[i][e];
        }
        if (rank == size - 1) {
            double mean = 0;
            for (int k = 0; k < M; k++) mean += losses[k] / M;
            printf("step %d: mean loss %.5f\n", s, mean);
            if (!isfinite(mean)) bad_loss = 1; /* the others go on */
        }
    }
    if (p) {
        mg_pipe_stats ps;
        mg_pipe_get_stats(p, &ps);
        for (int r = 0; r < size; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            if (r != rank) continue;
            printf("stage %d/%d: %d ops, %d microbatches in flight, predicted "
                   "peak %zu B, measured %zu B%s, %.1f%% of the step waiting\n",
                   ps.stage, ps.n_stages, ps.n_ops, ps.in_flight,
                   ps.predicted_peak, ps.measured_peak,
                   ps.predicted_peak == ps.measured_peak ? "" : " (DIFFERS)",
                   100 * ps.wait_seconds / ps.step_seconds);
            fflush(stdout);
            if (!status && ps.predicted_peak != ps.measured_peak) status = 1;
        }
    }
    if (bad_loss) status = 1;
    int any = 0;
    MPI_Allreduce(&status, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    mg_pipe_free(p);
    mg_dist_comm_free(c);
    for (int i = 0; i < np; i++) {
        free(w[i]);
        free(gr[i]);
    }
    for (int k = 0; k < M; k++) {
        free(x[k]);
        free(y[k]);
    }
    free(w);
    free(gr);
    free(gb);
    free(x);
    free(y);
    free(binds);
    free(losses);
    mg_model_free(m);
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}
