/*
 * cpu_shape.c - ops that move data without computing on it (reshape,
 * permute; the strided gather that broadcast_to shares, mgi_cpu_gather),
 * and fill, which makes a constant. Moves work on element sizes rather than
 * dtypes, so they handle i32 labels as well as floats.
 */
#include "cpu_kernels.h"

#include <string.h>

/* y[i] = x[offset of i], walking y in order; the layout holds x's strides. */
#define GATHER_DEF(U, BYTES)                                                   \
    static void gather_##BYTES(const U *x, U *restrict y,                      \
                               const mg_layout *l) {                           \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                       \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->shape[last], rows = mg_layout_rows(l);            \
        const int64_t sx = l->stride[0][last];                                 \
        for (int64_t r = 0; r < rows; r++, y += n) {                           \
            const U *px = x + off[0];                                          \
            for (int64_t i = 0; i < n; i++) y[i] = px[i * sx];                 \
            mg_layout_next(l, idx, off);                                       \
        }                                                                      \
    }
GATHER_DEF(uint32_t, 4)
GATHER_DEF(uint64_t, 8)

mg_status mgi_cpu_gather(const mg_kargs *ka, mg_layout *l) {
    mg_layout_coalesce(l);
    switch (mg_dtype_size(ka->out.d.dtype)) {
    case 4: gather_4(ka->in[0].data, ka->out.data, l); return MG_OK;
    case 8: gather_8(ka->in[0].data, ka->out.data, l); return MG_OK;
    default: return mgi_cpu_bad_dtype(ka, ka->out.d.dtype);
    }
}

mg_status mgi_cpu_reshape(const mg_kargs *ka) {
    memcpy(ka->out.data, ka->in[0].data, mgi_tdesc_nbytes(&ka->out.d));
    return MG_OK;
}

mg_status mgi_cpu_permute(const mg_kargs *ka) {
    mg_layout l;
    mg_status s = mg_layout_permute(ka, &l);
    return s != MG_OK ? s : mgi_cpu_gather(ka, &l);
}

/* ---- fill ---------------------------------------------------------------- */

#define FILL_DEF(T, SUF)                                                       \
    static mg_status fill_##SUF(T *restrict y, int64_t n, double value) {      \
        const T v = (T)value;                                                  \
        for (int64_t i = 0; i < n; i++) y[i] = v;                              \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(FILL_DEF)

mg_status mgi_cpu_fill(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, fill, ka->out.data,
                           mgi_tdesc_numel(&ka->out.d), ka->attrs->alpha);
}
