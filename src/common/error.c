/*
 * error.c - status strings and the per-thread last-error message.
 *
 * The message lives in thread-local storage so that two threads building
 * or running graphs never see each other's errors.
 */
#include "ir.h"

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

mg_status mgi_set_errorv(mg_status s, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    last_status = s;
    return s;
}

mg_status mg_set_error(mg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mgi_set_errorv(s, fmt, ap);
    va_end(ap);
    return s;
}
