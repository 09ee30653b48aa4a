/*
 * consumer.c - a program linked to the shared libmemgrad (or the shared
 * library the exported_symbols test links from the static one's objects)
 * that sees only include/: proof that hidden visibility left the public API
 * linkable and working. It differentiates y = sum(relu(x) * w) and checks
 * dy/dw = relu(x) on the CPU, then builds a reference model.
 */
#include <memgrad.h>
#include <memgrad_models.h>

#include <stdio.h>

static int fail(const char *what) {
    fprintf(stderr, "FAIL: %s: %s\n", what, mg_last_error());
    return 1;
}

int main(void) {
    mg_graph *g = mg_graph_new();
    if (!g) return fail("mg_graph_new");
    const int64_t shape[1] = {4};
    mg_tensor x = mg_input(g, "x", MG_F32, 1, shape);
    mg_tensor w = mg_param(g, "w", MG_F32, 1, shape);
    mg_tensor y = mg_sum(g, mg_mul(g, mg_relu(g, x), w), 0, NULL, 0);
    mg_tensor gw = MG_NO_TENSOR;
    if (y == MG_NO_TENSOR || mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &gw))
        return fail("building the graph");

    float xv[4] = {-1, 2, -3, 4}, wv[4] = {1, 1, 1, 1}, gv[4] = {0};
    mg_binding b[3] = {{x, xv}, {w, wv}, {gw, gv}};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    int rc = 0;
    if (mg_plan_compile(g, &gw, 1, NULL, &p) != MG_OK ||
        mg_exec_new(NULL, &ex) != MG_OK || mg_exec_run(ex, p, b, 3, 0) != MG_OK)
        rc = fail("running the plan");
    for (int i = 0; rc == 0 && i < 4; i++)
        if (gv[i] != (xv[i] > 0 ? xv[i] : 0)) {
            fprintf(stderr, "FAIL: dy/dw[%d] = %g, want %g\n", i, gv[i],
                    xv[i] > 0 ? xv[i] : 0.0);
            rc = 1;
        }
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
    if (rc) return rc;

    mg_model *m = mg_model_mlp(1, 8, 2, 4, 3, 0.0, MG_F32, 1);
    if (!m) return fail("mg_model_mlp");
    printf("ok: %s model with %d parameters, gradient %g %g %g %g\n",
           mg_model_kind_name(m->kind), m->n_params, gv[0], gv[1], gv[2],
           gv[3]);
    mg_model_free(m);
    return 0;
}
