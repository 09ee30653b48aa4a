/*
 * test_views.c - a reshape as a view of its input's block, not a copy
 * (issue 46): on a network full of reshapes, outputs and gradients are
 * the bits of the copy path under every policy, in one call and in two
 * phases; predicted peaks equal measured ones; peaks go down; a view of
 * an input or of an output handed back leaves the caller's memory as it
 * was; and a hook that could write through a view is refused.
 *
 * The copy path is the same graph with every reshape retained (a kept
 * tensor is never a view), or, where lifetimes must stay those of the old
 * copies, with a hook on every reshape (a hooked tensor is never one).
 */
#include "helpers.h"

#include "graph/graph.h"
#include "memgrad_observe.h"
#include "rewrite/schedule.h"

enum { B = 2, T = 6, C = 8, H = 2, LAYERS = 3, NP = 2 * LAYERS };
enum { NO = 3 + NP }; /* y, yr, mid, then the gradients */

typedef struct rnet {
    mg_graph *g;
    mg_tensor x, gy, y, yr, mid, params[NP], grads[NP];
    mg_tensor outs[NO];
    float *xv, *gyv, *pv[NP];
} rnet;

static mg_tensor reshape(mg_graph *g, mg_tensor t, int ndim,
                         const int64_t *shape) {
    mg_tensor r = mg_reshape(g, t, ndim, shape);
    TH_OK_T("reshape", r);
    return r;
}

/* Per layer, the reshapes an imported attention block is full of:
 * (B, T, C) -> (B*T, C) for a matmul, back, split into heads, permuted,
 * merged, and back again. mid, layer 0's tanh, is also an output (a view
 * of an output handed back); x is reshaped twice (views of an input),
 * once for a product whose gradient reads it (so it stays a copy). */
static mg_status rnet_make(rnet *m, mg_ckpt_policy policy, int compact,
                           size_t budget) {
    memset(m, 0, sizeof *m);
    mg_graph *g = m->g = mg_graph_new();
    m->x = mg_input(g, "x", MG_F32, 3, S(B, T, C));
    m->gy = mg_input(g, "gy", MG_F32, 1, S(B * T * C));
    mg_tensor h = m->x, tagged = MG_NO_TENSOR;
    for (int l = 0; l < LAYERS; l++) {
        m->params[2 * l] = mg_param(g, "w", MG_F32, 2, S(C, C));
        m->params[2 * l + 1] = mg_param(g, "b", MG_F32, 1, S(C));
        mg_tensor a =
            mg_matmul(g, reshape(g, h, 2, S(B * T, C)), m->params[2 * l], 0, 0);
        a = mg_add(g, a, m->params[2 * l + 1]);
        mg_tensor t = mg_tanh(g, reshape(g, a, 3, S(B, T, C)));
        if (l == 0) m->mid = t;
        if (l == 1) tagged = t;
        mg_tensor p =
            mg_permute(g, reshape(g, t, 4, S(B, T, H, C / H)), AX(0, 2, 1, 3));
        mg_tensor p3 = reshape(g, p, 3, S(B * H, T, C / H));
        mg_tensor q = mg_mul(g, p3, p3);
        q = mg_permute(g, reshape(g, q, 4, S(B, H, T, C / H)), AX(0, 2, 1, 3));
        h = mg_add(g, h, reshape(g, q, 3, S(B, T, C)));
    }
    const int64_t *flat = S(B * T * C);
    mg_tensor extra =
        mg_mul(g, reshape(g, m->mid, 1, flat), reshape(g, m->x, 1, flat));
    m->y = mg_add(g, reshape(g, h, 1, flat), extra);
    m->yr = reshape(g, h, 2, S(B, T * C));
    TH_OK_T("rnet", m->y);
    mg_checkpoints ck = {.policy = policy, .compact = compact};
    if (policy == MG_CKPT_COLLECTION) {
        ck.tensors = &tagged;
        ck.n_tensors = 1;
    }
    ck.budget_bytes = budget;
    const mg_status st =
        mg_gradients(g, &m->y, 1, &m->gy, m->params, NP, &ck, m->grads);
    m->outs[0] = m->y;
    m->outs[1] = m->yr;
    m->outs[2] = m->mid;
    memcpy(m->outs + 3, m->grads, sizeof m->grads);
    th_rng r;
    th_rng_init(&r, 46);
    m->xv = malloc(sizeof(float) * B * T * C);
    m->gyv = malloc(sizeof(float) * B * T * C);
    th_fill_f32(&r, m->xv, B * T * C, -1, 1, 0);
    th_fill_f32(&r, m->gyv, B * T * C, -1, 1, 0);
    for (int i = 0; i < NP; i++) {
        int64_t n = mg_tensor_numel(g, m->params[i]);
        m->pv[i] = malloc(sizeof(float) * (size_t)n);
        th_fill_f32(&r, m->pv[i], n, -0.5, 0.5, 0);
    }
    return st;
}

static void rnet_free(rnet *m) {
    mg_graph_free(m->g);
    free(m->xv);
    free(m->gyv);
    for (int i = 0; i < NP; i++) free(m->pv[i]);
}

/* Bindings of the leaves (x at xv), then, with out, of every output. */
static int rnet_binds(const rnet *m, const float *xv, float **out,
                      mg_binding *b) {
    int n = 0;
    b[n++] = (mg_binding){m->x, (void *)xv};
    b[n++] = (mg_binding){m->gy, m->gyv};
    for (int i = 0; i < NP; i++) b[n++] = (mg_binding){m->params[i], m->pv[i]};
    for (int i = 0; out && i < NO; i++)
        b[n++] = (mg_binding){m->outs[i], out[i]};
    return n;
}

static float **vals_new(const rnet *m) {
    float **v = malloc(NO * sizeof *v);
    for (int i = 0; i < NO; i++)
        v[i] = calloc(1, mg_tensor_nbytes(m->g, m->outs[i]));
    return v;
}

static void vals_free(float **v) {
    for (int i = 0; i < NO; i++) free(v[i]);
    free(v);
}

static void same_bits(const rnet *m, float **a, float **b, const char *what) {
    for (int i = 0; i < NO; i++)
        ck_assert_msg(!memcmp(a[i], b[i], mg_tensor_nbytes(m->g, m->outs[i])),
                      "%s: output %d (%s) differs", what, i,
                      mg_tensor_name(m->g, m->outs[i])
                          ? mg_tensor_name(m->g, m->outs[i])
                          : "?");
}

/* The plan of the outputs; with copies, every reshape retained. */
static mg_plan *rnet_plan(const rnet *m, bool copies) {
    mg_tensor *retain = malloc((size_t)m->g->n * sizeof *retain);
    int n = 0;
    for (mg_tensor t = 0; copies && t < m->g->n; t++)
        if (m->g->nodes[t].op == MG_OP_RESHAPE) retain[n++] = t;
    mg_plan_options o = {.retain = retain, .n_retain = n};
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, m->outs, NO, &o, &p) == MG_OK, "%s",
                  mg_last_error());
    free(retain);
    return p;
}

static int n_views(const mg_plan *p) {
    int n = 0;
    for (int32_t s = 0; s < p->n_steps; s++) n += p->step[s].view;
    return n;
}

/* Run p on a fresh executor, outputs bound to out (or, with out NULL,
 * left in the pool and copied into kept); check the measured pool peak
 * against the prediction, and mgi_graph_peak's against the plan's. */
static void run_checked(const rnet *m, const mg_plan *p, float **out,
                        float **kept, const char *what) {
    mg_binding b[2 + NP + NO];
    const int nb = rnet_binds(m, m->xv, out, b);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 3) == MG_OK, "%s: %s", what,
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    const size_t predicted = mg_plan_predicted_peak(p, b, nb);
    ck_assert_msg(st.peak_bytes_in_use == predicted,
                  "%s: measured peak %zu, predicted %zu", what,
                  st.peak_bytes_in_use, predicted);
    mg_peak_scratch sc = {0};
    const mg_peak_query q = {
        .outputs = p->kept,
        .n_outputs = p->n_kept,
        .binds = b,
        .n_binds = nb,
        .fuse = p->fuses}; /* the plan fuses element-wise chains, or not */
    size_t graph_peak = 0;
    ck_assert(mgi_graph_peak(p->g, &q, &sc, "test", &graph_peak) == MG_OK);
    mgi_peak_scratch_free(&sc);
    ck_assert_msg(graph_peak == predicted,
                  "%s: mgi_graph_peak %zu, the plan's %zu", what, graph_peak,
                  predicted);
    for (int i = 0; kept && i < NO; i++) {
        const void *d;
        ck_assert(mg_exec_tensor_data(ex, m->outs[i], &d) == MG_OK);
        memcpy(kept[i], d, mg_tensor_nbytes(m->g, m->outs[i]));
    }
    mg_exec_free(ex);
}

/* Two phases, outputs left in the pool: the forward's and the gradients,
 * and each phase's peak against mg_plan_phase_peaks. */
static void run_phased(const rnet *m, const mg_plan *p, float **out,
                       const char *what) {
    mg_binding b[2 + NP];
    const int nb = rnet_binds(m, m->xv, NULL, b);
    mg_phase_peaks pk;
    ck_assert_msg(mg_plan_phase_peaks(p, b, nb, &pk) == MG_OK, "%s",
                  mg_last_error());
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_saved *sv = NULL;
    ck_assert_msg(mg_exec_forward(ex, p, b, nb, 3, &sv) == MG_OK, "%s: %s",
                  what, mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_msg(st.peak_bytes_in_use == pk.forward,
                  "%s: forward peak %zu, predicted %zu", what,
                  st.peak_bytes_in_use, pk.forward);
    ck_assert_uint_eq(mg_saved_bytes(sv), pk.saved);
    mg_exec_pool_reset_peak(ex);
    ck_assert_msg(mg_exec_backward(ex, p, sv, b, nb) == MG_OK, "%s: %s", what,
                  mg_last_error());
    mg_exec_pool_stats(ex, &st);
    ck_assert_msg(st.peak_bytes_in_use == pk.backward,
                  "%s: backward peak %zu, predicted %zu", what,
                  st.peak_bytes_in_use, pk.backward);
    for (int i = 0; i < NO; i++) {
        const void *d;
        if (i < 3) ck_assert(mg_saved_tensor_data(sv, m->outs[i], &d) == MG_OK);
        else ck_assert(mg_exec_tensor_data(ex, m->outs[i], &d) == MG_OK);
        memcpy(out[i], d, mg_tensor_nbytes(m->g, m->outs[i]));
    }
    mg_saved_free(sv);
    mg_exec_release(ex);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
}

typedef struct policy_case {
    mg_ckpt_policy policy;
    int compact;
    const char *name;
} policy_case;

static const policy_case cases[] = {{MG_CKPT_NONE, 0, "none"},
                                    {MG_CKPT_COLLECTION, 0, "collection"},
                                    {MG_CKPT_MEMORY, 0, "memory"},
                                    {MG_CKPT_SPEED, 0, "speed"},
                                    {MG_CKPT_BUDGET, 0, "budget"},
                                    {MG_CKPT_NONE, 1, "none, compact"},
                                    {MG_CKPT_MEMORY, 1, "memory, compact"}};

START_TEST(test_views_bit_equal_every_policy) {
    rnet plain;
    ck_assert(rnet_make(&plain, MG_CKPT_NONE, 0, 0) == MG_OK);
    mg_plan *pp = rnet_plan(&plain, false);
    float **ref = vals_new(&plain);
    run_checked(&plain, pp, ref, NULL, "none");
    mg_plan_free(pp);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const policy_case *c = &cases[k];
        size_t budget = 0;
        if (c->policy == MG_CKPT_BUDGET) {
            /* the smallest that fits, as a budget of one byte's error
             * names it */
            rnet probe;
            ck_assert(rnet_make(&probe, c->policy, 0, 1) == MG_ERR_NOMEM);
            budget = th_budget_smallest();
            rnet_free(&probe);
        }
        rnet m;
        ck_assert_msg(rnet_make(&m, c->policy, c->compact, budget) == MG_OK,
                      "%s: %s", c->name, mg_last_error());
        mg_plan *pv = rnet_plan(&m, false), *pc = rnet_plan(&m, true);
        ck_assert_msg(n_views(pv) > 0, "%s: no view in the plan", c->name);
        ck_assert_int_eq(n_views(pc), 0);
        float **bound_v = vals_new(&m), **bound_c = vals_new(&m),
              **kept_v = vals_new(&m), **kept_c = vals_new(&m),
              **phased = vals_new(&m);
        run_checked(&m, pv, bound_v, NULL, c->name);
        run_checked(&m, pc, bound_c, NULL, c->name);
        run_checked(&m, pv, NULL, kept_v, c->name);
        run_checked(&m, pc, NULL, kept_c, c->name);
        run_phased(&m, pv, phased, c->name);
        same_bits(&m, bound_v, bound_c, "views vs copies, bound");
        same_bits(&m, kept_v, kept_c, "views vs copies, in the pool");
        same_bits(&m, bound_v, kept_v, "bound vs in the pool");
        same_bits(&m, bound_v, phased, "two phases vs one call");
        same_bits(&m, bound_v, ref, "policy vs none");
        vals_free(bound_v);
        vals_free(bound_c);
        vals_free(kept_v);
        vals_free(kept_c);
        vals_free(phased);
        mg_plan_free(pv);
        mg_plan_free(pc);
        rnet_free(&m);
    }
    vals_free(ref);
    rnet_free(&plain);
}
END_TEST

static mg_status read_only_hook(void *user, const mg_graph *g, mg_tensor t,
                                void *data) {
    (void)g, (void)t, (void)data;
    ++*(int *)user;
    return MG_OK;
}

/* Under policy none, the old copies' lifetimes (every reshape hooked, so
 * none is a view) against views: the same bits, each peak as predicted,
 * and a lower one with views. */
START_TEST(test_views_lower_peak) {
    rnet m;
    ck_assert(rnet_make(&m, MG_CKPT_NONE, 0, 0) == MG_OK);
    int calls = 0, ids[512], n_ids = 0;
    for (mg_tensor t = 0; t < m.g->n; t++)
        if (m.g->nodes[t].op == MG_OP_RESHAPE) {
            ck_assert(n_ids < 512);
            ck_assert(mg_tensor_add_hook(m.g, t, read_only_hook, &calls,
                                         &ids[n_ids++]) == MG_OK);
        }
    mg_plan *pc = rnet_plan(&m, false);
    ck_assert_int_eq(n_views(pc), 0);
    float **vc = vals_new(&m), **vv = vals_new(&m);
    run_checked(&m, pc, vc, NULL, "copies");
    ck_assert_int_eq(calls, n_ids);
    for (int i = 0; i < n_ids; i++)
        ck_assert(mg_tensor_remove_hook(m.g, ids[i]) == MG_OK);
    mg_plan *pv = rnet_plan(&m, false);
    /* every reshape but the output yr and the two of x that the backward
     * pass reads (the first matmul's and the product's operand): caller
     * memory, which may change before a backward phase */
    if (getenv("VIEWS_DUMP")) mg_plan_dump(pv, stderr);
    ck_assert_int_eq(n_views(pv), n_ids - 3);
    run_checked(&m, pv, vv, NULL, "views");
    same_bits(&m, vv, vc, "views vs hooked copies");
    mg_binding b[2 + NP + NO];
    const int nb = rnet_binds(&m, m.xv, vv, b);
    const size_t peak_c = mg_plan_predicted_peak(pc, b, nb),
                 peak_v = mg_plan_predicted_peak(pv, b, nb);
    ck_assert_msg(peak_v < peak_c, "views' peak %zu, copies' %zu", peak_v,
                  peak_c);
    mg_plan_arena ac, av;
    ck_assert(mg_plan_arena_info(pc, b, nb, &ac) == MG_OK);
    ck_assert(mg_plan_arena_info(pv, b, nb, &av) == MG_OK);
    ck_assert_msg(av.bytes < ac.bytes, "views' arena %zu, copies' %zu",
                  av.bytes, ac.bytes);
    vals_free(vc);
    vals_free(vv);
    mg_plan_free(pc);
    mg_plan_free(pv);
    rnet_free(&m);
}
END_TEST

/* Views of caller memory: x (an input) and mid (an output). A run writes
 * neither; in two phases, x may change before the backward phase, since
 * the reshapes of x that backward reads stay copies; and an output handed
 * back in the pool is a block of its own, which the caller may write. */
START_TEST(test_views_of_caller_memory) {
    rnet m;
    ck_assert(rnet_make(&m, MG_CKPT_NONE, 0, 0) == MG_OK);
    mg_plan *p = rnet_plan(&m, false);
    /* the backward phase reads views of pooled blocks (saved with them) */
    const mg_plan *bw = p->phase[1];
    int saved_views = 0;
    for (int32_t i = 0; i < bw->n_saved; i++)
        for (int32_t s = 0; s < p->n_steps; s++)
            saved_views += p->steps[s] == bw->saved[i] && p->step[s].view;
    ck_assert_int_gt(saved_views, 0);
    const size_t xbytes = mg_tensor_nbytes(m.g, m.x);
    float *x0 = malloc(xbytes), **one = vals_new(&m), **out = vals_new(&m);
    memcpy(x0, m.xv, xbytes);
    run_checked(&m, p, one, NULL, "one call");
    ck_assert(!memcmp(x0, m.xv, xbytes));

    /* two phases, x overwritten in between */
    mg_binding b[2 + NP];
    const int nb = rnet_binds(&m, m.xv, NULL, b);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_saved *sv = NULL;
    ck_assert(mg_exec_forward(ex, p, b, nb, 3, &sv) == MG_OK);
    for (int64_t i = 0; i < B * T * C; i++) m.xv[i] = 1e30f;
    ck_assert_msg(mg_exec_backward(ex, p, sv, b, nb) == MG_OK, "%s",
                  mg_last_error());
    for (int i = 0; i < NO; i++) {
        const void *d;
        if (i < 3) ck_assert(mg_saved_tensor_data(sv, m.outs[i], &d) == MG_OK);
        else ck_assert(mg_exec_tensor_data(ex, m.outs[i], &d) == MG_OK);
        memcpy(out[i], d, mg_tensor_nbytes(m.g, m.outs[i]));
    }
    same_bits(&m, one, out, "x changed between the phases");
    mg_saved_free(sv);
    memcpy(m.xv, x0, xbytes);

    /* outputs left in the pool: yr is a reshape of h, handed back as a
     * block of its own; writing into it changes no other output */
    ck_assert(mg_exec_run(ex, p, b, nb, 3) == MG_OK);
    const void *d[NO];
    for (int i = 0; i < NO; i++) {
        ck_assert(mg_exec_tensor_data(ex, m.outs[i], &d[i]) == MG_OK);
        for (int j = 0; j < i; j++) ck_assert_ptr_ne(d[i], d[j]);
    }
    memset((void *)d[1], 0xff, mg_tensor_nbytes(m.g, m.yr));
    for (int i = 0; i < NO; i++)
        if (i != 1)
            ck_assert(!memcmp(d[i], one[i], mg_tensor_nbytes(m.g, m.outs[i])));
    mg_exec_free(ex);
    free(x0);
    vals_free(one);
    vals_free(out);
    mg_plan_free(p);
    rnet_free(&m);
}
END_TEST

static mg_status zero_hook(void *user, const mg_graph *g, mg_tensor t,
                           void *data) {
    (void)user;
    memset(data, 0, mg_tensor_nbytes(g, t));
    return MG_OK;
}

/* A gradient hook may write into its tensor, so a hooked tensor is no
 * view; one added after compiling, on a gradient the plan made a view, is
 * refused with a message saying to compile again. A read-only hook on a
 * forward view sees its value. */
START_TEST(test_views_and_hooks) {
    rnet m;
    ck_assert(rnet_make(&m, MG_CKPT_NONE, 0, 0) == MG_OK);
    mg_plan *p = rnet_plan(&m, false);
    mg_tensor grad_view = MG_NO_TENSOR, fwd_view = MG_NO_TENSOR;
    for (int32_t s = 0; s < p->n_steps; s++) {
        if (!p->step[s].view) continue;
        const bool back = m.g->nodes[p->steps[s]].flags & MG_NODE_BACKWARD;
        if (back && grad_view == MG_NO_TENSOR) grad_view = p->steps[s];
        if (!back && fwd_view == MG_NO_TENSOR) fwd_view = p->steps[s];
    }
    ck_assert(grad_view != MG_NO_TENSOR && fwd_view != MG_NO_TENSOR);
    int calls = 0, id;
    ck_assert(mg_tensor_add_hook(m.g, fwd_view, read_only_hook, &calls, NULL) ==
              MG_OK);
    float **out = vals_new(&m);
    run_checked(&m, p, out, NULL, "a hook on a forward view");
    ck_assert_int_eq(calls, 1);
    ck_assert(mg_tensor_add_hook(m.g, grad_view, zero_hook, NULL, &id) ==
              MG_OK);
    mg_binding b[2 + NP];
    const int nb = rnet_binds(&m, m.xv, NULL, b);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_int_eq(mg_exec_run(ex, p, b, nb, 3), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "compile the plan again"), "%s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_plan *again = rnet_plan(&m, false);
    /* both hooked tensors are copies now */
    ck_assert_int_eq(n_views(again), n_views(p) - 2);
    run_checked(&m, again, out, NULL, "a hook on a gradient");
    mg_exec_free(ex);
    vals_free(out);
    mg_plan_free(p);
    mg_plan_free(again);
    rnet_free(&m);
}
END_TEST

/* A permute of a permute is built as one permute of the first's input
 * (an importer's Transpose of a Transpose): one copy, the same values. */
START_TEST(test_permute_of_permute) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 4, S(2, 3, 4, 5));
    mg_tensor kt = mg_permute(g, x, AX(0, 2, 3, 1)); /* (2, 4, 5, 3) */
    mg_tensor k = mg_transpose(g, kt, 2, 3);         /* (2, 4, 3, 5) */
    TH_OK_T("permute", k);
    ck_assert_int_eq(g->nodes[k].in[0], x);
    const int want[4] = {0, 2, 1, 3};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(g->nodes[k].attrs->perm[i], want[i]);
    /* a bad perm is the shape rule's error, not composed */
    ck_assert(mg_permute(g, kt, AX(0, 0, 1, 2)) == MG_NO_TENSOR);
    ck_assert_msg(strstr(mg_last_error(), "not a permutation"), "%s",
                  mg_last_error());
    float xv[120], kv[120];
    for (int i = 0; i < 120; i++) xv[i] = (float)i;
    mg_binding b[2] = {{x, xv}, {k, kv}};
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &k, 1, NULL, &p) == MG_OK);
    ck_assert_int_eq(p->n_steps, 1);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert(mg_exec_run(ex, p, b, 2, 0) == MG_OK);
    /* k[a][c][b][d] = x[a][b][c][d] */
    for (int a = 0; a < 2; a++)
        for (int bb = 0; bb < 3; bb++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 5; d++)
                    ck_assert(kv[((a * 4 + c) * 3 + bb) * 5 + d] ==
                              xv[((a * 3 + bb) * 4 + c) * 5 + d]);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("views");
    th_add_tcase(s, "views", 120,
                 TH_TESTS(test_views_bit_equal_every_policy,
                          test_views_lower_peak, test_views_of_caller_memory,
                          test_views_and_hooks, test_permute_of_permute));
    return th_run_suite(s);
}
