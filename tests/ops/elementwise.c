/*
 * ops/elementwise.c - part of test_ops: forward values, in MG_F32 and MG_F64,
 * of the binary ops with broadcasting, and the unary ops, against hand values
 * and naive loops; binary shape errors.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ binary */

START_TEST(test_binary_row_broadcast) {
    /* [2,3] op [3] */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        mg_tensor b = fw_in(&f, 1, S(3), D(10, 20, 30));
        fw_check(&f, "add [2,3]+[3]", mg_add(f.g, a, b), 2, S(2, 3),
                 D(11, 22, 33, 14, 25, 36));
        fw_check(&f, "sub [2,3]-[3]", mg_sub(f.g, a, b), 2, S(2, 3),
                 D(-9, -18, -27, -6, -15, -24));
        fw_check(&f, "mul [2,3]*[3]", mg_mul(f.g, a, b), 2, S(2, 3),
                 D(10, 40, 90, 40, 100, 180));
        fw_check(&f, "div [2,3]/[3]", mg_div(f.g, a, b), 2, S(2, 3),
                 D(0.1, 0.1, 0.1, 0.4, 0.25, 0.2));
        /* reversed operand order: [3] op [2,3] */
        fw_check(&f, "sub [3]-[2,3]", mg_sub(f.g, b, a), 2, S(2, 3),
                 D(9, 18, 27, 6, 15, 24));
        fw_check(&f, "div [3]/[2,3]", mg_div(f.g, b, a), 2, S(2, 3),
                 D(10, 10, 10, 2.5, 4, 5));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_binary_outer_broadcast) {
    /* [2,1] op [1,3] -> [2,3] */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 1), D(2, 3));
        mg_tensor b = fw_in(&f, 2, S(1, 3), D(1, 2, 4));
        fw_check(&f, "mul [2,1]*[1,3]", mg_mul(f.g, a, b), 2, S(2, 3),
                 D(2, 4, 8, 3, 6, 12));
        fw_check(&f, "add [2,1]+[1,3]", mg_add(f.g, a, b), 2, S(2, 3),
                 D(3, 4, 6, 4, 5, 7));
        fw_check(&f, "sub [2,1]-[1,3]", mg_sub(f.g, a, b), 2, S(2, 3),
                 D(1, 0, -2, 2, 1, -1));
        fw_check(&f, "div [2,1]/[1,3]", mg_div(f.g, a, b), 2, S(2, 3),
                 D(2, 1, 0.5, 3, 1.5, 0.75));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_binary_scalar) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 2), D(1, 2, 3, 4));
        mg_tensor s = fw_in(&f, 0, NULL, D(2.5));
        fw_check(&f, "add [2,2]+scalar", mg_add(f.g, a, s), 2, S(2, 2),
                 D(3.5, 4.5, 5.5, 6.5));
        fw_check(&f, "mul scalar*[2,2]", mg_mul(f.g, s, a), 2, S(2, 2),
                 D(2.5, 5, 7.5, 10));
        fw_check(&f, "sub scalar-[2,2]", mg_sub(f.g, s, a), 2, S(2, 2),
                 D(1.5, 0.5, -0.5, -1.5));
        fw_check(&f, "div scalar/[2,2]", mg_div(f.g, s, a), 2, S(2, 2),
                 D(2.5, 1.25, 2.5 / 3.0, 0.625));
        fw_check(&f, "div [2,2]/scalar", mg_div(f.g, a, s), 2, S(2, 2),
                 D(0.4, 0.8, 1.2, 1.6));
        mg_tensor t = fw_in(&f, 0, NULL, D(-4));
        fw_check(&f, "mul scalar*scalar", mg_mul(f.g, s, t), 0, NULL, D(-10));
        /* [1] (1-D of size 1) against [2,2] */
        mg_tensor o = fw_in(&f, 1, S(1), D(-1));
        fw_check(&f, "add [2,2]+[1]", mg_add(f.g, a, o), 2, S(2, 2),
                 D(0, 1, 2, 3));
        fw_end(&f);
    }
}
END_TEST

/* [3,1,4] op [2,4] -> [3,2,4], against a naive loop */
START_TEST(test_binary_3d_broadcast_ref) {
    th_rng r;
    th_rng_init(&r, 5);
    double a[12], b[8], e[24];
    th_rand_vals(&r, a, 12, -2, 2);
    th_rand_vals(&r, b, 8, 0.5, 2);
    for (int op = 0; op < 4; op++)
        for (int di = 0; di < 2; di++) {
            static const char *names[4] = {
                "add [3,1,4]+[2,4]", "sub [3,1,4]-[2,4]", "mul [3,1,4]*[2,4]",
                "div [3,1,4]/[2,4]"};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 2; j++)
                    for (int k = 0; k < 4; k++) {
                        double x = a[i * 4 + k], y = b[j * 4 + k];
                        e[(i * 2 + j) * 4 + k] = op == 0   ? x + y
                                                 : op == 1 ? x - y
                                                 : op == 2 ? x * y
                                                           : x / y;
                    }
            fw f;
            fw_begin(&f, th_dtypes[di]);
            mg_tensor ta = fw_in(&f, 3, S(3, 1, 4), a);
            mg_tensor tb = fw_in(&f, 2, S(2, 4), b);
            mg_tensor y = op == 0   ? mg_add(f.g, ta, tb)
                          : op == 1 ? mg_sub(f.g, ta, tb)
                          : op == 2 ? mg_mul(f.g, ta, tb)
                                    : mg_div(f.g, ta, tb);
            fw_check(&f, names[op], y, 3, S(3, 2, 4), e);
            fw_end(&f);
        }
}
END_TEST

/* general numpy broadcasting vs a naive index loop, 4-D shapes */
START_TEST(test_binary_random_broadcast_ref) {
    static const struct {
        int nda;
        int64_t sa[4];
        int ndb;
        int64_t sb[4];
        int ndo;
        int64_t so[4];
    } cases[] = {
        {4, {2, 1, 3, 1}, 3, {4, 1, 5}, 4, {2, 4, 3, 5}},
        {3, {1, 4, 1}, 4, {3, 2, 1, 5}, 4, {3, 2, 4, 5}},
        {4, {2, 3, 4, 5}, 1, {5}, 4, {2, 3, 4, 5}},
        {2, {4, 1}, 4, {2, 3, 4, 6}, 4, {2, 3, 4, 6}},
        {4, {2, 3, 4, 5}, 4, {2, 3, 4, 5}, 4, {2, 3, 4, 5}},
    };
    th_rng r;
    th_rng_init(&r, 21);
    double a[120], b[144], e[144];
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int64_t na = th_numel(cases[k].nda, cases[k].sa);
        int64_t nb = th_numel(cases[k].ndb, cases[k].sb);
        int64_t no = th_numel(cases[k].ndo, cases[k].so);
        th_rand_vals(&r, a, na, -2, 2);
        th_rand_vals(&r, b, nb, 0.5, 2);
        for (int op = 0; op < 4; op++) {
            for (int64_t i = 0; i < no; i++) {
                int64_t ix[4];
                th_unravel(i, cases[k].ndo, cases[k].so, ix);
                double x = a[th_bcast_off(cases[k].nda, cases[k].sa,
                                          cases[k].ndo, ix)];
                double y = b[th_bcast_off(cases[k].ndb, cases[k].sb,
                                          cases[k].ndo, ix)];
                e[i] = op == 0   ? x + y
                       : op == 1 ? x - y
                       : op == 2 ? x * y
                                 : x / y;
            }
            for (int di = 0; di < 2; di++) {
                char what[96];
                static const char *names[4] = {"add", "sub", "mul", "div"};
                snprintf(what, sizeof what, "%s broadcast case %d", names[op],
                         k);
                fw f;
                fw_begin(&f, th_dtypes[di]);
                mg_tensor ta = fw_in(&f, cases[k].nda, cases[k].sa, a);
                mg_tensor tb = fw_in(&f, cases[k].ndb, cases[k].sb, b);
                mg_tensor y = op == 0   ? mg_add(f.g, ta, tb)
                              : op == 1 ? mg_sub(f.g, ta, tb)
                              : op == 2 ? mg_mul(f.g, ta, tb)
                                        : mg_div(f.g, ta, tb);
                fw_check(&f, what, y, cases[k].ndo, cases[k].so, e);
                fw_end(&f);
            }
        }
    }
}
END_TEST

START_TEST(test_binary_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor a = mg_input(g, "a", MG_F32, 2, S(2, 3));
    mg_tensor b = mg_input(g, "b", MG_F32, 1, S(2));
    mg_tensor c = mg_input(g, "c", MG_F64, 2, S(2, 3));
    ck_assert_msg(mg_add(g, a, b) == MG_NO_TENSOR,
                  "add [2,3]+[2] must fail (not broadcastable)");
    ck_assert_msg(mg_mul(g, a, c) == MG_NO_TENSOR,
                  "mul f32*f64 must fail (dtype)");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ unary */

/* The unary ops the ONNX importer added reject what the others reject, and
 * their scalar attribute must be finite. */
START_TEST(test_unary_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    TH_FAIL(mg_erf(l.g, l.xi), MG_ERR_DTYPE, "erf", "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_pow(l.g, l.xi, 2.0), MG_ERR_DTYPE, "pow", "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_leaky_relu(l.g, l.xi, 0.1), MG_ERR_DTYPE, "leaky_relu",
            "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_pow(l.g, l.x4, NAN), MG_ERR_INVALID_ARG, "pow", "not finite");
    TH_FAIL(mg_leaky_relu(l.g, l.x4, INFINITY), MG_ERR_INVALID_ARG,
            "leaky_relu", "not finite");
    TH_FAIL(mg_erf(l.g, 9999), MG_ERR_UNKNOWN_ID, "erf", "not in the graph");
    TH_FAIL(mg_erf(NULL, l.x4), MG_ERR_INVALID_ARG, "erf", "graph is NULL");
    TH_FAIL(mg_reciprocal(l.g, l.xi), MG_ERR_DTYPE, "reciprocal(",
            "x must be f32, f64, bf16 or f16, not i32");
    TH_FAIL(mg_rsqrt(l.g, l.xi), MG_ERR_DTYPE, "rsqrt(", "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_sin(l.g, l.xi), MG_ERR_DTYPE, "sin(", "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_cos(l.g, 9999), MG_ERR_UNKNOWN_ID, "cos", "not in the graph");
    TH_FAIL(mg_abs(l.g, l.xi), MG_ERR_DTYPE, "abs(", "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_abs(NULL, l.x4), MG_ERR_INVALID_ARG, "abs", "graph is NULL");
    mg_graph_free(l.g);
}
END_TEST

START_TEST(test_unary) {
    const double *x = D(-2, -0.5, 0, 0.5, 1, 3);
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 2, S(2, 3), x);
        fw_check(&f, "neg", mg_neg(f.g, t), 2, S(2, 3),
                 D(2, 0.5, 0, -0.5, -1, -3));
        fw_check(&f, "relu", mg_relu(f.g, t), 2, S(2, 3),
                 D(0, 0, 0, 0.5, 1, 3));
        fw_check(&f, "gelu", mg_gelu(f.g, t), 2, S(2, 3),
                 D(-0.04540230591222494, -0.15428599017485606, 0.0,
                   0.34571400982514394, 0.8411919906082768, 2.996362607918227));
        fw_check(&f, "silu", mg_silu(f.g, t), 2, S(2, 3),
                 D(-0.2384058440442351, -0.1887703343990727, 0.0,
                   0.3112296656009273, 0.7310585786300049, 2.8577223804672998));
        fw_check(&f, "tanh", mg_tanh(f.g, t), 2, S(2, 3),
                 D(-0.9640275800758169, -0.46211715726000974, 0.0,
                   0.46211715726000974, 0.7615941559557649,
                   0.9950547536867305));
        fw_check(&f, "sigmoid", mg_sigmoid(f.g, t), 2, S(2, 3),
                 D(0.11920292202211755, 0.3775406687981454, 0.5,
                   0.6224593312018546, 0.7310585786300049, 0.9525741268224334));
        fw_check(&f, "exp", mg_exp(f.g, t), 2, S(2, 3),
                 D(0.1353352832366127, 0.6065306597126334, 1.0,
                   1.6487212707001282, 2.718281828459045, 20.085536923187668));
        fw_check(&f, "erf", mg_erf(f.g, t), 2, S(2, 3),
                 D(-0.9953222650189527, -0.5204998778130465, 0.0,
                   0.5204998778130465, 0.8427007929497149, 0.9999779095030014));
        fw_check(&f, "pow 2", mg_pow(f.g, t, 2.0), 2, S(2, 3),
                 D(4, 0.25, 0, 0.25, 1, 9));
        fw_check(&f, "pow 3", mg_pow(f.g, t, 3.0), 2, S(2, 3),
                 D(-8, -0.125, 0, 0.125, 1, 27));
        fw_check_tol(&f, "pow 1.5 of |x|", mg_pow(f.g, mg_abs(f.g, t), 1.5),
                     2, S(2, 3),
                     D(2.8284271247461903, 0.3535533905932738, 0,
                       0.3535533905932738, 1, 5.196152422706632),
                     4);
        fw_check(&f, "leaky_relu 0.1", mg_leaky_relu(f.g, t, 0.1), 2, S(2, 3),
                 D(-0.2, -0.05, 0, 0.5, 1, 3));
        fw_check(&f, "scale -1.5", mg_scale(f.g, t, -1.5), 2, S(2, 3),
                 D(3, 0.75, 0, -0.75, -1.5, -4.5));
        fw_check(&f, "scale 0", mg_scale(f.g, t, 0.0), 2, S(2, 3),
                 D(0, 0, 0, 0, 0, 0));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_unary_extremes) {
    /* saturation must not give NaN */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 1, S(4), D(-50, -20, 20, 50));
        fw_check(&f, "tanh saturated", mg_tanh(f.g, t), 1, S(4),
                 D(-1, -1, 1, 1));
        fw_check_tol(&f, "sigmoid saturated", mg_sigmoid(f.g, t), 1, S(4),
                     D(1.928749847963918e-22, 2.0611536181902037e-09,
                       0.9999999979388463, 1.0),
                     10);
        fw_check(&f, "gelu saturated", mg_gelu(f.g, t), 1, S(4),
                 D(0, 0, 20, 50));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_log_sqrt) {
    const double e1 = 2.718281828459045;
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 1, S(5), D(0.5, 1, 2, e1, 10));
        fw_check(&f, "log", mg_log(f.g, t), 1, S(5),
                 D(-0.6931471805599453, 0, 0.6931471805599453, 1,
                   2.302585092994046));
        mg_tensor s = fw_in(&f, 1, S(5), D(0.25, 1, 2, 9, 0));
        fw_check(&f, "sqrt", mg_sqrt(f.g, s), 1, S(5),
                 D(0.5, 1, 1.4142135623730951, 3, 0));
        fw_end(&f);
    }
}
END_TEST

/* reciprocal, rsqrt, sin, cos, abs against libm in double, and abs's
 * gradient: the sign of x, 0 at 0 (PyTorch's). */
START_TEST(test_unary_aten) {
    const double xv[6] = {-2, -0.5, 0.25, 0.5, 1, 3};
    const double pv[6] = {0.25, 0.5, 1, 2, 4, 9};
    double r[6], q[6], sn[6], cs[6], ab[6];
    for (int i = 0; i < 6; i++) {
        r[i] = 1 / xv[i];
        q[i] = 1 / sqrt(pv[i]);
        sn[i] = sin(xv[i]);
        cs[i] = cos(xv[i]);
        ab[i] = fabs(xv[i]);
    }
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), xv);
        mg_tensor p = fw_in(&f, 2, S(2, 3), pv);
        fw_check(&f, "reciprocal", mg_reciprocal(f.g, x), 2, S(2, 3), r);
        fw_check(&f, "rsqrt", mg_rsqrt(f.g, p), 2, S(2, 3), q);
        fw_check(&f, "sin", mg_sin(f.g, x), 2, S(2, 3), sn);
        fw_check(&f, "cos", mg_cos(f.g, x), 2, S(2, 3), cs);
        fw_check(&f, "abs", mg_abs(f.g, x), 2, S(2, 3), ab);
        mg_tensor z = fw_in(&f, 1, S(4), D(-3, 0, -0.0, 2));
        mg_tensor gy = fw_in(&f, 1, S(4), D(1, 2, 3, 4));
        mg_tensor y = mg_abs(f.g, z);
        fw_check(&f, "abs of 0 and -0", y, 1, S(4), D(3, 0, 0, 2));
        fw_check(&f, "abs gradient", fw_grad(&f, y, gy, z), 1, S(4),
                 D(-1, 0, 0, 4));
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ cast */

/* Every (from, to) pair on values that probe the rules: truncation toward
 * zero, saturation at the integer range, NaN to 0, int64 -> int32 keeping
 * the low bits, and int64 -> f32 rounding once. */
START_TEST(test_cast_values) {
    const double fv[7] = {-2.75, -0.5, 0.0, 1.9, 3e9, -1e30, NAN};
    const int64_t want_i32[7] = {-2, 0, 0, 1, INT32_MAX, INT32_MIN, 0};
    const int64_t want_i64[7] = {-2, 0, 0, 1, 3000000000LL, INT64_MIN, 0};
    for (int fi = 0; fi < 2; fi++) {
        mg_graph *g = mg_graph_new();
        mg_tensor x = mg_input(g, "x", th_dtypes[fi], 1, S(7));
        mg_tensor y32 = mg_cast(g, x, MG_I32), y64 = mg_cast(g, x, MG_I64);
        mg_tensor yf = mg_cast(g, x, th_dtypes[1 - fi]);
        TH_OK_T("cast", yf);
        float xf[7];
        for (int k = 0; k < 7; k++) xf[k] = (float)fv[k];
        int32_t o32[7];
        int64_t o64[7];
        double of64[7];
        float of32[7];
        void *outs[3] = {o32, o64, fi ? (void *)of32 : (void *)of64};
        const mg_tensor ys[3] = {y32, y64, yf};
        mg_binding b = {x, fi ? (void *)fv : (void *)xf};
        TH_RUN_OK("cast", g, 3, ys, outs, 1, &b, 1);
        for (int k = 0; k < 7; k++) {
            /* 3e9 in f32 is 3000000000 exactly (a multiple of 256) */
            ck_assert_int_eq(o32[k], want_i32[k]);
            ck_assert_int_eq(o64[k], want_i64[k]);
            const double back = fi ? (double)of32[k] : of64[k];
            if (k == 6) ck_assert(isnan(back));
            else ck_assert(back == (fi ? (double)(float)fv[k] : (double)xf[k]));
        }
        mg_graph_free(g);
    }
    /* integers to everything */
    const int64_t iv[4] = {-7, 0, 16777217, 0x100000005LL};
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_I64, 1, S(4));
    const mg_tensor ys[4] = {mg_cast(g, x, MG_F32), mg_cast(g, x, MG_F64),
                             mg_cast(g, x, MG_I32),
                             mg_cast(g, mg_cast(g, x, MG_I32), MG_I64)};
    float f32[4];
    double f64[4];
    int32_t i32[4];
    int64_t i64[4];
    void *outs[4] = {f32, f64, i32, i64};
    mg_binding b = {x, (void *)iv};
    TH_RUN_OK("cast from i64", g, 4, ys, outs, 1, &b, 1);
    for (int k = 0; k < 4; k++) {
        ck_assert(f32[k] == (float)iv[k]);
        ck_assert(f64[k] == (double)iv[k]);
        ck_assert_int_eq(i32[k], (int32_t)iv[k]);
        ck_assert_int_eq(i64[k], (int32_t)iv[k]);
    }
    ck_assert(f32[2] == 16777216.0f); /* 2^24 + 1 rounds to even */
    ck_assert_int_eq(i32[3], 5);      /* the low 32 bits */
    mg_graph_free(g);
}
END_TEST

/* The gradient through f32 -> f64 -> f32 casts is gy cast back: with
 * L = sum(cast(cast(x, f64) * w, f32)), dL/dx = f32(w), exactly. An integer
 * source gets no gradient, and asking for one is an error. */
START_TEST(test_cast_gradient) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_param(g, "x", MG_F32, 1, S(3));
    mg_tensor w = mg_input(g, "w", MG_F64, 1, S(3));
    mg_tensor y = mg_cast(g, mg_mul(g, mg_cast(g, x, MG_F64), w), MG_F32);
    mg_tensor l = mg_sum(g, y, 0, NULL, 0);
    mg_tensor gx;
    ck_assert_int_eq(mg_gradients(g, &l, 1, NULL, &x, 1, NULL, &gx), MG_OK);
    const float xv[3] = {1.5f, -2.0f, 0.25f};
    const double wv[3] = {0.1, -3.0, 1e-3};
    float gv[3];
    void *outs[1] = {gv};
    mg_binding b[2] = {{x, (void *)xv}, {w, (void *)wv}};
    TH_RUN_OK("cast gradient", g, 1, &gx, outs, 2, b, 1);
    for (int k = 0; k < 3; k++) ck_assert(gv[k] == (float)wv[k]);

    mg_tensor ids = mg_input(g, "ids", MG_I32, 1, S(3));
    mg_tensor l2 = mg_sum(g, mg_cast(g, ids, MG_F32), 0, NULL, 0);
    mg_tensor gi;
    ck_assert_int_eq(mg_gradients(g, &l2, 1, NULL, &ids, 1, NULL, &gi),
                     MG_ERR_DTYPE);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_cast_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    TH_FAIL(mg_cast(l.g, l.x4, (mg_dtype)9), MG_ERR_DTYPE, "cast",
            "unknown target dtype");
    TH_FAIL(mg_cast(l.g, 9999, MG_F32), MG_ERR_UNKNOWN_ID, "cast",
            "not in the graph");
    TH_FAIL(mg_cast(NULL, l.x4, MG_F32), MG_ERR_INVALID_ARG, "cast",
            "graph is NULL");
    TH_FAIL(mg_is_nonzero(l.g, l.xi), MG_ERR_DTYPE, "is_nonzero",
            "must be f32, f64, bf16 or f16");
    mg_graph_free(l.g);
}
END_TEST

START_TEST(test_is_nonzero) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 1, S(6), D(-2, -0.0, 0, 1e-30, INFINITY, NAN));
        fw_check(&f, "is_nonzero", mg_is_nonzero(f.g, t), 1, S(6),
                 D(1, 0, 0, 1, 1, 1));
        fw_end(&f);
    }
}
END_TEST

/* cast and is_nonzero inside recomputed segments: checkpointed gradients
 * equal plain backprop's bit for bit. Only layer 3's output is kept, so
 * every other layer's casts and masks are recomputed for the backward. */
START_TEST(test_cast_is_nonzero_checkpointed_bits) {
    float got[2][64];
    for (int run = 0; run < 2; run++) {
        mg_graph *g = mg_graph_new();
        mg_tensor x = mg_param(g, "x", MG_F32, 1, S(64));
        mg_tensor c = mg_param(g, "c", MG_F32, 1, S(64));
        mg_tensor h = x, keep = MG_NO_TENSOR;
        for (int i = 0; i < 8; i++) {
            mg_tensor wide =
                mg_cast(g, mg_tanh(g, mg_cast(g, h, MG_F64)), MG_F32);
            h = mg_add(g, mg_mul(g, wide, mg_is_nonzero(g, h)), c);
            if (i == 3) keep = h;
        }
        mg_tensor l = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
        TH_OK_T("chain", l);
        mg_checkpoints ck = {
            .policy = MG_CKPT_COLLECTION, .tensors = &keep, .n_tensors = 1};
        mg_tensor gx;
        ck_assert_int_eq(
            mg_gradients(g, &l, 1, NULL, &x, 1, run ? &ck : NULL, &gx), MG_OK);
        float xv[64], cv[64];
        for (int k = 0; k < 64; k++) {
            xv[k] = (float)((k % 9) - 4) * 0.37f; /* some exact zeros */
            cv[k] = (float)(k % 5) * 0.11f - 0.2f;
        }
        void *outs[1] = {got[run]};
        mg_binding b[2] = {{x, xv}, {c, cv}};
        TH_RUN_OK("checkpointed chain", g, 1, &gx, outs, 2, b, 1);
        mg_graph_free(g);
    }
    ck_assert(memcmp(got[0], got[1], sizeof got[0]) == 0);
}
END_TEST

TH_PART(ops_elementwise_tcase, "elementwise", 0, test_binary_row_broadcast,
        test_binary_outer_broadcast, test_binary_scalar,
        test_binary_3d_broadcast_ref, test_binary_random_broadcast_ref,
        test_binary_errors, test_unary, test_unary_errors, test_unary_extremes,
        test_unary_aten, test_log_sqrt, test_cast_values, test_cast_gradient,
        test_cast_errors, test_is_nonzero,
        test_cast_is_nonzero_checkpointed_bits)
