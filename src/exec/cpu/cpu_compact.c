/*
 * cpu_compact.c - the CPU kernels of the compact saved forms
 * (src/graph/ops_compact.c): the sign mask of relu's gradient and the
 * max-pool argmax, and the readers that compute the gradient from them
 * with the same bits as relu_grad and max_pool2d_grad: the same
 * comparison (x > 0, NaN false) and the same element picked
 * (mg_pool2d_argmax), added into a zeroed dx in the same output order.
 * Also 16-bit storage: pack_bf16 and unpack_bf16 (kernel_shared.h's
 * rounding, the CUDA kernels' bits).
 */
#include "cpu_kernels.h"

#include <string.h>

#define COMPACT_DEF(T, SUF)                                                    \
    static mg_status pack_sign_##SUF(const T *x, uint32_t *m, int64_t n) {     \
        const int64_t words = (n + 31) / 32;                                   \
        MG_CPU_PAR_LOOP(n, for (int64_t j = 0; j < words; j++), {              \
            const int64_t i0 = j * 32, i1 = i0 + 32 < n ? i0 + 32 : n;         \
            uint32_t w = 0;                                                    \
            for (int64_t i = i0; i < i1; i++)                                  \
                w |= (uint32_t)(x[i] > 0) << (i - i0);                         \
            m[j] = w;                                                          \
        });                                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status relu_grad_mask_##SUF(const T *gy, const uint32_t *m,      \
                                          T *gx, int64_t n) {                  \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {                  \
            gx[i] = (m[i / 32] >> (i % 32)) & 1u ? gy[i] : (T)0;               \
        });                                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status argmax_##SUF(const T *x, uint8_t *idx,                    \
                                  const mg_pool2d_dims *d) {                   \
        const int64_t hw = d->h * d->w, ohw = d->oh * d->ow;                   \
        MG_CPU_PAR_LOOP(                                                       \
            d->planes *hw, for (int64_t p = 0; p < d->planes; p++), {          \
                const T *xp = x + p * hw;                                      \
                uint8_t *ip = idx + p * ohw;                                   \
                for (int64_t oy = 0; oy < d->oh; oy++)                         \
                    for (int64_t ox = 0; ox < d->ow; ox++)                     \
                        *ip++ = mg_pool2d_argmax_byte(                         \
                            d, oy, ox,                                         \
                            mg_pool2d_argmax_##SUF(                            \
                                xp, d, mg_pool2d_window(d, oy, ox)));          \
            });                                                                \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status grad_argmax_##SUF(const T *gy, const uint8_t *idx, T *gx, \
                                       const mg_pool2d_dims *d) {              \
        const int64_t hw = d->h * d->w, ohw = d->oh * d->ow;                   \
        MG_CPU_PAR_LOOP(                                                       \
            d->planes *hw, for (int64_t p = 0; p < d->planes; p++), {          \
                const T *gyp = gy + p * ohw;                                   \
                const uint8_t *ip = idx + p * ohw;                             \
                T *gxp = gx + p * hw;                                          \
                memset(gxp, 0, (size_t)hw * sizeof(T));                        \
                for (int64_t oy = 0; oy < d->oh; oy++)                         \
                    for (int64_t ox = 0; ox < d->ow; ox++)                     \
                        gxp[mg_pool2d_argmax_at(d, oy, ox, *ip++)] += *gyp++;  \
            });                                                                \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(COMPACT_DEF)
#undef COMPACT_DEF

mg_status mgi_cpu_pack_sign(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->in[0].d.dtype, pack_sign, ka->in[0].data,
                           ka->out.data, mgi_tdesc_numel(&ka->in[0].d));
}

mg_status mgi_cpu_relu_grad_mask(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, relu_grad_mask, ka->in[0].data,
                           ka->in[1].data, ka->out.data,
                           mgi_tdesc_numel(&ka->out.d));
}

mg_status mgi_cpu_max_pool2d_argmax(const mg_kargs *ka) {
    const mg_tdesc *x = &ka->in[0].d;
    const int64_t words = ka->out.d.shape[0];
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, x, x, &d);
    if (s != MG_OK) return s;
    /* y's shape is not an operand: the pool's rule gives it */
    d.oh =
        mg_pool2d_out_len(d.h, d.kh, d.sh, d.ph, d.ph1, ka->attrs->ceil_mode);
    d.ow =
        mg_pool2d_out_len(d.w, d.kw, d.sw, d.pw, d.pw1, ka->attrs->ceil_mode);
    /* the bytes past the last output, in the last word, are zero */
    memset((uint8_t *)ka->out.data + d.planes * d.oh * d.ow, 0,
           (size_t)(words * 4 - d.planes * d.oh * d.ow));
    return MG_CPU_BY_DTYPE(ka, x->dtype, argmax, ka->in[0].data, ka->out.data,
                           &d);
}

mg_status mgi_cpu_max_pool2d_grad_argmax(const mg_kargs *ka) {
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, &ka->out.d, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, grad_argmax,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->out.data, &d);
}

mg_status mgi_cpu_pack_bf16(const mg_kargs *ka) {
    const float *x = (const float *)ka->in[0].data;
    uint32_t *w = (uint32_t *)ka->out.data;
    const int64_t n = mgi_tdesc_numel(&ka->in[0].d), words = (n + 1) / 2;
    MG_CPU_PAR_LOOP(n, for (int64_t j = 0; j < words; j++), {
        const uint32_t lo = mg_bf16_from_f32(x[2 * j]);
        const uint32_t hi = 2 * j + 1 < n ? mg_bf16_from_f32(x[2 * j + 1]) : 0;
        w[j] = lo | hi << 16;
    });
    return MG_OK;
}

mg_status mgi_cpu_unpack_bf16(const mg_kargs *ka) {
    const uint32_t *w = (const uint32_t *)ka->in[0].data;
    float *x = (float *)ka->out.data;
    const int64_t n = mgi_tdesc_numel(&ka->out.d);
    MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {
        x[i] = mg_f32_from_bf16((uint16_t)(w[i / 2] >> (16 * (i % 2))));
    });
    return MG_OK;
}
