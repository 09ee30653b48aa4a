/*
 * helpers/gradcheck.h - the finite-difference gradient checker of the tests
 * (included through helpers.h); its checks record the ops they
 * differentiated (helpers/record.c), so that test_gradcheck can fail on an
 * op in MG_OP_LIST that no check reaches.
 */
#ifndef MG_TEST_HELPERS_GRADCHECK_H
#define MG_TEST_HELPERS_GRADCHECK_H

#include "../helpers.h"
#include "common/ir.h"

/* Usage:
 *   gc_ctx c; gc_begin(&c, "name", seed);
 *   mg_tensor x = gc_x(&c, 2, (int64_t[]){2, 3});   // differentiated leaf
 *   mg_tensor y = mg_tanh(c.g, x);
 *   gc_check(&c, y);      // L = sum(y * W), W random; analytic vs FD
 *   gc_end(&c);
 *
 * All leaves are MG_F64 inputs (or params) with random data owned by the
 * context. gc_check_ys is the general form: the objective is
 * sum_j <seed_j, y_j> with seed_j the data of grad_ys[j] (a gc leaf) or
 * ones when grad_ys is NULL or the slot is MG_NO_TENSOR.
 */

#define GC_MAX_LEAVES 24
#define GC_H 1e-6
#define GC_TOL 1e-6

typedef struct gc_ctx {
    mg_graph *g;
    const char *name;
    th_rng rng;
    uint64_t run_seed;
    int n;
    mg_tensor t[GC_MAX_LEAVES];
    void *data[GC_MAX_LEAVES];
    int64_t numel[GC_MAX_LEAVES];
    mg_dtype dtype[GC_MAX_LEAVES];
    int is_x[GC_MAX_LEAVES];
    double max_err; /* the last check's relative error */
    /* Tensors below this id are the function under test; gc_check sets it
     * so that the loss it adds is not recorded as checked. 0: all. */
    int32_t fwd_end;
} gc_ctx;

/* ------------------------------------------------------------------ record
 * A record (helpers/record.c, one per test program) of the ops that the
 * checks differentiated: GC_FORWARD, an op on a path from a differentiated
 * leaf to an objective; GC_BACKWARD, an op the analytic gradient computed.
 * Check runs each test in a forked process; the record is shared memory
 * that gc_record_open makes before the suite runs, so the counts reach a
 * later test. Without gc_record_open nothing is recorded. */

enum { GC_FORWARD = 0, GC_BACKWARD = 1, GC_N_OPS = MG_OP_COUNT };

void gc_record_open(void);
void gc_record_close(void);
int gc_record_is_open(void);
/* The op name of MG_OP_LIST entry k. */
const char *gc_op_name(int k);
/* Count one check of op `name` in record `which`. */
void gc_record_op(const char *name, int which);
/* How many checks recorded op k in `which`. */
int gc_record_count(int k, int which);

/* mark[t] |= 1 for every tensor that reaches one of `to` (ids ascending is
 * a topological order: an op's inputs exist before it). */
static inline void gc_mark_ancestors(const mg_graph *g, unsigned char *mark,
                                     int n_to, const mg_tensor *to) {
    for (int j = 0; j < n_to; j++) mark[to[j]] |= 1;
    for (int32_t t = mg_graph_num_tensors(g) - 1; t >= 0; t--) {
        if (!(mark[t] & 1)) continue;
        for (int k = 0; k < mg_tensor_num_inputs(g, t); k++)
            mark[mg_tensor_input(g, t, k)] |= 1;
    }
}

/* Records the forward ops of tensors below fwd_end on a path from an x
 * leaf to a y; called before mg_gradients adds the backward graph. */
static inline void gc_record_forward(const gc_ctx *c, int n_ys,
                                     const mg_tensor *ys, int32_t fwd_end) {
    const int32_t n = mg_graph_num_tensors(c->g);
    unsigned char *mark = (unsigned char *)calloc((size_t)n + 1, 1);
    ck_assert(mark != NULL);
    gc_mark_ancestors(c->g, mark, n_ys, ys);
    for (int i = 0; i < c->n; i++)
        if (c->is_x[i]) mark[c->t[i]] |= 2;
    for (int32_t t = 0; t < n; t++) {
        for (int k = 0; k < mg_tensor_num_inputs(c->g, t); k++)
            if (mark[mg_tensor_input(c->g, t, k)] & 2) mark[t] |= 2;
        if (mark[t] == 3 && t < fwd_end && mg_tensor_num_inputs(c->g, t) > 0)
            gc_record_op(mg_tensor_op_name(c->g, t), GC_FORWARD);
    }
    free(mark);
}

/* Records the ops that compute the gradients (tensors from first on). */
static inline void gc_record_backward(const gc_ctx *c, int n_grads,
                                      const mg_tensor *grads, int32_t first) {
    const int32_t n = mg_graph_num_tensors(c->g);
    unsigned char *mark = (unsigned char *)calloc((size_t)n + 1, 1);
    ck_assert(mark != NULL);
    gc_mark_ancestors(c->g, mark, n_grads, grads);
    for (int32_t t = first; t < n; t++)
        if (mark[t] && mg_tensor_num_inputs(c->g, t) > 0)
            gc_record_op(mg_tensor_op_name(c->g, t), GC_BACKWARD);
    free(mark);
}

static inline void gc_begin(gc_ctx *c, const char *name, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->name = name;
    th_rng_init(&c->rng, seed);
    c->run_seed = 1234;
    c->g = mg_graph_new();
    ck_assert_msg(c->g != NULL, "%s: mg_graph_new returned NULL", name);
}

static inline void gc_end(gc_ctx *c) {
    for (int i = 0; i < c->n; i++) free(c->data[i]);
    mg_graph_free(c->g);
    c->g = NULL;
    c->n = 0;
}

static inline int gc_find(const gc_ctx *c, mg_tensor t) {
    for (int i = 0; i < c->n; i++)
        if (c->t[i] == t) return i;
    return -1;
}

/* A float64 leaf with random data in [lo, hi) (|x| >= minabs). */
static inline mg_tensor gc_leaf(gc_ctx *c, int param, int is_x, int ndim,
                                const int64_t *shape, double lo, double hi,
                                double minabs) {
    char nm[32];
    ck_assert_msg(c->n < GC_MAX_LEAVES, "%s: too many leaves", c->name);
    snprintf(nm, sizeof nm, "leaf%d", c->n);
    mg_tensor t = param ? mg_param(c->g, nm, MG_F64, ndim, shape)
                        : mg_input(c->g, nm, MG_F64, ndim, shape);
    ck_assert_msg(t != MG_NO_TENSOR, "%s: creating leaf %s failed: %s", c->name,
                  nm, mg_last_error());
    int64_t n = th_numel(ndim, shape);
    double *d = (double *)malloc((size_t)n * sizeof *d);
    ck_assert(d != NULL);
    th_fill_f64(&c->rng, d, n, lo, hi, minabs);
    c->t[c->n] = t;
    c->data[c->n] = d;
    c->numel[c->n] = n;
    c->dtype[c->n] = MG_F64;
    c->is_x[c->n] = is_x;
    c->n++;
    return t;
}

/* A differentiated input in [-2, 2), |x| >= 1e-3 (away from relu's kink). */
static inline mg_tensor gc_x(gc_ctx *c, int ndim, const int64_t *shape) {
    return gc_leaf(c, 0, 1, ndim, shape, -2.0, 2.0, 1e-3);
}

static inline mg_tensor gc_x_range(gc_ctx *c, int ndim, const int64_t *shape,
                                   double lo, double hi) {
    return gc_leaf(c, 0, 1, ndim, shape, lo, hi, 1e-3);
}

/* A differentiated parameter (mg_param) in [-2, 2). */
static inline mg_tensor gc_p(gc_ctx *c, int ndim, const int64_t *shape) {
    return gc_leaf(c, 1, 1, ndim, shape, -2.0, 2.0, 1e-3);
}

/* A float64 input that is bound but not differentiated. */
static inline mg_tensor gc_const(gc_ctx *c, int ndim, const int64_t *shape,
                                 double lo, double hi) {
    return gc_leaf(c, 0, 0, ndim, shape, lo, hi, 0.0);
}

/* int32 labels [n] in [0, classes). */
static inline mg_tensor gc_labels(gc_ctx *c, int64_t n, int classes) {
    int64_t shape[1] = {n};
    ck_assert_msg(c->n < GC_MAX_LEAVES, "%s: too many leaves", c->name);
    mg_tensor t = mg_input(c->g, "labels", MG_I32, 1, shape);
    ck_assert_msg(t != MG_NO_TENSOR, "%s: creating labels failed: %s", c->name,
                  mg_last_error());
    int32_t *d = (int32_t *)malloc((size_t)n * sizeof *d);
    ck_assert(d != NULL);
    for (int64_t i = 0; i < n; i++)
        d[i] = (int32_t)(th_rng_next(&c->rng) % (uint64_t)classes);
    c->t[c->n] = t;
    c->data[c->n] = d;
    c->numel[c->n] = n;
    c->dtype[c->n] = MG_I32;
    c->is_x[c->n] = 0;
    c->n++;
    return t;
}

/* The data of a gc leaf (double* for float leaves). */
static inline void *gc_data(gc_ctx *c, mg_tensor t) {
    int i = gc_find(c, t);
    ck_assert_msg(i >= 0, "%s: tensor %d is not a gc leaf", c->name, (int)t);
    return c->data[i];
}

/* L = sum(y * W) with W a random fixed weight input of y's shape (just
 * y * W when y is a 0-d scalar). */
static inline mg_tensor gc_loss(gc_ctx *c, mg_tensor y) {
    int nd = 0;
    int64_t sh[MG_MAX_DIMS];
    ck_assert_msg(y != MG_NO_TENSOR,
                  "%s: op under test returned "
                  "MG_NO_TENSOR: %s",
                  c->name, mg_last_error());
    ck_assert_msg(mg_tensor_shape(c->g, y, &nd, sh) == MG_OK,
                  "%s: mg_tensor_shape failed: %s", c->name, mg_last_error());
    mg_tensor w = gc_const(c, nd, sh, -1.0, 1.0);
    mg_tensor yw = mg_mul(c->g, y, w);
    ck_assert_msg(yw != MG_NO_TENSOR, "%s: mul(y, W) failed: %s", c->name,
                  mg_last_error());
    if (nd == 0) return yw;
    mg_tensor L = mg_sum(c->g, yw, 0, NULL, 0);
    ck_assert_msg(L != MG_NO_TENSOR, "%s: sum(y*W) failed: %s", c->name,
                  mg_last_error());
    return L;
}

static inline mg_binding *gc_bindings(const gc_ctx *c) {
    mg_binding *b = (mg_binding *)calloc((size_t)c->n + 1, sizeof *b);
    ck_assert(b != NULL);
    for (int i = 0; i < c->n; i++) {
        b[i].tensor = c->t[i];
        b[i].data = c->data[i];
    }
    return b;
}

/* Run the forward-only plan and return sum_j <seed_j, y_j>. */
static inline double gc_objective(const gc_ctx *c, mg_exec *ex,
                                  const mg_plan *p, const mg_binding *b,
                                  int n_b, int n_ys, double *const *ybuf,
                                  const int64_t *ynumel,
                                  const double *const *seeds) {
    mg_status st = mg_exec_run(ex, p, b, n_b, c->run_seed);
    ck_assert_msg(st == MG_OK, "%s: forward run failed: %s: %s", c->name,
                  mg_status_str(st), mg_last_error());
    double f = 0.0;
    for (int j = 0; j < n_ys; j++)
        for (int64_t k = 0; k < ynumel[j]; k++)
            f += (seeds[j] ? seeds[j][k] : 1.0) * ybuf[j][k];
    return f;
}

/* Analytic gradients of sum_j <grad_ys[j], ys[j]> w.r.t. every gc_x leaf
 * against central differences. Fails the test on a mismatch. If grads_out is
 * not NULL, the analytic gradients (malloc'd, one per x, in leaf order) are
 * handed to the caller, who frees them. */
static inline double gc_check_ys_ex(gc_ctx *c, int n_ys, const mg_tensor *ys,
                                    const mg_tensor *grad_ys,
                                    const mg_checkpoints *ckpt,
                                    double **grads_out) {
    mg_tensor xs[GC_MAX_LEAVES], grads[GC_MAX_LEAVES];
    int xi[GC_MAX_LEAVES];
    int n_x = 0;
    for (int i = 0; i < c->n; i++)
        if (c->is_x[i]) {
            xi[n_x] = i;
            xs[n_x++] = c->t[i];
        }
    ck_assert_msg(n_x > 0, "%s: no x leaves", c->name);
    for (int j = 0; j < n_ys; j++)
        ck_assert_msg(ys[j] != MG_NO_TENSOR, "%s: y[%d] is MG_NO_TENSOR: %s",
                      c->name, j, mg_last_error());
    for (int i = 0; i < n_x; i++) grads[i] = MG_NO_TENSOR;

    const int32_t n_fwd = mg_graph_num_tensors(c->g);
    if (gc_record_is_open())
        gc_record_forward(c, n_ys, ys, c->fwd_end > 0 ? c->fwd_end : n_fwd);
    mg_clear_error();
    mg_status st = mg_gradients(c->g, ys, n_ys, grad_ys, xs, n_x, ckpt, grads);
    ck_assert_msg(st == MG_OK, "%s: mg_gradients failed: %s: %s", c->name,
                  mg_status_str(st), mg_last_error());
    for (int i = 0; i < n_x; i++) {
        int nd1 = 0, nd2 = 0;
        int64_t s1[MG_MAX_DIMS], s2[MG_MAX_DIMS];
        mg_dtype dt = MG_F32;
        ck_assert_msg(grads[i] != MG_NO_TENSOR,
                      "%s: gradient %d is MG_NO_TENSOR", c->name, i);
        ck_assert_msg(mg_tensor_shape(c->g, grads[i], &nd1, s1) == MG_OK &&
                          mg_tensor_shape(c->g, xs[i], &nd2, s2) == MG_OK,
                      "%s: mg_tensor_shape failed: %s", c->name,
                      mg_last_error());
        ck_assert_msg(nd1 == nd2, "%s: gradient %d has ndim %d, x has %d",
                      c->name, i, nd1, nd2);
        for (int d = 0; d < nd1; d++)
            ck_assert_msg(s1[d] == s2[d],
                          "%s: gradient %d dim %d is %lld, x has %lld", c->name,
                          i, d, (long long)s1[d], (long long)s2[d]);
        ck_assert_msg(mg_tensor_dtype(c->g, grads[i], &dt) == MG_OK &&
                          dt == MG_F64,
                      "%s: gradient %d is not MG_F64", c->name, i);
    }

    if (gc_record_is_open()) gc_record_backward(c, n_x, grads, n_fwd);

    /* analytic */
    double *an[GC_MAX_LEAVES];
    for (int i = 0; i < n_x; i++) {
        an[i] = (double *)malloc((size_t)c->numel[xi[i]] * sizeof(double) + 8);
        ck_assert(an[i] != NULL);
        for (int64_t k = 0; k < c->numel[xi[i]]; k++) an[i][k] = NAN;
    }
    mg_binding *b = gc_bindings(c);
    st = th_run(c->g, n_x, grads, (void *const *)an, c->n, b, c->run_seed);
    ck_assert_msg(st == MG_OK, "%s: gradient run failed: %s", c->name,
                  th_errmsg);

    /* forward-only plan for the objective */
    double *ybuf[GC_MAX_LEAVES];
    int64_t ynumel[GC_MAX_LEAVES];
    const double *seeds[GC_MAX_LEAVES];
    ck_assert(n_ys <= GC_MAX_LEAVES);
    for (int j = 0; j < n_ys; j++) {
        ynumel[j] = mg_tensor_numel(c->g, ys[j]);
        ck_assert_msg(ynumel[j] > 0, "%s: bad numel of y[%d]", c->name, j);
        ybuf[j] = (double *)malloc((size_t)ynumel[j] * sizeof(double));
        ck_assert(ybuf[j] != NULL);
        seeds[j] = NULL;
        if (grad_ys && grad_ys[j] != MG_NO_TENSOR)
            seeds[j] = (const double *)gc_data(c, grad_ys[j]);
    }
    mg_plan_options fo;
    memset(&fo, 0, sizeof fo);
    fo.no_grad = 1;
    /* ys may repeat: compile and bind each distinct y once */
    mg_tensor uy[GC_MAX_LEAVES];
    int n_uy = 0;
    for (int j = 0; j < n_ys; j++) {
        int seen = 0;
        for (int u = 0; u < n_uy; u++) seen |= uy[u] == ys[j];
        if (!seen) uy[n_uy++] = ys[j];
    }
    mg_plan *fp = NULL;
    st = mg_plan_compile(c->g, uy, n_uy, &fo, &fp);
    ck_assert_msg(st == MG_OK, "%s: forward plan compile failed: %s: %s",
                  c->name, mg_status_str(st), mg_last_error());
    mg_exec *ex = NULL;
    st = mg_exec_new(NULL, &ex);
    ck_assert_msg(st == MG_OK, "%s: mg_exec_new failed: %s", c->name,
                  mg_last_error());
    int nb = c->n + n_uy;
    mg_binding *fb = (mg_binding *)calloc((size_t)nb, sizeof *fb);
    ck_assert(fb != NULL);
    for (int i = 0; i < c->n; i++) fb[i] = b[i];
    {
        int u = 0;
        for (int j = 0; j < n_ys; j++) {
            int dup = 0;
            for (int k = 0; k < j; k++)
                if (ys[k] == ys[j]) {
                    /* share the first occurrence's buffer */
                    free(ybuf[j]);
                    ybuf[j] = ybuf[k];
                    dup = 1;
                    break;
                }
            if (!dup) {
                fb[c->n + u].tensor = ys[j];
                fb[c->n + u].data = ybuf[j];
                u++;
            }
        }
    }

    double worst = 0.0;
    for (int i = 0; i < n_x; i++) {
        double *x = (double *)c->data[xi[i]];
        int64_t n = c->numel[xi[i]];
        double maxn = 0.0, maxd = 0.0;
        int64_t at = 0;
        double at_a = 0, at_n = 0;
        for (int64_t k = 0; k < n; k++) {
            double v = x[k];
            x[k] = v + GC_H;
            double fp_ =
                gc_objective(c, ex, fp, fb, nb, n_ys, ybuf, ynumel, seeds);
            x[k] = v - GC_H;
            double fm_ =
                gc_objective(c, ex, fp, fb, nb, n_ys, ybuf, ynumel, seeds);
            x[k] = v;
            double num = (fp_ - fm_) / (2.0 * GC_H);
            double a = an[i][k];
            ck_assert_msg(isfinite(a),
                          "%s: analytic gradient of x%d[%lld] is %g "
                          "(numeric %.12g)",
                          c->name, i, (long long)k, a, num);
            if (fabs(num) > maxn) maxn = fabs(num);
            if (fabs(a - num) >= maxd) {
                maxd = fabs(a - num);
                at = k;
                at_a = a;
                at_n = num;
            }
        }
        double rel = maxd / (maxn > 1.0 ? maxn : 1.0);
        ck_assert_msg(rel < GC_TOL,
                      "%s: gradient of x%d (leaf %d, %lld elements) is wrong: "
                      "rel err %.3g; worst at [%lld]: analytic %.12g, "
                      "numeric %.12g",
                      c->name, i, xi[i], (long long)n, rel, (long long)at, at_a,
                      at_n);
        if (rel > worst) worst = rel;
    }

    free(fb);
    mg_exec_free(ex);
    mg_plan_free(fp);
    for (int j = 0; j < n_ys; j++) {
        int dup = 0;
        for (int k = 0; k < j; k++) dup |= ys[k] == ys[j];
        if (!dup) free(ybuf[j]);
    }
    free(b);
    if (grads_out) {
        for (int i = 0; i < n_x; i++) grads_out[i] = an[i];
    } else {
        for (int i = 0; i < n_x; i++) free(an[i]);
    }
    c->max_err = worst;
    return worst;
}

static inline double gc_check_ys(gc_ctx *c, int n_ys, const mg_tensor *ys,
                                 const mg_tensor *grad_ys) {
    return gc_check_ys_ex(c, n_ys, ys, grad_ys, NULL, NULL);
}

/* Gradcheck of L = sum(y * W) w.r.t. every gc_x leaf. */
static inline double gc_check(gc_ctx *c, mg_tensor y) {
    c->fwd_end = mg_graph_num_tensors(c->g);
    mg_tensor L = gc_loss(c, y);
    double e = gc_check_ys(c, 1, &L, NULL);
    c->fwd_end = 0;
    return e;
}

#endif
