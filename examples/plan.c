/*
 * plan.c - memgrad-plan: build a model, differentiate it under a checkpoint
 * policy and print the plan report (checkpoints, segments, recomputed
 * flops, predicted peak beside plain backprop's). Nothing is run.
 *
 *   usage: memgrad-plan [--model mlp|resnet|unet|transformer]
 *                       [--policy none|memory|speed] [--depth N]
 *                       [--width W] [--batch B] [--dot FILE] [--dump]
 */
#include <memgrad.h>
#include <memgrad_models.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr,
            "usage: memgrad-plan [--model mlp|resnet|unet|transformer] "
            "[--policy none|memory|speed] [--depth N] [--width W] "
            "[--batch B] [--dot FILE] [--dump]\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "memgrad-plan: %s: %s\n", what, mg_last_error());
    return 1;
}

/* width is the MLP's units, the ResNet's and U-Net's channels, the
 * transformer's d_model. Images are 32x32, sequences 64 tokens. */
static mg_model *build(const char *model, int depth, int width, int batch) {
    if (!strcmp(model, "mlp"))
        return mg_model_mlp(depth, width, batch, width, 10, 0.0, MG_F32, 1);
    if (!strcmp(model, "resnet"))
        return mg_model_resnet(depth, width, batch, 32, 10, MG_F32, 1);
    if (!strcmp(model, "unet"))
        return mg_model_unet(depth, width, batch, 32, MG_F32, 1);
    if (!strcmp(model, "transformer"))
        return mg_model_transformer(depth, width, 4, 64, batch, 1000, 0.1, 1,
                                    MG_F32, 1);
    return NULL;
}

int main(int argc, char **argv) {
    int depth = 16, width = 64, batch = 32, dump = 0;
    const char *model = "mlp", *policy = "memory", *dot = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dump")) { dump = 1; continue; }
        if (!v) return usage();
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--policy")) policy = v;
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

    mg_model *m = build(model, depth, width, batch);
    if (!m) return mg_last_error()[0] ? fail("building the model") : usage();
    if (mg_model_gradients(m, &ck) != MG_OK) return fail("mg_gradients");
    /* Parameters and gradients are caller memory, as in training: bind
     * them (the addresses are never used, nothing runs). */
    int n = m->n_params;
    mg_tensor *outs = malloc(sizeof *outs * ((size_t)n + 1));
    mg_binding *binds = malloc(sizeof *binds * (2 * (size_t)n + 1));
    static char placeholder;
    for (int i = 0; i < n; i++) {
        outs[i] = m->grads[i];
        binds[2 * i] = (mg_binding){m->params[i], &placeholder};
        binds[2 * i + 1] = (mg_binding){m->grads[i], &placeholder};
    }
    outs[n] = m->loss;
    binds[2 * n] = (mg_binding){m->loss, &placeholder};
    mg_plan *plan = NULL;
    if (mg_plan_compile(m->g, outs, n + 1, NULL, &plan) != MG_OK)
        return fail("mg_plan_compile");
    printf("%s depth %d, width %d, batch %d, f32, policy %s\n", model, depth,
           width, batch, policy);
    if (mg_plan_report(plan, binds, 2 * n + 1, stdout) != MG_OK)
        return fail("mg_plan_report");
    if (dump) mg_plan_dump(plan, stdout);
    if (dot) {
        FILE *f = fopen(dot, "w");
        if (!f || mg_graph_write_dot(m->g, f) != MG_OK) {
            fprintf(stderr, "memgrad-plan: cannot write %s\n", dot);
            if (f) fclose(f);
            return 1;
        }
        fclose(f);
    }
    mg_plan_free(plan);
    mg_model_free(m);
    free(outs);
    free(binds);
    return 0;
}
