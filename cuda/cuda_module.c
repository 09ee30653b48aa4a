/*
 * cuda_module.c - the CUDA backend's entry when it is built as the module
 * libmemgrad-cuda.so (MG_CUDA_MODULE, the default): src/backend/module.c
 * opens it the first time a CUDA executor is asked for and calls
 * mg_backend_cuda_module, which hands back the backend's row.
 *
 * The module is a shared object of its own, opened with RTLD_LOCAL, and
 * libmemgrad may be a static library inside the program: it cannot call
 * the library's mg_set_error. The library lends its error setter instead,
 * and this file's mg_set_error (hidden, so it binds only inside the
 * module) formats the message and passes it on.
 */
#include "backend/backend.h"

#include <stdarg.h>
#include <stdio.h>

extern const mg_backend_reg mgi_backend_cuda_reg; /* cuda_backend.cu */

/* Written once, by the library's pthread_once, before any other call. */
static const mg_backend_core *core;

mg_status mg_set_error(mg_status s, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return core ? core->set_error(s, msg) : s;
}

__attribute__((visibility("default"))) const mg_backend_reg *
mg_backend_cuda_module(const mg_backend_core *c) {
    if (!c || c->abi != MG_BACKEND_ABI || !c->set_error) return NULL;
    core = c;
    return &mgi_backend_cuda_reg;
}
