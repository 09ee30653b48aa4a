/*
 * models_internal.h - what the model builders in src/models share: a model
 * under construction (growable parameter and block lists), parameter
 * registration with an init rule, and the seeded RNG that initialises
 * parameters and data. The builders use only the public API of memgrad.h
 * plus mg_set_error for argument errors.
 */
#ifndef MG_MODELS_INTERNAL_H
#define MG_MODELS_INTERNAL_H

#include "memgrad_models.h"

#include "common/ir.h"

/* How mg_model_init_params fills a parameter. */
typedef enum mgm_init {
    MGM_INIT_UNIFORM, /* uniform in [-a, a) */
    MGM_INIT_CONST    /* every element a */
} mgm_init;

struct mg_model_impl {
    int cap_params, cap_blocks;
    mgm_init *init; /* per parameter */
    double *init_a; /* per parameter */
    int n_classes;  /* label range of the target (classifiers) */
    int failed;     /* a registration ran out of memory */
};

/* A new model with an empty graph; NULL (error set) on allocation failure. */
mg_model *mgm_new(mg_model_kind kind, mg_dtype dtype, uint64_t seed);
/* A parameter leaf named `name` (copied by the graph) with its init rule.
 * MG_NO_TENSOR on failure (the error is kept). */
mg_tensor mgm_param(mg_model *m, const char *name, int ndim,
                    const int64_t *shape, mgm_init init, double a);
/* Record t as the output of a block; returns t. */
mg_tensor mgm_block(mg_model *m, mg_tensor t);
/* Finish a builder: if any step failed (loss == MG_NO_TENSOR), free m and
 * return NULL with the first error kept and prefixed by `who`. */
mg_model *mgm_finish(mg_model *m, const char *who);

/* Argument check: sets MG_ERR_INVALID_ARG "who: what" and returns 0 when
 * cond is false. */
int mgm_check(int cond, const char *who, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* y = x w + b for x [..., in] (w [in, out] shared across leading dims). */
mg_tensor mgm_linear(mg_model *m, mg_tensor x, int in, int out,
                     const char *prefix, double w_bound);

/* splitmix64: the RNG of parameter and data initialisation. */
static inline uint64_t mgm_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static inline double mgm_rng_uniform(uint64_t *s) {
    return (double)(mgm_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* An independent stream for (seed, stream). */
static inline uint64_t mgm_rng_stream(uint64_t seed, uint64_t stream) {
    uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (stream + 1));
    (void)mgm_rng_next(&s);
    return s;
}

#endif
