/*
 * ops_compact.c - the compact saved forms of issue 29: ops that keep, for
 * the backward pass, only what a gradient rule really reads of a saved
 * tensor, and the readers that compute the same bits from it.
 *
 *   pack_sign(x)                 1 bit per element of x: x > 0, packed
 *                                little-endian into 32-bit words (I32
 *                                [ceil(n / 32)]); what relu_grad reads
 *   relu_grad_mask(gy, m)        relu_grad(gy, x) from x's sign mask
 *   max_pool2d_argmax(x)         per output of the max pool, the index of
 *                                the element it picked within its window
 *                                (row-major over the kh x kw window,
 *                                padding included), 1 byte each, packed
 *                                4 to a word (I32 [ceil(numel(y) / 4)]);
 *                                windows of at most 256 elements
 *   max_pool2d_grad_argmax(gy, i) max_pool2d_grad(gy, x) from x's argmax
 *   pack_bf16(x)                 a float32 x in 16 bits per element:
 *                                bfloat16, rounded to nearest even, two to
 *                                a word (I32 [ceil(n / 2)]), element 2j in
 *                                the low half; lossy, built only under
 *                                mg_checkpoints.store16
 *   unpack_bf16(w)               the float32 values back (a->ndim/shape:
 *                                x's shape)
 *
 * The words are an opaque container of bytes: the dtype is I32 only so
 * that the pool, the plan and the prediction count them as they count any
 * tensor, exactly. Only the compaction pass (src/rewrite/compact.c) builds
 * these ops, through the op table's mg_saved_form entries.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

static int64_t words_of(int64_t n, int per_word) {
    return (n + per_word - 1) / per_word;
}

static void words_desc(mg_tdesc *out, int64_t words) {
    *out = (mg_tdesc){.dtype = MG_I32, .ndim = 1, .shape = {words}};
}

static mg_status words_check(const mg_tdesc *m, int64_t want, const char *what,
                             char *why, size_t len) {
    if (m->dtype != MG_I32 || m->ndim != 1 || m->shape[0] != want) {
        snprintf(why, len, "%s must be i32 [%lld] (packed words)", what,
                 (long long)want);
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

mg_status mgi_pack_sign_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s == MG_OK) words_desc(out, words_of(mgi_tdesc_numel(&in[0]), 32));
    return s;
}

/* relu_grad_mask(gy, mask): a->ndim/shape hold x's shape, which is gy's. */
mg_status mgi_relu_grad_mask_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    (void)n_in, (void)a;
    mg_status s = mgi_float_check(&in[0], "gy", why, len);
    if (s == MG_OK)
        s = words_check(&in[1], words_of(mgi_tdesc_numel(&in[0]), 32), "mask",
                        why, len);
    if (s == MG_OK) *out = in[0];
    return s;
}

/* The pool's own rule, and a window that a byte can index. */
static mg_status argmax_pool_shape(const mg_tdesc *x, const mg_attrs *a,
                                   mg_tdesc *y, char *why, size_t len) {
    mg_status s = mgi_pool2d_infer(x, 1, a, y, why, len);
    if (s == MG_OK && (int64_t)a->kernel[0] * a->kernel[1] > 256) {
        snprintf(why, len,
                 "a %d x %d window has more than 256 elements, which "
                 "one byte cannot index",
                 a->kernel[0], a->kernel[1]);
        s = MG_ERR_UNSUPPORTED;
    }
    return s;
}

mg_status mgi_max_pool2d_argmax_infer(const mg_tdesc *in, int n_in,
                                      const mg_attrs *a, mg_tdesc *out,
                                      char *why, size_t len) {
    (void)n_in;
    mg_tdesc y;
    mg_status s = argmax_pool_shape(&in[0], a, &y, why, len);
    if (s == MG_OK) words_desc(out, words_of(mgi_tdesc_numel(&y), 4));
    return s;
}

/* max_pool2d_grad_argmax(gy, idx): a->ndim/shape hold x's shape. */
mg_status mgi_max_pool2d_grad_argmax_infer(const mg_tdesc *in, int n_in,
                                           const mg_attrs *a, mg_tdesc *out,
                                           char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "gy", why, len);
    if (s != MG_OK) return s;
    mg_tdesc x = {.dtype = in[0].dtype, .ndim = a->ndim}, y;
    for (int i = 0; i < a->ndim && i < MG_MAX_DIMS; i++)
        x.shape[i] = a->shape[i];
    s = argmax_pool_shape(&x, a, &y, why, len);
    if (s == MG_OK) s = mgi_grad_shape_check(&in[0], &y, why, len);
    if (s == MG_OK)
        s = words_check(&in[1], words_of(mgi_tdesc_numel(&y), 4), "argmax", why,
                        len);
    if (s == MG_OK) *out = x;
    return s;
}

/* One visit per window element and output, as the max pool itself. */
double mgi_max_pool2d_argmax_flops(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, const mg_tdesc *out) {
    (void)out;
    mg_tdesc y;
    char why[8];
    if (mgi_pool2d_infer(&in[0], n_in, a, &y, why, sizeof why) != MG_OK)
        return 0;
    return (double)mgi_tdesc_numel(&y) * a->kernel[0] * a->kernel[1];
}

mg_status mgi_pack_bf16_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    if (in[0].dtype != MG_F32) {
        snprintf(why, len,
                 "x must be f32 (16-bit storage keeps float32 tensors), "
                 "not %s",
                 mg_dtype_name(in[0].dtype));
        return MG_ERR_DTYPE;
    }
    words_desc(out, words_of(mgi_tdesc_numel(&in[0]), 2));
    return MG_OK;
}

mg_status mgi_unpack_bf16_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_shape_check(a->ndim, a->shape, why, len);
    if (s != MG_OK) return s;
    mg_tdesc x = {.dtype = MG_F32, .ndim = a->ndim};
    for (int i = 0; i < a->ndim; i++) x.shape[i] = a->shape[i];
    const int64_t n = mgi_tdesc_numel(&x);
    if (n < 0) {
        snprintf(why, len, "the unpacked shape has too many elements");
        return MG_ERR_SHAPE;
    }
    s = words_check(&in[0], words_of(n, 2), "packed", why, len);
    if (s == MG_OK) *out = x;
    return s;
}
