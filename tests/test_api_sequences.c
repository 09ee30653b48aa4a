/*
 * test_api_sequences.c - random sequences of public calls, valid and not:
 * leaves of random shapes and dtypes, ops on random ids (negative, past
 * the end, of the wrong shape or dtype), names set, unset and looked up,
 * checkpoint tags, mg_gradients under every policy with random
 * checkpoints, budgets, compaction and 16-bit storage, then a plan and a
 * run with some inputs left unbound. Each refusal must come with a status
 * and a message, and nothing may crash, leak or read out of bounds, which
 * the ASan+UBSan build of the suite checks. Deterministic: fixed seeds.
 * (It found an unset name that mg_tensor_find dereferenced.)
 */
#include "helpers.h"

static uint64_t st;
static uint64_t rnd(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
}
static int pick(int n) { return (int)(rnd() % (uint64_t)n); }

/* Mostly a tensor of g, sometimes a negative id or one past the end. */
static mg_tensor any_t(const mg_graph *g) {
    const int32_t n = mg_graph_num_tensors(g);
    switch (pick(8)) {
    case 0: return -1 - pick(3);
    case 1: return n + pick(3);
    default: return n ? pick(n) : 0;
    }
}

static long n_built, n_refused, n_grads, n_runs;

/* A failed call names its status and says why. */
static void refused_clearly(bool failed, const char *what) {
    if (!failed) {
        n_built++;
        return;
    }
    n_refused++;
    ck_assert_msg(mg_last_status() != MG_OK, "%s failed with status MG_OK",
                  what);
    ck_assert_msg(mg_last_error()[0] != '\0', "%s failed without a message",
                  what);
}

#define BUILT(call) refused_clearly((call) == MG_NO_TENSOR, #call)
#define STATUS(call) refused_clearly((call) != MG_OK, #call)

static void random_op(mg_graph *g) {
    const mg_tensor a = any_t(g), b = any_t(g), c = any_t(g);
    mg_clear_error();
    switch (pick(30)) {
    case 0: BUILT(mg_add(g, a, b)); break;
    case 1: BUILT(mg_mul(g, a, b)); break;
    case 2: BUILT(mg_matmul(g, a, b, pick(2), pick(2))); break;
    case 3: BUILT(mg_relu(g, a)); break;
    case 4: BUILT(mg_tanh(g, a)); break;
    case 5: {
        const int ax[2] = {pick(4) - 1, pick(3)};
        BUILT(mg_sum(g, a, pick(3), ax, pick(2)));
        break;
    }
    case 6: {
        const int64_t s[2] = {pick(13), pick(5) - 1};
        BUILT(mg_reshape(g, a, pick(3), s));
        break;
    }
    case 7: BUILT(mg_dropout(g, a, (double)pick(5) / 4.0, rnd())); break;
    case 8: {
        const mg_tensor xs[3] = {a, b, c};
        BUILT(mg_concat(g, pick(4), xs, pick(3) - 1));
        break;
    }
    case 9: BUILT(mg_slice(g, a, pick(3) - 1, pick(5) - 1, pick(5) - 1)); break;
    case 10: STATUS(mg_tensor_set_name(g, a, pick(2) ? "nm" : NULL)); break;
    case 11: {
        /* a miss is an error too, with its message */
        const mg_tensor t = mg_tensor_find(g, pick(2) ? "nm" : "l0");
        refused_clearly(t == MG_NO_TENSOR, "mg_tensor_find");
        break;
    }
    case 12: STATUS(mg_tensor_set_checkpoint(g, a, pick(2))); break;
    case 13: BUILT(mg_softmax(g, a, pick(3) - 1)); break;
    case 14: BUILT(mg_transpose(g, a, pick(3) - 1, pick(3))); break;
    case 15: BUILT(mg_cast(g, a, (mg_dtype)pick(5))); break;
    case 16: BUILT(mg_scale(g, a, 2.0)); break;
    case 17: BUILT(mg_mean(g, a, 0, NULL, 0)); break;
    case 18: mg_tensor_name(g, a); break;
    case 19: BUILT(mg_layernorm(g, a, b, c, pick(3), 1e-5)); break;
    case 20: BUILT(mg_leaky_relu(g, a, 0.1)); break;
    case 21: BUILT(mg_sub(g, a, b)); break;
    case 22:
        BUILT(mg_conv2d(g, a, b, 1 + pick(2), 1, pick(2), pick(2), 1, 1,
                        1 + pick(2) * 2));
        break;
    case 23:
        BUILT(mg_max_pool2d(g, a, 1 + pick(3), 2, 1 + pick(2), 2, pick(2), 0));
        break;
    case 24: BUILT(mg_batchnorm(g, a, b, c, 1e-5)); break;
    case 25: BUILT(mg_avg_pool2d(g, a, 2, 2, 2, 2, pick(2), pick(2))); break;
    case 26: BUILT(mg_attention(g, a, b, c, pick(2), 0)); break;
    case 27: BUILT(mg_cross_entropy(g, a, b)); break;
    case 28: BUILT(mg_embedding(g, a, b)); break;
    default: {
        const int64_t be[MG_MAX_DIMS] = {pick(2), 0, pick(3),
                                         pick(2) - (pick(8) == 0)};
        BUILT(mg_pad(g, a, be, pick(2) ? be : NULL));
        break;
    }
    }
}

/* Bind every leaf but a few (zeros), and run the plan of the outputs. */
static void plan_and_run(const mg_graph *g, const mg_tensor *outs, int n) {
    mg_plan *p = NULL;
    mg_clear_error();
    const mg_status s = mg_plan_compile(g, outs, n, NULL, &p);
    refused_clearly(s != MG_OK, "mg_plan_compile");
    if (s != MG_OK) return;
    mg_exec *ex = NULL;
    ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
    mg_binding bs[16];
    void *bufs[16];
    int nb = 0;
    for (int32_t t = 0; t < mg_graph_num_tensors(g) && nb < 16; t++) {
        const char *op = mg_tensor_op_name(g, t);
        if ((strcmp(op, "input") && strcmp(op, "param")) || pick(8) == 0)
            continue;
        bufs[nb] = calloc(1, mg_tensor_nbytes(g, t) + 8);
        bs[nb] = (mg_binding){t, bufs[nb]};
        nb++;
    }
    mg_clear_error();
    const mg_status r = mg_exec_run(ex, p, bs, nb, rnd());
    refused_clearly(r != MG_OK, "mg_exec_run");
    n_runs += r == MG_OK;
    for (int i = 0; i < nb; i++) free(bufs[i]);
    mg_exec_free(ex);
    mg_plan_free(p);
}

static void one_graph(void) {
    static const int64_t shapes[8][4] = {
        {4, 3},       {3, 4},       {4, 4},       {1, 3},
        {2, 3, 5, 5}, {4, 3, 3, 3}, {2, 2, 4, 3}, {3}};
    static const int nds[8] = {2, 2, 2, 2, 4, 4, 4, 1};
    mg_graph *g = mg_graph_new();
    const int nl = 1 + pick(5);
    for (int i = 0; i < nl; i++) {
        char name[16];
        snprintf(name, sizeof name, "l%d", i);
        const int k = pick(8);
        const mg_dtype dt = pick(5) ? MG_F32 : (mg_dtype)pick(5);
        const char *nm = pick(6) ? name : NULL;
        mg_clear_error();
        if (pick(2)) BUILT(mg_input(g, nm, dt, nds[k], shapes[k]));
        else BUILT(mg_param(g, nm, dt, nds[k], shapes[k]));
    }
    const int nops = pick(20);
    for (int k = 0; k < nops; k++) random_op(g);

    /* gradients of a random y (often the sum of a late tensor) */
    const int32_t n = mg_graph_num_tensors(g);
    mg_tensor y = any_t(g);
    if (pick(4) && n > 0)
        y = mg_sum(g, pick(3) ? n - 1 - pick(n < 3 ? 1 : 3) : any_t(g), 0, NULL,
                   0);
    mg_tensor xs[3], grads[3];
    for (int i = 0; i < 3; i++) xs[i] = pick(4) ? pick(nl) : any_t(g);
    const int nx = pick(4);
    const mg_tensor ck[2] = {any_t(g), any_t(g)};
    const mg_checkpoints c = {.policy = (mg_ckpt_policy)pick(6),
                              .tensors = pick(2) ? ck : NULL,
                              .n_tensors = pick(3),
                              .budget_bytes = (size_t)pick(3) * 4096,
                              .compact = pick(3) == 0,
                              .store16 = pick(3) == 0};
    mg_clear_error();
    const mg_status s =
        mg_gradients(g, &y, 1, NULL, xs, nx, pick(4) ? &c : NULL, grads);
    refused_clearly(s != MG_OK, "mg_gradients");
    mg_tensor outs[4] = {y};
    int no = 1;
    if (s == MG_OK) {
        n_grads++;
        for (int i = 0; i < nx; i++) outs[no++] = grads[i];
    } else if (pick(2)) {
        outs[no++] = any_t(g);
    }
    plan_and_run(g, outs, no);
    mg_graph_free(g);
}

START_TEST(test_random_sequences) {
    n_built = n_refused = n_grads = n_runs = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        st = seed * 0x9e3779b97f4a7c15ull | 1;
        for (int i = 0; i < 100; i++) one_graph();
    }
    printf("api_sequences: %ld calls built, %ld refused, %ld gradients, "
           "%ld runs\n",
           n_built, n_refused, n_grads, n_runs);
    /* the sequences reach every stage, and are refused often */
    ck_assert_int_gt(n_built, 1000);
    ck_assert_int_gt(n_refused, 1000);
    ck_assert_int_gt(n_grads, 300);
    ck_assert_int_gt(n_runs, 1000);
}
END_TEST

TH_MAIN("api_sequences", "sequences", 300, test_random_sequences)
