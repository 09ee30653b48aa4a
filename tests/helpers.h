/*
 * helpers.h - header-only helpers shared by the Check tests.
 *
 * Every tests/test_*.c is its own executable and includes only this file,
 * so shared code lives here and in helpers/ as static inline functions (no
 * -Wunused-function noise in files that use only part of it).
 *
 *   S() D() AX()    array literals: shapes, double values, axes
 *   th_rng_*        deterministic xorshift64* RNG for random inputs
 *   th_run          compile a plan for some outputs, bind inputs, run once
 *                   with the outputs bound to caller memory, free everything
 *   th_check_*      element-wise comparisons that fail with index and values
 *   th_pool_stats   an executor's pool statistics
 *   TH_MAIN TH_PART th_add_tcase[_loops]
 *                   a test program's main(), a part's case, a case's tests
 *   TH_FAIL         a builder call failed with a status and a message
 *                   naming the op and the reason (th_bad_leaves: bad input)
 *   fw_*            helpers/forward.h: one op's forward values against
 *                   numbers given as doubles, in MG_F32 or MG_F64
 *   gc_*            helpers/gradcheck.h: a finite-difference gradient
 *                   checker (MG_F64) that records which ops it checked
 *                   (the record is helpers/record.c, in the support library)
 *   tm_*            helpers/model.h: a small MLP with its data
 *   th_step_data th_train th_small_model
 *                   helpers/model_step.h (include it): a memgrad_models.h
 *                   model's training step, its memory and plan
 *   mpi_run_suite   helpers/mpi_main.h (include it): the MPI tests' main()
 *
 * Errors of one op's builder are tested with that op, in tests/ops/.
 */
#ifndef MG_TEST_HELPERS_H
#define MG_TEST_HELPERS_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memgrad.h"

/* Array literals for the arguments the builders take by pointer. */
#define S(...) ((const int64_t[]){__VA_ARGS__})
#define D(...) ((const double[]){__VA_ARGS__})
#define AX(...) ((const int[]){__VA_ARGS__})

/* The op families, named as src/graph/ops_*.c: test_ops and test_gradcheck
 * have one part per family, tests/ops/<family>.c and
 * tests/gradcheck/<family>.c. */
#define TH_OP_FAMILIES(X)                                                      \
    X(matmul)                                                                  \
    X(elementwise)                                                             \
    X(reduce)                                                                  \
    X(shape)                                                                   \
    X(softmax)                                                                 \
    X(random)                                                                  \
    X(loss)                                                                    \
    X(conv)                                                                    \
    X(pool)                                                                    \
    X(norm)                                                                    \
    X(slice)                                                                   \
    X(embedding)                                                               \
    X(attention)                                                               \
    X(compare)                                                                 \
    X(gather)                                                                  \
    X(scan)

/* The float dtypes every kernel exists in. */
static const mg_dtype th_dtypes[2] = {MG_F32, MG_F64};

/* ------------------------------------------------------------------ rng */

typedef struct th_rng {
    uint64_t s;
} th_rng;

static inline void th_rng_init(th_rng *r, uint64_t seed) {
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (r->s == 0) r->s = 1;
}

static inline uint64_t th_rng_next(th_rng *r) {
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, 1) */
static inline double th_rng_uniform(th_rng *r) {
    return (double)(th_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* uniform in [lo, hi), resampled while |x| < minabs */
static inline double th_rng_range(th_rng *r, double lo, double hi,
                                  double minabs) {
    double x;
    int tries = 0;
    do {
        x = lo + (hi - lo) * th_rng_uniform(r);
    } while (fabs(x) < minabs && ++tries < 1000);
    return x;
}

static inline void th_fill_f64(th_rng *r, double *d, int64_t n, double lo,
                               double hi, double minabs) {
    for (int64_t i = 0; i < n; i++) d[i] = th_rng_range(r, lo, hi, minabs);
}

static inline void th_fill_f32(th_rng *r, float *d, int64_t n, double lo,
                               double hi, double minabs) {
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)th_rng_range(r, lo, hi, minabs);
}

/* Values in [lo, hi) rounded through float, so f32 and f64 runs of one
 * test see the same numbers. */
static inline void th_rand_vals(th_rng *r, double *d, int64_t n, double lo,
                                double hi) {
    for (int64_t i = 0; i < n; i++)
        d[i] = (double)(float)th_rng_range(r, lo, hi, 0.0);
}

static inline int64_t th_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* ------------------------------------------------------------------ running */

/* The message of the last th_run failure: stage, status and mg_last_error. */
/* The smallest budget that fits, as MG_CKPT_BUDGET's MG_ERR_NOMEM names it
 * in mg_last_error() ("... the smallest budget that fits is N bytes"); the
 * test fails if the message names none. */
static inline size_t th_budget_smallest(void) {
    const char *at = strstr(mg_last_error(), "fits is ");
    ck_assert_msg(at, "no smallest budget in '%s'", mg_last_error());
    return (size_t)strtoull(at + 8, NULL, 10);
}

static char th_errmsg[1024];

/* Compile a plan for `outs` (opts may be NULL), create a CPU exec, bind the
 * inputs `ins` and every output to out_bufs[i] (caller memory, so no pool
 * output is kept), run with `seed`, and free plan and exec. */
static inline mg_status th_run_opts(const mg_graph *g, int n_outs,
                                    const mg_tensor *outs,
                                    void *const *out_bufs, int n_ins,
                                    const mg_binding *ins, uint64_t seed,
                                    const mg_plan_options *opts) {
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    mg_binding *b = NULL;
    int *first = NULL;
    int nb = 0;
    mg_status st;
    th_errmsg[0] = '\0';
    mg_clear_error();
    st = mg_plan_compile(g, outs, n_outs, opts, &p);
    if (st != MG_OK) {
        snprintf(th_errmsg, sizeof th_errmsg, "mg_plan_compile: %s: %s",
                 mg_status_str(st), mg_last_error());
        goto done;
    }
    st = mg_exec_new(NULL, &ex);
    if (st != MG_OK) {
        snprintf(th_errmsg, sizeof th_errmsg, "mg_exec_new: %s: %s",
                 mg_status_str(st), mg_last_error());
        ex = NULL;
        goto done;
    }
    b = (mg_binding *)calloc((size_t)(n_ins + n_outs) + 1, sizeof *b);
    first = (int *)calloc((size_t)n_outs + 1, sizeof *first);
    if (!b || !first) {
        st = MG_ERR_NOMEM;
        snprintf(th_errmsg, sizeof th_errmsg, "test: calloc failed");
        goto done;
    }
    for (int i = 0; i < n_ins; i++) b[i] = ins[i];
    /* an output listed twice is bound once and copied afterwards */
    nb = n_ins;
    for (int i = 0; i < n_outs; i++) {
        first[i] = i;
        for (int j = 0; j < i; j++)
            if (outs[j] == outs[i]) {
                first[i] = j;
                break;
            }
        if (first[i] == i) {
            b[nb].tensor = outs[i];
            b[nb].data = out_bufs[i];
            nb++;
        }
    }
    st = mg_exec_run(ex, p, b, nb, seed);
    if (st != MG_OK) {
        snprintf(th_errmsg, sizeof th_errmsg, "mg_exec_run: %s: %s",
                 mg_status_str(st), mg_last_error());
        goto done;
    }
    for (int i = 0; i < n_outs; i++)
        if (first[i] != i)
            memcpy(out_bufs[i], out_bufs[first[i]],
                   mg_tensor_nbytes(g, outs[i]));
done:
    free(first);
    free(b);
    if (ex) mg_exec_free(ex);
    if (p) mg_plan_free(p);
    return st;
}

static inline mg_status th_run(const mg_graph *g, int n_outs,
                               const mg_tensor *outs, void *const *out_bufs,
                               int n_ins, const mg_binding *ins,
                               uint64_t seed) {
    return th_run_opts(g, n_outs, outs, out_bufs, n_ins, ins, seed, NULL);
}

/* Run and fail the test with the library's message if the run fails. */
#define TH_RUN_OK(what, ...)                                                   \
    do {                                                                       \
        mg_status th_st_ = th_run(__VA_ARGS__);                                \
        ck_assert_msg(th_st_ == MG_OK, "%s: run failed: %s", (what),           \
                      th_errmsg);                                              \
    } while (0)

/* Fail unless builder call result t is a valid tensor. */
#define TH_OK_T(what, t)                                                       \
    ck_assert_msg((t) != MG_NO_TENSOR,                                         \
                  "%s: builder returned MG_NO_TENSOR: %s", (what),             \
                  mg_last_error())

/* Adds a test case `name` of `tests` (TH_TESTS(test_a, test_b, ...)) to s,
 * with a timeout in seconds (0: Check's default). */
#define TH_TESTS(...) ((const TTest *[]){__VA_ARGS__, NULL})

static inline void th_add_tcase(Suite *s, const char *name, double timeout,
                                const TTest **tests) {
    TCase *tc = tcase_create(name);
    if (timeout > 0) tcase_set_timeout(tc, timeout);
    for (int i = 0; tests[i]; i++) tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
}

/* Loop tests for th_add_tcase_loops: each runs with _i from start to
 * end - 1, TH_LOOPS({test_a, 0, 4}, {test_b, 0, n}, ...). */
typedef struct th_loop {
    const TTest *test;
    int start, end;
} th_loop;
#define TH_LOOPS(...) ((const th_loop[]){__VA_ARGS__, {NULL, 0, 0}})

/* th_add_tcase with loop tests first; loops or tests may be NULL. */
static inline void th_add_tcase_loops(Suite *s, const char *name,
                                      double timeout, const th_loop *loops,
                                      const TTest **tests) {
    TCase *tc = tcase_create(name);
    if (timeout > 0) tcase_set_timeout(tc, timeout);
    for (int i = 0; loops && loops[i].test; i++)
        tcase_add_loop_test(tc, loops[i].test, loops[i].start, loops[i].end);
    for (int i = 0; tests && tests[i]; i++) tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
}

/* Run a suite the way every test program does; the exit status. */
static inline int th_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* A part of a test program (tests/ops/<family>.c for test_ops): the
 * function fn, which adds case `name` of the tests listed to the suite. */
#define TH_PART(fn, name, timeout, ...)                                        \
    void fn(Suite *s) { th_add_tcase(s, name, timeout, TH_TESTS(__VA_ARGS__)); }

/* The main() of a test program of one case: suite `suite`, case `name`
 * with a timeout in seconds (0: Check's default), the tests listed. */
#define TH_MAIN(suite, name, timeout, ...)                                     \
    int main(void) {                                                           \
        Suite *th_suite_ = suite_create(suite);                                \
        th_add_tcase(th_suite_, name, timeout, TH_TESTS(__VA_ARGS__));         \
        return th_run_suite(th_suite_);                                        \
    }

/* The executor's pool statistics; fails the test if they cannot be read. */
static inline mg_pool_stats th_pool_stats(const mg_exec *ex) {
    mg_pool_stats s;
    ck_assert(mg_exec_pool_stats(ex, &s) == MG_OK);
    return s;
}

/* ------------------------------------------------------------------ checks */

/* |got - exp| <= atol + rtol * |exp| for every element. */
static inline void th_check_f64(const char *what, const double *got,
                                const double *exp, int64_t n, double atol,
                                double rtol) {
    for (int64_t i = 0; i < n; i++) {
        double e = exp[i], a = got[i];
        int ok = isfinite(a) ? fabs(a - e) <= atol + rtol * fabs(e)
                             : (isnan(a) && isnan(e)) || a == e;
        ck_assert_msg(ok,
                      "%s [f64]: element %lld: got %.17g, expected %.17g "
                      "(diff %.3g)",
                      what, (long long)i, a, e, a - e);
    }
}

static inline void th_check_f32(const char *what, const float *got,
                                const double *exp, int64_t n, double atol,
                                double rtol) {
    for (int64_t i = 0; i < n; i++) {
        double e = exp[i], a = (double)got[i];
        int ok = isfinite(a) ? fabs(a - e) <= atol + rtol * fabs(e)
                             : (isnan(a) && isnan(e)) || a == e;
        ck_assert_msg(ok,
                      "%s [f32]: element %lld: got %.9g, expected %.9g "
                      "(diff %.3g)",
                      what, (long long)i, a, e, a - e);
    }
}

/* The tensor's shape equals (ndim, shape). */
static inline void th_check_shape(const char *what, const mg_graph *g,
                                  mg_tensor t, int ndim, const int64_t *shape) {
    int nd = -1;
    int64_t sh[MG_MAX_DIMS];
    mg_status st = mg_tensor_shape(g, t, &nd, sh);
    ck_assert_msg(st == MG_OK, "%s: mg_tensor_shape failed: %s", what,
                  mg_last_error());
    ck_assert_msg(nd == ndim, "%s: ndim is %d, expected %d", what, nd, ndim);
    for (int i = 0; i < ndim; i++)
        ck_assert_msg(sh[i] == shape[i], "%s: shape[%d] is %lld, expected %lld",
                      what, i, (long long)sh[i], (long long)shape[i]);
}

/* ------------------------------------------------------------------ errors */

/* A builder call must have failed: t is MG_NO_TENSOR, the status is st and
 * the message holds both needles (the op, then the reason). */
static inline void th_expect_fail(const char *what, mg_tensor t, mg_status st,
                                  const char *op, const char *reason) {
    const char *msg = mg_last_error();
    ck_assert_msg(t == MG_NO_TENSOR, "%s: built tensor %d", what, (int)t);
    ck_assert_msg(mg_last_status() == st, "%s: status %s, expected %s (%s)",
                  what, mg_status_str(mg_last_status()), mg_status_str(st),
                  msg);
    ck_assert_msg(strstr(msg, op) && strstr(msg, reason),
                  "%s: message '%s' lacks '%s' or '%s'", what, msg, op, reason);
    mg_clear_error();
}

#define TH_FAIL(call, st, op, reason)                                          \
    th_expect_fail(#call, (call), st, op, reason)

/* Leaves of the shapes and dtypes the builder-error tests feed to ops. */
typedef struct th_bad_leaves {
    mg_graph *g;
    mg_tensor x4, x3, w, x4d, xi, v3;
} th_bad_leaves;

static inline void th_bad_leaves_make(th_bad_leaves *l) {
    l->g = mg_graph_new();
    ck_assert(l->g != NULL);
    l->x4 = mg_input(l->g, "x", MG_F32, 4, S(2, 3, 5, 5));
    l->x3 = mg_input(l->g, "x3", MG_F32, 3, S(3, 5, 5));
    l->w = mg_param(l->g, "w", MG_F32, 4, S(4, 3, 3, 3));
    l->x4d = mg_input(l->g, "xd", MG_F64, 4, S(2, 3, 5, 5));
    l->xi = mg_input(l->g, "xi", MG_I32, 4, S(2, 3, 5, 5));
    l->v3 = mg_param(l->g, "v3", MG_F32, 1, S(3));
}

#include "helpers/forward.h"
#include "helpers/gradcheck.h"
#include "helpers/model.h"

#endif
