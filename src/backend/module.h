/*
 * module.h - a registry row for a backend built as a shared module
 * (module.c): MGI_BACKEND_MODULE defines the row, whose functions load the
 * module on first use and then forward to the module's own row.
 */
#ifndef MG_BACKEND_MODULE_H
#define MG_BACKEND_MODULE_H

#include "backend.h"

#include <pthread.h>

typedef struct mgi_backend_module {
    const char *name;  /* as messages spell the device: "CUDA" */
    const char *file;  /* "libmemgrad-cuda.so" */
    const char *entry; /* its exported mg_backend_module_fn */
    /* Devices the driver sees, asked without loading the module (0 with a
     * reason in why); NULL: ask the module. */
    int (*probe)(char *why, size_t why_len);
    void (*load_once)(void), (*probe_once_fn)(void); /* for pthread_once */
    pthread_once_t once, probe_once;
    const mg_backend_reg *reg; /* the module's row once loaded, or NULL */
    int probed_count;
    char why[512]; /* why there is no device or no module */
} mgi_backend_module;

/* The module's row, loading it on the first call; NULL (why in m->why)
 * when it does not load. */
const mg_backend_reg *mgi_backend_module_get(mgi_backend_module *m);
int mgi_backend_module_count(mgi_backend_module *m);
mg_status mgi_backend_module_init(mgi_backend_module *m, mg_backend *out);
bool mgi_backend_module_has_kernel(mgi_backend_module *m, mg_op op);
size_t mgi_backend_module_kernel_workspace(mgi_backend_module *m,
                                           const mg_kargs *a);
/* The bodies of a row's once-functions. */
void mgi_backend_module_load(mgi_backend_module *m);
void mgi_backend_module_probe(mgi_backend_module *m);

/* The CUDA driver's device count through libcuda.so.1 alone (0 without a
 * driver or a device, and why). */
int mgi_cuda_driver_probe(char *why, size_t why_len);

/* Defines `static const mg_backend_reg var`, the row of a module backend;
 * EXTRA is its plan_extra (NULL for none), which a plan asks without
 * loading the module, so it lives in the library (a header's rule). */
#define MGI_BACKEND_MODULE(var, DEVICE, NAME, DLPACK, FILE, ENTRY, PROBE,      \
                           EXTRA)                                              \
    static mgi_backend_module var##_m;                                         \
    static void var##_load(void) { mgi_backend_module_load(&var##_m); }        \
    static void var##_probe(void) { mgi_backend_module_probe(&var##_m); }      \
    static mgi_backend_module var##_m = {.name = NAME,                         \
                                         .file = FILE,                         \
                                         .entry = ENTRY,                       \
                                         .probe = PROBE,                       \
                                         .load_once = var##_load,              \
                                         .probe_once_fn = var##_probe,         \
                                         .once = PTHREAD_ONCE_INIT,            \
                                         .probe_once = PTHREAD_ONCE_INIT};     \
    static int var##_count(void) {                                             \
        return mgi_backend_module_count(&var##_m);                             \
    }                                                                          \
    static mg_status var##_init(mg_backend *o) {                               \
        return mgi_backend_module_init(&var##_m, o);                           \
    }                                                                          \
    static bool var##_has(mg_op op) {                                          \
        return mgi_backend_module_has_kernel(&var##_m, op);                    \
    }                                                                          \
    static size_t var##_ws(const mg_kargs *a) {                                \
        return mgi_backend_module_kernel_workspace(&var##_m, a);               \
    }                                                                          \
    static const mg_backend_reg var = {.device = DEVICE,                       \
                                       .name = NAME,                           \
                                       .dlpack_device = DLPACK,                \
                                       .device_count = var##_count,            \
                                       .init = var##_init,                     \
                                       .plan_workspace = NULL,                 \
                                       .has_kernel = var##_has,                \
                                       .kernel_workspace = var##_ws,           \
                                       .plan_extra = EXTRA}

#endif
