/* Builds a small graph through the installed memgrad.h, runs it on the CPU
 * (so that a static libmemgrad's executor, CPU backend and module loader
 * are linked, with everything they need), asks for a CUDA executor (which
 * must either open or refuse with a message naming CUDA), and prints the
 * op name of the relu output; run.sh expects the line "relu". */
#include <memgrad.h>

#include <stdio.h>
#include <string.h>

static int run_on_cpu(mg_graph *g, mg_tensor x, mg_tensor y) {
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    float hx[6] = {-1, 2, -3, 4, -5, 6}, hy[6];
    mg_binding b[2] = {{x, hx}, {y, hy}};
    if (mg_plan_compile(g, &y, 1, NULL, &p) != MG_OK ||
        mg_exec_new(NULL, &ex) != MG_OK ||
        mg_exec_run(ex, p, b, 2, 0) != MG_OK) {
        fprintf(stderr, "running on the CPU failed: %s\n", mg_last_error());
        mg_exec_free(ex);
        mg_plan_free(p);
        return 1;
    }
    mg_exec_free(ex);
    mg_plan_free(p);
    return hy[0] == 0 && hy[1] == 2 ? 0 : 1;
}

static int ask_for_cuda(void) {
    mg_exec_options o = {.device = MG_DEVICE_CUDA};
    mg_exec *ex = NULL;
    mg_status s = mg_exec_new(&o, &ex);
    if (s == MG_OK) {
        mg_exec_free(ex);
        return 0;
    }
    if (s != MG_ERR_UNSUPPORTED || !strstr(mg_last_error(), "CUDA")) {
        fprintf(stderr, "asking for CUDA: %s\n", mg_last_error());
        return 1;
    }
    return 0;
}

int main(void) {
    mg_graph *g = mg_graph_new();
    if (g == NULL) {
        fprintf(stderr, "mg_graph_new failed\n");
        return 1;
    }
    const int64_t shape[2] = {2, 3};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, shape);
    mg_tensor y = mg_relu(g, x);
    if (x == MG_NO_TENSOR || y == MG_NO_TENSOR) {
        fprintf(stderr, "building the graph failed: %s\n", mg_last_error());
        mg_graph_free(g);
        return 1;
    }
    if (run_on_cpu(g, x, y) || ask_for_cuda()) {
        mg_graph_free(g);
        return 1;
    }
    const char *op = mg_tensor_op_name(g, y);
    printf("%s\n", op != NULL ? op : "(null)");
    mg_graph_free(g);
    return 0;
}
