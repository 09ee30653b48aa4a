/*
 * module.c - backends built as shared modules, loaded the first time they
 * are asked for, as ggml loads its backends: a process that never asks for
 * a CUDA executor never maps cuBLAS, cuDNN or the CUDA runtime.
 *
 * A module's registry row (MGI_BACKEND_MODULE in module.h) answers
 * device_count without loading the module where it can: it first asks the
 * device's driver library (libcuda.so.1 for CUDA) whether any device
 * exists, and only then opens the module. The module is looked for, in
 * order: in $MEMGRAD_BACKEND_DIR; beside the object that holds this code
 * (libmemgrad.so, or the program a static libmemgrad is linked into); in
 * the library directory memgrad was installed to; then by its bare name
 * through the loader's usual search. Loading happens once per process
 * (pthread_once), so every executor shares the module.
 */
#define _GNU_SOURCE /* dladdr */
#include "module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MG_MODULE_INSTALL_DIR
#define MG_MODULE_INSTALL_DIR ""
#endif

static mg_status core_set_error(mg_status s, const char *message) {
    return mg_set_error(s, "%s", message);
}

static const mg_backend_core core = {MG_BACKEND_ABI, core_set_error};

/* The directory of the object holding this function, in buf. */
static bool own_dir(char *buf, size_t len) {
    Dl_info info;
    if (!dladdr((void *)own_dir, &info) || !info.dli_fname) return false;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return false;
    size_t n = (size_t)(slash - info.dli_fname);
    if (n + 1 > len) return false;
    memcpy(buf, info.dli_fname, n);
    buf[n] = 0;
    return true;
}

static void *open_in(const char *dir, const char *file, char *why,
                     size_t why_len) {
    char path[PATH_MAX];
    if (!dir || !dir[0]) return NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        /* a module that is there but cannot load says why; a missing one
         * is only the next place to look */
        if (e && !strstr(e, "No such file")) snprintf(why, why_len, "%s", e);
    }
    return h;
}

static void *module_open(const char *file, char *why, size_t why_len) {
    char dir[PATH_MAX];
    void *h = open_in(getenv("MEMGRAD_BACKEND_DIR"), file, why, why_len);
    if (!h && own_dir(dir, sizeof dir)) h = open_in(dir, file, why, why_len);
    if (!h) h = open_in(MG_MODULE_INSTALL_DIR, file, why, why_len);
    if (!h) {
        h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (!h && !why[0]) {
            const char *e = dlerror();
            snprintf(why, why_len, "%s", e ? e : "not found");
        }
    }
    return h;
}

void mgi_backend_module_load(mgi_backend_module *m) {
    char why[sizeof m->why] = "";
    void *h = module_open(m->file, why, sizeof why);
    if (!h) {
        snprintf(m->why, sizeof m->why, "its module %.64s did not load: %.400s",
                 m->file, why);
        return;
    }
    mg_backend_module_fn entry = NULL;
    /* POSIX's way from a data pointer to a function pointer */
    *(void **)&entry = dlsym(h, m->entry);
    const mg_backend_reg *reg = entry ? entry(&core) : NULL;
    if (!reg) {
        snprintf(m->why, sizeof m->why,
                 "its module %.64s has no entry %.64s for ABI %d", m->file,
                 m->entry, MG_BACKEND_ABI);
        dlclose(h);
        return;
    }
    m->reg = reg; /* kept open for the life of the process */
}

void mgi_backend_module_probe(mgi_backend_module *m) {
    if (!m->probe) {
        m->probed_count = -1; /* no probe: ask the module */
        return;
    }
    m->probed_count = m->probe(m->why, sizeof m->why);
}

const mg_backend_reg *mgi_backend_module_get(mgi_backend_module *m) {
    pthread_once(&m->once, m->load_once);
    return m->reg;
}

int mgi_backend_module_count(mgi_backend_module *m) {
    pthread_once(&m->probe_once, m->probe_once_fn);
    if (m->probed_count == 0) return 0;
    const mg_backend_reg *reg = mgi_backend_module_get(m);
    return reg ? reg->device_count() : 0;
}

mg_status mgi_backend_module_init(mgi_backend_module *m, mg_backend *out) {
    if (mgi_backend_module_count(m) <= 0)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "mg_exec_new: no %s device found%s%s", m->name,
                            m->why[0] ? ": " : "", m->why);
    return m->reg->init(out);
}

bool mgi_backend_module_has_kernel(mgi_backend_module *m, mg_op op) {
    const mg_backend_reg *reg = mgi_backend_module_get(m);
    return reg && reg->has_kernel && reg->has_kernel(op);
}

size_t mgi_backend_module_kernel_workspace(mgi_backend_module *m,
                                           const mg_kargs *a) {
    const mg_backend_reg *reg = mgi_backend_module_get(m);
    return reg && reg->kernel_workspace ? reg->kernel_workspace(a) : 0;
}

/* ---- the CUDA driver, asked without the runtime ----------------------------
 */

int mgi_cuda_driver_probe(char *why, size_t why_len) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_len, "no CUDA driver (%s)", e ? e : "libcuda.so.1");
        return 0;
    }
    int (*init)(unsigned) = NULL, (*count)(int *) = NULL;
    *(void **)&init = dlsym(h, "cuInit");
    *(void **)&count = dlsym(h, "cuDeviceGetCount");
    int n = 0;
    if (!init || !count || init(0) != 0 || count(&n) != 0 || n <= 0) {
        snprintf(why, why_len, "the CUDA driver finds no device");
        n = 0;
    }
    /* the driver stays loaded: the runtime will want it again */
    return n;
}
