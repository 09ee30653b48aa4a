/*
 * error.c - status strings and the per-thread last-error message.
 *
 * The message lives in thread-local storage so that two threads building
 * or running graphs never see each other's errors.
 */
#include "ir.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static _Thread_local mg_status last_status;

const char *mg_status_str(mg_status s) {
    switch (s) {
    case MG_OK: return "ok";
    case MG_ERR_INVALID_ARG: return "invalid argument";
    case MG_ERR_SHAPE: return "shape mismatch";
    case MG_ERR_DTYPE: return "dtype mismatch";
    case MG_ERR_UNKNOWN_ID: return "unknown tensor id";
    case MG_ERR_CYCLE: return "graph has a cycle";
    case MG_ERR_NOMEM: return "out of memory";
    case MG_ERR_UNBOUND: return "tensor has no memory bound";
    case MG_ERR_NOT_DIFFERENTIABLE: return "op is not differentiable";
    case MG_ERR_UNSUPPORTED: return "not supported";
    case MG_ERR_INTERNAL: return "internal error";
    case MG_ERR_COMM: return "communication failed";
    }
    return "unknown status";
}

const char *mg_last_error(void) { return last_error; }

void mg_clear_error(void) {
    last_error[0] = '\0';
    last_status = MG_OK;
}

mg_status mg_last_status(void) { return last_status; }

mg_status mg_set_errorv(mg_status s, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    last_status = s;
    return s;
}

mg_status mg_set_error(mg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mg_set_errorv(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *mg_dtype_name(mg_dtype d) {
    switch (d) {
    case MG_F32: return "f32";
    case MG_F64: return "f64";
    case MG_I32: return "i32";
    }
    return "?";
}

size_t mg_dtype_size(mg_dtype d) {
    switch (d) {
    case MG_F32: return 4;
    case MG_F64: return 8;
    case MG_I32: return 4;
    }
    return 0;
}

/* Checked: shape rules call these on shapes the caller made up, so the
 * product may not fit (issue 11: a count that wrapped to 1 let a later
 * kernel write past a caller buffer). */
int64_t mg_tdesc_numel(const mg_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n))
            return -1;
    return n;
}

bool mg_tdesc_fits(const mg_tdesc *d) {
    int64_t n = mg_tdesc_numel(d), bytes;
    return n >= 0 &&
           !__builtin_mul_overflow(n, (int64_t)mg_dtype_size(d->dtype),
                                   &bytes) &&
           bytes <= PTRDIFF_MAX;
}

size_t mg_tdesc_nbytes(const mg_tdesc *d) {
    return mg_tdesc_fits(d)
               ? (size_t)mg_tdesc_numel(d) * mg_dtype_size(d->dtype)
               : SIZE_MAX;
}

bool mg_tdesc_same_shape(const mg_tdesc *a, const mg_tdesc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *mg_shape_str(const mg_tdesc *d, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < d->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld",
                                 i ? "," : "", (long long)d->shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

/* The dropout RNG (mg_rng_hash, mg_rng_key) lives in rng.h as inline
 * functions, shared with the CUDA kernels. */
