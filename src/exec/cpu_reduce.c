/*
 * cpu_reduce.c - sum and mean over a set of axes, and broadcast_to, their
 * adjoint. The input is walked once in index order and every element is
 * added into its output slot, so each output is accumulated in its own
 * dtype in index order: deterministic.
 */
#include "cpu_kernels.h"

#define REDUCE_DEF(T, SUF)                                                    \
    static mg_status reduce_##SUF(const T *x, T *y, int64_t ny,               \
                                  const mg_layout *l,                         \
                                  int64_t mean_of) {                          \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                      \
        const int last = l->ndim - 1;                                         \
        const int64_t n = l->shape[last], rows = mg_layout_rows(l);           \
        const int64_t sy = l->stride[0][last];                                \
        for (int64_t i = 0; i < ny; i++) y[i] = 0;                            \
        for (int64_t r = 0; r < rows; r++, x += n) {                          \
            T *py = y + off[0];                                               \
            if (sy == 0) {                                                    \
                T acc = *py;                                                  \
                for (int64_t i = 0; i < n; i++) acc += x[i];                  \
                *py = acc;                                                    \
            } else {                                                          \
                for (int64_t i = 0; i < n; i++) py[i * sy] += x[i];           \
            }                                                                 \
            mg_layout_next(l, idx, off);                                      \
        }                                                                     \
        if (mean_of) {                                                        \
            const T count = (T)mean_of;                                       \
            for (int64_t i = 0; i < ny; i++) y[i] /= count;                   \
        }                                                                     \
        return MG_OK;                                                         \
    }
MG_CPU_FLOAT_TYPES(REDUCE_DEF)

/* mean: divide by the number of elements summed into each output. */
static mg_status reduce(const mg_kargs *ka, int mean) {
    const mg_tdesc *dx = &ka->in[0].d;
    const mg_attrs *at = ka->attrs;
    const int64_t nx = mgi_tdesc_numel(dx), ny = mgi_tdesc_numel(&ka->out.d);
    /* naxes 0 is "every axis" in the API; the graph may pass it through. */
    int reduced[MG_MAX_DIMS] = {0};
    for (int i = 0; i < dx->ndim; i++) reduced[i] = at->naxes == 0 && nx != ny;
    for (int j = 0; j < at->naxes; j++) {
        if (at->axes[j] < 0 || at->axes[j] >= dx->ndim)
            return mg_kernel_fail(ka, MG_ERR_INVALID_ARG,
                                  "axis %d is outside [0, %d)", at->axes[j],
                                  dx->ndim);
        reduced[at->axes[j]] = 1;
    }
    /* Domain: the input; slot 0: where each input element lands in y. */
    mg_layout l;
    mg_layout_init(&l, dx);
    int64_t step = 1;
    for (int i = dx->ndim - 1; i >= 0; i--) {
        l.stride[0][i] = reduced[i] ? 0 : step;
        if (!reduced[i]) step *= dx->shape[i];
    }
    if (step != ny)
        return mg_kernel_fail(ka, MG_ERR_SHAPE,
                              "reduced input has %lld elements, output %lld",
                              (long long)step, (long long)ny);
    mg_layout_coalesce(&l);
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, reduce, ka->in[0].data,
                           ka->out.data, ny, &l, mean ? nx / ny : 0);
}

mg_status mgi_cpu_sum(const mg_kargs *ka) { return reduce(ka, 0); }

mg_status mgi_cpu_mean(const mg_kargs *ka) { return reduce(ka, 1); }

/* broadcast_to, the adjoint of sum: a gather with stride 0 on repeated
 * dims. */
mg_status mgi_cpu_broadcast_to(const mg_kargs *ka) {
    mg_layout l;
    mg_layout_init(&l, &ka->out.d);
    mg_layout_broadcast(&l, 0, &ka->in[0].d);
    return mgi_cpu_gather(ka, &l);
}
