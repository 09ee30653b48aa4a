/*
 * cpu_embedding.c - embedding gathers table rows by index; its gradient
 * adds each row of gy into the row of a zeroed table that its index names,
 * in index order, so repeated indices sum the same way every run.
 */
#include "cpu_kernels.h"

#include <string.h>

#define EMBEDDING_DEF(T, SUF)                                                  \
    static mg_status embedding_grad_##SUF(const T *gy, const void *idx,        \
                                          mg_dtype it, T *gt, int64_t n,       \
                                          int64_t rows, int64_t dim) {         \
        memset(gt, 0, (size_t)(rows * dim) * sizeof(T));                       \
        for (int64_t p = 0; p < n; p++, gy += dim) {                           \
            T *row = gt + mg_index_at(idx, it, p) * dim;                       \
            for (int64_t j = 0; j < dim; j++) row[j] += gy[j];                 \
        }                                                                      \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(EMBEDDING_DEF)

/* (table [V, D], idx) -> [..., D]: a row copy, whatever the dtype. */
mg_status mgi_cpu_embedding(const mg_kargs *ka) {
    const mg_tdesc *td = &ka->in[0].d;
    const int64_t n = mgi_tdesc_numel(&ka->in[1].d), dim = td->shape[1];
    const void *idx = ka->in[1].data;
    const mg_dtype it = ka->in[1].d.dtype;
    mg_status s = mg_kernel_check_indices(ka, idx, it, n, td->shape[0], "index",
                                          "position");
    if (s != MG_OK) return s;
    const size_t row = (size_t)dim * mg_dtype_size(td->dtype);
    const char *table = ka->in[0].data;
    char *y = ka->out.data;
    for (int64_t p = 0; p < n; p++, y += row)
        memcpy(y, table + (size_t)mg_index_at(idx, it, p) * row, row);
    return MG_OK;
}

/* (gy [..., D], idx) -> [V, D] */
mg_status mgi_cpu_embedding_grad(const mg_kargs *ka) {
    const mg_tdesc *td = &ka->out.d;
    const int64_t n = mgi_tdesc_numel(&ka->in[1].d);
    const mg_dtype it = ka->in[1].d.dtype;
    mg_status s = mg_kernel_check_indices(ka, ka->in[1].data, it, n,
                                          td->shape[0], "index", "position");
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, td->dtype, embedding_grad, ka->in[0].data,
                           ka->in[1].data, it, ka->out.data, n, td->shape[0],
                           td->shape[1]);
}
