/*
 * rng.h - the counter-based RNG behind dropout, as pure inline functions so
 * that the CPU kernels and the CUDA kernels (cuda/) evaluate the very same
 * code: masks agree bit for bit across devices and recomputation.
 *
 * Included by ir.h; a .cu file includes it directly (it needs only
 * <stdint.h>), where MG_RNG_FN makes the functions __host__ __device__.
 */
#ifndef MG_RNG_H
#define MG_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define MG_RNG_FN static inline __host__ __device__
#else
#define MG_RNG_FN static inline
#endif

/* splitmix64's finalizer: a bijective mixer with full avalanche. Keying it
 * with a per-op key and the element counter gives a counter-based stream
 * (as Philox does for cuRAND) that any backend can evaluate in O(1). */
MG_RNG_FN uint64_t mg_rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Counter-based RNG: a pure function of (key, counter). */
MG_RNG_FN uint64_t mg_rng_hash(uint64_t key, uint64_t counter) {
    return mg_rng_mix64(key ^ mg_rng_mix64(counter + 0x9e3779b97f4a7c15ULL));
}

/* The dropout key of an op: mixes the run seed and the op's own seed. */
MG_RNG_FN uint64_t mg_rng_key(uint64_t run_seed, uint64_t op_seed) {
    return mg_rng_mix64(mg_rng_mix64(run_seed) ^
                        (op_seed + 0x632be59bd9b4e019ULL));
}

/* A uniform double in [0, 1) with 53 random bits from a hash. */
MG_RNG_FN double mg_rng_uniform(uint64_t h) {
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* mg_rng_uniform(h) >= p without the conversion to double: the uniform is
 * k 2^-53 for the integer k = h >> 11, exactly, and p 2^53 is exact too (a
 * power-of-two scaling), so k 2^-53 >= p exactly when k >= ceil(p 2^53).
 * The decisions are the same bit for bit; a loop of integer compares is
 * what a CPU vectorises. For p in [0, 1). */
MG_RNG_FN uint64_t mg_rng_keep_threshold(double p) {
    const double t = p * 9007199254740992.0;
    const uint64_t k = (uint64_t)t; /* floor: t is in [0, 2^53) */
    return (double)k < t ? k + 1 : k;
}
MG_RNG_FN int mg_rng_keep(uint64_t h, uint64_t threshold) {
    return (h >> 11) >= threshold;
}

#endif
