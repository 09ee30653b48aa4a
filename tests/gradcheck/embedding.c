/*
 * gradcheck/embedding.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * embedding (w.r.t. the table).
 */
#include "../helpers.h"

/* ------------------------------------------------------------ embedding */

START_TEST(test_gc_embedding) {
    gc_ctx g;
    gc_begin(&g, "embedding [5,3] by 9 indices (repeats)", 3600);
    mg_tensor tb = gc_p(&g, 2, S(5, 3));
    mg_tensor idx = gc_labels(&g, 9, 5);
    gc_check(&g, mg_embedding(g.g, tb, idx));
    gc_end(&g);

    gc_begin(&g, "tanh(embedding(table, idx)) * embedding(table, idx2)", 3601);
    tb = gc_p(&g, 2, S(4, 2));
    mg_tensor i1 = gc_labels(&g, 6, 4), i2 = gc_labels(&g, 6, 4);
    gc_check(&g, mg_mul(g.g, mg_tanh(g.g, mg_embedding(g.g, tb, i1)),
                        mg_embedding(g.g, tb, i2)));
    gc_end(&g);
}
END_TEST

TH_PART(gradcheck_embedding_tcase, "embedding", 0, test_gc_embedding)
