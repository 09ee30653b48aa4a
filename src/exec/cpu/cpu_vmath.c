/*
 * cpu_vmath.c - float exp, tanh and erf over arrays, through glibc's vector
 * maths library (libmvec), for the kernels whose time goes into them: the
 * tanh gelu and its gradient, tanh, exp and sigmoid, the fused attention's
 * softmax weights, and erf (the exact GELU an exported GPT composes from
 * it). Scalar expf and tanhf were a third of a GPT step on the CPU (issue
 * 30); scalar erff was the largest cost after the GEMMs and attention of a
 * GPT imported from ONNX (issue 46).
 *
 * Every element goes through the same vector routine, a short tail as well
 * (it is padded to a full vector), so an element's bits depend on its value
 * alone: never on where a thread's chunk starts, so never on the thread
 * count. The AVX2 routines are used where the CPU has AVX2, the SSE ones
 * (part of x86-64's baseline) otherwise; without libmvec (or, for erf,
 * a libmvec older than glibc 2.35's), the scalar functions.
 */
#include "cpu_vmath.h"

#include <math.h>
#include <string.h>

#if defined(MG_HAVE_LIBMVEC) && defined(__x86_64__)
#include <immintrin.h>

/* libmvec's entry points (the vector function ABI's names: b = SSE, 4
 * lanes; d = AVX2, 8 lanes; N = unmasked; v = one vector argument). */
__m128 _ZGVbN4v_expf(__m128 x);
__m128 _ZGVbN4v_tanhf(__m128 x);
__attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256 x);
__attribute__((target("avx2"))) __m256 _ZGVdN8v_tanhf(__m256 x);
#ifdef MG_HAVE_LIBMVEC_ERF
__m128 _ZGVbN4v_erff(__m128 x);
__attribute__((target("avx2"))) __m256 _ZGVdN8v_erff(__m256 x);
#endif

#define VMATH_DEF(name, fn4, fn8)                                              \
    __attribute__((target("avx2"))) static void name##_avx2(                   \
        float *y, const float *x, int64_t n) {                                 \
        int64_t i = 0;                                                         \
        for (; i + 8 <= n; i += 8)                                             \
            _mm256_storeu_ps(y + i, fn8(_mm256_loadu_ps(x + i)));              \
        if (i < n) {                                                           \
            float buf[8] = {0};                                                \
            memcpy(buf, x + i, (size_t)(n - i) * sizeof *buf);                 \
            _mm256_storeu_ps(buf, fn8(_mm256_loadu_ps(buf)));                  \
            memcpy(y + i, buf, (size_t)(n - i) * sizeof *buf);                 \
        }                                                                      \
    }                                                                          \
    static void name##_sse(float *y, const float *x, int64_t n) {              \
        int64_t i = 0;                                                         \
        for (; i + 4 <= n; i += 4)                                             \
            _mm_storeu_ps(y + i, fn4(_mm_loadu_ps(x + i)));                    \
        if (i < n) {                                                           \
            float buf[4] = {0};                                                \
            memcpy(buf, x + i, (size_t)(n - i) * sizeof *buf);                 \
            _mm_storeu_ps(buf, fn4(_mm_loadu_ps(buf)));                        \
            memcpy(y + i, buf, (size_t)(n - i) * sizeof *buf);                 \
        }                                                                      \
    }                                                                          \
    void mgi_cpu_##name(float *y, const float *x, int64_t n) {                 \
        if (__builtin_cpu_supports("avx2")) name##_avx2(y, x, n);              \
        else name##_sse(y, x, n);                                              \
    }
VMATH_DEF(vexpf, _ZGVbN4v_expf, _ZGVdN8v_expf)
VMATH_DEF(vtanhf, _ZGVbN4v_tanhf, _ZGVdN8v_tanhf)
#ifdef MG_HAVE_LIBMVEC_ERF
VMATH_DEF(verff, _ZGVbN4v_erff, _ZGVdN8v_erff)
#define MG_HAVE_VERFF
#endif
#undef VMATH_DEF

#else

void mgi_cpu_vexpf(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

void mgi_cpu_vtanhf(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

#endif

#ifndef MG_HAVE_VERFF
void mgi_cpu_verff(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = erff(x[i]);
}
#endif
