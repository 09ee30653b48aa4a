/*
 * gradcheck/reduce.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for sum,
 * mean and broadcast_to.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ reduce */

typedef struct rcase {
    int naxes;
    int axes[3];
    int keepdims;
    const char *desc;
} rcase;

static const rcase rcases[] = {
    {1, {0}, 0, "axis 0"},          {1, {1}, 0, "axis 1"},
    {1, {-1}, 0, "axis -1"},        {1, {-1}, 1, "axis -1 keepdims"},
    {2, {0, 2}, 0, "axes {0,2}"},   {2, {0, -1}, 1, "axes {0,-1} keepdims"},
    {2, {-2, 0}, 0, "axes {-2,0}"}, {0, {0}, 0, "all"},
    {0, {0}, 1, "all keepdims"},    {3, {0, 1, 2}, 0, "axes {0,1,2}"},
};
#define N_RCASES ((int)(sizeof rcases / sizeof rcases[0]))

static void gc_reduce(int mean) {
    for (int k = 0; k < N_RCASES; k++) {
        char name[96];
        gc_ctx c;
        const rcase *rc = &rcases[k];
        snprintf(name, sizeof name, "%s [2,3,4] %s", mean ? "mean" : "sum",
                 rc->desc);
        gc_begin(&c, name, 900 + 20 * mean + k);
        mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
        mg_tensor y = mean ? mg_mean(c.g, x, rc->naxes, rc->axes, rc->keepdims)
                           : mg_sum(c.g, x, rc->naxes, rc->axes, rc->keepdims);
        gc_check(&c, y);
        gc_end(&c);
    }
}

START_TEST(test_gc_sum) { gc_reduce(0); }
END_TEST

START_TEST(test_gc_mean) { gc_reduce(1); }
END_TEST

/* ------------------------------------------------------------ broadcast_to */

START_TEST(test_gc_broadcast_to) {
    static const struct {
        int nd;
        int64_t s[3];
        int ndo;
        int64_t so[3];
        const char *desc;
    } cases[] = {
        {1, {3}, 2, {2, 3}, "[3]->[2,3]"},
        {2, {2, 1}, 2, {2, 3}, "[2,1]->[2,3]"},
        {3, {1, 3, 1}, 3, {2, 3, 4}, "[1,3,1]->[2,3,4]"},
        {0, {0}, 2, {2, 3}, "scalar->[2,3]"},
        {2, {2, 1}, 3, {3, 2, 2}, "[2,1]->[3,2,2]"},
        {2, {2, 3}, 2, {2, 3}, "[2,3]->[2,3]"},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "broadcast_to %s", cases[k].desc);
        gc_begin(&c, name, 1000 + k);
        mg_tensor x = gc_x(&c, cases[k].nd, cases[k].s);
        gc_check(&c, mg_broadcast_to(c.g, x, cases[k].ndo, cases[k].so));
        gc_end(&c);
    }
}
END_TEST

TH_PART(gradcheck_reduce_tcase, "reduce", 120, test_gc_sum, test_gc_mean,
        test_gc_broadcast_to)
