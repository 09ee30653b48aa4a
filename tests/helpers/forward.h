/*
 * helpers/forward.h - the fixture of the forward-value tests (included
 * through helpers.h): one graph of one float dtype whose inputs take double
 * data converted to that dtype, and checks that run one output and compare
 * it with numbers given as doubles.
 *
 *   fw_begin/fw_end   the graph and the leaf data it owns
 *   fw_in, fw_idx     a float input of the fixture's dtype / an MG_I32 input
 *   fw_labels         an MG_I32 input from int32 values
 *   fw_check(_tol)    shape, dtype and values; tolerance 1e-6 + 2e-6|e| in
 *                     f32, 1e-14 + 1e-13|e| in f64, times a scale
 *   fw_expect         shape and values; tolerance tol (f32) or tol * 1e-8
 *                     (f64), absolute and relative
 *   fw_run, fw_try    run one output, values as doubles
 *   fw_grad           d <seed, y> / d x, to check a backward kernel's values
 *   th_unravel, th_bcast_off   index arithmetic for naive reference loops
 */
#ifndef MG_TEST_HELPERS_FORWARD_H
#define MG_TEST_HELPERS_FORWARD_H

#include "../helpers.h"

/* The index ix[nd] of element idx of a row-major tensor of shape. */
static inline void th_unravel(int64_t idx, int nd, const int64_t *shape,
                              int64_t *ix) {
    for (int d = nd - 1; d >= 0; d--) {
        ix[d] = idx % shape[d];
        idx /= shape[d];
    }
}

/* Offset in a tensor of (nd, shape) aligned right to an out index ix[ndo]
 * under numpy broadcasting: naive reference loops index with it. */
static inline int64_t th_bcast_off(int nd, const int64_t *shape, int ndo,
                                   const int64_t *ix) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) {
        int64_t i = shape[d] == 1 ? 0 : ix[ndo - nd + d];
        off = off * shape[d] + i;
    }
    return off;
}

/* 0, 1, ..., 23: as shape [2,3,4], x[i,j,k] = 12i + 4j + k */
static const double th_iota24[24] = {0,  1,  2,  3,  4,  5,  6,  7,
                                     8,  9,  10, 11, 12, 13, 14, 15,
                                     16, 17, 18, 19, 20, 21, 22, 23};

#define FW_MAX 24
typedef struct fw {
    mg_graph *g;
    mg_dtype dt;
    int n;
    mg_binding b[FW_MAX]; /* every leaf, bound to data the fixture owns */
    char what[160];
} fw;

static inline void fw_begin(fw *f, mg_dtype dt) {
    memset(f, 0, sizeof *f);
    f->dt = dt;
    f->g = mg_graph_new();
    ck_assert_msg(f->g != NULL, "mg_graph_new returned NULL");
}

static inline void fw_end(fw *f) {
    for (int i = 0; i < f->n; i++) free(f->b[i].data);
    mg_graph_free(f->g);
    f->g = NULL;
}

/* An input of dtype dt holding vals converted to dt. */
static inline mg_tensor fw_leaf(fw *f, mg_dtype dt, int ndim,
                                const int64_t *shape, const double *vals) {
    int64_t n = th_numel(ndim, shape);
    char nm[16];
    ck_assert(f->n < FW_MAX);
    snprintf(nm, sizeof nm, "in%d", f->n);
    mg_tensor t = mg_input(f->g, nm, dt, ndim, shape);
    ck_assert_msg(t != MG_NO_TENSOR, "mg_input failed: %s", mg_last_error());
    void *d = calloc((size_t)(n > 0 ? n : 1), mg_dtype_size(dt));
    ck_assert(d != NULL);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MG_F32) ((float *)d)[i] = (float)vals[i];
        else if (dt == MG_F64) ((double *)d)[i] = vals[i];
        else ((int32_t *)d)[i] = (int32_t)vals[i];
    }
    f->b[f->n++] = (mg_binding){t, d};
    return t;
}

/* An input of the fixture's dtype. */
static inline mg_tensor fw_in(fw *f, int ndim, const int64_t *shape,
                              const double *vals) {
    return fw_leaf(f, f->dt, ndim, shape, vals);
}

/* An MG_I32 input (indices) from whole-number doubles. */
static inline mg_tensor fw_idx(fw *f, int ndim, const int64_t *shape,
                               const double *vals) {
    return fw_leaf(f, MG_I32, ndim, shape, vals);
}

/* MG_I32 labels [n]. */
static inline mg_tensor fw_labels(fw *f, int64_t n, const int32_t *vals) {
    int64_t shape[1] = {n};
    ck_assert(f->n < FW_MAX);
    char nm[16];
    snprintf(nm, sizeof nm, "labels%d", f->n);
    mg_tensor t = mg_input(f->g, nm, MG_I32, 1, shape);
    ck_assert_msg(t != MG_NO_TENSOR, "mg_input(i32) failed: %s",
                  mg_last_error());
    int32_t *d = (int32_t *)calloc((size_t)(n > 0 ? n : 1), sizeof *d);
    ck_assert(d != NULL);
    memcpy(d, vals, (size_t)n * sizeof(int32_t));
    f->b[f->n++] = (mg_binding){t, d};
    return t;
}

/* Runs y; returns the run status and leaves the values in got. */
static inline mg_status fw_try(fw *f, mg_tensor y, double *got) {
    int64_t n = mg_tensor_numel(f->g, y);
    ck_assert(n > 0);
    void *buf = malloc((size_t)n * mg_dtype_size(f->dt));
    ck_assert(buf != NULL);
    void *bufs[1] = {buf};
    mg_status st = th_run(f->g, 1, &y, bufs, f->n, f->b, 0);
    for (int64_t i = 0; st == MG_OK && i < n; i++)
        got[i] = f->dt == MG_F32 ? ((float *)buf)[i] : ((double *)buf)[i];
    free(buf);
    return st;
}

/* Run for y (bound to a caller buffer) and copy the result to out[] as
 * doubles. Checks y's shape and dtype first. */
static inline void fw_run(fw *f, const char *what, mg_tensor y, int ndim,
                          const int64_t *shape, double *out, uint64_t seed) {
    snprintf(f->what, sizeof f->what, "%s (%s)", what,
             f->dt == MG_F32 ? "f32" : "f64");
    ck_assert_msg(y != MG_NO_TENSOR, "%s: builder returned MG_NO_TENSOR: %s",
                  f->what, mg_last_error());
    th_check_shape(f->what, f->g, y, ndim, shape);
    mg_dtype dt;
    ck_assert_msg(mg_tensor_dtype(f->g, y, &dt) == MG_OK && dt == f->dt,
                  "%s: output dtype is not the input dtype", f->what);
    int64_t n = th_numel(ndim, shape);
    void *buf = calloc((size_t)n + 1, mg_dtype_size(f->dt));
    ck_assert(buf != NULL);
    void *bufs[1] = {buf};
    mg_status st = th_run(f->g, 1, &y, bufs, f->n, f->b, seed);
    if (st != MG_OK) {
        free(buf);
        ck_abort_msg("%s: run failed: %s", f->what, th_errmsg);
    }
    for (int64_t i = 0; i < n; i++)
        out[i] =
            f->dt == MG_F32 ? (double)((float *)buf)[i] : ((double *)buf)[i];
    free(buf);
}

/* Run for y and compare with exp[] (tolerance by dtype, times tolscale). */
static inline void fw_check_tol(fw *f, const char *what, mg_tensor y, int ndim,
                                const int64_t *shape, const double *exp,
                                double tolscale) {
    int64_t n = th_numel(ndim, shape);
    double *got = (double *)malloc((size_t)(n + 1) * sizeof(double));
    ck_assert(got != NULL);
    fw_run(f, what, y, ndim, shape, got, 0);
    double atol = f->dt == MG_F32 ? 1e-6 : 1e-14;
    double rtol = f->dt == MG_F32 ? 2e-6 : 1e-13;
    for (int64_t i = 0; i < n; i++) {
        double a = got[i], e = exp[i];
        int ok =
            isfinite(a) && fabs(a - e) <= tolscale * (atol + rtol * fabs(e));
        if (!ok) {
            free(got);
            ck_abort_msg("%s: element %lld: got %.17g, expected %.17g", f->what,
                         (long long)i, a, e);
        }
    }
    free(got);
}

static inline void fw_check(fw *f, const char *what, mg_tensor y, int ndim,
                            const int64_t *shape, const double *exp) {
    fw_check_tol(f, what, y, ndim, shape, exp, 1.0);
}

/* Runs y and checks its shape and every value (tolerance scaled by the
 * dtype: f32 values carry about 1e-7 relative rounding per operation). */
static inline void fw_expect(fw *f, const char *what, mg_tensor y, int nd,
                             const int64_t *sh, const double *want,
                             double tol) {
    char name[200];
    snprintf(name, sizeof name, "%s (%s)", what, mg_dtype_name(f->dt));
    TH_OK_T(name, y);
    th_check_shape(name, f->g, y, nd, sh);
    int64_t n = th_numel(nd, sh);
    double *got = (double *)malloc((size_t)n * sizeof *got);
    ck_assert(got != NULL);
    mg_status st = fw_try(f, y, got);
    if (st != MG_OK) free(got);
    ck_assert_msg(st == MG_OK, "%s: run failed: %s", name, th_errmsg);
    double scale = f->dt == MG_F32 ? 1.0 : 1e-8;
    th_check_f64(name, got, want, n, tol * scale, tol * scale);
    free(got);
}

/* d <seed, y> / d x: a gradient through the op under test. */
static inline mg_tensor fw_grad(fw *f, mg_tensor y, mg_tensor seed,
                                mg_tensor x) {
    mg_tensor gx = MG_NO_TENSOR;
    mg_status st = mg_gradients(f->g, &y, 1, &seed, &x, 1, NULL, &gx);
    ck_assert_msg(st == MG_OK, "mg_gradients: %s", mg_last_error());
    return gx;
}

#endif
