/*
 * cpu_widen.c - bfloat16 and float16 on the CPU, on a processor without
 * 16-bit arithmetic (no AVX512-BF16 or AMX; the path taken on every host
 * for now, see docs/half.md): an op with a 16-bit input or output runs its
 * float32 kernel on float32 copies and rounds the output once to its
 * storage type (common/widen.h says where the copies live), and cast
 * converts between every pair of dtypes directly.
 *
 * So matmul, convolution and attention accumulate in float32 (BLAS sgemm,
 * oneDNN's f32 convolution), softmax, the norms, the losses and the
 * reductions compute in float32, and an elementwise op computes in float32
 * and rounds once, as PyTorch's CPU kernels do for bfloat16 (its
 * Vectorized<BFloat16> converts to float). Each op's value is a function
 * of its inputs alone, as in float32, so a recomputed op gives the same
 * bits.
 */
#include "../../common/widen.h"
#include "cpu_kernels.h"

#include <stdint.h>

/* ---- conversions of whole arrays ----------------------------------------- */

/* Elementwise, so on OpenMP's threads where the count pays for them
 * (MG_CPU_PAR_LOOP) with the same bits. */
static void widen_array(const void *src, mg_dtype dt, float *restrict dst,
                        int64_t n) {
    const uint16_t *restrict s = (const uint16_t *)src;
    if (dt == MG_BF16)
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),
                        { dst[i] = mg_f32_from_bf16(s[i]); });
    else
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),
                        { dst[i] = mg_f32_from_f16(s[i]); });
}

static void narrow_array(const float *restrict src, void *dst_, mg_dtype dt,
                         int64_t n) {
    uint16_t *restrict d = (uint16_t *)dst_;
    if (dt == MG_BF16)
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),
                        { d[i] = mg_bf16_from_f32(src[i]); });
    else
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),
                        { d[i] = mg_f16_from_f32(src[i]); });
}

/* ---- cast ---------------------------------------------------------------- */

/* Element i of p (of dtype dt) as a double: exact for every dtype but an
 * int64 beyond 2^53, which rounds to nearest. */
static double load_at(const void *p, mg_dtype dt, int64_t i) {
    switch (dt) {
    case MG_F32: return ((const float *)p)[i];
    case MG_F64: return ((const double *)p)[i];
    case MG_I32: return ((const int32_t *)p)[i];
    case MG_I64: return (double)((const int64_t *)p)[i];
    case MG_BF16: return mg_f32_from_bf16(((const uint16_t *)p)[i]);
    case MG_F16: return mg_f32_from_f16(((const uint16_t *)p)[i]);
    }
    return 0;
}

/* v into element i of p, converted as mgi_cpu_cast converts (integers
 * truncated and saturated, NaN to 0); to 16 bits rounded once. */
static void store_at(void *p, mg_dtype dt, int64_t i, double v) {
    switch (dt) {
    case MG_F32: ((float *)p)[i] = (float)v; break;
    case MG_F64: ((double *)p)[i] = v; break;
    case MG_I32: ((int32_t *)p)[i] = MG_CAST_SAT32(int32_t, v); break;
    case MG_I64: ((int64_t *)p)[i] = MG_CAST_SAT64(int64_t, v); break;
    case MG_BF16: ((uint16_t *)p)[i] = mg_bf16_from_f64(v); break;
    case MG_F16: ((uint16_t *)p)[i] = mg_f16_from_f64(v); break;
    }
}

/* A cast from or to a 16-bit dtype. float32 <-> 16 bits, the casts of
 * autocast, have loops of their own; the others go through double, which
 * holds every value of the source exactly (but int64's past 2^53). */
static mg_status cast_half(const mg_kargs *ka) {
    const int64_t n = mgi_tdesc_numel(&ka->out.d);
    const mg_dtype from = ka->in[0].d.dtype, to = ka->out.d.dtype;
    const void *x = ka->in[0].data;
    void *y = ka->out.data;
    if (from == MG_F32 && mgi_dtype_is_half(to)) {
        narrow_array(x, y, to, n);
    } else if (mgi_dtype_is_half(from) && to == MG_F32) {
        widen_array(x, from, y, n);
    } else if (from == to) {
        memcpy(y, x, (size_t)n * 2);
    } else {
        for (int64_t i = 0; i < n; i++) store_at(y, to, i, load_at(x, from, i));
    }
    return MG_OK;
}

/* ---- elementwise ops, a block at a time ---------------------------------- */

enum { BLOCK = 1024 };

static mg_status run_blockwise(void *ctx, const mg_kargs *a,
                               mgi_cpu_run_fn run) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    float in_f[MG_MAX_INPUTS][BLOCK], out_f[BLOCK];
    const bool out_half = mgi_dtype_is_half(a->out.d.dtype);
    for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {
        const int64_t m = n - i0 < BLOCK ? n - i0 : BLOCK;
        mg_kargs b = *a;
        b.work = NULL;
        b.work_bytes = 0;
        for (int k = 0; k < a->n_in; k++) {
            const mg_kbuf *in = &a->in[k];
            b.in[k].d = mgi_widen_desc(&in->d);
            b.in[k].d.ndim = 1;
            b.in[k].d.shape[0] = m;
            if (mgi_dtype_is_half(in->d.dtype)) {
                widen_array((const uint16_t *)in->data + i0, in->d.dtype,
                            in_f[k], m);
                b.in[k].data = in_f[k];
            } else {
                b.in[k].data =
                    (char *)in->data + i0 * (int64_t)mg_dtype_size(in->d.dtype);
            }
        }
        b.out.d = mgi_widen_desc(&a->out.d);
        b.out.d.ndim = 1;
        b.out.d.shape[0] = m;
        b.out.data = out_half ? (void *)out_f
                              : (char *)a->out.data +
                                    i0 * (int64_t)mg_dtype_size(a->out.d.dtype);
        const mg_status s = run(ctx, &b);
        if (s != MG_OK) return s;
        if (out_half)
            narrow_array(out_f, (uint16_t *)a->out.data + i0, a->out.d.dtype,
                         m);
    }
    return MG_OK;
}

/* ---- any other op: whole float32 copies in the workspace ----------------- */

static mg_status run_copies(void *ctx, const mg_kargs *a, mgi_cpu_run_fn run) {
    mg_tdesc in[MG_MAX_INPUTS];
    for (int k = 0; k < a->n_in; k++) in[k] = a->in[k].d;
    const size_t need = mgi_widen_bytes(a->op, a->n_in, in, &a->out.d);
    if (need == SIZE_MAX || need > a->work_bytes || (need && !a->work))
        return mg_kernel_fail(a, MG_ERR_INTERNAL,
                              "%s in 16 bits needs %zu bytes of float32 "
                              "copies; the step has %zu",
                              mgi_op_str(a->op), need, a->work_bytes);
    char *w = (char *)a->work;
    size_t off = 0;
    mg_kargs b = *a;
    for (int k = 0; k < a->n_in; k++) {
        b.in[k].d = mgi_widen_desc(&in[k]);
        if (!mgi_dtype_is_half(in[k].dtype)) continue;
        float *f = (float *)(w + off);
        const int64_t n = mgi_tdesc_numel(&in[k]);
        widen_array(a->in[k].data, in[k].dtype, f, n);
        b.in[k].data = f;
        off += ((size_t)n * 4 + MGI_WIDEN_ALIGN - 1) / MGI_WIDEN_ALIGN *
               MGI_WIDEN_ALIGN;
    }
    const bool out_half = mgi_dtype_is_half(a->out.d.dtype);
    b.out.d = mgi_widen_desc(&a->out.d);
    if (out_half) {
        b.out.data = w + off;
        off += ((size_t)mgi_tdesc_numel(&a->out.d) * 4 + MGI_WIDEN_ALIGN - 1) /
               MGI_WIDEN_ALIGN * MGI_WIDEN_ALIGN;
    }
    b.work_bytes = a->work_bytes - off;
    b.work = b.work_bytes ? w + off : NULL;
    const mg_status s = run(ctx, &b);
    if (s == MG_OK && out_half)
        narrow_array(b.out.data, a->out.data, a->out.d.dtype,
                     mgi_tdesc_numel(&a->out.d));
    return s;
}

bool mgi_cpu_widen_run(void *ctx, const mg_kargs *a, mgi_cpu_run_fn run,
                       mg_status *s) {
    mg_tdesc in[MG_MAX_INPUTS];
    for (int k = 0; k < a->n_in; k++) in[k] = a->in[k].d;
    if (a->op == MG_OP_CAST &&
        (mgi_dtype_is_half(in[0].dtype) || mgi_dtype_is_half(a->out.d.dtype))) {
        *s = cast_half(a);
        return true;
    }
    if (!mgi_widen_needed(a->op, a->n_in, in, &a->out.d)) return false;
    *s = mgi_widen_blockwise(a->op, a->n_in, in, &a->out.d)
             ? run_blockwise(ctx, a, run)
             : run_copies(ctx, a, run);
    return true;
}

size_t mgi_cpu_widen_workspace(const mg_kargs *a,
                               size_t (*f32_query)(const mg_kargs *a),
                               bool *widened) {
    mg_tdesc in[MG_MAX_INPUTS];
    for (int k = 0; k < a->n_in; k++) in[k] = a->in[k].d;
    *widened = mgi_widen_needed(a->op, a->n_in, in, &a->out.d);
    if (!*widened) return 0;
    if (mgi_widen_blockwise(a->op, a->n_in, in, &a->out.d)) return 0;
    mg_kargs b = *a;
    for (int k = 0; k < a->n_in; k++) b.in[k].d = mgi_widen_desc(&in[k]);
    b.out.d = mgi_widen_desc(&a->out.d);
    const size_t copies = mgi_widen_bytes(a->op, a->n_in, in, &a->out.d);
    const size_t inner = f32_query(&b);
    return copies == SIZE_MAX || inner > SIZE_MAX - copies ? SIZE_MAX
                                                           : copies + inner;
}
