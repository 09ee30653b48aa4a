/*
 * test_robust.c - memgrad under abuse: thousands of random builder calls
 * with random (often invalid) ids, shapes, axes and attributes must each
 * either build a tensor or fail with a status and a message, never crash;
 * whatever did build must differentiate, plan and run. And separate graphs
 * driven from several threads at once (igraph is shared and not
 * thread-safe in Debian's build) must give the same results as one thread.
 */
#include "helpers.h"

#include <pthread.h>

static int64_t pick(th_rng *r, int64_t n) {
    return (int64_t)(th_rng_next(r) % (uint64_t)n);
}

/* One random builder call on g; returns what it built (or MG_NO_TENSOR)
 * and which call it made in *which. */
static mg_tensor random_op(mg_graph *g, th_rng *r, int *which) {
    int32_t n = mg_graph_num_tensors(g);
    /* mostly valid ids, sometimes not */
    mg_tensor a =
        pick(r, 10) ? (mg_tensor)pick(r, n) : (mg_tensor)pick(r, 3 * n + 3) - n;
    mg_tensor b =
        pick(r, 10) ? (mg_tensor)pick(r, n) : (mg_tensor)pick(r, 3 * n + 3) - n;
    int64_t shape[3] = {pick(r, 4) + (pick(r, 20) ? 1 : -1), pick(r, 3) + 1,
                        pick(r, 3) + 1};
    int axes[2] = {(int)pick(r, 7) - 3, (int)pick(r, 7) - 3};
    int perm[3] = {(int)pick(r, 3), (int)pick(r, 3), (int)pick(r, 3)};
    switch ((*which = (int)pick(r, 16))) {
    case 0:
        return mg_input(g, NULL, pick(r, 8) ? MG_F64 : MG_I32, (int)pick(r, 4),
                        shape);
    case 1: return mg_add(g, a, b);
    case 2: return mg_mul(g, a, b);
    case 3: return mg_div(g, a, b);
    case 4: return mg_matmul(g, a, b, (int)pick(r, 2), (int)pick(r, 2));
    case 5: return mg_tanh(g, a);
    case 6: return mg_relu(g, a);
    case 7: return mg_sum(g, a, (int)pick(r, 3), axes, (int)pick(r, 2));
    case 8: return mg_mean(g, a, (int)pick(r, 3), axes, (int)pick(r, 2));
    case 9: return mg_reshape(g, a, (int)pick(r, 4), shape);
    case 10: return mg_permute(g, a, perm);
    case 11: return mg_softmax(g, a, axes[0]);
    case 12: return mg_dropout(g, a, (double)pick(r, 5) / 4.0, 1);
    case 13: return mg_broadcast_to(g, a, (int)pick(r, 4), shape);
    case 14: return mg_sub(g, a, b);
    default: return mg_exp(g, mg_scale(g, a, 0.1));
    }
}

START_TEST(test_random_builder_calls) {
    th_rng r;
    th_rng_init(&r, 2026);
    int built = 0, failed = 0, ran = 0;
    for (int round = 0; round < 60; round++) {
        mg_graph *g = mg_graph_new();
        int64_t s0[2] = {2, 3};
        mg_tensor x = mg_param(g, "x", MG_F64, 2, s0);
        mg_tensor last = x;
        for (int k = 0; k < 60; k++) {
            mg_clear_error();
            int which = -1;
            mg_tensor t = random_op(g, &r, &which);
            if (t == MG_NO_TENSOR) {
                failed++;
                ck_assert_msg(mg_last_error()[0] != '\0',
                              "random call %d failed and left no message",
                              which);
                ck_assert(mg_last_status() != MG_OK);
            } else {
                built++;
                mg_dtype dt;
                ck_assert(mg_tensor_dtype(g, t, &dt) == MG_OK);
                if (dt == MG_F64) last = t;
            }
        }
        /* Whatever was built differentiates, plans and runs (or says why:
         * the last tensor may not depend on x). */
        mg_tensor L = mg_sum(g, last, 0, NULL, 0), gx;
        mg_checkpoints c = {.policy =
                                round % 2 ? MG_CKPT_MEMORY : MG_CKPT_NONE};
        if (L != MG_NO_TENSOR &&
            mg_gradients(g, &L, 1, NULL, &x, 1, &c, &gx) == MG_OK) {
            /* bind every leaf with enough zeroed memory */
            int32_t n = mg_graph_num_tensors(g);
            mg_binding *b = calloc((size_t)n, sizeof *b);
            void **mem = calloc((size_t)n, sizeof *mem);
            int nb = 0;
            for (mg_tensor t = 0; t < n; t++) {
                const char *op = mg_tensor_op_name(g, t);
                if (strcmp(op, "input") && strcmp(op, "param")) continue;
                mem[t] = calloc(1, mg_tensor_nbytes(g, t));
                b[nb++] = (mg_binding){t, mem[t]};
            }
            mg_plan *p = NULL;
            mg_exec *ex = NULL;
            ck_assert(mg_plan_compile(g, &gx, 1, NULL, &p) == MG_OK);
            ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
            mg_status st = mg_exec_run(ex, p, b, nb, 0);
            ck_assert_msg(st == MG_OK, "%s", mg_last_error());
            mg_pool_stats ps;
            mg_exec_pool_stats(ex, &ps);
            ck_assert_uint_eq(mg_plan_predicted_peak(p, b, nb),
                              ps.peak_bytes_in_use);
            ran++;
            mg_exec_free(ex);
            mg_plan_free(p);
            for (mg_tensor t = 0; t < n; t++) free(mem[t]);
            free(mem);
            free(b);
        }
        mg_graph_free(g);
    }
    ck_assert_msg(built > 500 && failed > 500 && ran > 10,
                  "too little exercised: %d built, %d failed, %d ran", built,
                  failed, ran);
}
END_TEST

typedef struct thread_job {
    int depth;
    double loss;
    size_t peak;
    mg_status status;
} thread_job;

/* Build, differentiate under the memory policy (igraph runs), plan, run. */
static void *train_once(void *arg) {
    thread_job *j = arg;
    tm_mlp m;
    mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
    j->status = tm_mlp_build(&m, MG_F64, j->depth, 8, 16, 4, 4, 1, 0.1, &c);
    if (j->status != MG_OK) return NULL;
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 3, 1);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    j->status = mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p);
    if (j->status == MG_OK) j->status = mg_exec_new(NULL, &ex);
    if (j->status == MG_OK)
        j->status = mg_exec_run(ex, p, d.binds, d.n_binds, 5);
    if (j->status == MG_OK) {
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        j->peak = st.peak_bytes_in_use;
        j->loss = tm_loss_value(&d, &m);
    }
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
    return NULL;
}

START_TEST(test_threads_agree_with_one_thread) {
    enum { N = 4 };
    thread_job alone[N], together[N];
    for (int i = 0; i < N; i++) {
        alone[i] = together[i] = (thread_job){.depth = 6 + 4 * i};
        train_once(&alone[i]);
        ck_assert_msg(alone[i].status == MG_OK, "%s", mg_last_error());
    }
    pthread_t th[N];
    for (int i = 0; i < N; i++)
        ck_assert(pthread_create(&th[i], NULL, train_once, &together[i]) == 0);
    for (int i = 0; i < N; i++) ck_assert(pthread_join(th[i], NULL) == 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(together[i].status, MG_OK);
        ck_assert_msg(
            memcmp(&together[i].loss, &alone[i].loss, sizeof(double)) == 0,
            "thread %d: loss %.17g vs %.17g alone", i, together[i].loss,
            alone[i].loss);
        ck_assert_uint_eq(together[i].peak, alone[i].peak);
    }
}
END_TEST

TH_MAIN("robust", "robust", 300, test_random_builder_calls,
        test_threads_agree_with_one_thread)
