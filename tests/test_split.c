/*
 * test_split.c - a training plan run in two calls (mg_exec_forward now,
 * mg_exec_backward later): gradients equal the one-call run's bit for bit
 * under every policy, dropout included; two forward phases outstanding at
 * once; each phase's predicted peak equals the measured one; and misuse
 * (backward twice, a missing seed, another plan's state) gets clear errors.
 */
#include "helpers.h"

#define N 8
#define IN 16
#define W 32
#define OUT 4
#define NP 8

typedef struct net {
    mg_graph *g;
    mg_tensor x, gy, y, params[NP], grads[NP];
    float *xv, *gyv, *pv[NP];
    mg_plan *plan;
} net;

static void net_make(net *m, mg_ckpt_policy policy, uint64_t data_seed) {
    memset(m, 0, sizeof *m);
    m->g = mg_graph_new();
    mg_graph *g = m->g;
    m->x = mg_input(g, "x", MG_F32, 2, S(N, IN));
    m->gy = mg_input(g, "gy", MG_F32, 2, S(N, OUT));
    mg_tensor h = m->x, tagged = MG_NO_TENSOR;
    int fan_in = IN;
    for (int l = 0; l < NP / 2; l++) {
        int fan_out = l == NP / 2 - 1 ? OUT : W;
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        m->params[2 * l] = mg_param(g, name, MG_F32, 2, S(fan_in, fan_out));
        snprintf(name, sizeof name, "b%d", l);
        m->params[2 * l + 1] = mg_param(g, name, MG_F32, 1, S(fan_out));
        h = mg_add(g, mg_matmul(g, h, m->params[2 * l], 0, 0),
                   m->params[2 * l + 1]);
        if (l < NP / 2 - 1) h = mg_tanh(g, h);
        if (l == 1) {
            h = mg_dropout(g, h, 0.25, 7);
            tagged = h;
        }
        fan_in = fan_out;
    }
    m->y = h;
    TH_OK_T("net", m->y);
    mg_checkpoints ck = {.policy = policy};
    if (policy == MG_CKPT_COLLECTION) {
        ck.tensors = &tagged;
        ck.n_tensors = 1;
    }
    ck_assert_msg(mg_gradients(g, &m->y, 1, &m->gy, m->params, NP, &ck,
                               m->grads) == MG_OK,
                  "%s", mg_last_error());
    mg_tensor outs[1 + NP];
    outs[0] = m->y;
    memcpy(outs + 1, m->grads, sizeof m->grads);
    ck_assert_msg(mg_plan_compile(g, outs, 1 + NP, NULL, &m->plan) == MG_OK,
                  "%s", mg_last_error());
    th_rng r;
    th_rng_init(&r, data_seed);
    m->xv = malloc(sizeof(float) * N * IN);
    m->gyv = malloc(sizeof(float) * N * OUT);
    th_fill_f32(&r, m->xv, N * IN, -1, 1, 0);
    th_fill_f32(&r, m->gyv, N * OUT, -1, 1, 0);
    for (int i = 0; i < NP; i++) {
        int64_t n = mg_tensor_numel(g, m->params[i]);
        m->pv[i] = malloc(sizeof(float) * (size_t)n);
        th_fill_f32(&r, m->pv[i], n, -0.5, 0.5, 0);
    }
}

static void net_free(net *m) {
    mg_plan_free(m->plan);
    mg_graph_free(m->g);
    free(m->xv);
    free(m->gyv);
    for (int i = 0; i < NP; i++) free(m->pv[i]);
}

/* Bindings for x (xv), the seed and the parameters. */
static int net_binds(const net *m, const float *xv, mg_binding *b) {
    int n = 0;
    b[n++] = (mg_binding){m->x, (void *)xv};
    b[n++] = (mg_binding){m->gy, m->gyv};
    for (int i = 0; i < NP; i++) b[n++] = (mg_binding){m->params[i], m->pv[i]};
    return n;
}

/* Copy y and the gradients kept by the executor (or by saved for y). */
static void take(const net *m, mg_exec *ex, const mg_saved *sv, float **out) {
    const void *d;
    if (sv) ck_assert(mg_saved_tensor_data(sv, m->y, &d) == MG_OK);
    else ck_assert(mg_exec_tensor_data(ex, m->y, &d) == MG_OK);
    out[0] = malloc(mg_tensor_nbytes(m->g, m->y));
    memcpy(out[0], d, mg_tensor_nbytes(m->g, m->y));
    for (int i = 0; i < NP; i++) {
        ck_assert_msg(mg_exec_tensor_data(ex, m->grads[i], &d) == MG_OK, "%s",
                      mg_last_error());
        size_t nb = mg_tensor_nbytes(m->g, m->grads[i]);
        out[1 + i] = malloc(nb);
        memcpy(out[1 + i], d, nb);
    }
}

static void same_bits(const net *m, float **a, float **b, const char *what) {
    ck_assert_msg(!memcmp(a[0], b[0], mg_tensor_nbytes(m->g, m->y)),
                  "%s: y differs", what);
    for (int i = 0; i < NP; i++)
        ck_assert_msg(
            !memcmp(a[1 + i], b[1 + i], mg_tensor_nbytes(m->g, m->grads[i])),
            "%s: gradient %d differs", what, i);
}

static void free_vals(float **v) {
    for (int i = 0; i < 1 + NP; i++) free(v[i]);
}

static const mg_ckpt_policy policies[] = {MG_CKPT_NONE, MG_CKPT_COLLECTION,
                                          MG_CKPT_MEMORY, MG_CKPT_SPEED};

START_TEST(test_split_equals_one_call) {
    for (int k = 0; k < 4; k++) {
        net m;
        net_make(&m, policies[k], 11);
        mg_binding b[2 + NP];
        int nb = net_binds(&m, m.xv, b);
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        float *one[1 + NP], *two[1 + NP];
        ck_assert_msg(mg_exec_run(ex, m.plan, b, nb, 5) == MG_OK, "%s",
                      mg_last_error());
        take(&m, ex, NULL, one);
        mg_saved *sv = NULL;
        ck_assert_msg(mg_exec_forward(ex, m.plan, b, nb, 5, &sv) == MG_OK, "%s",
                      mg_last_error());
        ck_assert_msg(mg_exec_backward(ex, m.plan, sv, b, nb) == MG_OK, "%s",
                      mg_last_error());
        take(&m, ex, sv, two);
        same_bits(&m, one, two, "split vs one call");
        mg_saved_free(sv);
        free_vals(one);
        free_vals(two);
        mg_exec_free(ex);
        net_free(&m);
    }
}
END_TEST

/* Two micro-batches: both forwards, then both backwards in reverse order;
 * each equals its own one-call run, and their sum is the accumulated
 * gradient. */
START_TEST(test_two_outstanding) {
    for (int k = 0; k < 4; k++) {
        net m;
        net_make(&m, policies[k], 12);
        float *x2 = malloc(sizeof(float) * N * IN);
        for (int i = 0; i < N * IN; i++) x2[i] = m.xv[i] * 0.5f + 0.1f;
        mg_binding b1[2 + NP], b2[2 + NP];
        int nb = net_binds(&m, m.xv, b1);
        net_binds(&m, x2, b2);
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        float *one1[1 + NP], *one2[1 + NP], *s1[1 + NP], *s2[1 + NP];
        ck_assert(mg_exec_run(ex, m.plan, b1, nb, 1) == MG_OK);
        take(&m, ex, NULL, one1);
        ck_assert(mg_exec_run(ex, m.plan, b2, nb, 2) == MG_OK);
        take(&m, ex, NULL, one2);
        mg_exec_release(ex);
        mg_saved *sv1 = NULL, *sv2 = NULL;
        ck_assert(mg_exec_forward(ex, m.plan, b1, nb, 1, &sv1) == MG_OK);
        ck_assert(mg_exec_forward(ex, m.plan, b2, nb, 2, &sv2) == MG_OK);
        ck_assert(mg_exec_backward(ex, m.plan, sv2, b2, nb) == MG_OK);
        take(&m, ex, sv2, s2);
        ck_assert(mg_exec_backward(ex, m.plan, sv1, b1, nb) == MG_OK);
        take(&m, ex, sv1, s1);
        same_bits(&m, one1, s1, "micro-batch 1");
        same_bits(&m, one2, s2, "micro-batch 2");
        mg_saved_free(sv1);
        mg_saved_free(sv2);
        mg_exec_release(ex);
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        ck_assert_uint_eq(st.bytes_in_use, 0);
        free_vals(one1);
        free_vals(one2);
        free_vals(s1);
        free_vals(s2);
        free(x2);
        mg_exec_free(ex);
        net_free(&m);
    }
}
END_TEST

START_TEST(test_phase_peaks) {
    for (int k = 0; k < 4; k++) {
        net m;
        net_make(&m, policies[k], 13);
        mg_binding b[2 + NP];
        int nb = net_binds(&m, m.xv, b);
        mg_phase_peaks pk;
        ck_assert_msg(mg_plan_phase_peaks(m.plan, b, nb, &pk) == MG_OK, "%s",
                      mg_last_error());
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        /* an older forward phase outstanding does not change the figures */
        mg_saved *other = NULL;
        ck_assert(mg_exec_forward(ex, m.plan, b, nb, 3, &other) == MG_OK);
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        size_t base = st.bytes_in_use;
        mg_exec_pool_reset_peak(ex);
        mg_saved *sv = NULL;
        ck_assert(mg_exec_forward(ex, m.plan, b, nb, 3, &sv) == MG_OK);
        mg_exec_pool_stats(ex, &st);
        ck_assert_uint_eq(st.peak_bytes_in_use - base, pk.forward);
        size_t pair = st.peak_bytes_in_use - base;
        ck_assert_uint_eq(mg_saved_bytes(sv), pk.saved);
        ck_assert_uint_eq(st.bytes_in_use - base, pk.saved);
        mg_exec_pool_reset_peak(ex);
        ck_assert(mg_exec_backward(ex, m.plan, sv, b, nb) == MG_OK);
        mg_exec_pool_stats(ex, &st);
        ck_assert_uint_eq(st.peak_bytes_in_use - base, pk.backward);
        if (st.peak_bytes_in_use - base > pair)
            pair = st.peak_bytes_in_use - base;
        ck_assert_uint_eq(pair, pk.pair);
        ck_assert(pk.saved > 0 && pk.forward >= pk.saved);
        mg_saved_free(sv);
        mg_saved_free(other);
        mg_exec_free(ex);
        net_free(&m);
    }
}
END_TEST

START_TEST(test_misuse) {
    net m;
    net_make(&m, MG_CKPT_MEMORY, 14);
    mg_binding b[2 + NP];
    int nb = net_binds(&m, m.xv, b);
    mg_exec *ex = NULL, *ex2 = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex2) == MG_OK);
    mg_saved *sv = NULL;
    ck_assert(mg_exec_forward(ex, m.plan, b, nb, 3, &sv) == MG_OK);
    /* no seed: refused, and the saved state stays usable */
    mg_binding no_seed[2 + NP];
    memcpy(no_seed, b, sizeof b);
    no_seed[1] = b[nb - 1];
    ck_assert_int_eq(mg_exec_backward(ex, m.plan, sv, no_seed, nb - 1),
                     MG_ERR_UNBOUND);
    ck_assert_msg(strstr(mg_last_error(), "gy"), "%s", mg_last_error());
    ck_assert_int_eq(mg_exec_backward(ex2, m.plan, sv, b, nb),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "another executor"), "%s",
                  mg_last_error());
    ck_assert(mg_exec_backward(ex, m.plan, sv, b, nb) == MG_OK);
    ck_assert_int_eq(mg_exec_backward(ex, m.plan, sv, b, nb),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "already used"), "%s",
                  mg_last_error());
    mg_saved_free(sv);
    /* another plan's state */
    net m2;
    net_make(&m2, MG_CKPT_NONE, 15);
    mg_binding b2[2 + NP];
    net_binds(&m2, m2.xv, b2);
    ck_assert(mg_exec_forward(ex, m2.plan, b2, nb, 3, &sv) == MG_OK);
    ck_assert_int_eq(mg_exec_backward(ex, m.plan, sv, b, nb),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "another plan"), "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_saved_tensor_data(sv, m2.grads[0], &(const void *){0}),
                     MG_ERR_UNKNOWN_ID);
    mg_saved_free(sv);
    /* a plan without gradient steps has no phases */
    mg_plan *fwd = NULL;
    ck_assert(mg_plan_compile(m.g, &m.y, 1, NULL, &fwd) == MG_OK);
    sv = (mg_saved *)1;
    ck_assert_int_eq(mg_exec_forward(ex, fwd, b, nb, 3, &sv),
                     MG_ERR_INVALID_ARG);
    ck_assert_ptr_null(sv);
    ck_assert_msg(strstr(mg_last_error(), "no gradient steps"), "%s",
                  mg_last_error());
    mg_plan_free(fwd);
    mg_pool_stats st;
    mg_exec_release(ex);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    mg_exec_free(ex2);
    net_free(&m);
    net_free(&m2);
}
END_TEST

/* A gradient that is the seed itself (y = tanh(x) + p: dL/dp is dL/dy; y =
 * x + p: every gradient is) is bound when backward runs: the forward phase
 * runs without the seed, and the phases give the one-call run's bits, the
 * seed's own for that gradient. A plan with no backward step is phased
 * too, for such a gradient. */
START_TEST(test_seed_gradient) {
    for (int with_tanh = 1; with_tanh >= 0; with_tanh--) {
        mg_graph *g = mg_graph_new();
        mg_tensor x = mg_input(g, "x", MG_F32, 2, S(N, OUT));
        mg_tensor gy = mg_input(g, "gy", MG_F32, 2, S(N, OUT));
        mg_tensor p = mg_param(g, "p", MG_F32, 2, S(N, OUT));
        mg_tensor y = mg_add(g, with_tanh ? mg_tanh(g, x) : x, p);
        TH_OK_T("y", y);
        mg_tensor xs[2] = {x, p}, gs[2];
        mg_checkpoints ck = {.policy = MG_CKPT_NONE};
        ck_assert_msg(mg_gradients(g, &y, 1, &gy, xs, 2, &ck, gs) == MG_OK,
                      "%s", mg_last_error());
        mg_tensor outs[3] = {y, gs[0], gs[1]};
        mg_plan *plan = NULL;
        ck_assert_msg(mg_plan_compile(g, outs, 3, NULL, &plan) == MG_OK, "%s",
                      mg_last_error());
        float xv[N * OUT], gyv[N * OUT], pv[N * OUT], one[2][N * OUT];
        th_rng r;
        th_rng_init(&r, 21);
        th_fill_f32(&r, xv, N * OUT, -1, 1, 0);
        th_fill_f32(&r, gyv, N * OUT, -1, 1, 0);
        th_fill_f32(&r, pv, N * OUT, -1, 1, 0);
        mg_binding fwd[2] = {{x, xv}, {p, pv}};
        mg_binding all[3] = {{x, xv}, {p, pv}, {gy, gyv}};
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        const void *d;
        ck_assert_msg(mg_exec_run(ex, plan, all, 3, 1) == MG_OK, "%s",
                      mg_last_error());
        for (int i = 0; i < 2; i++) {
            ck_assert(mg_exec_tensor_data(ex, gs[i], &d) == MG_OK);
            memcpy(one[i], d, sizeof one[i]);
        }
        ck_assert_msg(!memcmp(one[1], gyv, sizeof gyv),
                      "dL/dp is not the seed");
        mg_saved *sv = NULL;
        ck_assert_msg(mg_exec_forward(ex, plan, fwd, 2, 1, &sv) == MG_OK,
                      "with_tanh %d: %s", with_tanh, mg_last_error());
        ck_assert_msg(mg_exec_backward(ex, plan, sv, all, 3) == MG_OK,
                      "with_tanh %d: %s", with_tanh, mg_last_error());
        for (int i = 0; i < 2; i++) {
            ck_assert_msg(mg_exec_tensor_data(ex, gs[i], &d) == MG_OK, "%s",
                          mg_last_error());
            ck_assert_msg(!memcmp(one[i], d, sizeof one[i]),
                          "with_tanh %d: gradient %d differs", with_tanh, i);
        }
        mg_saved_free(sv);
        mg_exec_free(ex);
        mg_plan_free(plan);
        mg_graph_free(g);
    }
}
END_TEST

TH_MAIN("split", "split", 120, test_split_equals_one_call, test_two_outstanding,
        test_phase_peaks, test_misuse, test_seed_gradient)
