/*
 * test_half.c - bfloat16 and float16 (issue 47): the dtypes, their
 * conversions, cast between every float dtype with its gradient, and every
 * op family's forward value and gradient in both 16-bit types on the CPU.
 *
 * - conversions: float32 and float64 to 16 bits against a reference that
 *   picks the nearest of all 65536 16-bit values (ties to even, overflow
 *   to infinity, subnormals, signed zero, NaN), and widening exact;
 * - cast: each of f64/f32/bf16/f16 to each, values rounded once; the
 *   gradient is the seed cast back;
 * - per op: the op built on bf16 (f16) leaves and on f64 leaves holding the
 *   same (16-bit) values, with the same 16-bit seed gradient; the 16-bit
 *   output and input gradients must lie within a bound of the f64 result
 *   rounded to the 16-bit type, in units in the last place (ulps) of the
 *   tensor's largest magnitude (docs/half.md lists the bounds and what was
 *   measured; the test prints each op's worst);
 * - float32 accumulation: the sum of 10^5 bfloat16 values is the exact sum
 *   rounded once (bfloat16 accumulation would be off by hundreds of ulps);
 * - widening's workspace is planned: predicted peak == measured peak;
 * - mixing a 16-bit tensor with a float32 one is MG_ERR_DTYPE naming the op.
 * (Checkpointed 16-bit models bit for bit: test_models.c.)
 */
#include "helpers.h"

#include "backend/kernel_shared.h" /* the elementwise op lists */
#include "common/half.h"
#include "common/widen.h"

#include <float.h>
#include <math.h>

/* ------------------------------------------------------------ reference */

/* Every finite non-negative value of a 16-bit format in increasing order,
 * with its bits, and infinity's bits after the largest (at 2^(emax+1), so
 * that the overflow rule is the nearest-value rule). */
typedef struct ref16 {
    int n;
    double v[65536];
    uint16_t bits[65536];
} ref16;

static double from16(mg_dtype dt, uint16_t h) {
    return dt == MG_BF16 ? mg_f32_from_bf16(h) : mg_f32_from_f16(h);
}

static ref16 *ref_make(mg_dtype dt) {
    ref16 *r = malloc(sizeof *r);
    ck_assert(r);
    r->n = 0;
    const uint16_t inf = dt == MG_BF16 ? 0x7f80 : 0x7c00;
    for (uint32_t h = 0; h < inf; h++) { /* positive patterns increase */
        r->v[r->n] = from16(dt, (uint16_t)h);
        r->bits[r->n++] = (uint16_t)h;
    }
    r->v[r->n] = dt == MG_BF16 ? ldexp(1, 128) : ldexp(1, 16);
    r->bits[r->n++] = inf;
    return r;
}

/* x (not NaN) rounded to nearest, ties to the even pattern. */
static uint16_t ref_round(const ref16 *r, double x) {
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs(x);
    if (a >= r->v[r->n - 1]) return sign | r->bits[r->n - 1];
    int lo = 0, hi = r->n - 1; /* v[lo] <= a < v[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (r->v[mid] <= a) lo = mid;
        else hi = mid;
    }
    const double dl = a - r->v[lo], dh = r->v[hi] - a;
    const int pick = dl < dh ? lo : dh < dl ? hi : (r->bits[lo] & 1 ? hi : lo);
    return sign | r->bits[pick];
}

static uint16_t to16(mg_dtype dt, double x) {
    return dt == MG_BF16 ? mg_bf16_from_f64(x) : mg_f16_from_f64(x);
}
static uint16_t to16f(mg_dtype dt, float x) {
    return dt == MG_BF16 ? mg_bf16_from_f32(x) : mg_f16_from_f32(x);
}

static void check_conversions(mg_dtype dt) {
    ref16 *r = ref_make(dt);
    const char *dn = mg_dtype_name(dt);
    /* widening is exact and narrowing gives the pattern back */
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = (float)from16(dt, (uint16_t)h);
        if (isnan(f)) {
            ck_assert_msg(isnan(from16(dt, to16f(dt, f))), "%s NaN 0x%04x", dn,
                          h);
            continue;
        }
        ck_assert_msg(to16f(dt, f) == h && to16(dt, f) == h,
                      "%s 0x%04x -> %g -> 0x%04x", dn, h, f, to16f(dt, f));
    }
    /* every midpoint between neighbours and a value either side of it */
    for (int i = 0; i + 1 < r->n; i++) {
        const double mid = 0.5 * (r->v[i] + r->v[i + 1]);
        const double xs[3] = {mid, nextafter(mid, 0), nextafter(mid, INFINITY)};
        for (int k = 0; k < 3; k++)
            for (int s = 0; s < 2; s++) {
                const double x = s ? -xs[k] : xs[k];
                const uint16_t want = ref_round(r, x);
                ck_assert_msg(to16(dt, x) == want,
                              "%s from f64 %.17g: 0x%04x, want 0x%04x", dn, x,
                              to16(dt, x), want);
                const float f = (float)x;
                if ((double)f == x)
                    ck_assert_msg(to16f(dt, f) == want,
                                  "%s from f32 %.9g: 0x%04x, want 0x%04x", dn,
                                  f, to16f(dt, f), want);
            }
    }
    /* random float32 and float64 values over the whole range */
    th_rng g;
    th_rng_init(&g, 47);
    for (int i = 0; i < 500000; i++) {
        uint32_t u = (uint32_t)th_rng_next(&g);
        float f;
        memcpy(&f, &u, sizeof f);
        if (isnan(f)) continue;
        ck_assert_msg(to16f(dt, f) == ref_round(r, f),
                      "%s from f32 0x%08x: 0x%04x, want 0x%04x", dn, u,
                      to16f(dt, f), ref_round(r, f));
        uint64_t w = th_rng_next(&g);
        double x;
        memcpy(&x, &w, sizeof x);
        if (isnan(x)) continue;
        ck_assert_msg(to16(dt, x) == ref_round(r, x),
                      "%s from f64 %.17g: 0x%04x, want 0x%04x", dn, x,
                      to16(dt, x), ref_round(r, x));
    }
    /* NaN: quiet, of its sign; infinities and signed zeros */
    ck_assert(isnan(from16(dt, to16(dt, NAN))));
    ck_assert(isnan(from16(dt, to16f(dt, -NAN))) &&
              signbit(from16(dt, to16f(dt, -NAN))));
    ck_assert(from16(dt, to16(dt, INFINITY)) == INFINITY);
    ck_assert(from16(dt, to16(dt, -INFINITY)) == -INFINITY);
    ck_assert(to16(dt, -0.0) == 0x8000);
    free(r);
}

START_TEST(test_bf16_conversions) { check_conversions(MG_BF16); }
END_TEST
START_TEST(test_f16_conversions) { check_conversions(MG_F16); }
END_TEST

/* float16's named cases: the largest finite, the overflow tie, the
 * subnormals, the rounding of 2^-25 (a tie, to zero) and just above it. */
START_TEST(test_f16_edges) {
    ck_assert_uint_eq(mg_f16_from_f32(65504.0f), 0x7bff);
    ck_assert_uint_eq(mg_f16_from_f32(65519.99f), 0x7bff);
    ck_assert_uint_eq(mg_f16_from_f32(65520.0f), 0x7c00);
    ck_assert_uint_eq(mg_f16_from_f32(0x1p-24f), 0x0001);
    ck_assert_uint_eq(mg_f16_from_f32(0x1p-25f), 0x0000);
    ck_assert_uint_eq(mg_f16_from_f32(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(mg_f16_from_f32(0x1.8p-24f), 0x0002); /* tie to even */
    ck_assert_uint_eq(mg_f16_from_f32(0x1p-14f), 0x0400);
    ck_assert_uint_eq(mg_f16_from_f32(0x1.ffcp-15f), 0x0400); /* tie, up */
    ck_assert(mg_f32_from_f16(0x0001) == 0x1p-24f);
    ck_assert(mg_f32_from_f16(0x03ff) == 0x1.ff8p-15f);
    ck_assert_uint_eq(mg_bf16_from_f64(0x1.0101p0), 0x3f81); /* no 2 roundings */
    ck_assert_uint_eq(mg_f16_from_f64(0x1.002000001p0), 0x3c01);
}
END_TEST

START_TEST(test_dtype_names) {
    ck_assert_str_eq(mg_dtype_name(MG_BF16), "bf16");
    ck_assert_str_eq(mg_dtype_name(MG_F16), "f16");
    ck_assert_uint_eq(mg_dtype_size(MG_BF16), 2);
    ck_assert_uint_eq(mg_dtype_size(MG_F16), 2);
    ck_assert_int_eq(MG_F32, 0); /* the old codes keep their values */
    ck_assert_int_eq(MG_I64, 3);
}
END_TEST

/* ------------------------------------------------------- buffers by dtype */

static void *buf_new(mg_dtype dt, int64_t n) {
    void *p = calloc((size_t)(n ? n : 1), mg_dtype_size(dt));
    ck_assert(p);
    return p;
}
static void buf_set(mg_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case MG_F32: ((float *)p)[i] = (float)v; break;
    case MG_F64: ((double *)p)[i] = v; break;
    case MG_BF16: ((uint16_t *)p)[i] = mg_bf16_from_f64(v); break;
    case MG_F16: ((uint16_t *)p)[i] = mg_f16_from_f64(v); break;
    case MG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case MG_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}
static double buf_get(mg_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case MG_F32: return ((const float *)p)[i];
    case MG_F64: return ((const double *)p)[i];
    case MG_BF16: return mg_f32_from_bf16(((const uint16_t *)p)[i]);
    case MG_F16: return mg_f32_from_f16(((const uint16_t *)p)[i]);
    case MG_I32: return ((const int32_t *)p)[i];
    case MG_I64: return (double)((const int64_t *)p)[i];
    }
    return 0;
}

/* ------------------------------------------------------------------- cast */

START_TEST(test_cast_every_float_pair) {
    const mg_dtype fl[4] = {MG_F64, MG_F32, MG_BF16, MG_F16};
    enum { N = 64 };
    th_rng g;
    th_rng_init(&g, 3);
    double vals[N];
    for (int i = 0; i < N; i++) vals[i] = th_rng_range(&g, -300, 300, 0);
    vals[0] = 1 + 0x1p-9 + 0x1p-30; /* just above a bf16 tie */
    vals[1] = 70000;                /* past float16's range */
    vals[2] = 0x1p-20;              /* a float16 subnormal */
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            mg_graph *gr = mg_graph_new();
            mg_tensor x = mg_param(gr, "x", fl[a], 1, S(N));
            mg_tensor y = mg_cast(gr, x, fl[b]);
            mg_tensor gy = mg_input(gr, "gy", fl[b], 1, S(N)), gx;
            ck_assert_msg(y >= 0, "%s", mg_last_error());
            ck_assert_msg(mg_gradients(gr, &y, 1, &gy, &x, 1, NULL, &gx) ==
                              MG_OK,
                          "%s", mg_last_error());
            void *xb = buf_new(fl[a], N), *yb = buf_new(fl[b], N);
            void *gyb = buf_new(fl[b], N), *gxb = buf_new(fl[a], N);
            for (int i = 0; i < N; i++) {
                buf_set(fl[a], xb, i, vals[i]);
                buf_set(fl[b], gyb, i, vals[N - 1 - i] / 8);
            }
            const mg_binding in[2] = {{x, xb}, {gy, gyb}};
            const mg_tensor outs[2] = {y, gx};
            void *ob[2] = {yb, gxb};
            ck_assert_msg(th_run(gr, 2, outs, ob, 2, in, 1) == MG_OK, "%s",
                          th_errmsg);
            for (int i = 0; i < N; i++) {
                /* the source value, converted once to the target */
                void *want = buf_new(fl[b], 1), *wg = buf_new(fl[a], 1);
                buf_set(fl[b], want, 0, buf_get(fl[a], xb, i));
                buf_set(fl[a], wg, 0, buf_get(fl[b], gyb, i));
                const size_t eb = mg_dtype_size(fl[b]), ea = mg_dtype_size(fl[a]);
                ck_assert_msg(!memcmp((char *)yb + i * eb, want, eb),
                              "cast %s -> %s [%d]: %.9g, want %.9g",
                              mg_dtype_name(fl[a]), mg_dtype_name(fl[b]), i,
                              buf_get(fl[b], yb, i), buf_get(fl[b], want, 0));
                ck_assert_msg(!memcmp((char *)gxb + i * ea, wg, ea),
                              "cast %s -> %s gradient [%d]: %.9g, want %.9g",
                              mg_dtype_name(fl[a]), mg_dtype_name(fl[b]), i,
                              buf_get(fl[a], gxb, i), buf_get(fl[a], wg, 0));
                free(want);
                free(wg);
            }
            free(xb), free(yb), free(gyb), free(gxb);
            mg_graph_free(gr);
        }
}
END_TEST

/* 16 bits to and from the integers: truncated toward zero, saturated. */
START_TEST(test_cast_integers) {
    mg_graph *gr = mg_graph_new();
    mg_tensor x = mg_input(gr, "x", MG_BF16, 1, S(4));
    mg_tensor i = mg_cast(gr, x, MG_I32), h = mg_cast(gr, i, MG_F16);
    uint16_t xb[4], hb[4];
    int32_t ib[4];
    const double v[4] = {-2.75, 3.5, 1e30, -0.5};
    for (int k = 0; k < 4; k++) xb[k] = mg_bf16_from_f64(v[k]);
    const mg_binding in[1] = {{x, xb}};
    const mg_tensor outs[2] = {i, h};
    void *ob[2] = {ib, hb};
    ck_assert_msg(th_run(gr, 2, outs, ob, 1, in, 1) == MG_OK, "%s", th_errmsg);
    ck_assert_int_eq(ib[0], -2);
    ck_assert_int_eq(ib[1], 3);
    ck_assert_int_eq(ib[2], INT32_MAX);
    ck_assert_int_eq(ib[3], 0);
    ck_assert(mg_f32_from_f16(hb[2]) == INFINITY); /* 2^31 - 1 > 65504 */
    ck_assert(mg_f32_from_f16(hb[0]) == -2.0f);
    mg_graph_free(gr);
}
END_TEST

/* ---------------------------------------------------------------- per op */

/* A case: n_in float leaves of the given shapes with values in [lo, hi)
 * (|x| >= minabs), the op built on them; bounds in ulps of the largest
 * magnitude of the output (fwd) and of each input gradient (grad). */
typedef mg_tensor (*build_fn)(mg_graph *g, const mg_tensor *x, mg_dtype dt);
typedef struct op_case {
    const char *name;
    build_fn build;
    int n_in;
    int ndim[3];
    int64_t shape[3][4];
    double lo, hi, minabs;
    double fwd_ulps, grad_ulps;
    int no_grad; /* comparisons and other ops without a gradient */
} op_case;

/* ulp of the 16-bit type at magnitude a (the spacing of values there) */
static double ulp16(mg_dtype dt, double a) {
    const int frac = dt == MG_BF16 ? 7 : 10, emin = dt == MG_BF16 ? -126 : -14;
    int e = a > 0 ? ilogb(a) : emin;
    if (e < emin) e = emin;
    return ldexp(1, e - frac);
}

/* Worst |got - round16(ref)| over the tensor, in ulps of max |ref|. */
static double ulps_scaled(mg_dtype dt, const void *got, const double *ref,
                          int64_t n) {
    double big = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(ref[i]));
    const double u = ulp16(dt, big);
    for (int64_t i = 0; i < n; i++) {
        const double want = from16(dt, to16(dt, ref[i]));
        const double g = buf_get(dt, got, i);
        if (isnan(g) || isnan(want)) return (isnan(g) && isnan(want)) ? worst
                                                                     : INFINITY;
        worst = fmax(worst, fabs(g - want) / u);
    }
    return worst;
}

typedef struct run_out {
    void *y, *gx[3];
    int64_t ny, nx[3];
} run_out;

/* Builds the case in dt with leaf values vals and seed gy, runs forward and
 * backward, and returns outputs and input gradients in out. Also checks
 * that the measured pool peak equals the predicted one. */
static void run_case(const op_case *c, mg_dtype dt, double *const *vals,
                     const double *gyv, run_out *o) {
    mg_graph *g = mg_graph_new();
    mg_tensor x[3], gx[3];
    for (int k = 0; k < c->n_in; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", k);
        x[k] = mg_param(g, nm, dt, c->ndim[k], c->shape[k]);
    }
    mg_tensor y = c->build(g, x, dt);
    ck_assert_msg(y >= 0, "%s %s: %s", c->name, mg_dtype_name(dt),
                  mg_last_error());
    const mg_dtype ydt = dt;
    int yn;
    int64_t ys[MG_MAX_DIMS];
    mg_tensor_shape(g, y, &yn, ys);
    o->ny = mg_tensor_numel(g, y);
    mg_tensor gy = mg_input(g, "gy", ydt, yn, ys);
    int no = 1;
    mg_tensor outs[4] = {y};
    if (!c->no_grad) {
        ck_assert_msg(mg_gradients(g, &y, 1, &gy, x, c->n_in, NULL, gx) ==
                          MG_OK,
                      "%s %s: gradients: %s", c->name, mg_dtype_name(dt),
                      mg_last_error());
        for (int k = 0; k < c->n_in; k++) outs[no++] = gx[k];
    }
    mg_binding b[8];
    int nb = 0;
    void *xb[3], *gyb = buf_new(ydt, o->ny);
    for (int k = 0; k < c->n_in; k++) {
        o->nx[k] = mg_tensor_numel(g, x[k]);
        xb[k] = buf_new(dt, o->nx[k]);
        for (int64_t i = 0; i < o->nx[k]; i++) buf_set(dt, xb[k], i, vals[k][i]);
        b[nb++] = (mg_binding){x[k], xb[k]};
    }
    for (int64_t i = 0; i < o->ny; i++) buf_set(ydt, gyb, i, gyv[i]);
    if (!c->no_grad) b[nb++] = (mg_binding){gy, gyb};
    o->y = buf_new(ydt, o->ny);
    b[nb++] = (mg_binding){y, o->y};
    for (int k = 0; k < c->n_in && !c->no_grad; k++) {
        o->gx[k] = buf_new(dt, o->nx[k]);
        if (gx[k] != gy) b[nb++] = (mg_binding){gx[k], o->gx[k]};
    }
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(g, outs, no, NULL, &p) == MG_OK,
                  "%s %s: compile: %s", c->name, mg_dtype_name(dt),
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 9) == MG_OK, "%s %s: run: %s",
                  c->name, mg_dtype_name(dt), mg_last_error());
    for (int k = 0; k < c->n_in && !c->no_grad; k++)
        if (gx[k] == gy) /* add's gradient is the seed itself */
            memcpy(o->gx[k], gyb, (size_t)o->ny * mg_dtype_size(dt));
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    const size_t predicted = mg_plan_predicted_peak(p, b, nb);
    ck_assert_msg(ps.peak_bytes_in_use == predicted,
                  "%s %s: measured peak %zu, predicted %zu", c->name,
                  mg_dtype_name(dt), ps.peak_bytes_in_use, predicted);
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int k = 0; k < c->n_in; k++) free(xb[k]);
    free(gyb);
    mg_graph_free(g);
}

static void check_case(const op_case *c, mg_dtype dt) {
    th_rng r;
    th_rng_init(&r, 101);
    double *vals[3];
    for (int k = 0; k < c->n_in; k++) {
        const int64_t n = th_numel(c->ndim[k], c->shape[k]);
        vals[k] = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++) /* values the 16-bit type holds */
            vals[k][i] =
                from16(dt, to16(dt, th_rng_range(&r, c->lo, c->hi, c->minabs)));
    }
    /* the seed: as many values as the output has; 4096 is enough here */
    double gyv[4096];
    for (int i = 0; i < 4096; i++)
        gyv[i] = from16(dt, to16(dt, th_rng_range(&r, -1, 1, 0.05)));
    run_out h = {0}, d = {0};
    run_case(c, dt, vals, gyv, &h);
    ck_assert(h.ny <= 4096);
    run_case(c, MG_F64, vals, gyv, &d);
    const double fw = ulps_scaled(dt, h.y, d.y, h.ny);
    double gw = 0;
    for (int k = 0; k < c->n_in && !c->no_grad; k++)
        gw = fmax(gw, ulps_scaled(dt, h.gx[k], d.gx[k], h.nx[k]));
    printf("half: %-14s %-4s forward %.2f ulps (bound %.0f), gradient %.2f "
           "ulps (bound %.0f)\n",
           c->name, mg_dtype_name(dt), fw, c->fwd_ulps, gw, c->grad_ulps);
    ck_assert_msg(fw <= c->fwd_ulps, "%s %s: forward %.3g ulps > %g", c->name,
                  mg_dtype_name(dt), fw, c->fwd_ulps);
    ck_assert_msg(gw <= c->grad_ulps, "%s %s: gradient %.3g ulps > %g",
                  c->name, mg_dtype_name(dt), gw, c->grad_ulps);
    free(h.y), free(d.y);
    for (int k = 0; k < c->n_in; k++) {
        free(vals[k]);
        free(h.gx[k]), free(d.gx[k]);
    }
}

/* builders */
#define UNARY(fn)                                                              \
    static mg_tensor b_##fn(mg_graph *g, const mg_tensor *x, mg_dtype dt) {   \
        (void)dt;                                                              \
        return mg_##fn(g, x[0]);                                               \
    }
#define BINARY(fn)                                                             \
    static mg_tensor b_##fn(mg_graph *g, const mg_tensor *x, mg_dtype dt) {   \
        (void)dt;                                                              \
        return mg_##fn(g, x[0], x[1]);                                         \
    }
UNARY(relu) UNARY(gelu) UNARY(silu) UNARY(tanh) UNARY(sigmoid) UNARY(exp)
UNARY(log) UNARY(sqrt) UNARY(erf) UNARY(reciprocal) UNARY(rsqrt) UNARY(sin)
UNARY(cos) UNARY(abs) UNARY(neg)
BINARY(add) BINARY(sub) BINARY(mul) BINARY(div) BINARY(maximum)
BINARY(minimum) BINARY(lt)
static mg_tensor b_pow(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_pow(g, x[0], 3);
}
static mg_tensor b_scale(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_scale(g, x[0], 0.3);
}
static mg_tensor b_clamp(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_clamp(g, x[0], -0.5, 0.75);
}
static mg_tensor b_leaky(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_leaky_relu(g, x[0], 0.1);
}
static mg_tensor b_matmul(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_matmul(g, x[0], x[1], 0, 1);
}
static mg_tensor b_sum(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_sum(g, x[0], 1, AX(1), 0);
}
static mg_tensor b_mean(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_mean(g, x[0], 0, NULL, 0);
}
static mg_tensor b_softmax(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_softmax(g, x[0], -1);
}
static mg_tensor b_log_softmax(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_log_softmax(g, x[0], -1);
}
static mg_tensor b_layernorm(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_layernorm(g, x[0], x[1], x[2], 1, 1e-5);
}
static mg_tensor b_batchnorm(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_batchnorm(g, x[0], x[1], x[2], 1e-5);
}
static mg_tensor labels(mg_graph *g, int64_t n, int classes) {
    /* 0, 1, 2, ... mod classes, made in the graph */
    mg_tensor i = mg_cumsum(g, mg_fill(g, MG_F64, 1, S(n), 1), 0);
    i = mg_sub(g, i, mg_fill(g, MG_F64, 1, S(n), 1));
    i = mg_sub(g, i, mg_scale(g, mg_cast(g, mg_cast(g, mg_scale(g, i,
                      1.0 / classes), MG_I32), MG_F64), classes));
    return mg_cast(g, i, MG_I32);
}
static mg_tensor b_cross_entropy(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_cross_entropy(g, x[0], labels(g, 6, 5));
}
static mg_tensor b_mse(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_mse(g, x[0], x[1]);
}
static mg_tensor b_conv(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_conv2d(g, x[0], x[1], 1, 1, 1, 1, 1, 1, 1);
}
static mg_tensor b_maxpool(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_max_pool2d(g, x[0], 2, 2, 2, 2, 0, 0);
}
static mg_tensor b_avgpool(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_avg_pool2d(g, x[0], 3, 3, 1, 1, 1, 1);
}
static mg_tensor b_attention(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_attention(g, x[0], x[1], x[2], 1, 0);
}
static mg_tensor b_embedding(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_embedding(g, x[0], labels(g, 9, 7));
}
static mg_tensor b_permute(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_permute(g, x[0], AX(2, 0, 1));
}
static mg_tensor b_concat_slice(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_slice(g, mg_concat(g, 2, x, 1), 1, 2, 5);
}
static mg_tensor b_cumsum(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_cumsum(g, x[0], 1);
}
static mg_tensor b_bcast_add(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_add(g, x[0], x[1]);
}
static mg_tensor b_dropout(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_dropout(g, x[0], 0.25, 5);
}
static mg_tensor b_where(mg_graph *g, const mg_tensor *x, mg_dtype dt) {
    (void)dt;
    return mg_where(g, mg_gt(g, x[0], x[1]), x[0], x[1]);
}

#define SH1(a) {1, 0, 0}, {{a}}
#define SH2(a, b) {2, 2, 0}, {{a, b}, {a, b}}

static const op_case cases[] = {
    /* elementwise: computed in float32 and rounded once: 1 ulp */
    {"relu", b_relu, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    {"gelu", b_gelu, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 1, 0},
    {"silu", b_silu, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 1, 0},
    {"tanh", b_tanh, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    {"sigmoid", b_sigmoid, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 2, 0},
    {"exp", b_exp, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    {"log", b_log, 1, {2}, {{6, 40}}, 0.1, 4, 0, 1, 2, 0},
    {"sqrt", b_sqrt, 1, {2}, {{6, 40}}, 0.1, 4, 0, 1, 2, 0},
    {"erf", b_erf, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 2, 0},
    {"pow", b_pow, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 2, 0},
    {"reciprocal", b_reciprocal, 1, {2}, {{6, 40}}, 0.5, 3, 0, 1, 2, 0},
    {"rsqrt", b_rsqrt, 1, {2}, {{6, 40}}, 0.5, 3, 0, 1, 2, 0},
    {"sin", b_sin, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 1, 0},
    {"cos", b_cos, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 1, 0},
    {"abs", b_abs, 1, {2}, {{6, 40}}, -2, 2, 0.01, 1, 1, 0},
    {"neg", b_neg, 1, {2}, {{6, 40}}, -2, 2, 0, 0, 0, 0},
    {"scale", b_scale, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    {"clamp", b_clamp, 1, {2}, {{6, 40}}, -2, 2, 0, 0, 0, 0},
    {"leaky_relu", b_leaky, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    {"add", b_add, 2, SH2(6, 40), -2, 2, 0, 1, 0, 0},
    {"sub", b_sub, 2, SH2(6, 40), -2, 2, 0, 1, 0, 0},
    {"mul", b_mul, 2, SH2(6, 40), -2, 2, 0, 1, 1, 0},
    {"div", b_div, 2, SH2(6, 40), 0.5, 2, 0, 1, 3, 0},
    {"maximum", b_maximum, 2, SH2(6, 40), -2, 2, 0, 0, 0, 0},
    {"minimum", b_minimum, 2, SH2(6, 40), -2, 2, 0, 0, 0, 0},
    {"lt", b_lt, 2, SH2(6, 40), -2, 2, 0, 0, 0, 1},
    {"where", b_where, 2, SH2(6, 40), -2, 2, 0, 0, 0, 0},
    /* broadcast: the float32-copies path; its gradient sums over rows */
    {"add_bcast", b_bcast_add, 2, {2, 1}, {{6, 40}, {40}}, -2, 2, 0, 1, 1, 0},
    {"dropout", b_dropout, 1, {2}, {{6, 40}}, -2, 2, 0, 1, 1, 0},
    /* float32 accumulation, rounded once */
    {"matmul", b_matmul, 2, {2, 2}, {{5, 48}, {7, 48}}, -1, 1, 0, 1, 1, 0},
    {"sum", b_sum, 1, {2}, {{6, 40}}, -1, 1, 0, 1, 0, 0},
    {"mean", b_mean, 1, {2}, {{6, 40}}, -1, 1, 0, 1, 0, 0},
    {"cumsum", b_cumsum, 1, {2}, {{6, 40}}, -1, 1, 0, 1, 1, 0},
    {"softmax", b_softmax, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 2, 0},
    {"log_softmax", b_log_softmax, 1, {2}, {{6, 40}}, -3, 3, 0, 1, 2, 0},
    {"layernorm", b_layernorm, 3, {2, 1, 1}, {{6, 40}, {40}, {40}}, -2, 2, 0,
     1, 2, 0},
    {"batchnorm", b_batchnorm, 3, {4, 1, 1}, {{4, 3, 5, 5}, {3}, {3}}, -2, 2,
     0, 1, 2, 0},
    {"cross_entropy", b_cross_entropy, 1, {2}, {{6, 5}}, -3, 3, 0, 1, 1, 0},
    {"mse", b_mse, 2, SH2(6, 40), -2, 2, 0, 1, 1, 0},
    {"conv2d", b_conv, 2, {4, 4}, {{2, 3, 6, 6}, {4, 3, 3, 3}}, -1, 1, 0, 1, 1,
     0},
    {"max_pool2d", b_maxpool, 1, {4}, {{2, 3, 6, 6}}, -2, 2, 0, 0, 0, 0},
    {"avg_pool2d", b_avgpool, 1, {4}, {{2, 3, 6, 6}}, -2, 2, 0, 1, 1, 0},
    {"attention", b_attention, 3, {4, 4, 4},
     {{2, 2, 7, 8}, {2, 2, 7, 8}, {2, 2, 7, 8}}, -1, 1, 0, 1, 2, 0},
    {"embedding", b_embedding, 1, {2}, {{7, 12}}, -2, 2, 0, 0, 1, 0},
    {"permute", b_permute, 1, {3}, {{3, 4, 5}}, -2, 2, 0, 0, 0, 0},
    {"concat_slice", b_concat_slice, 2, SH2(6, 4), -2, 2, 0, 0, 0, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_op_bf16) { check_case(&cases[_i], MG_BF16); }
END_TEST
START_TEST(test_op_f16) { check_case(&cases[_i], MG_F16); }
END_TEST

/* -------------------------------------------------- float32 accumulation */

START_TEST(test_sum_accumulates_in_f32) {
    enum { N = 100000 };
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_BF16, 1, S(N));
    mg_tensor s = mg_sum(g, x, 0, NULL, 0), m = mg_mean(g, x, 0, NULL, 0);
    uint16_t *xb = malloc(N * sizeof *xb), sb, mb;
    th_rng r;
    th_rng_init(&r, 5);
    double exact = 0;
    uint16_t naive = 0; /* what summing in bfloat16 gives */
    for (int i = 0; i < N; i++) {
        xb[i] = mg_bf16_from_f64(th_rng_range(&r, 0, 1, 0));
        exact += mg_f32_from_bf16(xb[i]);
        naive = mg_bf16_from_f32(mg_f32_from_bf16(naive) +
                                 mg_f32_from_bf16(xb[i]));
    }
    const mg_binding in[1] = {{x, xb}};
    const mg_tensor outs[2] = {s, m};
    void *ob[2] = {&sb, &mb};
    ck_assert_msg(th_run(g, 2, outs, ob, 1, in, 1) == MG_OK, "%s", th_errmsg);
    const double u = ulp16(MG_BF16, exact);
    const double got = mg_f32_from_bf16(sb);
    ck_assert_msg(fabs(got - from16(MG_BF16, mg_bf16_from_f64(exact))) <= u,
                  "sum of 1e5 bf16: %.9g, exact %.9g", got, exact);
    ck_assert_msg(fabs(mg_f32_from_bf16(naive) - exact) > 100 * u,
                  "a bfloat16 accumulation would be off: %.9g vs %.9g",
                  mg_f32_from_bf16(naive), exact);
    const double mean = mg_f32_from_bf16(mb);
    ck_assert_msg(fabs(mean - exact / N) <= ulp16(MG_BF16, exact / N),
                  "mean of 1e5 bf16: %.9g, exact %.9g", mean, exact / N);
    free(xb);
    mg_graph_free(g);
}
END_TEST

/* Every op of kernel_shared.h's elementwise lists runs block-wise (no
 * workspace, so mg_exec_accumulate's add borrows none), a broadcast one
 * and any other op on copies the plan counts. */
START_TEST(test_widen_lists) {
    const mg_tdesc a = {MG_BF16, 2, {3, 5}}, in[3] = {a, a, a};
#define BLOCKWISE(name, OP, expr)                                              \
    ck_assert_msg(mgi_widen_blockwise(MG_OP_##OP, 2, in, &a) &&                \
                      mgi_widen_bytes(MG_OP_##OP, 2, in, &a) == 0,             \
                  #name " is not block-wise");
    MG_UNARY_OPS(BLOCKWISE) MG_BINARY_OPS(BLOCKWISE) MG_COMPARE_OPS(BLOCKWISE)
#undef BLOCKWISE
    const mg_tdesc row = {MG_BF16, 1, {5}}, bc[2] = {a, row};
    ck_assert(!mgi_widen_blockwise(MG_OP_ADD, 2, bc, &a));
    /* [3,5] and [5] and the output [3,5], each as float32 in 64-byte lines */
    ck_assert_uint_eq(mgi_widen_bytes(MG_OP_ADD, 2, bc, &a), 64 + 64 + 64);
    const mg_tdesc w = {MG_F16, 2, {5, 100}}, mm[2] = {a, w},
                   y = {MG_F16, 2, {3, 100}};
    ck_assert_uint_eq(mgi_widen_bytes(MG_OP_MATMUL, 2, mm, &y),
                      64 + 2048 + 1216);
    const mg_tdesc f = {MG_F32, 2, {3, 5}}, ff[2] = {f, f};
    ck_assert(!mgi_widen_needed(MG_OP_ADD, 2, ff, &f));
    ck_assert(!mgi_widen_needed(MG_OP_CAST, 1, ff, &a));
    /* byte movers run on the 16-bit data as it is */
    const mg_tdesc aa[2] = {a, a};
    ck_assert(!mgi_widen_needed(MG_OP_RESHAPE, 1, aa, &a));
    ck_assert(!mgi_widen_needed(MG_OP_CONCAT, 2, aa, &a));
    ck_assert(mgi_widen_needed(MG_OP_PERMUTE, 1, aa, &a));
}
END_TEST

/* mg_exec_accumulate into a bf16 gradient: the sum rounded once, and the
 * add borrows no workspace (block-wise), so the pool reserves the plan's
 * arena and the accumulation slot, nothing more. */
START_TEST(test_accumulate_bf16) {
    enum { N = 64, K = 32, M = 16 };
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_BF16, 2, S(N, K));
    mg_tensor w = mg_param(g, "w", MG_BF16, 2, S(K, M)), gw;
    mg_tensor loss = mg_mean(g, mg_relu(g, mg_matmul(g, x, w, 0, 0)), 0, NULL,
                             0);
    ck_assert(mg_gradients(g, &loss, 1, NULL, &w, 1, NULL, &gw) == MG_OK);
    uint16_t *xb = malloc(N * K * 2), *wb = malloc(K * M * 2);
    uint16_t *gb = malloc(K * M * 2), *first = malloc(K * M * 2), lb;
    th_rng r;
    th_rng_init(&r, 8);
    for (int i = 0; i < N * K; i++)
        xb[i] = mg_bf16_from_f64(th_rng_range(&r, -1, 1, 0));
    for (int i = 0; i < K * M; i++)
        wb[i] = mg_bf16_from_f64(th_rng_range(&r, -1, 1, 0));
    const mg_tensor outs[2] = {loss, gw};
    mg_binding b[4] = {{x, xb}, {w, wb}, {loss, &lb}, {gw, gb}};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert(mg_plan_compile(g, outs, 2, NULL, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, 4, 1) == MG_OK, "%s", mg_last_error());
    memcpy(first, gb, K * M * 2);
    ck_assert(mg_exec_accumulate(ex, &gw, 1) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, 4, 1) == MG_OK, "%s", mg_last_error());
    for (int i = 0; i < K * M; i++) {
        const float f = mg_f32_from_bf16(first[i]);
        ck_assert_msg(gb[i] == mg_bf16_from_f32(f + f), "[%d]: %g, want %g", i,
                      mg_f32_from_bf16(gb[i]), (double)(f + f));
    }
    mg_plan_arena a;
    ck_assert(mg_plan_arena_info(p, b, 4, &a) == MG_OK);
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    ck_assert_uint_eq(ps.bytes_reserved,
                      a.reserved + mg_pool_size_class(K * M * 2));
    mg_exec_free(ex);
    mg_plan_free(p);
    free(xb), free(wb), free(gb), free(first);
    mg_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------- errors */

START_TEST(test_mixed_dtypes_refused) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_BF16, 1, S(4));
    mg_tensor b = mg_input(g, "b", MG_F32, 1, S(4));
    mg_clear_error();
    ck_assert_int_eq(mg_add(g, a, b), MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_DTYPE);
    ck_assert_msg(strstr(mg_last_error(), "add"), "%s", mg_last_error());
    mg_tensor c = mg_input(g, "c", MG_F16, 2, S(4, 3));
    ck_assert_int_eq(mg_matmul(g, a, c, 0, 0), MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_DTYPE);
    ck_assert_msg(strstr(mg_last_error(), "matmul"), "%s", mg_last_error());
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("conversions");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bf16_conversions);
    tcase_add_test(tc, test_f16_conversions);
    tcase_add_test(tc, test_f16_edges);
    tcase_add_test(tc, test_dtype_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cast_every_float_pair);
    tcase_add_test(tc, test_cast_integers);
    tcase_add_loop_test(tc, test_op_bf16, 0, N_CASES);
    tcase_add_loop_test(tc, test_op_f16, 0, N_CASES);
    tcase_add_test(tc, test_sum_accumulates_in_f32);
    tcase_add_test(tc, test_mixed_dtypes_refused);
    tcase_add_test(tc, test_widen_lists);
    tcase_add_test(tc, test_accumulate_bf16);
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
