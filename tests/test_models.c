/*
 * test_models.c - the reference model builders of memgrad_models.h (MLP,
 * pre-activation ResNet, U-Net, transformer, GPT): each builds, trains (a few
 * f32 SGD steps lower the loss), has a whole-model gradient that matches
 * float64 central differences on a tiny configuration, and under every
 * checkpoint policy gives plain backprop's loss and gradients bit for bit,
 * with the pool's measured peak equal to the plan's prediction and the
 * memory policy never above plain backprop. Also: seeded initialisation is
 * reproducible, and bad arguments are named in the error.
 */
#include "helpers.h"
#include "memgrad_models.h"

#include "common/half.h"

/* ------------------------------------------------------------------ configs */

/* tiny: for finite differences in f64; else small enough for ASan. */
static mg_model *make(mg_model_kind kind, int tiny, mg_dtype dt) {
    mg_model *m = NULL;
    switch (kind) {
    case MG_MODEL_MLP:
        m = tiny ? mg_model_mlp(2, 5, 3, 4, 3, 0.2, dt, 7)
                 : mg_model_mlp(16, 32, 8, 16, 5, 0.1, dt, 7);
        break;
    case MG_MODEL_RESNET:
        m = tiny ? mg_model_resnet(3, 2, 3, 5, 3, dt, 7)
                 : mg_model_resnet(6, 4, 4, 8, 5, dt, 7);
        break;
    case MG_MODEL_UNET:
        m = tiny ? mg_model_unet(2, 2, 2, 4, dt, 7)
                 : mg_model_unet(3, 4, 2, 16, dt, 7);
        break;
    case MG_MODEL_TRANSFORMER:
        m = tiny ? mg_model_transformer(2, 4, 2, 3, 2, 5, 0.2, 0, dt, 7)
                 : mg_model_transformer(4, 16, 2, 8, 2, 11, 0.1, 1, dt, 7);
        break;
    case MG_MODEL_GPT:
        m = tiny ? mg_model_gpt(2, 4, 2, 3, 2, 5, 0.2, dt, 7)
                 : mg_model_gpt(4, 16, 2, 8, 2, 11, 0.1, dt, 7);
        break;
    }
    ck_assert_msg(m != NULL, "building %s failed: %s", mg_model_kind_name(kind),
                  mg_last_error());
    return m;
}

/* ------------------------------------------------------------------ data */

/* Caller memory for one model: input, target, parameters, gradients. */
typedef struct mdata {
    void *input, *target;
    void **params, **grads;
    size_t *pbytes;
    double loss; /* an f32 loss lives in the first 4 bytes */
} mdata;

static void md_init(mdata *d, const mg_model *m, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->input = malloc(mg_tensor_nbytes(m->g, m->input));
    d->target = malloc(mg_tensor_nbytes(m->g, m->target));
    d->params = calloc((size_t)m->n_params, sizeof *d->params);
    d->grads = calloc((size_t)m->n_params, sizeof *d->grads);
    d->pbytes = calloc((size_t)m->n_params, sizeof *d->pbytes);
    ck_assert(d->input && d->target && d->params && d->grads && d->pbytes);
    for (int i = 0; i < m->n_params; i++) {
        d->pbytes[i] = mg_tensor_nbytes(m->g, m->params[i]);
        d->params[i] = malloc(d->pbytes[i]);
        d->grads[i] = malloc(d->pbytes[i]);
        ck_assert(d->params[i] && d->grads[i]);
    }
    ck_assert_msg(mg_model_init_params(m, seed, d->params) == MG_OK, "%s",
                  mg_last_error());
    ck_assert_msg(mg_model_init_data(m, seed + 1, d->input, d->target) == MG_OK,
                  "%s", mg_last_error());
}

static void md_free(mdata *d, const mg_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        free(d->params[i]);
        free(d->grads[i]);
    }
    free(d->params);
    free(d->grads);
    free(d->pbytes);
    free(d->input);
    free(d->target);
}

static double md_loss(const mdata *d, const mg_model *m) {
    if (m->dtype == MG_F64) return d->loss;
    float f;
    memcpy(&f, &d->loss, sizeof f);
    return (double)f;
}

/* Bindings for input, target, params, and (with_grads) loss and grads as
 * outputs, and the matching output list. Returns the binding count. */
static int md_binds(const mdata *d, const mg_model *m, int with_grads,
                    mg_binding *b, mg_tensor *outs, int *n_outs) {
    int nb = 0, no = 0;
    b[nb++] = (mg_binding){m->input, d->input};
    b[nb++] = (mg_binding){m->target, d->target};
    for (int i = 0; i < m->n_params; i++)
        b[nb++] = (mg_binding){m->params[i], d->params[i]};
    b[nb++] = (mg_binding){m->loss, (void *)&d->loss};
    outs[no++] = m->loss;
    if (with_grads)
        for (int i = 0; i < m->n_params; i++) {
            b[nb++] = (mg_binding){m->grads[i], d->grads[i]};
            outs[no++] = m->grads[i];
        }
    *n_outs = no;
    return nb;
}

typedef struct step_out {
    size_t peak, predicted;
} step_out;

/* One training step: loss and every gradient into d. */
static void md_step(mdata *d, const mg_model *m, uint64_t run_seed,
                    step_out *o) {
    mg_binding *b = calloc((size_t)(2 * m->n_params + 4), sizeof *b);
    mg_tensor *outs = calloc((size_t)(m->n_params + 1), sizeof *outs);
    ck_assert(b && outs);
    int n_outs = 0, nb = md_binds(d, m, 1, b, outs, &n_outs);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, n_outs, NULL, &p) == MG_OK,
                  "%s: compile: %s", mg_model_kind_name(m->kind),
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_status st = mg_exec_run(ex, p, b, nb, run_seed);
    ck_assert_msg(st == MG_OK, "%s: run: %s: %s", mg_model_kind_name(m->kind),
                  mg_status_str(st), mg_last_error());
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    o->peak = ps.peak_bytes_in_use;
    o->predicted = mg_plan_predicted_peak(p, b, nb);
    mg_exec_free(ex);
    mg_plan_free(p);
    free(b);
    free(outs);
}

/* ------------------------------------------------------------------ SGD */

static void check_sgd(mg_model_kind kind, double lr, int steps) {
    mg_model *m = make(kind, 0, MG_F32);
    ck_assert_msg(mg_model_gradients(m, NULL) == MG_OK, "%s", mg_last_error());
    mdata d;
    md_init(&d, m, 21);
    mg_binding *b = calloc((size_t)(2 * m->n_params + 4), sizeof *b);
    mg_tensor *outs = calloc((size_t)(m->n_params + 1), sizeof *outs);
    ck_assert(b && outs);
    int n_outs = 0, nb = md_binds(&d, m, 1, b, outs, &n_outs);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, n_outs, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    double first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        mg_status st = mg_exec_run(ex, p, b, nb, 3);
        ck_assert_msg(st == MG_OK, "%s step %d: %s", mg_model_kind_name(kind),
                      s, mg_last_error());
        double loss = md_loss(&d, m);
        ck_assert_msg(isfinite(loss), "%s step %d: loss %g",
                      mg_model_kind_name(kind), s, loss);
        if (s == 0) first = loss;
        last = loss;
        for (int i = 0; i < m->n_params; i++) {
            float *w = d.params[i];
            const float *gw = d.grads[i];
            for (size_t k = 0; k < d.pbytes[i] / sizeof(float); k++)
                w[k] -= (float)lr * gw[k];
        }
    }
    ck_assert_msg(last < 0.9 * first, "%s: loss went from %g to %g",
                  mg_model_kind_name(kind), first, last);
    mg_exec_free(ex);
    mg_plan_free(p);
    free(b);
    free(outs);
    md_free(&d, m);
    mg_model_free(m);
}

START_TEST(test_sgd_mlp) { check_sgd(MG_MODEL_MLP, 0.05, 8); }
END_TEST
START_TEST(test_sgd_resnet) { check_sgd(MG_MODEL_RESNET, 0.05, 8); }
END_TEST
START_TEST(test_sgd_unet) { check_sgd(MG_MODEL_UNET, 0.05, 8); }
END_TEST
START_TEST(test_sgd_transformer) { check_sgd(MG_MODEL_TRANSFORMER, 0.1, 8); }
END_TEST
START_TEST(test_sgd_gpt) { check_sgd(MG_MODEL_GPT, 0.1, 8); }
END_TEST

/* ------------------------------------------------------------------ finite
 * differences: every parameter of a tiny f64 model (up to FD_PER_PARAM
 * elements of each, spread evenly) against central differences of the
 * loss. Dropout masks depend only on the run seed, which stays fixed. */

#define FD_PER_PARAM 64
#define FD_H 1e-6

static void check_fd(mg_model_kind kind) {
    mg_model *m = make(kind, 1, MG_F64);
    ck_assert_msg(mg_model_gradients(m, NULL) == MG_OK, "%s", mg_last_error());
    mdata d;
    md_init(&d, m, 5);
    step_out so;
    md_step(&d, m, 17, &so);
    const double loss0 = d.loss;

    mg_binding *b = calloc((size_t)(2 * m->n_params + 4), sizeof *b);
    mg_tensor outs[1];
    ck_assert(b);
    int n_outs = 0, nb = md_binds(&d, m, 0, b, outs, &n_outs);
    mg_plan_options fo = {.no_grad = 1};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, n_outs, &fo, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert(mg_exec_run(ex, p, b, nb, 17) == MG_OK);
    ck_assert_msg(d.loss == loss0,
                  "%s: forward-only loss %.17g differs from "
                  "the training step's %.17g",
                  mg_model_kind_name(kind), d.loss, loss0);
    int checked = 0;
    for (int i = 0; i < m->n_params; i++) {
        double *w = d.params[i];
        const double *an = d.grads[i];
        int64_t n = (int64_t)(d.pbytes[i] / sizeof(double));
        int64_t cnt = n < FD_PER_PARAM ? n : FD_PER_PARAM;
        for (int64_t j = 0; j < cnt; j++) {
            int64_t k = j * n / cnt;
            double v = w[k];
            w[k] = v + FD_H;
            ck_assert(mg_exec_run(ex, p, b, nb, 17) == MG_OK);
            double fp = d.loss;
            w[k] = v - FD_H;
            ck_assert(mg_exec_run(ex, p, b, nb, 17) == MG_OK);
            double fm = d.loss;
            w[k] = v;
            double num = (fp - fm) / (2 * FD_H);
            ck_assert_msg(fabs(an[k] - num) <= 1e-6 + 1e-5 * fabs(num),
                          "%s: d loss / d %s[%lld]: analytic %.12g, numeric "
                          "%.12g",
                          mg_model_kind_name(kind),
                          mg_tensor_name(m->g, m->params[i]), (long long)k,
                          an[k], num);
            checked++;
        }
    }
    ck_assert(checked > 0);
    mg_exec_free(ex);
    mg_plan_free(p);
    free(b);
    md_free(&d, m);
    mg_model_free(m);
}

START_TEST(test_fd_mlp) { check_fd(MG_MODEL_MLP); }
END_TEST
START_TEST(test_fd_resnet) { check_fd(MG_MODEL_RESNET); }
END_TEST
START_TEST(test_fd_unet) { check_fd(MG_MODEL_UNET); }
END_TEST
START_TEST(test_fd_transformer) { check_fd(MG_MODEL_TRANSFORMER); }
END_TEST
START_TEST(test_fd_gpt) { check_fd(MG_MODEL_GPT); }
END_TEST

/* ------------------------------------------------------------------ policies
 * Each policy on a fresh build of the same model against policy none's, in
 * f32 and f64: same loss and gradients bit for bit (dropout included),
 * measured peak == predicted, the memory policy's peak at most plain
 * backprop's (and on the U-Net, checkpoints found and a lower predicted
 * peak), speed recomputes no matmul or conv2d, collection keeps exactly the
 * listed block outputs. */

static void check_policies_dt(mg_model_kind kind, mg_dtype dt) {
    char kn[32];
    snprintf(kn, sizeof kn, "%s %s", mg_model_kind_name(kind),
             mg_dtype_name(dt));
    const size_t es = mg_dtype_size(dt);
    mg_model *ref = make(kind, 0, dt);
    ck_assert_msg(mg_model_gradients(ref, NULL) == MG_OK, "%s: %s", kn,
                  mg_last_error());
    mdata rd;
    md_init(&rd, ref, 11);
    step_out ro;
    md_step(&rd, ref, 5, &ro);
    ck_assert_msg(ro.peak == ro.predicted,
                  "%s, policy none: peak %zu, "
                  "predicted %zu",
                  kn, ro.peak, ro.predicted);
    const mg_ckpt_policy pols[3] = {MG_CKPT_MEMORY, MG_CKPT_SPEED,
                                    MG_CKPT_COLLECTION};
    for (int k = 0; k < 3; k++) {
        const char *pn = mg_ckpt_policy_name(pols[k]);
        mg_model *m = make(kind, 0, dt);
        mg_checkpoints c = {.policy = pols[k]};
        mg_tensor listed[4];
        int n_listed = 0;
        if (pols[k] == MG_CKPT_COLLECTION) {
            for (int i = 0; i < m->n_blocks && n_listed < 3; i += 2)
                listed[n_listed++] = m->blocks[i];
            ck_assert(n_listed > 0);
            c.tensors = listed;
            c.n_tensors = n_listed;
        }
        ck_assert_msg(mg_model_gradients(m, &c) == MG_OK, "%s, policy %s: %s",
                      kn, pn, mg_last_error());
        mdata d;
        md_init(&d, m, 11);
        step_out so;
        md_step(&d, m, 5, &so);
        ck_assert_msg(memcmp(&d.loss, &rd.loss, es) == 0,
                      "%s, policy %s: loss %.9g differs from plain backprop's "
                      "%.9g",
                      kn, pn, md_loss(&d, m), md_loss(&rd, ref));
        for (int i = 0; i < m->n_params; i++) {
            if (memcmp(d.grads[i], rd.grads[i], d.pbytes[i]) == 0) continue;
            const char *a = d.grads[i], *e = rd.grads[i];
            size_t j = 0;
            const size_t n = d.pbytes[i] / es;
            while (j + 1 < n && !memcmp(a + j * es, e + j * es, es)) j++;
            double va, ve;
            if (dt == MG_F64) {
                memcpy(&va, a + j * es, es);
                memcpy(&ve, e + j * es, es);
            } else if (es == 2) { /* bf16 or f16 */
                uint16_t ha, he;
                memcpy(&ha, a + j * es, es);
                memcpy(&he, e + j * es, es);
                va = dt == MG_BF16 ? mg_f32_from_bf16(ha) : mg_f32_from_f16(ha);
                ve = dt == MG_BF16 ? mg_f32_from_bf16(he) : mg_f32_from_f16(he);
            } else {
                float fa, fe;
                memcpy(&fa, a + j * es, es);
                memcpy(&fe, e + j * es, es);
                va = fa, ve = fe;
            }
            ck_abort_msg("%s, policy %s: gradient of %s (param %d) differs "
                         "from plain backprop's at [%zu]: %.17g vs %.17g",
                         kn, pn, mg_tensor_name(m->g, m->params[i]), i, j, va,
                         ve);
        }
        ck_assert_msg(so.peak == so.predicted,
                      "%s, policy %s: measured peak %zu, predicted %zu", kn, pn,
                      so.peak, so.predicted);
        int n_ck = mg_graph_checkpoints(m->g, NULL, 0);
        if (pols[k] == MG_CKPT_MEMORY) {
            ck_assert_msg(so.peak <= ro.peak,
                          "%s, policy memory: peak %zu > plain backprop's %zu",
                          kn, so.peak, ro.peak);
            if (kind == MG_MODEL_UNET) {
                ck_assert_msg(n_ck > 0, "%s, policy memory: no checkpoints",
                              kn);
                ck_assert_msg(so.predicted < ro.predicted,
                              "%s, policy memory: predicted peak %zu not "
                              "below plain backprop's %zu",
                              kn, so.predicted, ro.predicted);
            }
        }
        if (pols[k] == MG_CKPT_COLLECTION) {
            mg_tensor chosen[4];
            ck_assert_msg(n_ck == n_listed,
                          "%s, policy collection: %d checkpoints, %d listed",
                          kn, n_ck, n_listed);
            mg_graph_checkpoints(m->g, chosen, 4);
            for (int i = 0; i < n_listed; i++)
                ck_assert_int_eq(chosen[i], listed[i]);
        }
        if (pols[k] == MG_CKPT_SPEED) /* no matmul or conv is recomputed */
            for (mg_tensor t = 0; t < mg_graph_num_tensors(m->g); t++) {
                if (!mg_tensor_is_recompute(m->g, t)) continue;
                const char *op = mg_tensor_op_name(m->g, t);
                ck_assert_msg(strcmp(op, "matmul") && strcmp(op, "conv2d"),
                              "%s, policy speed: recomputes %s #%d", kn, op,
                              (int)t);
            }
        md_free(&d, m);
        mg_model_free(m);
    }
    md_free(&rd, ref);
    mg_model_free(ref);
}

static void check_policies(mg_model_kind kind) {
    check_policies_dt(kind, MG_F32);
    check_policies_dt(kind, MG_F64);
}

START_TEST(test_policies_mlp) { check_policies(MG_MODEL_MLP); }
END_TEST
START_TEST(test_policies_resnet) { check_policies(MG_MODEL_RESNET); }
END_TEST
START_TEST(test_policies_unet) { check_policies(MG_MODEL_UNET); }
END_TEST
START_TEST(test_policies_transformer) { check_policies(MG_MODEL_TRANSFORMER); }
END_TEST
START_TEST(test_policies_gpt) { check_policies(MG_MODEL_GPT); }
END_TEST

/* ------------------------------------------------------------------ init */

/* Same seed, same weights (also across separately built models); another
 * seed, other weights; norm scales start at 1. */
START_TEST(test_init_is_seeded) {
    for (int kind = 0; kind < 4; kind++) {
        mg_model *a = make((mg_model_kind)kind, 1, MG_F32);
        mg_model *b = make((mg_model_kind)kind, 1, MG_F32);
        ck_assert_int_eq(a->n_params, b->n_params);
        ck_assert(a->n_params > 0 && a->n_blocks > 0);
        mdata da, db, dc;
        md_init(&da, a, 99);
        md_init(&db, b, 99);
        md_init(&dc, b, 100);
        int differs = 0;
        for (int i = 0; i < a->n_params; i++) {
            ck_assert_str_eq(mg_tensor_name(a->g, a->params[i]),
                             mg_tensor_name(b->g, b->params[i]));
            ck_assert_msg(memcmp(da.params[i], db.params[i], da.pbytes[i]) == 0,
                          "%s: %s differs for the same seed",
                          mg_model_kind_name(a->kind),
                          mg_tensor_name(a->g, a->params[i]));
            differs |= memcmp(da.params[i], dc.params[i], da.pbytes[i]) != 0;
            if (strstr(mg_tensor_name(a->g, a->params[i]), ".gamma"))
                ck_assert(((float *)da.params[i])[0] == 1.0f);
        }
        ck_assert_msg(differs, "%s: seed 100 gives seed 99's weights",
                      mg_model_kind_name(a->kind));
        ck_assert(
            memcmp(da.input, db.input, mg_tensor_nbytes(a->g, a->input)) == 0);
        ck_assert(memcmp(da.target, db.target,
                         mg_tensor_nbytes(a->g, a->target)) == 0);
        md_free(&da, a);
        md_free(&db, b);
        md_free(&dc, b);
        mg_model_free(a);
        mg_model_free(b);
    }
}
END_TEST

/* ------------------------------------------------------------------ errors */

#define EXPECT_NULL(call, needle)                                              \
    do {                                                                       \
        mg_clear_error();                                                      \
        mg_model *m_ = (call);                                                 \
        ck_assert_msg(m_ == NULL, "%s did not fail", #call);                   \
        ck_assert_msg(strstr(mg_last_error(), (needle)) != NULL,               \
                      "%s: '%s' lacks '%s'", #call, mg_last_error(),           \
                      (needle));                                               \
    } while (0)

START_TEST(test_bad_arguments) {
    EXPECT_NULL(mg_model_mlp(0, 8, 2, 3, 2, 0.0, MG_F32, 1), "depth = 0");
    EXPECT_NULL(mg_model_mlp(2, 8, 2, 3, 2, 1.0, MG_F32, 1), "dropout");
    EXPECT_NULL(mg_model_mlp(2, 8, 2, 3, 2, 0.0, MG_I32, 1), "dtype");
    EXPECT_NULL(mg_model_resnet(0, 4, 2, 8, 3, MG_F32, 1), "depth = 0");
    EXPECT_NULL(mg_model_resnet(2, 4, -1, 8, 3, MG_F32, 1), "batch = -1");
    EXPECT_NULL(mg_model_resnet(2, 4, 2, 8, 0, MG_F32, 1), "classes = 0");
    EXPECT_NULL(mg_model_unet(0, 4, 2, 8, MG_F32, 1), "depth = 0");
    EXPECT_NULL(mg_model_unet(2, 4, 2, 6, MG_F32, 1), "image = 6");
    EXPECT_NULL(mg_model_transformer(0, 8, 2, 4, 2, 5, 0, 0, MG_F32, 1),
                "layers = 0");
    EXPECT_NULL(mg_model_transformer(1, 8, 3, 4, 2, 5, 0, 0, MG_F32, 1),
                "heads = 3 must divide d_model = 8");
    EXPECT_NULL(mg_model_transformer(1, 8, 2, 4, 2, 0, 0, 0, MG_F32, 1),
                "vocab = 0");
    EXPECT_NULL(mg_model_gpt(1, 8, 3, 4, 2, 5, 0, MG_F32, 1),
                "mg_model_gpt: heads = 3 must divide d_model = 8");
    EXPECT_NULL(mg_model_gpt(1, 8, 2, 0, 2, 5, 0, MG_F32, 1), "seq = 0");

    mg_model *m = make(MG_MODEL_MLP, 1, MG_F32);
    ck_assert_int_eq(mg_model_init_params(m, 1, NULL), MG_ERR_INVALID_ARG);
    ck_assert(strstr(mg_last_error(), "param_data"));
    void **bufs = calloc((size_t)m->n_params, sizeof *bufs);
    ck_assert_int_eq(mg_model_init_params(m, 1, bufs), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "param_data[0] (fc0.w)"), "%s",
                  mg_last_error());
    free(bufs);
    ck_assert_int_eq(mg_model_init_params(NULL, 1, NULL), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_model_init_data(NULL, 1, NULL, NULL),
                     MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_model_gradients(NULL, NULL), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_model_gradients(m, NULL), MG_OK);
    ck_assert_int_eq(mg_model_gradients(m, NULL), MG_ERR_INVALID_ARG);
    ck_assert(strstr(mg_last_error(), "already"));
    mg_model_free(m);
    mg_model_free(NULL);
    ck_assert_str_eq(mg_model_kind_name(MG_MODEL_UNET), "unet");
    ck_assert_str_eq(mg_model_kind_name(MG_MODEL_GPT), "gpt");
    /* the tied head: no head parameters, the embedding is read twice */
    m = make(MG_MODEL_GPT, 1, MG_F32);
    for (int i = 0; i < m->n_params; i++)
        ck_assert_msg(strncmp(mg_tensor_name(m->g, m->params[i]), "head", 4),
                      "gpt has a parameter %s",
                      mg_tensor_name(m->g, m->params[i]));
    ck_assert_str_eq(mg_tensor_op_name(m->g, m->output), "matmul");
    ck_assert_str_eq(mg_tensor_name(m->g, mg_tensor_input(m->g, m->output, 1)),
                     "tok_emb");
    mg_model_free(m);
}
END_TEST

/* The same in bfloat16 and float16 (issue 47): every op widened to float32
 * on the CPU and rounded once, recomputed ops bit for bit. */
static void check_policies_half(mg_model_kind kind) {
    check_policies_dt(kind, MG_BF16);
    check_policies_dt(kind, MG_F16);
}
START_TEST(test_policies_half_mlp) { check_policies_half(MG_MODEL_MLP); }
END_TEST
START_TEST(test_policies_half_resnet) { check_policies_half(MG_MODEL_RESNET); }
END_TEST
START_TEST(test_policies_half_gpt) { check_policies_half(MG_MODEL_GPT); }
END_TEST

TH_MAIN("models", "models", 300, test_bad_arguments, test_init_is_seeded,
        test_sgd_mlp, test_sgd_resnet, test_sgd_unet, test_sgd_transformer,
        test_fd_mlp, test_fd_resnet, test_fd_unet, test_fd_transformer,
        test_policies_mlp, test_policies_resnet, test_policies_unet,
        test_policies_transformer, test_sgd_gpt, test_fd_gpt, test_policies_gpt,
        test_policies_half_mlp, test_policies_half_resnet,
        test_policies_half_gpt)
