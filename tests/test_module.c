/*
 * test_module.c - backends built as modules are loaded only when asked
 * for. A program that trains on the CPU, and even asks for a CUDA executor
 * on a machine without a GPU, maps no cuBLAS, cuDNN or CUDA runtime: the
 * registry asks the driver (libcuda.so.1) whether a device exists before
 * it opens libmemgrad-cuda.so. Where a GPU is present, the CUDA executor
 * opens and the module is mapped. This test links nothing from CUDA.
 */
#include "helpers.h"

#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

/* The first line of /proc/self/maps naming one of the CUDA libraries, in
 * line (empty when none). */
static bool cuda_mapped(char *line, size_t len) {
    static const char *const libs[] = {"libcublas", "libcudnn", "libcudart",
                                       "libmemgrad-cuda"};
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    bool found = false;
    line[0] = 0;
    while (!found && fgets(line, (int)len, f))
        for (size_t i = 0; i < sizeof libs / sizeof *libs; i++)
            if (strstr(line, libs[i])) found = true;
    fclose(f);
    if (!found) line[0] = 0;
    return found;
}

static void train_on_cpu(void) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[] = {4, 3}, ws[] = {3, 2};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, xs);
    mg_tensor w = mg_param(g, "w", MG_F32, 2, ws);
    mg_tensor y = mg_sum(g, mg_tanh(g, mg_matmul(g, x, w, 0, 0)), 0, NULL, 0);
    mg_tensor gw;
    ck_assert(mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &gw) == MG_OK);
    mg_tensor outs[2] = {y, gw};
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, outs, 2, NULL, &p) == MG_OK);
    float hx[12] = {0}, hw[6] = {0}, hy, hgw[6];
    mg_binding b[] = {{x, hx}, {w, hw}, {y, &hy}, {gw, hgw}};
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, 4, 0) == MG_OK, "%s", mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}

START_TEST(test_cpu_work_maps_no_cuda) {
    char line[512];
    train_on_cpu();
    ck_assert_msg(!cuda_mapped(line, sizeof line),
                  "CPU work mapped a CUDA library: %s", line);
}
END_TEST

START_TEST(test_cuda_asked_without_gpu) {
    char line[512];
    mg_exec_options o = {.device = MG_DEVICE_CUDA};
    mg_exec *ex = NULL;
    mg_status s = mg_exec_new(&o, &ex);
    if (s == MG_OK) {
        printf("test_module: a CUDA device is present; the module is mapped "
               "(%s)\n",
               cuda_mapped(line, sizeof line) ? "yes" : "NO");
        mg_exec_free(ex);
        return;
    }
    ck_assert_int_eq(s, MG_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mg_last_error(), "CUDA"), "%s", mg_last_error());
#ifdef MG_CUDA_MODULE
    ck_assert_msg(!cuda_mapped(line, sizeof line),
                  "asking for CUDA without a GPU mapped: %s", line);
#endif
}
END_TEST

/* The registry's rows describe their devices: a DLPack device type and a
 * name, which the executor and dlpack.c read instead of testing devices. */
START_TEST(test_rows_have_properties) {
    for (int i = 0; i < mgi_backend_table_size; i++) {
        const mg_backend_reg *r = mgi_backend_table[i];
        ck_assert_ptr_nonnull(r->name);
        ck_assert_int_gt(r->dlpack_device, 0);
        ck_assert_ptr_eq(mgi_backend_find(r->device), r);
    }
    ck_assert_int_eq(mgi_backend_find(MG_DEVICE_CPU)->dlpack_device, 1);
    mg_exec_options o = {.device = (mg_device)77};
    mg_exec *ex = NULL;
    ck_assert_int_eq(mg_exec_new(&o, &ex), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "unknown device 77") &&
                      strstr(mg_last_error(), "CPU (0)"),
                  "%s", mg_last_error());
}
END_TEST

TH_MAIN("module", "module", 0, test_cpu_work_maps_no_cuda,
        test_cuda_asked_without_gpu, test_rows_have_properties)
