/*
 * test_hooks.c - tensor hooks (memgrad_observe.h): a gradient hook's
 * replacement changes the gradients downstream of it exactly as a finite-
 * difference check of the replaced gradient says; a forward hook fires once
 * per run under a recomputing policy, never from the recomputed copy, and
 * sees the forward value; hooks survive mg_gradients, can be removed, and
 * one that fails stops the run with nothing leaked.
 */
#include "helpers.h"
#include "memgrad_observe.h"

/* x [N,K] -> h = tanh(x W) [N,M] -> loss = mse(h V, target) */
enum { N = 3, K = 4, M = 5, P = 2 };

typedef struct small {
    mg_graph *g;
    mg_tensor x, w, v, target, h, loss, gh, gw;
    double xd[N * K], wd[K * M], vd[M * P], td[N * P];
} small;

static int h_calls; /* forward hook on h, registered before mg_gradients */

static mg_status h_hook(void *user, const mg_graph *g, mg_tensor t,
                        void *data) {
    (void)user, (void)g, (void)t, (void)data;
    h_calls++;
    return MG_OK;
}

static void small_build(small *s) {
    memset(s, 0, sizeof *s);
    s->g = mg_graph_new();
    s->x = mg_input(s->g, "x", MG_F64, 2, S(N, K));
    s->w = mg_param(s->g, "w", MG_F64, 2, S(K, M));
    s->v = mg_param(s->g, "v", MG_F64, 2, S(M, P));
    s->target = mg_input(s->g, "target", MG_F64, 2, S(N, P));
    s->h = mg_tanh(s->g, mg_matmul(s->g, s->x, s->w, 0, 0));
    s->loss = mg_mse(s->g, mg_matmul(s->g, s->h, s->v, 0, 0), s->target);
    ck_assert(s->loss != MG_NO_TENSOR);
    ck_assert(mg_tensor_add_hook(s->g, s->h, h_hook, NULL, NULL) == MG_OK);
    mg_tensor xs[2] = {s->h, s->w}, grads[2];
    ck_assert(mg_gradients(s->g, &s->loss, 1, NULL, xs, 2, NULL, grads) ==
              MG_OK);
    s->gh = grads[0];
    s->gw = grads[1];
    th_rng r;
    th_rng_init(&r, 11);
    th_fill_f64(&r, s->xd, N * K, -1, 1, 0);
    th_fill_f64(&r, s->wd, K * M, -1, 1, 0);
    th_fill_f64(&r, s->vd, M * P, -1, 1, 0);
    th_fill_f64(&r, s->td, N * P, -1, 1, 0);
}

/* dL/dw with every hook on the graph in force. */
static void small_grad_w(const small *s, double *gw) {
    mg_binding ins[4] = {{s->x, (void *)s->xd},
                         {s->w, (void *)s->wd},
                         {s->v, (void *)s->vd},
                         {s->target, (void *)s->td}};
    void *out[1] = {gw};
    ck_assert_msg(th_run(s->g, 1, &s->gw, out, 4, ins, 0) == MG_OK, "%s",
                  th_errmsg);
}

/* h for the weights wd, from a forward-only plan of the same graph. */
static void small_h(const small *s, const double *wd, double *h) {
    mg_binding ins[2] = {{s->x, (void *)s->xd}, {s->w, (void *)wd}};
    void *out[1] = {h};
    mg_plan_options o = {.no_grad = 1};
    ck_assert_msg(th_run_opts(s->g, 1, &s->h, out, 2, ins, 0, &o) == MG_OK,
                  "%s", th_errmsg);
}

typedef struct clip {
    double c;
    int calls;
    double seen[N * M], kept[N * M]; /* before and after clipping */
} clip;

static mg_status clip_hook(void *user, const mg_graph *g, mg_tensor t,
                           void *data) {
    clip *c = user;
    ck_assert_uint_eq(mg_tensor_nbytes(g, t), sizeof c->seen);
    double *d = data;
    for (int i = 0; i < N * M; i++) {
        c->seen[i] = d[i];
        d[i] = d[i] > c->c ? c->c : d[i] < -c->c ? -c->c : d[i];
        c->kept[i] = d[i];
    }
    c->calls++;
    return MG_OK;
}

/* With dL/dh clipped to g', dL/dw becomes d<g', h(w)>/dw with g' held
 * fixed: checked against central differences of h through the library's
 * own forward pass. The unclipped gradient differs, so the replacement
 * really travelled downstream. */
START_TEST(test_gradient_hook_clips_downstream) {
    small s;
    small_build(&s);
    double plain[K * M], hooked[K * M];
    h_calls = 0;
    small_grad_w(&s, plain);
    /* the forward hook survived mg_gradients: once per run */
    ck_assert_int_eq(h_calls, 1);

    clip c = {0};
    int id = -1;
    ck_assert(mg_tensor_add_hook(s.g, s.gh, clip_hook, &c, &id) == MG_OK);
    /* a first run to see the gradient, then clip at half its largest */
    c.c = INFINITY;
    small_grad_w(&s, hooked);
    th_check_f64("unclipped hook is a no-op", hooked, plain, K * M, 0, 0);
    double amax = 0;
    for (int i = 0; i < N * M; i++) amax = fmax(amax, fabs(c.seen[i]));
    ck_assert(amax > 0);
    c.c = amax / 2;
    small_grad_w(&s, hooked);
    ck_assert_int_eq(c.calls, 2);

    const double eps = 1e-6;
    double fd[K * M], wd[K * M], hp[N * M], hm[N * M];
    for (int j = 0; j < K * M; j++) {
        memcpy(wd, s.wd, sizeof wd);
        wd[j] = s.wd[j] + eps;
        small_h(&s, wd, hp);
        wd[j] = s.wd[j] - eps;
        small_h(&s, wd, hm);
        fd[j] = 0;
        for (int i = 0; i < N * M; i++)
            fd[j] += c.kept[i] * (hp[i] - hm[i]) / (2 * eps);
    }
    th_check_f64("dw with dh clipped vs finite differences", hooked, fd, K * M,
                 1e-7, 1e-6);
    double diff = 0;
    for (int j = 0; j < K * M; j++)
        diff = fmax(diff, fabs(hooked[j] - plain[j]));
    ck_assert_msg(diff > 1e-3, "clipping changed dw by only %g", diff);

    /* removed: the plain gradient again */
    ck_assert(mg_tensor_remove_hook(s.g, id) == MG_OK);
    ck_assert(mg_tensor_remove_hook(s.g, id) == MG_ERR_UNKNOWN_ID);
    small_grad_w(&s, hooked);
    th_check_f64("hook removed", hooked, plain, K * M, 0, 0);
    ck_assert_int_eq(c.calls, 2);
    mg_graph_free(s.g);
}
END_TEST

typedef struct seen {
    int calls;
    double sum; /* of the value, as float */
} seen;

static mg_status count_hook(void *user, const mg_graph *g, mg_tensor t,
                            void *data) {
    seen *s = user;
    int64_t n = mg_tensor_numel(g, t);
    const float *d = data;
    for (int64_t i = 0; i < n; i++) s->sum += d[i];
    s->calls++;
    return MG_OK;
}

/* Under the memory policy hidden activations are recomputed in the
 * backward pass. Hooked on the rewritten graph, each fires once per run with
 * the forward value (the same as a retained copy's); the copies cannot be
 * hooked and do not fire. */
START_TEST(test_forward_hook_once_under_recompute) {
    enum { DEPTH = 12 };
    tm_mlp m;
    mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
    ck_assert(tm_mlp_build(&m, MG_F32, DEPTH, 8, 16, 4, 5, 1, 0.0, &ck) ==
              MG_OK);
    static seen s[DEPTH];
    memset(s, 0, sizeof s);
    int recomputed = 0;
    for (int l = 0; l < DEPTH; l++) {
        ck_assert(mg_tensor_add_hook(m.g, m.h[l], count_hook, &s[l], NULL) ==
                  MG_OK);
        for (mg_tensor t = 0; t < mg_graph_num_tensors(m.g); t++)
            if (mg_tensor_is_recompute(m.g, t) &&
                mg_tensor_recompute_source(m.g, t) == m.h[l]) {
                recomputed++;
                ck_assert(mg_tensor_add_hook(m.g, t, count_hook, &s[l], NULL) ==
                          MG_ERR_INVALID_ARG);
                ck_assert(strstr(mg_last_error(), "recomputed copy"));
            }
    }
    ck_assert_msg(recomputed > 0, "the policy recomputes no activation");
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 4, 1);
    mg_plan_options o = {.retain = &m.h[DEPTH / 2], .n_retain = 1};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, &o, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    for (int run = 1; run <= 2; run++) {
        for (int l = 0; l < DEPTH; l++) s[l].sum = 0;
        ck_assert_msg(mg_exec_run(ex, p, d.binds, d.n_binds, 1) == MG_OK, "%s",
                      mg_last_error());
        for (int l = 0; l < DEPTH; l++)
            ck_assert_msg(s[l].calls == run, "h[%d]: %d calls after run %d", l,
                          s[l].calls, run);
        const void *kept;
        ck_assert(mg_exec_tensor_data(ex, m.h[DEPTH / 2], &kept) == MG_OK);
        seen ref = {0};
        count_hook(&ref, m.g, m.h[DEPTH / 2], (void *)kept);
        ck_assert(ref.sum == s[DEPTH / 2].sum);
    }
    /* leaves cannot be hooked; bad arguments */
    ck_assert(mg_tensor_add_hook(m.g, m.w[0], count_hook, NULL, NULL) ==
              MG_ERR_INVALID_ARG);
    ck_assert(mg_tensor_add_hook(m.g, 100000, count_hook, NULL, NULL) ==
              MG_ERR_UNKNOWN_ID);
    ck_assert(mg_tensor_add_hook(m.g, m.h[0], NULL, NULL, NULL) ==
              MG_ERR_INVALID_ARG);
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

static mg_status failing_hook(void *user, const mg_graph *g, mg_tensor t,
                              void *data) {
    (void)user, (void)g, (void)t, (void)data;
    return mg_set_error(MG_ERR_INVALID_ARG, "hook refuses");
}

START_TEST(test_hook_error_stops_run) {
    tm_mlp m;
    ck_assert(tm_mlp_build(&m, MG_F32, 3, 8, 16, 4, 5, 1, 0.0, NULL) == MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 4, 0);
    int id;
    ck_assert(mg_tensor_add_hook(m.g, m.gw[1], failing_hook, NULL, &id) ==
              MG_OK);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 1) == MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "hook") &&
                      strstr(mg_last_error(), "hook refuses"),
                  "%s", mg_last_error());
    mg_pool_stats st;
    ck_assert(mg_exec_pool_stats(ex, &st) == MG_OK);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert(mg_tensor_remove_hook(m.g, id) == MG_OK);
    ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 1) == MG_OK);
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

TH_MAIN("hooks", "hooks", 120, test_gradient_hook_clips_downstream,
        test_forward_hook_once_under_recompute, test_hook_error_stops_run)
