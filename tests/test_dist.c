/*
 * test_dist.c - memgrad_dist.h under `mpirun -np 2` (any N works), built
 * twice from this one source: test_dist on the MPI transport (CPU
 * executors, host memory), and test_dist_nccl (MG_TEST_DIST_NCCL, set by
 * cmake/nccl.cmake) on the NCCL transport, MG_DEVICE_CUDA executors and
 * device memory, one CUDA device per rank (the node-local rank picks it).
 *
 * On both: N ranks on 1/N of a batch each, averaged, give the gradients of
 * one rank on the whole batch (an MLP: no batchnorm); the average is the
 * same bits on every rank, and the same bits again after a delay; the
 * observer path starts every bucket during the run; the broadcast reaches
 * every rank; a rank whose step failed makes every rank return MG_ERR_COMM
 * with the gradients untouched; a rank that never calls in makes the others
 * time out instead of hanging.
 *
 * MPI only: mg_dist_grad_ready by hand; broadcasts of another dtype, shape,
 * count or root, bad arguments, and bad options or a NULL out on one rank
 * fail on every rank alike.
 *
 * NCCL only: the NCCL average is the same bits as the MPI path's average of
 * the same local gradients; host memory is refused. Without a CUDA device
 * on every rank (or with fewer devices on a node than ranks on it: NCCL
 * refuses two ranks on one GPU) it prints "skipped: no CUDA device" (or
 * says how many devices it found), checks only that
 * mg_dist_comm_from_nccl refuses cleanly and alike on every rank, and
 * exits 77 on every rank when that holds: ctest (SKIP_RETURN_CODE, in
 * cmake/nccl.cmake) then lists the test as skipped, not passed, since its
 * own cases did not run.
 *
 * Check runs in CK_NOFORK mode: forking an MPI process is not allowed,
 * and CUDA does not survive fork() either.
 */
#include <memgrad_dist.h>
#include <memgrad_models.h>

#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers/dist_check.h"
#include "helpers/mpi_main.h"

static int rank, size;

/* ------------------------------------------------- the transport's memory */

#ifdef MG_TEST_DIST_NCCL
#include <cuda_runtime_api.h>

#ifndef MG_HAVE_NCCL
#error "test_dist_nccl is built only where memgrad_dist has NCCL"
#endif

#define PROGRAM "test_dist_nccl"
#define DEVICE MG_DEVICE_CUDA
/* The deadline also bounds ncclCommInitRank, which can take seconds on a
 * multi-GPU node (topology discovery). */
#define SILENT_TIMEOUT_S 10.0

static int local_rank, local_size; /* on this node */
static int n_dev;                  /* CUDA devices this rank sees */

#define CU_OK(call)                                                            \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call,                      \
                      cudaGetErrorString(e_));                                 \
    } while (0)

static void *dev_alloc(size_t n) {
    void *d = NULL;
    CU_OK(cudaMalloc(&d, n ? n : 1));
    CU_OK(cudaMemset(d, 0, n ? n : 1));
    return d;
}

static void dev_free(void *d) { cudaFree(d); }

static void to_dev(void *d, const void *h, size_t n) {
    CU_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
}

static void to_host(void *h, const void *d, size_t n) {
    CU_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}
#else
/* The MPI transport averages host memory for CPU executors: "device"
 * memory is host memory, and the copies are memcpy. */
#define PROGRAM "test_dist"
#define DEVICE MG_DEVICE_CPU
#define SILENT_TIMEOUT_S 1.0

static void *dev_alloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    ck_assert(p);
    return p;
}

static void dev_free(void *d) { free(d); }
static void to_dev(void *d, const void *h, size_t n) { memcpy(d, h, n); }
static void to_host(void *h, const void *d, size_t n) { memcpy(h, d, n); }
#endif

/* --------------------------------------------------------- one MLP step */

/* One MLP training step: the transport's memory bound, the batch also kept
 * on the host, and a compiled plan. */
typedef struct step {
    mg_model *m;
    void **w, **gw;     /* parameters and gradients */
    void *x, *y, *loss; /* the batch and the loss */
    void *hx, *hy;      /* host: the batch before it goes up */
    mg_binding *binds;
    mg_binding *grads; /* the gradient bindings, reverse parameter order */
    int n_binds;
    mg_plan *p;
    mg_exec *ex;
} step;

static size_t pbytes(const step *s, int i) {
    return mg_tensor_nbytes(s->m->g, s->m->params[i]);
}

static void step_init(step *s, mg_dtype dt, int batch, int policy,
                      size_t max_bytes) {
    memset(s, 0, sizeof *s);
    s->m = mg_model_mlp(2, 12, batch, 6, 5, 0.0, dt, 7);
    ck_assert_msg(s->m, "%s", mg_last_error());
    mg_checkpoints c = {.policy = (mg_ckpt_policy)policy};
    ck_assert_msg(mg_model_gradients(s->m, &c) == MG_OK, "%s", mg_last_error());
    int n = s->m->n_params;
    s->w = calloc((size_t)n, sizeof *s->w);
    s->gw = calloc((size_t)n, sizeof *s->gw);
    s->binds = calloc((size_t)(2 * n + 3), sizeof *s->binds);
    s->grads = calloc((size_t)n, sizeof *s->grads);
    void **hw = calloc((size_t)n, sizeof *hw);
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    for (int i = 0; i < n; i++) {
        hw[i] = malloc(pbytes(s, i));
        s->w[i] = dev_alloc(pbytes(s, i));
        s->gw[i] = dev_alloc(pbytes(s, i));
        s->binds[s->n_binds++] = (mg_binding){s->m->params[i], s->w[i]};
        s->binds[s->n_binds++] = (mg_binding){s->m->grads[i], s->gw[i]};
        s->grads[n - 1 - i] = (mg_binding){s->m->grads[i], s->gw[i]};
        outs[i + 1] = s->m->grads[i];
    }
    ck_assert(mg_model_init_params(s->m, 11, hw) == MG_OK);
    for (int i = 0; i < n; i++) {
        to_dev(s->w[i], hw[i], pbytes(s, i));
        free(hw[i]);
    }
    free(hw);
    size_t xb = mg_tensor_nbytes(s->m->g, s->m->input);
    size_t yb = mg_tensor_nbytes(s->m->g, s->m->target);
    s->hx = malloc(xb);
    s->hy = malloc(yb);
    s->x = dev_alloc(xb);
    s->y = dev_alloc(yb);
    s->loss = dev_alloc(mg_tensor_nbytes(s->m->g, s->m->loss));
    s->binds[s->n_binds++] = (mg_binding){s->m->input, s->x};
    s->binds[s->n_binds++] = (mg_binding){s->m->target, s->y};
    s->binds[s->n_binds++] = (mg_binding){s->m->loss, s->loss};
    outs[0] = s->m->loss;
    ck_assert_msg(mg_plan_compile(s->m->g, outs, n + 1, NULL, &s->p) == MG_OK,
                  "%s", mg_last_error());
    free(outs);
    mg_exec_options eo = {.device = DEVICE, .max_bytes = max_bytes};
    ck_assert_msg(mg_exec_new(&eo, &s->ex) == MG_OK, "%s", mg_last_error());
}

/* The host batch (hx, hy) into the bound x and y. */
static void step_upload(step *s) {
    to_dev(s->x, s->hx, mg_tensor_nbytes(s->m->g, s->m->input));
    to_dev(s->y, s->hy, mg_tensor_nbytes(s->m->g, s->m->target));
}

static void step_free(step *s) {
    for (int i = 0; s->m && i < s->m->n_params; i++) {
        dev_free(s->w[i]);
        dev_free(s->gw[i]);
    }
    free(s->w);
    free(s->gw);
    dev_free(s->x);
    dev_free(s->y);
    dev_free(s->loss);
    free(s->hx);
    free(s->hy);
    free(s->binds);
    free(s->grads);
    mg_exec_free(s->ex);
    mg_plan_free(s->p);
    mg_model_free(s->m);
}

static mg_status step_run(step *s) {
    return mg_exec_run(s->ex, s->p, s->binds, s->n_binds, 1);
}

/* Fill the shard of `part` from the whole batch `whole`: rows
 * [rank * b, (rank + 1) * b) of the input and the labels. */
static void shard_data(step *part, const step *whole) {
    size_t xb = mg_tensor_nbytes(part->m->g, part->m->input);
    size_t yb = mg_tensor_nbytes(part->m->g, part->m->target);
    memcpy(part->hx, (const char *)whole->hx + (size_t)rank * xb, xb);
    memcpy(part->hy, (const char *)whole->hy + (size_t)rank * yb, yb);
    step_upload(part);
}

/* Host buffers for the gradients of s, one per parameter; with `from`,
 * filled with a copy of those gradients. */
static void **host_grads(const step *s, const step *from) {
    int n = s->m->n_params;
    void **h = calloc((size_t)n, sizeof *h);
    for (int i = 0; i < n; i++) {
        h[i] = malloc(pbytes(s, i));
        if (from) to_host(h[i], from->gw[i], pbytes(s, i));
    }
    return h;
}

static void host_grads_free(const step *s, void **h) {
    for (int i = 0; i < s->m->n_params; i++) free(h[i]);
    free(h);
}

static mg_dist_comm *comm_new(double timeout_s) {
    mg_dist_comm *c = NULL;
    mg_dist_options o = {.timeout_s = timeout_s};
#ifdef MG_TEST_DIST_NCCL
    mg_status s = mg_dist_comm_from_nccl(MPI_COMM_WORLD, local_rank, &o, &c);
#else
    mg_status s = mg_dist_comm_from_mpi(MPI_COMM_WORLD, &o, &c);
#endif
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    ck_assert_int_eq(mg_dist_comm_rank(c), rank);
    ck_assert_int_eq(mg_dist_comm_size(c), size);
    return c;
}

#ifdef MG_TEST_DIST_NCCL
/* The MPI path's average of the same local gradients (host copies), for
 * the bit comparison: out[i] receives it. */
static void mpi_average(const step *part, void **local, void **out) {
    int n = part->m->n_params;
    mg_binding *hb = calloc((size_t)n, sizeof *hb);
    for (int i = 0; i < n; i++) {
        memcpy(out[i], local[i], pbytes(part, i));
        hb[n - 1 - i] = (mg_binding){part->m->grads[i], out[i]};
    }
    mg_dist_comm *c = NULL;
    ck_assert_msg(mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c) == MG_OK,
                  "%s", mg_last_error());
    mg_dist_buckets *b = NULL;
    ck_assert_msg(mg_dist_buckets_new(c, part->m->g, hb, n,
                                      100 * mg_dtype_size(part->m->dtype),
                                      &b) == MG_OK,
                  "%s", mg_last_error());
    ck_assert_msg(mg_dist_allreduce(b, MG_OK) == MG_OK, "%s", mg_last_error());
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    free(hb);
}
#endif

/* ------------------------------------------------------ the shared tests */

/* N ranks on batch/N each, averaged == one rank on the whole batch, for
 * both dtypes; the memory policy on the shards, plain backprop on the
 * whole batch. `ready` 1 calls mg_dist_grad_ready by hand in backward
 * order, 2 runs the step with mg_dist_buckets_observer attached (on a
 * device the kernels are only queued when it fires: the pack must wait for
 * them), 0 leaves every bucket to mg_dist_allreduce. */
static void half_batches(mg_dtype dt, int ready) {
    int per = 4;
    step whole, part;
    step_init(&whole, dt, per * size, MG_CKPT_NONE, 0);
    step_init(&part, dt, per, MG_CKPT_MEMORY, 0);
    ck_assert(mg_model_init_data(whole.m, 3, whole.hx, whole.hy) == MG_OK);
    step_upload(&whole);
    shard_data(&part, &whole);
    ck_assert_msg(step_run(&whole) == MG_OK, "%s", mg_last_error());

    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    int n = part.m->n_params;
    /* 400 (f32) bytes: 3 buckets for 6 gradients (b2 w2 b1 | w1 | b0 w0). */
    ck_assert_msg(mg_dist_buckets_new(c, part.m->g, part.grads, n,
                                      100 * mg_dtype_size(dt), &b) == MG_OK,
                  "%s", mg_last_error());
    int nb = mg_dist_buckets_count(b);
    ck_assert_msg(nb > 1 && nb < n, "%d buckets for %d gradients", nb, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_ge(mg_dist_buckets_index(b, part.grads[i].tensor), 0);
    mg_status s;
    if (ready == 2) {
        /* The observer path: every bucket must start during the run. */
        mg_observer o;
        ck_assert_msg(mg_dist_buckets_observer(b, &o) == MG_OK, "%s",
                      mg_last_error());
        int id = -1;
        ck_assert(mg_exec_observer_attach(part.ex, &o, &id) == MG_OK);
        s = step_run(&part);
        ck_assert_msg(s == MG_OK, "%s", mg_last_error());
        ck_assert(mg_exec_observer_detach(part.ex, id) == MG_OK);
        mg_dist_stats during;
        ck_assert(mg_dist_buckets_stats(b, &during) == MG_OK);
        ck_assert_msg((int)during.collectives == nb,
                      "%d of %d buckets started during the run",
                      (int)during.collectives, nb);
    } else {
        s = step_run(&part);
        ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    }
    if (ready == 1)
        for (int i = 0; i < n; i++) {
            ck_assert_msg(mg_dist_grad_ready(b, part.grads[i].tensor) == MG_OK,
                          "%s", mg_last_error());
            ck_assert_msg(mg_dist_progress(b) == MG_OK, "%s", mg_last_error());
        }
    /* The run has returned (and, on a device, synchronised): the local
     * gradients are final. Keep them to average them a second time. */
    void **local = host_grads(&part, &part), **exp = host_grads(&part, &whole);
    s = mg_dist_allreduce(b, s);
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    void **first = host_grads(&part, &part), **again = host_grads(&part, NULL);
    for (int i = 0; i < n; i++) to_dev(part.gw[i], local[i], pbytes(&part, i));
    /* Again, from the same local gradients, with this rank delayed by a
     * rank-dependent time: the same bits (timing does not enter). */
    struct timespec nap = {0, 20000000L * rank};
    nanosleep(&nap, NULL);
    ck_assert_msg(mg_dist_allreduce(b, MG_OK) == MG_OK, "%s", mg_last_error());
#ifdef MG_TEST_DIST_NCCL
    void **viampi = host_grads(&part, NULL);
    mpi_average(&part, local, viampi);
#endif
    for (int i = 0; i < n; i++) {
        const char *name = mg_tensor_name(part.m->g, part.m->params[i]);
        to_host(again[i], part.gw[i], pbytes(&part, i));
        ck_assert_msg(memcmp(first[i], again[i], pbytes(&part, i)) == 0,
                      "%s: a second average differs", name);
#ifdef MG_TEST_DIST_NCCL
        ck_assert_msg(memcmp(first[i], viampi[i], pbytes(&part, i)) == 0,
                      "%s: the NCCL average differs from the MPI path's", name);
#endif
        check_close(name, dt, first[i], exp[i],
                    mg_tensor_numel(part.m->g, part.m->params[i]));
        check_same_on_all_ranks(name, first[i], pbytes(&part, i));
    }
    host_grads_free(&part, local);
    host_grads_free(&part, exp);
    host_grads_free(&part, first);
    host_grads_free(&part, again);
    mg_dist_stats st;
    ck_assert(mg_dist_buckets_stats(b, &st) == MG_OK);
    ck_assert_int_eq((int)st.steps, 2);
    ck_assert_int_eq((int)st.collectives, 4 * nb);
#ifdef MG_TEST_DIST_NCCL
    host_grads_free(&part, viampi);
    size_t grad_bytes = 0;
    for (int i = 0; i < n; i++) grad_bytes += pbytes(&part, i);
    /* Device staging: packed + received, each at least the gradients. */
    ck_assert_msg(st.buffer_bytes >= 2 * grad_bytes,
                  "buffer_bytes %zu for "
                  "%zu bytes of gradients",
                  st.buffer_bytes, grad_bytes);
#endif
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&part);
    step_free(&whole);
}

START_TEST(test_half_batches_f32) { half_batches(MG_F32, 0); }
END_TEST
START_TEST(test_half_batches_f64) { half_batches(MG_F64, 0); }
END_TEST
#ifndef MG_TEST_DIST_NCCL /* run on the MPI transport only (main) */
START_TEST(test_half_batches_grad_ready) { half_batches(MG_F32, 1); }
END_TEST
#endif
START_TEST(test_half_batches_observer) { half_batches(MG_F32, 2); }
END_TEST

/* Rank 0's weights reach every rank; one rank's bad list fails every rank
 * instead of hanging the others. */
START_TEST(test_broadcast) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    int n = s.m->n_params;
    float mark = (float)(rank + 1); /* ranks differ */
    to_dev(s.w[0], &mark, sizeof mark);
    mg_binding *pb = calloc((size_t)n, sizeof *pb);
    for (int i = 0; i < n; i++) pb[i] = (mg_binding){s.m->params[i], s.w[i]};
    mg_dist_comm *c = comm_new(60);
    ck_assert_msg(mg_dist_broadcast(c, s.m->g, pb, n, 0) == MG_OK, "%s",
                  mg_last_error());
    size_t nb0 = pbytes(&s, 0);
    float *h = malloc(nb0);
    to_host(h, s.w[0], nb0);
    ck_assert(h[0] == 1.0f);
    check_same_on_all_ranks("w0", h, nb0);
    free(h);
#ifdef MG_TEST_DIST_NCCL
    /* Host memory on rank 1 only: it says so, the others MG_ERR_COMM. */
    float host[64];
    mg_binding bad = {pb[0].tensor, host};
#else
    /* A root that is no rank fails on every rank, before anything moves. */
    ck_assert(mg_dist_broadcast(c, s.m->g, pb, n, size) == MG_ERR_INVALID_ARG);
    /* NULL data on rank 1 only. */
    mg_binding bad = {pb[0].tensor, NULL};
#endif
    mg_status st = mg_dist_broadcast(c, s.m->g, rank == 1 ? &bad : pb, 1, 0);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1"), "%s", mg_last_error());
#ifdef MG_TEST_DIST_NCCL
    if (rank == 1)
        ck_assert_msg(strstr(mg_last_error(), "not device memory"), "%s",
                      mg_last_error());
#endif
    ck_assert(!mg_dist_comm_broken(c));
    free(pb);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

/* Rank 1's step runs out of memory mid-plan; it still calls in, and every
 * rank gets MG_ERR_COMM naming rank 1, gradients untouched. The handle is
 * still usable: the next step, which all ranks pass, averages. */
START_TEST(test_rank_failure_reported) {
    step s;
    /* A 1-byte pool: the first activation does not fit. */
    step_init(&s, MG_F32, 4, MG_CKPT_MEMORY, rank == 1 ? 1 : 0);
    ck_assert(mg_model_init_data(s.m, 5 + (uint64_t)rank, s.hx, s.hy) == MG_OK);
    step_upload(&s);
    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    int n = s.m->n_params;
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, n, 0, &b) == MG_OK);
    ck_assert_int_eq(mg_dist_buckets_count(b), 1);
    mg_status st = step_run(&s);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_NOMEM : MG_OK);
    size_t nb = mg_tensor_nbytes(s.m->g, s.grads[0].tensor);
    void *before = malloc(nb), *after = malloc(nb);
    to_host(before, s.grads[0].data, nb);
    st = mg_dist_allreduce(b, st);
    ck_assert_int_eq(st, MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1 (out of memory)"), "%s",
                  mg_last_error());
    if (rank == 1)
        ck_assert_msg(strstr(mg_last_error(), "this rank's error"), "%s",
                      mg_last_error());
    to_host(after, s.grads[0].data, nb);
    ck_assert(memcmp(before, after, nb) == 0);
    ck_assert(!mg_dist_comm_broken(c));
    /* Next step: rank 1 gets its memory back. */
    mg_exec_free(s.ex);
    mg_exec_options eo = {.device = DEVICE};
    ck_assert(mg_exec_new(&eo, &s.ex) == MG_OK);
    st = mg_dist_allreduce(b, step_run(&s));
    ck_assert_msg(st == MG_OK, "%s", mg_last_error());
    to_host(after, s.grads[0].data, nb);
    check_same_on_all_ranks("grad", after, nb);
    free(before);
    free(after);
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

/* Rank 1 fails without calling in at all: rank 0 times out, in about the
 * timeout, and the handle is broken from then on (on NCCL the communicator
 * is aborted). Last in the suite: the broken handle's collective can never
 * complete. */
START_TEST(test_rank_silent_timeout) {
    const double timeout = SILENT_TIMEOUT_S;
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    mg_dist_comm *c = comm_new(timeout);
    mg_dist_buckets *b = NULL;
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, s.m->n_params, 0, &b) ==
              MG_OK);
    if (rank != 1) {
        double t0 = MPI_Wtime();
        mg_status st = mg_dist_allreduce(b, step_run(&s));
        double dt = MPI_Wtime() - t0;
        ck_assert_int_eq(st, MG_ERR_COMM);
        ck_assert_msg(strstr(mg_last_error(), "timed out"), "%s",
                      mg_last_error());
        ck_assert_msg(dt >= 0.9 * timeout && dt < 30, "gave up after %g s", dt);
        ck_assert(mg_dist_comm_broken(c));
        ck_assert(mg_dist_allreduce(b, MG_OK) == MG_ERR_COMM);
        ck_assert_msg(strstr(mg_last_error(), "broken"), "%s", mg_last_error());
    }
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

#ifdef MG_TEST_DIST_NCCL
/* ------------------------------------------------------------ NCCL only */

/* Host memory as gradients: refused on every rank before anything moves;
 * on one rank only, that rank says why and the others MG_ERR_COMM. */
START_TEST(test_host_memory_refused) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    int n = s.m->n_params;
    size_t nb = mg_tensor_nbytes(s.m->g, s.grads[0].tensor);
    void *host = malloc(nb);
    mg_binding hb = {s.grads[0].tensor, host};
    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    ck_assert(mg_dist_buckets_new(c, s.m->g, &hb, 1, 0, &b) ==
              MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "not device memory"), "%s",
                  mg_last_error());
    mg_status st =
        mg_dist_buckets_new(c, s.m->g, rank == 1 ? &hb : s.grads, 1, 0, &b);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert(b == NULL);
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, n, 0, &b) == MG_OK);
    ck_assert(!mg_dist_comm_broken(c));
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    free(host);
    step_free(&s);
}
END_TEST

/* Runs on every machine. Without a device on this rank the constructor
 * says so; with fewer devices than ranks on the node, the ranks left
 * without one say so and the others fail with MG_ERR_COMM; no handle
 * either way. */
START_TEST(test_refused_without_devices) {
    mg_dist_comm *c = (mg_dist_comm *)&c; /* must come back NULL */
    ck_assert(mg_dist_comm_from_nccl(MPI_COMM_WORLD, 0, NULL, NULL) ==
              MG_ERR_INVALID_ARG);
    mg_status st = mg_dist_comm_from_nccl(MPI_COMM_WORLD, local_rank, NULL, &c);
    ck_assert_ptr_null(c);
    mg_status want = n_dev == 0            ? MG_ERR_UNSUPPORTED
                     : local_rank >= n_dev ? MG_ERR_INVALID_ARG
                                           : MG_ERR_COMM;
    ck_assert_msg(st == want, "got %s, want %s: %s", mg_status_str(st),
                  mg_status_str(want), mg_last_error());
    if (n_dev == 0)
        ck_assert_msg(strstr(mg_last_error(), "no CUDA device"), "%s",
                      mg_last_error());
    /* A NULL out on rank 1 only fails every rank, before any device is
     * touched, instead of leaving the others in MPI_Comm_dup (issue 25
     * item 9); the watchdog turns such a hang into a failure. */
    dist_watchdog_arm(60);
    c = (mg_dist_comm *)&c;
    st = mg_dist_comm_from_nccl(MPI_COMM_WORLD, local_rank, NULL,
                                rank == 1 ? NULL : &c);
    ck_assert_msg(st == (rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM),
                  "rank %d: %s", rank, mg_last_error());
    ck_assert_msg(strstr(mg_last_error(), "rank 1 (invalid argument)"), "%s",
                  mg_last_error());
    if (rank != 1) ck_assert_ptr_null(c);
    dist_watchdog_disarm();
    /* The MPI path is untouched by all this. */
    ck_assert(mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c) == MG_OK);
    mg_dist_comm_free(c);
}
END_TEST

/* One GPU per rank on every node, or no GPU test anywhere: true if every
 * rank has its device set; else rank 0 says why the tests are skipped. */
static int devices_for_every_rank(void) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                        MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess) {
        cudaGetLastError();
        n_dev = 0;
    }
    int mine = n_dev >= local_size, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all && cudaSetDevice(local_rank) != cudaSuccess) all = 0;
    if (!all && rank == 0) {
        if (n_dev == 0) printf("skipped: no CUDA device\n");
        else
            printf("skipped: %d CUDA device(s) for %d ranks on a node (NCCL "
                   "takes one GPU per rank)\n",
                   n_dev, local_size);
        fflush(stdout);
    }
    return all;
}
#else
/* ------------------------------------------------------------- MPI only */

/* A graph of one parameter "w" of the given dtype and shape, with caller
 * memory for it filled with `fill` bytes. */
typedef struct one_param {
    mg_graph *g;
    mg_binding b;
    size_t nbytes;
} one_param;

static void one_param_init(one_param *p, mg_dtype dt, int ndim,
                           const int64_t *shape, unsigned char fill) {
    p->g = mg_graph_new();
    ck_assert(p->g);
    p->b.tensor = mg_param(p->g, "w", dt, ndim, shape);
    ck_assert_msg(p->b.tensor >= 0, "%s", mg_last_error());
    p->nbytes = mg_tensor_nbytes(p->g, p->b.tensor);
    p->b.data = malloc(p->nbytes);
    memset(p->b.data, fill, p->nbytes);
}

static void one_param_free(one_param *p) {
    free(p->b.data);
    mg_graph_free(p->g);
}

/* Broadcast one_param's tensor, rank 0 giving (dt0, shape0) and the others
 * (dt1, shape1), of the same byte count: every rank must refuse with
 * `want`, name the tensor and both sides in its message, leave its data
 * alone, and keep the handle usable. */
static void broadcast_mismatch(mg_dist_comm *c, mg_dtype dt0, int nd0,
                               const int64_t *sh0, mg_dtype dt1, int nd1,
                               const int64_t *sh1, mg_status want,
                               const char *mine, const char *rank0s) {
    one_param p;
    if (rank == 0) one_param_init(&p, dt0, nd0, sh0, 0x11);
    else one_param_init(&p, dt1, nd1, sh1, 0x22);
    mg_status st = mg_dist_broadcast(c, p.g, &p.b, 1, 0);
    const char *msg = mg_last_error();
    ck_assert_msg(st == want, "rank %d: got %s, want %s: %s", rank,
                  mg_status_str(st), mg_status_str(want), msg);
    ck_assert_msg(strstr(msg, "'w'") && strstr(msg, "rank 1") &&
                      strstr(msg, mine) && strstr(msg, rank0s),
                  "rank %d: %s", rank, msg);
    for (size_t i = 0; i < p.nbytes; i++)
        ck_assert_int_eq(((unsigned char *)p.b.data)[i], rank ? 0x22 : 0x11);
    ck_assert(!mg_dist_comm_broken(c));
    one_param_free(&p);
}

/* Issue 25 item 9: tensors of the same byte count but another dtype or
 * shape (f64 [3] on rank 0, f32 [6] elsewhere: 24 bytes each) were
 * broadcast as bytes, MG_OK everywhere. Every rank now refuses and says
 * what differs; so do lists of another length or another root. */
START_TEST(test_broadcast_dtype_shape_differ) {
    mg_dist_comm *c = comm_new(10);
    int64_t three[1] = {3}, six[1] = {6}, r23[2] = {2, 3}, r32[2] = {3, 2};
    broadcast_mismatch(c, MG_F64, 1, three, MG_F32, 1, six, MG_ERR_DTYPE,
                       "f32 [6]", "f64 [3]");
    broadcast_mismatch(c, MG_F32, 2, r23, MG_F32, 2, r32, MG_ERR_SHAPE,
                       "f32 [3, 2]", "f32 [2, 3]");
    broadcast_mismatch(c, MG_F32, 1, six, MG_F32, 2, r23, MG_ERR_SHAPE,
                       "f32 [2, 3]", "f32 [6]");
    /* Another count, and another root: every rank refuses alike. */
    one_param p;
    one_param_init(&p, MG_F32, 1, six, 0x33);
    mg_status st = mg_dist_broadcast(c, p.g, &p.b, rank == 1 ? 0 : 1, 0);
    ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "rank 1 gives 0 tensors, rank 0 "
                                          "gives 1"),
                  "%s", mg_last_error());
    st = mg_dist_broadcast(c, p.g, &p.b, 1, rank == 1 ? 1 : 0);
    ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "rank 1 names root 1, rank 0 "
                                          "root 0"),
                  "%s", mg_last_error());
    ck_assert_int_eq(((unsigned char *)p.b.data)[0], 0x33);
    /* And the same lists still broadcast. */
    ck_assert_msg(mg_dist_broadcast(c, p.g, &p.b, 1, 0) == MG_OK, "%s",
                  mg_last_error());
    one_param_free(&p);
    mg_dist_comm_free(c);
}
END_TEST

/* Bad arguments: local ones fail at once; ones that differ between ranks
 * fail on every rank (no rank is left waiting). */
START_TEST(test_bad_arguments) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    int n = s.m->n_params;
    mg_dist_buckets *b = NULL;
    mg_dist_comm *c = NULL;
    ck_assert(mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, NULL) ==
              MG_ERR_INVALID_ARG);
    ck_assert(mg_dist_comm_from_mpi(MPI_COMM_NULL, NULL, &c) ==
              MG_ERR_INVALID_ARG);
    ck_assert(c == NULL);
    ck_assert(mg_dist_buckets_new(NULL, s.m->g, s.grads, n, 0, &b) ==
              MG_ERR_INVALID_ARG);
    ck_assert(mg_dist_allreduce(NULL, MG_OK) == MG_ERR_INVALID_ARG);
    ck_assert(mg_dist_grad_ready(NULL, 0) == MG_ERR_INVALID_ARG);
    ck_assert(mg_dist_progress(NULL) == MG_ERR_INVALID_ARG);
    mg_observer o = {.user = &o};
    ck_assert(mg_dist_buckets_observer(NULL, &o) == MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "mg_dist_buckets_observer") &&
                      o.user == NULL && o.after_op == NULL,
                  "%s", mg_last_error());
    ck_assert(mg_dist_buckets_observer(NULL, NULL) == MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_dist_buckets_count(NULL), -1);
    ck_assert_int_eq(mg_dist_comm_rank(NULL), -1);
    c = comm_new(60);
    /* Each of these fails on every rank: all ranks give the same bad list. */
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, 0, 0, &b) ==
              MG_ERR_INVALID_ARG);
    ck_assert(mg_dist_buckets_new(c, NULL, s.grads, n, 0, &b) ==
              MG_ERR_INVALID_ARG);
    mg_binding two[2] = {s.grads[0], s.grads[0]};
    ck_assert(mg_dist_buckets_new(c, s.m->g, two, 2, 0, &b) ==
              MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "listed twice"), "%s",
                  mg_last_error());
    mg_binding labels = {s.m->target, s.y};
    ck_assert(mg_dist_buckets_new(c, s.m->g, &labels, 1, 0, &b) ==
              MG_ERR_DTYPE);
    mg_binding unknown = {100000, s.y};
    ck_assert(mg_dist_buckets_new(c, s.m->g, &unknown, 1, 0, &b) ==
              MG_ERR_UNKNOWN_ID);
    ck_assert(b == NULL);
    /* Only rank 1 is wrong: it reports its error, the others MG_ERR_COMM. */
    mg_binding nul = {s.grads[0].tensor, NULL};
    mg_status st =
        mg_dist_buckets_new(c, s.m->g, rank == 1 ? &nul : s.grads, 1, 0, &b);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    /* Ranks give different gradient lists: every rank refuses. */
    st = mg_dist_buckets_new(c, s.m->g, s.grads, rank == 1 ? n - 1 : n, 0, &b);
    ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "other tensors"), "%s",
                  mg_last_error());
    ck_assert(b == NULL);
    /* A valid set, then bad calls on it. */
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, n, 0, &b) == MG_OK);
    ck_assert(mg_dist_grad_ready(b, s.m->loss) == MG_ERR_UNKNOWN_ID);
    ck_assert(mg_dist_bucket_start(b, 5) == MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_dist_buckets_index(b, s.m->loss), -1);
    ck_assert(mg_dist_buckets_stats(b, NULL) == MG_ERR_INVALID_ARG);
    ck_assert(!mg_dist_comm_broken(c));
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

/* Issue 25 item 9: bad options on one rank only (timeout_s NaN) made that
 * rank return at once while the others waited in MPI_Comm_dup for ever.
 * Now every rank fails: rank 1 with its own error, naming the option, the
 * others with MG_ERR_COMM naming rank 1; no handle anywhere. A NULL `out`
 * on one rank alike. The watchdog turns the old hang into a failure. */
START_TEST(test_comm_bad_options_one_rank) {
    dist_watchdog_arm(60);
    mg_dist_options good = {.timeout_s = 10}, nan_opt = {.timeout_s = NAN};
    mg_dist_comm *c = (mg_dist_comm *)&c; /* must come back NULL */
    mg_status st =
        mg_dist_comm_from_mpi(MPI_COMM_WORLD, rank == 1 ? &nan_opt : &good, &c);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1 (invalid argument)"), "%s",
                  mg_last_error());
    if (rank == 1)
        ck_assert_msg(strstr(mg_last_error(), "timeout_s is NaN"), "%s",
                      mg_last_error());
    c = (mg_dist_comm *)&c;
    st = mg_dist_comm_from_mpi(MPI_COMM_WORLD, &good, rank == 1 ? NULL : &c);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    if (rank != 1) ck_assert_ptr_null(c);
    ck_assert_msg(strstr(mg_last_error(), rank == 1 ? "out is NULL"
                                                    : "rank 1 (invalid "
                                                      "argument)"),
                  "%s", mg_last_error());
    /* The ranks are still in step: a good handle follows. */
    mg_dist_comm_free(comm_new(10));
    dist_watchdog_disarm();
}
END_TEST

/* Issue 25 item 9, the same class in mg_dist_buckets_new: a NULL `out` on
 * rank 1 returned there before the agreement the others were in, so they
 * timed out and broke their handles. Now all fail at once, the handle
 * intact. */
START_TEST(test_buckets_out_null_one_rank) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    mg_dist_comm *c = comm_new(2.0);
    mg_dist_buckets *b = NULL;
    mg_status st = mg_dist_buckets_new(c, s.m->g, s.grads, s.m->n_params, 0,
                                       rank == 1 ? NULL : &b);
    ck_assert_msg(st == (rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM),
                  "rank %d: %s", rank, mg_last_error());
    ck_assert_msg(strstr(mg_last_error(), "rank 1 (invalid argument)"), "%s",
                  mg_last_error());
    ck_assert_ptr_null(b);
    ck_assert(!mg_dist_comm_broken(c));
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

#endif

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
#ifdef MG_TEST_DIST_NCCL
    Suite *su = suite_create("dist_nccl");
    TCase *tc = tcase_create("nccl");
    int run = devices_for_every_rank();
#else
    Suite *su = suite_create("dist");
    TCase *tc = tcase_create("mpi");
    const int run = 1;
#endif
    tcase_set_timeout(tc, 120);
    if (run) {
        tcase_add_test(tc, test_half_batches_f32);
        tcase_add_test(tc, test_half_batches_f64);
        tcase_add_test(tc, test_half_batches_observer);
        tcase_add_test(tc, test_broadcast);
        tcase_add_test(tc, test_rank_failure_reported);
#ifdef MG_TEST_DIST_NCCL
        tcase_add_test(tc, test_host_memory_refused);
#else
        tcase_add_test(tc, test_half_batches_grad_ready);
        tcase_add_test(tc, test_broadcast_dtype_shape_differ);
        tcase_add_test(tc, test_bad_arguments);
        tcase_add_test(tc, test_comm_bad_options_one_rank);
        tcase_add_test(tc, test_buckets_out_null_one_rank);
#endif
        tcase_add_test(tc, test_rank_silent_timeout); /* last */
    }
#ifdef MG_TEST_DIST_NCCL
    else {
        tcase_add_test(tc, test_refused_without_devices);
    }
#endif
    suite_add_tcase(su, tc);
    const int failed =
        mpi_run_suite(su, size, 2, INT_MAX,
                      PROGRAM ": needs at least 2 ranks (mpirun -np 2)");
#ifdef MG_TEST_DIST_NCCL
    /* 77: ctest's SKIP_RETURN_CODE (cmake/nccl.cmake). run is the same on
     * every rank (an MPI_MIN over them), so every rank exits alike and
     * mpirun passes the code on. */
    if (!failed && !run) return 77;
#endif
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
