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
 *
 * Pooling (max and average, forward and backward) through oneDNN
 * (MG_POOL=onednn) against the loops (MG_POOL=loops) on inputs full of
 * ties: max pooling bit for bit (the same first maximum, never padding,
 * NaN winning), average pooling within rounding; which steps take
 * oneDNN; predicted peak = measured peak on both paths; and checkpointed
 * gradients of a small CNN equal plain backprop's bit for bit with oneDNN
 * pooling on.
 */
#include "helpers.h"

#include "exec/cpu/cpu_kernels.h"
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
    k->y = mg_conv2d(k->g, k->x, k->w, q->sh, q->sw, q->ph, q->pw, q->dh, q->dw,
                     q->groups);
    TH_OK_T(q->name, k->y);
    int64_t ys[MG_MAX_DIMS];
    int nd = 0;
    ck_assert_int_eq(mg_tensor_shape(k->g, k->y, &nd, ys), MG_OK);
    ck_assert_int_eq(nd, 4);
    k->r = mg_input(k->g, "r", dt, 4, ys);
    mg_tensor loss = mg_sum(k->g, mg_mul(k->g, k->y, k->r), 0, NULL, 0);
    const mg_tensor wrt[2] = {k->x, k->w};
    mg_tensor g[2];
    ck_assert_int_eq(mg_gradients(k->g, &loss, 1, NULL, wrt, 2, NULL, g),
                     MG_OK);
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
        const mg_binding b[6] = {in[0],    in[1],      in[2],
                                 {k.y, y}, {k.gx, gx}, {k.gw, gw}};
        const mg_binding b2[6] = {in[0],     in[1],       in[2],
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
        mg_kargs a = {.op = st->op,
                      .attrs = plan->g->nodes[plan->steps[s]].attrs,
                      .n_in = st->n_in};
        for (int i = 0; i < st->n_in; i++)
            a.in[i].d = *mg_plan_desc(plan, st->in[i]);
        a.out.d = *mg_plan_desc(plan, plan->steps[s]);
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

/* ---- pooling ------------------------------------------------------------ */

typedef struct pgeom {
    const char *name;
    int64_t n, c, h, w;
    mg_pool2d_opts o; /* kh, kw, sh, sw, pads t l b r, ceil_mode, cip */
    int avg_loops;    /* the avg pool stays on the loops (divisor) */
} pgeom;

static const pgeom pgeoms[] = {
    {"ResNet stem 3x3/2 pad 1",
     2,
     8,
     16,
     16,
     {3, 3, 2, 2, 1, 1, 1, 1, 0, 1},
     0},
    {"2x2/2", 2, 4, 8, 8, {2, 2, 2, 2, 0, 0, 0, 0, 0, 1}, 0},
    {"3x3/1 pad 1", 1, 3, 7, 9, {3, 3, 1, 1, 1, 1, 1, 1, 0, 1}, 0},
    {"3x2 stride 2x1, short last window",
     2,
     3,
     8,
     7,
     {3, 2, 2, 1, 0, 0, 0, 0, 0, 1},
     0},
    {"pads t0 l1 b1 r0", 1, 3, 7, 6, {3, 2, 2, 1, 0, 1, 1, 0, 0, 1}, 0},
    {"pads t0 l1 b1 r0 count_include_pad=0",
     1,
     3,
     7,
     6,
     {3, 2, 2, 1, 0, 1, 1, 0, 0, 0},
     0},
    {"SAME_UPPER 2x2/2 on 5x5", 1, 2, 5, 5, {2, 2, 2, 2, 0, 0, 1, 1, 0, 0}, 0},
    /* the ceil window overhangs the end padding: oneDNN's include-padding
     * divisor would be 9 there, PyTorch's (and memgrad's) 6 */
    {"ceil_mode 3x3/2 pad 1", 1, 3, 6, 6, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, 1},
    {"ceil_mode count_include_pad=0",
     1,
     3,
     6,
     6,
     {3, 3, 2, 2, 1, 1, 1, 1, 1, 0},
     0},
};

static const char *const pool_paths[] = {"onednn", "loops"};

/* y = pool(x) for max and avg, and each one's dL/dx for L = sum(y * r). */
typedef struct pool_case {
    mg_graph *g;
    mg_tensor x, rm, ra, ym, ya, gm, ga;
    int64_t nx, ny;
} pool_case;

static void pool_case_build(pool_case *k, const pgeom *q) {
    k->g = mg_graph_new();
    const int64_t xs[4] = {q->n, q->c, q->h, q->w};
    k->x = mg_input(k->g, "x", MG_F32, 4, xs);
    k->ym = mg_max_pool2d_ex(k->g, k->x, &q->o);
    k->ya = mg_avg_pool2d_ex(k->g, k->x, &q->o);
    TH_OK_T(q->name, k->ym);
    TH_OK_T(q->name, k->ya);
    int64_t ys[MG_MAX_DIMS];
    int nd = 0;
    ck_assert_int_eq(mg_tensor_shape(k->g, k->ym, &nd, ys), MG_OK);
    k->rm = mg_input(k->g, "rm", MG_F32, 4, ys);
    k->ra = mg_input(k->g, "ra", MG_F32, 4, ys);
    ck_assert_int_eq(
        mg_gradients(k->g, &k->ym, 1, &k->rm, &k->x, 1, NULL, &k->gm), MG_OK);
    ck_assert_int_eq(
        mg_gradients(k->g, &k->ya, 1, &k->ra, &k->x, 1, NULL, &k->ga), MG_OK);
    k->nx = th_numel(4, xs);
    k->ny = th_numel(4, ys);
}

/* Each output in the order ym, ya, gm, ga, for one path. */
typedef struct pool_out {
    float *v[4];
} pool_out;

static void pool_run_path(const pool_case *k, const char *path, const float *x,
                          const float *rm, const float *ra, pool_out *o,
                          const char *what) {
    setenv("MG_POOL", path, 1);
    const mg_tensor outs[4] = {k->ym, k->ya, k->gm, k->ga};
    const int64_t n[4] = {k->ny, k->ny, k->nx, k->nx};
    mg_binding b[7] = {
        {k->x, (void *)x}, {k->rm, (void *)rm}, {k->ra, (void *)ra}};
    for (int i = 0; i < 4; i++) {
        o->v[i] = malloc((size_t)n[i] * sizeof(float));
        ck_assert_ptr_nonnull(o->v[i]);
        b[3 + i] = (mg_binding){outs[i], o->v[i]};
    }
    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    ck_assert_int_eq(mg_plan_compile(k->g, outs, 4, NULL, &plan), MG_OK);
    ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
    mg_status st = mg_exec_run(ex, plan, b, 7, 1);
    ck_assert_msg(st == MG_OK, "%s, MG_POOL=%s: %s", what, path,
                  mg_last_error());
    mg_pool_stats ps;
    ck_assert_int_eq(mg_exec_pool_stats(ex, &ps), MG_OK);
    ck_assert_msg(ps.peak_bytes_in_use == mg_plan_predicted_peak(plan, b, 7),
                  "%s, MG_POOL=%s: measured peak %zu, predicted %zu", what,
                  path, ps.peak_bytes_in_use,
                  mg_plan_predicted_peak(plan, b, 7));
    mg_exec_free(ex);
    mg_plan_free(plan);
    unsetenv("MG_POOL");
}

/* x from 5 levels (-1, -0.5, 0, 0.5, 1): most windows hold tied maxima;
 * with nan_at >= 0 a NaN there. With int_rm, rm holds small integers, so
 * that the max-pool gradient's sums are exact in any order. */
static void pool_values(const pool_case *k, int gi, int64_t nan_at, int int_rm,
                        float **x, float **rm, float **ra) {
    th_rng rng;
    th_rng_init(&rng, 2000 + (uint64_t)gi);
    double *d = malloc((size_t)(k->nx + 2 * k->ny) * sizeof *d);
    *x = malloc((size_t)k->nx * sizeof **x);
    *rm = malloc((size_t)k->ny * sizeof **rm);
    *ra = malloc((size_t)k->ny * sizeof **ra);
    ck_assert(d && *x && *rm && *ra);
    th_fill_f64(&rng, d, k->nx + 2 * k->ny, -1, 1, 0);
    for (int64_t i = 0; i < k->nx; i++)
        (*x)[i] = (float)(floor(d[i] * 2.5 + 0.5) / 2);
    if (nan_at >= 0) (*x)[nan_at] = NAN;
    for (int64_t i = 0; i < k->ny; i++) {
        (*rm)[i] =
            int_rm ? (float)floor(d[k->nx + i] * 8) : (float)d[k->nx + i];
        (*ra)[i] = (float)d[k->nx + k->ny + i];
    }
    free(d);
}

/* Max pooling picks the same element on both paths, ties and NaN
 * included: the same y, and with integer gy (exact sums) the same
 * gradient bits. oneDNN adds the gy of overlapping windows sharing an
 * argmax in another order than the loops (output order), so with other gy
 * the max-pool gradient agrees to rounding only, as average pooling
 * does. */
START_TEST(test_pool_paths_agree) {
    const pgeom *q = &pgeoms[_i];
    pool_case k;
    pool_case_build(&k, q);
    for (int v = 0; v < 3; v++) {
        const int with_nan = v == 1, int_rm = v < 2;
        float *x, *rm, *ra;
        pool_values(&k, _i, with_nan ? k.nx / 2 + 1 : -1, int_rm, &x, &rm, &ra);
        char what[160];
        snprintf(what, sizeof what, "%s%s%s", q->name,
                 with_nan ? ", a NaN in x" : "",
                 int_rm ? ", integer gy" : ", real gy");
        pool_out o[2];
        for (int p = 0; p < 2; p++)
            pool_run_path(&k, pool_paths[p], x, rm, ra, &o[p], what);
        /* max pooling: the same element, so the same bits */
        ck_assert_msg(
            !memcmp(o[0].v[0], o[1].v[0], (size_t)k.ny * sizeof(float)),
            "%s: max_pool2d differs between the paths", what);
        double *ref = malloc((size_t)k.nx * sizeof *ref);
        ck_assert_ptr_nonnull(ref);
        if (int_rm) {
            ck_assert_msg(
                !memcmp(o[0].v[2], o[1].v[2], (size_t)k.nx * sizeof(float)),
                "%s: max_pool2d_grad differs between the paths", what);
        } else {
            for (int64_t i = 0; i < k.nx; i++) ref[i] = o[1].v[2][i];
            th_check_f32(what, o[0].v[2], ref, k.nx, 1e-6, 1e-6);
        }
        /* average pooling: sums in another order */
        for (int64_t i = 0; i < k.ny; i++) ref[i] = o[1].v[1][i];
        th_check_f32(what, o[0].v[1], ref, k.ny, 1e-6, 1e-6);
        for (int64_t i = 0; i < k.nx; i++) ref[i] = o[1].v[3][i];
        th_check_f32(what, o[0].v[3], ref, k.nx, 1e-6, 1e-6);
        free(ref);
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < 4; i++) free(o[p].v[i]);
        free(x), free(rm), free(ra);
    }
    mg_graph_free(k.g);
}
END_TEST

/* Which pooling steps take oneDNN: with MG_POOL=onednn every f32 one
 * where the library has it, but an average pool whose divisor oneDNN
 * lacks; with MG_POOL=loops none; never f64. */
START_TEST(test_pool_onednn_taken) {
    for (size_t gi = 0; gi < sizeof pgeoms / sizeof pgeoms[0]; gi++) {
        const pgeom *q = &pgeoms[gi];
        pool_case k;
        pool_case_build(&k, q);
        const mg_tensor outs[4] = {k.ym, k.ya, k.gm, k.ga};
        mg_plan *plan = NULL;
        /* the plan lends what oneDNN needs wherever it may run */
        setenv("MG_POOL", "onednn", 1);
        ck_assert_int_eq(mg_plan_compile(k.g, outs, 4, NULL, &plan), MG_OK);
        unsetenv("MG_POOL");
        int pools = 0;
        for (int32_t s = 0; s < plan->n_steps; s++) {
            const mg_plan_step *st = &plan->step[s];
            const bool avg =
                st->op == MG_OP_AVG_POOL2D || st->op == MG_OP_AVG_POOL2D_GRAD;
            if (!avg && st->op != MG_OP_MAX_POOL2D &&
                st->op != MG_OP_MAX_POOL2D_GRAD)
                continue;
            mg_kargs a = {.op = st->op,
                          .attrs = plan->g->nodes[plan->steps[s]].attrs,
                          .n_in = st->n_in};
            for (int i = 0; i < st->n_in; i++)
                a.in[i].d = *mg_plan_desc(plan, st->in[i]);
            a.out.d = *mg_plan_desc(plan, plan->steps[s]);
            size_t bytes = 0;
            pools++;
            for (size_t p = 0; p < 2; p++) {
                setenv("MG_POOL", pool_paths[p], 1);
                bool on = mgi_onednn_pool_workspace(&a, &bytes);
                ck_assert_msg(on == (mgi_onednn_conv_available() && p == 0 &&
                                     !(avg && q->avg_loops)),
                              "%s: %s %s oneDNN", q->name, mgi_op_str(st->op),
                              on ? "takes" : "skips");
                /* the plan lent it */
                if (on) ck_assert_uint_le(bytes, mg_plan_step_work(st));
            }
            /* unset: oneDNN where it has a JIT kernel (which this test
             * cannot tell), never where MG_POOL=onednn would not take it */
            unsetenv("MG_POOL");
            bytes = 0;
            if (mgi_onednn_pool_workspace(&a, &bytes)) {
                ck_assert(mgi_onednn_conv_available() &&
                          !(avg && q->avg_loops));
                ck_assert_uint_le(bytes, mg_plan_step_work(st));
            }
            for (int i = 0; i < st->n_in; i++) a.in[i].d.dtype = MG_F64;
            a.out.d.dtype = MG_F64;
            ck_assert(!mgi_onednn_pool_workspace(&a, &bytes));
        }
        ck_assert_int_eq(pools, 4);
        mg_plan_free(plan);
        mg_graph_free(k.g);
    }
}
END_TEST

/* A small CNN (conv, relu, max pool 3x3/2, conv, relu, avg pool 2x2/2):
 * its weight gradients under a checkpointing policy that recomputes the
 * pools equal plain backprop's bit for bit with oneDNN pooling on (and
 * the predicted peak is the measured one). */
START_TEST(test_pool_checkpoint_bits) {
    float *grads[2][2] = {{NULL}};
    size_t gbytes[2] = {0};
    int64_t recomputed_pools = 0;
    /* oneDNN's pools wherever it has them, the max pool's overlapping
     * backward included (by default that one runs the loops) */
    setenv("MG_POOL", "onednn", 1);
    for (int v = 0; v < 2; v++) {
        mg_graph *g = mg_graph_new();
        const int64_t xs[4] = {2, 3, 12, 12}, w1s[4] = {8, 3, 3, 3},
                      w2s[4] = {8, 8, 3, 3};
        mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
        mg_tensor w1 = mg_param(g, "w1", MG_F32, 4, w1s);
        mg_tensor w2 = mg_param(g, "w2", MG_F32, 4, w2s);
        mg_tensor h1 = mg_relu(g, mg_conv2d(g, x, w1, 1, 1, 1, 1, 1, 1, 1));
        mg_tensor p1 = mg_max_pool2d(g, h1, 3, 3, 2, 2, 1, 1);
        mg_tensor h2 = mg_relu(g, mg_conv2d(g, p1, w2, 1, 1, 1, 1, 1, 1, 1));
        mg_tensor p2 = mg_avg_pool2d(g, h2, 2, 2, 2, 2, 0, 0);
        mg_tensor loss = mg_sum(g, mg_mul(g, p2, p2), 0, NULL, 0);
        /* keep the convolutions' outputs only: both pools and relus are
         * recomputed in the backward pass */
        const mg_tensor kept[1] = {h1};
        mg_checkpoints c = {.policy = v ? MG_CKPT_COLLECTION : MG_CKPT_NONE,
                            .tensors = kept,
                            .n_tensors = 1};
        const mg_tensor wrt[2] = {w1, w2};
        mg_tensor gw[2];
        ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 2, &c, gw),
                         MG_OK);
        if (v)
            for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++)
                recomputed_pools += mg_tensor_is_recompute(g, t) &&
                                    (mg_tensor_recompute_source(g, t) == p1 ||
                                     mg_tensor_recompute_source(g, t) == p2);
        th_rng rng;
        th_rng_init(&rng, 77);
        const int64_t n[3] = {th_numel(4, xs), th_numel(4, w1s),
                              th_numel(4, w2s)};
        float *in[3];
        for (int i = 0; i < 3; i++) {
            double *d = malloc((size_t)n[i] * sizeof *d);
            in[i] = malloc((size_t)n[i] * sizeof **in);
            ck_assert(d && in[i]);
            th_fill_f64(&rng, d, n[i], -1, 1, 0);
            for (int64_t j = 0; j < n[i]; j++) in[i][j] = (float)d[j];
            free(d);
        }
        for (int i = 0; i < 2; i++) {
            gbytes[i] = (size_t)n[1 + i] * sizeof(float);
            grads[v][i] = malloc(gbytes[i]);
            ck_assert_ptr_nonnull(grads[v][i]);
        }
        mg_plan *plan = NULL;
        mg_exec *ex = NULL;
        const mg_binding b[5] = {{x, in[0]},
                                 {w1, in[1]},
                                 {w2, in[2]},
                                 {gw[0], grads[v][0]},
                                 {gw[1], grads[v][1]}};
        ck_assert_int_eq(mg_plan_compile(g, gw, 2, NULL, &plan), MG_OK);
        ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
        ck_assert_msg(mg_exec_run(ex, plan, b, 5, 1) == MG_OK, "%s",
                      mg_last_error());
        mg_pool_stats ps;
        ck_assert_int_eq(mg_exec_pool_stats(ex, &ps), MG_OK);
        ck_assert_uint_eq(ps.peak_bytes_in_use,
                          mg_plan_predicted_peak(plan, b, 5));
        mg_exec_free(ex);
        mg_plan_free(plan);
        for (int i = 0; i < 3; i++) free(in[i]);
        mg_graph_free(g);
    }
    ck_assert_int_ge(recomputed_pools, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(!memcmp(grads[0][i], grads[1][i], gbytes[i]),
                      "checkpointed gradient %d differs from plain "
                      "backprop's",
                      i);
        free(grads[0][i]);
        free(grads[1][i]);
    }
    unsetenv("MG_POOL");
}
END_TEST

int main(void) {
    Suite *s = suite_create("onednn");
    th_add_tcase_loops(
        s, "paths", 120,
        TH_LOOPS({test_paths_agree, 0, (int)(sizeof geoms / sizeof geoms[0])}),
        TH_TESTS(test_onednn_taken));
    th_add_tcase_loops(
        s, "pool", 120,
        TH_LOOPS({test_pool_paths_agree, 0,
                  (int)(sizeof pgeoms / sizeof pgeoms[0])}),
        TH_TESTS(test_pool_onednn_taken, test_pool_checkpoint_bits));
    return th_run_suite(s);
}
