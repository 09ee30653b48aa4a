/*
 * test_gradcheck.c - analytic gradients from mg_gradients against central
 * finite differences, for every differentiable op, in MG_F64.
 *
 * For an op under test y = op(x...), the loss is L = sum(y * W) with W a
 * random fixed weight input (so the seed gradient of y is not all ones).
 * FD re-runs a separate forward-only plan for L; see gc_check in helpers.h.
 */
#include "helpers.h"


/* ------------------------------------------------------------------ matmul */

START_TEST(test_gc_matmul_2d) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[64];
            gc_ctx c;
            snprintf(name, sizeof name, "matmul 2-D [3,4]x[4,5] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 100 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 2, S(4, 3)) : gc_x(&c, 2, S(3, 4));
            mg_tensor b = tb ? gc_p(&c, 2, S(5, 4)) : gc_p(&c, 2, S(4, 5));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_batched) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[80];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul batched [2,3,4]x[2,4,2] ta=%d tb=%d", ta, tb);
            gc_begin(&c, name, 200 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 3, S(2, 4, 3)) : gc_x(&c, 3, S(2, 3, 4));
            mg_tensor b = tb ? gc_x(&c, 3, S(2, 2, 4)) : gc_x(&c, 3, S(2, 4, 2));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_shared_b) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[96];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul batched [3,2,4] x shared 2-D [4,3] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 300 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 3, S(3, 4, 2)) : gc_x(&c, 3, S(3, 2, 4));
            mg_tensor b = tb ? gc_x(&c, 2, S(3, 4)) : gc_x(&c, 2, S(4, 3));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_shared_a) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[96];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul shared 2-D [2,4] x batched [3,4,3] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 400 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 2, S(4, 2)) : gc_x(&c, 2, S(2, 4));
            mg_tensor b = tb ? gc_x(&c, 3, S(3, 3, 4)) : gc_x(&c, 3, S(3, 4, 3));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_4d) {
    gc_ctx c;
    gc_begin(&c, "matmul [2,2,3,4] x [2,2,4,2]", 500);
    mg_tensor a = gc_x(&c, 4, S(2, 2, 3, 4));
    mg_tensor b = gc_x(&c, 4, S(2, 2, 4, 2));
    gc_check(&c, mg_matmul(c.g, a, b, 0, 0));
    gc_end(&c);

    gc_begin(&c, "matmul [2,2,3,4] x shared [2,4] trans_b", 501);
    a = gc_x(&c, 4, S(2, 2, 3, 4));
    b = gc_x(&c, 2, S(2, 4));
    gc_check(&c, mg_matmul(c.g, a, b, 0, 1));
    gc_end(&c);
}
END_TEST

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
    static const char *names[9] = {"neg",  "relu", "gelu", "tanh", "sigmoid",
                                   "exp",  "log",  "sqrt", "scale(-1.7)"};
    for (int op = 0; op < 9; op++) {
        gc_ctx c;
        gc_begin(&c, names[op], 800 + op);
        /* log and sqrt need positive inputs */
        mg_tensor x = (op == 6 || op == 7) ? gc_x_range(&c, 2, S(3, 4), 0.3, 3.0)
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
    y = mg_log(c.g, mg_add(c.g, mg_scale(c.g, mg_relu(c.g, mg_neg(c.g, x)), 3.0),
                           one));
    gc_check(&c, y);
    gc_end(&c);
}
END_TEST

/* unary ops and reductions on a 0-d scalar */
START_TEST(test_gc_scalar_ops) {
    for (int op = 0; op < 6; op++) {
        static const char *names[6] = {"tanh(scalar)",    "log(scalar)",
                                       "sqrt(scalar)",    "sum(scalar)",
                                       "mse(scalar, scalar)",
                                       "sigmoid(reshape([1,1]->scalar))"};
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

/* ------------------------------------------------------------------ shape */

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

START_TEST(test_gc_reshape) {
    gc_ctx c;
    gc_begin(&c, "reshape [2,3,4]->[6,4]", 1100);
    mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_reshape(c.g, x, 2, S(6, 4)));
    gc_end(&c);

    gc_begin(&c, "reshape [2,3,4]->[4,1,6] then tanh", 1101);
    x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_tanh(c.g, mg_reshape(c.g, x, 3, S(4, 1, 6))));
    gc_end(&c);

    gc_begin(&c, "reshape [6]->[2,3] * [3]", 1102);
    x = gc_x(&c, 1, S(6));
    mg_tensor z = gc_x(&c, 1, S(3));
    gc_check(&c, mg_mul(c.g, mg_reshape(c.g, x, 2, S(2, 3)), z));
    gc_end(&c);
}
END_TEST

START_TEST(test_gc_permute) {
    static const int perms[4][3] = {{2, 0, 1}, {1, 0, 2}, {0, 2, 1}, {1, 2, 0}};
    for (int k = 0; k < 4; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "permute {%d,%d,%d}", perms[k][0],
                 perms[k][1], perms[k][2]);
        gc_begin(&c, name, 1200 + k);
        mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
        /* a non-linear consumer so the permuted layout matters twice */
        mg_tensor y = mg_permute(c.g, x, perms[k]);
        gc_check(&c, mg_mul(c.g, y, y));
        gc_end(&c);
    }
}
END_TEST

START_TEST(test_gc_permute_4d) {
    static const int perms[3][4] = {{3, 1, 0, 2}, {0, 1, 3, 2}, {3, 2, 1, 0}};
    for (int k = 0; k < 3; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "permute {%d,%d,%d,%d} of [2,3,2,4]",
                 perms[k][0], perms[k][1], perms[k][2], perms[k][3]);
        gc_begin(&c, name, 1250 + k);
        mg_tensor x = gc_x(&c, 4, S(2, 3, 2, 4));
        gc_check(&c, mg_permute(c.g, x, perms[k]));
        gc_end(&c);
    }
}
END_TEST

START_TEST(test_gc_transpose) {
    gc_ctx c;
    gc_begin(&c, "transpose(0,2) of [2,3,4]", 1300);
    mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_transpose(c.g, x, 0, 2));
    gc_end(&c);

    gc_begin(&c, "matmul(transpose(a), b) 2-D", 1301);
    mg_tensor a = gc_x(&c, 2, S(4, 3));
    mg_tensor b = gc_x(&c, 2, S(4, 2));
    gc_check(&c, mg_matmul(c.g, mg_transpose(c.g, a, 0, 1), b, 0, 0));
    gc_end(&c);

    gc_begin(&c, "transpose(1,2) of [2,3,4] then softmax(-1)", 1302);
    x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_softmax(c.g, mg_transpose(c.g, x, 1, 2), -1));
    gc_end(&c);
}
END_TEST

/* ------------------------------------------------------------------ softmax */

START_TEST(test_gc_softmax) {
    static const int axes[4] = {-1, 0, 1, 2};
    for (int lg = 0; lg < 2; lg++)
        for (int k = 0; k < 4; k++) {
            char name[64];
            gc_ctx c;
            snprintf(name, sizeof name, "%s [2,3,4] axis %d",
                     lg ? "log_softmax" : "softmax", axes[k]);
            gc_begin(&c, name, 1400 + 10 * lg + k);
            mg_tensor x = gc_x_range(&c, 3, S(2, 3, 4), -3.0, 3.0);
            gc_check(&c, lg ? mg_log_softmax(c.g, x, axes[k])
                            : mg_softmax(c.g, x, axes[k]));
            gc_end(&c);
        }
}
END_TEST

/* ------------------------------------------------------------------ dropout */

START_TEST(test_gc_dropout) {
    static const double ps[3] = {0.0, 0.4, 0.75};
    for (int k = 0; k < 3; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "dropout p=%g [4,5]", ps[k]);
        gc_begin(&c, name, 1500 + k);
        c.run_seed = 42 + (uint64_t)k;
        mg_tensor x = gc_x(&c, 2, S(4, 5));
        gc_check(&c, mg_dropout(c.g, x, ps[k], 9));
        gc_end(&c);
    }
    /* dropout between two ops: tanh(dropout(x W)) */
    gc_ctx c;
    gc_begin(&c, "tanh(dropout(matmul(x, w), 0.5))", 1510);
    c.run_seed = 7;
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    mg_tensor w = gc_p(&c, 2, S(4, 5));
    gc_check(&c, mg_tanh(c.g, mg_dropout(c.g, mg_matmul(c.g, x, w, 0, 0),
                                         0.5, 1)));
    gc_end(&c);
}
END_TEST

/* ------------------------------------------------------------------ losses */

START_TEST(test_gc_cross_entropy) {
    gc_ctx c;
    gc_begin(&c, "cross_entropy logits [4,5]", 1600);
    mg_tensor l = gc_x_range(&c, 2, S(4, 5), -3.0, 3.0);
    mg_tensor y = gc_labels(&c, 4, 5);
    gc_check(&c, mg_cross_entropy(c.g, l, y));
    gc_end(&c);

    gc_begin(&c, "cross_entropy(matmul(x, w)) [6,3]", 1601);
    mg_tensor x = gc_x(&c, 2, S(6, 4));
    mg_tensor w = gc_p(&c, 2, S(4, 3));
    y = gc_labels(&c, 6, 3);
    gc_check(&c, mg_cross_entropy(c.g, mg_matmul(c.g, x, w, 0, 0), y));
    gc_end(&c);
}
END_TEST

START_TEST(test_gc_mse) {
    gc_ctx c;
    gc_begin(&c, "mse(pred, target) [3,4] wrt both", 1700);
    mg_tensor p = gc_x(&c, 2, S(3, 4));
    mg_tensor t = gc_x(&c, 2, S(3, 4));
    gc_check(&c, mg_mse(c.g, p, t));
    gc_end(&c);

    gc_begin(&c, "mse(tanh(x), const target) [5]", 1701);
    mg_tensor x = gc_x(&c, 1, S(5));
    t = gc_const(&c, 1, S(5), -1.0, 1.0);
    gc_check(&c, mg_mse(c.g, mg_tanh(c.g, x), t));
    gc_end(&c);
}
END_TEST

/* ------------------------------------------------------------------ autodiff */

/* y = x*x + relu(x): x fans out to three uses; gradients must be summed */
START_TEST(test_gc_fan_out) {
    gc_ctx c;
    gc_begin(&c, "fan-out x*x + relu(x)", 1800);
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    gc_check(&c, mg_add(c.g, mg_mul(c.g, x, x), mg_relu(c.g, x)));
    gc_end(&c);

    /* a shared intermediate used by two branches */
    gc_begin(&c, "fan-out of h = tanh(xw): sum(h*h) + softmax(h)", 1801);
    x = gc_x(&c, 2, S(2, 3));
    mg_tensor w = gc_x(&c, 2, S(3, 4));
    mg_tensor h = mg_tanh(c.g, mg_matmul(c.g, x, w, 0, 0));
    mg_tensor y = mg_add(c.g, mg_sum(c.g, mg_mul(c.g, h, h), 1, AX(1), 1),
                         mg_softmax(c.g, h, -1));
    gc_check(&c, y);
    gc_end(&c);
}
END_TEST

/* an x that no y depends on gets a zero-filled gradient of its shape */
START_TEST(test_gc_unused_x) {
    gc_ctx c;
    gc_begin(&c, "unused x", 1900);
    mg_tensor x = gc_x(&c, 2, S(2, 3));
    (void)gc_x(&c, 3, S(2, 1, 4)); /* unused by L */
    mg_tensor L = gc_loss(&c, mg_tanh(c.g, x));
    double *grads[GC_MAX_LEAVES];
    gc_check_ys_ex(&c, 1, &L, NULL, NULL, grads);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(grads[1][i] == 0.0,
                      "unused x: gradient element %d is %.17g, expected 0", i,
                      grads[1][i]);
    int nonzero = 0;
    for (int i = 0; i < 6; i++)
        nonzero += grads[0][i] != 0.0;
    ck_assert_msg(nonzero > 0, "used x: gradient is all zero");
    free(grads[0]);
    free(grads[1]);
    gc_end(&c);
}
END_TEST

/* xs may be any float tensor: the gradient w.r.t. an intermediate h = 3x
 * of L = sum(tanh(h) * W) is W (1 - tanh(h)^2), and dL/dx = 3 dL/dh */
START_TEST(test_gc_intermediate_x) {
    double xv[6], wv[6], gh[6], gx[6];
    th_rng r;
    th_rng_init(&r, 1950);
    th_fill_f64(&r, xv, 6, -1, 1, 0);
    th_fill_f64(&r, wv, 6, -1, 1, 0);
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(2, 3));
    mg_tensor w = mg_input(g, "w", MG_F64, 2, S(2, 3));
    mg_tensor h = mg_scale(g, x, 3.0);
    mg_tensor L = mg_sum(g, mg_mul(g, mg_tanh(g, h), w), 0, NULL, 0);
    TH_OK_T("L", L);
    mg_tensor xs[2] = {h, x}, grads[2];
    ck_assert_msg(mg_gradients(g, &L, 1, NULL, xs, 2, NULL, grads) == MG_OK,
                  "mg_gradients w.r.t. an intermediate failed: %s",
                  mg_last_error());
    mg_binding b[2] = {{x, xv}, {w, wv}};
    void *bufs[2] = {gh, gx};
    TH_RUN_OK("gradient w.r.t. intermediate", g, 2, grads, bufs, 2, b, 0);
    for (int i = 0; i < 6; i++) {
        double t = tanh(3.0 * xv[i]);
        double e = wv[i] * (1 - t * t);
        ck_assert_msg(fabs(gh[i] - e) <= 1e-12 * (1 + fabs(e)),
                      "dL/dh[%d] (h = 3x intermediate): got %.17g, expected "
                      "%.17g",
                      i, gh[i], e);
        ck_assert_msg(fabs(gx[i] - 3 * e) <= 1e-12 * (1 + fabs(e)),
                      "dL/dx[%d]: got %.17g, expected %.17g", i, gx[i],
                      3 * e);
    }
    mg_graph_free(g);
}
END_TEST

/* n_ys = 2, grad_ys NULL (both scalar): d(L1 + L2)/dx */
START_TEST(test_gc_two_ys) {
    gc_ctx c;
    gc_begin(&c, "two scalar ys, grad_ys NULL", 2000);
    mg_tensor x = gc_x(&c, 2, S(2, 3));
    mg_tensor z = gc_x(&c, 2, S(2, 3));
    mg_tensor ys[2];
    ys[0] = gc_loss(&c, mg_tanh(c.g, x));
    ys[1] = gc_loss(&c, mg_mul(c.g, x, z));
    gc_check_ys(&c, 2, ys, NULL);
    gc_end(&c);

    /* the same y twice counts twice */
    gc_begin(&c, "same scalar y twice", 2001);
    x = gc_x(&c, 1, S(4));
    ys[0] = gc_loss(&c, mg_sigmoid(c.g, x));
    ys[1] = ys[0];
    gc_check_ys(&c, 2, ys, NULL);
    gc_end(&c);
}
END_TEST

/* a non-scalar y with a caller-given seed tensor bound at run time */
START_TEST(test_gc_grad_ys_seed) {
    gc_ctx c;
    gc_begin(&c, "non-scalar y = sigmoid(x w) with grad_ys seed", 2100);
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    mg_tensor w = gc_x(&c, 2, S(4, 2));
    mg_tensor y = mg_sigmoid(c.g, mg_matmul(c.g, x, w, 0, 0));
    TH_OK_T("sigmoid(matmul)", y);
    mg_tensor seed = gc_const(&c, 2, S(3, 2), -1.0, 1.0);
    gc_check_ys(&c, 1, &y, &seed);
    gc_end(&c);

    /* mixed: a scalar y with MG_NO_TENSOR (ones) and a seeded non-scalar */
    gc_begin(&c, "ys {scalar (MG_NO_TENSOR seed), [2,3] (seeded)}", 2101);
    x = gc_x(&c, 2, S(2, 3));
    mg_tensor ys[2], gys[2];
    ys[0] = gc_loss(&c, mg_exp(c.g, x));
    ys[1] = mg_tanh(c.g, mg_mul(c.g, x, x));
    TH_OK_T("tanh(x*x)", ys[1]);
    gys[0] = MG_NO_TENSOR;
    gys[1] = gc_const(&c, 2, S(2, 3), -1.0, 1.0);
    gc_check_ys(&c, 2, ys, gys);
    gc_end(&c);
}
END_TEST

/* a graph with several op kinds; identical data for identical seeds */
static mg_tensor build_net(gc_ctx *c) {
    mg_tensor x = gc_x(c, 2, S(4, 3));
    mg_tensor w1 = gc_p(c, 2, S(3, 5));
    mg_tensor b1 = gc_p(c, 1, S(5));
    mg_tensor w2 = gc_p(c, 2, S(5, 3));
    mg_tensor lab = gc_labels(c, 4, 3);
    mg_tensor tgt = gc_const(c, 2, S(4, 5), -1.0, 1.0);
    mg_tensor h = mg_gelu(c->g, mg_add(c->g, mg_matmul(c->g, x, w1, 0, 0), b1));
    mg_tensor hd = mg_dropout(c->g, h, 0.3, 5);
    mg_tensor logits = mg_matmul(c->g, hd, w2, 0, 0);
    mg_tensor ce = mg_cross_entropy(c->g, logits, lab);
    mg_tensor m = mg_mse(c->g, mg_tanh(c->g, h), tgt);
    mg_tensor L = mg_add(c->g, ce, mg_scale(c->g, m, 0.5));
    ck_assert_msg(L != MG_NO_TENSOR, "build_net failed: %s", mg_last_error());
    return L;
}

START_TEST(test_gc_checkpoints_none_identical) {
    gc_ctx c1, c2;
    double *g1[GC_MAX_LEAVES], *g2[GC_MAX_LEAVES];
    mg_checkpoints none = {.policy = MG_CKPT_NONE, .tensors = NULL, .n_tensors = 0};

    gc_begin(&c1, "net, checkpoints NULL", 2200);
    c1.run_seed = 11;
    mg_tensor L1 = build_net(&c1);
    gc_check_ys_ex(&c1, 1, &L1, NULL, NULL, g1);

    gc_begin(&c2, "net, checkpoints {MG_CKPT_NONE, NULL, 0}", 2200);
    c2.run_seed = 11;
    mg_tensor L2 = build_net(&c2);
    gc_check_ys_ex(&c2, 1, &L2, NULL, &none, g2);

    int nx = 0;
    for (int i = 0; i < c1.n; i++) {
        if (!c1.is_x[i])
            continue;
        ck_assert_msg(memcmp(g1[nx], g2[nx],
                             (size_t)c1.numel[i] * sizeof(double)) == 0,
                      "gradient %d differs between checkpoints NULL and "
                      "MG_CKPT_NONE",
                      nx);
        free(g1[nx]);
        free(g2[nx]);
        nx++;
    }
    ck_assert_int_eq(nx, 3 + 1);
    gc_end(&c1);
    gc_end(&c2);
}
END_TEST

/* the same comparison on one graph: two mg_gradients calls */
START_TEST(test_gc_checkpoints_same_graph) {
    gc_ctx c;
    gc_begin(&c, "net, twice on one graph", 2300);
    c.run_seed = 3;
    mg_tensor L = build_net(&c);
    mg_tensor xs[GC_MAX_LEAVES], ga[GC_MAX_LEAVES], gb[GC_MAX_LEAVES];
    int nx = 0;
    for (int i = 0; i < c.n; i++)
        if (c.is_x[i])
            xs[nx++] = c.t[i];
    mg_checkpoints none = {.policy = MG_CKPT_NONE, .tensors = NULL, .n_tensors = 0};
    ck_assert_msg(mg_gradients(c.g, &L, 1, NULL, xs, nx, NULL, ga) == MG_OK,
                  "mg_gradients (NULL) failed: %s", mg_last_error());
    ck_assert_msg(mg_gradients(c.g, &L, 1, NULL, xs, nx, &none, gb) == MG_OK,
                  "mg_gradients (NONE) failed: %s", mg_last_error());
    double *bufs[2 * GC_MAX_LEAVES];
    mg_tensor outs[2 * GC_MAX_LEAVES];
    for (int i = 0; i < nx; i++) {
        int64_t n = mg_tensor_numel(c.g, xs[i]);
        bufs[i] = calloc((size_t)n, sizeof(double));
        bufs[nx + i] = calloc((size_t)n, sizeof(double));
        ck_assert(bufs[i] && bufs[nx + i]);
        outs[i] = ga[i];
        outs[nx + i] = gb[i];
    }
    mg_binding *b = gc_bindings(&c);
    TH_RUN_OK("both gradient sets", c.g, 2 * nx, outs, (void *const *)bufs,
              c.n, b, c.run_seed);
    for (int i = 0; i < nx; i++) {
        int64_t n = mg_tensor_numel(c.g, xs[i]);
        ck_assert_msg(memcmp(bufs[i], bufs[nx + i], (size_t)n * sizeof(double)) == 0,
                      "one graph: gradient %d differs between checkpoints "
                      "NULL and MG_CKPT_NONE",
                      i);
        free(bufs[i]);
        free(bufs[nx + i]);
    }
    free(b);
    gc_end(&c);
}
END_TEST

/* grad_ys NULL for a non-scalar y fails and leaves the graph unchanged */
START_TEST(test_gc_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(2, 3));
    mg_tensor y = mg_tanh(g, x);
    TH_OK_T("tanh", y);
    int32_t before = mg_graph_num_tensors(g);
    mg_tensor gx = (mg_tensor)-7;
    mg_status st = mg_gradients(g, &y, 1, NULL, &x, 1, NULL, &gx);
    ck_assert_msg(st != MG_OK,
                  "mg_gradients with grad_ys NULL for a [2,3] y succeeded");
    ck_assert_msg(mg_graph_num_tensors(g) == before,
                  "failed mg_gradients changed the graph: %d tensors, was %d",
                  (int)mg_graph_num_tensors(g), (int)before);
    ck_assert_msg(gx == (mg_tensor)-7,
                  "failed mg_gradients wrote grads_out (%d)", (int)gx);

    /* a seed of the wrong shape */
    mg_tensor s = mg_input(g, "s", MG_F64, 1, S(3));
    before = mg_graph_num_tensors(g);
    st = mg_gradients(g, &y, 1, &s, &x, 1, NULL, &gx);
    ck_assert_msg(st != MG_OK,
                  "mg_gradients with a [3] seed for a [2,3] y succeeded");
    ck_assert_msg(mg_graph_num_tensors(g) == before,
                  "failed mg_gradients changed the graph");

    /* gradient w.r.t. an integer tensor is not possible; labels need none */
    mg_tensor l = mg_input(g, "l", MG_F64, 2, S(2, 3));
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(2));
    mg_tensor ce = mg_cross_entropy(g, l, lab);
    TH_OK_T("cross_entropy", ce);
    mg_tensor gl = MG_NO_TENSOR;
    st = mg_gradients(g, &ce, 1, NULL, &l, 1, NULL, &gl);
    ck_assert_msg(st == MG_OK && gl != MG_NO_TENSOR,
                  "gradient of cross_entropy w.r.t. logits failed: %s",
                  mg_last_error());
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ f32
 * The backward kernels also exist in MG_F32: the f32 gradient of each op
 * must match the (FD-checked) f64 one to f32 accuracy. */

#define F32_NOPS 17
static const char *f32_names[F32_NOPS] = {
    "matmul",  "add [3,4]+[4]", "sub [3,1]-[3,4]", "mul [3,4]*[3,1]",
    "div",     "neg",          "relu",          "gelu",
    "tanh",    "sigmoid",      "exp",           "log",
    "sqrt",    "scale",        "softmax(0)",    "log_softmax(-1)",
    "cross_entropy"};

/* grads of L = sum(op(a, b) * W) w.r.t. a and b, copied out as doubles */
static void f32_grads(mg_dtype dt, int op, const double *av,
                      const double *bv, const double *wv, double *ga,
                      double *gb) {
    int64_t sb[2] = {op == 0 ? 4 : 3, op == 0 ? 5 : (op == 2 || op == 3) ? 1 : 4};
    int ndb = op == 1 ? 1 : 2;
    const int64_t *sbp = op == 1 ? S(4) : sb;
    int64_t nb = th_numel(ndb, sbp);
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor a = mg_input(g, "a", dt, 2, S(3, 4));
    mg_tensor b = mg_input(g, "b", dt, ndb, sbp);
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(3));
    mg_tensor y;
    switch (op) {
    case 0: y = mg_matmul(g, a, b, 0, 0); break;
    case 1: y = mg_add(g, a, b); break;
    case 2: y = mg_sub(g, b, a); break;
    case 3: y = mg_mul(g, a, b); break;
    case 4: y = mg_div(g, a, b); break;
    case 5: y = mg_neg(g, a); break;
    case 6: y = mg_relu(g, a); break;
    case 7: y = mg_gelu(g, a); break;
    case 8: y = mg_tanh(g, a); break;
    case 9: y = mg_sigmoid(g, a); break;
    case 10: y = mg_exp(g, a); break;
    case 11: y = mg_log(g, b); break;
    case 12: y = mg_sqrt(g, b); break;
    case 13: y = mg_scale(g, a, 0.7); break;
    case 14: y = mg_softmax(g, a, 0); break;
    case 15: y = mg_log_softmax(g, a, -1); break;
    default: y = mg_cross_entropy(g, a, lab); break;
    }
    ck_assert_msg(y != MG_NO_TENSOR, "%s: %s", f32_names[op], mg_last_error());
    int nd;
    int64_t sy[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(g, y, &nd, sy) == MG_OK);
    mg_tensor w = mg_input(g, "w", dt, nd, sy);
    mg_tensor L = mg_sum(g, mg_mul(g, y, w), 0, NULL, 0);
    TH_OK_T(f32_names[op], L);
    mg_tensor xs[2] = {a, b}, gr[2];
    mg_status st = mg_gradients(g, &L, 1, NULL, xs, 2, NULL, gr);
    ck_assert_msg(st == MG_OK, "%s (%s): mg_gradients failed: %s",
                  f32_names[op], mg_dtype_name(dt), mg_last_error());
    size_t es = mg_dtype_size(dt);
    void *ad = malloc(12 * es), *bd = malloc((size_t)nb * es);
    void *wd = malloc((size_t)th_numel(nd, sy) * es);
    void *gad = malloc(12 * es), *gbd = malloc((size_t)nb * es);
    ck_assert(ad && bd && wd && gad && gbd);
    for (int i = 0; i < 12; i++) {
        if (dt == MG_F32) ((float *)ad)[i] = (float)av[i];
        else ((double *)ad)[i] = av[i];
    }
    for (int64_t i = 0; i < nb; i++) {
        if (dt == MG_F32) ((float *)bd)[i] = (float)bv[i];
        else ((double *)bd)[i] = bv[i];
    }
    for (int64_t i = 0; i < th_numel(nd, sy); i++) {
        if (dt == MG_F32) ((float *)wd)[i] = (float)wv[i];
        else ((double *)wd)[i] = wv[i];
    }
    int32_t labv[3] = {2, 0, 3};
    mg_binding bnd[4] = {{a, ad}, {b, bd}, {w, wd}, {lab, labv}};
    void *outs[2] = {gad, gbd};
    mg_status rs = th_run(g, 2, gr, outs, 4, bnd, 5);
    if (rs == MG_OK) {
        for (int i = 0; i < 12; i++)
            ga[i] = dt == MG_F32 ? ((float *)gad)[i] : ((double *)gad)[i];
        for (int64_t i = 0; i < nb; i++)
            gb[i] = dt == MG_F32 ? ((float *)gbd)[i] : ((double *)gbd)[i];
    }
    free(ad); free(bd); free(wd); free(gad); free(gbd);
    mg_graph_free(g);
    ck_assert_msg(rs == MG_OK, "%s (%s): gradient run failed: %s",
                  f32_names[op], mg_dtype_name(dt), th_errmsg);
}

START_TEST(test_f32_grads_match_f64) {
    th_rng r;
    th_rng_init(&r, 3000);
    double av[12], bv[20], wv[20];
    double ga32[12], gb32[20], ga64[12], gb64[20];
    for (int op = 0; op < F32_NOPS; op++) {
        /* values exactly representable in f32 */
        for (int i = 0; i < 12; i++)
            av[i] = (double)(float)th_rng_range(&r, -2, 2, 1e-2);
        for (int i = 0; i < 20; i++) {
            bv[i] = (double)(float)th_rng_range(&r, 0.5, 2, 0);
            wv[i] = (double)(float)th_rng_range(&r, -1, 1, 0);
        }
        f32_grads(MG_F64, op, av, bv, wv, ga64, gb64);
        f32_grads(MG_F32, op, av, bv, wv, ga32, gb32);
        int64_t nb = op == 0 ? 20 : op == 1 ? 4 : (op == 2 || op == 3) ? 3 : 12;
        for (int i = 0; i < 12; i++)
            ck_assert_msg(fabs(ga32[i] - ga64[i]) <= 1e-5 + 1e-4 * fabs(ga64[i]),
                          "%s: f32 gradient of a[%d] is %.9g, f64 gives %.17g",
                          f32_names[op], i, ga32[i], ga64[i]);
        for (int64_t i = 0; i < nb; i++)
            ck_assert_msg(fabs(gb32[i] - gb64[i]) <= 1e-5 + 1e-4 * fabs(gb64[i]),
                          "%s: f32 gradient of b[%lld] is %.9g, f64 gives %.17g",
                          f32_names[op], (long long)i, gb32[i], gb64[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *gradcheck_suite(void) {
    Suite *s = suite_create("gradcheck");
    TCase *tc;

    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_matmul_2d);
    tcase_add_test(tc, test_gc_matmul_batched);
    tcase_add_test(tc, test_gc_matmul_shared_b);
    tcase_add_test(tc, test_gc_matmul_shared_a);
    tcase_add_test(tc, test_gc_matmul_4d);
    suite_add_tcase(s, tc);

    tc = tcase_create("binary");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_add);
    tcase_add_test(tc, test_gc_sub);
    tcase_add_test(tc, test_gc_mul);
    tcase_add_test(tc, test_gc_div);
    tcase_add_test(tc, test_gc_binary_same_operand);
    suite_add_tcase(s, tc);

    tc = tcase_create("unary");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_unary);
    tcase_add_test(tc, test_gc_unary_chain);
    tcase_add_test(tc, test_gc_scalar_ops);
    suite_add_tcase(s, tc);

    tc = tcase_create("reduce");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_sum);
    tcase_add_test(tc, test_gc_mean);
    suite_add_tcase(s, tc);

    tc = tcase_create("shape");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_broadcast_to);
    tcase_add_test(tc, test_gc_reshape);
    tcase_add_test(tc, test_gc_permute);
    tcase_add_test(tc, test_gc_permute_4d);
    tcase_add_test(tc, test_gc_transpose);
    suite_add_tcase(s, tc);

    tc = tcase_create("softmax");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_softmax);
    suite_add_tcase(s, tc);

    tc = tcase_create("dropout");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_dropout);
    suite_add_tcase(s, tc);

    tc = tcase_create("loss");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_cross_entropy);
    tcase_add_test(tc, test_gc_mse);
    suite_add_tcase(s, tc);

    tc = tcase_create("autodiff");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_fan_out);
    tcase_add_test(tc, test_gc_unused_x);
    tcase_add_test(tc, test_gc_intermediate_x);
    tcase_add_test(tc, test_gc_two_ys);
    tcase_add_test(tc, test_gc_grad_ys_seed);
    tcase_add_test(tc, test_gc_checkpoints_none_identical);
    tcase_add_test(tc, test_gc_checkpoints_same_graph);
    tcase_add_test(tc, test_gc_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("f32");
    tcase_add_test(tc, test_f32_grads_match_f64);
    suite_add_tcase(s, tc);

    return s;
}

int main(void) {
    return th_run_suite(gradcheck_suite());
}
