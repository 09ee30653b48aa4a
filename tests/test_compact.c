/*
 * test_compact.c - the compact saved forms of issue 29 item 2
 * (mg_checkpoints.compact, src/rewrite/compact.c): a relu's sign kept as 1
 * bit per element, a max pool's argmax as 1 byte per output.
 *
 * - the gradients are the same bits with and without compaction, under
 *   every policy, on the MLP (relu, dropout), the ResNet, the U-Net (2x2
 *   max pools) and a net with overlapping 3x3 max pools and leaky relu;
 * - the pool's measured peak equals the prediction for compacted plans,
 *   and compaction lowers policy none's peak where a tensor is read only
 *   for its sign or argmax;
 * - the compact readers' gradients match central finite differences in
 *   float64;
 * - the rules for softmax, log_softmax, sigmoid, tanh, relu and dropout
 *   read no input of their op (they read the output, or replay the mask);
 * - what the pass must leave whole it leaves whole (a window of over 256
 *   elements, a tensor a conv reads), and a bad flag is refused.
 */
#include "helpers.h"
#include "helpers/model_step.h"
#include "memgrad_models.h"

#include <math.h>

/* ---- one training step of a model --------------------------------------- */

typedef struct step_out {
    float loss;
    int n;
    void **grads;
    size_t *bytes;
    th_step_data d; /* the step's memory; grads point into it */
    size_t predicted, measured;
    int n_packs; /* pack_sign and max_pool2d_argmax nodes */
} step_out;

static int count_packs(const mg_graph *g) {
    int n = 0;
    for (int32_t t = 0; t < mg_graph_num_tensors(g); t++) {
        const char *op = mg_tensor_op_name(g, t);
        const int by_name = strcmp(op, "pack_sign") == 0 ||
                            strcmp(op, "max_pool2d_argmax") == 0;
        /* the public test says the same of every tensor */
        ck_assert_int_eq(mg_tensor_is_pack(g, t) != 0, by_name);
        n += by_name;
    }
    /* and no for what is no tensor */
    ck_assert_int_eq(mg_tensor_is_pack(g, -1), 0);
    ck_assert_int_eq(mg_tensor_is_pack(g, mg_graph_num_tensors(g)), 0);
    ck_assert_int_eq(mg_tensor_is_pack(NULL, 0), 0);
    return n;
}

/* Run one step of m (gradients already built), the gradients in caller
 * memory: the loss, copies of the gradients, predicted and measured peak. */
static void run_step(mg_model *m, step_out *o) {
    const int n = m->n_params;
    o->n = n;
    th_step_data_init(&o->d, m, 11, 12, true);
    o->grads = calloc((size_t)n, sizeof *o->grads);
    o->bytes = calloc((size_t)n, sizeof *o->bytes);
    ck_assert(o->grads && o->bytes);
    for (int i = 0; i < n; i++) {
        o->bytes[i] = mg_tensor_nbytes(m->g, m->grads[i]);
        o->grads[i] = th_step_grad(&o->d, i);
    }
    const mg_binding *b = o->d.binds;
    const int k = o->d.n_binds;
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, o->d.outs, o->d.n_outs, NULL, &p) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    o->predicted = mg_plan_predicted_peak(p, b, k);
    ck_assert_msg(mg_exec_run(ex, p, b, k, 7) == MG_OK, "%s", mg_last_error());
    o->measured = th_pool_stats(ex).peak_bytes_in_use;
    const void *lv = NULL;
    ck_assert(mg_exec_tensor_data(ex, m->loss, &lv) == MG_OK);
    o->loss = *(const float *)lv;
    o->n_packs = count_packs(m->g);
    mg_exec_free(ex);
    mg_plan_free(p);
}

static void step_free(step_out *o) {
    th_step_data_free(&o->d);
    free(o->grads);
    free(o->bytes);
}

typedef struct model_case {
    const char *name;
    mg_model *(*make)(void);
    bool saves; /* compaction lowers policy none's peak */
} model_case;

static mg_model *make_mlp(void) {
    return mg_model_mlp(3, 40, 8, 24, 5, 0.2, MG_F32, 3);
}
static mg_model *make_resnet(void) {
    return mg_model_resnet(3, 4, 2, 8, 10, MG_F32, 3);
}
static mg_model *make_unet(void) {
    return mg_model_unet(2, 4, 2, 16, MG_F32, 3);
}

static const model_case models[] = {
    {"mlp", make_mlp, true},
    /* only the last relu (before the average pool) is compacted, and at
     * this size its bytes vanish in the pool's size classes */
    {"resnet", make_resnet, false},
    {"unet", make_unet, true},
};

typedef struct policy_case {
    mg_ckpt_policy policy;
    double budget_fraction; /* MG_CKPT_BUDGET: of none's budget peak */
} policy_case;

static const policy_case policies[] = {
    {MG_CKPT_NONE, 0},   {MG_CKPT_MEMORY, 0},    {MG_CKPT_SPEED, 0},
    {MG_CKPT_BUDGET, 1}, {MG_CKPT_BUDGET, 0.95},
};
#define N_POLICIES (int)(sizeof policies / sizeof *policies)

/* The budget peak of model c under policy none, uncompacted. */
static size_t none_budget_peak(const model_case *c) {
    mg_model *m = c->make();
    ck_assert(m != NULL);
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    mg_tensor *outs = calloc((size_t)m->n_params + 1, sizeof *outs);
    outs[0] = m->loss;
    for (int i = 0; i < m->n_params; i++) outs[1 + i] = m->grads[i];
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, outs, m->n_params + 1, NULL, &p) == MG_OK);
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, NULL, 0, &s) == MG_OK);
    mg_plan_free(p);
    free(outs);
    mg_model_free(m);
    return s.budget_peak;
}

static mg_status build_grads(mg_model *m, const policy_case *pc, size_t peak,
                             int compact) {
    mg_checkpoints ck = {.policy = pc->policy, .compact = compact};
    if (pc->policy == MG_CKPT_BUDGET)
        ck.budget_bytes = (size_t)(pc->budget_fraction * (double)peak);
    return mg_model_gradients(m, &ck);
}

static void expect_same(const char *what, const step_out *a,
                        const step_out *b) {
    ck_assert_msg(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0,
                  "%s: loss %.9g != %.9g", what, a->loss, b->loss);
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++)
        ck_assert_msg(memcmp(a->grads[i], b->grads[i], a->bytes[i]) == 0,
                      "%s: gradient %d differs", what, i);
}

/* Every model under every policy, compaction on and off: the same bits as
 * policy none without compaction, the measured peak equal to the
 * prediction. */
START_TEST(test_models_bit_equal) {
    const model_case *c = &models[_i / N_POLICIES];
    const policy_case *pc = &policies[_i % N_POLICIES];
    const size_t peak = none_budget_peak(c);
    step_out ref, off, on;
    mg_model *m = c->make();
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    run_step(m, &ref);
    mg_model_free(m);
    m = c->make();
    mg_status s = build_grads(m, pc, peak, 0);
    ck_assert_msg(s == MG_OK, "%s: %s", c->name, mg_last_error());
    run_step(m, &off);
    mg_model_free(m);
    m = c->make();
    s = build_grads(m, pc, peak, 1);
    ck_assert_msg(s == MG_OK, "%s compact: %s", c->name, mg_last_error());
    run_step(m, &on);
    mg_model_free(m);
    char what[96];
    snprintf(what, sizeof what, "%s, policy %s (budget %.2f), compact", c->name,
             mg_ckpt_policy_name(pc->policy), pc->budget_fraction);
    expect_same(what, &ref, &off);
    expect_same(what, &ref, &on);
    ck_assert_uint_eq(on.predicted, on.measured);
    ck_assert_uint_eq(off.predicted, off.measured);
    ck_assert_int_eq(off.n_packs, 0);
    if (pc->policy == MG_CKPT_NONE && c->saves) {
        ck_assert_msg(on.n_packs > 0, "%s: nothing compacted", c->name);
        ck_assert_msg(on.predicted < off.predicted,
                      "%s: compact peak %zu, not below %zu", c->name,
                      on.predicted, off.predicted);
    }
    printf("%-7s %-7s budget %.2f: peak %8zu -> %8zu compact (%d packs)\n",
           c->name, mg_ckpt_policy_name(pc->policy), pc->budget_fraction,
           off.predicted, on.predicted, on.n_packs);
    step_free(&ref);
    step_free(&off);
    step_free(&on);
}
END_TEST

/* ---- a net of overlapping pools, in f64, against finite differences ----- */

typedef struct pool_net_t {
    mg_graph *g;
    mg_tensor x, w1, w2, loss, gx, gw1, gw2;
    int n_packs;
} pool_net_t;

#define PN_X 2 * 2 * 9 * 9
#define PN_W1 3 * 2 * 3 * 3
#define PN_W2 3 * 3 * 1 * 1

/* x [2,2,9,9] -> conv3x3 (3 ch) -> relu -> max_pool 3x3 s2 p1 -> conv1x1
 * -> leaky_relu(0.1) -> neg -> max_pool 2x2 s2 -> mean of squares (read
 * through a scale, so that the last pool's output is not what the loss
 * reads). */
static void pool_net_build(pool_net_t *n, mg_dtype dt, const mg_checkpoints *ck,
                           bool grads) {
    mg_graph *g = n->g = mg_graph_new();
    n->x = mg_input(g, "x", dt, 4, S(2, 2, 9, 9));
    n->w1 = mg_param(g, "w1", dt, 4, S(3, 2, 3, 3));
    n->w2 = mg_param(g, "w2", dt, 4, S(3, 3, 1, 1));
    mg_tensor h = mg_relu(g, mg_conv2d(g, n->x, n->w1, 1, 1, 1, 1, 1, 1, 1));
    h = mg_max_pool2d(g, h, 3, 3, 2, 2, 1, 1);
    h = mg_conv2d(g, h, n->w2, 1, 1, 0, 0, 1, 1, 1);
    h = mg_neg(g, mg_leaky_relu(g, h, 0.1));
    h = mg_scale(g, mg_max_pool2d(g, h, 2, 2, 2, 2, 0, 0), 1.5);
    n->loss = mg_mean(g, mg_mul(g, h, h), 0, NULL, 0);
    TH_OK_T("pool net", n->loss);
    if (!grads) return;
    mg_tensor xs[3] = {n->x, n->w1, n->w2}, gs[3];
    ck_assert_msg(mg_gradients(g, &n->loss, 1, NULL, xs, 3, ck, gs) == MG_OK,
                  "%s", mg_last_error());
    n->gx = gs[0], n->gw1 = gs[1], n->gw2 = gs[2];
    n->n_packs = count_packs(g);
}

static void pool_net_data(double *x, double *w1, double *w2) {
    th_rng r;
    th_rng_init(&r, 5);
    th_fill_f64(&r, x, PN_X, -2, 2, 0.05);
    th_fill_f64(&r, w1, PN_W1, -1, 1, 0.05);
    th_fill_f64(&r, w2, PN_W2, -1, 1, 0.05);
    /* ties inside windows, so that the argmax's first-maximum rule counts */
    for (int i = 0; i < PN_X; i += 7) x[i + 1] = x[i];
}

static double pool_net_loss(const double *x, const double *w1,
                            const double *w2) {
    pool_net_t n;
    pool_net_build(&n, MG_F64, NULL, false);
    double loss;
    void *out[1] = {&loss};
    mg_binding in[3] = {
        {n.x, (void *)x}, {n.w1, (void *)w1}, {n.w2, (void *)w2}};
    TH_RUN_OK("pool net loss", n.g, 1, &n.loss, out, 3, in, 1);
    mg_graph_free(n.g);
    return loss;
}

START_TEST(test_pool_net_gradcheck) {
    static double x[PN_X], w1[PN_W1], w2[PN_W2];
    static double gx[PN_X], gw1[PN_W1], gw2[PN_W2];
    pool_net_data(x, w1, w2);
    const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = 1};
    pool_net_t n;
    pool_net_build(&n, MG_F64, &ck, true);
    /* relu's output (for its sign and the pool's argmax), the first pool's
     * and conv's outputs are read whole by conv; leaky relu's input only
     * for its sign, neg's output only for the second pool's argmax */
    ck_assert_int_eq(n.n_packs, 4);
    double loss;
    mg_tensor outs[4] = {n.loss, n.gx, n.gw1, n.gw2};
    void *bufs[4] = {&loss, gx, gw1, gw2};
    mg_binding in[3] = {{n.x, x}, {n.w1, w1}, {n.w2, w2}};
    TH_RUN_OK("pool net grads", n.g, 4, outs, bufs, 3, in, 1);
    mg_graph_free(n.g);
    double *vals[3] = {x, w1, w2}, *grads[3] = {gx, gw1, gw2};
    const int sizes[3] = {PN_X, PN_W1, PN_W2};
    const double h = 1e-6;
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < sizes[a]; i += a == 0 ? 3 : 1) {
            const double v = vals[a][i];
            vals[a][i] = v + h;
            const double up = pool_net_loss(x, w1, w2);
            vals[a][i] = v - h;
            const double down = pool_net_loss(x, w1, w2);
            vals[a][i] = v;
            const double fd = (up - down) / (2 * h);
            ck_assert_msg(fabs(fd - grads[a][i]) <= 1e-6 + 1e-5 * fabs(fd),
                          "argument %d element %d: finite differences %.10g, "
                          "gradient %.10g",
                          a, i, fd, grads[a][i]);
        }
}
END_TEST

/* The pool net's gradients in f32 and f64: the same bits with compaction
 * on and off, under every policy that takes no budget; ties in x, and in
 * half the cases a NaN (a NaN wins a max, and relu's sign of NaN is 0; in
 * f32 it moves the CPU's max pools from oneDNN to the loops). */
START_TEST(test_pool_net_bit_equal) {
    const mg_dtype dt = _i % 2 ? MG_F64 : MG_F32;
    const int pi = (_i / 2) % 3;
    const bool with_nan = _i >= 6;
    const mg_ckpt_policy pol = (mg_ckpt_policy)(pi == 0   ? MG_CKPT_NONE
                                                : pi == 1 ? MG_CKPT_MEMORY
                                                          : MG_CKPT_SPEED);
    const size_t es = dt == MG_F64 ? 8 : 4;
    static double x[PN_X], w1[PN_W1], w2[PN_W2];
    pool_net_data(x, w1, w2);
    void *xb = malloc(PN_X * es), *w1b = malloc(PN_W1 * es),
         *w2b = malloc(PN_W2 * es);
    for (int i = 0; i < PN_X; i++) {
        double v = with_nan && i == 40 ? NAN : i % 11 == 0 ? 0.0 : x[i];
        if (dt == MG_F64) ((double *)xb)[i] = v;
        else ((float *)xb)[i] = (float)v;
    }
    for (int i = 0; i < PN_W1; i++)
        if (dt == MG_F64) ((double *)w1b)[i] = w1[i];
        else ((float *)w1b)[i] = (float)w1[i];
    for (int i = 0; i < PN_W2; i++)
        if (dt == MG_F64) ((double *)w2b)[i] = w2[i];
        else ((float *)w2b)[i] = (float)w2[i];
    void *res[2][3];
    for (int c = 0; c < 2; c++) {
        const mg_checkpoints ck = {.policy = pol, .compact = c};
        pool_net_t n;
        pool_net_build(&n, dt, &ck, true);
        if (c && pol == MG_CKPT_NONE) ck_assert_int_eq(n.n_packs, 4);
        if (!c) ck_assert_int_eq(n.n_packs, 0);
        res[c][0] = malloc(PN_X * es);
        res[c][1] = malloc(PN_W1 * es);
        res[c][2] = malloc(PN_W2 * es);
        mg_tensor outs[3] = {n.gx, n.gw1, n.gw2};
        mg_binding in[3] = {{n.x, xb}, {n.w1, w1b}, {n.w2, w2b}};
        TH_RUN_OK("pool net", n.g, 3, outs, res[c], 3, in, 1);
        mg_graph_free(n.g);
    }
    const size_t sz[3] = {PN_X * es, PN_W1 * es, PN_W2 * es};
    for (int a = 0; a < 3; a++) {
        ck_assert_msg(memcmp(res[0][a], res[1][a], sz[a]) == 0,
                      "%s, policy %s%s: gradient %d differs with compaction",
                      mg_dtype_name(dt), mg_ckpt_policy_name(pol),
                      with_nan ? ", NaN" : "", a);
        free(res[0][a]);
        free(res[1][a]);
    }
    free(xb);
    free(w1b);
    free(w2b);
}
END_TEST

/* A stem as torchvision's ResNets have it, f32: conv -> batchnorm -> relu
 * -> max_pool 3x3 s2 p1 (overlapping windows) -> conv -> batchnorm -> relu
 * -> conv. Plain and compacted gradients are the same bits on any host:
 * with 16 channels oneDNN has a JIT max pool on AVX-512, whose backward
 * added the shares of windows that pick one element in its own order, not
 * the argmax reader's (resnet18's stem differed in its last bits there);
 * and the second relu(batchnorm) feeds a conv, so under policy none it is
 * rebuilt from the batch norm's input, which the pack count shows. */
START_TEST(test_stem_bit_equal) {
    const int64_t xs[4] = {2, 3, 20, 20}, w1s[4] = {16, 3, 3, 3},
                  w2s[4] = {16, 16, 3, 3}, w3s[4] = {8, 16, 1, 1}, cs[1] = {16};
    const int64_t nx = 2 * 3 * 20 * 20, nw1 = 16 * 3 * 9, nw2 = 16 * 16 * 9,
                  nw3 = 8 * 16;
    th_rng r;
    th_rng_init(&r, 11);
    float *x = malloc(nx * 4), *w1 = malloc(nw1 * 4), *w2 = malloc(nw2 * 4),
          *w3 = malloc(nw3 * 4), gam[16], bet[16];
    th_fill_f32(&r, x, nx, -2, 2, 0);
    th_fill_f32(&r, w1, nw1, -0.5, 0.5, 0);
    th_fill_f32(&r, w2, nw2, -0.3, 0.3, 0);
    th_fill_f32(&r, w3, nw3, -0.5, 0.5, 0);
    th_fill_f32(&r, gam, 16, 0.5, 1.5, 0);
    th_fill_f32(&r, bet, 16, -0.2, 0.2, 0);
    float *res[2][4];
    const int64_t n_of[4] = {nx, nw1, nw2, nw3};
    for (int c = 0; c < 2; c++) {
        mg_graph *g = mg_graph_new();
        mg_tensor tx = mg_input(g, "x", MG_F32, 4, xs);
        mg_tensor t1 = mg_param(g, "w1", MG_F32, 4, w1s);
        mg_tensor t2 = mg_param(g, "w2", MG_F32, 4, w2s);
        mg_tensor t3 = mg_param(g, "w3", MG_F32, 4, w3s);
        mg_tensor ga = mg_param(g, "gamma", MG_F32, 1, cs);
        mg_tensor be = mg_param(g, "beta", MG_F32, 1, cs);
        mg_tensor h = mg_conv2d(g, tx, t1, 1, 1, 1, 1, 1, 1, 1);
        h = mg_relu(g, mg_batchnorm(g, h, ga, be, 1e-5));
        h = mg_max_pool2d(g, h, 3, 3, 2, 2, 1, 1);
        h = mg_conv2d(g, h, t2, 1, 1, 1, 1, 1, 1, 1);
        h = mg_relu(g, mg_batchnorm(g, h, ga, be, 1e-5));
        h = mg_conv2d(g, h, t3, 1, 1, 0, 0, 1, 1, 1);
        mg_tensor loss = mg_mean(g, mg_mul(g, h, h), 0, NULL, 0);
        const mg_tensor wrt[4] = {tx, t1, t2, t3};
        mg_tensor gs[4];
        const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = c};
        ck_assert_msg(mg_gradients(g, &loss, 1, NULL, wrt, 4, &ck, gs) == MG_OK,
                      "%s", mg_last_error());
        /* the first relu's sign and the pool's argmax; the second relu
         * is rebuilt, so packed by nothing */
        ck_assert_int_eq(count_packs(g), c ? 2 : 0);
        void *outs[4];
        for (int a = 0; a < 4; a++) outs[a] = res[c][a] = malloc(n_of[a] * 4);
        mg_binding in[6] = {{tx, x},  {t1, w1},  {t2, w2},
                            {t3, w3}, {ga, gam}, {be, bet}};
        TH_RUN_OK("stem", g, 4, gs, outs, 6, in, 1);
        mg_graph_free(g);
    }
    for (int a = 0; a < 4; a++) {
        ck_assert_msg(memcmp(res[0][a], res[1][a], n_of[a] * 4) == 0,
                      "gradient %d differs with compaction", a);
        free(res[0][a]);
        free(res[1][a]);
    }
    free(x);
    free(w1);
    free(w2);
    free(w3);
}
END_TEST

/* A batch norm that feeds a convolution directly, three blocks deep
 * (x -> [bn -> conv] x 3): both ops carry the op table's flags the
 * rebuild reads (MG_OPF_CHEAP, MG_OPF_READS_WHOLE), so under policy none
 * with compaction each batch norm's output is made again from its kept
 * input rather than kept, for a lower predicted and measured peak and the
 * same gradient bits. */
START_TEST(test_bn_into_conv_rebuilt) {
    const int64_t xs[4] = {4, 8, 12, 12}, ws[4] = {8, 8, 3, 3}, cs[1] = {8};
    const int64_t nx = 4 * 8 * 12 * 12, nw = 8 * 8 * 9;
    th_rng r;
    th_rng_init(&r, 17);
    float *x = malloc(nx * 4), *w[3], gam[8], bet[8];
    th_fill_f32(&r, x, nx, -2, 2, 0);
    for (int i = 0; i < 3; i++) {
        w[i] = malloc(nw * 4);
        th_fill_f32(&r, w[i], nw, -0.3, 0.3, 0);
    }
    th_fill_f32(&r, gam, 8, 0.5, 1.5, 0);
    th_fill_f32(&r, bet, 8, -0.2, 0.2, 0);
    float *res[2][4];
    size_t peak[2];
    for (int c = 0; c < 2; c++) {
        mg_graph *g = mg_graph_new();
        mg_tensor tx = mg_input(g, "x", MG_F32, 4, xs);
        mg_tensor ga = mg_param(g, "gamma", MG_F32, 1, cs);
        mg_tensor be = mg_param(g, "beta", MG_F32, 1, cs);
        mg_tensor tw[3], h = tx;
        for (int i = 0; i < 3; i++) {
            tw[i] = mg_param(g, "w", MG_F32, 4, ws);
            h = mg_conv2d(g, mg_batchnorm(g, h, ga, be, 1e-5), tw[i], 1, 1, 1,
                          1, 1, 1, 1);
        }
        mg_tensor loss = mg_mean(g, mg_mul(g, h, h), 0, NULL, 0);
        const mg_tensor wrt[4] = {tw[0], tw[1], tw[2], ga};
        mg_tensor gs[4];
        const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = c};
        ck_assert_msg(mg_gradients(g, &loss, 1, NULL, wrt, 4, &ck, gs) == MG_OK,
                      "%s", mg_last_error());
        mg_plan *p = NULL;
        ck_assert(mg_plan_compile(g, gs, 4, NULL, &p) == MG_OK);
        mg_binding b[10] = {{tx, x}, {ga, gam}, {be, bet}};
        int k = 3;
        for (int i = 0; i < 3; i++) b[k++] = (mg_binding){tw[i], w[i]};
        for (int a = 0; a < 4; a++) {
            res[c][a] = malloc(a < 3 ? nw * 4 : 8 * 4);
            b[k++] = (mg_binding){gs[a], res[c][a]};
        }
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert_msg(mg_exec_run(ex, p, b, k, 1) == MG_OK, "%s",
                      mg_last_error());
        mg_pool_stats st;
        ck_assert(mg_exec_pool_stats(ex, &st) == MG_OK);
        peak[c] = mg_plan_predicted_peak(p, b, k);
        ck_assert_uint_eq(st.peak_bytes_in_use, peak[c]);
        mg_exec_free(ex);
        mg_plan_free(p);
        mg_graph_free(g);
    }
    ck_assert_msg(peak[1] < peak[0],
                  "compaction kept the batch norms' outputs: peak %zu, "
                  "plain %zu",
                  peak[1], peak[0]);
    for (int a = 0; a < 4; a++) {
        ck_assert_msg(memcmp(res[0][a], res[1][a], a < 3 ? nw * 4 : 8 * 4) == 0,
                      "gradient %d differs with compaction", a);
        free(res[0][a]);
        free(res[1][a]);
    }
    free(x);
    for (int i = 0; i < 3; i++) free(w[i]);
}
END_TEST

/* ---- what the rules read ------------------------------------------------ */

/* y = op(h) with h = scale(x): no backward op reads h, so h dies after its
 * forward reader under policy none (softmax, sigmoid and tanh read their
 * output; dropout replays its mask). */
START_TEST(test_rules_read_no_input) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(4, 6));
    mg_tensor h = mg_scale(g, x, 1.5);
    mg_tensor y;
    const char *names[] = {"softmax", "log_softmax", "sigmoid", "tanh",
                           "relu",    "dropout",     "exp"};
    switch (_i) {
    case 0: y = mg_softmax(g, h, 1); break;
    case 1: y = mg_log_softmax(g, h, 1); break;
    case 2: y = mg_sigmoid(g, h); break;
    case 3: y = mg_tanh(g, h); break;
    case 4: y = mg_relu(g, h); break;
    case 5: y = mg_dropout(g, h, 0.3, 4); break;
    default: y = mg_exp(g, h); break;
    }
    mg_tensor loss = mg_sum(g, mg_scale(g, y, 2.0), 0, NULL, 0);
    TH_OK_T(names[_i], loss);
    const int32_t n_fwd = mg_graph_num_tensors(g);
    mg_tensor gx;
    ck_assert(mg_gradients(g, &loss, 1, NULL, &x, 1, NULL, &gx) == MG_OK);
    for (int32_t t = n_fwd; t < mg_graph_num_tensors(g); t++)
        for (int k = 0; k < 6; k++)
            ck_assert_msg(mg_tensor_input(g, t, k) != h,
                          "%s: backward op #%d (%s) reads the op's input",
                          names[_i], (int)t, mg_tensor_op_name(g, t));
    mg_graph_free(g);
}
END_TEST

/* ---- what the pass leaves whole ----------------------------------------- */

/* A 17 x 17 window (289 elements) has no byte-sized argmax: the pool's
 * input stays whole (no pack), and the gradients are right. relu before a
 * conv stays whole too: the conv's weight gradient reads it. */
START_TEST(test_left_whole) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 4, S(1, 1, 17, 17));
    mg_tensor w = mg_param(g, "w", MG_F32, 4, S(1, 1, 1, 1));
    mg_tensor h = mg_relu(g, mg_neg(g, x));
    mg_tensor c = mg_conv2d(g, h, w, 1, 1, 0, 0, 1, 1, 1);
    mg_tensor p = mg_max_pool2d(g, mg_neg(g, c), 17, 17, 1, 1, 0, 0);
    mg_tensor loss = mg_sum(g, mg_scale(g, p, 3.0), 0, NULL, 0);
    TH_OK_T("left whole", loss);
    const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = 1};
    mg_tensor xs[2] = {x, w}, gs[2];
    ck_assert(mg_gradients(g, &loss, 1, NULL, xs, 2, &ck, gs) == MG_OK);
    ck_assert_int_eq(count_packs(g), 0);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_bad_flag) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, S(3));
    mg_tensor loss = mg_sum(g, mg_relu(g, mg_neg(g, x)), 0, NULL, 0);
    const int32_t n = mg_graph_num_tensors(g);
    const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = 2};
    mg_tensor gx = 77;
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &x, 1, &ck, &gx),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "compact = 2"), "%s",
                  mg_last_error());
    ck_assert_int_eq(gx, 77);
    ck_assert_int_eq(mg_graph_num_tensors(g), n);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("compact");
    th_add_tcase_loops(
        s, "models", 600,
        TH_LOOPS({test_models_bit_equal, 0,
                  (int)(sizeof models / sizeof *models) * N_POLICIES}),
        NULL);
    th_add_tcase_loops(s, "pool_net", 300,
                       TH_LOOPS({test_pool_net_bit_equal, 0, 12},
                                {test_rules_read_no_input, 0, 7}),
                       TH_TESTS(test_pool_net_gradcheck, test_stem_bit_equal,
                                test_bn_into_conv_rebuilt, test_left_whole,
                                test_bad_flag));
    return th_run_suite(s);
}
