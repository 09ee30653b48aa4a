/*
 * test_fuse.c - fused element-wise chains (src/rewrite/fuse.c,
 * src/exec/cpu/cpu_fused.c): every op the op table flags element-wise,
 * in a fused chain forward and backward, gives the bits of the unfused
 * ops; every model's gradients under every checkpoint policy with fusion
 * on are the bits of plain backprop's without it; predicted peaks equal
 * measured ones and are never above the unfused plan's; a chain is cut
 * where a tensor is read elsewhere or changes dtype; and the fused kernel
 * refuses a malformed chain with a message.
 */
#include "helpers.h"
#include "memgrad_models.h"

#include "exec/cpu/cpu_kernels.h"
#include "graph/op_table.h"
#include "rewrite/schedule.h"

/* Ops seen in a fused chain of some plan of this process. */
static bool seen_fused[MG_OP_COUNT];

static void note_chains(const mg_plan *p) {
    const mgi_fusion *f = p->fusion;
    for (int32_t i = 0; f && i < f->start[f->n]; i++)
        seen_fused[f->ins[i].op] = true;
}

/* A plan of outs, run once with every output bound to out_bufs; peaks
 * measured and predicted, and the plan's step count. */
typedef struct run_res {
    size_t peak, predicted;
    int steps;
    mg_plan_summary sum;
} run_res;

static void run_plan(const mg_graph *g, const mg_tensor *outs, int n_outs,
                     void *const *out_bufs, const mg_binding *ins, int n_ins,
                     int no_fusion, run_res *r) {
    mg_binding b[512];
    ck_assert(n_ins + n_outs <= 512);
    int nb = 0;
    for (int i = 0; i < n_ins; i++) b[nb++] = ins[i];
    for (int i = 0; i < n_outs; i++)
        b[nb++] = (mg_binding){outs[i], out_bufs[i]};
    mg_plan_options o = {.no_fusion = no_fusion};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(g, outs, n_outs, &o, &p) == MG_OK, "%s",
                  mg_last_error());
    note_chains(p);
    ck_assert_int_eq(p->fusion != NULL && no_fusion, 0);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 5) == MG_OK, "%s", mg_last_error());
    mg_pool_stats st;
    ck_assert(mg_exec_pool_stats(ex, &st) == MG_OK);
    r->peak = st.peak_bytes_in_use;
    r->predicted = mg_plan_predicted_peak(p, b, nb);
    r->steps = mg_plan_num_steps(p);
    ck_assert(mg_plan_summarize(p, b, nb, &r->sum) == MG_OK);
    mg_exec_free(ex);
    mg_plan_free(p);
}

/* ------------------------------------------------------------ every op */

#define N_UNARY 20
static mg_tensor unary(mg_graph *g, int k, mg_tensor x) {
    switch (k) {
    case 0: return mg_neg(g, x);
    case 1: return mg_relu(g, x);
    case 2: return mg_gelu(g, x);
    case 3: return mg_silu(g, x);
    case 4: return mg_tanh(g, x);
    case 5: return mg_sigmoid(g, x);
    case 6: return mg_exp(g, x);
    case 7: return mg_log(g, x);
    case 8: return mg_sqrt(g, x);
    case 9: return mg_erf(g, x);
    case 10: return mg_pow(g, x, 1.7);
    case 11: return mg_leaky_relu(g, x, 0.1);
    case 12: return mg_reciprocal(g, x);
    case 13: return mg_rsqrt(g, x);
    case 14: return mg_sin(g, x);
    case 15: return mg_cos(g, x);
    case 16: return mg_abs(g, x);
    case 17: return mg_is_nonzero(g, x);
    case 18: return mg_dropout(g, x, 0.3, 77);
    default: return mg_scale(g, x, 0.3);
    }
}

#define N_BINARY 6
static mg_tensor binary(mg_graph *g, int k, mg_tensor a, mg_tensor b) {
    switch (k) {
    case 0: return mg_add(g, a, b);
    case 1: return mg_sub(g, a, b);
    case 2: return mg_mul(g, a, b);
    case 3: return mg_div(g, a, b);
    case 4: return mg_maximum(g, a, b);
    default: return mg_minimum(g, a, b);
    }
}

/* One chain around op k (unary k < N_UNARY, else binary k - N_UNARY):
 * loss = sum(op(x * s + bias) * c) with the bias broadcast over rows (or
 * op(x * s + bias, z) for a binary op), and its gradients with respect to
 * x, bias and z (not c, so that no backward op reads op's output and it
 * joins the chain), fused and unfused: the same bits, and fewer steps fused.
 * The inputs are positive, in every op's domain. */
static void check_op_chain(int k, mg_dtype dt) {
    const int64_t R = 37, C = 301; /* tiles of 256 cut rows mid-way */
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", dt, 2, S(R, C));
    mg_tensor bias = mg_param(g, "bias", dt, 1, S(C));
    mg_tensor z = mg_input(g, "z", dt, 2, S(R, C));
    mg_tensor cst = mg_input(g, "c", dt, 2, S(R, C));
    mg_tensor h = mg_add(g, mg_scale(g, x, 0.75), bias);
    mg_tensor y = k < N_UNARY ? unary(g, k, h) : binary(g, k - N_UNARY, h, z);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, cst), 0, NULL, 0);
    TH_OK_T("chain", loss);
    mg_tensor wrt[3] = {x, bias, z}, gr[3];
    ck_assert_msg(mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, gr) == MG_OK,
                  "%s", mg_last_error());
    const size_t es = mg_dtype_size(dt), n = (size_t)(R * C);
    th_rng rng;
    th_rng_init(&rng, 11 + (uint64_t)k);
    void *xd = malloc(n * es), *bd = malloc((size_t)C * es),
         *zd = malloc(n * es), *cd = malloc(n * es);
    double *tmp = malloc(n * sizeof *tmp);
    ck_assert(xd && bd && zd && cd && tmp);
    void *bufs[4] = {xd, bd, zd, cd};
    size_t lens[4] = {n, (size_t)C, n, n};
    for (int i = 0; i < 4; i++) {
        th_rand_vals(&rng, tmp, (int64_t)lens[i], 0.25, 2.0);
        for (size_t j = 0; j < lens[i]; j++)
            if (dt == MG_F32) ((float *)bufs[i])[j] = (float)tmp[j];
            else ((double *)bufs[i])[j] = tmp[j];
    }
    const mg_binding ins[4] = {{x, xd}, {bias, bd}, {z, zd}, {cst, cd}};
    /* not y: an output is never absorbed, and y = op(h) is to be */
    mg_tensor outs[4] = {loss, gr[0], gr[1], gr[2]};
    void *got[2][4];
    run_res r[2];
    for (int f = 0; f < 2; f++) {
        for (int i = 0; i < 4; i++) {
            got[f][i] = calloc(1, mg_tensor_nbytes(g, outs[i]));
            ck_assert(got[f][i]);
        }
        run_plan(g, outs, 4, got[f], ins, 4, f, &r[f]);
        ck_assert_msg(r[f].peak == r[f].predicted,
                      "op %d %s: peak %zu, predicted %zu", k,
                      f ? "unfused" : "fused", r[f].peak, r[f].predicted);
    }
    for (int i = 0; i < 4; i++)
        ck_assert_msg(
            memcmp(got[0][i], got[1][i], mg_tensor_nbytes(g, outs[i])) == 0,
            "op %d (%s), output %d: fused bits differ from the "
            "unfused ops'",
            k, mg_dtype_name(dt), i);
    ck_assert_msg(r[0].steps < r[1].steps, "op %d: %d fused steps, %d unfused",
                  k, r[0].steps, r[1].steps);
    ck_assert(r[0].peak <= r[1].peak);
    /* the same flops, counted over the chains' ops */
    ck_assert(fabs(r[0].sum.forward_flops + r[0].sum.backward_flops -
                   r[1].sum.forward_flops - r[1].sum.backward_flops) <=
              1e-9 * (r[1].sum.forward_flops + r[1].sum.backward_flops));
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 4; i++) free(got[f][i]);
    free(xd), free(bd), free(zd), free(cd), free(tmp);
    mg_graph_free(g);
}

/* Every op flagged element-wise gets a body in the fused kernel, and each
 * of them (gradient helpers included) ran fused in some chain above with
 * the unfused ops' bits. */
START_TEST(test_every_op_fused_bit_equal) {
    memset(seen_fused, 0, sizeof seen_fused);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < N_UNARY + N_BINARY; k++)
            check_op_chain(k, th_dtypes[d]);
    for (int op = 0; op < MG_OP_COUNT; op++) {
        const bool ew = (mgi_op_table[op].flags & MG_OPF_ELEMENTWISE) != 0;
        ck_assert_msg(ew == mgi_cpu_fused_has((mg_op)op),
                      "op %s: flagged element-wise %d, fused body %d",
                      mgi_op_str((mg_op)op), ew, mgi_cpu_fused_has((mg_op)op));
        if (ew)
            ck_assert_msg(seen_fused[op], "op %s never ran in a fused chain",
                          mgi_op_str((mg_op)op));
    }
}
END_TEST

/* --------------------------------------------------- models and policies */

typedef struct mdata {
    void *input, *target, **params, **grads;
    double loss;
} mdata;

static mg_model *make(mg_model_kind kind, mg_dtype dt) {
    switch (kind) {
    case MG_MODEL_MLP: return mg_model_mlp(6, 24, 8, 12, 5, 0.2, dt, 7);
    case MG_MODEL_RESNET: return mg_model_resnet(3, 2, 2, 6, 3, dt, 7);
    case MG_MODEL_TRANSFORMER:
        return mg_model_transformer(3, 16, 2, 8, 2, 11, 0.1, 1, dt, 7);
    default: return mg_model_gpt(3, 16, 2, 8, 2, 11, 0.1, dt, 7);
    }
}

/* One training step of m into d (loss and gradients), fused or not. */
static void model_step(const mg_model *m, mdata *d, int no_fusion, run_res *r) {
    mg_binding ins[256];
    mg_tensor outs[256];
    void *bufs[256];
    int ni = 0, no = 0;
    ck_assert(m->n_params + 2 <= 256);
    ins[ni++] = (mg_binding){m->input, d->input};
    ins[ni++] = (mg_binding){m->target, d->target};
    outs[no] = m->loss;
    bufs[no++] = &d->loss;
    for (int i = 0; i < m->n_params; i++) {
        ins[ni++] = (mg_binding){m->params[i], d->params[i]};
        outs[no] = m->grads[i];
        bufs[no++] = d->grads[i];
    }
    run_plan(m->g, outs, no, bufs, ins, ni, no_fusion, r);
}

static void md_init(mdata *d, const mg_model *m) {
    memset(d, 0, sizeof *d); /* an f32 loss fills half of d->loss */
    d->input = malloc(mg_tensor_nbytes(m->g, m->input));
    d->target = malloc(mg_tensor_nbytes(m->g, m->target));
    d->params = calloc((size_t)m->n_params, sizeof *d->params);
    d->grads = calloc((size_t)m->n_params, sizeof *d->grads);
    ck_assert(d->input && d->target && d->params && d->grads);
    for (int i = 0; i < m->n_params; i++) {
        d->params[i] = malloc(mg_tensor_nbytes(m->g, m->params[i]));
        d->grads[i] = malloc(mg_tensor_nbytes(m->g, m->params[i]));
        ck_assert(d->params[i] && d->grads[i]);
    }
    ck_assert(mg_model_init_params(m, 3, d->params) == MG_OK);
    ck_assert(mg_model_init_data(m, 4, d->input, d->target) == MG_OK);
}

static void md_free(mdata *d, const mg_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        free(d->params[i]);
        free(d->grads[i]);
    }
    free(d->params), free(d->grads), free(d->input), free(d->target);
}

/* Each model, f32 and f64: plain backprop without fusion is the
 * reference; under every policy with fusion on, the loss and every
 * gradient are its bits, the pool's peak is the predicted one, and the
 * fused plan's peak is at most the unfused plan's of the same graph. */
START_TEST(test_policies_bit_equal_fused) {
    const mg_model_kind kinds[] = {MG_MODEL_MLP, MG_MODEL_RESNET,
                                   MG_MODEL_TRANSFORMER, MG_MODEL_GPT};
    const mg_ckpt_policy pols[] = {MG_CKPT_NONE, MG_CKPT_MEMORY, MG_CKPT_SPEED,
                                   MG_CKPT_COLLECTION, MG_CKPT_BUDGET};
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
        for (int d = 0; d < 2; d++) {
            const mg_dtype dt = th_dtypes[d];
            mg_model *ref = make(kinds[ki], dt);
            ck_assert_msg(ref != NULL, "%s", mg_last_error());
            ck_assert(mg_model_gradients(ref, NULL) == MG_OK);
            mdata rd;
            md_init(&rd, ref);
            run_res rr;
            model_step(ref, &rd, 1, &rr);
            for (size_t pi = 0; pi < sizeof pols / sizeof *pols; pi++) {
                mg_model *m = make(kinds[ki], dt);
                mg_checkpoints c = {.policy = pols[pi]};
                if (pols[pi] == MG_CKPT_COLLECTION) {
                    c.tensors = m->blocks;
                    c.n_tensors = m->n_blocks / 2 ? m->n_blocks / 2 : 1;
                }
                if (pols[pi] == MG_CKPT_BUDGET)
                    c.budget_bytes = rr.sum.budget_peak / 10 * 9;
                mg_status s = mg_model_gradients(m, &c);
                if (s == MG_ERR_NOMEM && pols[pi] == MG_CKPT_BUDGET) {
                    /* below what fits: the smallest that does */
                    mg_model_free(m);
                    m = make(kinds[ki], dt);
                    c.budget_bytes = rr.sum.budget_peak;
                    s = mg_model_gradients(m, &c);
                }
                ck_assert_msg(s == MG_OK, "%s %s: %s",
                              mg_model_kind_name(kinds[ki]),
                              mg_ckpt_policy_name(pols[pi]), mg_last_error());
                mdata md;
                md_init(&md, m);
                run_res fused, plain;
                model_step(m, &md, 0, &fused);
                const char *what = mg_model_kind_name(kinds[ki]);
                const char *pol = mg_ckpt_policy_name(pols[pi]);
                ck_assert_msg(fused.peak == fused.predicted,
                              "%s %s %s: peak %zu, predicted %zu", what, pol,
                              mg_dtype_name(dt), fused.peak, fused.predicted);
                ck_assert_msg(memcmp(&md.loss, &rd.loss, sizeof md.loss) == 0,
                              "%s %s: loss differs", what, pol);
                for (int i = 0; i < m->n_params; i++)
                    ck_assert_msg(
                        memcmp(md.grads[i], rd.grads[i],
                               mg_tensor_nbytes(m->g, m->params[i])) == 0,
                        "%s %s %s: gradient %d differs from plain unfused "
                        "backprop's",
                        what, pol, mg_dtype_name(dt), i);
                model_step(m, &md, 1, &plain);
                ck_assert_msg(fused.peak <= plain.peak,
                              "%s %s: fused peak %zu above unfused %zu", what,
                              pol, fused.peak, plain.peak);
                /* every model has chains: bias add and relu (MLP),
                 * bias and residual adds (transformers), and gradients
                 * summed where a tensor has two readers */
                ck_assert_msg(fused.steps < plain.steps,
                              "%s %s: %d steps fused, %d unfused", what, pol,
                              fused.steps, plain.steps);
                /* the summary's budget figure is the fused plan's own */
                if (pols[pi] == MG_CKPT_BUDGET)
                    ck_assert(fused.sum.budget_peak <= c.budget_bytes);
                md_free(&md, m);
                mg_model_free(m);
            }
            /* plain backprop, fused: what the summary predicts for it */
            run_res rf;
            model_step(ref, &rd, 0, &rf);
            ck_assert_uint_eq(rf.peak, rf.predicted);
            ck_assert_uint_eq(rf.sum.predicted_peak_without_recompute, rf.peak);
            md_free(&rd, ref);
            mg_model_free(ref);
        }
}
END_TEST

/* --------------------------------------------------- where chains stop */

/* A tensor another op reads stays materialised: y = relu(a + b) is read
 * by the loss and by an output, so the chain a + b -> relu is fused, but
 * h = relu(...) kept as an output keeps its buffer. A cast cuts the chain
 * (float32 -> float64), and the results match the unfused plan's. */
START_TEST(test_chain_cuts) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_F32, 1, S(300));
    mg_tensor b = mg_input(g, "b", MG_F32, 1, S(300));
    mg_tensor h = mg_relu(g, mg_add(g, a, b)); /* kept: an output */
    mg_tensor u = mg_exp(g, mg_neg(g, h));     /* a chain above h */
    mg_tensor w = mg_cast(g, mg_scale(g, u, 2.0), MG_F64);
    mg_tensor v = mg_tanh(g, mg_mul(g, w, w)); /* f64 chain */
    TH_OK_T("graph", v);
    float ad[300], bd[300];
    for (int i = 0; i < 300; i++) {
        ad[i] = (float)(i % 7) - 3.0f;
        bd[i] = 0.01f * (float)i;
    }
    const mg_binding ins[2] = {{a, ad}, {b, bd}};
    mg_tensor outs[3] = {h, u, v};
    float hf[2][300], uf[2][300];
    double vf[2][300];
    run_res r[2];
    for (int f = 0; f < 2; f++) {
        void *bufs[3] = {hf[f], uf[f], vf[f]};
        run_plan(g, outs, 3, bufs, ins, 2, f, &r[f]);
        ck_assert_uint_eq(r[f].peak, r[f].predicted);
    }
    ck_assert(memcmp(hf[0], hf[1], sizeof hf[0]) == 0);
    ck_assert(memcmp(uf[0], uf[1], sizeof uf[0]) == 0);
    ck_assert(memcmp(vf[0], vf[1], sizeof vf[0]) == 0);
    /* fused: add+relu, neg+exp, scale, cast, mul+tanh */
    ck_assert_int_eq(r[1].steps, 8);
    ck_assert_int_eq(r[0].steps, 5);
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------ bad chains */

/* The fused kernel checks the chain it is handed before touching memory:
 * an input of another dtype, an input that does not broadcast, an op
 * without a fused body, an operand read before it is made, dropout with p
 * outside [0, 1), and an empty or overlong chain each fail with a status
 * and a reason. */
START_TEST(test_bad_chains) {
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    double xd[8] = {0};
    char why[256];
    mg_fused_instr ins[2] = {
        {.op = MG_OP_NEG, .n_in = 1, .src = {-1, 0}},
        {.op = MG_OP_ADD, .n_in = 2, .src = {0, -1}},
    };
    mg_kargs a = {.n_in = 1,
                  .in = {{x, {MG_F32, 1, {8}}}},
                  .out = {y, {MG_F32, 1, {8}}},
                  .why = why,
                  .why_len = sizeof why,
                  .fused = ins,
                  .n_fused = 2};
    ck_assert_int_eq(mgi_cpu_fused(&a), MG_OK);
    for (int i = 0; i < 8; i++) ck_assert(y[i] == 0.0f);

    mg_kargs bad = a;
    bad.in[0] = (mg_kbuf){xd, {MG_F64, 1, {8}}};
    why[0] = '\0';
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_DTYPE);
    ck_assert_msg(strstr(why, "f64") && strstr(why, "f32"), "%s", why);

    bad = a;
    bad.in[0].d = (mg_tdesc){MG_F32, 1, {3}};
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_SHAPE);
    ck_assert_msg(strstr(why, "broadcast"), "%s", why);

    mg_fused_instr mm[2] = {ins[0], ins[1]};
    mm[0].op = MG_OP_MATMUL;
    bad = a;
    bad.fused = mm;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(why, "matmul"), "%s", why);

    mg_fused_instr fwd[2] = {ins[0], ins[1]};
    fwd[0].src[0] = 1; /* reads the op after it */
    bad = a;
    bad.fused = fwd;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_INVALID_ARG);

    mg_fused_instr ext[2] = {ins[0], ins[1]};
    ext[1].src[1] = -3; /* input 2 of 1 */
    bad = a;
    bad.fused = ext;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(why, "input 2"), "%s", why);

    mg_attrs p_bad = {0};
    p_bad.p = 1.5;
    mg_fused_instr drop[2] = {ins[0], ins[1]};
    drop[0].op = MG_OP_DROPOUT;
    drop[0].attrs = &p_bad;
    bad = a;
    bad.fused = drop;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(why, "dropout") && strstr(why, "1.5"), "%s", why);

    bad = a;
    bad.n_fused = 0;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_INVALID_ARG);
    bad = a;
    bad.n_fused = MG_FUSE_MAX + 1;
    ck_assert_int_eq(mgi_cpu_fused(&bad), MG_ERR_INVALID_ARG);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fuse");
    th_add_tcase(s, "ops", 300, TH_TESTS(test_every_op_fused_bit_equal));
    th_add_tcase(s, "models", 600, TH_TESTS(test_policies_bit_equal_fused));
    th_add_tcase(s, "cuts", 60, TH_TESTS(test_chain_cuts, test_bad_chains));
    return th_run_suite(s);
}
