/*
 * test_alloc_fail.c - allocation-failure sweep in the manner of SQLite's
 * malloc tests. This binary defines malloc, calloc, realloc and
 * aligned_alloc itself, so every allocation made by memgrad (linked in
 * statically) and by libigraph comes through here; while armed, the Nth
 * one fails (mode "once") or the Nth and every later one fail (mode
 * "persist"). The sweep runs build -> mg_gradients -> compile (with and
 * without no_grad) -> mg_exec_new -> run for an MLP and a U-Net under every
 * checkpoint policy, for every N up to the number of allocations the
 * pipeline makes, and checks for each N:
 *   - the call that hit the failure returns MG_ERR_NOMEM (a builder NULL
 *     with mg_last_status() MG_ERR_NOMEM); or, where memgrad recovers
 *     (the buffer pool gives its cached blocks back and asks again), the
 *     whole pipeline succeeds with the same graph, plan and outputs as
 *     without faults, so no failure is swallowed into a different answer;
 *   - a failed mg_gradients leaves the graph as it was (same dump and dot);
 *   - after a failed run every bound output is untouched or already holds
 *     its final value, never a partial one;
 *   - retrying the failed step without faults, and finishing the pipeline,
 *     gives outputs bit-equal to a fault-free run;
 *   - no crash, and under the ASan build, no leak.
 *
 * Only allocations whose caller is this executable (memgrad and the test)
 * or libigraph are counted and failed. OpenBLAS is left alone on purpose:
 * 0.3.21's small-matrix sgemm kernel mallocs without checking the result
 * and crashes when it fails, which no caller can catch (docs/errors.md).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "helpers.h"
#include "memgrad_models.h"

/* ------------------------------------------------------------------ the
 * allocator. Before main these run while the sanitizer runtime itself is
 * starting, so they carry no instrumentation and touch no thread-local
 * state until armed. */

#ifdef __SANITIZE_ADDRESS__
void *__interceptor_malloc(size_t);
void *__interceptor_calloc(size_t, size_t);
void *__interceptor_realloc(void *, size_t);
void *__interceptor_aligned_alloc(size_t, size_t);
#define REAL_MALLOC __interceptor_malloc
#define REAL_CALLOC __interceptor_calloc
#define REAL_REALLOC __interceptor_realloc
#define REAL_ALIGNED __interceptor_aligned_alloc
#else
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
#define REAL_MALLOC __libc_malloc
#define REAL_CALLOC __libc_calloc
#define REAL_REALLOC __libc_realloc
#define REAL_ALIGNED __libc_memalign
#endif

#define NO_SAN __attribute__((no_sanitize("address", "undefined")))

static volatile int fa_armed;       /* count and fail only while set */
static atomic_long fa_count;        /* counted allocations since arming */
static long fa_fail_at = -1;        /* index of the first to fail */
static bool fa_persist;             /* fail every one after it too */
static atomic_long fa_failed;       /* failures handed out */
static atomic_long fa_igraph;       /* counted allocations made by igraph */
static void *fa_exe_base;           /* load address of this executable */
static _Thread_local int fa_inside; /* dladdr must not recurse into us */

/* Does the allocation requested from `caller` count? Ours and igraph's. */
NO_SAN static bool fa_counts(void *caller) {
    if (fa_inside) return false;
    fa_inside = 1;
    Dl_info info;
    bool ours = false;
    if (dladdr(caller, &info)) {
        bool igraph = info.dli_fname && strstr(info.dli_fname, "libigraph");
        if (igraph) atomic_fetch_add(&fa_igraph, 1);
        ours = igraph || info.dli_fbase == fa_exe_base;
    }
    fa_inside = 0;
    return ours;
}

NO_SAN static bool fa_fail(void *caller) {
    if (!fa_armed || !fa_counts(caller)) return false;
    long n = atomic_fetch_add(&fa_count, 1);
    bool fail =
        fa_fail_at >= 0 && (n == fa_fail_at || (fa_persist && n > fa_fail_at));
    if (fail) atomic_fetch_add(&fa_failed, 1);
    return fail;
}

NO_SAN void *malloc(size_t n) {
    return fa_fail(__builtin_return_address(0)) ? NULL : REAL_MALLOC(n);
}

NO_SAN void *calloc(size_t n, size_t size) {
    return fa_fail(__builtin_return_address(0)) ? NULL : REAL_CALLOC(n, size);
}

NO_SAN void *realloc(void *p, size_t n) {
    return fa_fail(__builtin_return_address(0)) ? NULL : REAL_REALLOC(p, n);
}

NO_SAN void *aligned_alloc(size_t align, size_t n) {
    return fa_fail(__builtin_return_address(0)) ? NULL : REAL_ALIGNED(align, n);
}

/* Start counting from 0 for a pipeline; fa_arm/fa_disarm bracket the
 * library calls within it, so the count runs on across them. */
static void fa_reset(long fail_at, bool persist) {
    fa_count = 0;
    fa_failed = 0;
    fa_igraph = 0;
    fa_fail_at = fail_at;
    fa_persist = persist;
}

static void fa_arm(void) { fa_armed = 1; }

static void fa_disarm(void) { fa_armed = 0; }

/* ------------------------------------------------------------------ the
 * pipeline */

typedef struct sweep_case {
    const char *name;
    mg_model_kind kind;
    mg_ckpt_policy policy;
} sweep_case;

static mg_model *model_build(mg_model_kind kind) {
    if (kind == MG_MODEL_MLP)
        return mg_model_mlp(2, 8, 4, 6, 3, 0.25, MG_F32, 7);
    return mg_model_unet(2, 2, 1, 8, MG_F32, 7);
}

/* Caller memory for one model: parameters and data (filled from the
 * seeds), and the outputs loss + gradients with their bindings. */
typedef struct bufs {
    int n_params;
    void **params;
    void *input, *target;
    int n_out;
    mg_tensor *out_t;
    void **out;
    size_t *out_bytes;
    mg_binding *binds;
    int n_binds;
} bufs;

static void bufs_init(bufs *b, const mg_model *m) {
    memset(b, 0, sizeof *b);
    b->n_params = m->n_params;
    b->params = calloc((size_t)m->n_params, sizeof *b->params);
    for (int i = 0; i < m->n_params; i++)
        b->params[i] = calloc(1, mg_tensor_nbytes(m->g, m->params[i]));
    b->input = calloc(1, mg_tensor_nbytes(m->g, m->input));
    b->target = calloc(1, mg_tensor_nbytes(m->g, m->target));
    ck_assert(mg_model_init_params(m, 11, b->params) == MG_OK);
    ck_assert(mg_model_init_data(m, 12, b->input, b->target) == MG_OK);
    b->n_out = 1 + m->n_params;
    b->out_t = calloc((size_t)b->n_out, sizeof *b->out_t);
    b->out = calloc((size_t)b->n_out, sizeof *b->out);
    b->out_bytes = calloc((size_t)b->n_out, sizeof *b->out_bytes);
    b->out_t[0] = m->loss;
    for (int i = 0; i < m->n_params; i++) b->out_t[1 + i] = m->grads[i];
    for (int i = 0; i < b->n_out; i++) {
        b->out_bytes[i] = mg_tensor_nbytes(m->g, b->out_t[i]);
        b->out[i] = malloc(b->out_bytes[i]);
    }
    b->binds = calloc((size_t)(2 + m->n_params + b->n_out), sizeof *b->binds);
    b->binds[b->n_binds++] = (mg_binding){m->input, b->input};
    b->binds[b->n_binds++] = (mg_binding){m->target, b->target};
    for (int i = 0; i < m->n_params; i++)
        b->binds[b->n_binds++] = (mg_binding){m->params[i], b->params[i]};
    for (int i = 0; i < b->n_out; i++)
        b->binds[b->n_binds++] = (mg_binding){b->out_t[i], b->out[i]};
}

static void bufs_free(bufs *b) {
    for (int i = 0; i < b->n_params; i++) free(b->params[i]);
    for (int i = 0; i < b->n_out; i++) free(b->out[i]);
    free(b->params);
    free(b->input);
    free(b->target);
    free(b->out_t);
    free(b->out);
    free(b->out_bytes);
    free(b->binds);
}

#define SENTINEL 0xA5

static void outputs_poison(bufs *b) {
    for (int i = 0; i < b->n_out; i++)
        memset(b->out[i], SENTINEL, b->out_bytes[i]);
}

static char *graph_text(const mg_graph *g);

/* The reference outputs: one fault-free run, concatenated. */
typedef struct reference {
    unsigned char *bytes;
    size_t n;
    long allocs;    /* counted allocations of the whole pipeline */
    char *graph;    /* graph_text after mg_gradients */
    int n_steps;    /* of the training plan */
    size_t peak;    /* its predicted peak */
    long recovered; /* failure points the pipeline recovered from */
    long igraph;    /* of allocs, those made inside igraph */
} reference;

static void outputs_compare(const bufs *b, const reference *ref,
                            const char *what, long fail_at, bool allow_poison) {
    size_t off = 0;
    for (int i = 0; i < b->n_out; i++) {
        const unsigned char *o = b->out[i];
        bool same = memcmp(o, ref->bytes + off, b->out_bytes[i]) == 0;
        bool poison = true;
        for (size_t k = 0; poison && k < b->out_bytes[i]; k++)
            poison = o[k] == SENTINEL;
        ck_assert_msg(same || (allow_poison && poison),
                      "%s, allocation %ld failed: output %d is %s", what,
                      fail_at, i,
                      allow_poison ? "partly written" : "not the reference");
        off += b->out_bytes[i];
    }
}

static char *graph_text(const mg_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert(mg_graph_dump(g, f) == MG_OK);
    ck_assert(mg_graph_write_dot(g, f) == MG_OK);
    int cap = mg_graph_checkpoints(g, NULL, 0);
    fprintf(f, "checkpoints %d\n", cap);
    fclose(f);
    return buf;
}

/* A step that reported failure must have hit an injected one and say so. */
static void expect_nomem(mg_status s, const char *step, const char *what,
                         long fail_at) {
    ck_assert_msg(s == MG_ERR_NOMEM,
                  "%s, allocation %ld failed: %s returned %s (%s)", what,
                  fail_at, step, mg_status_str(s), mg_last_error());
    ck_assert_msg(atomic_load(&fa_failed) > 0,
                  "%s: %s failed with no allocation failed", what, step);
    ck_assert_msg(mg_last_error()[0] != '\0', "%s: %s left no message", what,
                  step);
}

/* Run the pipeline with allocation fail_at failing (-1: none). On a
 * failure, check it, retry that step fault-free and finish fault-free.
 * ref NULL: record the reference instead. Returns whether a step failed. */
static bool pipeline(const sweep_case *c, long fail_at, bool persist,
                     reference *ref) {
    const char *what = c->name;
    bool failed = false;
    mg_status s;
    mg_clear_error();
    fa_reset(fail_at, persist);

    /* build */
    fa_arm();
    mg_model *m = model_build(c->kind);
    fa_disarm();
    if (!m) {
        expect_nomem(mg_last_status(), "the model builder", what, fail_at);
        failed = true;
        m = model_build(c->kind);
        ck_assert_ptr_nonnull(m);
    }

    /* gradients */
    mg_checkpoints ck = {.policy = c->policy};
    if (c->policy == MG_CKPT_COLLECTION) {
        ck.tensors = m->blocks;
        ck.n_tensors = m->n_blocks;
    }
    char *before = failed ? NULL : graph_text(m->g);
    if (!failed) fa_arm();
    s = mg_model_gradients(m, &ck);
    fa_disarm();
    if (s != MG_OK) {
        expect_nomem(s, "mg_gradients", what, fail_at);
        failed = true;
        char *after = graph_text(m->g);
        ck_assert_msg(strcmp(before, after) == 0,
                      "%s, allocation %ld failed: mg_gradients changed the "
                      "graph",
                      what, fail_at);
        free(after);
        ck_assert(mg_model_gradients(m, &ck) == MG_OK);
    }
    free(before);

    bufs b;
    bufs_init(&b, m);

    /* compile: a forward-only plan (no_grad) and the training step */
    mg_plan *fwd = NULL, *plan = NULL;
    const mg_plan_options nograd = {.no_grad = 1};
    if (!failed) fa_arm();
    s = mg_plan_compile(m->g, &m->loss, 1, &nograd, &fwd);
    fa_disarm();
    if (s != MG_OK) {
        expect_nomem(s, "mg_plan_compile (no_grad)", what, fail_at);
        ck_assert_ptr_null(fwd);
        failed = true;
        ck_assert(mg_plan_compile(m->g, &m->loss, 1, &nograd, &fwd) == MG_OK);
    }
    if (!failed) fa_arm();
    s = mg_plan_compile(m->g, b.out_t, b.n_out, NULL, &plan);
    fa_disarm();
    if (s != MG_OK) {
        expect_nomem(s, "mg_plan_compile", what, fail_at);
        ck_assert_ptr_null(plan);
        failed = true;
        ck_assert(mg_plan_compile(m->g, b.out_t, b.n_out, NULL, &plan) ==
                  MG_OK);
    }

    /* executor and run */
    mg_exec *ex = NULL;
    if (!failed) fa_arm();
    s = mg_exec_new(NULL, &ex);
    fa_disarm();
    if (s != MG_OK) {
        expect_nomem(s, "mg_exec_new", what, fail_at);
        ck_assert_ptr_null(ex);
        failed = true;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    }
    outputs_poison(&b);
    if (!failed) fa_arm();
    s = mg_exec_run(ex, plan, b.binds, b.n_binds, 99);
    fa_disarm();
    long counted = atomic_load(&fa_count), by_igraph = atomic_load(&fa_igraph);
    if (s != MG_OK) {
        expect_nomem(s, "mg_exec_run", what, fail_at);
        failed = true;
        outputs_compare(&b, ref, what, fail_at, true);
        outputs_poison(&b);
        /* the same executor recovers */
        ck_assert_msg(mg_exec_run(ex, plan, b.binds, b.n_binds, 99) == MG_OK,
                      "%s", mg_last_error());
    }

    char *text = graph_text(m->g);
    const int n_steps = mg_plan_num_steps(plan);
    const size_t peak = mg_plan_predicted_peak(plan, b.binds, b.n_binds);
    if (fail_at < 0) {
        ref->allocs = counted;
        ref->igraph = by_igraph;
        ref->graph = text;
        text = NULL;
        ref->n_steps = n_steps;
        ref->peak = peak;
        ref->n = 0;
        for (int i = 0; i < b.n_out; i++) ref->n += b.out_bytes[i];
        ref->bytes = malloc(ref->n);
        size_t off = 0;
        for (int i = 0; i < b.n_out; i++) {
            memcpy(ref->bytes + off, b.out[i], b.out_bytes[i]);
            off += b.out_bytes[i];
        }
    } else {
        outputs_compare(&b, ref, what, fail_at, false);
        /* a failure met and survived must not have changed the answer */
        ck_assert_msg(strcmp(text, ref->graph) == 0,
                      "%s, allocation %ld failed: the graph differs from a "
                      "fault-free build",
                      what, fail_at);
        ck_assert_msg(n_steps == ref->n_steps && peak == ref->peak,
                      "%s, allocation %ld failed: the plan differs from a "
                      "fault-free compile",
                      what, fail_at);
        if (!failed && atomic_load(&fa_failed) > 0) ref->recovered++;
    }
    free(text);

    mg_exec_free(ex);
    mg_plan_free(plan);
    mg_plan_free(fwd);
    bufs_free(&b);
    mg_model_free(m);
    return failed;
}

static const sweep_case cases[] = {
    {"mlp, policy none", MG_MODEL_MLP, MG_CKPT_NONE},
    {"mlp, policy collection", MG_MODEL_MLP, MG_CKPT_COLLECTION},
    {"mlp, policy memory", MG_MODEL_MLP, MG_CKPT_MEMORY},
    {"mlp, policy speed", MG_MODEL_MLP, MG_CKPT_SPEED},
    {"unet, policy none", MG_MODEL_UNET, MG_CKPT_NONE},
    {"unet, policy collection", MG_MODEL_UNET, MG_CKPT_COLLECTION},
    {"unet, policy memory", MG_MODEL_UNET, MG_CKPT_MEMORY},
    {"unet, policy speed", MG_MODEL_UNET, MG_CKPT_SPEED},
};

/* Every N for graphs whose pipeline makes up to this many allocations;
 * beyond, an even sample of this many (always including the first and
 * the last), to keep the ASan build's run short. */
#define SWEEP_MAX_POINTS 400

static void sweep(const sweep_case *c, bool persist) {
    reference ref = {0};
    pipeline(c, -1, false, &ref);
    ck_assert_msg(ref.allocs > 0, "%s: no allocation was counted", c->name);
    /* the memory policy's articulation points come from igraph, whose
     * allocations are swept too */
    if (c->policy == MG_CKPT_MEMORY)
        ck_assert_msg(ref.igraph > 0, "%s: igraph allocated nothing", c->name);
    long step = ref.allocs <= SWEEP_MAX_POINTS
                    ? 1
                    : (ref.allocs + SWEEP_MAX_POINTS - 1) / SWEEP_MAX_POINTS;
    long tried = 0;
    for (long n = 0; n < ref.allocs; n += step) {
        bool failed = pipeline(c, n, persist, &ref);
        /* Failing every allocation from n on leaves nothing to recover
         * with: some call must report it. */
        ck_assert_msg(failed || !persist,
                      "%s: allocations %ld.. of %ld failed and no call "
                      "reported it",
                      c->name, n, ref.allocs);
        tried++;
        if (n + step >= ref.allocs && n != ref.allocs - 1)
            n = ref.allocs - 1 - step;
    }
    /* past the end nothing fails: the counts are deterministic */
    ck_assert(!pipeline(c, ref.allocs, persist, &ref));
    printf("%s (%s): %ld allocations (%ld in igraph), %ld failure points "
           "tried, %ld recovered from\n",
           c->name, persist ? "persist" : "once", ref.allocs, ref.igraph, tried,
           ref.recovered);
    free(ref.bytes);
    free(ref.graph);
}

START_TEST(test_sweep_once) { sweep(&cases[_i], false); }
END_TEST

START_TEST(test_sweep_persist) { sweep(&cases[_i], true); }
END_TEST

int main(void) {
    Dl_info info;
    if (!dladdr((void *)&main, &info)) return 1;
    fa_exe_base = info.dli_fbase;
    Suite *s = suite_create("alloc_fail");
    const int n = (int)(sizeof cases / sizeof *cases);
    th_add_tcase_loops(
        s, "alloc_fail", 600,
        TH_LOOPS({test_sweep_once, 0, n}, {test_sweep_persist, 0, n}), NULL);
    return th_run_suite(s);
}
