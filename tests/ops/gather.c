/*
 * ops/gather.c - part of test_ops: forward values of gather and
 * index_select in MG_F32 and MG_F64 against loops that index as
 * torch.gather and torch.index_select do, with int32 and int64 indices,
 * repeated indices, an index smaller than x and negative axes; their
 * gradients against loops that scatter-add; integer x; out-of-range
 * indices at run time; bad arguments to the builders.
 */
#include "../helpers.h"

/* An MG_I64 input holding vals, owned by the fixture (fw_idx makes
 * MG_I32 ones). */
static mg_tensor fw_idx64(fw *f, int ndim, const int64_t *shape,
                          const double *vals) {
    const int64_t n = th_numel(ndim, shape);
    char nm[16];
    ck_assert(f->n < FW_MAX);
    snprintf(nm, sizeof nm, "i64_%d", f->n);
    mg_tensor t = mg_input(f->g, nm, MG_I64, ndim, shape);
    TH_OK_T(nm, t);
    int64_t *d = calloc((size_t)n, sizeof *d);
    ck_assert(d != NULL);
    for (int64_t i = 0; i < n; i++) d[i] = (int64_t)vals[i];
    f->b[f->n++] = (mg_binding){t, d};
    return t;
}

/* y[o] = x[...] with the axis coordinate of o replaced by idx[o]; and the
 * gradient: dx zeroed, gy[o] added at that place. x has (nd, xs), the
 * index (nd, is). */
static void gather_ref(int nd, const int64_t *xs, const int64_t *is, int axis,
                       const double *x, const double *idx, const double *gy,
                       double *y, double *dx) {
    const int64_t ni = th_numel(nd, is), nx = th_numel(nd, xs);
    for (int64_t i = 0; i < nx; i++) dx[i] = 0;
    for (int64_t o = 0; o < ni; o++) {
        int64_t ix[MG_MAX_DIMS], off = 0;
        th_unravel(o, nd, is, ix);
        ix[axis] = (int64_t)idx[o];
        for (int d = 0; d < nd; d++) off = off * xs[d] + ix[d];
        y[o] = x[off];
        dx[off] += gy[o];
    }
}

typedef struct gcase {
    int nd, axis;
    int64_t xs[3], is[3];
    double idx[24];
    const char *what;
} gcase;

static const gcase gcases[] = {
    {2, 1, {3, 4}, {3, 2}, {3, 0, 1, 1, 2, 3}, "x [3,4], axis 1"},
    {2, 0, {3, 4}, {2, 4}, {2, 0, 1, 2, 0, 0, 0, 1}, "x [3,4], axis 0"},
    {2, -1, {3, 4}, {2, 3}, {0, 1, 3, 2, 2, 0}, "index [2,3] < x, axis -1"},
    {3,
     1,
     {2, 3, 4},
     {2, 5, 2},
     {2, 0, 1, 1, 0, 2, 2, 2, 1, 0, 0, 0, 1, 2, 2, 1, 0, 1, 2, 0},
     "x [2,3,4], index [2,5,2], axis 1 (repeats)"},
    {1, 0, {5}, {7}, {4, 4, 0, 1, 4, 3, 2}, "1-D, longer than x"},
};

START_TEST(test_gather_values) {
    for (int k = 0; k < (int)(sizeof gcases / sizeof gcases[0]); k++) {
        const gcase *c = &gcases[k];
        const int axis = c->axis < 0 ? c->axis + c->nd : c->axis;
        const int64_t ni = th_numel(c->nd, c->is);
        double y[24], dx[24], gy[24];
        for (int64_t o = 0; o < ni; o++) gy[o] = (double)(o % 5) + 0.5 * o;
        gather_ref(c->nd, c->xs, c->is, axis, th_iota24, c->idx, gy, y, dx);
        for (int d = 0; d < 2; d++)
            for (int wide = 0; wide < 2; wide++) {
                fw f;
                fw_begin(&f, th_dtypes[d]);
                mg_tensor x = fw_in(&f, c->nd, c->xs, th_iota24);
                mg_tensor i = wide ? fw_idx64(&f, c->nd, c->is, c->idx)
                                   : fw_idx(&f, c->nd, c->is, c->idx);
                mg_tensor t = mg_gather(f.g, x, c->axis, i);
                char what[160];
                snprintf(what, sizeof what, "gather %s, %s", c->what,
                         wide ? "i64" : "i32");
                fw_check(&f, what, t, c->nd, c->is, y);
                mg_tensor g = fw_in(&f, c->nd, c->is, gy);
                snprintf(what, sizeof what, "gather_grad %s, %s", c->what,
                         wide ? "i64" : "i32");
                fw_check(&f, what, fw_grad(&f, t, g, x), c->nd, c->xs, dx);
                fw_end(&f);
            }
    }
}
END_TEST

/* A gather copies whatever dtype x has. */
START_TEST(test_gather_int_x) {
    mg_graph *g = mg_graph_new();
    mg_tensor x32 = mg_input(g, "x32", MG_I32, 2, S(2, 3));
    mg_tensor x64 = mg_input(g, "x64", MG_I64, 2, S(2, 3));
    mg_tensor idx = mg_input(g, "idx", MG_I64, 2, S(2, 2));
    mg_tensor sel = mg_input(g, "sel", MG_I32, 1, S(3));
    mg_tensor ys[3] = {mg_gather(g, x32, 1, idx), mg_gather(g, x64, -1, idx),
                       mg_index_select(g, x64, 1, sel)};
    for (int k = 0; k < 3; k++) TH_OK_T("gather of ints", ys[k]);
    int32_t a[6] = {1, -2, 3, 40, 50, -60}, y0[4];
    int64_t b[6] = {INT64_C(1) << 60, 2, 3, 4, 5, -(INT64_C(1) << 62)};
    int64_t iv[4] = {2, 0, 1, 2}, y1[4], y2[6];
    int32_t sv[3] = {2, 2, 0};
    void *bufs[3] = {y0, y1, y2};
    mg_binding bind[4] = {{x32, a}, {x64, b}, {idx, iv}, {sel, sv}};
    TH_RUN_OK("gather of ints", g, 3, ys, bufs, 4, bind, 0);
    ck_assert(y0[0] == 3 && y0[1] == 1 && y0[2] == 50 && y0[3] == -60);
    ck_assert(y1[0] == 3 && y1[1] == b[0] && y1[2] == 5 && y1[3] == b[5]);
    ck_assert(y2[0] == 3 && y2[1] == 3 && y2[2] == b[0] && y2[3] == b[5] &&
              y2[4] == b[5] && y2[5] == 4);
    mg_graph_free(g);
}
END_TEST

/* --------------------------------------------------------------- index_select
 * y[o, j, i] = x[o, idx[j], i]; the gradient adds rows of gy back. */
START_TEST(test_index_select_values) {
    static const double gy24[24] = {1,  2,  3,  4,  5,  6,  7,  8,
                                    9,  10, 11, 12, 13, 14, 15, 16,
                                    17, 18, 19, 20, 21, 22, 23, 24};
    for (int d = 0; d < 2; d++)
        for (int wide = 0; wide < 2; wide++) {
            fw f;
            fw_begin(&f, th_dtypes[d]);
            mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
            const double *iv = D(2, 0, 2);
            mg_tensor i =
                wide ? fw_idx64(&f, 1, S(3), iv) : fw_idx(&f, 1, S(3), iv);
            mg_tensor y = mg_index_select(f.g, x, 1, i);
            fw_check(&f, "index_select axis 1", y, 3, S(2, 3, 4),
                     D(8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23,
                       12, 13, 14, 15, 20, 21, 22, 23));
            /* row 2 of each slice gets rows 0 and 2 of gy, row 1 none */
            mg_tensor g = fw_in(&f, 3, S(2, 3, 4), gy24);
            fw_check(&f, "index_select_grad axis 1", fw_grad(&f, y, g, x), 3,
                     S(2, 3, 4),
                     D(5, 6, 7, 8, 0, 0, 0, 0, 1 + 9, 2 + 10, 3 + 11, 4 + 12,
                       17, 18, 19, 20, 0, 0, 0, 0, 13 + 21, 14 + 22, 15 + 23,
                       16 + 24));
            /* the last axis, by a negative number, and a longer index */
            mg_tensor j = fw_idx(&f, 1, S(5), D(3, 3, 1, 0, 2));
            mg_tensor z = mg_index_select(f.g, x, -1, j);
            fw_check(&f, "index_select axis -1", z, 3, S(2, 3, 5),
                     D(3, 3, 1, 0, 2, 7, 7, 5, 4, 6, 11, 11, 9, 8, 10, 15, 15,
                       13, 12, 14, 19, 19, 17, 16, 18, 23, 23, 21, 20, 22));
            /* gz[r][j] = 5 r + j + 1 over the 6 rows r: dx[r] =
             * (gz[r][3], gz[r][2], gz[r][4], gz[r][0] + gz[r][1]) */
            double gzv[30], dz[24];
            for (int k = 0; k < 30; k++) gzv[k] = k + 1;
            for (int r = 0; r < 6; r++) {
                dz[4 * r] = 5 * r + 4;
                dz[4 * r + 1] = 5 * r + 3;
                dz[4 * r + 2] = 5 * r + 5;
                dz[4 * r + 3] = 10 * r + 3;
            }
            mg_tensor gz = fw_in(&f, 3, S(2, 3, 5), gzv);
            fw_check(&f, "index_select_grad axis -1", fw_grad(&f, z, gz, x), 3,
                     S(2, 3, 4), dz);
            fw_end(&f);
        }
}
END_TEST

/* -------------------------------------------------------------- bad indices
 * An index outside x's axis, too large or negative, fails the run with
 * the op's name and the offending index, as embedding does. */
START_TEST(test_gather_bad_index) {
    static const double bad[2][4] = {{0, 4, 1, 0}, {2, -1, 0, 1}};
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < 2; op++) {
            fw f;
            fw_begin(&f, MG_F32);
            mg_tensor x = fw_in(&f, 2, S(2, 4), th_iota24);
            mg_tensor y =
                op ? mg_index_select(f.g, x, 1, fw_idx64(&f, 1, S(4), bad[k]))
                   : mg_gather(f.g, x, 1, fw_idx(&f, 2, S(2, 2), bad[k]));
            double got[8];
            mg_status st = fw_try(&f, y, got);
            char want[64];
            snprintf(want, sizeof want,
                     "index %d at position 1 is outside [0, 4)",
                     (int)bad[k][1]);
            const char *name = op ? "index_select" : "gather";
            ck_assert_msg(st == MG_ERR_INVALID_ARG && strstr(th_errmsg, want) &&
                              strstr(th_errmsg, name),
                          "%s with index %d: %s (%s)", name, (int)bad[k][1],
                          mg_status_str(st), th_errmsg);
            fw_end(&f);
        }
}
END_TEST

START_TEST(test_gather_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor x = mg_input(g, "x2", MG_F32, 2, S(3, 4));
    mg_tensor fi = mg_input(g, "fi", MG_F32, 2, S(3, 4));
    mg_tensor i2 = mg_input(g, "i2", MG_I32, 2, S(3, 2));
    mg_tensor i1 = mg_input(g, "i1", MG_I64, 1, S(3));
    mg_tensor wide = mg_input(g, "wide", MG_I32, 2, S(4, 2));
    mg_tensor s = mg_input(g, "s", MG_F32, 0, NULL);
    TH_FAIL(mg_gather(g, x, 1, fi), MG_ERR_DTYPE, "gather(",
            "index must be i32 or i64, not f32");
    TH_FAIL(mg_gather(g, x, 1, i1), MG_ERR_SHAPE, "gather(",
            "index [3] must have x's rank 2, not 1");
    TH_FAIL(mg_gather(g, x, 1, wide), MG_ERR_SHAPE, "gather(",
            "index [4,2] is larger than x [3,4] in dim 0 (only axis 1 may be)");
    TH_FAIL(mg_gather(g, x, 2, i2), MG_ERR_INVALID_ARG, "gather(",
            "axis 2 is out of range for 2 dims");
    TH_FAIL(mg_gather(g, x, -3, i2), MG_ERR_INVALID_ARG, "gather(",
            "axis -3 is out of range for 2 dims");
    TH_FAIL(mg_gather(g, s, 0, i2), MG_ERR_SHAPE, "gather(",
            "x must have at least 1 dim");
    TH_FAIL(mg_gather(g, 9999, 0, i2), MG_ERR_UNKNOWN_ID, "gather",
            "not in the graph");
    TH_FAIL(mg_gather(g, x, 0, 9999), MG_ERR_UNKNOWN_ID, "gather",
            "not in the graph");
    TH_FAIL(mg_gather(NULL, x, 0, i2), MG_ERR_INVALID_ARG, "gather",
            "graph is NULL");
    TH_FAIL(mg_index_select(g, x, 0, i2), MG_ERR_SHAPE, "index_select(",
            "index must be 1-D, not [3,2]");
    TH_FAIL(mg_index_select(g, x, 0, fi), MG_ERR_DTYPE, "index_select(",
            "index must be i32 or i64, not f32");
    TH_FAIL(mg_index_select(g, x, 5, i1), MG_ERR_INVALID_ARG, "index_select(",
            "axis 5 is out of range for 2 dims");
    TH_FAIL(mg_index_select(g, 9999, 0, i1), MG_ERR_UNKNOWN_ID, "index_select",
            "not in the graph");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_gather_tcase, "gather", 0, test_gather_values, test_gather_int_x,
        test_index_select_values, test_gather_bad_index, test_gather_errors)
