/*
 * cuda_compact.cu - the compact saved forms (src/graph/ops_compact.c) on
 * the GPU: relu's sign mask and the max-pool argmax, and the readers that
 * compute relu_grad and max_pool2d_grad from them with the CPU's bits (the
 * same comparison, the same argmax from kernel_shared.h, and the pool
 * gradient gathered in the CPU's output order, as cuda_pool.cu does).
 */
#include "cuda_internal.h"

/* One thread per 32-bit word of the mask. */
template <typename T>
__global__ void k_pack_sign(const T *x, uint32_t *m, int64_t n) {
    const int64_t words = (n + 31) / 32;
    CU_FOR(j, words) {
        const int64_t i0 = j * 32, i1 = i0 + 32 < n ? i0 + 32 : n;
        uint32_t w = 0;
        for (int64_t i = i0; i < i1; i++) w |= (uint32_t)(x[i] > 0) << (i - i0);
        m[j] = w;
    }
}

template <typename T>
__global__ void k_relu_grad_mask(const T *gy, const uint32_t *m, T *gx,
                                 int64_t n) {
    CU_FOR(i, n) { gx[i] = (m[i / 32] >> (i % 32)) & 1u ? gy[i] : (T)0; }
}

__device__ __forceinline__ int64_t compact_argmax(const float *x,
                                                  const mg_pool2d_dims &d,
                                                  int64_t oy, int64_t ox) {
    return mg_pool2d_argmax_f32(x, &d, mg_pool2d_window(&d, oy, ox));
}
__device__ __forceinline__ int64_t compact_argmax(const double *x,
                                                  const mg_pool2d_dims &d,
                                                  int64_t oy, int64_t ox) {
    return mg_pool2d_argmax_f64(x, &d, mg_pool2d_window(&d, oy, ox));
}

template <typename T>
__global__ void k_pool_argmax(const T *x, uint8_t *idx, mg_pool2d_dims d) {
    const int64_t total = d.planes * d.oh * d.ow;
    CU_FOR(o, total) {
        const int64_t ox = o % d.ow, oy = (o / d.ow) % d.oh;
        const T *px = x + (o / (d.ow * d.oh)) * d.h * d.w;
        idx[o] =
            mg_pool2d_argmax_byte(&d, oy, ox, compact_argmax(px, d, oy, ox));
    }
}

/* dx[p][iy][ix]: the windows that hold (iy, ix) and picked it, in output
 * order (cuda_pool.cu's k_pool_grad). */
template <typename T>
__global__ void k_pool_grad_argmax(const T *gy, const uint8_t *idx, T *gx,
                                   mg_pool2d_dims d) {
    const int64_t total = d.planes * d.h * d.w;
    CU_FOR(i, total) {
        const int64_t ix = i % d.w, iy = (i / d.w) % d.h;
        const int64_t plane = i / (d.w * d.h);
        const T *pg = gy + plane * d.oh * d.ow;
        const uint8_t *pi = idx + plane * d.oh * d.ow;
        int64_t oy0 = iy + d.ph - d.kh + 1, ox0 = ix + d.pw - d.kw + 1;
        oy0 = oy0 <= 0 ? 0 : (oy0 + d.sh - 1) / d.sh;
        ox0 = ox0 <= 0 ? 0 : (ox0 + d.sw - 1) / d.sw;
        int64_t oy1 = (iy + d.ph) / d.sh, ox1 = (ix + d.pw) / d.sw;
        if (oy1 >= d.oh) oy1 = d.oh - 1;
        if (ox1 >= d.ow) ox1 = d.ow - 1;
        T s = 0;
        for (int64_t oy = oy0; oy <= oy1; oy++)
            for (int64_t ox = ox0; ox <= ox1; ox++)
                if (mg_pool2d_argmax_at(&d, oy, ox, pi[oy * d.ow + ox]) ==
                    iy * d.w + ix)
                    s += pg[oy * d.ow + ox];
        gx[i] = s;
    }
}

mg_status cu_pack_sign(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->in[0].d);
    CU_BY_FLOAT(a, a->in[0].d.dtype,
                k_pack_sign<T>
                <<<cu_blocks((n + 31) / 32), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (uint32_t *)a->out.data, n));
    return MG_OK;
}

/* 16-bit storage: one thread per word, two elements each */
__global__ void k_pack_bf16(const float *x, uint32_t *w, int64_t n) {
    CU_FOR(j, (n + 1) / 2) {
        const uint32_t lo = mg_bf16_from_f32(x[2 * j]);
        const uint32_t hi = 2 * j + 1 < n ? mg_bf16_from_f32(x[2 * j + 1]) : 0;
        w[j] = lo | hi << 16;
    }
}

__global__ void k_unpack_bf16(const uint32_t *w, float *x, int64_t n) {
    CU_FOR(i, n) {
        x[i] = mg_f32_from_bf16((uint16_t)(w[i / 2] >> (16 * (i % 2))));
    }
}

mg_status cu_pack_bf16(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->in[0].d);
    k_pack_bf16<<<cu_blocks((n + 1) / 2), CU_THREADS, 0, c->stream>>>(
        (const float *)a->in[0].data, (uint32_t *)a->out.data, n);
    return MG_OK;
}

mg_status cu_unpack_bf16(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    k_unpack_bf16<<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
        (const uint32_t *)a->in[0].data, (float *)a->out.data, n);
    return MG_OK;
}

mg_status cu_relu_grad_mask(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                k_relu_grad_mask<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (const uint32_t *)a->in[1].data,
                    (T *)a->out.data, n));
    return MG_OK;
}

mg_status cu_max_pool2d_argmax(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *x = &a->in[0].d;
    mg_pool2d_dims d;
    mg_status s = mg_pool2d_dims_setup(a, x, x, &d);
    if (s != MG_OK) return s;
    /* y's shape is not an operand: the pool's rule gives it */
    d.oh = mg_pool2d_out_len(d.h, d.kh, d.sh, d.ph, d.ph1, a->attrs->ceil_mode);
    d.ow = mg_pool2d_out_len(d.w, d.kw, d.sw, d.pw, d.pw1, a->attrs->ceil_mode);
    const int64_t n = d.planes * d.oh * d.ow;
    const int64_t tail = a->out.d.shape[0] * 4 - n;
    if (tail > 0 && cudaMemsetAsync((uint8_t *)a->out.data + n, 0, (size_t)tail,
                                    c->stream) != cudaSuccess)
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "cudaMemsetAsync failed");
    CU_BY_FLOAT(a, x->dtype,
                k_pool_argmax<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (uint8_t *)a->out.data, d));
    return MG_OK;
}

mg_status cu_max_pool2d_grad_argmax(cu_ctx *c, const mg_kargs *a) {
    mg_pool2d_dims d;
    mg_status s = mg_pool2d_dims_setup(a, &a->out.d, &a->in[0].d, &d);
    if (s != MG_OK) return s;
    const int64_t n = d.planes * d.h * d.w;
    CU_BY_FLOAT(a, a->out.d.dtype,
                k_pool_grad_argmax<T>
                <<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (const uint8_t *)a->in[1].data,
                    (T *)a->out.data, d));
    return MG_OK;
}
