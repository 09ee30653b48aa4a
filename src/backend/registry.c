/*
 * registry.c - the backends this library was built with, one row each,
 * which the executor searches by device and the planner asks for the
 * workspace a plan lends (plan_workspace, plan_extra). It sits on the
 * backend floor so that both stand on it: the planner (src/rewrite) never
 * reaches up into the executor for a row. Adding a backend adds its row
 * here and its folder beside the others (docs/adding-a-backend.md):
 * nothing else in the executor or the planner changes.
 */
#include "module.h"

#include "gemm_split.h" /* the CUDA row's plan_extra */

#include <stddef.h>

extern const mg_backend_reg mgi_backend_cpu_reg; /* src/exec/cpu/ */

#if defined(MG_HAVE_CUDA) && defined(MG_CUDA_MODULE)
/* cuda/, built as libmemgrad-cuda.so and loaded on first use */
MGI_BACKEND_MODULE(cuda_row, MG_DEVICE_CUDA, "CUDA", 2 /* kDLCUDA */,
                   "libmemgrad-cuda.so", "mg_backend_cuda_module",
                   mgi_cuda_driver_probe, mg_gemm_split_step_bytes);
#elif defined(MG_HAVE_CUDA)
extern const mg_backend_reg mgi_backend_cuda_reg; /* cuda/, linked in */
#endif

const mg_backend_reg *const mgi_backend_table[] = {
    &mgi_backend_cpu_reg,
#if defined(MG_HAVE_CUDA) && defined(MG_CUDA_MODULE)
    &cuda_row,
#elif defined(MG_HAVE_CUDA)
    &mgi_backend_cuda_reg,
#endif
};

const int mgi_backend_table_size =
    (int)(sizeof mgi_backend_table / sizeof mgi_backend_table[0]);

const mg_backend_reg *mgi_backend_find(mg_device dev) {
    for (int i = 0; i < mgi_backend_table_size; i++)
        if (mgi_backend_table[i]->device == dev) return mgi_backend_table[i];
    return NULL;
}

bool mgi_backends_plan_workspace_op(mg_op op) {
    for (int i = 0; i < mgi_backend_table_size; i++) {
        const mg_backend_reg *r = mgi_backend_table[i];
        if (r->plan_workspace &&
            (!r->plan_workspace_op || r->plan_workspace_op(op)))
            return true;
    }
    return false;
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
