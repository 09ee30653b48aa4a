/*
 * plan.c - memgrad-plan: build an MLP, differentiate it under a checkpoint
 * policy and print the plan report (checkpoints, segments, recomputed
 * flops, predicted peak beside plain backprop's). Nothing is run.
 *
 *   usage: memgrad-plan [--policy none|memory|speed] [--depth N]
 *                       [--width W] [--batch B] [--dot FILE] [--dump]
 */
#include <memgrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: memgrad-plan [--policy none|memory|speed] "
                    "[--depth N] [--width W] [--batch B] [--dot FILE] "
                    "[--dump]\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "memgrad-plan: %s: %s\n", what, mg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int depth = 16, width = 256, batch = 64, dump = 0;
    const char *policy = "memory", *dot = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dump")) { dump = 1; continue; }
        if (!v) return usage();
        if (!strcmp(a, "--policy")) policy = v;
        else if (!strcmp(a, "--depth")) depth = atoi(v);
        else if (!strcmp(a, "--width")) width = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--dot")) dot = v;
        else return usage();
        i++;
    }
    mg_checkpoints ck = {.policy = MG_CKPT_NONE};
    if (!strcmp(policy, "memory")) ck.policy = MG_CKPT_MEMORY;
    else if (!strcmp(policy, "speed")) ck.policy = MG_CKPT_SPEED;
    else if (strcmp(policy, "none")) return usage();
    if (depth < 1 || width < 1 || batch < 1) return usage();

    mg_graph *g = mg_graph_new();
    int64_t xs[2] = {batch, width}, ws[2] = {width, width}, bs[1] = {width};
    mg_tensor h = mg_input(g, "x", MG_F32, 2, xs);
    mg_tensor target = mg_input(g, "target", MG_F32, 2, xs);
    mg_tensor *params = malloc(sizeof *params * 2 * (size_t)depth);
    mg_tensor *grads = malloc(sizeof *grads * (2 * (size_t)depth + 1));
    for (int l = 0; l < depth; l++) {
        params[2 * l] = mg_param(g, NULL, MG_F32, 2, ws);
        params[2 * l + 1] = mg_param(g, NULL, MG_F32, 1, bs);
        h = mg_add(g, mg_matmul(g, h, params[2 * l], 0, 0), params[2 * l + 1]);
        if (l < depth - 1) h = mg_relu(g, h);
    }
    mg_tensor loss = mg_mse(g, h, target);
    if (loss == MG_NO_TENSOR) return fail("building the MLP");
    if (mg_gradients(g, &loss, 1, NULL, params, 2 * depth, &ck, grads) != MG_OK)
        return fail("mg_gradients");
    grads[2 * depth] = loss;
    /* Parameters and gradients are caller memory, as in training: bind
     * them (the addresses are never used, nothing runs). */
    mg_binding *binds = calloc(4 * (size_t)depth + 1, sizeof *binds);
    static char placeholder[1];
    for (int i = 0; i < 2 * depth; i++) {
        binds[2 * i] = (mg_binding){params[i], placeholder};
        binds[2 * i + 1] = (mg_binding){grads[i], placeholder};
    }
    binds[4 * depth] = (mg_binding){loss, placeholder};
    mg_plan *plan = NULL;
    if (mg_plan_compile(g, grads, 2 * depth + 1, NULL, &plan) != MG_OK)
        return fail("mg_plan_compile");
    printf("MLP depth %d, width %d, batch %d, f32, policy %s\n", depth, width,
           batch, policy);
    if (mg_plan_report(plan, binds, 4 * depth + 1, stdout) != MG_OK)
        return fail("mg_plan_report");
    if (dump) mg_plan_dump(plan, stdout);
    if (dot) {
        FILE *f = fopen(dot, "w");
        if (!f || mg_graph_write_dot(g, f) != MG_OK) {
            fprintf(stderr, "memgrad-plan: cannot write %s\n", dot);
            return 1;
        }
        fclose(f);
    }
    mg_plan_free(plan);
    mg_graph_free(g);
    free(params);
    free(grads);
    free(binds);
    return 0;
}
