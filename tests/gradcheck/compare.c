/*
 * gradcheck/compare.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * where (to a and b, with broadcasting), clamp (finite and infinite
 * bounds), maximum and minimum, and the comparisons and logical ops
 * inside functions that select with them (their own results are constants
 * to the gradient, which finite differences agree with away from the
 * points where a comparison flips).
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ where */

typedef struct wcase {
    int ndc, nda, ndb;
    int64_t sc[3], sa[3], sb[3];
    const char *desc;
} wcase;

static const wcase wcases[] = {
    {2, 2, 2, {3, 4}, {3, 4}, {3, 4}, "cond, a, b [3,4]"},
    {2, 1, 2, {3, 1}, {4}, {3, 4}, "cond [3,1], a [4], b [3,4]"},
    {1, 0, 2, {4}, {0}, {3, 1}, "cond [4], a scalar, b [3,1]"},
    {3, 2, 1, {2, 1, 4}, {3, 1}, {1}, "cond [2,1,4], a [3,1], b [1]"},
};

START_TEST(test_gc_where) {
    for (int k = 0; k < (int)(sizeof wcases / sizeof wcases[0]); k++) {
        const wcase *w = &wcases[k];
        char name[96];
        snprintf(name, sizeof name, "where %s", w->desc);
        gc_ctx c;
        gc_begin(&c, name, 4000 + k);
        /* about half the entries true; exact zeros count as false */
        mg_tensor cv = gc_const(&c, w->ndc, w->sc, -1, 1);
        mg_tensor zero = mg_fill(c.g, MG_F64, 0, NULL, 0.0);
        mg_tensor cond = mg_gt(c.g, cv, zero);
        mg_tensor a = gc_x(&c, w->nda, w->sa), b = gc_x(&c, w->ndb, w->sb);
        gc_check(&c, mg_where(c.g, cond, a, b));
        gc_end(&c);
    }
    /* a float cond read as nonzero directly, and where feeding itself */
    gc_ctx c;
    gc_begin(&c, "where(c, tanh(where(c, x, y)), x)", 4010);
    mg_tensor cv = gc_const(&c, 2, S(2, 5), -1, 1);
    mg_tensor x = gc_x(&c, 2, S(2, 5)), y = gc_x(&c, 1, S(5));
    gc_check(&c, mg_where(c.g, cv, mg_tanh(c.g, mg_where(c.g, cv, x, y)), x));
    gc_end(&c);
}
END_TEST

/* ------------------------------------------------------------------ clamp */

START_TEST(test_gc_clamp) {
    static const double lo[3] = {-1.0, -INFINITY, -0.5},
                        hi[3] = {1.5, 0.5, INFINITY};
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "clamp(x, %g, %g)", lo[k], hi[k]);
        gc_ctx c;
        gc_begin(&c, name, 4100 + k);
        mg_tensor x = gc_x_range(&c, 2, S(4, 5), -3, 3);
        gc_check(&c, mg_clamp(c.g, x, lo[k], hi[k]));
        gc_end(&c);
    }
}
END_TEST

/* ---------------------------------------------------------- maximum, minimum
 * Random operands have no ties; test_maximum_minimum in ops/compare.c
 * checks the tie rule. */
START_TEST(test_gc_maximum_minimum) {
    static const struct {
        int nda, ndb;
        int64_t sa[2], sb[2];
        const char *desc;
    } cases[3] = {{2, 2, {3, 4}, {3, 4}, "[3,4] . [3,4]"},
                  {2, 1, {3, 4}, {4}, "[3,4] . [4]"},
                  {2, 2, {3, 1}, {1, 4}, "[3,1] . [1,4]"}};
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", op ? "minimum" : "maximum",
                     cases[k].desc);
            gc_ctx c;
            gc_begin(&c, name, 4200 + 10 * op + k);
            mg_tensor a = gc_x(&c, cases[k].nda, cases[k].sa);
            mg_tensor b = gc_x(&c, cases[k].ndb, cases[k].sb);
            gc_check(&c, op ? mg_minimum(c.g, a, b) : mg_maximum(c.g, a, b));
            gc_end(&c);
        }
}
END_TEST

/* ------------------------------------------------------ comparisons, logic
 * Each comparison picks between a and b through where, and as a 1/0 factor
 * of a product (its gradient is the factor alone). */
START_TEST(test_gc_comparisons) {
    static const char *names[9] = {"eq",          "ne",         "lt",
                                   "le",          "gt",         "ge",
                                   "logical_and", "logical_or", "logical_not"};
    for (int k = 0; k < 9; k++) {
        gc_ctx c;
        gc_begin(&c, names[k], 4300 + k);
        mg_tensor a = gc_x(&c, 2, S(3, 4)), b = gc_x(&c, 1, S(4));
        /* eq and ne need equal values somewhere: a against a rounded copy
         * of itself would do, but a against itself is simplest */
        mg_tensor p = a, q = b;
        if (k <= 1)
            q = mg_where(c.g, mg_fill(c.g, MG_F64, 2, S(3, 4), 1.0), a,
                         b); /* q is a: eq holds everywhere */
        mg_tensor zero = mg_fill(c.g, MG_F64, 0, NULL, 0.0);
        if (k >= 6) { /* the logical ops of signs */
            p = mg_gt(c.g, a, zero);
            q = mg_lt(c.g, b, zero);
        }
        mg_tensor m;
        switch (k) {
        case 0: m = mg_eq(c.g, p, q); break;
        case 1: m = mg_ne(c.g, p, q); break;
        case 2: m = mg_lt(c.g, p, q); break;
        case 3: m = mg_le(c.g, p, q); break;
        case 4: m = mg_gt(c.g, p, q); break;
        case 5: m = mg_ge(c.g, p, q); break;
        case 6: m = mg_logical_and(c.g, p, q); break;
        case 7: m = mg_logical_or(c.g, p, q); break;
        default: m = mg_logical_not(c.g, p); break;
        }
        mg_tensor y = mg_add(c.g, mg_where(c.g, m, a, mg_sin(c.g, b)),
                             mg_mul(c.g, m, mg_tanh(c.g, a)));
        gc_check(&c, y);
        gc_end(&c);
    }
}
END_TEST

TH_PART(gradcheck_compare_tcase, "compare", 120, test_gc_where, test_gc_clamp,
        test_gc_maximum_minimum, test_gc_comparisons)
