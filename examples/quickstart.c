#include <memgrad.h>
#include <stdio.h>
#include <stdlib.h>
#define TRY(call) \
    do { if ((call) != MG_OK) { fprintf(stderr, "%s\n", mg_last_error()); return 1; } } while (0)
enum { DEPTH = 32, BATCH = 256, WIDTH = 256 };

int main(void) {        /* an MLP: DEPTH x relu(h w), then cross-entropy */
    mg_graph *g = mg_graph_new();
    int64_t xs[2] = {BATCH, WIDTH}, ws[2] = {WIDTH, WIDTH}, ls[1] = {BATCH};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, xs), h = x, w[DEPTH], gw[DEPTH];
    mg_tensor labels = mg_input(g, "labels", MG_I32, 1, ls);
    for (int l = 0; l < DEPTH; l++)
        h = mg_relu(g, mg_matmul(g, h, w[l] = mg_param(g, "w", MG_F32, 2, ws), 0, 0));
    mg_tensor loss = mg_cross_entropy(g, h, labels), outs[DEPTH + 1] = {loss};
    mg_checkpoints memory = {.policy = MG_CKPT_MEMORY}; /* keep few, recompute */
    TRY(mg_gradients(g, &loss, 1, NULL, w, DEPTH, &memory, gw));

    static float xd[BATCH * WIDTH], wd[DEPTH][WIDTH * WIDTH], gd[DEPTH][WIDTH * WIDTH];
    static int32_t ld[BATCH];
    float lv;
    mg_binding b[3 + 2 * DEPTH] = {{x, xd}, {labels, ld}, {loss, &lv}};
    for (int i = 0; i < BATCH * WIDTH; i++) xd[i] = (float)rand() / RAND_MAX; /* your data */
    for (int i = 0; i < BATCH; i++) ld[i] = i % 10;
    for (int l = 0; l < DEPTH; l++) {
        for (int i = 0; i < WIDTH * WIDTH; i++) wd[l][i] = ((float)rand() / RAND_MAX - 0.5f) * 0.3f;
        b[3 + 2 * l] = (mg_binding){w[l], wd[l]}, b[4 + 2 * l] = (mg_binding){gw[l], gd[l]};
        outs[1 + l] = gw[l];
    }
    mg_plan *plan;
    mg_exec *ex;
    TRY(mg_plan_compile(g, outs, DEPTH + 1, NULL, &plan)); /* one schedule */
    TRY(mg_exec_new(NULL, &ex));                           /* CPU, caching pool */
    for (int step = 0; step < 5; step++) {                 /* SGD */
        TRY(mg_exec_run(ex, plan, b, 3 + 2 * DEPTH, step));
        for (int l = 0; l < DEPTH; l++)
            for (int i = 0; i < WIDTH * WIDTH; i++) wd[l][i] -= 0.01f * gd[l][i];
        printf("step %d: loss %.4f\n", step, lv);
    }
    mg_plan_summary s;
    mg_pool_stats st;
    TRY(mg_plan_summarize(plan, b, 3 + 2 * DEPTH, &s));
    TRY(mg_exec_pool_stats(ex, &st));
    printf("peak: predicted %zu bytes (plain backprop: %zu), measured %zu\n",
           s.predicted_peak, s.predicted_peak_without_recompute, st.peak_bytes_in_use);
    mg_exec_free(ex), mg_plan_free(plan), mg_graph_free(g);
    return s.predicted_peak == st.peak_bytes_in_use ? 0 : 1;
}
