/*
 * test_dist_nccl.c - memgrad_dist.h's NCCL transport under `mpirun -np 2`,
 * one CUDA device per rank (the node-local rank picks it): N ranks on 1/N
 * of a batch each, on MG_DEVICE_CUDA executors, averaged over NCCL, give
 * the gradients of one rank on the whole batch (the MLP of test_dist.c: no
 * batchnorm); the averages are the same bits on every rank, the same bits
 * again after a delay, and the same bits as the MPI path's average of the
 * same local gradients; the observer path starts every bucket during the
 * run; the broadcast reaches every rank; a rank whose step failed makes
 * every rank return MG_ERR_COMM with the gradients untouched; host memory
 * is refused; a rank that never calls in makes the others time out.
 *
 * Without a CUDA device on every rank (or with fewer devices on a node
 * than ranks on it: NCCL refuses two ranks on one GPU) it prints
 * "skipped: no CUDA device" (or says how many devices it found), checks
 * only that mg_dist_comm_from_nccl refuses cleanly and alike on every
 * rank, and passes.
 *
 * Check runs in CK_NOFORK mode: forking an MPI process is not allowed,
 * and CUDA does not survive fork() either.
 */
#include <memgrad_dist.h>
#include <memgrad_models.h>

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers/dist_check.h"

#ifndef MG_HAVE_NCCL
#error "test_dist_nccl is built only where memgrad_dist has NCCL"
#endif

static int rank, size;
static int local_rank, local_size; /* on this node */
static int n_dev;                  /* CUDA devices this rank sees */

#define CU_OK(call)                                                           \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call,                     \
                      cudaGetErrorString(e_));                                \
    } while (0)

static void *dev_alloc(size_t n) {
    void *d = NULL;
    CU_OK(cudaMalloc(&d, n ? n : 1));
    CU_OK(cudaMemset(d, 0, n ? n : 1));
    return d;
}

static void to_dev(void *d, const void *h, size_t n) {
    CU_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
}

static void to_host(void *h, const void *d, size_t n) {
    CU_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}

/* One MLP step on the GPU: device buffers bound, host copies for checks. */
typedef struct step {
    mg_model *m;
    void **w, **gw; /* device */
    void *x, *y, *loss; /* device */
    void *hx, *hy;      /* host: the batch before it goes up */
    mg_binding *binds;
    mg_binding *grads; /* reverse parameter order, device pointers */
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
    mg_exec_options eo = {.device = MG_DEVICE_CUDA, .max_bytes = max_bytes};
    ck_assert_msg(mg_exec_new(&eo, &s->ex) == MG_OK, "%s", mg_last_error());
}

static void step_upload(step *s) {
    to_dev(s->x, s->hx, mg_tensor_nbytes(s->m->g, s->m->input));
    to_dev(s->y, s->hy, mg_tensor_nbytes(s->m->g, s->m->target));
}

static void step_free(step *s) {
    for (int i = 0; s->m && i < s->m->n_params; i++) {
        cudaFree(s->w[i]);
        cudaFree(s->gw[i]);
    }
    free(s->w);
    free(s->gw);
    cudaFree(s->x);
    cudaFree(s->y);
    cudaFree(s->loss);
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

/* Rows [rank * b, (rank + 1) * b) of the whole batch. */
static void shard_data(step *part, const step *whole) {
    size_t xb = mg_tensor_nbytes(part->m->g, part->m->input);
    size_t yb = mg_tensor_nbytes(part->m->g, part->m->target);
    memcpy(part->hx, (const char *)whole->hx + (size_t)rank * xb, xb);
    memcpy(part->hy, (const char *)whole->hy + (size_t)rank * yb, yb);
    step_upload(part);
}

static mg_dist_comm *comm_new(double timeout_s) {
    mg_dist_comm *c = NULL;
    mg_dist_options o = {.timeout_s = timeout_s};
    ck_assert_msg(mg_dist_comm_from_nccl(MPI_COMM_WORLD, local_rank, &o, &c) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert_int_eq(mg_dist_comm_rank(c), rank);
    ck_assert_int_eq(mg_dist_comm_size(c), size);
    return c;
}

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

/* ready 0 leaves every bucket to mg_dist_allreduce; 2 runs the step with
 * mg_dist_buckets_observer attached (kernels only queued when it fires:
 * the pack must wait for them). */
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
    /* 400 (f32) bytes: 3 buckets for 6 gradients, as in test_dist. */
    ck_assert_msg(mg_dist_buckets_new(c, part.m->g, part.grads, n,
                                      100 * mg_dtype_size(dt), &b) == MG_OK,
                  "%s", mg_last_error());
    int nb = mg_dist_buckets_count(b);
    ck_assert_msg(nb > 1 && nb < n, "%d buckets for %d gradients", nb, n);
    mg_status s;
    if (ready == 2) {
        mg_observer o;
        ck_assert(mg_dist_buckets_observer(b, &o) == MG_OK);
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
    size_t un = (size_t)n;
    void **local = calloc(un, sizeof *local), **first = calloc(un, sizeof *first);
    void **again = calloc(un, sizeof *again), **exp = calloc(un, sizeof *exp);
    void **viampi = calloc(un, sizeof *viampi);
    for (int i = 0; i < n; i++) {
        local[i] = malloc(pbytes(&part, i));
        first[i] = malloc(pbytes(&part, i));
        again[i] = malloc(pbytes(&part, i));
        exp[i] = malloc(pbytes(&part, i));
        viampi[i] = malloc(pbytes(&part, i));
        /* With the observer the run has returned (and synchronised): the
         * gradients are final either way. */
        to_host(local[i], part.gw[i], pbytes(&part, i));
        to_host(exp[i], whole.gw[i], pbytes(&part, i));
    }
    s = mg_dist_allreduce(b, s);
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    for (int i = 0; i < n; i++) {
        to_host(first[i], part.gw[i], pbytes(&part, i));
        to_dev(part.gw[i], local[i], pbytes(&part, i));
    }
    /* Again from the same local gradients, this rank delayed by a
     * rank-dependent time: the same bits (timing does not enter). */
    struct timespec nap = {0, 20000000L * rank};
    nanosleep(&nap, NULL);
    ck_assert_msg(mg_dist_allreduce(b, MG_OK) == MG_OK, "%s", mg_last_error());
    mpi_average(&part, local, viampi);
    for (int i = 0; i < n; i++) {
        const char *name = mg_tensor_name(part.m->g, part.m->params[i]);
        to_host(again[i], part.gw[i], pbytes(&part, i));
        ck_assert_msg(memcmp(first[i], again[i], pbytes(&part, i)) == 0,
                      "%s: a second average differs", name);
        ck_assert_msg(memcmp(first[i], viampi[i], pbytes(&part, i)) == 0,
                      "%s: the NCCL average differs from the MPI path's", name);
        check_close(name, dt, first[i], exp[i],
                    mg_tensor_numel(part.m->g, part.m->params[i]));
        check_same_on_all_ranks(name, first[i], pbytes(&part, i));
        free(local[i]);
        free(first[i]);
        free(again[i]);
        free(exp[i]);
        free(viampi[i]);
    }
    free(local);
    free(first);
    free(again);
    free(exp);
    free(viampi);
    mg_dist_stats st;
    ck_assert(mg_dist_buckets_stats(b, &st) == MG_OK);
    ck_assert_int_eq((int)st.steps, 2);
    ck_assert_int_eq((int)st.collectives, 4 * nb);
    size_t grad_bytes = 0;
    for (int i = 0; i < n; i++) grad_bytes += pbytes(&part, i);
    /* Device staging: packed + received, each at least the gradients. */
    ck_assert_msg(st.buffer_bytes >= 2 * grad_bytes, "buffer_bytes %zu for "
                  "%zu bytes of gradients", st.buffer_bytes, grad_bytes);
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&part);
    step_free(&whole);
}

START_TEST(test_half_batches_f32) { half_batches(MG_F32, 0); }
END_TEST
START_TEST(test_half_batches_f64) { half_batches(MG_F64, 0); }
END_TEST
START_TEST(test_half_batches_observer) { half_batches(MG_F32, 2); }
END_TEST

/* Rank 0's weights reach every rank's device buffers. */
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
    /* Host memory on rank 1 only: it says so, the others MG_ERR_COMM. */
    float host[64];
    mg_binding bad = {pb[0].tensor, host};
    mg_status st = mg_dist_broadcast(c, s.m->g, rank == 1 ? &bad : pb, 1, 0);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1"), "%s", mg_last_error());
    if (rank == 1)
        ck_assert_msg(strstr(mg_last_error(), "not device memory"), "%s",
                      mg_last_error());
    ck_assert(!mg_dist_comm_broken(c));
    free(pb);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

/* Rank 1's step runs out of memory; it still calls in, and every rank
 * gets MG_ERR_COMM naming rank 1, device gradients untouched. The next
 * step, which all ranks pass, averages. */
START_TEST(test_rank_failure_reported) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_MEMORY, rank == 1 ? 1 : 0);
    ck_assert(mg_model_init_data(s.m, 5 + (uint64_t)rank, s.hx, s.hy) == MG_OK);
    step_upload(&s);
    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    int n = s.m->n_params;
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, n, 0, &b) == MG_OK);
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
    mg_exec_options eo = {.device = MG_DEVICE_CUDA};
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
    mg_status st = mg_dist_buckets_new(c, s.m->g, rank == 1 ? &hb : s.grads,
                                       1, 0, &b);
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

/* Rank 1 never calls in: rank 0 times out in about the timeout, the NCCL
 * communicator is aborted and the handle broken. Last in the suite. The
 * deadline also bounds ncclCommInitRank, which can take seconds on a
 * multi-GPU node (topology discovery): 10 s, not test_dist's 1 s. */
START_TEST(test_rank_silent_timeout) {
    const double timeout = 10.0;
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
        ck_assert_msg(dt >= 0.9 * timeout && dt < 3 * timeout,
                      "gave up after %g s", dt);
        ck_assert(mg_dist_comm_broken(c));
        ck_assert(mg_dist_allreduce(b, MG_OK) == MG_ERR_COMM);
        ck_assert_msg(strstr(mg_last_error(), "broken"), "%s", mg_last_error());
    }
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
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
    mg_status want = n_dev == 0               ? MG_ERR_UNSUPPORTED
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

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
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
    /* One GPU per rank on every node, or no GPU test anywhere. */
    int mine = n_dev >= local_size, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all && cudaSetDevice(local_rank) != cudaSuccess) all = 0;
    if (!all && rank == 0) {
        if (n_dev == 0)
            printf("skipped: no CUDA device\n");
        else
            printf("skipped: %d CUDA device(s) for %d ranks on a node (NCCL "
                   "takes one GPU per rank)\n",
                   n_dev, local_size);
        fflush(stdout);
    }
    Suite *su = suite_create("dist_nccl");
    TCase *tc = tcase_create("nccl");
    tcase_set_timeout(tc, 120);
    if (all) {
        tcase_add_test(tc, test_half_batches_f32);
        tcase_add_test(tc, test_half_batches_f64);
        tcase_add_test(tc, test_half_batches_observer);
        tcase_add_test(tc, test_broadcast);
        tcase_add_test(tc, test_rank_failure_reported);
        tcase_add_test(tc, test_host_memory_refused);
        tcase_add_test(tc, test_rank_silent_timeout);
    } else {
        tcase_add_test(tc, test_refused_without_devices);
    }
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_set_fork_status(sr, CK_NOFORK);
    int failed = 0;
    if (size < 2) {
        fprintf(stderr, "test_dist_nccl: needs at least 2 ranks (mpirun -np 2)\n");
        failed = 1;
    } else {
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
    }
    srunner_free(sr);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
