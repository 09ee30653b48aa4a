/*
 * test_pipeline.c - memgrad_pipeline.h under `mpirun -np 2` and `-np 4`
 * (one rank per stage): the gradients of a pipelined step are the same
 * bits as one process running the whole graph on each microbatch and
 * summing in order, under GPipe and 1F1B and every policy (dropout in the
 * model); each rank's measured pool peak equals its predicted peak, which
 * counts its microbatches in flight, and a stage budget holds; bad cuts and
 * bad arguments fail with a message naming the tensor, on every rank; a
 * rank whose step fails makes every rank return MG_ERR_COMM with the
 * gradients untouched; pipeline and data parallel together (4 ranks: 2
 * stages x 2 replicas) average to the same bits as the single process; a
 * late rank makes every rank return MG_ERR_COMM within the deadline.
 *
 * Check runs in CK_NOFORK mode: forking an MPI process is not allowed.
 */
#include <memgrad_models.h>
#include <memgrad_pipeline.h>

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The watchdog and the all-ranks comparison; not its float tolerance. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "helpers/dist_check.h"
#include "helpers/mpi_main.h"
#pragma GCC diagnostic pop

static int rank, size;

/* The model: an MLP with dropout, microbatches of 8. */
enum { DEPTH = 6, WIDTH = 24, BATCH = 8, IN = 12, CLASSES = 5 };
static const double DROP = 0.25;
static const uint64_t MSEED = 11;

/* Or, where use_resnet is set, a small ResNet (skip connections: the
 * gradient of a block's input sums two paths). */
static int use_resnet;

static mg_model *model_new(void) {
    mg_model *m = use_resnet
                      ? mg_model_resnet(4, 4, 2, 8, CLASSES, MG_F32, MSEED)
                      : mg_model_mlp(DEPTH, WIDTH, BATCH, IN, CLASSES, DROP,
                                     MG_F32, MSEED);
    ck_assert_msg(m, "%s", mg_last_error());
    return m;
}

/* Weights, and M microbatches of data (data seed base + m). */
typedef struct data {
    mg_model *m;
    int M;
    void **w;
    float **x;
    int32_t **y;
    mg_binding *binds; /* M lists of 2 + n_params */
    int n_binds;
} data;

static void data_make(data *d, int M, uint64_t base) {
    d->m = model_new();
    d->M = M;
    int np = d->m->n_params;
    d->w = calloc((size_t)np, sizeof *d->w);
    for (int i = 0; i < np; i++)
        d->w[i] = malloc(mg_tensor_nbytes(d->m->g, d->m->params[i]));
    ck_assert(mg_model_init_params(d->m, 7, d->w) == MG_OK);
    d->x = calloc((size_t)M, sizeof *d->x);
    d->y = calloc((size_t)M, sizeof *d->y);
    d->n_binds = 2 + np;
    d->binds = malloc((size_t)M * (size_t)d->n_binds * sizeof *d->binds);
    for (int m = 0; m < M; m++) {
        d->x[m] = malloc(mg_tensor_nbytes(d->m->g, d->m->input));
        d->y[m] = malloc(mg_tensor_nbytes(d->m->g, d->m->target));
        ck_assert(mg_model_init_data(d->m, base + (uint64_t)m, d->x[m],
                                     d->y[m]) == MG_OK);
        mg_binding *b = d->binds + (size_t)m * (size_t)d->n_binds;
        b[0] = (mg_binding){d->m->input, d->x[m]};
        b[1] = (mg_binding){d->m->target, d->y[m]};
        for (int i = 0; i < np; i++)
            b[2 + i] = (mg_binding){d->m->params[i], d->w[i]};
    }
}

static void data_free(data *d) {
    for (int i = 0; i < d->m->n_params; i++) free(d->w[i]);
    for (int m = 0; m < d->M; m++) {
        free(d->x[m]);
        free(d->y[m]);
    }
    free(d->w);
    free(d->x);
    free(d->y);
    free(d->binds);
    mg_model_free(d->m);
}

/* Gradient buffers for every parameter (NaN-filled: untouched is seen). */
static float **grads_new(const mg_model *m, mg_binding **gb) {
    float **g = calloc((size_t)m->n_params, sizeof *g);
    *gb = malloc((size_t)m->n_params * sizeof **gb);
    for (int i = 0; i < m->n_params; i++) {
        size_t n = mg_tensor_nbytes(m->g, m->params[i]);
        g[i] = malloc(n);
        for (size_t e = 0; e < n / 4; e++) g[i][e] = NAN;
        (*gb)[i] = (mg_binding){m->params[i], g[i]};
    }
    return g;
}

static void grads_free(float **g, mg_binding *gb, int n) {
    for (int i = 0; i < n; i++) free(g[i]);
    free(g);
    free(gb);
}

/* The single process: the whole graph's training plan on each microbatch
 * (seed + m), gradients summed into zeros in microbatch order. */
static float **reference(const data *d, uint64_t seed, double *losses) {
    mg_model *m = model_new();
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    int np = m->n_params;
    mg_tensor *outs = malloc((size_t)(np + 1) * sizeof *outs);
    outs[0] = m->loss;
    for (int i = 0; i < np; i++) outs[1 + i] = m->grads[i];
    mg_plan *plan = NULL;
    ck_assert(mg_plan_compile(m->g, outs, np + 1, NULL, &plan) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float **acc = calloc((size_t)np, sizeof *acc),
          **tmp = calloc((size_t)np, sizeof *tmp);
    mg_binding *b = malloc((size_t)(d->n_binds + np + 1) * sizeof *b);
    float loss;
    for (int i = 0; i < np; i++) {
        size_t n = mg_tensor_nbytes(m->g, m->params[i]);
        acc[i] = calloc(1, n);
        tmp[i] = malloc(n);
    }
    for (int k = 0; k < d->M; k++) {
        memcpy(b, d->binds + (size_t)k * (size_t)d->n_binds,
               (size_t)d->n_binds * sizeof *b);
        for (int i = 0; i < np; i++)
            b[d->n_binds + i] = (mg_binding){m->grads[i], tmp[i]};
        b[d->n_binds + np] = (mg_binding){m->loss, &loss};
        ck_assert_msg(mg_exec_run(ex, plan, b, d->n_binds + np + 1,
                                  seed + (uint64_t)k) == MG_OK,
                      "%s", mg_last_error());
        if (losses) losses[k] = loss;
        for (int i = 0; i < np; i++) {
            int64_t n = mg_tensor_numel(m->g, m->params[i]);
            for (int64_t e = 0; e < n; e++) acc[i][e] += tmp[i][e];
        }
    }
    for (int i = 0; i < np; i++) free(tmp[i]);
    free(tmp);
    free(b);
    free(outs);
    mg_plan_free(plan);
    mg_exec_free(ex);
    mg_model_free(m);
    return acc;
}

static mg_dist_comm *comm_on(MPI_Comm comm, double timeout_s) {
    mg_dist_comm *c = NULL;
    mg_dist_options o = {.timeout_s = timeout_s};
    ck_assert_msg(mg_dist_comm_from_mpi(comm, &o, &c) == MG_OK, "%s",
                  mg_last_error());
    return c;
}

/* The cuts: S - 1 of the MLP's hidden activations, spread out. */
static void mlp_cuts(const mg_model *m, int S, mg_tensor *cuts) {
    for (int k = 0; k < S - 1; k++)
        cuts[k] = m->blocks[(k + 1) * m->n_blocks / S - 1];
}

static int param_index(const mg_model *m, mg_tensor t) {
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i] == t) return i;
    return -1;
}

/* This stage's gradients are the reference's bits; the others untouched. */
static void check_stage_grads(const mg_pipe *p, const mg_model *m, float **got,
                              float **exp, const char *what) {
    mg_tensor mine[64];
    int n = mg_pipe_stage_params(p, mine, 64);
    ck_assert(n > 0 && n <= 64);
    for (int i = 0; i < m->n_params; i++) {
        int ours = 0;
        for (int j = 0; j < n; j++) ours |= mine[j] == m->params[i];
        size_t nb = mg_tensor_nbytes(m->g, m->params[i]);
        if (ours)
            ck_assert_msg(memcmp(got[i], exp[i], nb) == 0,
                          "%s: rank %d: gradient of %s differs from the single "
                          "process (first %.9g vs %.9g)",
                          what, rank, mg_tensor_name(m->g, m->params[i]),
                          got[i][0], exp[i][0]);
        else
            ck_assert_msg(isnan(got[i][0]), "%s: %s written by rank %d", what,
                          mg_tensor_name(m->g, m->params[i]), rank);
    }
}

/* One pipeline step of the given schedule and policy against the single
 * process, twice (the second step reuses the pool), on comm (one rank per
 * stage: MPI_COMM_WORLD, or MPI_COMM_SELF for one stage). Policy
 * collection lists every block output (the cuts among them are skipped). */
static void exact_case_on(MPI_Comm comm, mg_pipe_schedule sched,
                          mg_ckpt_policy pol, int M);

static void exact_case(mg_pipe_schedule sched, mg_ckpt_policy pol, int M) {
    exact_case_on(MPI_COMM_WORLD, sched, pol, M);
}

static void exact_case_on(MPI_Comm comm, mg_pipe_schedule sched,
                          mg_ckpt_policy pol, int M) {
    int rank = 0, size = 1; /* within comm */
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    data d;
    data_make(&d, M, 100);
    const uint64_t seed = 5;
    double ref_loss[16];
    float **ref = reference(&d, seed, ref_loss);
    mg_dist_comm *c = comm_on(comm, 60);
    mg_tensor cuts[8];
    mlp_cuts(d.m, size, cuts);
    mg_pipe_options o = {
        .schedule = sched, .n_micro = M, .checkpoints = {.policy = pol}};
    if (pol == MG_CKPT_COLLECTION) {
        o.checkpoints.tensors = d.m->blocks;
        o.checkpoints.n_tensors = d.m->n_blocks;
    }
    if (pol == MG_CKPT_BUDGET) {
        /* A budget every stage can meet: the largest of the stages' peaks
         * under policy memory. */
        mg_pipe_options om = o;
        om.checkpoints.policy = MG_CKPT_MEMORY;
        mg_pipe *pm = NULL;
        ck_assert_msg(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &om,
                                  &pm) == MG_OK,
                      "%s", mg_last_error());
        mg_pipe_stats sm;
        mg_pipe_get_stats(pm, &sm);
        unsigned long long a = sm.predicted_peak, most = 0;
        MPI_Allreduce(&a, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
        o.checkpoints.budget_bytes = (size_t)most;
        mg_pipe_free(pm);
    }
    mg_pipe *p = NULL;
    ck_assert_msg(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert_int_eq(mg_pipe_stage(p), rank);
    for (int step = 0; step < 2; step++) {
        mg_binding *gb;
        float **g = grads_new(d.m, &gb);
        double losses[16];
        for (int m = 0; m < M; m++) losses[m] = NAN;
        mg_status st = mg_pipe_step(p, d.binds, d.n_binds, seed, gb,
                                    d.m->n_params, losses);
        ck_assert_msg(st == MG_OK, "%s", mg_last_error());
        char what[96];
        snprintf(what, sizeof what, "%s/%s step %d",
                 sched == MG_PIPE_GPIPE ? "gpipe" : "1f1b",
                 mg_ckpt_policy_name(pol), step);
        check_stage_grads(p, d.m, g, ref, what);
        for (int m = 0; m < M; m++) {
            if (rank == size - 1)
                ck_assert_msg(losses[m] == (double)(float)ref_loss[m],
                              "%s: loss %d: %.9g vs %.9g", what, m, losses[m],
                              ref_loss[m]);
            else ck_assert(isnan(losses[m]));
        }
        mg_pipe_stats ps;
        ck_assert(mg_pipe_get_stats(p, &ps) == MG_OK);
        int k =
            sched == MG_PIPE_GPIPE ? M : (size - rank < M ? size - rank : M);
        ck_assert_int_eq(ps.in_flight, k);
        ck_assert_uint_eq(ps.predicted_peak,
                          (size_t)(k - 1) * ps.phases.saved + ps.phases.pair);
        ck_assert_msg(ps.measured_peak == ps.predicted_peak,
                      "%s: rank %d: measured peak %zu, predicted %zu", what,
                      rank, ps.measured_peak, ps.predicted_peak);
        if (pol == MG_CKPT_BUDGET)
            ck_assert_msg(ps.predicted_peak <= o.checkpoints.budget_bytes,
                          "%s: rank %d: peak %zu over the budget %zu", what,
                          rank, ps.predicted_peak, o.checkpoints.budget_bytes);
        grads_free(g, gb, d.m->n_params);
    }
    mg_pipe_free(p);
    mg_dist_comm_free(c);
    for (int i = 0; i < d.m->n_params; i++) free(ref[i]);
    free(ref);
    data_free(&d);
}

START_TEST(test_exact_gpipe) {
    for (int pol = 0; pol < 5; pol++)
        exact_case(MG_PIPE_GPIPE, (mg_ckpt_policy)pol, 4);
}
END_TEST

START_TEST(test_exact_1f1b) {
    for (int pol = 0; pol < 5; pol++)
        exact_case(MG_PIPE_1F1B, (mg_ckpt_policy)pol, 6);
}
END_TEST

/* One stage (each rank alone, on MPI_COMM_SELF): no cut, no messages;
 * still the single process's bits, and the peak holds. */
START_TEST(test_single_stage) {
    exact_case_on(MPI_COMM_SELF, MG_PIPE_1F1B, MG_CKPT_COLLECTION, 3);
    exact_case_on(MPI_COMM_SELF, MG_PIPE_GPIPE, MG_CKPT_MEMORY, 3);
}
END_TEST

/* A ResNet cut at its residual blocks' sums, under both schedules. */
START_TEST(test_exact_resnet) {
    use_resnet = 1;
    exact_case(MG_PIPE_1F1B, MG_CKPT_MEMORY, 3);
    exact_case(MG_PIPE_GPIPE, MG_CKPT_NONE, 2);
    exact_case(MG_PIPE_1F1B, MG_CKPT_BUDGET, 4);
    use_resnet = 0;
}
END_TEST

/* Fewer microbatches than stages, and one microbatch. */
START_TEST(test_exact_few_micro) {
    exact_case(MG_PIPE_1F1B, MG_CKPT_MEMORY, 1);
    exact_case(MG_PIPE_1F1B, MG_CKPT_NONE, 3);
    exact_case(MG_PIPE_GPIPE, MG_CKPT_SPEED, 2);
}
END_TEST

/* 1F1B holds fewer microbatches than GPipe on every stage but the last
 * (where both hold 1 under 1F1B): the predicted peak shows it. */
START_TEST(test_in_flight_memory) {
    data d;
    data_make(&d, 8, 100);
    mg_dist_comm *c = comm_on(MPI_COMM_WORLD, 60);
    mg_tensor cuts[8];
    mlp_cuts(d.m, size, cuts);
    size_t peak[2];
    for (int k = 0; k < 2; k++) {
        mg_pipe_options o = {.schedule = k ? MG_PIPE_1F1B : MG_PIPE_GPIPE,
                             .n_micro = 8};
        mg_pipe *p = NULL;
        ck_assert(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p) ==
                  MG_OK);
        mg_pipe_stats ps;
        mg_pipe_get_stats(p, &ps);
        peak[k] = ps.predicted_peak;
        ck_assert(ps.phases.saved > 0);
        mg_pipe_free(p);
    }
    ck_assert_msg(peak[1] < peak[0], "rank %d: 1f1b %zu, gpipe %zu", rank,
                  peak[1], peak[0]);
    /* a max_bytes below GPipe's peak is refused when the pipeline is made,
     * on every rank */
    mg_pipe_options o = {
        .schedule = MG_PIPE_GPIPE, .n_micro = 8, .max_bytes = peak[0] - 1};
    mg_pipe *p = NULL;
    mg_status st = mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p);
    ck_assert(p == NULL);
    ck_assert_int_eq(st, MG_ERR_NOMEM);
    ck_assert_msg(strstr(mg_last_error(), "max_bytes"), "%s", mg_last_error());
    mg_dist_comm_free(c);
    data_free(&d);
}
END_TEST

/* Automatic cuts: S - 1 of them, valid, and a step with them is exact. */
START_TEST(test_balance) {
    data d;
    data_make(&d, 4, 300);
    mg_tensor cuts[8];
    ck_assert_msg(mg_pipe_balance(d.m->g, d.m->loss, size, cuts) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_pipe_check_cuts(d.m->g, d.m->loss, cuts, size - 1) == MG_OK);
    check_same_on_all_ranks("balanced cuts", cuts,
                            (size_t)(size - 1) * sizeof *cuts);
    for (int k = 1; k < size - 1; k++) ck_assert(cuts[k] > cuts[k - 1]);
    float **ref = reference(&d, 9, NULL);
    mg_dist_comm *c = comm_on(MPI_COMM_WORLD, 60);
    mg_pipe_options o = {.schedule = MG_PIPE_1F1B, .n_micro = 4};
    mg_pipe *p = NULL;
    ck_assert_msg(mg_pipe_new(c, d.m->g, d.m->loss, NULL, 0, &o, &p) == MG_OK,
                  "%s", mg_last_error());
    mg_tensor used[8];
    ck_assert_int_eq(mg_pipe_cuts(p, used, 8), size - 1);
    for (int k = 0; k < size - 1; k++) ck_assert_int_eq(used[k], cuts[k]);
    mg_binding *gb;
    float **g = grads_new(d.m, &gb);
    ck_assert(mg_pipe_step(p, d.binds, d.n_binds, 9, gb, d.m->n_params, NULL) ==
              MG_OK);
    check_stage_grads(p, d.m, g, ref, "balanced");
    grads_free(g, gb, d.m->n_params);
    mg_pipe_free(p);
    mg_dist_comm_free(c);
    for (int i = 0; i < d.m->n_params; i++) free(ref[i]);
    free(ref);
    data_free(&d);
    /* a chain of 3 ops has too few cuts for 8 stages */
    mg_graph *g2 = mg_graph_new();
    int64_t sh[1] = {4};
    mg_tensor x = mg_param(g2, "x", MG_F32, 1, sh);
    mg_tensor l = mg_sum(g2, mg_relu(g2, x), 0, NULL, 0);
    ck_assert_int_eq(mg_pipe_balance(g2, l, 8, cuts), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "too few"), "%s", mg_last_error());
    mg_graph_free(g2);
}
END_TEST

/* Bad cuts: each refused with a message naming the tensor. */
START_TEST(test_bad_cuts) {
    mg_graph *g = mg_graph_new();
    int64_t sx[2] = {4, 6}, sw[2] = {6, 6};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, sx);
    mg_tensor w1 = mg_param(g, "w1", MG_F32, 2, sw);
    mg_tensor w2 = mg_param(g, "w2", MG_F32, 2, sw);
    mg_tensor a = mg_relu(g, mg_matmul(g, x, w1, 0, 0));
    mg_tensor_set_name(g, a, "a");
    mg_tensor b = mg_relu(g, mg_matmul(g, a, w2, 0, 0));
    mg_tensor_set_name(g, b, "b");
    mg_tensor c = mg_add(g, b, a); /* a skip past b */
    mg_tensor_set_name(g, c, "c");
    mg_tensor e = mg_relu(g, mg_matmul(g, c, w1, 0, 0)); /* w1 again */
    mg_tensor_set_name(g, e, "e");
    mg_tensor loss = mg_sum(g, e, 0, NULL, 0);
    mg_tensor cut;

    cut = b; /* a is read past it */
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &cut, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'a'") &&
                      strstr(mg_last_error(), "do not separate"),
                  "%s", mg_last_error());
    cut = c; /* separates, but w1 is read on both sides */
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &cut, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'w1'") &&
                      strstr(mg_last_error(), "one stage"),
                  "%s", mg_last_error());
    cut = x; /* a leaf */
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &cut, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'x'") &&
                      strstr(mg_last_error(), "leaf"),
                  "%s", mg_last_error());
    cut = loss;
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &cut, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "the loss"), "%s", mg_last_error());
    cut = 9999;
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &cut, 1), MG_ERR_UNKNOWN_ID);
    ck_assert_int_eq(mg_pipe_check_cuts(g, e, NULL, 0), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'e'") &&
                      strstr(mg_last_error(), "scalar"),
                  "%s", mg_last_error());
    /* not an ancestor of the loss */
    mg_tensor stray = mg_relu(g, x);
    mg_tensor_set_name(g, stray, "stray");
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, &stray, 1),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'stray'"), "%s", mg_last_error());
    mg_tensor two[2] = {a, a};
    ck_assert_int_eq(mg_pipe_check_cuts(g, loss, two, 2), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "twice"), "%s", mg_last_error());
    mg_graph_free(g);

    /* In an MLP: cuts out of order; a cut count that is not the rank
     * count, on every rank alike. */
    mg_model *m = model_new();
    mg_tensor rev[2] = {m->blocks[3], m->blocks[1]};
    ck_assert_int_eq(mg_pipe_check_cuts(m->g, m->loss, rev, 2),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "stage order"), "%s",
                  mg_last_error());
    mg_dist_comm *cm = comm_on(MPI_COMM_WORLD, 60);
    mg_pipe *p = (mg_pipe *)&p;
    mg_tensor cuts[8];
    mlp_cuts(m, size, cuts);
    ck_assert_int_eq(mg_pipe_new(cm, m->g, m->loss, cuts, size, NULL, &p),
                     MG_ERR_INVALID_ARG);
    ck_assert(p == NULL);
    ck_assert_msg(strstr(mg_last_error(), "ranks"), "%s", mg_last_error());
    /* bad options on one rank: it says why, the others MG_ERR_COMM */
    mg_pipe_options o = {.n_micro = rank == 1 ? 0 : 2};
    ck_assert_int_eq(mg_pipe_new(cm, m->g, m->loss, cuts, size - 1, &o, &p),
                     rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), rank == 1 ? "n_micro" : "rank 1"),
                  "%s", mg_last_error());
    /* a collection list that is NULL */
    mg_pipe_options oc = {
        .n_micro = 1,
        .checkpoints = {.policy = MG_CKPT_COLLECTION, .n_tensors = 2}};
    ck_assert_int_eq(mg_pipe_new(cm, m->g, m->loss, cuts, size - 1, &oc, &p),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "checkpoints"), "%s",
                  mg_last_error());
    ck_assert(!mg_dist_comm_broken(cm));
    mg_dist_comm_free(cm);
    mg_model_free(m);
}
END_TEST

/* mg_graph_copy_op, which the stages are built with: a copy computes the
 * same bits (a dropout its mask), and bad requests are refused by name. */
START_TEST(test_copy_op) {
    mg_graph *g = mg_graph_new(), *h = mg_graph_new();
    int64_t sx[2] = {3, 5};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, sx);
    /* an earlier dropout, not copied, takes the first RNG counters */
    ck_assert(mg_dropout(g, x, 0.5, 3) != MG_NO_TENSOR);
    mg_tensor y = mg_dropout(g, mg_tanh(g, x), 0.5, 3);
    mg_tensor_set_name(g, y, "y");
    mg_tensor hx = mg_graph_copy_op(h, g, x, NULL, 0);
    ck_assert(hx != MG_NO_TENSOR);
    ck_assert_str_eq(mg_tensor_name(h, hx), "x");
    mg_tensor ht = mg_graph_copy_op(h, g, mg_tensor_input(g, y, 0), &hx, 1);
    mg_tensor hy = mg_graph_copy_op(h, g, y, &ht, 1);
    ck_assert_msg(hy != MG_NO_TENSOR, "%s", mg_last_error());
    ck_assert_str_eq(mg_tensor_name(h, hy), "y");
    ck_assert(mg_tensor_flops(g, y) >= 0 && mg_tensor_flops(g, 999) == -1);
    ck_assert_msg(strstr(mg_last_error(), "mg_tensor_flops"), "%s",
                  mg_last_error());
    ck_assert(mg_tensor_flops(NULL, 0) == -1);
    float in[15], out[2][15];
    for (int i = 0; i < 15; i++) in[i] = (float)i / 7 - 1;
    const mg_graph *gs[2] = {g, h};
    mg_tensor xs[2] = {x, hx}, ys[2] = {y, hy};
    for (int k = 0; k < 2; k++) {
        mg_plan *pl = NULL;
        mg_exec *ex = NULL;
        ck_assert(mg_plan_compile(gs[k], &ys[k], 1, NULL, &pl) == MG_OK);
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        mg_binding b[2] = {{xs[k], in}, {ys[k], out[k]}};
        ck_assert(mg_exec_run(ex, pl, b, 2, 42) == MG_OK);
        mg_plan_free(pl);
        mg_exec_free(ex);
    }
    ck_assert(memcmp(out[0], out[1], sizeof out[0]) == 0);
    /* refused: a NULL dst, a bad id, a wrong input count, inputs of
     * another shape, a tensor mg_gradients appended */
    ck_assert(mg_graph_copy_op(NULL, g, y, &ht, 1) == MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
    ck_assert(mg_graph_copy_op(h, g, 999, NULL, 0) == MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_UNKNOWN_ID);
    ck_assert(mg_graph_copy_op(h, g, y, NULL, 0) == MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'y'"), "%s", mg_last_error());
    int64_t s1[1] = {4};
    mg_tensor z = mg_input(h, "z", MG_F32, 1, s1);
    mg_tensor sum = mg_add(g, x, x);
    mg_tensor_set_name(g, sum, "sum");
    mg_tensor hz[2] = {z, hx};
    ck_assert(mg_graph_copy_op(h, g, sum, hz, 2) == MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_SHAPE);
    mg_tensor gy[1], xs1[1] = {x};
    ck_assert(mg_gradients(g, &(mg_tensor){mg_sum(g, y, 0, NULL, 0)}, 1, NULL,
                           xs1, 1, NULL, gy) == MG_OK);
    mg_tensor ins[6] = {hx, hx, hx, hx, hx, hx};
    ck_assert(mg_graph_copy_op(h, g, gy[0], ins,
                               mg_tensor_num_inputs(g, gy[0])) == MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "mg_gradients"), "%s",
                  mg_last_error());
    mg_graph_free(g);
    mg_graph_free(h);
}
END_TEST

/* Rank 1's step lacks a binding: every rank returns MG_ERR_COMM naming
 * rank 1, gradients untouched; the next step, with the binding, is exact. */
START_TEST(test_rank_failure_reported) {
    data d;
    data_make(&d, 3, 500);
    float **ref = reference(&d, 1, NULL);
    mg_dist_comm *c = comm_on(MPI_COMM_WORLD, 60);
    mg_tensor cuts[8];
    mlp_cuts(d.m, size, cuts);
    mg_pipe_options o = {.schedule = MG_PIPE_1F1B,
                         .n_micro = 3,
                         .checkpoints = {.policy = MG_CKPT_MEMORY}};
    mg_pipe *p = NULL;
    ck_assert(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p) ==
              MG_OK);
    mg_binding *gb;
    float **g = grads_new(d.m, &gb);
    /* rank 1 binds nothing for its parameters' gradients: n_grads 0 */
    mg_status st = mg_pipe_step(p, d.binds, d.n_binds, 1, gb,
                                rank == 1 ? 0 : d.m->n_params, NULL);
    ck_assert_int_eq(st, MG_ERR_COMM);
    ck_assert_msg(
        strstr(mg_last_error(), "rank 1 (tensor has no memory bound)"), "%s",
        mg_last_error());
    for (int i = 0; i < d.m->n_params; i++) ck_assert(isnan(g[i][0]));
    ck_assert(!mg_dist_comm_broken(c));
    st = mg_pipe_step(p, d.binds, d.n_binds, 1, gb, d.m->n_params, NULL);
    ck_assert_msg(st == MG_OK, "%s", mg_last_error());
    check_stage_grads(p, d.m, g, ref, "after a failed step");
    grads_free(g, gb, d.m->n_params);
    mg_pipe_free(p);
    mg_dist_comm_free(c);
    for (int i = 0; i < d.m->n_params; i++) free(ref[i]);
    free(ref);
    data_free(&d);
}
END_TEST

/* The last stage's op fails mid-schedule (a label out of range in
 * microbatch 1): it goes on without computing, every rank returns
 * MG_ERR_COMM naming it, gradients untouched; then the labels are fixed and
 * the next step is exact. */
START_TEST(test_op_failure_mid_step) {
    data d;
    data_make(&d, 4, 600);
    float **ref = reference(&d, 2, NULL);
    int32_t keep = d.y[1][0];
    if (rank == size - 1) d.y[1][0] = 999;
    mg_dist_comm *c = comm_on(MPI_COMM_WORLD, 60);
    mg_tensor cuts[8];
    mlp_cuts(d.m, size, cuts);
    for (int sched = 0; sched < 2; sched++) {
        mg_pipe_options o = {.schedule = (mg_pipe_schedule)sched, .n_micro = 4};
        mg_pipe *p = NULL;
        ck_assert(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p) ==
                  MG_OK);
        mg_binding *gb;
        float **g = grads_new(d.m, &gb);
        mg_status st =
            mg_pipe_step(p, d.binds, d.n_binds, 2, gb, d.m->n_params, NULL);
        ck_assert_int_eq(st, MG_ERR_COMM);
        char want[64];
        snprintf(want, sizeof want, "rank %d (invalid argument)", size - 1);
        ck_assert_msg(strstr(mg_last_error(), want), "%s", mg_last_error());
        for (int i = 0; i < d.m->n_params; i++) ck_assert(isnan(g[i][0]));
        d.y[1][0] = keep;
        st = mg_pipe_step(p, d.binds, d.n_binds, 2, gb, d.m->n_params, NULL);
        ck_assert_msg(st == MG_OK, "%s", mg_last_error());
        check_stage_grads(p, d.m, g, ref, "after an op failed");
        if (rank == size - 1) d.y[1][0] = 999;
        grads_free(g, gb, d.m->n_params);
        mg_pipe_free(p);
    }
    d.y[1][0] = keep;
    mg_dist_comm_free(c);
    for (int i = 0; i < d.m->n_params; i++) free(ref[i]);
    free(ref);
    data_free(&d);
}
END_TEST

/* 4 ranks: 2 pipelines (replicas) of 2 stages, each on its own data; each
 * stage's gradients averaged over its replicas with mg_dist_buckets equal
 * the rank-order average of the two single-process sums. main() adds it
 * only at 4 ranks (test_pipeline_np4), so that no other run counts it as
 * passed. */
START_TEST(test_pipeline_and_data_parallel) {
    ck_assert_int_eq(size, 4);
    int replica = rank / 2, stage = rank % 2;
    MPI_Comm pc, dc;
    MPI_Comm_split(MPI_COMM_WORLD, replica, stage, &pc);
    MPI_Comm_split(MPI_COMM_WORLD, stage, replica, &dc);
    data d[2];
    float **ref[2];
    for (int r = 0; r < 2; r++) {
        data_make(&d[r], 4, 700 + 50 * (uint64_t)r);
        ref[r] = reference(&d[r], 3, NULL);
    }
    mg_dist_comm *cp = comm_on(pc, 60), *cd = comm_on(dc, 60);
    mg_tensor cut = d[0].m->blocks[2];
    mg_pipe_options o = {.schedule = MG_PIPE_1F1B,
                         .n_micro = 4,
                         .checkpoints = {.policy = MG_CKPT_SPEED}};
    mg_pipe *p = NULL;
    ck_assert_msg(mg_pipe_new(cp, d[0].m->g, d[0].m->loss, &cut, 1, &o, &p) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert_int_eq(mg_pipe_stage(p), stage);
    mg_model *m = d[replica].m;
    mg_binding *gb;
    float **g = grads_new(m, &gb);
    mg_tensor mine[64];
    int n = mg_pipe_stage_params(p, mine, 64);
    mg_binding sg[64];
    for (int j = 0; j < n; j++) sg[j] = gb[param_index(m, mine[j])];
    mg_dist_buckets *b = NULL;
    ck_assert(mg_dist_buckets_new(cd, m->g, sg, n, 0, &b) == MG_OK);
    mg_status st = mg_pipe_step(p, d[replica].binds, d[replica].n_binds, 3, gb,
                                m->n_params, NULL);
    ck_assert_msg(st == MG_OK, "%s", mg_last_error());
    st = mg_dist_allreduce(b, st);
    ck_assert_msg(st == MG_OK, "%s", mg_last_error());
    for (int j = 0; j < n; j++) {
        int i = param_index(m, mine[j]);
        int64_t ne = mg_tensor_numel(m->g, m->params[i]);
        for (int64_t e = 0; e < ne; e++) {
            float want =
                (float)(((double)ref[0][i][e] + (double)ref[1][i][e]) / 2);
            ck_assert_msg(memcmp(&g[i][e], &want, 4) == 0,
                          "rank %d: %s[%lld]: %.9g, want %.9g", rank,
                          mg_tensor_name(m->g, m->params[i]), (long long)e,
                          g[i][e], want);
        }
    }
    mg_dist_buckets_free(b);
    grads_free(g, gb, m->n_params);
    mg_pipe_free(p);
    mg_dist_comm_free(cp);
    mg_dist_comm_free(cd);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < d[r].m->n_params; i++) free(ref[r][i]);
        free(ref[r]);
        data_free(&d[r]);
    }
    MPI_Comm_free(&pc);
    MPI_Comm_free(&dc);
}
END_TEST

/* Rank 1 comes late, past the deadline: every rank returns MG_ERR_COMM
 * within about the deadline of its own call, and the communicator is
 * broken. Last in the suite. */
START_TEST(test_late_rank_times_out) {
    const double timeout = 3;
    data d;
    data_make(&d, 4, 900);
    mg_dist_comm *c = comm_on(MPI_COMM_WORLD, timeout);
    mg_tensor cuts[8];
    mlp_cuts(d.m, size, cuts);
    mg_pipe_options o = {.schedule = MG_PIPE_1F1B, .n_micro = 4};
    mg_pipe *p = NULL;
    ck_assert(mg_pipe_new(c, d.m->g, d.m->loss, cuts, size - 1, &o, &p) ==
              MG_OK);
    dist_watchdog_arm(60);
    if (rank == 1) {
        struct timespec nap = {4, 500 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    mg_binding *gb;
    float **g = grads_new(d.m, &gb);
    double t0 = MPI_Wtime();
    mg_status st =
        mg_pipe_step(p, d.binds, d.n_binds, 1, gb, d.m->n_params, NULL);
    double dt = MPI_Wtime() - t0;
    ck_assert_int_eq(st, MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "timed out") ||
                      strstr(mg_last_error(), "gave up"),
                  "%s", mg_last_error());
    ck_assert_msg(dt < 2 * timeout + 2, "rank %d gave up after %g s", rank, dt);
    ck_assert(mg_dist_comm_broken(c));
    for (int i = 0; i < d.m->n_params; i++) ck_assert(isnan(g[i][0]));
    ck_assert_int_eq(
        mg_pipe_step(p, d.binds, d.n_binds, 1, gb, d.m->n_params, NULL),
        MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "broken"), "%s", mg_last_error());
    dist_watchdog_disarm();
    grads_free(g, gb, d.m->n_params);
    mg_pipe_free(p);
    mg_dist_comm_free(c);
    data_free(&d);
}
END_TEST

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Suite *su = suite_create("pipeline");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_copy_op);
    tcase_add_test(tc, test_bad_cuts);
    tcase_add_test(tc, test_exact_gpipe);
    tcase_add_test(tc, test_exact_1f1b);
    tcase_add_test(tc, test_exact_few_micro);
    tcase_add_test(tc, test_exact_resnet);
    tcase_add_test(tc, test_single_stage);
    tcase_add_test(tc, test_in_flight_memory);
    tcase_add_test(tc, test_balance);
    tcase_add_test(tc, test_rank_failure_reported);
    tcase_add_test(tc, test_op_failure_mid_step);
    /* It needs 4 ranks; at any other count it is not a case of this run,
     * rather than a case that returns at once and counts as passed. */
    if (size == 4) tcase_add_test(tc, test_pipeline_and_data_parallel);
    else if (rank == 0)
        printf("test_pipeline: test_pipeline_and_data_parallel needs 4 "
               "ranks, not %d: test_pipeline_np4 runs it\n",
               size);
    tcase_add_test(tc, test_late_rank_times_out); /* last */
    suite_add_tcase(su, tc);
    const int failed = mpi_run_suite(
        su, size, 2, 8, "test_pipeline: needs 2 to 8 ranks (mpirun -np 2)");
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
