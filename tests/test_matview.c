/*
 * test_matview.c - a transpose read by a matmul is the matmul's transpose
 * flag, not a copy (issue 46): mg_matmul reads a permute that swaps only
 * its last two axes from the permute's input with the flag flipped, and no
 * other permute; the gradients stay exact (float64 finite differences, the
 * forms an importer and the ATen capture produce: x W^T with a 2-D weight
 * shared across a batch, q k^T batched, both operands transposed, a
 * transpose that another op reads too); every checkpoint policy gives the
 * bits of policy none; predicted peaks equal measured ones, and no plan
 * step is a permute.
 */
#include "helpers.h"

#include "graph/graph.h"
#include "rewrite/schedule.h"

/* ------------------------------------------------------------ the fold */

static const mg_node *node(const mg_graph *g, mg_tensor t) {
    ck_assert_msg(t != MG_NO_TENSOR, "%s", mg_last_error());
    return &g->nodes[t];
}

START_TEST(test_fold_structure) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_F32, 2, S(3, 4));
    mg_tensor b = mg_input(g, "b", MG_F32, 2, S(3, 5));
    mg_tensor at = mg_transpose(g, a, 0, 1); /* [4, 3] */
    /* at b: a^T b, read from a */
    const mg_node *n = node(g, mg_matmul(g, at, b, 0, 0));
    ck_assert_int_eq(n->in[0], a);
    ck_assert_int_eq(n->attrs->trans_a, 1);
    ck_assert_int_eq(n->attrs->trans_b, 0);
    /* at^T (the flag on a transpose): a itself, no flag */
    mg_tensor c = mg_input(g, "c", MG_F32, 2, S(4, 5));
    n = node(g, mg_matmul(g, at, c, 1, 0));
    ck_assert_int_eq(n->in[0], a);
    ck_assert_int_eq(n->attrs->trans_a, 0);
    /* batched, the last two axes of 4: q k^T from k */
    mg_tensor q = mg_input(g, "q", MG_F32, 4, S(2, 3, 6, 4));
    mg_tensor k = mg_input(g, "k", MG_F32, 4, S(2, 3, 6, 4));
    n = node(g, mg_matmul(g, q, mg_transpose(g, k, -2, -1), 0, 0));
    ck_assert_int_eq(n->in[1], k);
    ck_assert_int_eq(n->attrs->trans_b, 1);
    /* a permute that moves a batch axis is no transpose flag: kept */
    mg_tensor x = mg_input(g, "x", MG_F32, 3, S(4, 2, 6));
    mg_tensor xp = mg_permute(g, x, AX(1, 0, 2)); /* [2, 4, 6] */
    mg_tensor w = mg_input(g, "w", MG_F32, 2, S(6, 5));
    n = node(g, mg_matmul(g, xp, w, 0, 0));
    ck_assert_int_eq(n->in[0], xp);
    ck_assert_int_eq(n->attrs->trans_a, 0);
    /* nor one that swaps the last two and a batch axis together */
    mg_tensor y = mg_input(g, "y", MG_F32, 3, S(2, 6, 4));
    mg_tensor yp = mg_permute(g, y, AX(2, 0, 1)); /* [4, 2, 6] */
    mg_tensor w3 = mg_input(g, "w3", MG_F32, 3, S(4, 6, 5));
    n = node(g, mg_matmul(g, yp, w3, 0, 0));
    ck_assert_int_eq(n->in[0], yp);
    /* a bad operand is still the shape rule's error, not a crash */
    mg_tensor bad = mg_matmul(g, at, at, 0, 0); /* [4,3] x [4,3] */
    th_expect_fail("matmul of a^T a^T", bad, MG_ERR_SHAPE, "matmul",
                   "inner dims");
    bad = mg_matmul(g, MG_NO_TENSOR, b, 0, 0);
    ck_assert(bad == MG_NO_TENSOR);
    mg_clear_error();
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------- gradients, float64 FD */

START_TEST(test_fold_gradcheck) {
    gc_ctx c;
    /* an importer's Linear: x [B, T, K] times W^T, W [N, K] shared */
    gc_begin(&c, "matmul(x, transpose(W)) shared weight", 4601);
    mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
    mg_tensor W = gc_x(&c, 2, S(5, 4));
    gc_check(&c, mg_matmul(c.g, x, mg_transpose(c.g, W, 0, 1), 0, 0));
    gc_end(&c);

    /* scores q k^T, batched */
    gc_begin(&c, "matmul(q, transpose(k, -2, -1)) batched", 4602);
    mg_tensor q = gc_x(&c, 4, S(2, 2, 3, 4));
    mg_tensor k = gc_x(&c, 4, S(2, 2, 5, 4));
    gc_check(&c, mg_matmul(c.g, q, mg_transpose(c.g, k, -2, -1), 0, 0));
    gc_end(&c);

    /* both transposed, one of them with the flag already set */
    gc_begin(&c, "matmul(transpose(a), transpose(b), 0, 1)", 4603);
    mg_tensor a = gc_x(&c, 2, S(4, 3));
    mg_tensor b = gc_x(&c, 2, S(4, 5));
    gc_check(&c, mg_matmul(c.g, mg_transpose(c.g, a, 0, 1),
                           mg_transpose(c.g, b, 0, 1), 0, 1));
    gc_end(&c);

    /* a transposed batched a with a 2-D b */
    gc_begin(&c, "matmul(transpose(a3), w)", 4604);
    mg_tensor a3 = gc_x(&c, 3, S(2, 4, 3));
    mg_tensor w = gc_x(&c, 2, S(4, 5));
    gc_check(&c, mg_matmul(c.g, mg_transpose(c.g, a3, 1, 2), w, 0, 0));
    gc_end(&c);

    /* the transpose read by a mul too: it is computed for the mul, and
     * the matmul still reads its input */
    gc_begin(&c, "matmul(transpose(a), b) + transpose(a) transpose(b)", 4605);
    a = gc_x(&c, 2, S(4, 4));
    b = gc_x(&c, 2, S(4, 4));
    mg_tensor at = mg_transpose(c.g, a, 0, 1);
    mg_tensor p = mg_matmul(c.g, at, b, 0, 0); /* [4, 4] */
    gc_check(&c, mg_add(c.g, p, mg_mul(c.g, at, mg_transpose(c.g, b, 0, 1))));
    gc_end(&c);
}
END_TEST

/* ---------------------------- a network: policies, bits, the peak */

enum { NB = 4, NT = 8, ND = 16, NL = 4 };

typedef struct tnet {
    mg_graph *g;
    mg_tensor x, gy, y, w[NL], grads[NL], outs[1 + NL];
    float *xv, *gyv, *wv[NL];
} tnet;

/* NL layers of h = tanh(h W^T) (W [ND, ND] stored as a Linear's, [out,
 * in]), with h [NB, NT, ND]. */
static mg_status tnet_make(tnet *m, mg_ckpt_policy policy, size_t budget) {
    memset(m, 0, sizeof *m);
    mg_graph *g = m->g = mg_graph_new();
    m->x = mg_input(g, "x", MG_F32, 3, S(NB, NT, ND));
    m->gy = mg_input(g, "gy", MG_F32, 3, S(NB, NT, ND));
    mg_tensor h = m->x, tagged = MG_NO_TENSOR;
    for (int l = 0; l < NL; l++) {
        m->w[l] = mg_param(g, "w", MG_F32, 2, S(ND, ND));
        h = mg_tanh(g, mg_matmul(g, h, mg_transpose(g, m->w[l], 0, 1), 0, 0));
        if (l == 1) tagged = h;
    }
    m->y = h;
    TH_OK_T("tnet", m->y);
    mg_checkpoints ck = {.policy = policy, .budget_bytes = budget};
    if (policy == MG_CKPT_COLLECTION) {
        ck.tensors = &tagged;
        ck.n_tensors = 1;
    }
    const mg_status st =
        mg_gradients(g, &m->y, 1, &m->gy, m->w, NL, &ck, m->grads);
    m->outs[0] = m->y;
    memcpy(m->outs + 1, m->grads, sizeof m->grads);
    th_rng r;
    th_rng_init(&r, 4646);
    m->xv = malloc(sizeof(float) * NB * NT * ND);
    m->gyv = malloc(sizeof(float) * NB * NT * ND);
    th_fill_f32(&r, m->xv, NB * NT * ND, -1, 1, 0);
    th_fill_f32(&r, m->gyv, NB * NT * ND, -1, 1, 0);
    for (int l = 0; l < NL; l++) {
        m->wv[l] = malloc(sizeof(float) * ND * ND);
        th_fill_f32(&r, m->wv[l], ND * ND, -0.4, 0.4, 0);
    }
    return st;
}

static void tnet_free(tnet *m) {
    mg_graph_free(m->g);
    free(m->xv);
    free(m->gyv);
    for (int l = 0; l < NL; l++) free(m->wv[l]);
}

/* Run m's plan of its outputs into out (caller memory); check the
 * measured pool peak against the prediction; the peak. */
static size_t tnet_run(const tnet *m, float **out, const char *what) {
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, m->outs, 1 + NL, NULL, &p) == MG_OK,
                  "%s: %s", what, mg_last_error());
    mg_binding b[2 + NL + 1 + NL];
    int nb = 0;
    b[nb++] = (mg_binding){m->x, m->xv};
    b[nb++] = (mg_binding){m->gy, m->gyv};
    for (int l = 0; l < NL; l++) b[nb++] = (mg_binding){m->w[l], m->wv[l]};
    for (int i = 0; i < 1 + NL; i++) b[nb++] = (mg_binding){m->outs[i], out[i]};
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 1) == MG_OK, "%s: %s", what,
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    const size_t predicted = mg_plan_predicted_peak(p, b, nb);
    ck_assert_msg(st.peak_bytes_in_use == predicted,
                  "%s: measured peak %zu, predicted %zu", what,
                  st.peak_bytes_in_use, predicted);
    /* no permute is left in the plan: every W^T is a flag */
    for (int32_t s = 0; s < p->n_steps; s++)
        ck_assert_msg(m->g->nodes[p->steps[s]].op != MG_OP_PERMUTE,
                      "%s: step %d is a permute", what, (int)s);
    mg_exec_free(ex);
    mg_plan_free(p);
    return st.peak_bytes_in_use;
}

static float **vals_new(void) {
    float **v = malloc((1 + NL) * sizeof *v);
    v[0] = calloc(NB * NT * ND, sizeof(float));
    for (int l = 0; l < NL; l++) v[1 + l] = calloc(ND * ND, sizeof(float));
    return v;
}

static void vals_free(float **v) {
    for (int i = 0; i < 1 + NL; i++) free(v[i]);
    free(v);
}

START_TEST(test_fold_policies) {
    tnet ref;
    ck_assert_msg(tnet_make(&ref, MG_CKPT_NONE, 0) == MG_OK, "%s",
                  mg_last_error());
    float **want = vals_new();
    tnet_run(&ref, want, "none");
    /* budget: the smallest that fits, a plan that must recompute */
    tnet probe;
    ck_assert(tnet_make(&probe, MG_CKPT_BUDGET, 1) == MG_ERR_NOMEM);
    const size_t smallest = th_budget_smallest();
    tnet_free(&probe);
    const mg_ckpt_policy pols[] = {MG_CKPT_COLLECTION, MG_CKPT_MEMORY,
                                   MG_CKPT_SPEED, MG_CKPT_BUDGET};
    for (size_t i = 0; i < sizeof pols / sizeof *pols; i++) {
        tnet m;
        ck_assert_msg(
            tnet_make(&m, pols[i], pols[i] == MG_CKPT_BUDGET ? smallest : 0) ==
                MG_OK,
            "%s: %s", mg_ckpt_policy_name(pols[i]), mg_last_error());
        float **got = vals_new();
        tnet_run(&m, got, mg_ckpt_policy_name(pols[i]));
        ck_assert_msg(!memcmp(got[0], want[0], sizeof(float) * NB * NT * ND),
                      "%s: y differs from none's",
                      mg_ckpt_policy_name(pols[i]));
        for (int l = 0; l < NL; l++)
            ck_assert_msg(
                !memcmp(got[1 + l], want[1 + l], sizeof(float) * ND * ND),
                "%s: gradient of w%d differs from none's",
                mg_ckpt_policy_name(pols[i]), l);
        vals_free(got);
        tnet_free(&m);
    }
    vals_free(want);
    tnet_free(&ref);
}
END_TEST

/* A transpose the product reads in place has no gradient from that
 * product; asked for as an x it is refused, naming it, where a zero would
 * be silently wrong. Its input's gradient is there. */
START_TEST(test_folded_transpose_as_x_is_refused) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_F64, 2, S(3, 4));
    mg_tensor b = mg_input(g, "b", MG_F64, 2, S(3, 5));
    mg_tensor at = mg_transpose(g, a, 0, 1);
    mg_tensor loss = mg_sum(g, mg_matmul(g, at, b, 0, 0), 0, NULL, 0);
    ck_assert_msg(loss != MG_NO_TENSOR, "%s", mg_last_error());
    const int32_t n = mg_graph_num_tensors(g);
    mg_tensor grad = MG_NO_TENSOR;
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &at, 1, NULL, &grad),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "transpose that mg_matmul reads"),
                  "%s", mg_last_error());
    ck_assert_int_eq(mg_graph_num_tensors(g), n); /* the graph untouched */
    mg_clear_error();
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &a, 1, NULL, &grad),
                     MG_OK);
    ck_assert(grad != MG_NO_TENSOR);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("matview", "core", 120, test_fold_structure, test_fold_gradcheck,
        test_fold_policies, test_folded_transpose_as_x_is_refused)
