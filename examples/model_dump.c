/*
 * model_dump.c - memgrad-model_dump: build one of the reference models of
 * memgrad_models.h from a seed, run one training step (loss and every
 * parameter gradient, plain backprop) and write everything to a binary file
 * that tests/torch_crosscheck.py reads to redo the step in PyTorch.
 *
 *   usage: memgrad-model_dump mlp|resnet|unet|transformer|gpt OUT [--f64]
 *          [--size L,D,H,T,B,V]   (gpt: layers, d_model, heads, seq, batch,
 *                                  vocab instead of the small default)
 *
 * Each model has a small fixed configuration (written to the file); the
 * transformer is built without dropout, whose masks PyTorch cannot replay.
 *
 * File format (native byte order, which the reader assumes little-endian):
 * the 8 bytes "MGDUMP1\n", then records up to the end of the file, each
 *   u32 name length, the name, u32 dtype (0 f32, 1 f64, 2 i32),
 *   u32 ndim, ndim x i64 shape, the data (row-major).
 * Records: "config" (i32: kind, then the builder's integer arguments in
 * order), "input", "target", "loss", then "param/<name>" and "grad/<name>"
 * for every parameter in m->params order.
 */
#include <memgrad_models.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_record(FILE *f, const char *name, mg_dtype dt, int ndim,
                        const int64_t *shape, const void *data) {
    uint32_t len = (uint32_t)strlen(name), d = (uint32_t)dt,
             nd = (uint32_t)ndim;
    size_t n = mg_dtype_size(dt);
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return fwrite(&len, 4, 1, f) == 1 && fwrite(name, 1, len, f) == len &&
           fwrite(&d, 4, 1, f) == 1 && fwrite(&nd, 4, 1, f) == 1 &&
           (ndim == 0 || fwrite(shape, 8, (size_t)ndim, f) == (size_t)ndim) &&
           fwrite(data, 1, n, f) == n;
}

static int write_tensor(FILE *f, const char *name, const mg_graph *g,
                        mg_tensor t, const void *data) {
    int ndim = 0;
    int64_t shape[MG_MAX_DIMS];
    mg_dtype dt;
    if (mg_tensor_shape(g, t, &ndim, shape) != MG_OK ||
        mg_tensor_dtype(g, t, &dt) != MG_OK)
        return 0;
    return write_record(f, name, dt, ndim, shape, data);
}

static int fail(const char *what) {
    fprintf(stderr, "memgrad-model_dump: %s: %s\n", what, mg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    /* options after OUT: --f64, and for gpt --size L,D,H,T,B,V (layers,
     * d_model, heads, seq, batch, vocab) instead of the small default */
    mg_dtype dt = MG_F32;
    int size[6] = {0}, sized = 0, bad = argc < 3;
    for (int a = 3; a < argc && !bad; a++) {
        if (!strcmp(argv[a], "--f64")) dt = MG_F64;
        else if (!strcmp(argv[a], "--size") && a + 1 < argc) {
            sized = sscanf(argv[++a], "%d,%d,%d,%d,%d,%d", &size[0], &size[1],
                           &size[2], &size[3], &size[4], &size[5]) == 6;
            bad = !sized || strcmp(argv[1], "gpt") != 0;
        } else bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: memgrad-model_dump mlp|resnet|unet|"
                        "transformer|gpt OUT [--f64] "
                        "[--size L,D,H,T,B,V (gpt)]\n");
        return 2;
    }
    const uint64_t seed = 20240601;
    int32_t cfg[9];
    int ncfg = 0;
    mg_model *m = NULL;
    const char *kind = argv[1];
    if (!strcmp(kind, "mlp")) {
        /* depth width batch in_features classes */
        int32_t c[] = {MG_MODEL_MLP, 3, 24, 8, 12, 5};
        memcpy(cfg, c, sizeof c), ncfg = 6;
        m = mg_model_mlp(c[1], c[2], c[3], c[4], c[5], 0.0, dt, seed);
    } else if (!strcmp(kind, "resnet")) {
        /* depth width batch image classes */
        int32_t c[] = {MG_MODEL_RESNET, 4, 4, 4, 8, 5};
        memcpy(cfg, c, sizeof c), ncfg = 6;
        m = mg_model_resnet(c[1], c[2], c[3], c[4], c[5], dt, seed);
    } else if (!strcmp(kind, "unet")) {
        /* depth channels batch image */
        int32_t c[] = {MG_MODEL_UNET, 2, 4, 2, 8};
        memcpy(cfg, c, sizeof c), ncfg = 5;
        m = mg_model_unet(c[1], c[2], c[3], c[4], dt, seed);
    } else if (!strcmp(kind, "transformer")) {
        /* layers d_model heads seq batch vocab causal */
        int32_t c[] = {MG_MODEL_TRANSFORMER, 2, 16, 4, 6, 3, 13, 1};
        memcpy(cfg, c, sizeof c), ncfg = 8;
        m = mg_model_transformer(c[1], c[2], c[3], c[4], c[5], c[6], 0.0, c[7],
                                 dt, seed);
    } else if (!strcmp(kind, "gpt")) {
        /* layers d_model heads seq batch vocab (causal, tied head) */
        int32_t c[] = {MG_MODEL_GPT, 2, 16, 4, 6, 3, 13};
        for (int k = 0; sized && k < 6; k++) c[k + 1] = size[k];
        memcpy(cfg, c, sizeof c), ncfg = 7;
        m = mg_model_gpt(c[1], c[2], c[3], c[4], c[5], c[6], 0.0, dt, seed);
    } else {
        fprintf(stderr, "memgrad-model_dump: unknown model '%s'\n", kind);
        return 2;
    }
    if (!m) return fail("building the model");
    if (mg_model_gradients(m, NULL) != MG_OK) return fail("mg_model_gradients");

    const int np = m->n_params;
    void *input = malloc(mg_tensor_nbytes(m->g, m->input));
    void *target = malloc(mg_tensor_nbytes(m->g, m->target));
    void **params = calloc((size_t)np, sizeof *params);
    void **grads = calloc((size_t)np, sizeof *grads);
    mg_binding *b = calloc((size_t)(2 * np + 3), sizeof *b);
    mg_tensor *outs = calloc((size_t)(np + 1), sizeof *outs);
    double loss = 0;
    if (!input || !target || !params || !grads || !b || !outs) {
        fprintf(stderr, "memgrad-model_dump: out of memory\n");
        return 1;
    }
    int nb = 0;
    b[nb++] = (mg_binding){m->input, input};
    b[nb++] = (mg_binding){m->target, target};
    b[nb++] = (mg_binding){m->loss, &loss};
    outs[0] = m->loss;
    for (int i = 0; i < np; i++) {
        size_t bytes = mg_tensor_nbytes(m->g, m->params[i]);
        params[i] = malloc(bytes);
        grads[i] = malloc(bytes);
        if (!params[i] || !grads[i]) {
            fprintf(stderr, "memgrad-model_dump: out of memory\n");
            return 1;
        }
        b[nb++] = (mg_binding){m->params[i], params[i]};
        b[nb++] = (mg_binding){m->grads[i], grads[i]};
        outs[i + 1] = m->grads[i];
    }
    if (mg_model_init_params(m, seed, params) != MG_OK)
        return fail("mg_model_init_params");
    if (mg_model_init_data(m, seed + 1, input, target) != MG_OK)
        return fail("mg_model_init_data");
    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    if (mg_plan_compile(m->g, outs, np + 1, NULL, &plan) != MG_OK)
        return fail("mg_plan_compile");
    if (mg_exec_new(NULL, &ex) != MG_OK) return fail("mg_exec_new");
    if (mg_exec_run(ex, plan, b, nb, 0) != MG_OK) return fail("mg_exec_run");

    FILE *f = fopen(argv[2], "wb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    int64_t ncfg64 = ncfg;
    int ok = fwrite("MGDUMP1\n", 1, 8, f) == 8 &&
             write_record(f, "config", MG_I32, 1, &ncfg64, cfg) &&
             write_tensor(f, "input", m->g, m->input, input) &&
             write_tensor(f, "target", m->g, m->target, target) &&
             write_tensor(f, "loss", m->g, m->loss, &loss);
    char name[256];
    for (int i = 0; ok && i < np; i++) {
        const char *pn = mg_tensor_name(m->g, m->params[i]);
        snprintf(name, sizeof name, "param/%s", pn);
        ok = write_tensor(f, name, m->g, m->params[i], params[i]);
        snprintf(name, sizeof name, "grad/%s", pn);
        ok = ok && write_tensor(f, name, m->g, m->grads[i], grads[i]);
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "memgrad-model_dump: writing %s failed\n", argv[2]);
        return 1;
    }
    double lv = loss;
    if (dt == MG_F32) {
        float lf;
        memcpy(&lf, &loss, sizeof lf);
        lv = lf;
    }
    printf("%s: loss %.9g, %d parameters -> %s\n", kind, lv, np, argv[2]);

    mg_exec_free(ex);
    mg_plan_free(plan);
    for (int i = 0; i < np; i++) {
        free(params[i]);
        free(grads[i]);
    }
    free(params);
    free(grads);
    free(b);
    free(outs);
    free(input);
    free(target);
    mg_model_free(m);
    return 0;
}
