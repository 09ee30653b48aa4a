/*
 * test_onednn.c - the CPU convolution paths of issue 14 against each
 * other: conv2d, its input gradient and its weight gradient (groups,
 * dilation, stride, padding, non-square shapes, a 1x1 kernel) through
 * oneDNN with blocked layouts (MG_CONV=onednn), oneDNN on plain layouts
 * (onednn-plain) and im2col + GEMM (im2col), all in f32, against an f64
 * im2col reference. Also: the oneDNN paths really are taken where the
 * library has oneDNN, a step's workspace is what the plan lent (predicted
 * peak = measured peak), and a primitive run twice gives the same bits.
 * Where memgrad was built without oneDNN every path is im2col and the
 * comparisons still run.
 */
#include "helpers.h"

#include "exec/cpu_kernels.h"
#include "rewrite/schedule.h"

#include <stdlib.h>

typedef struct geom {
    const char *name;
    int64_t n, c, h, w, o, kh, kw;
    int sh, sw, ph, pw, dh, dw, groups;
} geom;

static const geom geoms[] = {
    {"3x3 pad 1", 2, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {"grouped", 3, 6, 8, 8, 9, 3, 3, 1, 1, 1, 1, 1, 1, 3},
    {"strided dilated", 2, 4, 11, 10, 8, 3, 2, 2, 1, 2, 1, 2, 1, 2},
    {"1x1", 2, 16, 5, 6, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1},
    {"1x1 stride 2", 2, 16, 6, 6, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1},
    {"5x5 stride 3 pad 2", 1, 3, 13, 12, 5, 5, 5, 3, 3, 2, 2, 1, 1, 1},
    {"depthwise", 2, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8},
};

static const char *const paths[] = {"onednn", "onednn-plain", "im2col"};

/* y = conv(x, w); outputs y, dL/dx and dL/dw for L = sum(y * r). */
typedef struct conv_case {
    mg_graph *g;
    mg_tensor x, w, r, y, gx, gw;
    int64_t nx, nw, ny;
} conv_case;

static void case_build(conv_case *k, const geom *q, mg_dtype dt) {
    k->g = mg_graph_new();
    const int64_t xs[4] = {q->n, q->c, q->h, q->w};
    const int64_t ws[4] = {q->o, q->c / q->groups, q->kh, q->kw};
    k->x = mg_input(k->g, "x", dt, 4, xs);
    k->w = mg_param(k->g, "w", dt, 4, ws);
    k->y = mg_conv2d(k->g, k->x, k->w, q->sh, q->sw, q->ph, q->pw, q->dh,
                     q->dw, q->groups);
    TH_OK_T(q->name, k->y);
    int64_t ys[MG_MAX_DIMS];
    int nd = 0;
    ck_assert_int_eq(mg_tensor_shape(k->g, k->y, &nd, ys), MG_OK);
    ck_assert_int_eq(nd, 4);
    k->r = mg_input(k->g, "r", dt, 4, ys);
    mg_tensor loss = mg_sum(k->g, mg_mul(k->g, k->y, k->r), 0, NULL, 0);
    const mg_tensor wrt[2] = {k->x, k->w};
    mg_tensor g[2];
    ck_assert_int_eq(mg_gradients(k->g, &loss, 1, NULL, wrt, 2, NULL, g), MG_OK);
    k->gx = g[0];
    k->gw = g[1];
    k->nx = th_numel(4, xs);
    k->nw = th_numel(4, ws);
    k->ny = th_numel(4, ys);
}

/* The values in f64 (deterministic from the geometry's index). */
static void case_values(const conv_case *k, int gi, double **x, double **w,
                        double **r) {
    th_rng rng;
    th_rng_init(&rng, 1000 + (uint64_t)gi);
    *x = malloc((size_t)k->nx * sizeof **x);
    *w = malloc((size_t)k->nw * sizeof **w);
    *r = malloc((size_t)k->ny * sizeof **r);
    ck_assert(*x && *w && *r);
    th_fill_f64(&rng, *x, k->nx, -1, 1, 0);
    th_fill_f64(&rng, *w, k->nw, -1, 1, 0);
    th_fill_f64(&rng, *r, k->ny, -1, 1, 0);
    /* through float, so the f32 runs see the reference's numbers */
    for (int64_t i = 0; i < k->nx; i++) (*x)[i] = (float)(*x)[i];
    for (int64_t i = 0; i < k->nw; i++) (*w)[i] = (float)(*w)[i];
    for (int64_t i = 0; i < k->ny; i++) (*r)[i] = (float)(*r)[i];
}

static float *to_f32(const double *d, int64_t n) {
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}

START_TEST(test_paths_agree) {
    const geom *q = &geoms[_i];
    /* the reference: f64, which every build convolves by im2col */
    conv_case ref;
    case_build(&ref, q, MG_F64);
    double *x, *w, *r;
    case_values(&ref, _i, &x, &w, &r);
    double *ey = malloc((size_t)ref.ny * sizeof *ey);
    double *egx = malloc((size_t)ref.nx * sizeof *egx);
    double *egw = malloc((size_t)ref.nw * sizeof *egw);
    {
        const mg_binding in[3] = {{ref.x, x}, {ref.w, w}, {ref.r, r}};
        const mg_tensor outs[3] = {ref.y, ref.gx, ref.gw};
        void *const bufs[3] = {ey, egx, egw};
        TH_RUN_OK(q->name, ref.g, 3, outs, bufs, 3, in, 1);
    }
    conv_case k;
    case_build(&k, q, MG_F32);
    float *fx = to_f32(x, k.nx), *fw = to_f32(w, k.nw), *fr = to_f32(r, k.ny);
    float *y = malloc((size_t)k.ny * sizeof *y);
    float *gx = malloc((size_t)k.nx * sizeof *gx);
    float *gw = malloc((size_t)k.nw * sizeof *gw);
    float *y2 = malloc((size_t)k.ny * sizeof *y2);
    float *gx2 = malloc((size_t)k.nx * sizeof *gx2);
    float *gw2 = malloc((size_t)k.nw * sizeof *gw2);
    const mg_binding in[3] = {{k.x, fx}, {k.w, fw}, {k.r, fr}};
    const mg_tensor outs[3] = {k.y, k.gx, k.gw};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        setenv("MG_CONV", paths[p], 1);
        char what[160];
        snprintf(what, sizeof what, "%s, MG_CONV=%s", q->name, paths[p]);
        /* plan and executor made under this path, as a user would */
        mg_plan *plan = NULL;
        mg_exec *ex = NULL;
        ck_assert_int_eq(mg_plan_compile(k.g, outs, 3, NULL, &plan), MG_OK);
        ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
        const mg_binding b[6] = {in[0], in[1], in[2],
                                 {k.y, y}, {k.gx, gx}, {k.gw, gw}};
        const mg_binding b2[6] = {in[0], in[1], in[2],
                                  {k.y, y2}, {k.gx, gx2}, {k.gw, gw2}};
        mg_status st = mg_exec_run(ex, plan, b, 6, 1);
        ck_assert_msg(st == MG_OK, "%s: %s", what, mg_last_error());
        mg_pool_stats ps;
        ck_assert_int_eq(mg_exec_pool_stats(ex, &ps), MG_OK);
        ck_assert_msg(ps.peak_bytes_in_use ==
                          mg_plan_predicted_peak(plan, b, 6),
                      "%s: measured peak %zu, predicted %zu", what,
                      ps.peak_bytes_in_use, mg_plan_predicted_peak(plan, b, 6));
        th_check_f32(what, y, ey, k.ny, 1e-4, 1e-4);
        th_check_f32(what, gx, egx, k.nx, 1e-4, 1e-4);
        th_check_f32(what, gw, egw, k.nw, 1e-4, 1e-4);
        /* the same primitives again: the same bits */
        ck_assert_int_eq(mg_exec_run(ex, plan, b2, 6, 1), MG_OK);
        ck_assert_msg(!memcmp(y, y2, (size_t)k.ny * sizeof *y) &&
                          !memcmp(gx, gx2, (size_t)k.nx * sizeof *gx) &&
                          !memcmp(gw, gw2, (size_t)k.nw * sizeof *gw),
                      "%s: a second run differs", what);
        mg_exec_free(ex);
        mg_plan_free(plan);
    }
    unsetenv("MG_CONV");
    free(y), free(gx), free(gw), free(y2), free(gx2), free(gw2);
    free(fx), free(fw), free(fr);
    free(ey), free(egx), free(egw);
    free(x), free(w), free(r);
    mg_graph_free(k.g);
    mg_graph_free(ref.g);
}
END_TEST

/* Where the library has oneDNN, an f32 conv2d and both gradients take it
 * (the CPU workspace query answers for oneDNN), f64 never does, and
 * MG_CONV=im2col turns it off. */
START_TEST(test_onednn_taken) {
    conv_case k;
    case_build(&k, &geoms[0], MG_F32);
    mg_plan *plan = NULL;
    const mg_tensor outs[3] = {k.y, k.gx, k.gw};
    ck_assert_int_eq(mg_plan_compile(k.g, outs, 3, NULL, &plan), MG_OK);
    int convs = 0, taken = 0;
    for (int32_t s = 0; s < plan->n_steps; s++) {
        const mg_plan_step *st = &plan->step[s];
        if (st->op != MG_OP_CONV2D && st->op != MG_OP_CONV2D_GRAD_INPUT &&
            st->op != MG_OP_CONV2D_GRAD_WEIGHT)
            continue;
        mg_kargs a = {.op = st->op, .attrs = &st->attrs, .n_in = st->n_in};
        for (int i = 0; i < st->n_in; i++) a.in[i].d = plan->tensor[st->in[i]].d;
        a.out.d = plan->tensor[st->t].d;
        size_t bytes = 0;
        convs++;
        for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
            setenv("MG_CONV", paths[p], 1);
            bool on = mgi_onednn_conv_workspace(&a, &bytes);
            ck_assert_int_eq(on, mgi_onednn_conv_available() && p < 2);
            taken += on;
        }
        a.out.d.dtype = MG_F64;
        unsetenv("MG_CONV");
        ck_assert(!mgi_onednn_conv_workspace(&a, &bytes));
    }
    unsetenv("MG_CONV");
    ck_assert_int_eq(convs, 3);
    if (mgi_onednn_conv_available()) ck_assert_int_eq(taken, 6);
    mg_plan_free(plan);
    mg_graph_free(k.g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("onednn");
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_paths_agree, 0,
                        (int)(sizeof geoms / sizeof geoms[0]));
    tcase_add_test(tc, test_onednn_taken);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
