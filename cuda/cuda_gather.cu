/*
 * cuda_gather.cu - gather and index_select, and their gradients.
 *
 * The indices are checked on the host first, with the CPU's check and
 * message (cu_host_indices, cuda_embedding.cu). The gradients gather
 * instead of scattering, with no atomics, and each element of dx sums its
 * terms in the order the CPU's scatter adds them, so both get the same
 * bits: for gather one thread per element of dx walks the positions along
 * the axis that could point at it, in order, and adds the gy of those that
 * do; for index_select, whose index may be long, it reads only the
 * positions that name its slice, bucketed on the host (cu_index_csr, as
 * embedding_grad's). gather's walk costs numel(dx) times the index's
 * length along axis: nothing for the usual pick of one element per row
 * (an index of length 1), slow for long ones, where bucketing per row as
 * index_select does would cost a workspace of dx's size.
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

/* index_select_grad: dx[o, v, i] sums gy[o, j, i] over the positions j
 * with index[j] == v, in order: order[start[v] .. start[v + 1]) (the CSR
 * of cu_index_csr), so each thread reads only its own terms, however long
 * the index. */
template <typename T>
__global__ void k_index_select_grad(const T *gy, const int64_t *start,
                                    const int64_t *order, T *dx,
                                    mg_gather_dims d) {
    CU_FOR(e, d.outer * d.nx * d.inner) {
        const int64_t i = e % d.inner, r = e / d.inner;
        const int64_t v = r % d.nx, o = r / d.nx;
        T s = 0;
        for (int64_t k = start[v]; k < start[v + 1]; k++)
            s += gy[(o * d.ni + order[k]) * d.inner + i];
        dx[e] = s;
    }
}

/* The CSR of the index: x's length along axis + 1 starts, then one
 * position per index entry (the op table's rule, ops_gather.c). */
size_t cu_index_select_grad_workspace(const mg_kargs *a) {
    const int axis = a->attrs ? a->attrs->axis : -1;
    if (axis < 0 || axis >= a->out.d.ndim) return 0;
    return (size_t)(a->out.d.shape[axis] + 1 + mgi_tdesc_numel(&a->in[1].d)) *
           sizeof(int64_t);
}

static mg_status index_select_grad(cu_ctx *c, const mg_kargs *a) {
    mg_gather_dims d;
    int64_t *csr = NULL;
    mg_status s = mg_gather_dims_setup(a, &d);
    if (s == MG_OK) s = cu_index_csr(c, a, d.nx, &csr);
    if (s != MG_OK) return s;
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(
        a, a->out.d.dtype,
        (k_index_select_grad<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (const T *)a->in[0].data, csr, csr + d.nx + 1, (T *)a->out.data,
            d)));
    return MG_OK;
}

mg_status cu_gather_grad(cu_ctx *c, const mg_kargs *a) {
    if (a->op == MG_OP_INDEX_SELECT_GRAD) return index_select_grad(c, a);
    mg_gather_dims d;
    mg_status s = checked(c, a, &d);
    if (s != MG_OK) return s;
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_gather_grad<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, a->in[1].data, a->in[1].d.dtype,
                    (T *)a->out.data, n, d)));
    return MG_OK;
}
