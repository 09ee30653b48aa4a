/*
 * test_analysis.c - mgi_graph_articulation_points, the memory policy's
 * segment boundaries: its view of the graph for igraph (the included
 * nodes only, their ids mapped and back, repeated inputs, several
 * components) against igraph run on the whole edge list and filtered
 * here, on random graphs of unary and binary ops; and chains and diamonds
 * whose answer is known.
 */
#include "helpers.h"

#include "graph/graph.h"

#include <igraph.h>

/* igraph's articulation points of the nodes in include, in id order. */
static int32_t igraph_points(const mg_graph *g, const bool *include,
                             mg_tensor *out) {
    igraph_vector_int_t edges, res;
    ck_assert(igraph_vector_int_init(&edges, 0) == IGRAPH_SUCCESS);
    for (int32_t v = 0; v < g->n; v++)
        for (int k = 0; include[v] && k < g->nodes[v].n_in; k++)
            if (include[g->nodes[v].in[k]]) {
                igraph_vector_int_push_back(&edges, g->nodes[v].in[k]);
                igraph_vector_int_push_back(&edges, v);
            }
    igraph_t ig;
    ck_assert(igraph_create(&ig, &edges, g->n, IGRAPH_UNDIRECTED) ==
              IGRAPH_SUCCESS);
    ck_assert(igraph_vector_int_init(&res, 0) == IGRAPH_SUCCESS);
    ck_assert(igraph_articulation_points(&ig, &res) == IGRAPH_SUCCESS);
    bool *mark = calloc((size_t)g->n, 1);
    ck_assert_ptr_nonnull(mark);
    for (igraph_integer_t i = 0; i < igraph_vector_int_size(&res); i++)
        mark[VECTOR(res)[i]] = true;
    int32_t n = 0;
    /* nodes left out are isolated vertices here: never points */
    for (int32_t v = 0; v < g->n; v++)
        if (mark[v]) out[n++] = v;
    free(mark);
    igraph_vector_int_destroy(&res);
    igraph_vector_int_destroy(&edges);
    igraph_destroy(&ig);
    return n;
}

static void check_same(const char *what, const mg_graph *g,
                       const bool *include) {
    mg_tensor *got = malloc((size_t)g->n * sizeof *got),
              *want = malloc((size_t)g->n * sizeof *want);
    ck_assert(got && want);
    int32_t n_got = -1;
    ck_assert_msg(mgi_graph_articulation_points(g, include, got, &n_got) ==
                      MG_OK,
                  "%s: %s", what, mg_last_error());
    const int32_t n_want = igraph_points(g, include, want);
    ck_assert_msg(n_got == n_want, "%s: %d points, igraph %d", what, n_got,
                  n_want);
    for (int32_t i = 0; i < n_got; i++)
        ck_assert_msg(got[i] == want[i], "%s: point %d is #%d, igraph #%d",
                      what, i, got[i], want[i]);
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

START_TEST(test_random_graphs_agree_with_igraph) {
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
    int32_t n = -1;
    ck_assert(mgi_graph_articulation_points(g, NULL, out, &n) == MG_OK);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(out[0], a);
    ck_assert_int_eq(out[1], b);
    ck_assert_int_eq(out[2], c);
    ck_assert_int_eq(out[3], d);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("analysis");
    th_add_tcase(
        s, "articulation points", 120,
        TH_TESTS(test_random_graphs_agree_with_igraph, test_known_answers));
    return th_run_suite(s);
}
