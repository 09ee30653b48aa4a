/*
 * half.h - the two 16-bit float formats (MG_BF16, MG_F16) and their
 * conversions to and from float32 and float64, written once for every
 * device (nvcc compiles it as C++ with the functions __host__ __device__,
 * as kernel_shared.h's), so the same value gets the same bits everywhere.
 *
 * Every narrowing rounds to nearest, ties to even, and is correctly
 * rounded from its source: float64 goes to 16 bits through float32 rounded
 * to odd, which cannot round twice (the classic round-to-odd argument:
 * float32 has more than two bits beyond either 16-bit format's). Values
 * beyond the format's largest finite one round to infinity exactly where
 * IEEE 754 says (bfloat16: past (2 - 2^-8) 2^127; float16: 65520 and up),
 * subnormals are kept (float16's down to 2^-24; a value of 2^-25 or less
 * rounds to zero, 2^-25 itself being the tie), a NaN stays a quiet NaN of
 * its sign, and widening is exact (a NaN keeps its payload).
 *
 * PyTorch's c10::BFloat16 and c10::Half round float32 the same way; from
 * float64 they go through float32 rounded to nearest, which can round
 * twice (memgrad does not: float64 references in the tests are rounded
 * once).
 */
#ifndef MG_HALF_H
#define MG_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define MG_HALF_FN static inline __host__ __device__
#else
#define MG_HALF_FN static inline
#endif

/* ---- bfloat16: the top 16 bits of a float32 ------------------------------ */

MG_HALF_FN uint16_t mg_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

MG_HALF_FN float mg_f32_from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- float16: 5 exponent bits, 10 fraction bits ------------------------- */

MG_HALF_FN uint16_t mg_f16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) /* NaN: quiet, the top of its payload kept */
        return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x477ff000u) /* 65520 and up (the tie goes to even: 2^16) */
        return (uint16_t)(sign | 0x7c00u);
    if (u >= 0x38800000u) { /* normal in float16: rebias the exponent */
        uint32_t r = u - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    /* subnormal in float16 (or zero): units of 2^-24 */
    const uint32_t e = u >> 23;
    if (e < 102) return sign; /* below 2^-25: rounds to zero */
    const uint32_t mant = (u & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal */
}

MG_HALF_FN float mg_f32_from_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1fu) u = sign | 0x7f800000u | (m << 13);
    else if (e) u = sign | ((e + 112u) << 23) | (m << 13);
    else { /* zero or subnormal: m 2^-24, exact in float32 */
        float v = (float)m * 5.9604644775390625e-8f;
        memcpy(&u, &v, sizeof u);
        u |= sign;
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- from float64 -------------------------------------------------------- */

/* x rounded to float32 toward zero, its last bit set when inexact ("round
 * to odd"): rounding that once more to a narrower format is correct. */
MG_HALF_FN float mg_f32_round_odd(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((double)f == x) return f;
    if (x != x) return f; /* NaN */
    /* (float)x rounded away from zero: step one back toward it */
    if ((f > 0 && (double)f > x) || (f < 0 && (double)f < x)) u -= 1u;
    u |= 1u;
    memcpy(&f, &u, sizeof f);
    return f;
}

MG_HALF_FN uint16_t mg_bf16_from_f64(double x) {
    return mg_bf16_from_f32(mg_f32_round_odd(x));
}
MG_HALF_FN uint16_t mg_f16_from_f64(double x) {
    return mg_f16_from_f32(mg_f32_round_odd(x));
}

#endif
