/*
 * tdesc.c - element types and tensor descriptors: dtype names and sizes,
 * element and byte counts, and the "[2,3,4]" shape text error messages use.
 */
#include "ir.h"

#include <stddef.h>
#include <stdio.h>

const char *mg_dtype_name(mg_dtype d) {
    switch (d) {
    case MG_F32: return "f32";
    case MG_F64: return "f64";
    case MG_I32: return "i32";
    case MG_I64: return "i64";
    case MG_BF16: return "bf16";
    case MG_F16: return "f16";
    }
    return "?";
}

size_t mg_dtype_size(mg_dtype d) {
    switch (d) {
    case MG_F32: return 4;
    case MG_F64: return 8;
    case MG_I32: return 4;
    case MG_I64: return 8;
    case MG_BF16: return 2;
    case MG_F16: return 2;
    }
    return 0;
}

/* Checked: shape rules call these on shapes the caller made up, so the
 * product may not fit (issue 11: a count that wrapped to 1 let a later
 * kernel write past a caller buffer). */
int64_t mgi_tdesc_numel(const mg_tdesc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n))
            return -1;
    return n;
}

bool mgi_tdesc_fits(const mg_tdesc *d) {
    int64_t n = mgi_tdesc_numel(d), bytes;
    return n >= 0 &&
           !__builtin_mul_overflow(n, (int64_t)mg_dtype_size(d->dtype),
                                   &bytes) &&
           bytes <= PTRDIFF_MAX;
}

/* mgi_tdesc_fits and the product in one pass: planning calls this for
 * every step several times over (issue 32). */
size_t mgi_tdesc_nbytes(const mg_tdesc *d) {
    int64_t n = 1, bytes;
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n))
            return SIZE_MAX;
    if (__builtin_mul_overflow(n, (int64_t)mg_dtype_size(d->dtype), &bytes) ||
        bytes > PTRDIFF_MAX)
        return SIZE_MAX;
    return (size_t)bytes;
}

bool mgi_tdesc_same_shape(const mg_tdesc *a, const mg_tdesc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *mgi_shape_str(const mg_tdesc *d, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < d->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                                 (long long)d->shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}
