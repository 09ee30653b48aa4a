/*
 * test_analysis.c - the igraph view of a graph (analysis.c) that
 * mg_gradients builds once per call: its articulation points, the memory
 * policy's segment boundaries, against a brute-force oracle (remove each
 * node, count the components) on random graphs of unary and binary ops,
 * over all nodes and over subsets (the view's ids mapped and back,
 * repeated inputs, several components); chains and diamonds whose answer
 * is known; and its topological order, which mg_gradients takes on a graph
 * rewired out of creation order.
 */
#include "helpers.h"

#include "graph/graph.h"

#include <math.h>

/* Union-find root of v. */
static int32_t uf_find(int32_t *parent, int32_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
}

/* Connected components of the included nodes other than `gone`, edges
 * undirected and between included nodes only. */
static int32_t components(const mg_graph *g, const bool *include,
                          mg_tensor gone, int32_t *parent) {
    int32_t n = 0;
    for (int32_t v = 0; v < g->n; v++) {
        parent[v] = v;
        n += include[v] && v != gone;
    }
    for (int32_t v = 0; v < g->n; v++)
        for (int k = 0; include[v] && v != gone && k < g->nodes[v].n_in; k++) {
            const mg_tensor in = g->nodes[v].in[k];
            if (!include[in] || in == gone) continue;
            const int32_t a = uf_find(parent, v), b = uf_find(parent, in);
            if (a != b) {
                parent[a] = b;
                n--;
            }
        }
    return n;
}

/* The oracle: v is an articulation point when removing it leaves more
 * components than there were. Writes them in id order. */
static int32_t brute_force_points(const mg_graph *g, const bool *include,
                                  mg_tensor *out) {
    int32_t *parent = malloc((size_t)g->n * sizeof *parent);
    ck_assert_ptr_nonnull(parent);
    const int32_t whole = components(g, include, MG_NO_TENSOR, parent);
    int32_t n = 0;
    for (mg_tensor v = 0; v < g->n; v++)
        if (include[v] && components(g, include, v, parent) > whole)
            out[n++] = v;
    free(parent);
    return n;
}

/* The view's articulation points of the included nodes, in id order. */
static int32_t view_points(const char *what, const mg_graph *g,
                           const bool *include, mg_tensor *out) {
    mgi_graph_view *v = NULL;
    bool *mark = calloc((size_t)g->n, sizeof *mark);
    ck_assert_ptr_nonnull(mark);
    ck_assert_msg(mgi_graph_view_new(g, include, NULL, &v, "test") == MG_OK,
                  "%s: %s", what, mg_last_error());
    ck_assert_msg(mgi_graph_view_articulation_points(v, mark) == MG_OK,
                  "%s: %s", what, mg_last_error());
    mgi_graph_view_free(v);
    int32_t n = 0;
    for (mg_tensor t = 0; t < g->n; t++) {
        /* a node outside the view is never marked */
        ck_assert_msg(!mark[t] || include[t], "%s: #%d is outside", what, t);
        if (mark[t]) out[n++] = t;
    }
    free(mark);
    return n;
}

static void check_same(const char *what, const mg_graph *g,
                       const bool *include) {
    mg_tensor *got = malloc((size_t)g->n * sizeof *got),
              *want = malloc((size_t)g->n * sizeof *want);
    ck_assert(got && want);
    const int32_t n_got = view_points(what, g, include, got);
    const int32_t n_want = brute_force_points(g, include, want);
    ck_assert_msg(n_got == n_want, "%s: %d points, brute force %d", what,
                  n_got, n_want);
    for (int32_t i = 0; i < n_got; i++)
        ck_assert_msg(got[i] == want[i],
                      "%s: point %d is #%d, brute force #%d", what, i, got[i],
                      want[i]);
    free(got);
    free(want);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

START_TEST(test_random_graphs_agree_with_brute_force) {
    const int64_t s[1] = {2};
    for (int trial = 0; trial < 400; trial++) {
        mg_graph *g = mg_graph_new();
        const int n_leaves = 1 + (int)(next_u32() % 3);
        const int n_ops = 1 + (int)(next_u32() % 60);
        /* a low "reach" makes long thin graphs with many points, a high
         * one dense graphs with few */
        const int reach = 1 + (int)(next_u32() % 8);
        for (int i = 0; i < n_leaves; i++) mg_param(g, NULL, MG_F32, 1, s);
        for (int i = 0; i < n_ops; i++) {
            const int32_t n = mg_graph_num_tensors(g);
            const mg_tensor a =
                n - 1 -
                (mg_tensor)(next_u32() % (uint32_t)(reach < n ? reach : n));
            const mg_tensor b = (mg_tensor)(next_u32() % (uint32_t)n);
            mg_tensor t = next_u32() % 3 ? mg_tanh(g, a) : mg_add(g, a, b);
            ck_assert_int_ne(t, MG_NO_TENSOR);
        }
        bool *all = malloc((size_t)g->n), *some = malloc((size_t)g->n);
        ck_assert(all && some);
        for (int32_t v = 0; v < g->n; v++) {
            all[v] = true;
            some[v] = next_u32() % 5 != 0;
        }
        char what[64];
        snprintf(what, sizeof what, "graph %d, all nodes", trial);
        check_same(what, g, all);
        snprintf(what, sizeof what, "graph %d, a subset", trial);
        check_same(what, g, some);
        free(all);
        free(some);
        mg_graph_free(g);
    }
}
END_TEST

START_TEST(test_known_answers) {
    const int64_t s[1] = {2};
    mg_graph *g = mg_graph_new();
    /* p - a - b = c (mul(b, b): a repeated input) - d, and a diamond
     * d - {e, f} - h: the points are a, b, c and d; e, f, h are not */
    mg_tensor p = mg_param(g, "p", MG_F32, 1, s);
    mg_tensor a = mg_tanh(g, p), b = mg_tanh(g, a), c = mg_mul(g, b, b);
    mg_tensor d = mg_tanh(g, c), e = mg_tanh(g, d), f = mg_exp(g, d);
    mg_tensor h = mg_add(g, e, f);
    ck_assert_int_ne(h, MG_NO_TENSOR);
    mg_tensor out[16];
    bool all[16];
    ck_assert_int_le(g->n, 16);
    for (int32_t v = 0; v < g->n; v++) all[v] = true;
    const int32_t n = view_points("known answers", g, all, out);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(out[0], a);
    ck_assert_int_eq(out[1], b);
    ck_assert_int_eq(out[2], c);
    ck_assert_int_eq(out[3], d);
    mg_graph_free(g);
}
END_TEST

/* The view's order puts every node after its inputs, where the creation
 * order does not; a cycle is refused, naming an op on it. */
START_TEST(test_view_order_and_cycle) {
    const int64_t s3[1] = {3};
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F64, 1, s3);
    mg_tensor a = mg_neg(g, x);        /* will read c, made after it */
    mg_tensor c = mg_scale(g, x, 2.0);
    mg_tensor d = mg_exp(g, a);
    TH_OK_T("d", d);
    ck_assert(mg_tensor_set_input(g, a, 0, c) == MG_OK);
    mg_tensor order[8];
    int32_t pos[8], n = -1;
    mgi_graph_view *v = NULL;
    ck_assert(mgi_graph_view_new(g, NULL, NULL, &v, "test") == MG_OK);
    ck_assert_msg(mgi_graph_view_topo_order(v, order, &n) == MG_OK, "%s",
                  mg_last_error());
    mgi_graph_view_free(v);
    ck_assert_int_eq(n, g->n);
    for (int32_t i = 0; i < n; i++) pos[order[i]] = i;
    for (int32_t t = 0; t < g->n; t++)
        for (int k = 0; k < g->nodes[t].n_in; k++)
            ck_assert_msg(pos[g->nodes[t].in[k]] < pos[t],
                          "#%d is ordered before its input #%d", t,
                          g->nodes[t].in[k]);
    /* c = scale(d): c -> a -> d -> c */
    ck_assert(mg_tensor_set_input(g, c, 0, d) == MG_OK);
    ck_assert(mgi_graph_view_new(g, NULL, NULL, &v, "test") == MG_OK);
    ck_assert_int_eq(mgi_graph_view_topo_order(v, order, &n), MG_ERR_CYCLE);
    ck_assert_msg(strstr(mg_last_error(), "cycle") != NULL, "%s",
                  mg_last_error());
    mgi_graph_view_free(v);
    mg_graph_free(g);
}
END_TEST

/* mg_gradients on a graph rewired out of creation order takes its order
 * from the same igraph view as the memory policy's articulation points:
 * the gradient must be right under either policy. L = sum(tanh(exp(-2x)))
 * with the -2x made from a node created before its input. */
START_TEST(test_rewired_gradients) {
    const int64_t s3[1] = {3};
    const mg_ckpt_policy policies[2] = {MG_CKPT_NONE, MG_CKPT_MEMORY};
    for (int i = 0; i < 2; i++) {
        mg_graph *g = mg_graph_new();
        mg_tensor x = mg_input(g, "x", MG_F64, 1, s3);
        mg_tensor a = mg_neg(g, x);
        mg_tensor c = mg_scale(g, x, 2.0);
        ck_assert(mg_tensor_set_input(g, a, 0, c) == MG_OK);
        mg_tensor d = mg_exp(g, a), e = mg_tanh(g, d);
        mg_tensor L = mg_sum(g, e, 0, NULL, 0), gx = MG_NO_TENSOR;
        TH_OK_T("L", L);
        const mg_checkpoints ck = {.policy = policies[i]};
        ck_assert_msg(mg_gradients(g, &L, 1, NULL, &x, 1, &ck, &gx) == MG_OK,
                      "%s: %s", mg_ckpt_policy_name(policies[i]),
                      mg_last_error());
        double xv[3] = {0.5, -1, 2}, gv[3];
        mg_binding in = {x, xv};
        void *bufs[1] = {gv};
        TH_RUN_OK(mg_ckpt_policy_name(policies[i]), g, 1, &gx, bufs, 1, &in,
                  0);
        for (int j = 0; j < 3; j++) {
            const double dv = exp(-2 * xv[j]), t = tanh(dv);
            const double want = (1 - t * t) * dv * -2;
            ck_assert_msg(fabs(gv[j] - want) < 1e-12, "%s: dL/dx[%d] = %g, not %g",
                          mg_ckpt_policy_name(policies[i]), j, gv[j], want);
        }
        mg_graph_free(g);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("analysis");
    th_add_tcase(
        s, "articulation points", 120,
        TH_TESTS(test_random_graphs_agree_with_brute_force, test_known_answers));
    th_add_tcase(s, "order", 0,
                 TH_TESTS(test_view_order_and_cycle, test_rewired_gradients));
    return th_run_suite(s);
}
