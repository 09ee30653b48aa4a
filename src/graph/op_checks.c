/*
 * op_checks.c - the argument and shape checks the ops_*.c files share, so
 * that every op words the same mistake the same way.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

const mg_tdesc *mgi_arg_desc(const mg_graph *g, mg_tensor t, const char *op) {
    if (g && t == MG_NO_TENSOR) {
        mgi_graph_missing_input(op, -1); /* op names the argument */
        return NULL;
    }
    return mgi_graph_check_id(g, t, op) == MG_OK ? mgi_graph_desc(g, t) : NULL;
}

mg_status mgi_attrs_shape_set(mg_attrs *a, int ndim, const int64_t *shape,
                              const char *op) {
    if (ndim < 0 || ndim > MG_MAX_DIMS)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: ndim %d is not in 0..%d",
                            op, ndim, MG_MAX_DIMS);
    if (ndim > 0 && !shape)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: shape is NULL", op);
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    return MG_OK;
}

mg_status mgi_shape_check(int ndim, const int64_t *shape, char *why,
                          size_t len) {
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            snprintf(why, len,
                     "dim %d of the shape is %lld; sizes must be >= 1", i,
                     (long long)shape[i]);
            return MG_ERR_INVALID_ARG;
        }
    }
    return MG_OK;
}

mg_status mgi_float_check(const mg_tdesc *d, const char *what, char *why,
                          size_t len) {
    if (mgi_dtype_is_float(d->dtype)) return MG_OK;
    snprintf(why, len, "%s must be f32, f64, bf16 or f16, not %s", what,
             mg_dtype_name(d->dtype));
    return MG_ERR_DTYPE;
}

/* Softmax, log softmax and cumsum: a float x, an axis inside its dims,
 * the result shaped like x. */
mg_status mgi_float_axis_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s != MG_OK) return s;
    if (a->axis < 0 || a->axis >= in[0].ndim) {
        snprintf(why, len, "axis %d is out of range for %d dims", a->axis,
                 in[0].ndim);
        return MG_ERR_INVALID_ARG;
    }
    *out = in[0];
    return MG_OK;
}

mg_status mgi_index_check(const mg_tdesc *d, const char *what, char *why,
                          size_t len) {
    if (d->dtype == MG_I32 || d->dtype == MG_I64) return MG_OK;
    snprintf(why, len, "%s must be i32 or i64, not %s", what,
             mg_dtype_name(d->dtype));
    return MG_ERR_DTYPE;
}

mg_status mgi_float_pair_check(const mg_tdesc *a, const char *a_what,
                               const mg_tdesc *b, const char *b_what, char *why,
                               size_t len) {
    mg_status s = mgi_float_check(a, a_what, why, len);
    if (s == MG_OK) s = mgi_float_check(b, b_what, why, len);
    if (s == MG_OK && a->dtype != b->dtype) {
        snprintf(why, len, "%s is %s but %s is %s", a_what,
                 mg_dtype_name(a->dtype), b_what, mg_dtype_name(b->dtype));
        s = MG_ERR_DTYPE;
    }
    return s;
}

mg_status mgi_grad_status(int n, const bool *need, const mg_tensor *gin) {
    for (int i = 0; i < n; i++) {
        if (!need[i] || gin[i] != MG_NO_TENSOR) continue;
        /* The failing builder recorded why. */
        mg_status s = mg_last_status();
        return s != MG_OK ? s
                          : mg_set_error(MG_ERR_INTERNAL,
                                         "a gradient rule built no tensor "
                                         "for input %d",
                                         i);
    }
    return MG_OK;
}
