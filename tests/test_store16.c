/*
 * test_store16.c - 16-bit storage of saved activations (issue 29 item 2,
 * mg_checkpoints.store16): the lossy transform behind an explicit opt-in.
 *
 * - bfloat16 rounding: nearest, ties to even, infinities, NaN, signed zero;
 * - under policy none, a small MLP's forward pass keeps its activations as
 *   bf16 packs: the predicted pool peak equals the measured one and is
 *   lower than without; the loss is the same bits (the forward pass reads
 *   full values); the gradients differ from the exact ones, by less than
 *   1e-2;
 * - the backward pass reads exactly bf16(x): the last weight's gradient
 *   equals h^T r computed on the host from the forward values rounded to
 *   bfloat16;
 * - under policy memory (recomputation from rounded checkpoints) the peak
 *   is predicted exactly and the error stays below 5e-2;
 * - float64 graphs are left as they are (bit-equal gradients), and a
 *   flag other than 0 or 1 is refused.
 */
#include "helpers.h"

#include "backend/kernel_shared.h"

#include <math.h>

START_TEST(test_bf16_rounding) {
    const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f82}, /* 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6 */
        {0x3f808001u, 0x3f81}, /* just above the tie: up */
        {0x3f807fffu, 0x3f80}, /* just below: down */
        {0x80000000u, 0x8000}, /* -0 keeps its sign */
        {0x7f800000u, 0x7f80}, /* +inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to infinity */
        {0x00000001u, 0x0000}, /* the smallest subnormal rounds to 0 */
        {0xc0490fdbu, 0xc049}, /* -pi */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x;
        memcpy(&x, &cases[i].in, sizeof x);
        ck_assert_msg(mg_bf16_from_f32(x) == cases[i].out,
                      "0x%08x -> 0x%04x, want 0x%04x", cases[i].in,
                      mg_bf16_from_f32(x), cases[i].out);
        const float back = mg_f32_from_bf16(cases[i].out);
        uint32_t u;
        memcpy(&u, &back, sizeof u);
        ck_assert_uint_eq(u, (uint32_t)cases[i].out << 16);
    }
    /* a NaN stays a NaN, quiet, of its sign */
    const uint32_t nans[2] = {0x7f800001u, 0xffc00000u};
    for (int i = 0; i < 2; i++) {
        float x;
        memcpy(&x, &nans[i], sizeof x);
        const uint16_t h = mg_bf16_from_f32(x);
        ck_assert(isnan(mg_f32_from_bf16(h)));
        ck_assert_uint_eq(h & 0x8000u, (nans[i] >> 16) & 0x8000u);
        ck_assert_uint_ne(h & 0x40u, 0);
    }
}
END_TEST

/* ---- a small MLP: x -> relu(x W1) -> tanh(. W2) -> . W3, loss sum(. * r) */

enum { B = 48, F0 = 24, F1 = 40, F2 = 40, F3 = 12 };

typedef struct mlp {
    mg_graph *g;
    mg_tensor x, r, w[3], h2, loss;
    mg_tensor grads[3];
    void *xd, *rd, *wd[3];
    mg_dtype dt;
} mlp;

static void fill(th_rng *rng, mg_dtype dt, void *d, int64_t n, double lo,
                 double hi) {
    if (dt == MG_F32) th_fill_f32(rng, d, n, lo, hi, 0.0);
    else th_fill_f64(rng, d, n, lo, hi, 0.0);
}

static void mlp_build(mlp *m, mg_dtype dt, mg_ckpt_policy pol, int store16) {
    memset(m, 0, sizeof *m);
    m->dt = dt;
    mg_graph *g = m->g = mg_graph_new();
    const int64_t dims[4] = {F0, F1, F2, F3};
    m->x = mg_input(g, "x", dt, 2, S(B, F0));
    m->r = mg_input(g, "r", dt, 2, S(B, F3));
    char name[8];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "w%d", i + 1);
        m->w[i] = mg_param(g, name, dt, 2, S(dims[i], dims[i + 1]));
    }
    mg_tensor h1 = mg_relu(g, mg_matmul(g, m->x, m->w[0], 0, 0));
    m->h2 = mg_tanh(g, mg_matmul(g, h1, m->w[1], 0, 0));
    mg_tensor out = mg_matmul(g, m->h2, m->w[2], 0, 0);
    m->loss = mg_sum(g, mg_mul(g, out, m->r), 0, NULL, 0);
    TH_OK_T("loss", m->loss);
    const mg_checkpoints ck = {.policy = pol, .store16 = store16};
    ck_assert_msg(mg_gradients(g, &m->loss, 1, NULL, m->w, 3, &ck, m->grads) ==
                      MG_OK,
                  "%s", mg_last_error());
    th_rng rng;
    th_rng_init(&rng, 29);
    const size_t es = mg_dtype_size(dt);
    m->xd = malloc(B * F0 * es);
    m->rd = malloc(B * F3 * es);
    fill(&rng, dt, m->xd, B * F0, -1, 1);
    fill(&rng, dt, m->rd, B * F3, -1, 1);
    for (int i = 0; i < 3; i++) {
        m->wd[i] = malloc((size_t)(dims[i] * dims[i + 1]) * es);
        fill(&rng, dt, m->wd[i], dims[i] * dims[i + 1], -0.5, 0.5);
    }
}

static void mlp_free(mlp *m) {
    free(m->xd);
    free(m->rd);
    for (int i = 0; i < 3; i++) free(m->wd[i]);
    mg_graph_free(m->g);
}

static int count_op(const mg_graph *g, const char *op) {
    int n = 0;
    for (int32_t t = 0; t < mg_graph_num_tensors(g); t++)
        n += strcmp(mg_tensor_op_name(g, t), op) == 0;
    return n;
}

typedef struct run_out {
    double loss;
    double *grads[3]; /* as doubles, for comparison */
    int64_t n[3];
    size_t predicted, measured;
    int packs, unpacks; /* pack_bf16 and unpack_bf16 nodes */
} run_out;

/* One step: loss and gradients in caller memory; predicted and measured
 * pool peak. */
static void mlp_run(const mlp *m, run_out *o) {
    mg_tensor outs[4] = {m->loss, m->grads[0], m->grads[1], m->grads[2]};
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, 4, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    const size_t es = mg_dtype_size(m->dt);
    void *buf[4];
    buf[0] = malloc(es);
    for (int i = 0; i < 3; i++) {
        o->n[i] = mg_tensor_numel(m->g, m->w[i]);
        buf[i + 1] = malloc((size_t)o->n[i] * es);
    }
    mg_binding b[9] = {{m->x, m->xd}, {m->r, m->rd}};
    for (int i = 0; i < 3; i++) b[2 + i] = (mg_binding){m->w[i], m->wd[i]};
    for (int i = 0; i < 4; i++) b[5 + i] = (mg_binding){outs[i], buf[i]};
    o->predicted = mg_plan_predicted_peak(p, b, 9);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, 9, 7) == MG_OK, "%s", mg_last_error());
    mg_pool_stats st;
    ck_assert(mg_exec_pool_stats(ex, &st) == MG_OK);
    o->measured = st.peak_bytes_in_use;
    o->loss = m->dt == MG_F32 ? *(float *)buf[0] : *(double *)buf[0];
    for (int i = 0; i < 3; i++) {
        o->grads[i] = malloc((size_t)o->n[i] * sizeof(double));
        for (int64_t k = 0; k < o->n[i]; k++)
            o->grads[i][k] = m->dt == MG_F32 ? ((float *)buf[i + 1])[k]
                                             : ((double *)buf[i + 1])[k];
    }
    for (int i = 0; i < 4; i++) free(buf[i]);
    mg_exec_free(ex);
    mg_plan_free(p);
}

static void run_free(run_out *o) {
    for (int i = 0; i < 3; i++) free(o->grads[i]);
}

/* Build, run and free the MLP: its step, and how many packs it has (each
 * of them a pack as mg_tensor_is_pack says). */
static void mlp_step(mg_dtype dt, mg_ckpt_policy pol, int store16, run_out *o) {
    mlp m;
    mlp_build(&m, dt, pol, store16);
    mlp_run(&m, o);
    o->packs = count_op(m.g, "pack_bf16");
    o->unpacks = count_op(m.g, "unpack_bf16");
    for (int32_t t = 0; t < mg_graph_num_tensors(m.g); t++)
        if (!strcmp(mg_tensor_op_name(m.g, t), "pack_bf16"))
            ck_assert(mg_tensor_is_pack(m.g, t));
    mlp_free(&m);
}

/* The largest normwise relative difference over the three gradients. */
static double grad_diff(const run_out *a, const run_out *ref) {
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        double num = 0, den = 0;
        for (int64_t k = 0; k < ref->n[i]; k++) {
            const double d = a->grads[i][k] - ref->grads[i][k];
            num += d * d;
            den += ref->grads[i][k] * ref->grads[i][k];
        }
        const double e = sqrt(num) / sqrt(den);
        if (e > worst) worst = e;
    }
    return worst;
}

START_TEST(test_none_halves_saved_and_stays_close) {
    run_out a, b;
    mlp_step(MG_F32, MG_CKPT_NONE, 0, &a);
    mlp_step(MG_F32, MG_CKPT_NONE, 1, &b);
    ck_assert_int_eq(a.packs, 0);
    /* relu's output (read by relu_grad and the next matmul's gradient) and
     * tanh's (read by tanh_grad and the last matmul's gradient) */
    ck_assert_int_ge(b.packs, 2);
    ck_assert_int_ge(b.unpacks, 2);
    ck_assert_uint_eq(a.predicted, a.measured);
    ck_assert_uint_eq(b.predicted, b.measured);
    ck_assert_msg(b.measured < a.measured, "store16 peak %zu, plain %zu",
                  b.measured, a.measured);
    ck_assert_msg(b.loss == a.loss, "the forward pass changed: %.9g vs %.9g",
                  b.loss, a.loss);
    const double e = grad_diff(&b, &a);
    ck_assert_msg(e > 0 && e < 1e-2, "gradient difference %.3g", e);
    run_free(&a);
    run_free(&b);
}
END_TEST

/* dW3 = h2^T r, where the backward pass reads h2 rounded to bfloat16. */
START_TEST(test_backward_reads_bf16_of_forward) {
    mlp half;
    mlp_build(&half, MG_F32, MG_CKPT_NONE, 1);
    float *h2 = malloc(B * F2 * sizeof *h2);
    mg_binding in[5] = {{half.x, half.xd}, {half.r, half.rd}};
    for (int i = 0; i < 3; i++) in[2 + i] = (mg_binding){half.w[i], half.wd[i]};
    void *bufs[1] = {h2};
    TH_RUN_OK("h2", half.g, 1, &half.h2, bufs, 5, in, 7);
    run_out o;
    mlp_run(&half, &o);
    const float *r = half.rd;
    double num16 = 0, num32 = 0, den = 0;
    for (int i = 0; i < F2; i++)
        for (int j = 0; j < F3; j++) {
            double s16 = 0, s32 = 0;
            for (int k = 0; k < B; k++) {
                const float v = h2[k * F2 + i];
                s16 += (double)mg_f32_from_bf16(mg_bf16_from_f32(v)) *
                       r[k * F3 + j];
                s32 += (double)v * r[k * F3 + j];
            }
            const double got = o.grads[2][i * F3 + j];
            num16 += (got - s16) * (got - s16);
            num32 += (got - s32) * (got - s32);
            den += s16 * s16;
        }
    /* float32 summation against double: ~1e-7; the unrounded h2 is
     * ~1e-3 off */
    ck_assert_msg(sqrt(num16 / den) < 1e-5, "vs bf16(h2): %.3g",
                  sqrt(num16 / den));
    ck_assert_msg(sqrt(num32 / den) > 1e-4, "vs h2 unrounded: %.3g",
                  sqrt(num32 / den));
    run_free(&o);
    free(h2);
    mlp_free(&half);
}
END_TEST

START_TEST(test_memory_policy_predicted) {
    run_out a, b;
    mlp_step(MG_F32, MG_CKPT_NONE, 0, &a);
    mlp_step(MG_F32, MG_CKPT_MEMORY, 1, &b);
    ck_assert_int_ge(b.packs, 1);
    ck_assert_uint_eq(b.predicted, b.measured);
    const double e = grad_diff(&b, &a);
    ck_assert_msg(e > 0 && e < 5e-2, "gradient difference %.3g", e);
    run_free(&a);
    run_free(&b);
}
END_TEST

START_TEST(test_f64_untouched_and_bad_flag) {
    run_out a, b;
    mlp_step(MG_F64, MG_CKPT_NONE, 0, &a);
    mlp_step(MG_F64, MG_CKPT_NONE, 1, &b);
    ck_assert_int_eq(b.packs, 0);
    ck_assert(grad_diff(&b, &a) == 0);
    ck_assert_uint_eq(a.measured, b.measured);
    run_free(&a);
    run_free(&b);

    mg_graph *g = mg_graph_new();
    mg_tensor w = mg_param(g, "w", MG_F32, 1, S(4));
    mg_tensor y = mg_sum(g, mg_tanh(g, w), 0, NULL, 0);
    mg_tensor gw;
    const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .store16 = 2};
    ck_assert_int_eq(mg_gradients(g, &y, 1, NULL, &w, 1, &ck, &gw),
                     MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "store16 = 2"));
    mg_graph_free(g);
}
END_TEST

TH_MAIN("store16", "store16", 60, test_bf16_rounding,
        test_none_halves_saved_and_stays_close,
        test_backward_reads_bf16_of_forward, test_memory_policy_predicted,
        test_f64_untouched_and_bad_flag)
