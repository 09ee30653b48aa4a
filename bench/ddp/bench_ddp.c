/*
 * bench_ddp.c - mg-bench-ddp: the step time of data-parallel training
 * (memgrad_dist.h) at the rank count mpirun gives it, the gradient
 * allreduce's share of the step, and memory per rank, for each checkpoint
 * policy. bench/ddp/run.sh runs it at 1 and 2 ranks and computes the
 * scaling efficiency.
 *
 *   mpirun -np N mg-bench-ddp [--model resnet|mlp] [--depth D] [--width W]
 *       [--batch B (per rank)] [--image I] [--steps S] [--warmup K]
 *       [--bucket-kb K] [--policies none,memory,speed] [--overlap 0|1]
 *
 * --overlap 1 attaches mg_dist_buckets_observer, so each bucket's exchange
 * starts during the backward pass; 0 (default) starts them all in
 * mg_dist_allreduce after the run.
 *
 * Every step starts at a barrier. A step's time is the slowest rank's run
 * plus allreduce. The allreduce time is taken two ways: `ar_min` is the
 * fastest rank's time in mg_dist_allreduce (the rank that arrived last,
 * so close to the communication itself), `ar_max` the slowest's (which
 * adds waiting for the other ranks' backward passes). Medians over steps.
 * Rank 0 prints one CSV row per policy.
 */
#include <memgrad_dist.h>
#include <memgrad_models.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void die(const char *what, mg_status s) {
    fprintf(stderr, "mg-bench-ddp: rank %d: %s: %s: %s\n", rank, what,
            mg_status_str(s), mg_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct config {
    const char *model;
    int depth, width, batch, image, steps, warmup, bucket_kb;
    int overlap; /* 1: mg_dist_buckets_observer attached to the executor */
} config;

static mg_model *model_build(const config *cf) {
    if (strcmp(cf->model, "mlp") == 0)
        return mg_model_mlp(cf->depth, cf->width, cf->batch, cf->width, 10, 0.0,
                            MG_F32, 1);
    return mg_model_resnet(cf->depth, cf->width, cf->batch, cf->image, 10,
                           MG_F32, 1);
}

static void bench_policy(const config *cf, mg_ckpt_policy policy,
                         const char *pname) {
    mg_model *m = model_build(cf);
    if (!m) die("building the model", mg_last_status());
    mg_checkpoints ck = {.policy = policy};
    mg_status s = mg_model_gradients(m, &ck);
    if (s != MG_OK) die("mg_model_gradients", s);
    int n = m->n_params;
    void **w = calloc((size_t)n, sizeof *w),
         **gw = calloc((size_t)n, sizeof *gw);
    mg_binding *binds = calloc((size_t)(2 * n + 3), sizeof *binds);
    mg_binding *grads = calloc((size_t)n, sizeof *grads);
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    double *t_step = calloc((size_t)cf->steps, sizeof(double));
    double *t_run = calloc((size_t)cf->steps, sizeof(double));
    double *t_armin = calloc((size_t)cf->steps, sizeof(double));
    double *t_armax = calloc((size_t)cf->steps, sizeof(double));
    if (!w || !gw || !binds || !grads || !outs || !t_step || !t_run ||
        !t_armin || !t_armax)
        die("allocating", MG_ERR_NOMEM);
    int nb = 0;
    size_t grad_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = mg_tensor_nbytes(m->g, m->params[i]);
        grad_bytes += bytes;
        w[i] = malloc(bytes);
        gw[i] = malloc(bytes);
        if (!w[i] || !gw[i]) die("allocating", MG_ERR_NOMEM);
        binds[nb++] = (mg_binding){m->params[i], w[i]};
        binds[nb++] = (mg_binding){m->grads[i], gw[i]};
        grads[n - 1 - i] = (mg_binding){m->grads[i], gw[i]};
        outs[i + 1] = m->grads[i];
    }
    void *x = malloc(mg_tensor_nbytes(m->g, m->input));
    void *y = malloc(mg_tensor_nbytes(m->g, m->target));
    float loss = 0;
    if (!x || !y) die("allocating", MG_ERR_NOMEM);
    binds[nb++] = (mg_binding){m->input, x};
    binds[nb++] = (mg_binding){m->target, y};
    binds[nb++] = (mg_binding){m->loss, &loss};
    outs[0] = m->loss;
    if ((s = mg_model_init_params(m, 7, w)) != MG_OK) die("init", s);
    if ((s = mg_model_init_data(m, 100 + (uint64_t)rank, x, y)) != MG_OK)
        die("init data", s);
    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    if ((s = mg_plan_compile(m->g, outs, n + 1, NULL, &plan)) != MG_OK)
        die("mg_plan_compile", s);
    if ((s = mg_exec_new(NULL, &ex)) != MG_OK) die("mg_exec_new", s);
    mg_dist_comm *comm = NULL;
    mg_dist_buckets *bk = NULL;
    if ((s = mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &comm)) != MG_OK)
        die("mg_dist_comm_from_mpi", s);
    if ((s = mg_dist_buckets_new(comm, m->g, grads, n,
                                 (size_t)cf->bucket_kb << 10, &bk)) != MG_OK)
        die("mg_dist_buckets_new", s);
    if (cf->overlap) {
        mg_observer o;
        if ((s = mg_dist_buckets_observer(bk, &o)) != MG_OK ||
            (s = mg_exec_observer_attach(ex, &o, NULL)) != MG_OK)
            die("attaching the overlap observer", s);
    }

    for (int step = -cf->warmup; step < cf->steps; step++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        s = mg_exec_run(ex, plan, binds, nb, (uint64_t)step);
        double t1 = MPI_Wtime();
        s = mg_dist_allreduce(bk, s);
        double t2 = MPI_Wtime();
        if (s != MG_OK) die("training step", s);
        if (step < 0) continue;
        /* No update: every step does the same work on the same data. */
        double mine[2] = {t2 - t0, t1 - t0}, mx[2],
               ar[2] = {t2 - t1, -(t2 - t1)}, arr[2];
        MPI_Allreduce(mine, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(ar, arr, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t_step[step] = mx[0];
        t_run[step] = mx[1];
        t_armax[step] = arr[0];
        t_armin[step] = -arr[1];
    }
    mg_pool_stats ps;
    mg_exec_pool_stats(ex, &ps);
    mg_dist_stats ds;
    mg_dist_buckets_stats(bk, &ds);
    unsigned long long peak = ps.peak_bytes_in_use, peak_max = 0;
    MPI_Reduce(&peak, &peak_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0,
               MPI_COMM_WORLD);
    size_t predicted = mg_plan_predicted_peak(plan, binds, nb);
    if (rank == 0) {
        double step_ms = 1e3 * median(t_step, cf->steps);
        double armin_ms = 1e3 * median(t_armin, cf->steps);
        printf("%d,%s,%d,%d,%d,%s,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,"
               "%.3f,%d,%d\n",
               size, cf->model, cf->depth, cf->width, cf->batch, pname, step_ms,
               1e3 * median(t_run, cf->steps), armin_ms,
               1e3 * median(t_armax, cf->steps), armin_ms / step_ms,
               (double)peak_max / 1e6, (double)predicted / 1e6,
               (double)ds.buffer_bytes / 1e6, (double)grad_bytes / 1e6,
               (double)ds.bytes_sent / (double)(cf->steps + cf->warmup) / 1e6,
               mg_dist_buckets_count(bk), cf->overlap);
        fflush(stdout);
    }
    mg_dist_buckets_free(bk);
    mg_dist_comm_free(comm);
    mg_exec_free(ex);
    mg_plan_free(plan);
    for (int i = 0; i < n; i++) {
        free(w[i]);
        free(gw[i]);
    }
    free(w);
    free(gw);
    free(binds);
    free(grads);
    free(outs);
    free(t_step);
    free(t_run);
    free(t_armin);
    free(t_armax);
    free(x);
    free(y);
    mg_model_free(m);
}

static int arg_int(const char *v, int lo, int hi, const char *opt) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
        if (rank == 0)
            fprintf(stderr, "mg-bench-ddp: %s %s: expected %d..%d\n", opt, v,
                    lo, hi);
        MPI_Finalize();
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    config cf = {"resnet", 8, 16, 16, 32, 10, 2, 25 << 10, 0};
    const char *policies = "none,memory,speed";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            if (rank == 0)
                fprintf(stderr, "mg-bench-ddp: %s needs a value\n", o);
            MPI_Finalize();
            return 2;
        }
        i++;
        if (!strcmp(o, "--model") &&
            (!strcmp(v, "resnet") || !strcmp(v, "mlp")))
            cf.model = v;
        else if (!strcmp(o, "--depth")) cf.depth = arg_int(v, 1, 4096, o);
        else if (!strcmp(o, "--width")) cf.width = arg_int(v, 1, 1 << 16, o);
        else if (!strcmp(o, "--batch")) cf.batch = arg_int(v, 1, 1 << 20, o);
        else if (!strcmp(o, "--image")) cf.image = arg_int(v, 1, 4096, o);
        else if (!strcmp(o, "--steps")) cf.steps = arg_int(v, 1, 100000, o);
        else if (!strcmp(o, "--warmup")) cf.warmup = arg_int(v, 0, 100000, o);
        else if (!strcmp(o, "--bucket-kb"))
            cf.bucket_kb = arg_int(v, 1, 1 << 21, o);
        else if (!strcmp(o, "--policies")) policies = v;
        else if (!strcmp(o, "--overlap")) cf.overlap = arg_int(v, 0, 1, o);
        else {
            if (rank == 0)
                fprintf(stderr, "mg-bench-ddp: unknown option %s %s\n", o, v);
            MPI_Finalize();
            return 2;
        }
    }
    if (rank == 0)
        printf("ranks,model,depth,width,batch_per_rank,policy,step_ms,run_ms,"
               "ar_min_ms,ar_max_ms,ar_share,pool_peak_mb,predicted_peak_mb,"
               "dist_buffers_mb,grad_mb,sent_mb_per_step,buckets,overlap\n");
    char list[256];
    snprintf(list, sizeof list, "%s", policies);
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p;
         p = strtok_r(NULL, ",", &save)) {
        mg_ckpt_policy pol;
        if (mg_ckpt_policy_parse(p, &pol) != MG_OK ||
            (pol != MG_CKPT_NONE && pol != MG_CKPT_MEMORY &&
             pol != MG_CKPT_SPEED)) {
            if (rank == 0)
                fprintf(stderr, "mg-bench-ddp: unknown policy %s\n", p);
            MPI_Finalize();
            return 2;
        }
        bench_policy(&cf, pol, p);
    }
    MPI_Finalize();
    return 0;
}
