/*
 * backend_registry.c - the table of backends this library was built with,
 * which the executor searches by device. A new backend adds its row here
 * (and defines it in its own files); nothing else in the executor changes.
 */
#include "backend.h"

#include <stddef.h>

const mg_backend_reg *const mgi_backend_table[] = {
    &mgi_backend_cpu_reg,
#ifdef MG_HAVE_CUDA
    &mgi_backend_cuda_reg, /* cuda/cuda_backend.cu, built when nvcc is found */
#endif
};

const int mgi_backend_table_size =
    (int)(sizeof mgi_backend_table / sizeof mgi_backend_table[0]);

const mg_backend_reg *mgi_backend_find(mg_device dev) {
    for (int i = 0; i < mgi_backend_table_size; i++)
        if (mgi_backend_table[i]->device == dev) return mgi_backend_table[i];
    return NULL;
}

size_t mgi_backends_plan_workspace(const mg_kargs *a) {
    size_t most = 0;
    for (int i = 0; i < mgi_backend_table_size; i++)
        if (mgi_backend_table[i]->plan_workspace) {
            size_t w = mgi_backend_table[i]->plan_workspace(a);
            if (w > most) most = w;
        }
    return most;
}
