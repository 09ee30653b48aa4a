/*
 * test_dist.c - memgrad_dist.h under `mpirun -np 2` (any N works): N ranks
 * on 1/N of a batch each, averaged, give the gradients of one rank on the
 * whole batch; the average is the same bits on every rank; a failed rank
 * makes every rank return MG_ERR_COMM, and a rank that never calls in
 * makes the others time out instead of hanging; bad arguments fail on
 * every rank alike.
 *
 * Check runs in CK_NOFORK mode: forking an MPI process is not allowed.
 */
#include <memgrad_dist.h>
#include <memgrad_models.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers/dist_check.h"

static int rank, size;

/* One MLP training step's worth of caller memory and a compiled plan. */
typedef struct step {
    mg_model *m;
    void **w, **gw;
    void *x, *y;
    double loss[1];
    mg_binding *binds;
    mg_binding *grads; /* the gradient bindings, reverse parameter order */
    int n_binds;
    mg_plan *p;
    mg_exec *ex;
} step;

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
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    for (int i = 0; i < n; i++) {
        size_t nb = mg_tensor_nbytes(s->m->g, s->m->params[i]);
        s->w[i] = malloc(nb);
        s->gw[i] = malloc(nb);
        s->binds[s->n_binds++] = (mg_binding){s->m->params[i], s->w[i]};
        s->binds[s->n_binds++] = (mg_binding){s->m->grads[i], s->gw[i]};
        s->grads[n - 1 - i] = (mg_binding){s->m->grads[i], s->gw[i]};
        outs[i + 1] = s->m->grads[i];
    }
    ck_assert(mg_model_init_params(s->m, 11, s->w) == MG_OK);
    s->x = malloc(mg_tensor_nbytes(s->m->g, s->m->input));
    s->y = malloc(mg_tensor_nbytes(s->m->g, s->m->target));
    s->binds[s->n_binds++] = (mg_binding){s->m->input, s->x};
    s->binds[s->n_binds++] = (mg_binding){s->m->target, s->y};
    s->binds[s->n_binds++] = (mg_binding){s->m->loss, s->loss};
    outs[0] = s->m->loss;
    ck_assert_msg(mg_plan_compile(s->m->g, outs, n + 1, NULL, &s->p) == MG_OK,
                  "%s", mg_last_error());
    free(outs);
    mg_exec_options eo = {.device = MG_DEVICE_CPU, .max_bytes = max_bytes};
    ck_assert(mg_exec_new(&eo, &s->ex) == MG_OK);
}

static void step_free(step *s) {
    for (int i = 0; s->m && i < s->m->n_params; i++) {
        free(s->w[i]);
        free(s->gw[i]);
    }
    free(s->w);
    free(s->gw);
    free(s->x);
    free(s->y);
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
    memcpy(part->x, (const char *)whole->x + (size_t)rank * xb, xb);
    memcpy(part->y, (const char *)whole->y + (size_t)rank * yb, yb);
}

static mg_dist_comm *comm_new(double timeout_s) {
    mg_dist_comm *c = NULL;
    mg_dist_options o = {.timeout_s = timeout_s};
    ck_assert_msg(mg_dist_comm_from_mpi(MPI_COMM_WORLD, &o, &c) == MG_OK, "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_dist_comm_rank(c), rank);
    ck_assert_int_eq(mg_dist_comm_size(c), size);
    return c;
}

/* N ranks on batch/N each, averaged == one rank on the whole batch, for
 * both dtypes; the memory policy on the shards, plain backprop on the
 * whole batch. `ready` 1 calls mg_dist_grad_ready by hand in backward
 * order, 2 runs the step with mg_dist_buckets_observer attached, 0 leaves
 * every bucket to mg_dist_allreduce. */
static void half_batches(mg_dtype dt, int ready) {
    int per = 4;
    step whole, part;
    step_init(&whole, dt, per * size, MG_CKPT_NONE, 0);
    step_init(&part, dt, per, MG_CKPT_MEMORY, 0);
    ck_assert(mg_model_init_data(whole.m, 3, whole.x, whole.y) == MG_OK);
    shard_data(&part, &whole);
    ck_assert_msg(step_run(&whole) == MG_OK, "%s", mg_last_error());
    mg_status s = step_run(&part);
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());

    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    int n = part.m->n_params;
    /* 400 (f32) bytes: 3 buckets for 6 gradients (b2 w2 b1 | w1 | b0 w0). */
    ck_assert_msg(mg_dist_buckets_new(c, part.m->g, part.grads, n,
                                      100 * mg_dtype_size(dt), &b) ==
                      MG_OK,
                  "%s", mg_last_error());
    int nb = mg_dist_buckets_count(b);
    ck_assert_msg(nb > 1 && nb < n, "%d buckets for %d gradients", nb, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_ge(mg_dist_buckets_index(b, part.grads[i].tensor), 0);
    if (ready == 2) {
        /* The observer path: run the step again with the buckets' observer
         * attached; every bucket must have started during the run. */
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
    }
    if (ready == 1)
        for (int i = 0; i < n; i++) {
            ck_assert_msg(mg_dist_grad_ready(b, part.grads[i].tensor) == MG_OK,
                          "%s", mg_last_error());
            ck_assert_msg(mg_dist_progress(b) == MG_OK, "%s", mg_last_error());
        }
    /* Keep the local gradients to average them a second time below. */
    size_t un = (size_t)(n > 0 ? n : 1);
    void **local = calloc(un, sizeof *local);
    for (int i = 0; i < n; i++) {
        size_t bytes = mg_tensor_nbytes(part.m->g, part.m->params[i]);
        local[i] = malloc(bytes);
        memcpy(local[i], part.gw[i], bytes);
    }
    s = mg_dist_allreduce(b, s);
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    /* Again, from the same local gradients, with this rank delayed by a
     * rank-dependent time: the same bits (timing does not enter). */
    void **first = calloc(un, sizeof *first);
    for (int i = 0; i < n; i++) {
        size_t bytes = mg_tensor_nbytes(part.m->g, part.m->params[i]);
        first[i] = malloc(bytes);
        memcpy(first[i], part.gw[i], bytes);
        memcpy(part.gw[i], local[i], bytes);
    }
    struct timespec nap = {0, 20000000L * rank};
    nanosleep(&nap, NULL);
    ck_assert_msg(mg_dist_allreduce(b, MG_OK) == MG_OK, "%s", mg_last_error());
    for (int i = 0; i < n; i++) {
        ck_assert_msg(memcmp(first[i], part.gw[i],
                             mg_tensor_nbytes(part.m->g, part.m->params[i])) ==
                          0,
                      "gradient %d: a second average differs", i);
        free(first[i]);
        free(local[i]);
    }
    free(first);
    free(local);
    for (int i = 0; i < n; i++) {
        const char *name = mg_tensor_name(part.m->g, part.m->params[i]);
        int64_t ne = mg_tensor_numel(part.m->g, part.m->params[i]);
        check_close(name, dt, part.gw[i], whole.gw[i], ne);
        check_same_on_all_ranks(name, part.gw[i],
                                mg_tensor_nbytes(part.m->g, part.m->params[i]));
    }
    mg_dist_stats st;
    ck_assert(mg_dist_buckets_stats(b, &st) == MG_OK);
    ck_assert_int_eq((int)st.steps, 2);
    ck_assert_int_eq((int)st.collectives, 4 * nb);
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&part);
    step_free(&whole);
}

START_TEST(test_half_batches_f32) { half_batches(MG_F32, 0); }
END_TEST
START_TEST(test_half_batches_f64) { half_batches(MG_F64, 0); }
END_TEST
START_TEST(test_half_batches_grad_ready) { half_batches(MG_F32, 1); }
END_TEST
START_TEST(test_half_batches_observer) { half_batches(MG_F32, 2); }
END_TEST

/* Rank 0's weights reach every rank. */
START_TEST(test_broadcast) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    int n = s.m->n_params;
    size_t nb0 = mg_tensor_nbytes(s.m->g, s.m->params[0]);
    ((float *)s.w[0])[0] = (float)(rank + 1); /* ranks differ */
    mg_binding *pb = calloc((size_t)n, sizeof *pb);
    for (int i = 0; i < n; i++) pb[i] = (mg_binding){s.m->params[i], s.w[i]};
    mg_dist_comm *c = comm_new(60);
    ck_assert_msg(mg_dist_broadcast(c, s.m->g, pb, n, 0) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(((float *)s.w[0])[0] == 1.0f);
    check_same_on_all_ranks("w0", s.w[0], nb0);
    /* A root that is no rank fails on every rank, before anything moves. */
    ck_assert(mg_dist_broadcast(c, s.m->g, pb, n, size) == MG_ERR_INVALID_ARG);
    /* One rank's bad list fails every rank instead of hanging the others. */
    mg_binding bad = {pb[0].tensor, NULL};
    mg_status st = mg_dist_broadcast(c, s.m->g, rank == 1 ? &bad : pb, 1, 0);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_INVALID_ARG : MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1"), "%s", mg_last_error());
    ck_assert(!mg_dist_comm_broken(c));
    free(pb);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

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
    if (rank == 0)
        one_param_init(&p, dt0, nd0, sh0, 0x11);
    else
        one_param_init(&p, dt1, nd1, sh1, 0x22);
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

/* Rank 1's step runs out of memory mid-plan; it still calls in, and every
 * rank gets MG_ERR_COMM naming rank 1, gradients untouched. The handle is
 * still usable: the next step, which all ranks pass, averages. */
START_TEST(test_rank_failure_reported) {
    step s;
    /* A 1-byte pool: the first activation does not fit. */
    step_init(&s, MG_F32, 4, MG_CKPT_MEMORY, rank == 1 ? 1 : 0);
    ck_assert(mg_model_init_data(s.m, 5 + (uint64_t)rank, s.x, s.y) == MG_OK);
    mg_dist_comm *c = comm_new(60);
    mg_dist_buckets *b = NULL;
    int n = s.m->n_params;
    ck_assert(mg_dist_buckets_new(c, s.m->g, s.grads, n, 0, &b) == MG_OK);
    ck_assert_int_eq(mg_dist_buckets_count(b), 1);
    mg_status st = step_run(&s);
    ck_assert_int_eq(st, rank == 1 ? MG_ERR_NOMEM : MG_OK);
    size_t nb = mg_tensor_nbytes(s.m->g, s.grads[0].tensor);
    void *before = malloc(nb);
    memcpy(before, s.grads[0].data, nb);
    st = mg_dist_allreduce(b, st);
    ck_assert_int_eq(st, MG_ERR_COMM);
    ck_assert_msg(strstr(mg_last_error(), "rank 1 (out of memory)"), "%s",
                  mg_last_error());
    if (rank == 1)
        ck_assert_msg(strstr(mg_last_error(), "this rank's error"), "%s",
                      mg_last_error());
    ck_assert(memcmp(before, s.grads[0].data, nb) == 0);
    ck_assert(!mg_dist_comm_broken(c));
    /* Next step: rank 1 gets its memory back. */
    mg_exec_free(s.ex);
    ck_assert(mg_exec_new(NULL, &s.ex) == MG_OK);
    st = mg_dist_allreduce(b, step_run(&s));
    ck_assert_msg(st == MG_OK, "%s", mg_last_error());
    check_same_on_all_ranks("grad", s.grads[0].data, nb);
    free(before);
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&s);
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
    ck_assert_msg(strstr(mg_last_error(), "listed twice"), "%s", mg_last_error());
    mg_binding labels = {s.m->target, s.y};
    ck_assert(mg_dist_buckets_new(c, s.m->g, &labels, 1, 0, &b) ==
              MG_ERR_DTYPE);
    mg_binding unknown = {100000, s.y};
    ck_assert(mg_dist_buckets_new(c, s.m->g, &unknown, 1, 0, &b) ==
              MG_ERR_UNKNOWN_ID);
    ck_assert(b == NULL);
    /* Only rank 1 is wrong: it reports its error, the others MG_ERR_COMM. */
    mg_binding nul = {s.grads[0].tensor, NULL};
    mg_status st = mg_dist_buckets_new(c, s.m->g, rank == 1 ? &nul : s.grads,
                                       1, 0, &b);
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
    mg_status st = mg_dist_comm_from_mpi(MPI_COMM_WORLD,
                                         rank == 1 ? &nan_opt : &good, &c);
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

/* Rank 1 fails without calling in at all: rank 0 times out, in about the
 * timeout, and the handle is broken from then on. Last in the suite: the
 * broken handle's collective can never complete. */
START_TEST(test_rank_silent_timeout) {
    step s;
    step_init(&s, MG_F32, 4, MG_CKPT_NONE, 0);
    mg_dist_comm *c = comm_new(1.0);
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
        ck_assert_msg(dt >= 0.9 && dt < 30, "gave up after %g s", dt);
        ck_assert(mg_dist_comm_broken(c));
        ck_assert(mg_dist_allreduce(b, MG_OK) == MG_ERR_COMM);
        ck_assert_msg(strstr(mg_last_error(), "broken"), "%s", mg_last_error());
    }
    mg_dist_buckets_free(b);
    mg_dist_comm_free(c);
    step_free(&s);
}
END_TEST

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Suite *su = suite_create("dist");
    TCase *tc = tcase_create("mpi");
    tcase_add_test(tc, test_half_batches_f32);
    tcase_add_test(tc, test_half_batches_f64);
    tcase_add_test(tc, test_half_batches_grad_ready);
    tcase_add_test(tc, test_half_batches_observer);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_broadcast_dtype_shape_differ);
    tcase_add_test(tc, test_rank_failure_reported);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_comm_bad_options_one_rank);
    tcase_add_test(tc, test_buckets_out_null_one_rank);
    tcase_add_test(tc, test_rank_silent_timeout);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_set_fork_status(sr, CK_NOFORK);
    int failed = 0;
    if (size < 2) {
        fprintf(stderr, "test_dist: needs at least 2 ranks (mpirun -np 2)\n");
        failed = 1;
    } else {
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
    }
    srunner_free(sr);
    MPI_Finalize();
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
