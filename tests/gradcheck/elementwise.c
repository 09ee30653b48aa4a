/*
 * gradcheck/elementwise.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for the
 * binary ops with broadcasting, the unary ops and the scalar ops.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ binary */

typedef struct bcase {
    int nda;
    int64_t sa[4];
    int ndb;
    int64_t sb[4];
    const char *desc;
} bcase;

static const bcase bcases[] = {
    {2, {2, 3}, 2, {2, 3}, "[2,3] . [2,3]"},
    {2, {2, 3}, 1, {3}, "[2,3] . [3]"},
    {1, {3}, 2, {2, 3}, "[3] . [2,3]"},
    {2, {2, 1}, 2, {1, 3}, "[2,1] . [1,3]"},
    {2, {2, 3}, 0, {0}, "[2,3] . scalar"},
    {0, {0}, 2, {2, 3}, "scalar . [2,3]"},
    {3, {3, 1, 4}, 2, {2, 4}, "[3,1,4] . [2,4]"},
    {2, {2, 1}, 3, {2, 2, 3}, "[2,1] . [2,2,3]"},
    {1, {1}, 2, {2, 3}, "[1] . [2,3]"},
    {4, {2, 1, 3, 1}, 3, {4, 1, 5}, "[2,1,3,1] . [4,1,5]"},
    {0, {0}, 0, {0}, "scalar . scalar"},
};
#define N_BCASES ((int)(sizeof bcases / sizeof bcases[0]))

static void gc_binary(int op) {
    static const char *names[4] = {"add", "sub", "mul", "div"};
    for (int k = 0; k < N_BCASES; k++) {
        char name[96];
        gc_ctx c;
        const bcase *bc = &bcases[k];
        snprintf(name, sizeof name, "%s %s", names[op], bc->desc);
        gc_begin(&c, name, 600 + 10 * op + k);
        mg_tensor a = gc_x(&c, bc->nda, bc->sa);
        /* keep the denominator away from 0 */
        mg_tensor b = op == 3 ? gc_x_range(&c, bc->ndb, bc->sb, 0.5, 2.0)
                              : gc_x(&c, bc->ndb, bc->sb);
        mg_tensor y = op == 0   ? mg_add(c.g, a, b)
                      : op == 1 ? mg_sub(c.g, a, b)
                      : op == 2 ? mg_mul(c.g, a, b)
                                : mg_div(c.g, a, b);
        gc_check(&c, y);
        gc_end(&c);
    }
}

START_TEST(test_gc_add) { gc_binary(0); }
END_TEST

START_TEST(test_gc_sub) { gc_binary(1); }
END_TEST

START_TEST(test_gc_mul) { gc_binary(2); }
END_TEST

START_TEST(test_gc_div) { gc_binary(3); }
END_TEST

/* the same tensor as both operands */
START_TEST(test_gc_binary_same_operand) {
    gc_ctx c;
    gc_begin(&c, "mul(x, x)", 700);
    mg_tensor x = gc_x(&c, 2, S(2, 3));
    gc_check(&c, mg_mul(c.g, x, x));
    gc_end(&c);

    gc_begin(&c, "div(x, x) + sub(x, x) + add(x, x)", 701);
    x = gc_x_range(&c, 2, S(2, 3), 0.5, 2.0);
    mg_tensor y = mg_add(c.g, mg_div(c.g, x, x),
                         mg_add(c.g, mg_sub(c.g, x, x), mg_add(c.g, x, x)));
    gc_check(&c, y);
    gc_end(&c);
}
END_TEST

/* ------------------------------------------------------------------ unary */

START_TEST(test_gc_unary) {
    static const char *names[17] = {
        "neg",         "relu",      "gelu",     "tanh",
        "sigmoid",     "exp",       "log",      "sqrt",
        "scale(-1.7)", "erf",       "pow(2.5)", "leaky_relu(0.1)",
        "is_nonzero",  "cast(f64)", "silu",     "pow(3)",
        "pow(2)"};
    for (int op = 0; op < 17; op++) {
        gc_ctx c;
        gc_begin(&c, names[op], 800 + op);
        /* log, sqrt and a fractional power need positive inputs */
        mg_tensor x = (op == 6 || op == 7 || op == 10)
                          ? gc_x_range(&c, 2, S(3, 4), 0.3, 3.0)
                          : gc_x_range(&c, 2, S(3, 4), -3.0, 3.0);
        mg_tensor y;
        switch (op) {
        case 0: y = mg_neg(c.g, x); break;
        case 1: y = mg_relu(c.g, x); break;
        case 2: y = mg_gelu(c.g, x); break;
        case 3: y = mg_tanh(c.g, x); break;
        case 4: y = mg_sigmoid(c.g, x); break;
        case 5: y = mg_exp(c.g, x); break;
        case 6: y = mg_log(c.g, x); break;
        case 7: y = mg_sqrt(c.g, x); break;
        case 9: y = mg_erf(c.g, x); break;
        case 10: y = mg_pow(c.g, x, 2.5); break;
        case 11: y = mg_leaky_relu(c.g, x, 0.1); break;
        /* a step: 0 on both sides, as no x is within the FD step of 0 */
        case 12: y = mg_mul(c.g, mg_is_nonzero(c.g, x), x); break;
        case 13: y = mg_cast(c.g, x, MG_F64); break;
        case 14: y = mg_silu(c.g, x); break;
        /* the multiplied-out powers, negative bases included */
        case 15: y = mg_pow(c.g, x, 3.0); break;
        case 16: y = mg_pow(c.g, x, 2.0); break;
        default: y = mg_scale(c.g, x, -1.7); break;
        }
        gc_check(&c, y);
        gc_end(&c);
    }
}
END_TEST

/* second derivatives are not needed, but ops chained: tanh(sigmoid(x)) etc */
START_TEST(test_gc_unary_chain) {
    gc_ctx c;
    gc_begin(&c, "sqrt(exp(gelu(tanh(sigmoid(x)))))", 850);
    mg_tensor x = gc_x(&c, 1, S(7));
    mg_tensor y = mg_sqrt(
        c.g, mg_exp(c.g, mg_gelu(c.g, mg_tanh(c.g, mg_sigmoid(c.g, x)))));
    gc_check(&c, y);
    gc_end(&c);

    gc_begin(&c, "log(scale(relu(neg(x)),3) + 1)", 851);
    x = gc_x(&c, 1, S(7));
    mg_tensor one = mg_fill(c.g, MG_F64, 1, S(7), 1.0);
    y = mg_log(
        c.g,
        mg_add(c.g, mg_scale(c.g, mg_relu(c.g, mg_neg(c.g, x)), 3.0), one));
    gc_check(&c, y);
    gc_end(&c);
}
END_TEST

/* the unary ops of the ATen-level capture (issue 45); reciprocal and
 * rsqrt on both sides of 0 (rsqrt on positive x only), away from 0, where
 * central differences lose their accuracy; abs away from its kink */
START_TEST(test_gc_unary_aten) {
    static const char *names[7] = {"reciprocal(x > 0)",
                                   "reciprocal(x < 0)",
                                   "rsqrt",
                                   "sin",
                                   "cos",
                                   "abs",
                                   "abs(sin(x)) * cos(x)"};
    for (int op = 0; op < 7; op++) {
        gc_ctx c;
        gc_begin(&c, names[op], 880 + op);
        mg_tensor x = op == 0 || op == 2 ? gc_x_range(&c, 2, S(3, 4), 0.4, 3.0)
                      : op == 1 ? gc_x_range(&c, 2, S(3, 4), -3.0, -0.4)
                                : gc_x_range(&c, 2, S(3, 4), -3.0, 3.0);
        mg_tensor y;
        switch (op) {
        case 0:
        case 1: y = mg_reciprocal(c.g, x); break;
        case 2: y = mg_rsqrt(c.g, x); break;
        case 3: y = mg_sin(c.g, x); break;
        case 4: y = mg_cos(c.g, x); break;
        case 5: y = mg_abs(c.g, x); break;
        default: y = mg_mul(c.g, mg_abs(c.g, mg_sin(c.g, x)), mg_cos(c.g, x));
        }
        gc_check(&c, y);
        gc_end(&c);
    }
}
END_TEST

/* unary ops and reductions on a 0-d scalar */
START_TEST(test_gc_scalar_ops) {
    for (int op = 0; op < 6; op++) {
        static const char *names[6] = {
            "tanh(scalar)",        "log(scalar)",
            "sqrt(scalar)",        "sum(scalar)",
            "mse(scalar, scalar)", "sigmoid(reshape([1,1]->scalar))"};
        gc_ctx c;
        gc_begin(&c, names[op], 860 + op);
        mg_tensor x = op == 5 ? gc_x_range(&c, 2, S(1, 1), 0.3, 3.0)
                              : gc_x_range(&c, 0, NULL, 0.3, 3.0);
        mg_tensor y;
        switch (op) {
        case 0: y = mg_tanh(c.g, x); break;
        case 1: y = mg_log(c.g, x); break;
        case 2: y = mg_sqrt(c.g, x); break;
        case 3: y = mg_exp(c.g, mg_sum(c.g, x, 0, NULL, 0)); break;
        case 4: y = mg_mse(c.g, x, gc_x(&c, 0, NULL)); break;
        default: y = mg_sigmoid(c.g, mg_reshape(c.g, x, 0, NULL)); break;
        }
        gc_check(&c, y);
        gc_end(&c);
    }
}
END_TEST

TH_PART(gradcheck_elementwise_tcase, "elementwise", 120, test_gc_add,
        test_gc_sub, test_gc_mul, test_gc_div, test_gc_binary_same_operand,
        test_gc_unary, test_gc_unary_chain, test_gc_scalar_ops,
        test_gc_unary_aten)
