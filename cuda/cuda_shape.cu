/*
 * cuda_shape.cu - ops that only move or relabel elements (reshape,
 * permute) and fill, which makes a constant; and the strided gather that
 * permute, broadcast_to, slice, pad and concat share (cu_move). Moves work
 * on element sizes, so they handle i32 labels as well as floats.
 */
#include "cuda_internal.h"

/* ---- fill ------------------------------------------------------------------
 */

template <typename T> __global__ void k_fill(T *y, int64_t n, T v) {
    CU_FOR(i, n) y[i] = v;
}

mg_status cu_fill(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    if (a->out.d.dtype == MG_I32) {
        k_fill<int32_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (int32_t *)a->out.data, n, (int32_t)a->attrs->alpha);
        return MG_OK;
    }
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_fill<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (T *)a->out.data, n, (T)a->attrs->alpha)));
    return MG_OK;
}

/* ---- moves ------------------------------------------------------------ */

/* dst[base1 + off1(i)] = src[base0 + off0(i)] over the domain. */
template <typename U>
__global__ void k_move(const U *src, U *dst, int64_t n, mg_layout l,
                       int64_t base0, int64_t base1) {
    CU_FOR(i, n) {
        int64_t o0, o1;
        mg_layout_offsets(&l, i, &o0, &o1);
        dst[base1 + o1] = src[base0 + o0];
    }
}

mg_status cu_move(cu_ctx *c, const mg_kargs *a, const void *src, void *dst,
                  mg_layout *ml, int64_t base0, int64_t base1) {
    mg_layout_coalesce(ml);
    const mg_layout l = *ml;
    int64_t n = 1;
    for (int i = 0; i < l.ndim; i++) n *= l.shape[i];
    switch (mg_dtype_size(a->out.d.dtype)) {
    case 4:
        k_move<uint32_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (const uint32_t *)src, (uint32_t *)dst, n, l, base0, base1);
        return MG_OK;
    case 8:
        k_move<uint64_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (const uint64_t *)src, (uint64_t *)dst, n, l, base0, base1);
        return MG_OK;
    default:
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "the CUDA kernel has no %s version",
                              mg_dtype_name(a->out.d.dtype));
    }
}

mg_status cu_reshape(cu_ctx *c, const mg_kargs *a) {
    const size_t n = mgi_tdesc_nbytes(&a->out.d);
    if (!n || a->out.data == a->in[0].data) return MG_OK;
    return cu_check(a,
                    cudaMemcpyAsync(a->out.data, a->in[0].data, n,
                                    cudaMemcpyDeviceToDevice, c->stream),
                    "reshape copy");
}

mg_status cu_permute(cu_ctx *c, const mg_kargs *a) {
    mg_layout ml;
    mg_status s = mg_layout_permute(a, &ml);
    return s != MG_OK ? s
                      : cu_move(c, a, a->in[0].data, a->out.data, &ml, 0, 0);
}
