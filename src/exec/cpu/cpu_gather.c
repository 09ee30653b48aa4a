/*
 * cpu_gather.c - gather and index_select copy elements (any dtype, as bits)
 * from where their indices point; their gradients add each element of gy
 * into a zeroed dx at that place, walking gy in order, so each element of
 * dx sums its terms in the order of their positions: the order the CUDA
 * kernels, which gather instead of scattering, add them in as well.
 * Every index is checked before anything is read.
 */
#include "cpu_kernels.h"

#include <string.h>

/* Fails unless every index is in [0, d->nx). */
static mg_status check(const mg_kargs *ka, const mg_gather_dims *d) {
    return mg_kernel_check_indices(ka, ka->in[1].data, ka->in[1].d.dtype, d->ni,
                                   d->nx, "index", "position");
}

#define GATHER_DEF(U, BITS)                                                    \
    static void gather_##BITS(const U *x, const void *idx, mg_dtype it,        \
                              U *restrict y, const mg_gather_dims *d) {        \
        MG_CPU_PAR_LOOP(d->ni, for (int64_t o = 0; o < d->ni; o++), {          \
            y[o] = x[mg_gather_xoff(d, o, mg_index_at(idx, it, o))];           \
        });                                                                    \
    }
GATHER_DEF(uint32_t, 32)
GATHER_DEF(uint64_t, 64)
#undef GATHER_DEF

/* (x, index) -> y of index's shape */
mg_status mgi_cpu_gather_axis(const mg_kargs *ka) {
    mg_gather_dims d;
    mg_status s = mg_gather_dims_setup(ka, &d);
    if (s == MG_OK) s = check(ka, &d);
    if (s != MG_OK) return s;
    const void *idx = ka->in[1].data;
    const mg_dtype it = ka->in[1].d.dtype;
    switch (mg_dtype_size(ka->out.d.dtype)) {
    case 4: gather_32(ka->in[0].data, idx, it, ka->out.data, &d); return MG_OK;
    case 8: gather_64(ka->in[0].data, idx, it, ka->out.data, &d); return MG_OK;
    default: return mgi_cpu_bad_dtype(ka, ka->out.d.dtype);
    }
}

/* One thread: a dx element's terms must keep their order. */
#define GATHER_GRAD_DEF(T, SUF)                                                \
    static mg_status gather_grad_##SUF(const T *gy, const void *idx,           \
                                       mg_dtype it, T *dx,                     \
                                       const mg_gather_dims *d, int64_t nx) {  \
        memset(dx, 0, (size_t)nx * sizeof(T));                                 \
        for (int64_t o = 0; o < d->ni; o++)                                    \
            dx[mg_gather_xoff(d, o, mg_index_at(idx, it, o))] += gy[o];        \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(GATHER_GRAD_DEF)
#undef GATHER_GRAD_DEF

/* (gy, index) -> dx of x's shape */
mg_status mgi_cpu_gather_axis_grad(const mg_kargs *ka) {
    mg_gather_dims d;
    mg_status s = mg_gather_dims_setup(ka, &d);
    if (s == MG_OK) s = check(ka, &d);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, gather_grad, ka->in[0].data,
                           ka->in[1].data, ka->in[1].d.dtype, ka->out.data, &d,
                           mgi_tdesc_numel(&ka->out.d));
}

/* (x, index) -> y: rows of inner elements, copied whatever the dtype. */
mg_status mgi_cpu_index_select(const mg_kargs *ka) {
    mg_gather_dims d;
    mg_status s = mg_gather_dims_setup(ka, &d);
    if (s == MG_OK) s = check(ka, &d);
    if (s != MG_OK) return s;
    const size_t row = (size_t)d.inner * mg_dtype_size(ka->out.d.dtype);
    const char *x = ka->in[0].data;
    char *y = ka->out.data;
    const void *idx = ka->in[1].data;
    const mg_dtype it = ka->in[1].d.dtype;
    MG_CPU_PAR_LOOP(d.outer * d.ni * d.inner,
                    for (int64_t r = 0; r < d.outer * d.ni; r++), {
                        const int64_t o = r / d.ni, j = r % d.ni;
                        const int64_t v = mg_index_at(idx, it, j);
                        memcpy(y + (size_t)r * row,
                               x + (size_t)(o * d.nx + v) * row, row);
                    });
    return MG_OK;
}

/* Rows of dx are independent (one per outer slice) and each is summed in
 * index order. */
#define INDEX_SELECT_GRAD_DEF(T, SUF)                                          \
    static mg_status index_select_grad_##SUF(const T *gy, const void *idx,     \
                                             mg_dtype it, T *dx,               \
                                             const mg_gather_dims *d) {        \
        const int64_t in = d->inner;                                           \
        memset(dx, 0, (size_t)(d->outer * d->nx * in) * sizeof(T));            \
        MG_CPU_PAR_LOOP(d->outer * d->ni * in,                                 \
                        for (int64_t o = 0; o < d->outer; o++), {              \
                            for (int64_t j = 0; j < d->ni; j++) {              \
                                const int64_t v = mg_index_at(idx, it, j);     \
                                T *row = dx + (o * d->nx + v) * in;            \
                                const T *g = gy + (o * d->ni + j) * in;        \
                                for (int64_t i = 0; i < in; i++)               \
                                    row[i] += g[i];                            \
                            }                                                  \
                        });                                                    \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(INDEX_SELECT_GRAD_DEF)
#undef INDEX_SELECT_GRAD_DEF

/* (gy, index) -> dx of x's shape */
mg_status mgi_cpu_index_select_grad(const mg_kargs *ka) {
    mg_gather_dims d;
    mg_status s = mg_gather_dims_setup(ka, &d);
    if (s == MG_OK) s = check(ka, &d);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, index_select_grad,
                           ka->in[0].data, ka->in[1].data, ka->in[1].d.dtype,
                           ka->out.data, &d);
}
