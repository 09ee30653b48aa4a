/*
 * test_arena.c - the arena layout (src/rewrite/arena.c, issue 28) checked
 * from outside: each plan's buffers are rebuilt here from its steps and
 * release lists, independently of arena.c, and their offsets must never
 * put two buffers that are live at once on the same bytes, must stay
 * inside the arena, whose size is the highest end; the live peak arena.c
 * reports must be the brute-force one. The checker itself is shown to
 * catch an overlap. The greedy orders that run where the sweep leaves
 * the arena above the live peak: on a small case (3 buffers), on the test
 * ResNet's 92 buffers, where only the squeaky-wheel rounds reach the live
 * peak, and on a DenseNet-like plan of thousands of buffers
 * (concatenations of features of many lifetimes), where the sweep alone
 * is above 1.05 of the peak and the greedy orders are within it.
 */
#include "helpers.h"

#include "memgrad_models.h"
#include "helpers/model_step.h"
#include "rewrite/schedule.h"

/* Buffers as the test sees them: bytes, [born, died), offset. */
typedef struct buffers {
    size_t *size, *off;
    int64_t *born, *died;
    size_t n;
} buffers;

static void buffers_free(buffers *b) {
    free(b->size);
    free(b->off);
    free(b->born);
    free(b->died);
}

/* The arena's buffers of p, in birth order, on arena.c's clock (step s's
 * output from 2s, its workspace during [2s+1, 2s+2), a buffer released
 * after step s free from 2s+2). Also checks that p gives no offset to a
 * buffer that is not in the arena. */
static buffers plan_buffers(const mg_plan *p) {
    const int32_t n_steps = p->n_steps;
    int32_t *last = malloc((size_t)p->n_tensors * sizeof *last + 1);
    ck_assert_ptr_nonnull(last);
    for (int32_t t = 0; t < p->n_tensors; t++) last[t] = -1;
    for (int32_t s = 0; s < n_steps; s++)
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            last[p->release[r]] = s;
    const size_t cap = 2 * (size_t)n_steps + 1;
    buffers b = {malloc(cap * sizeof *b.size), malloc(cap * sizeof *b.off),
                 malloc(cap * sizeof *b.born), malloc(cap * sizeof *b.died), 0};
    ck_assert(b.size && b.off && b.born && b.died);
    for (int32_t s = 0; s < n_steps; s++) {
        const mg_tensor t = p->steps[s];
        if (!(p->role[t] & MG_ROLE_KEPT) && last[t] >= 0) {
            b.size[b.n] = mg_pool_size_class(mg_tensor_nbytes(p->g, t));
            b.born[b.n] = 2 * (int64_t)s;
            b.died[b.n] = 2 * (int64_t)last[t] + 2;
            b.off[b.n++] = p->out_off[s];
        } else {
            ck_assert_msg(p->out_off[s] == SIZE_MAX,
                          "step %d: an offset for a buffer outside the arena",
                          (int)s);
        }
        if (p->step[s].work_units) {
            b.size[b.n] = mg_pool_size_class(mg_plan_step_work(&p->step[s]));
            b.born[b.n] = 2 * (int64_t)s + 1;
            b.died[b.n] = 2 * (int64_t)s + 2;
            b.off[b.n++] = p->work_off[s];
        } else {
            ck_assert(p->work_off[s] == SIZE_MAX);
        }
    }
    free(last);
    return b;
}

/* NULL if b's offsets are a layout within an arena of `bytes` whose size
 * is its highest end, else what is wrong (in why). Pairs by brute force. */
static const char *layout_fault(const buffers *b, size_t bytes, char *why,
                                size_t why_len) {
    size_t high = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->off[i] == SIZE_MAX || b->off[i] + b->size[i] > bytes) {
            snprintf(why, why_len, "buffer %zu at %zu + %zu outside %zu", i,
                     b->off[i], b->size[i], bytes);
            return why;
        }
        if (b->off[i] + b->size[i] > high) high = b->off[i] + b->size[i];
        for (size_t j = 0; j < i; j++)
            if (b->born[i] < b->died[j] && b->born[j] < b->died[i] &&
                b->off[i] < b->off[j] + b->size[j] &&
                b->off[j] < b->off[i] + b->size[i]) {
                snprintf(why, why_len,
                         "buffers %zu [%lld, %lld) at %zu + %zu and %zu "
                         "[%lld, %lld) at %zu + %zu are live at once on the "
                         "same bytes",
                         j, (long long)b->born[j], (long long)b->died[j],
                         b->off[j], b->size[j], i, (long long)b->born[i],
                         (long long)b->died[i], b->off[i], b->size[i]);
                return why;
            }
    }
    if (high != bytes) {
        snprintf(why, why_len, "arena of %zu bytes, highest end %zu", bytes,
                 high);
        return why;
    }
    return NULL;
}

/* The most bytes of b live at once, by brute force. */
static size_t live_peak_of(const buffers *b) {
    size_t peak = 0;
    for (size_t i = 0; i < b->n; i++) {
        size_t live = 0;
        for (size_t j = 0; j < b->n; j++)
            if (b->born[j] <= b->born[i] && b->born[i] < b->died[j])
                live += b->size[j];
        if (live > peak) peak = live;
    }
    return peak;
}

/* The sweep alone on b's lifetimes: its size, and its layout valid. */
static size_t sweep_size(const buffers *b) {
    size_t *off = malloc((b->n ? b->n : 1) * sizeof *off), live = 0;
    ck_assert_ptr_nonnull(off);
    const size_t sz =
        mgi_arena_lay_out(b->size, b->born, b->died, b->n, false, off, &live);
    ck_assert(sz != SIZE_MAX);
    buffers s = *b;
    s.off = off;
    char why[256];
    const char *fault = layout_fault(&s, sz, why, sizeof why);
    ck_assert_msg(fault == NULL, "sweep: %s", fault);
    free(off);
    return sz;
}

/* p's layout: valid, its live peak the brute-force one, no larger than
 * the sweep's alone; returns the sweep's size. */
static size_t check_plan(const char *what, const mg_plan *p) {
    buffers b = plan_buffers(p);
    char why[256];
    const char *fault = layout_fault(&b, p->arena_bytes, why, sizeof why);
    ck_assert_msg(fault == NULL, "%s: %s", what, fault);
    ck_assert_uint_eq(p->arena_live_peak, live_peak_of(&b));
    const size_t sweep = sweep_size(&b);
    ck_assert_msg(p->arena_bytes <= sweep, "%s: arena %zu, the sweep's %zu",
                  what, p->arena_bytes, sweep);
    buffers_free(&b);
    return sweep;
}

/* The training plan (loss and every gradient) of model _i / 3 under
 * policy none, memory or speed: its layout and that of its phases. */
START_TEST(test_model_layouts) {
    static const char *names[] = {"mlp", "resnet", "unet", "transformer",
                                  "gpt"};
    const mg_ckpt_policy pols[] = {MG_CKPT_NONE, MG_CKPT_MEMORY, MG_CKPT_SPEED};
    mg_model *m = th_small_model((mg_model_kind)(_i / 3));
    ck_assert_msg(m != NULL, "%s", mg_last_error());
    mg_checkpoints ck = {.policy = pols[_i % 3]};
    ck_assert_msg(mg_model_gradients(m, &ck) == MG_OK, "%s", mg_last_error());
    mg_tensor *outs = malloc((size_t)(m->n_params + 1) * sizeof *outs);
    ck_assert_ptr_nonnull(outs);
    outs[0] = m->loss;
    for (int i = 0; i < m->n_params; i++) outs[1 + i] = m->grads[i];
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, outs, m->n_params + 1, NULL, &p) == MG_OK);
    char what[64];
    snprintf(what, sizeof what, "%s policy %d", names[_i / 3],
             (int)pols[_i % 3]);
    check_plan(what, p);
    ck_assert_msg((double)p->arena_bytes <= 1.05 * (double)p->arena_live_peak,
                  "%s: arena %zu, live peak %zu", what, p->arena_bytes,
                  p->arena_live_peak);
    mg_plan_free(p);
    free(outs);
    mg_model_free(m);
}
END_TEST

/* The checker fails a layout that puts two live buffers on the same
 * bytes, and one whose size is not its highest end. */
START_TEST(test_checker_catches_overlap) {
    mg_model *m = th_small_model(MG_MODEL_RESNET);
    ck_assert_ptr_nonnull(m);
    ck_assert(mg_model_gradients(m, &(mg_checkpoints){0}) == MG_OK);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, &m->loss, 1, NULL, &p) == MG_OK);
    buffers b = plan_buffers(p);
    char why[256];
    ck_assert(layout_fault(&b, p->arena_bytes, why, sizeof why) == NULL);
    /* a buffer moved onto one live with it */
    size_t i = 0, j = 0;
    for (i = 1; i < b.n && j == 0; i++)
        for (size_t k = 0; k < i; k++)
            if (b.born[i] < b.died[k] && b.born[k] < b.died[i] &&
                b.size[k] <= b.size[i] && b.off[k] != b.off[i]) {
                j = k + 1;
                break;
            }
    ck_assert_msg(j > 0, "no two buffers of the plan live at once");
    i--, j--;
    const size_t saved = b.off[j];
    b.off[j] = b.off[i];
    const char *fault = layout_fault(&b, p->arena_bytes, why, sizeof why);
    ck_assert_ptr_nonnull(fault);
    ck_assert_ptr_nonnull(strstr(fault, "live at once on the same bytes"));
    b.off[j] = saved;
    ck_assert_ptr_nonnull(
        layout_fault(&b, p->arena_bytes + 64, why, sizeof why));
    buffers_free(&b);
    mg_plan_free(p);
    mg_model_free(m);
}
END_TEST

/* Three buffers the sweep in time order places badly: a and b born
 * together, a freed first, c (larger than a's gap) then goes on top: 7
 * bytes; placed largest first, c at 0, b above it, a below b: 6, the live
 * peak (b and c at tick 2). */
START_TEST(test_small_sweep_worse) {
    buffers b = {(size_t[]){1, 2, 4}, (size_t[3]){0}, (int64_t[]){1, 1, 2},
                 (int64_t[]){2, 3, 6}, 3};
    size_t live = 0;
    const size_t sweep =
        mgi_arena_lay_out(b.size, b.born, b.died, b.n, false, b.off, &live);
    ck_assert_uint_eq(live, 6);
    ck_assert_uint_eq(sweep, 7);
    const size_t best =
        mgi_arena_lay_out(b.size, b.born, b.died, b.n, true, b.off, &live);
    ck_assert_uint_eq(best, 6);
    char why[256];
    const char *fault = layout_fault(&b, best, why, sizeof why);
    ck_assert_msg(fault == NULL, "%s", fault);
}
END_TEST

/* Random lifetimes (xorshift): every layout valid, the greedy result no
 * larger than the sweep's, the live peak the brute-force one. */
START_TEST(test_random_layouts) {
    th_rng r;
    th_rng_init(&r, 28 + (uint64_t)_i);
    enum { N = 400 };
    buffers b = {malloc(N * sizeof *b.size), malloc(N * sizeof *b.off),
                 malloc(N * sizeof *b.born), malloc(N * sizeof *b.died), N};
    ck_assert(b.size && b.off && b.born && b.died);
    int64_t t = 0;
    for (size_t i = 0; i < N; i++) {
        t += (int64_t)(th_rng_next(&r) % 2);
        b.born[i] = t;
        b.died[i] = t + 1 + (int64_t)(th_rng_next(&r) % (_i % 2 ? 60 : 8));
        b.size[i] = 64 * (1 + th_rng_next(&r) % 32);
    }
    size_t live = 0, live2 = 0;
    const size_t sweep =
        mgi_arena_lay_out(b.size, b.born, b.died, N, false, b.off, &live);
    char why[256];
    const char *fault = layout_fault(&b, sweep, why, sizeof why);
    ck_assert_msg(fault == NULL, "sweep: %s", fault);
    const size_t best =
        mgi_arena_lay_out(b.size, b.born, b.died, N, true, b.off, &live2);
    fault = layout_fault(&b, best, why, sizeof why);
    ck_assert_msg(fault == NULL, "best: %s", fault);
    ck_assert_uint_eq(live, live_peak_of(&b));
    ck_assert_uint_eq(live2, live);
    ck_assert_uint_le(best, sweep);
    ck_assert_uint_ge(best, live);
    buffers_free(&b);
}
END_TEST

/* The buffers of the test ResNet's training plan under policy memory at
 * batch 1024 (tests/data/resnet.onnx through memgrad-onnx step): {size in
 * 256-byte units, born, died}. The sweep alone is 1.33 of the live peak and
 * every fixed greedy order at least 1.08 (measured on this list); the
 * squeaky-wheel rounds reach the live peak. */
static const int64_t onnx_resnet[][3] = {
    {8192, 0, 4},     {8196, 1, 2},     {8192, 2, 164},   {8192, 4, 8},
    {2048, 6, 160},   {2048, 8, 12},    {4105, 9, 10},    {2048, 10, 14},
    {2048, 12, 16},   {2048, 14, 18},   {4105, 15, 16},   {2048, 16, 20},
    {2048, 18, 22},   {2048, 20, 138},  {1024, 22, 26},   {3090, 23, 24},
    {1024, 24, 28},   {1024, 26, 30},   {1024, 28, 32},   {2084, 29, 30},
    {1024, 30, 38},   {1024, 32, 36},   {3076, 33, 34},   {1024, 34, 38},
    {1024, 36, 40},   {1024, 38, 42},   {256, 40, 44},    {256, 42, 46},
    {80, 44, 48},     {80, 46, 50},     {16, 49, 50},     {1, 50, 80},
    {1024, 52, 120},  {3090, 53, 54},   {1024, 54, 58},   {1024, 56, 116},
    {1024, 58, 108},  {2084, 59, 60},   {1024, 60, 68},   {1024, 62, 98},
    {3076, 63, 64},   {1024, 64, 68},   {1024, 66, 70},   {1024, 68, 94},
    {256, 70, 74},    {256, 72, 86},    {80, 74, 78},     {80, 76, 80},
    {80, 78, 86},     {256, 82, 88},    {256, 86, 90},    {256, 88, 92},
    {1024, 90, 94},   {1024, 92, 110},  {1024, 94, 104},  {2048, 100, 128},
    {3093, 101, 102}, {3112, 103, 104}, {1024, 104, 114}, {1024, 110, 116},
    {2084, 111, 112}, {307, 113, 114},  {1024, 114, 122}, {1024, 116, 126},
    {2048, 122, 128}, {3090, 123, 124}, {3090, 125, 126}, {2048, 126, 138},
    {2048, 128, 154}, {4105, 129, 130}, {2048, 130, 134}, {2048, 132, 150},
    {2048, 134, 142}, {4105, 135, 136}, {2048, 136, 162}, {2048, 138, 148},
    {2048, 144, 150}, {4105, 145, 146}, {4162, 147, 148}, {2048, 148, 156},
    {2048, 150, 160}, {2048, 156, 162}, {4105, 157, 158}, {4162, 159, 160},
    {2048, 160, 166}, {8192, 162, 168}, {8192, 164, 168}, {8192, 166, 176},
    {8192, 168, 174}, {8196, 169, 170}, {8192, 170, 178}, {8247, 177, 178},
};

START_TEST(test_onnx_resnet_layout) {
    enum { N = sizeof onnx_resnet / sizeof *onnx_resnet };
    buffers b = {malloc(N * sizeof *b.size), malloc(N * sizeof *b.off),
                 malloc(N * sizeof *b.born), malloc(N * sizeof *b.died), N};
    ck_assert(b.size && b.off && b.born && b.died);
    for (size_t i = 0; i < N; i++) {
        b.size[i] = 256 * (size_t)onnx_resnet[i][0];
        b.born[i] = onnx_resnet[i][1];
        b.died[i] = onnx_resnet[i][2];
    }
    size_t live = 0;
    const size_t sweep =
        mgi_arena_lay_out(b.size, b.born, b.died, N, false, b.off, &live);
    ck_assert_uint_eq(live, 6308352);
    ck_assert_uint_eq(live, live_peak_of(&b));
    ck_assert_msg((double)sweep > 1.3 * (double)live, "sweep %zu", sweep);
    const size_t best =
        mgi_arena_lay_out(b.size, b.born, b.died, N, true, b.off, &live);
    char why[256];
    const char *fault = layout_fault(&b, best, why, sizeof why);
    ck_assert_msg(fault == NULL, "%s", fault);
    ck_assert_uint_eq(best, live);
    buffers_free(&b);
}
END_TEST

/* Lifetimes out of birth order, empty or beyond the arena's 32-bit clock
 * are refused (SIZE_MAX); no buffers lay out in 0 bytes. */
START_TEST(test_lay_out_refuses) {
    size_t off[2], live = 7;
    ck_assert_uint_eq(mgi_arena_lay_out((size_t[]){8, 8}, (int64_t[]){2, 1},
                                        (int64_t[]){3, 3}, 2, true, off, &live),
                      SIZE_MAX);
    ck_assert_uint_eq(mgi_arena_lay_out((size_t[]){8}, (int64_t[]){2},
                                        (int64_t[]){2}, 1, true, off, &live),
                      SIZE_MAX);
    ck_assert_uint_eq(mgi_arena_lay_out((size_t[]){8}, (int64_t[]){0},
                                        (int64_t[]){(int64_t)1 << 40}, 1, true,
                                        off, &live),
                      SIZE_MAX);
    ck_assert_uint_eq(mgi_arena_lay_out(NULL, NULL, NULL, 0, true, off, &live),
                      0);
    ck_assert_uint_eq(live, 0);
}
END_TEST

/* A DenseNet-like graph: blocks in which every layer reads the
 * concatenation of all earlier features and adds `growth` more, so
 * features of many sizes and lifetimes are live at once (torchvision's
 * densenet121 and 161 were 1.07 and 1.10 of their live peak with the
 * sweep alone). */
static mg_tensor dense_net(mg_graph *g, int blocks, int layers, int growth,
                           int batch, int width, mg_tensor *params,
                           int *n_params) {
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(batch, width));
    char name[32];
    int c = width, k = 0;
    for (int bl = 0; bl < blocks; bl++) {
        mg_tensor feats[64];
        int n = 0;
        feats[n++] = x;
        for (int l = 0; l < layers; l++) {
            mg_tensor cat = n == 1 ? feats[0] : mg_concat(g, n, feats, 1);
            snprintf(name, sizeof name, "w%d", k++);
            mg_tensor w = mg_param(g, name, MG_F32, 2, S(c, growth));
            params[(*n_params)++] = w;
            feats[n++] = mg_relu(g, mg_matmul(g, cat, w, 0, 0));
            c += growth;
        }
        /* transition: the concatenation down to half its width */
        snprintf(name, sizeof name, "t%d", bl);
        mg_tensor w = mg_param(g, name, MG_F32, 2, S(c, c / 2));
        params[(*n_params)++] = w;
        x = mg_relu(g, mg_matmul(g, mg_concat(g, n, feats, 1), w, 0, 0));
        c /= 2;
    }
    return mg_sum(g, x, 0, NULL, 0);
}

START_TEST(test_dense_plan) {
    mg_graph *g = mg_graph_new();
    mg_tensor params[128], outs[129];
    int n_params = 0;
    const mg_tensor loss = dense_net(g, 4, 24, 12, 16, 24, params, &n_params);
    ck_assert_msg(loss != MG_NO_TENSOR, "%s", mg_last_error());
    outs[0] = loss;
    ck_assert(mg_gradients(g, &loss, 1, NULL, params, n_params, NULL,
                           outs + 1) == MG_OK);
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(g, outs, n_params + 1, NULL, &p) == MG_OK,
                  "%s", mg_last_error());
    const size_t sweep = check_plan("dense", p);
    printf("dense: %d steps, arena %zu, live peak %zu (%.4f), the sweep's "
           "alone %zu (%.4f)\n",
           (int)p->n_steps, p->arena_bytes, p->arena_live_peak,
           (double)p->arena_bytes / (double)p->arena_live_peak, sweep,
           (double)sweep / (double)p->arena_live_peak);
    ck_assert_int_gt(p->n_steps, 1500);
    ck_assert_msg((double)sweep > 1.05 * (double)p->arena_live_peak,
                  "the sweep alone is already within 1.05: %zu of %zu", sweep,
                  p->arena_live_peak);
    ck_assert_msg((double)p->arena_bytes <= 1.05 * (double)p->arena_live_peak,
                  "arena %zu, live peak %zu", p->arena_bytes,
                  p->arena_live_peak);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("arena");
    th_add_tcase_loops(
        s, "models", 300,
        TH_LOOPS({test_model_layouts, 0, 15}, {test_random_layouts, 0, 8}),
        NULL);
    th_add_tcase(s, "cases", 300,
                 TH_TESTS(test_checker_catches_overlap, test_small_sweep_worse,
                          test_onnx_resnet_layout, test_lay_out_refuses,
                          test_dense_plan));
    return th_run_suite(s);
}
