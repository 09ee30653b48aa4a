/* Builds a two-tensor graph through the installed memgrad.h and prints the
 * op name of the relu output; run.sh expects the line "relu". */
#include <memgrad.h>

#include <stdio.h>

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
    const char *op = mg_tensor_op_name(g, y);
    printf("%s\n", op != NULL ? op : "(null)");
    mg_graph_free(g);
    return 0;
}
