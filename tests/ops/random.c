/*
 * ops/random.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * dropout: identity at p = 0, scale and rate, seeds, two dropouts in one
 * graph, every keep decision as docs/ops.md specifies it, bad p.
 */
#include "../helpers.h"
#include "common/rng.h"

/* ------------------------------------------------------------------ dropout */

#define DROP_N 100000

/* run dropout(x, p, opseed) on DROP_N values in [1,2) with run seed */
static void drop_run(mg_dtype dt, double p, uint64_t opseed, uint64_t run_seed,
                     const double *xv, double *out) {
    fw f;
    fw_begin(&f, dt);
    mg_tensor x = fw_in(&f, 1, S(DROP_N), xv);
    mg_tensor y = mg_dropout(f.g, x, p, opseed);
    fw_run(&f, "dropout", y, 1, S(DROP_N), out, run_seed);
    fw_end(&f);
}

static double *drop_input(void) {
    th_rng r;
    th_rng_init(&r, 99);
    double *x = malloc(sizeof(double) * DROP_N);
    ck_assert(x != NULL);
    th_rand_vals(&r, x, DROP_N, 1, 2);
    return x;
}

START_TEST(test_dropout_p0_identity) {
    double *x = drop_input(), *o = malloc(sizeof(double) * DROP_N);
    ck_assert(o != NULL);
    for (int di = 0; di < 2; di++) {
        drop_run(th_dtypes[di], 0.0, 3, 42, x, o);
        for (int i = 0; i < DROP_N; i++)
            ck_assert_msg(o[i] == x[i],
                          "dropout p=0 (%s): element %d is %.17g, input "
                          "%.17g",
                          mg_dtype_name(th_dtypes[di]), i, o[i], x[i]);
    }
    free(x);
    free(o);
}
END_TEST

START_TEST(test_dropout_scale_and_rate) {
    double *x = drop_input(), *o = malloc(sizeof(double) * DROP_N);
    ck_assert(o != NULL);
    const double ps[3] = {0.3, 0.5, 0.9};
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            double p = ps[pi];
            drop_run(th_dtypes[di], p, 3, 42, x, o);
            int64_t dropped = 0;
            double rtol = th_dtypes[di] == MG_F32 ? 1e-6 : 1e-14;
            for (int i = 0; i < DROP_N; i++) {
                if (o[i] == 0.0) {
                    dropped++;
                    continue;
                }
                double e = x[i] / (1.0 - p);
                ck_assert_msg(fabs(o[i] - e) <= rtol * e,
                              "dropout p=%g (%s): kept element %d is %.17g, "
                              "expected x/(1-p) = %.17g",
                              p, mg_dtype_name(th_dtypes[di]), i, o[i], e);
            }
            double frac = (double)dropped / DROP_N;
            /* binomial std <= 0.0016 at n=1e5: 0.01 is > 6 sigma */
            ck_assert_msg(fabs(frac - p) < 0.01,
                          "dropout p=%g (%s): dropped fraction %.4f, "
                          "expected about %g",
                          p, mg_dtype_name(th_dtypes[di]), frac, p);
        }
    free(x);
    free(o);
}
END_TEST

static int64_t mask_diff(const double *a, const double *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += (a[i] == 0.0) != (b[i] == 0.0);
    return d;
}

START_TEST(test_dropout_seeds) {
    double *x = drop_input();
    double *o1 = malloc(sizeof(double) * DROP_N);
    double *o2 = malloc(sizeof(double) * DROP_N);
    ck_assert(o1 && o2);
    for (int di = 0; di < 2; di++) {
        const char *dn = mg_dtype_name(th_dtypes[di]);
        /* same run seed: bit for bit, across two plans/execs */
        drop_run(th_dtypes[di], 0.5, 3, 42, x, o1);
        drop_run(th_dtypes[di], 0.5, 3, 42, x, o2);
        ck_assert_msg(memcmp(o1, o2, sizeof(double) * DROP_N) == 0,
                      "dropout (%s): same run seed gave different outputs", dn);
        /* different run seed: a different mask (about half differ) */
        drop_run(th_dtypes[di], 0.5, 3, 43, x, o2);
        int64_t d = mask_diff(o1, o2, DROP_N);
        ck_assert_msg(d > DROP_N / 4,
                      "dropout (%s): run seeds 42 and 43 give masks that "
                      "differ in only %lld of %d elements",
                      dn, (long long)d, DROP_N);
        /* different op seed, same run seed: a different mask */
        drop_run(th_dtypes[di], 0.5, 4, 42, x, o2);
        d = mask_diff(o1, o2, DROP_N);
        ck_assert_msg(d > DROP_N / 4,
                      "dropout (%s): op seeds 3 and 4 give masks that "
                      "differ in only %lld of %d elements",
                      dn, (long long)d, DROP_N);
    }
    free(x);
    free(o1);
    free(o2);
}
END_TEST

/* two dropout ops with the same attributes in one graph get their own
 * offsets, hence different masks; one run reproduces both */
START_TEST(test_dropout_two_ops_one_graph) {
    double *x = drop_input();
    double *o[4];
    for (int i = 0; i < 4; i++) {
        o[i] = malloc(sizeof(double) * DROP_N);
        ck_assert(o[i] != NULL);
    }
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor t = mg_input(g, "x", MG_F64, 1, S(DROP_N));
    mg_tensor y[2];
    y[0] = mg_dropout(g, t, 0.5, 7);
    y[1] = mg_dropout(g, t, 0.5, 7);
    TH_OK_T("dropout", y[0]);
    TH_OK_T("dropout", y[1]);
    mg_binding b = {t, x};
    void *bufs[2] = {o[0], o[1]};
    TH_RUN_OK("two dropouts", g, 2, y, bufs, 1, &b, 42);
    void *bufs2[2] = {o[2], o[3]};
    TH_RUN_OK("two dropouts again", g, 2, y, bufs2, 1, &b, 42);
    mg_graph_free(g);
    int64_t d = mask_diff(o[0], o[1], DROP_N);
    ck_assert_msg(d > DROP_N / 4,
                  "two dropout ops (same p and seed) in one graph share a "
                  "mask: only %lld of %d elements differ",
                  (long long)d, DROP_N);
    ck_assert_msg(memcmp(o[0], o[2], sizeof(double) * DROP_N) == 0 &&
                      memcmp(o[1], o[3], sizeof(double) * DROP_N) == 0,
                  "two dropout ops: a second run with the same seed differs");
    for (int i = 0; i < 4; i++) free(o[i]);
    free(x);
}
END_TEST

/* The CPU kernel's integer threshold (rng.h) decides exactly as docs/ops.md's
 * mg_rng_uniform(h) >= p: at p where p 2^53 is and is not an integer, and
 * at hashes just below, at and above each threshold. */
START_TEST(test_dropout_keep_threshold_exact) {
    const double ps[] = {
        0.0, 0x1p-53, 0x3p-54, 1e-300,        0.1,
        0.3, 0.5,     0.9,     1.0 - 0x1p-53, nextafter(0.7, 0.0)};
    th_rng r;
    th_rng_init(&r, 5);
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        const double p = ps[pi];
        const uint64_t thr = mg_rng_keep_threshold(p);
        for (int i = 0; i < 20000; i++) {
            uint64_t h;
            if (i < 6) { /* k = thr - 1 .. thr + 1, low bits 0 or all ones */
                const uint64_t k = thr - 1 + (uint64_t)(i / 2);
                h = (k << 11) | (i % 2 ? 0x7ffu : 0u);
            } else {
                h = th_rng_next(&r);
            }
            ck_assert_msg(mg_rng_keep(h, thr) == (mg_rng_uniform(h) >= p),
                          "p = %a, h = %#llx: integer keep %d, spec %d", p,
                          (unsigned long long)h, mg_rng_keep(h, thr),
                          mg_rng_uniform(h) >= p);
        }
    }
}
END_TEST

/* Every element's keep decision is docs/ops.md's formula, evaluated here
 * from the first dropout op's counters [0, n). */
START_TEST(test_dropout_matches_spec) {
    double *x = drop_input(), *o = malloc(sizeof(double) * DROP_N);
    ck_assert(o != NULL);
    const double ps[3] = {0.1, 0.5, 0.9};
    const uint64_t key = mg_rng_key(42, 3);
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            drop_run(th_dtypes[di], ps[pi], 3, 42, x, o);
            for (int i = 0; i < DROP_N; i++) {
                const bool keep =
                    mg_rng_uniform(mg_rng_hash(key, (uint64_t)i)) >= ps[pi];
                ck_assert_msg((o[i] != 0.0) == keep,
                              "dropout p=%g (%s): element %d is %.17g, the "
                              "spec %s it",
                              ps[pi], mg_dtype_name(th_dtypes[di]), i, o[i],
                              keep ? "keeps" : "drops");
            }
        }
    free(x);
    free(o);
}
END_TEST

START_TEST(test_dropout_bad_p) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F32, 1, S(4));
    ck_assert_msg(mg_dropout(g, x, 1.0, 0) == MG_NO_TENSOR,
                  "dropout p=1 must fail (p in [0,1))");
    ck_assert_msg(mg_dropout(g, x, -0.1, 0) == MG_NO_TENSOR,
                  "dropout p=-0.1 must fail");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_random_tcase, "random", 60, test_dropout_p0_identity,
        test_dropout_scale_and_rate, test_dropout_seeds,
        test_dropout_two_ops_one_graph, test_dropout_keep_threshold_exact,
        test_dropout_matches_spec, test_dropout_bad_p)
