/*
 * cuda_gather.cu - gather and index_select, and their gradients.
 *
 * The indices are checked on the host first, with the CPU's check and
 * message (cu_host_indices, cuda_embedding.cu). The gradients gather
 * instead of scattering, with no atomics: one thread per element of dx
 * walks the positions along the axis that could point at it, in order,
 * and adds the gy of those that do, so each element sums its terms in the
 * order the CPU's scatter adds them, and gets the same bits.
 */
#include "cuda_internal.h"

#include <stdlib.h>

/* The index, checked against the axis of x that it points into. */
static mg_status checked(cu_ctx *c, const mg_kargs *a, mg_gather_dims *d) {
    mg_status s = mg_gather_dims_setup(a, d);
    void *h = NULL;
    if (s == MG_OK) s = cu_host_indices(c, a, d->nx, &h);
    free(h);
    return s;
}

template <typename U>
__global__ void k_gather(const U *x, const void *idx, mg_dtype it, U *y,
                         mg_gather_dims d) {
    CU_FOR(o, d.ni) y[o] = x[mg_gather_xoff(&d, o, mg_index_at(idx, it, o))];
}

/* index_select: y[o, j, i] = x[o, index[j], i] */
template <typename U>
__global__ void k_index_select(const U *x, const void *idx, mg_dtype it, U *y,
                               mg_gather_dims d) {
    CU_FOR(e, d.outer * d.ni * d.inner) {
        const int64_t i = e % d.inner, r = e / d.inner;
        const int64_t j = r % d.ni, o = r / d.ni;
        y[e] = x[(o * d.nx + mg_index_at(idx, it, j)) * d.inner + i];
    }
}

mg_status cu_gather(cu_ctx *c, const mg_kargs *a) {
    mg_gather_dims d;
    mg_status s = checked(c, a, &d);
    if (s != MG_OK) return s;
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    const void *idx = a->in[1].data;
    const mg_dtype it = a->in[1].d.dtype;
    const bool sel = a->op == MG_OP_INDEX_SELECT;
    switch (mg_dtype_size(a->out.d.dtype)) {
    case 4: {
        const uint32_t *x = (const uint32_t *)a->in[0].data;
        uint32_t *y = (uint32_t *)a->out.data;
        if (sel)
            k_index_select<uint32_t>
                <<<b, CU_THREADS, 0, c->stream>>>(x, idx, it, y, d);
        else
            k_gather<uint32_t>
                <<<b, CU_THREADS, 0, c->stream>>>(x, idx, it, y, d);
        return MG_OK;
    }
    case 8: {
        const uint64_t *x = (const uint64_t *)a->in[0].data;
        uint64_t *y = (uint64_t *)a->out.data;
        if (sel)
            k_index_select<uint64_t>
                <<<b, CU_THREADS, 0, c->stream>>>(x, idx, it, y, d);
        else
            k_gather<uint64_t>
                <<<b, CU_THREADS, 0, c->stream>>>(x, idx, it, y, d);
        return MG_OK;
    }
    default:
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "the CUDA kernel has no %s version",
                              mg_dtype_name(a->out.d.dtype));
    }
}

/* gather_grad: dx element e at (..., v, ...) in x's shape sums gy at the
 * index positions (..., j, ...) with the same other coordinates whose
 * entry is v, for j in order; none if a coordinate is past the index's
 * dims. */
template <typename T>
__global__ void k_gather_grad(const T *gy, const void *idx, mg_dtype it, T *dx,
                              int64_t n, mg_gather_dims d) {
    CU_FOR(e, n) {
        int64_t rest = e, base = 0, v = 0;
        bool inside = true;
        for (int k = d.ndim - 1; k >= 0; k--) {
            const int64_t ck = rest % d.xshape[k];
            rest /= d.xshape[k];
            if (k == d.axis) v = ck;
            else if (ck >= d.ishape[k]) inside = false;
            else base += ck * d.istride[k];
        }
        T s = 0;
        if (inside)
            for (int64_t j = 0; j < d.ishape[d.axis]; j++) {
                const int64_t o = base + j * d.istride[d.axis];
                if (mg_index_at(idx, it, o) == v) s += gy[o];
            }
        dx[e] = s;
    }
}

/* index_select_grad: dx[o, v, i] sums gy[o, j, i] over j with index[j] ==
 * v, in order. */
template <typename T>
__global__ void k_index_select_grad(const T *gy, const void *idx, mg_dtype it,
                                    T *dx, mg_gather_dims d) {
    CU_FOR(e, d.outer * d.nx * d.inner) {
        const int64_t i = e % d.inner, r = e / d.inner;
        const int64_t v = r % d.nx, o = r / d.nx;
        T s = 0;
        for (int64_t j = 0; j < d.ni; j++)
            if (mg_index_at(idx, it, j) == v)
                s += gy[(o * d.ni + j) * d.inner + i];
        dx[e] = s;
    }
}

mg_status cu_gather_grad(cu_ctx *c, const mg_kargs *a) {
    mg_gather_dims d;
    mg_status s = checked(c, a, &d);
    if (s != MG_OK) return s;
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    const void *idx = a->in[1].data;
    const mg_dtype it = a->in[1].d.dtype;
    if (a->op == MG_OP_INDEX_SELECT_GRAD)
        CU_BY_FLOAT(
            a, a->out.d.dtype,
            (k_index_select_grad<T><<<b, CU_THREADS, 0, c->stream>>>(
                (const T *)a->in[0].data, idx, it, (T *)a->out.data, d)));
    else
        CU_BY_FLOAT(
            a, a->out.d.dtype,
            (k_gather_grad<T><<<b, CU_THREADS, 0, c->stream>>>(
                (const T *)a->in[0].data, idx, it, (T *)a->out.data, n, d)));
    return MG_OK;
}
