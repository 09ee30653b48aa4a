/*
 * ops/compare.c - part of test_ops: forward values of the comparisons and
 * logical ops in all four dtypes against loops over the same C operators,
 * NaN included; where in every dtype with broadcasting, exact with inf and
 * NaN in the branch not taken (masked_fill with -inf before a softmax);
 * clamp, maximum and minimum with their gradients at the bounds and on
 * ties; comparisons as constants under mg_gradients; bad arguments to the
 * builders.
 */
#include "../helpers.h"

static const mg_dtype all_dtypes[4] = {MG_F32, MG_F64, MG_I32, MG_I64};

/* n values converted to dt (malloc'd; the caller frees). */
static void *typed_new(mg_dtype dt, int64_t n, const double *v) {
    void *p = calloc((size_t)(n ? n : 1), mg_dtype_size(dt));
    ck_assert(p != NULL);
    for (int64_t i = 0; i < n; i++) switch (dt) {
        case MG_F32: ((float *)p)[i] = (float)v[i]; break;
        case MG_F64: ((double *)p)[i] = v[i]; break;
        case MG_I32: ((int32_t *)p)[i] = (int32_t)v[i]; break;
        default: ((int64_t *)p)[i] = (int64_t)v[i]; break;
        }
    return p;
}

static double typed_get(mg_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case MG_F32: return ((const float *)p)[i];
    case MG_F64: return ((const double *)p)[i];
    case MG_I32: return ((const int32_t *)p)[i];
    default: return (double)((const int64_t *)p)[i];
    }
}

/* What op k of the list below gives for (x, y), by the C operators. */
enum { N_CMP = 9 };
static const char *const cmp_names[N_CMP] = {
    "eq", "ne",          "lt",         "le",         "gt",
    "ge", "logical_and", "logical_or", "logical_not"};

static double cmp_ref(int k, double x, double y) {
    switch (k) {
    case 0: return x == y;
    case 1: return x != y;
    case 2: return x < y;
    case 3: return x <= y;
    case 4: return x > y;
    case 5: return x >= y;
    case 6: return x != 0 && y != 0;
    case 7: return x != 0 || y != 0;
    default: return x == 0;
    }
}

static mg_tensor cmp_build(mg_graph *g, int k, mg_tensor a, mg_tensor b) {
    switch (k) {
    case 0: return mg_eq(g, a, b);
    case 1: return mg_ne(g, a, b);
    case 2: return mg_lt(g, a, b);
    case 3: return mg_le(g, a, b);
    case 4: return mg_gt(g, a, b);
    case 5: return mg_ge(g, a, b);
    case 6: return mg_logical_and(g, a, b);
    case 7: return mg_logical_or(g, a, b);
    default: return mg_logical_not(g, a);
    }
}

/* Every comparison and logical op on a [rows, 3] against b [3] (broadcast
 * along rows) in dtype dt, each result 1/0 in that dtype. */
static void check_compare(mg_dtype dt, int rows, const double *av,
                          const double *bv) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor a = mg_input(g, "a", dt, 2, S(rows, 3));
    mg_tensor b = mg_input(g, "b", dt, 1, S(3));
    mg_tensor ys[N_CMP];
    void *bufs[N_CMP];
    for (int k = 0; k < N_CMP; k++) {
        ys[k] = cmp_build(g, k, a, b);
        TH_OK_T(cmp_names[k], ys[k]);
        mg_dtype got;
        ck_assert(mg_tensor_dtype(g, ys[k], &got) == MG_OK);
        ck_assert_msg(got == dt, "%s of %s gives %s", cmp_names[k],
                      mg_dtype_name(dt), mg_dtype_name(got));
        th_check_shape(cmp_names[k], g, ys[k], 2, S(rows, 3));
        bufs[k] = calloc((size_t)rows * 3, mg_dtype_size(dt));
    }
    mg_binding bind[2] = {{a, typed_new(dt, rows * 3, av)},
                          {b, typed_new(dt, 3, bv)}};
    TH_RUN_OK("comparisons", g, N_CMP, ys, bufs, 2, bind, 0);
    for (int k = 0; k < N_CMP; k++)
        for (int i = 0; i < rows * 3; i++) {
            /* the reference reads the values as the dtype stores them */
            const double x = typed_get(dt, bind[0].data, i);
            const double y = typed_get(dt, bind[1].data, i % 3);
            const double want = cmp_ref(k, x, y);
            const double got = typed_get(dt, bufs[k], i);
            ck_assert_msg(got == want, "%s %s element %d (%g, %g): got %g",
                          cmp_names[k], mg_dtype_name(dt), i, x, y, got);
        }
    for (int k = 0; k < N_CMP; k++) free(bufs[k]);
    free(bind[0].data);
    free(bind[1].data);
    mg_graph_free(g);
}

START_TEST(test_compare_all_dtypes) {
    static const double av[6] = {-1, 0, 2, 3, 5, -4}, bv[3] = {0, 2, 2};
    for (int d = 0; d < 4; d++) check_compare(all_dtypes[d], 2, av, bv);
}
END_TEST

/* int64 compares as int64: 2^53 + 1 and 2^53 are one double, two ints. */
START_TEST(test_compare_i64_exact) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_I64, 1, S(2));
    mg_tensor b = mg_input(g, "b", MG_I64, 1, S(2));
    mg_tensor ys[2] = {mg_eq(g, a, b), mg_gt(g, a, b)};
    int64_t av[2] = {(INT64_C(1) << 53) + 1, -5},
            bv[2] = {INT64_C(1) << 53, -5};
    int64_t eq[2], gt[2];
    void *bufs[2] = {eq, gt};
    mg_binding bind[2] = {{a, av}, {b, bv}};
    TH_RUN_OK("i64 compare", g, 2, ys, bufs, 2, bind, 0);
    ck_assert_msg(eq[0] == 0 && eq[1] == 1 && gt[0] == 1 && gt[1] == 0,
                  "eq %lld %lld, gt %lld %lld", (long long)eq[0],
                  (long long)eq[1], (long long)gt[0], (long long)gt[1]);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_compare_nan) {
    /* a NaN against a NaN, a number and zero, both ways */
    static const double av[9] = {NAN, 1, NAN, 0, NAN, 2, NAN, NAN, -0.0},
                        bv[3] = {NAN, NAN, 0};
    for (int d = 0; d < 2; d++) check_compare(all_dtypes[d], 3, av, bv);
}
END_TEST

/* ------------------------------------------------------------------ where */

/* y = where(cond [2, 1] of dtype ct, a [2, 3], b [3]) in dtype dt */
START_TEST(test_where_all_dtypes) {
    static const double cv[2] = {0, 3}, av[6] = {1, -2, 3, 4, 5, -6},
                        bv[3] = {10, 20, 30};
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < 4; c++) {
            const mg_dtype dt = all_dtypes[d], ct = all_dtypes[c];
            mg_graph *g = mg_graph_new();
            mg_tensor cond = mg_input(g, "cond", ct, 2, S(2, 1));
            mg_tensor a = mg_input(g, "a", dt, 2, S(2, 3));
            mg_tensor b = mg_input(g, "b", dt, 1, S(3));
            /* and with the branches swapped and a scalar b */
            mg_tensor s = mg_input(g, "s", dt, 0, NULL);
            mg_tensor ys[2] = {mg_where(g, cond, a, b),
                               mg_where(g, cond, s, a)};
            TH_OK_T("where", ys[0]);
            TH_OK_T("where scalar", ys[1]);
            th_check_shape("where", g, ys[0], 2, S(2, 3));
            mg_binding bind[4] = {{cond, typed_new(ct, 2, cv)},
                                  {a, typed_new(dt, 6, av)},
                                  {b, typed_new(dt, 3, bv)},
                                  {s, typed_new(dt, 1, D(-9))}};
            void *bufs[2] = {calloc(6, 8), calloc(6, 8)};
            TH_RUN_OK("where", g, 2, ys, bufs, 4, bind, 0);
            for (int i = 0; i < 6; i++) {
                const double w0 = cv[i / 3] ? av[i] : bv[i % 3];
                const double w1 = cv[i / 3] ? -9 : av[i];
                ck_assert_msg(typed_get(dt, bufs[0], i) == w0 &&
                                  typed_get(dt, bufs[1], i) == w1,
                              "where %s cond %s element %d: %g, %g; want "
                              "%g, %g",
                              mg_dtype_name(dt), mg_dtype_name(ct), i,
                              typed_get(dt, bufs[0], i),
                              typed_get(dt, bufs[1], i), w0, w1);
            }
            for (int k = 0; k < 4; k++) free(bind[k].data);
            free(bufs[0]);
            free(bufs[1]);
            mg_graph_free(g);
        }
}
END_TEST

/* masked_fill(x, mask, -inf) then softmax: y has -inf exactly where the
 * mask holds and x's own bits elsewhere; the gradient reaching x is finite,
 * with exact zeros under the mask. And where with NaN and inf on the side
 * not taken: neither reaches y nor a gradient. */
START_TEST(test_where_inf_nan_exact) {
    static const double xv[6] = {0.5, -1.25, 2, 0.75, 1, -3};
    static const double mv[6] = {0, 1, 1, 0, 0, 1}; /* 1: masked */
    static const double seed[6] = {1, 2, 3, -1, 0.5, 4};
    for (int d = 0; d < 2; d++) {
        fw f;
        fw_begin(&f, th_dtypes[d]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), xv);
        mg_tensor m = fw_in(&f, 2, S(2, 3), mv);
        mg_tensor ninf = mg_fill(f.g, th_dtypes[d], 0, NULL, -INFINITY);
        mg_tensor y = mg_where(f.g, m, ninf, x);
        double got[6];
        ck_assert_msg(fw_try(&f, y, got) == MG_OK, "%s", th_errmsg);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(mv[i] ? got[i] == -INFINITY : got[i] == xv[i],
                          "masked_fill element %d: %g", i, got[i]);
        /* softmax of each row over its unmasked entries, and its gradient
         * s (seed - <seed, s>) there, 0 under the mask */
        mg_tensor s = mg_softmax(f.g, y, 1);
        double sm[6], gx[6];
        for (int r = 0; r < 2; r++) {
            double z = 0, dot = 0;
            for (int j = 0; j < 3; j++)
                if (!mv[3 * r + j]) z += exp(xv[3 * r + j]);
            for (int j = 0; j < 3; j++) {
                const int i = 3 * r + j;
                sm[i] = mv[i] ? 0 : exp(xv[i]) / z;
                dot += seed[i] * sm[i];
            }
            for (int j = 0; j < 3; j++) {
                const int i = 3 * r + j;
                gx[i] = mv[i] ? 0 : sm[i] * (seed[i] - dot);
            }
        }
        fw_expect(&f, "softmax(masked_fill)", s, 2, S(2, 3), sm, 1e-5);
        mg_tensor gy = fw_in(&f, 2, S(2, 3), seed);
        mg_tensor g = fw_grad(&f, s, gy, x);
        ck_assert_msg(fw_try(&f, g, got) == MG_OK, "%s", th_errmsg);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(mv[i] ? got[i] == 0
                                : fabs(got[i] - gx[i]) <=
                                      1e-5 * (1 + fabs(gx[i])),
                          "gradient through masked_fill, element %d: %.17g, "
                          "want %.17g",
                          i, got[i], gx[i]);
        fw_end(&f);

        fw_begin(&f, th_dtypes[d]);
        mg_tensor a = fw_in(&f, 1, S(4), D(NAN, INFINITY, 1, -INFINITY));
        mg_tensor b = fw_in(&f, 1, S(4), D(2, 3, NAN, 4));
        mg_tensor c = fw_in(&f, 1, S(4), D(0, 0, 1, 0));
        y = mg_where(f.g, c, a, b);
        fw_check(&f, "where around NaN and inf", y, 1, S(4), D(2, 3, 1, 4));
        mg_tensor w = fw_in(&f, 1, S(4), D(1, 2, 3, 4));
        fw_check(&f, "where's gradient to a", fw_grad(&f, y, w, a), 1, S(4),
                 D(0, 0, 3, 0));
        fw_check(&f, "where's gradient to b", fw_grad(&f, y, w, b), 1, S(4),
                 D(1, 2, 0, 4));
        fw_end(&f);
    }
}
END_TEST

/* a [2, 3], b [3] broadcast, cond [2, 1]: b's gradient sums the rows it
 * was picked in. */
START_TEST(test_where_gradient_broadcast) {
    for (int d = 0; d < 2; d++) {
        fw f;
        fw_begin(&f, th_dtypes[d]);
        mg_tensor c = fw_in(&f, 2, S(2, 1), D(1, 0));
        mg_tensor a = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        mg_tensor b = fw_in(&f, 1, S(3), D(-1, -2, -3));
        mg_tensor y = mg_where(f.g, c, a, b);
        fw_check(&f, "where broadcast", y, 2, S(2, 3), D(1, 2, 3, -1, -2, -3));
        mg_tensor gy = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        fw_check(&f, "where gradient to a", fw_grad(&f, y, gy, a), 2, S(2, 3),
                 D(1, 2, 3, 0, 0, 0));
        fw_check(&f, "where gradient to b", fw_grad(&f, y, gy, b), 1, S(3),
                 D(4, 5, 6));
        /* both rows pick b: its gradient sums them */
        mg_tensor c0 = fw_in(&f, 2, S(2, 1), D(0, 0));
        mg_tensor y0 = mg_where(f.g, c0, a, b);
        fw_check(&f, "where gradient to b, summed", fw_grad(&f, y0, gy, b), 1,
                 S(3), D(5, 7, 9));
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ clamp */

START_TEST(test_clamp) {
    static const double xv[6] = {-3, -1, 0.5, 2, 5, -0.25};
    for (int d = 0; d < 2; d++) {
        fw f;
        fw_begin(&f, th_dtypes[d]);
        mg_tensor x = fw_in(&f, 1, S(6), xv);
        mg_tensor y = mg_clamp(f.g, x, -1, 2);
        fw_check(&f, "clamp [-1, 2]", y, 1, S(6), D(-1, -1, 0.5, 2, 2, -0.25));
        /* the bounds themselves pass the gradient, as in PyTorch */
        mg_tensor gy = fw_in(&f, 1, S(6), D(1, 2, 3, 4, 5, 6));
        fw_check(&f, "clamp gradient", fw_grad(&f, y, gy, x), 1, S(6),
                 D(0, 2, 3, 4, 0, 6));
        fw_check(&f, "clamp [-inf, 0]", mg_clamp(f.g, x, -INFINITY, 0), 1, S(6),
                 D(-3, -1, 0, 0, 0, -0.25));
        fw_check(&f, "clamp [0, inf]", mg_clamp(f.g, x, 0, INFINITY), 1, S(6),
                 D(0, 0, 0.5, 2, 5, 0));
        /* lo > hi: hi everywhere (torch.clamp), and no gradient */
        mg_tensor z = mg_clamp(f.g, x, 3, 1);
        fw_check(&f, "clamp lo > hi", z, 1, S(6), D(1, 1, 1, 1, 1, 1));
        fw_check(&f, "clamp lo > hi gradient", fw_grad(&f, z, gy, x), 1, S(6),
                 D(0, 0, 0, 0, 0, 0));
        fw_end(&f);

        /* a NaN x stays NaN and gets no gradient */
        fw_begin(&f, th_dtypes[d]);
        x = fw_in(&f, 1, S(2), D(NAN, 7));
        y = mg_clamp(f.g, x, -1, 1);
        double got[2];
        ck_assert(fw_try(&f, y, got) == MG_OK);
        ck_assert_msg(isnan(got[0]) && got[1] == 1, "clamp(NaN, 7): %g %g",
                      got[0], got[1]);
        gy = fw_in(&f, 1, S(2), D(5, 5));
        fw_check(&f, "clamp gradient at NaN", fw_grad(&f, y, gy, x), 1, S(2),
                 D(0, 0));
        fw_end(&f);
    }
}
END_TEST

/* ---------------------------------------------------------- maximum, minimum
 * Ties split the gradient half and half (PyTorch's rule); NaN wins. */
START_TEST(test_maximum_minimum) {
    for (int d = 0; d < 2; d++) {
        fw f;
        fw_begin(&f, th_dtypes[d]);
        mg_tensor a = fw_in(&f, 2, S(2, 3), D(1, 5, -2, 3, 0, 4));
        mg_tensor b = fw_in(&f, 1, S(3), D(3, 5, -3));
        mg_tensor gy = fw_in(&f, 2, S(2, 3), D(1, 2, 4, 8, 16, 32));
        mg_tensor mx = mg_maximum(f.g, a, b), mn = mg_minimum(f.g, a, b);
        fw_check(&f, "maximum", mx, 2, S(2, 3), D(3, 5, -2, 3, 5, 4));
        fw_check(&f, "minimum", mn, 2, S(2, 3), D(1, 5, -3, 3, 0, -3));
        /* (0,1) and (1,0) are ties */
        fw_check(&f, "maximum gradient to a", fw_grad(&f, mx, gy, a), 2,
                 S(2, 3), D(0, 1, 4, 4, 0, 32));
        fw_check(&f, "maximum gradient to b", fw_grad(&f, mx, gy, b), 1, S(3),
                 D(1 + 4, 1 + 16, 0));
        fw_check(&f, "minimum gradient to a", fw_grad(&f, mn, gy, a), 2,
                 S(2, 3), D(1, 1, 0, 4, 16, 0));
        fw_check(&f, "minimum gradient to b", fw_grad(&f, mn, gy, b), 1, S(3),
                 D(4, 1, 4 + 32));
        fw_end(&f);

        fw_begin(&f, th_dtypes[d]);
        mg_tensor p = fw_in(&f, 1, S(3), D(NAN, 1, INFINITY));
        mg_tensor q = fw_in(&f, 1, S(3), D(0, NAN, -INFINITY));
        double got[3];
        ck_assert(fw_try(&f, mg_maximum(f.g, p, q), got) == MG_OK);
        ck_assert_msg(isnan(got[0]) && isnan(got[1]) && got[2] == INFINITY,
                      "maximum with NaN: %g %g %g", got[0], got[1], got[2]);
        ck_assert(fw_try(&f, mg_minimum(f.g, p, q), got) == MG_OK);
        ck_assert_msg(isnan(got[0]) && isnan(got[1]) && got[2] == -INFINITY,
                      "minimum with NaN: %g %g %g", got[0], got[1], got[2]);
        fw_end(&f);
    }
}
END_TEST

/* ---------------------------------------------------------- no gradients
 * A comparison's 1/0 result is a constant to mg_gradients: y = gt(x, 0) x
 * has gradient gt(x, 0) (PyTorch's x * (x > 0)), and a loss reached only
 * through comparisons has a zero gradient, not an error. */
START_TEST(test_compare_is_constant) {
    for (int d = 0; d < 2; d++) {
        fw f;
        fw_begin(&f, th_dtypes[d]);
        mg_tensor x = fw_in(&f, 1, S(4), D(-1, 2, 0, 3));
        mg_tensor zero = mg_fill(f.g, th_dtypes[d], 0, NULL, 0.0);
        mg_tensor m = mg_gt(f.g, x, zero);
        mg_tensor y = mg_mul(f.g, m, x);
        mg_tensor gy = fw_in(&f, 1, S(4), D(1, 1, 1, 1));
        fw_check(&f, "d (x > 0) x / dx", fw_grad(&f, y, gy, x), 1, S(4),
                 D(0, 1, 0, 1));
        mg_tensor only = mg_logical_not(f.g, mg_le(f.g, x, zero));
        fw_check(&f, "d logical_not(x <= 0) / dx", fw_grad(&f, only, gy, x), 1,
                 S(4), D(0, 0, 0, 0));
        fw_end(&f);
    }
}
END_TEST

/* mg_tensor_attrs_hash sees the new attributes: clamp's bounds, and
 * cumsum's direction (a forward cumsum and its gradient's reversed one),
 * so pipeline ranks whose ops differ only in them do not agree. */
START_TEST(test_new_attrs_hashed) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_param(g, "x", MG_F32, 2, S(2, 3));
    mg_tensor c[3] = {mg_clamp(g, x, 0, 1), mg_clamp(g, x, 0, 2),
                      mg_clamp(g, x, -1, 1)};
    uint64_t h[3];
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(mg_tensor_attrs_hash(g, c[k], &h[k]), MG_OK);
    ck_assert_msg(h[0] != h[1] && h[0] != h[2] && h[1] != h[2],
                  "clamp bounds not hashed: %llx %llx %llx",
                  (unsigned long long)h[0], (unsigned long long)h[1],
                  (unsigned long long)h[2]);
    mg_tensor y = mg_cumsum(g, x, 1), gx;
    mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &x, 1, NULL, &gx), MG_OK);
    int n = 0;
    uint64_t hc[2] = {0, 0};
    for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++)
        if (!strcmp(mg_tensor_op_name(g, t), "cumsum")) {
            ck_assert_int_lt(n, 2);
            ck_assert_int_eq(mg_tensor_attrs_hash(g, t, &hc[n++]), MG_OK);
        }
    ck_assert_int_eq(n, 2);
    ck_assert_msg(hc[0] != hc[1], "cumsum's direction is not hashed");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(test_compare_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor i3 = mg_input(g, "i3", MG_I32, 1, S(3));
    /* mixed int and float: refused, never promoted */
    TH_FAIL(mg_eq(g, l.v3, i3), MG_ERR_DTYPE, "eq(",
            "a is f32 but b is i32; cast one of them first");
    TH_FAIL(mg_logical_or(g, l.x4, l.x4d), MG_ERR_DTYPE, "logical_or(",
            "a is f32 but b is f64");
    TH_FAIL(mg_lt(g, l.x4, l.v3), MG_ERR_SHAPE, "lt(",
            "shapes do not broadcast: dim 3 of the result would be 5 from a "
            "and 3 from b");
    TH_FAIL(mg_ge(g, 9999, l.v3), MG_ERR_UNKNOWN_ID, "ge", "not in the graph");
    TH_FAIL(mg_ne(NULL, l.v3, l.v3), MG_ERR_INVALID_ARG, "ne", "graph is NULL");
    TH_FAIL(mg_logical_not(g, 9999), MG_ERR_UNKNOWN_ID, "logical_not",
            "not in the graph");
    TH_FAIL(mg_where(g, l.xi, l.x4, l.x4d), MG_ERR_DTYPE, "where(",
            "a is f32 but b is f64");
    TH_FAIL(mg_where(g, l.v3, l.x4, l.x4), MG_ERR_SHAPE, "where(",
            "from a and b and 3 from cond");
    TH_FAIL(mg_where(g, l.xi, l.x3, l.v3), MG_ERR_SHAPE, "where(",
            "shapes do not broadcast");
    TH_FAIL(mg_where(g, 9999, l.x4, l.x4), MG_ERR_UNKNOWN_ID, "where",
            "not in the graph");
    TH_FAIL(mg_where(g, l.xi, l.x4, MG_NO_TENSOR), MG_ERR_UNKNOWN_ID, "where",
            "input 2 is MG_NO_TENSOR");
    TH_FAIL(mg_clamp(g, l.x4, NAN, 1), MG_ERR_INVALID_ARG, "clamp",
            "bound lo is NaN");
    TH_FAIL(mg_clamp(g, l.x4, 0, NAN), MG_ERR_INVALID_ARG, "clamp",
            "bound hi is NaN");
    TH_FAIL(mg_clamp(g, l.xi, 0, 1), MG_ERR_DTYPE, "clamp(",
            "x must be f32, f64, bf16 or f16, not i32");
    TH_FAIL(mg_clamp(g, 9999, 0, 1), MG_ERR_UNKNOWN_ID, "clamp",
            "not in the graph");
    TH_FAIL(mg_maximum(g, l.xi, l.xi), MG_ERR_DTYPE, "maximum(",
            "must be f32, f64, bf16 or f16");
    TH_FAIL(mg_minimum(g, l.x4, l.v3), MG_ERR_SHAPE, "minimum(",
            "do not broadcast");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_compare_tcase, "compare", 0, test_compare_all_dtypes,
        test_compare_i64_exact, test_compare_nan, test_where_all_dtypes,
        test_where_inf_nan_exact, test_where_gradient_broadcast, test_clamp,
        test_maximum_minimum, test_compare_is_constant, test_new_attrs_hashed,
        test_compare_errors)
