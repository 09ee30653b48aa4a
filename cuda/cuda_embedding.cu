/*
 * cuda_embedding.cu - embedding and its gradient.
 *
 * The indices are copied to the host once per op: they are checked there
 * with the CPU's own check (same message), and the gradient's scatter-add
 * becomes a gather: positions are bucketed by index on the host (a stable
 * counting sort), and one thread per table element sums its rows of gy in
 * position order, as the CPU does, with no atomics.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

mg_status cu_host_indices(cu_ctx *c, const mg_kargs *a, int64_t bound,
                          void **out) {
    const int64_t n = mgi_tdesc_numel(&a->in[1].d);
    const mg_dtype it = a->in[1].d.dtype;
    const size_t es = mg_dtype_size(it);
    void *h = malloc((size_t)(n ? n : 1) * es);
    if (!h)
        return mg_kernel_fail(a, MG_ERR_NOMEM,
                              "out of host memory for indices");
    mg_status s = cu_check(a,
                           cudaMemcpyAsync(h, a->in[1].data, (size_t)n * es,
                                           cudaMemcpyDeviceToHost, c->stream),
                           "index copy");
    if (s == MG_OK)
        s = cu_check(a, cudaStreamSynchronize(c->stream), "index copy");
    if (s == MG_OK)
        s = mg_kernel_check_indices(a, h, it, n, bound, "index", "position");
    if (s != MG_OK) {
        free(h);
        return s;
    }
    *out = h;
    return MG_OK;
}

template <typename U>
__global__ void k_embedding(const U *table, const void *idx, mg_dtype it, U *y,
                            int64_t n, int64_t dim) {
    CU_FOR(e, n * dim)
    y[e] = table[mg_index_at(idx, it, e / dim) * dim + e % dim];
}

mg_status cu_embedding(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *td = &a->in[0].d;
    const int64_t n = mgi_tdesc_numel(&a->in[1].d), dim = td->shape[1];
    void *h = NULL;
    mg_status s = cu_host_indices(c, a, td->shape[0], &h);
    if (s != MG_OK) return s;
    free(h);
    const void *idx = a->in[1].data;
    const mg_dtype it = a->in[1].d.dtype;
    switch (mg_dtype_size(td->dtype)) {
    case 4:
        k_embedding<uint32_t><<<cu_blocks(n * dim), CU_THREADS, 0, c->stream>>>(
            (const uint32_t *)a->in[0].data, idx, it, (uint32_t *)a->out.data,
            n, dim);
        return MG_OK;
    case 8:
        k_embedding<uint64_t><<<cu_blocks(n * dim), CU_THREADS, 0, c->stream>>>(
            (const uint64_t *)a->in[0].data, idx, it, (uint64_t *)a->out.data,
            n, dim);
        return MG_OK;
    default:
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "the CUDA kernel has no %s version",
                              mg_dtype_name(td->dtype));
    }
}

/* gt[v][j] = sum over k in [start[v], start[v+1]) of gy[order[k]][j] */
template <typename T>
__global__ void k_embedding_grad(const T *gy, const int64_t *start,
                                 const int64_t *order, T *gt, int64_t rows,
                                 int64_t dim) {
    CU_FOR(e, rows * dim) {
        const int64_t v = e / dim, j = e % dim;
        T s = 0;
        for (int64_t k = start[v]; k < start[v + 1]; k++)
            s += gy[order[k] * dim + j];
        gt[e] = s;
    }
}

/* The CSR of the indices below: rows + 1 starts, then n positions. */
size_t cu_embedding_grad_workspace(const mg_kargs *a) {
    const mg_tdesc *td = &a->out.d;
    if (td->ndim < 1) return 0;
    return (size_t)(td->shape[0] + 1 + mgi_tdesc_numel(&a->in[1].d)) *
           sizeof(int64_t);
}

mg_status cu_index_csr(cu_ctx *c, const mg_kargs *a, int64_t rows,
                       int64_t **out) {
    const int64_t n = mgi_tdesc_numel(&a->in[1].d);
    void *h = NULL;
    const mg_dtype it = a->in[1].d.dtype;
    mg_status s = cu_host_indices(c, a, rows, &h);
    if (s != MG_OK) return s;
    /* CSR by a stable counting sort: start[rows + 1], then order[n] */
    const size_t words = (size_t)(rows + 1 + n);
    int64_t *csr = (int64_t *)calloc(words, sizeof *csr);
    if (!csr) {
        free(h);
        return mg_kernel_fail(a, MG_ERR_NOMEM,
                              "out of host memory for indices");
    }
    int64_t *start = csr, *order = csr + rows + 1;
    for (int64_t p = 0; p < n; p++) start[mg_index_at(h, it, p) + 1]++;
    for (int64_t v = 0; v < rows; v++) start[v + 1] += start[v];
    int64_t *fill = (int64_t *)malloc((size_t)(rows ? rows : 1) * sizeof *fill);
    if (!fill) {
        free(h);
        free(csr);
        return mg_kernel_fail(a, MG_ERR_NOMEM,
                              "out of host memory for indices");
    }
    memcpy(fill, start, (size_t)rows * sizeof *fill);
    for (int64_t p = 0; p < n; p++) order[fill[mg_index_at(h, it, p)]++] = p;
    free(fill);
    free(h);
    void *w = NULL;
    s = cu_work(a, words * sizeof *csr, &w);
    if (s != MG_OK) {
        free(csr);
        return s;
    }
    int64_t *d = (int64_t *)w;
    s = cu_check(a,
                 cudaMemcpyAsync(d, csr, words * sizeof *csr,
                                 cudaMemcpyHostToDevice, c->stream),
                 "index upload");
    if (s == MG_OK)
        s = cu_check(a, cudaStreamSynchronize(c->stream), "index upload");
    free(csr);
    if (s == MG_OK) *out = d;
    return s;
}

mg_status cu_embedding_grad(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *td = &a->out.d;
    const int64_t rows = td->shape[0], dim = td->shape[1];
    int64_t *d = NULL;
    mg_status s = cu_index_csr(c, a, rows, &d);
    if (s != MG_OK) return s;
    CU_BY_FLOAT(a, td->dtype,
                k_embedding_grad<T>
                <<<cu_blocks(rows * dim), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, d, d + rows + 1, (T *)a->out.data,
                    rows, dim));
    return MG_OK;
}
