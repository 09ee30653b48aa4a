/*
 * test_offload.c - host offload as a plan choice (issue 51), on the CPU
 * host tier: on the MLP, ResNet, transformer and GPT builders, a training
 * step that offloads saved tensors (all of them, or every other one, with
 * and without bandwidth and compute rates, under policy none and under a
 * recomputing policy) gives gradients bit-equal to policy none's without
 * offload; the pool's measured peak equals the predicted one (prefetch
 * blocks included) and the host tier's measured peak and size equal the
 * plan's; the plan's arena holds the prefetch blocks (the pool reserves
 * what mg_plan_arena_info says); offloading every saved tensor lowers the
 * device peak. The same plan run in two calls (mg_exec_forward, then
 * mg_exec_backward) gives the same gradient bits, the same measured
 * device peak (== predicted, and == its phase peaks) and host peak, with
 * two forward phases outstanding at once too. Bad requests fail with a
 * message naming the tensor.
 */
#include "helpers.h"

#include "memgrad_models.h"

/* big: longer sequences and larger images, where activations rather
 * than gradient buffers make policy none's peak (the budget sweeps) */
static mg_model *make_sized(mg_model_kind kind, int big) {
    mg_model *m = NULL;
    if (big) switch (kind) {
        case MG_MODEL_RESNET:
            m = mg_model_resnet(4, 4, 4, 16, 5, MG_F32, 7);
            break;
        case MG_MODEL_TRANSFORMER:
            m = mg_model_transformer(3, 16, 2, 32, 4, 11, 0.1, 1, MG_F32, 7);
            break;
        case MG_MODEL_GPT:
            m = mg_model_gpt(3, 16, 2, 32, 4, 11, 0.1, MG_F32, 7);
            break;
        default: break;
        }
    if (!m) switch (kind) {
        case MG_MODEL_MLP:
            m = mg_model_mlp(6, 32, 8, 16, 5, 0.1, MG_F32, 7);
            break;
        case MG_MODEL_RESNET:
            m = mg_model_resnet(4, 4, 4, 8, 5, MG_F32, 7);
            break;
        case MG_MODEL_TRANSFORMER:
            m = mg_model_transformer(3, 16, 2, 8, 2, 11, 0.1, 1, MG_F32, 7);
            break;
        case MG_MODEL_GPT:
            m = mg_model_gpt(3, 16, 2, 8, 2, 11, 0.1, MG_F32, 7);
            break;
        default: break;
        }
    ck_assert_msg(m != NULL, "building %s failed: %s", mg_model_kind_name(kind),
                  mg_last_error());
    return m;
}

static mg_model *make(mg_model_kind kind) { return make_sized(kind, 0); }

/* Caller memory: input, target, parameters, loss and gradients. */
typedef struct mdata {
    void *input, *target;
    void **params, **grads;
    size_t *pbytes;
    double loss;
    mg_binding *b;
    mg_tensor *outs;
    int nb, n_outs;
} mdata;

static void md_init(mdata *d, const mg_model *m) {
    memset(d, 0, sizeof *d);
    d->input = malloc(mg_tensor_nbytes(m->g, m->input));
    d->target = malloc(mg_tensor_nbytes(m->g, m->target));
    d->params = calloc((size_t)m->n_params, sizeof *d->params);
    d->grads = calloc((size_t)m->n_params, sizeof *d->grads);
    d->pbytes = calloc((size_t)m->n_params, sizeof *d->pbytes);
    d->b = calloc((size_t)(2 * m->n_params + 4), sizeof *d->b);
    d->outs = calloc((size_t)(m->n_params + 1), sizeof *d->outs);
    ck_assert(d->input && d->target && d->params && d->grads && d->pbytes &&
              d->b && d->outs);
    for (int i = 0; i < m->n_params; i++) {
        d->pbytes[i] = mg_tensor_nbytes(m->g, m->params[i]);
        d->params[i] = malloc(d->pbytes[i]);
        d->grads[i] = malloc(d->pbytes[i]);
        ck_assert(d->params[i] && d->grads[i]);
    }
    ck_assert(mg_model_init_params(m, 11, d->params) == MG_OK);
    ck_assert(mg_model_init_data(m, 12, d->input, d->target) == MG_OK);
    d->b[d->nb++] = (mg_binding){m->input, d->input};
    d->b[d->nb++] = (mg_binding){m->target, d->target};
    for (int i = 0; i < m->n_params; i++)
        d->b[d->nb++] = (mg_binding){m->params[i], d->params[i]};
    d->b[d->nb++] = (mg_binding){m->loss, &d->loss};
    d->outs[d->n_outs++] = m->loss;
    for (int i = 0; i < m->n_params; i++) {
        d->b[d->nb++] = (mg_binding){m->grads[i], d->grads[i]};
        d->outs[d->n_outs++] = m->grads[i];
    }
}

static void md_free(mdata *d, const mg_model *m) {
    for (int i = 0; i < m->n_params; i++) {
        free(d->params[i]);
        free(d->grads[i]);
    }
    free(d->params);
    free(d->grads);
    free(d->pbytes);
    free(d->input);
    free(d->target);
    free(d->b);
    free(d->outs);
}

/* The forward tensors some backward op reads (the saved tensors), but the
 * loss, which the plan keeps: into out (room for the graph), their count. */
static int saved_tensors(const mg_model *m, mg_tensor *out) {
    const int32_t n = mg_graph_num_tensors(m->g);
    bool *is = calloc((size_t)n, 1);
    ck_assert(is);
    for (mg_tensor u = 0; u < n; u++) {
        if (!mg_tensor_is_backward(m->g, u)) continue;
        for (int k = 0; k < mg_tensor_num_inputs(m->g, u); k++) {
            const mg_tensor in = mg_tensor_input(m->g, u, k);
            if (in != MG_NO_TENSOR && !mg_tensor_is_backward(m->g, in) &&
                mg_tensor_num_inputs(m->g, in) > 0 && in != m->loss)
                is[in] = true;
        }
    }
    int c = 0;
    for (mg_tensor t = 0; t < n; t++)
        if (is[t]) out[c++] = t;
    free(is);
    return c;
}

typedef struct step_out {
    size_t peak, predicted, reserved, arena_reserved;
    mg_plan_offload info;
    mg_host_stats host;
} step_out;

/* p in two calls on a new executor: gradients bit-equal to the one-call
 * run's (in d on entry), pool peak == predicted == the phase peaks' pair,
 * host peak == the plan's; then two forward phases outstanding at once,
 * each with its own host copies, their backward phases in reverse order
 * (the same bits), and a forward phase freed without its backward. */
static void run_two_call(const mg_model *m, mdata *d, const mg_plan *p,
                         size_t predicted, const mg_plan_offload *info) {
    const char *k = mg_model_kind_name(m->kind);
    void **one = calloc((size_t)m->n_params, sizeof *one);
    ck_assert(one);
    for (int i = 0; i < m->n_params; i++) {
        ck_assert(one[i] = malloc(d->pbytes[i]));
        memcpy(one[i], d->grads[i], d->pbytes[i]);
        memset(d->grads[i], 0x5A, d->pbytes[i]);
    }
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_phase_peaks pk;
    ck_assert_msg(mg_plan_phase_peaks(p, d->b, d->nb, &pk) == MG_OK, "%s: %s",
                  k, mg_last_error());
    mg_saved *sv = NULL, *sv2 = NULL;
    ck_assert_msg(mg_exec_forward(ex, p, d->b, d->nb, 5, &sv) == MG_OK,
                  "%s: forward: %s", k, mg_last_error());
    mg_host_stats h;
    ck_assert(mg_exec_host_stats(ex, &h) == MG_OK);
    ck_assert_uint_eq(h.bytes_in_use, info->offloaded_bytes);
    ck_assert_uint_eq(h.copies_out, (uint64_t)info->n_offloaded);
    ck_assert_msg(mg_exec_backward(ex, p, sv, d->b, d->nb) == MG_OK,
                  "%s: backward: %s", k, mg_last_error());
    mg_saved_free(sv);
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    ck_assert(mg_exec_host_stats(ex, &h) == MG_OK);
    ck_assert_msg(ps.peak_bytes_in_use == predicted,
                  "%s two calls: measured pool peak %zu != predicted %zu", k,
                  ps.peak_bytes_in_use, predicted);
    ck_assert_msg(pk.pair == predicted,
                  "%s: phase peaks %zu/%zu, the plan's peak %zu", k,
                  pk.forward, pk.backward, predicted);
    ck_assert_uint_eq(h.peak_bytes_in_use, info->host_peak);
    ck_assert_uint_eq(h.bytes_in_use, 0);
    ck_assert_uint_eq(h.copies_in, (uint64_t)info->n_offloaded);
    ck_assert_uint_eq(h.bytes_reserved, info->host_bytes);
    for (int i = 0; i < m->n_params; i++)
        ck_assert_msg(!memcmp(d->grads[i], one[i], d->pbytes[i]),
                      "%s two calls: gradient of %s differs from one call's",
                      k, mg_tensor_name(m->g, m->params[i]));
    /* two outstanding: the second lends another host block */
    ck_assert(mg_exec_forward(ex, p, d->b, d->nb, 5, &sv) == MG_OK);
    ck_assert(mg_exec_forward(ex, p, d->b, d->nb, 5, &sv2) == MG_OK);
    ck_assert(mg_exec_host_stats(ex, &h) == MG_OK);
    ck_assert_uint_eq(h.bytes_in_use, 2 * info->offloaded_bytes);
    ck_assert_uint_eq(h.bytes_reserved, 2 * info->host_bytes);
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < m->n_params; i++)
            memset(d->grads[i], 0x5A, d->pbytes[i]);
        ck_assert_msg(mg_exec_backward(ex, p, r ? sv : sv2, d->b, d->nb) ==
                          MG_OK,
                      "%s: backward %d: %s", k, r, mg_last_error());
        for (int i = 0; i < m->n_params; i++)
            ck_assert_msg(!memcmp(d->grads[i], one[i], d->pbytes[i]),
                          "%s two outstanding: gradient of %s differs", k,
                          mg_tensor_name(m->g, m->params[i]));
    }
    mg_saved_free(sv2);
    mg_saved_free(sv);
    /* a forward phase dropped: its host bytes are no longer in use */
    ck_assert(mg_exec_forward(ex, p, d->b, d->nb, 5, &sv) == MG_OK);
    mg_saved_free(sv);
    ck_assert(mg_exec_host_stats(ex, &h) == MG_OK);
    ck_assert_uint_eq(h.bytes_in_use, 0);
    ck_assert_uint_eq(h.bytes_reserved, info->host_bytes);
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    ck_assert_uint_eq(ps.bytes_in_use, 0);
    mg_exec_free(ex);
    for (int i = 0; i < m->n_params; i++) {
        memcpy(d->grads[i], one[i], d->pbytes[i]);
        free(one[i]);
    }
    free(one);
}

/* One training step with opts, the gradients into d. */
static void run_step(const mg_model *m, mdata *d, const mg_plan_options *opts,
                     step_out *o) {
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, d->outs, d->n_outs, opts, &p) == MG_OK,
                  "%s: compile: %s", mg_model_kind_name(m->kind),
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_status st = mg_exec_run(ex, p, d->b, d->nb, 5);
    ck_assert_msg(st == MG_OK, "%s: run: %s", mg_model_kind_name(m->kind),
                  mg_last_error());
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    ck_assert(mg_exec_host_stats(ex, &o->host) == MG_OK);
    mg_plan_arena a;
    ck_assert(mg_plan_arena_info(p, d->b, d->nb, &a) == MG_OK);
    ck_assert(mg_plan_offload_info(p, &o->info) == MG_OK);
    o->peak = ps.peak_bytes_in_use;
    o->reserved = ps.bytes_reserved;
    o->arena_reserved = a.reserved;
    o->predicted = mg_plan_predicted_peak(p, d->b, d->nb);
    /* a second run on the same executor: the same peaks */
    mg_exec_pool_reset_peak(ex);
    ck_assert(mg_exec_run(ex, p, d->b, d->nb, 5) == MG_OK);
    mg_host_stats h2;
    ck_assert(mg_exec_host_stats(ex, &h2) == MG_OK);
    ck_assert(mg_exec_pool_stats(ex, &ps) == MG_OK);
    ck_assert_uint_eq(ps.peak_bytes_in_use, o->predicted);
    ck_assert_uint_eq(h2.peak_bytes_in_use, o->info.host_peak);
    ck_assert_uint_eq(h2.copies_out, 2 * (uint64_t)o->info.n_offloaded);
    mg_exec_free(ex);
    if (o->info.n_offloaded)
        run_two_call(m, d, p, o->predicted, &o->info);
    mg_plan_free(p);
}

static void grads_copy(const mg_model *m, const mdata *d, void **out) {
    for (int i = 0; i < m->n_params; i++) {
        out[i] = malloc(d->pbytes[i]);
        ck_assert(out[i]);
        memcpy(out[i], d->grads[i], d->pbytes[i]);
    }
}

static void grads_equal(const mg_model *m, const mdata *d, void **ref,
                        const char *what) {
    for (int i = 0; i < m->n_params; i++) {
        for (size_t k = 0; k < d->pbytes[i]; k++)
            if (((unsigned char *)d->grads[i])[k] !=
                ((unsigned char *)ref[i])[k])
                ck_abort_msg("%s %s: gradient of %s differs from policy "
                             "none's at byte %zu",
                             mg_model_kind_name(m->kind), what,
                             mg_tensor_name(m->g, m->params[i]), k);
        memset(d->grads[i], 0xA5, d->pbytes[i]);
    }
}

static void check_measured(const mg_model *m, const step_out *o, int n,
                           const char *what) {
    const char *k = mg_model_kind_name(m->kind);
    ck_assert_msg(o->peak == o->predicted,
                  "%s %s: measured pool peak %zu != predicted %zu", k, what,
                  o->peak, o->predicted);
    ck_assert_msg(o->host.peak_bytes_in_use == o->info.host_peak,
                  "%s %s: measured host peak %zu != predicted %zu", k, what,
                  o->host.peak_bytes_in_use, o->info.host_peak);
    ck_assert_msg(o->host.bytes_reserved == o->info.host_bytes,
                  "%s %s: host tier %zu bytes != the plan's %zu", k, what,
                  o->host.bytes_reserved, o->info.host_bytes);
    ck_assert_uint_eq(o->host.bytes_in_use, 0);
    ck_assert_int_eq(o->info.n_offloaded, n);
    ck_assert_uint_eq(o->host.copies_out, (uint64_t)n);
    ck_assert_uint_eq(o->host.copies_in, (uint64_t)n);
    ck_assert_msg(o->reserved == o->arena_reserved,
                  "%s %s: pool reserved %zu != the plan's %zu", k, what,
                  o->reserved, o->arena_reserved);
}

/* Policy none without offload, then with offload of every saved tensor
 * and of every other one, with and without rates; then a recomputing
 * policy (memory) offloading its saved tensors. */
static void check_model(mg_model_kind kind) {
    mg_model *m = make(kind);
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    mdata d;
    md_init(&d, m);
    void **ref = calloc((size_t)m->n_params, sizeof *ref);
    ck_assert(ref);
    step_out none;
    run_step(m, &d, NULL, &none);
    ck_assert_uint_eq(none.peak, none.predicted);
    grads_copy(m, &d, ref);
    mg_tensor *saved =
        malloc((size_t)mg_graph_num_tensors(m->g) * sizeof *saved);
    ck_assert(saved);
    const int n_saved = saved_tensors(m, saved);
    ck_assert_int_gt(n_saved, 2);

    mg_plan_options all = {.offload = saved, .n_offload = n_saved};
    step_out o;
    run_step(m, &d, &all, &o);
    grads_equal(m, &d, ref, "offload all");
    check_measured(m, &o, n_saved, "offload all");
    ck_assert_msg(o.predicted < none.predicted,
                  "%s: offloading every saved tensor peaks at %zu, policy "
                  "none at %zu",
                  mg_model_kind_name(kind), o.predicted, none.predicted);
    ck_assert_uint_gt(o.info.host_peak, 0);
    ck_assert_int_gt(o.info.overlap_steps, 0);
    ck_assert(o.info.copy_seconds == 0);

    /* every other one, with rates: copies placed to hide them */
    mg_tensor *half = malloc((size_t)n_saved * sizeof *half);
    ck_assert(half);
    int n_half = 0;
    for (int i = 0; i < n_saved; i += 2) half[n_half++] = saved[i];
    mg_plan_options some = {.offload = half,
                            .n_offload = n_half,
                            .host_bandwidth = 1e9,
                            .compute_rate = 1e9};
    run_step(m, &d, &some, &o);
    grads_equal(m, &d, ref, "offload half, with rates");
    check_measured(m, &o, n_half, "offload half, with rates");
    ck_assert(o.info.copy_seconds > 0);
    ck_assert(o.info.hidden_seconds <= o.info.copy_seconds);

    free(half);

    /* recompute and offload: policy memory, its saved tensors offloaded */
    mg_model *m2 = make(kind);
    mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
    ck_assert(mg_model_gradients(m2, &ck) == MG_OK);
    mdata d2;
    md_init(&d2, m2);
    step_out mem;
    run_step(m2, &d2, NULL, &mem);
    grads_equal(m2, &d2, ref, "policy memory");
    mg_tensor *s2 = malloc((size_t)mg_graph_num_tensors(m2->g) * sizeof *s2);
    ck_assert(s2);
    const int n2 = saved_tensors(m2, s2);
    mg_plan_options both = {.offload = s2, .n_offload = n2};
    run_step(m2, &d2, &both, &o);
    grads_equal(m2, &d2, ref, "policy memory with offload");
    check_measured(m2, &o, n2, "policy memory with offload");
    free(s2);
    md_free(&d2, m2);
    mg_model_free(m2);

    for (int i = 0; i < m->n_params; i++) free(ref[i]);
    free(ref);
    free(saved);
    md_free(&d, m);
    mg_model_free(m);
}

START_TEST(test_mlp) { check_model(MG_MODEL_MLP); }
END_TEST
START_TEST(test_resnet) { check_model(MG_MODEL_RESNET); }
END_TEST
START_TEST(test_transformer) { check_model(MG_MODEL_TRANSFORMER); }
END_TEST
START_TEST(test_gpt) { check_model(MG_MODEL_GPT); }
END_TEST

/* ------------------------------------------------------------ budget
 * MG_CKPT_BUDGET with offload allowed, over a sweep of budgets: each
 * plan's predicted peak (every output bound, the budget's measure) is
 * within its budget, and its predicted step time (recomputed flops at the
 * compute rate plus the copies' exposed seconds) never rises as the
 * budget grows. Where copies are cheap offload is chosen; the lowest
 * budget's step runs with gradients bit-equal to policy none's and
 * measured peaks equal to the predicted ones. */
#define SWEEP 7
static const double sweep[SWEEP] = {0.12, 0.2, 0.3, 0.4, 0.55, 0.7, 0.9};

static void check_budget(mg_model_kind kind, double bw, double rate,
                         int want_offload) {
    const char *k = mg_model_kind_name(kind);
    mg_model *m0 = make_sized(kind, 1);
    ck_assert(mg_model_gradients(m0, NULL) == MG_OK);
    mdata d0;
    md_init(&d0, m0);
    step_out none;
    run_step(m0, &d0, NULL, &none);
    void **ref = calloc((size_t)m0->n_params, sizeof *ref);
    ck_assert(ref);
    grads_copy(m0, &d0, ref);
    const size_t b_none = none.predicted; /* every output is bound */
    double prev_time = INFINITY;
    int fitted = 0, offloaded = 0, ran = 0;
    for (int i = 0; i < SWEEP; i++) {
        const size_t budget = (size_t)(sweep[i] * (double)b_none);
        mg_model *m = make_sized(kind, 1);
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = budget,
                             .offload = 1,
                             .host_bandwidth = bw,
                             .compute_rate = rate};
        const mg_status st = mg_model_gradients(m, &ck);
        if (st == MG_ERR_NOMEM) {
            ck_assert_msg(!fitted,
                          "%s: budget %zu fails after a smaller one "
                          "fitted: %s",
                          k, budget, mg_last_error());
            mg_model_free(m);
            continue;
        }
        ck_assert_msg(st == MG_OK, "%s: %s", k, mg_last_error());
        fitted++;
        const int n_off = mg_graph_offloads(m->g, NULL, 0);
        ck_assert_int_ge(n_off, 0);
        mg_tensor *off = malloc((size_t)(n_off ? n_off : 1) * sizeof *off);
        ck_assert(off);
        ck_assert_int_eq(mg_graph_offloads(m->g, off, n_off), n_off);
        mdata d;
        md_init(&d, m);
        const mg_plan_options po = {.offload = off,
                                    .n_offload = n_off,
                                    .host_bandwidth = bw,
                                    .compute_rate = rate};
        mg_plan *p = NULL;
        ck_assert_msg(mg_plan_compile(m->g, d.outs, d.n_outs, &po, &p) == MG_OK,
                      "%s: %s", k, mg_last_error());
        const size_t peak = mg_plan_predicted_peak(p, d.b, d.nb);
        ck_assert_msg(peak <= budget, "%s: budget %zu, predicted peak %zu", k,
                      budget, peak);
        mg_plan_summary sum;
        mg_plan_offload info;
        ck_assert(mg_plan_summarize(p, d.b, d.nb, &sum) == MG_OK);
        ck_assert(mg_plan_offload_info(p, &info) == MG_OK);
        ck_assert_int_eq(info.n_offloaded, n_off);
        const double time = sum.recompute_flops / rate +
                            (info.copy_seconds - info.hidden_seconds);
        ck_assert_msg(time <= prev_time * (1 + 1e-12),
                      "%s: step time %g s at budget %zu, %g s at a smaller "
                      "one",
                      k, time, budget, prev_time);
        prev_time = time;
        if (n_off > 0) offloaded++;
        mg_plan_free(p);
        if (!ran) { /* the lowest budget that fits: run it */
            ran = 1;
            step_out o;
            run_step(m, &d, &po, &o);
            grads_equal(m, &d, ref, "budget with offload");
            check_measured(m, &o, n_off, "budget with offload");
        }
        free(off);
        md_free(&d, m);
        mg_model_free(m);
    }
    ck_assert_msg(fitted > 0, "%s: no budget of the sweep fits", k);
    if (want_offload)
        ck_assert_msg(offloaded > 0, "%s: offload never chosen", k);
    for (int i = 0; i < m0->n_params; i++) free(ref[i]);
    free(ref);
    md_free(&d0, m0);
    mg_model_free(m0);
}

/* copies hidden (fast host, slow compute): offload is chosen; copies
 * exposed (a slow host): recompute wins where it fits */
static void check_budget_rates(mg_model_kind kind) {
    check_budget(kind, 1e9, 1e8, 1);
    check_budget(kind, 1e3, 1e9, 0);
    check_budget(kind, 1e8, 1e9, 0);
}

START_TEST(test_budget_mlp) { check_budget_rates(MG_MODEL_MLP); }
END_TEST
START_TEST(test_budget_resnet) { check_budget_rates(MG_MODEL_RESNET); }
END_TEST
START_TEST(test_budget_transformer) {
    check_budget_rates(MG_MODEL_TRANSFORMER);
}
END_TEST
START_TEST(test_budget_gpt) { check_budget_rates(MG_MODEL_GPT); }
END_TEST

/* compile must fail with status st and a message containing want */
static void expect_fail(const mg_model *m, const mdata *d,
                        const mg_plan_options *o, mg_status st,
                        const char *want) {
    mg_plan *p = NULL;
    const mg_status got = mg_plan_compile(m->g, d->outs, d->n_outs, o, &p);
    ck_assert_msg(got == st, "expected %s, got %s: %s", mg_status_str(st),
                  mg_status_str(got), mg_last_error());
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(mg_last_error(), want), "message '%s' lacks '%s'",
                  mg_last_error(), want);
}

START_TEST(test_errors) {
    mg_model *m = make(MG_MODEL_MLP);
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    mdata d;
    md_init(&d, m);
    mg_tensor saved[256];
    ck_assert_int_lt(mg_graph_num_tensors(m->g), 256);
    const int n = saved_tensors(m, saved);
    ck_assert_int_gt(n, 0);
    mg_plan_options o = {.offload = saved, .n_offload = -1};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "-1 offloaded tensors");
    o = (mg_plan_options){.offload = NULL, .n_offload = 2};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "NULL list");
    const mg_tensor loss[] = {m->loss};
    o = (mg_plan_options){.offload = loss, .n_offload = 1};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "an output or retained");
    const mg_tensor in[] = {m->input};
    o = (mg_plan_options){.offload = in, .n_offload = 1};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "caller memory");
    const mg_tensor twice[] = {saved[0], saved[0]};
    o = (mg_plan_options){.offload = twice, .n_offload = 2};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "offloaded twice");
    const mg_tensor bad[] = {99999};
    o = (mg_plan_options){.offload = bad, .n_offload = 1};
    expect_fail(m, &d, &o, MG_ERR_UNKNOWN_ID, "offload");
    o = (mg_plan_options){
        .offload = saved, .n_offload = 1, .host_bandwidth = -1};
    expect_fail(m, &d, &o, MG_ERR_INVALID_ARG, "host_bandwidth");
    /* mg_checkpoints.offload: budget policy only, with both rates */
    mg_model *m2 = make(MG_MODEL_MLP);
    mg_checkpoints ck = {.policy = MG_CKPT_MEMORY,
                         .offload = 1,
                         .host_bandwidth = 1,
                         .compute_rate = 1};
    ck_assert_int_eq(mg_model_gradients(m2, &ck), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "budget policy"));
    ck = (mg_checkpoints){.policy = MG_CKPT_BUDGET,
                          .budget_bytes = 1 << 20,
                          .offload = 1,
                          .host_bandwidth = 0,
                          .compute_rate = 1};
    ck_assert_int_eq(mg_model_gradients(m2, &ck), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "host_bandwidth"));
    ck.offload = 2;
    ck_assert_int_eq(mg_model_gradients(m2, &ck), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_graph_offloads(NULL, NULL, 0), -1);
    mg_model_free(m2);
    o = (mg_plan_options){.offload = saved, .n_offload = n};
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, d.outs, d.n_outs, &o, &p) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    /* the dump states every copy, its thread and its event; the report
     * lists what is offloaded */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(f);
    ck_assert(mg_plan_dump(p, f) == MG_OK);
    ck_assert(mg_plan_report(p, d.b, d.nb, f) == MG_OK);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "copies on thread 1"));
    ck_assert_ptr_nonnull(strstr(buf, "event 0"));
    ck_assert_ptr_nonnull(strstr(buf, "offloaded: "));
    free(buf);
    mg_plan_offload info;
    ck_assert_int_eq(mg_plan_offload_info(NULL, &info), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_exec_host_stats(ex, NULL), MG_ERR_INVALID_ARG);
    /* a pool too small for the plan: a clear error, and nothing of the
     * run is left in use on the device or the host */
    mg_exec *small = NULL;
    const mg_exec_options eo = {.max_bytes =
                                    mg_plan_predicted_peak(p, d.b, d.nb) - 256};
    ck_assert(mg_exec_new(&eo, &small) == MG_OK);
    ck_assert_int_eq(mg_exec_run(small, p, d.b, d.nb, 1), MG_ERR_NOMEM);
    mg_host_stats hs;
    ck_assert(mg_exec_host_stats(small, &hs) == MG_OK);
    ck_assert_uint_eq(hs.bytes_in_use, 0);
    mg_pool_stats ps;
    ck_assert(mg_exec_pool_stats(small, &ps) == MG_OK);
    ck_assert_uint_eq(ps.bytes_in_use, 0);
    mg_exec_free(small);
    /* the same in two calls, a pool the forward phase fits and the
     * backward phase does not: a clear error; the failed backward phase
     * leaves its saved state whole (the host copies with it: tried again,
     * it fails the same way), and once it is freed nothing is in use */
    mg_phase_peaks pk;
    ck_assert(mg_plan_phase_peaks(p, d.b, d.nb, &pk) == MG_OK);
    ck_assert_uint_gt(pk.backward, pk.forward + 256);
    const mg_exec_options ebk = {.max_bytes = pk.backward - 256};
    ck_assert(mg_exec_new(&ebk, &small) == MG_OK);
    mg_saved *sv = NULL;
    ck_assert_msg(mg_exec_forward(small, p, d.b, d.nb, 1, &sv) == MG_OK, "%s",
                  mg_last_error());
    mg_plan_offload oi;
    ck_assert(mg_plan_offload_info(p, &oi) == MG_OK);
    for (int again = 0; again < 2; again++) {
        ck_assert_int_eq(mg_exec_backward(small, p, sv, d.b, d.nb),
                         MG_ERR_NOMEM);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "out of memory"));
        ck_assert(mg_exec_host_stats(small, &hs) == MG_OK);
        ck_assert_uint_eq(hs.bytes_in_use, oi.offloaded_bytes);
    }
    mg_saved_free(sv);
    ck_assert(mg_exec_host_stats(small, &hs) == MG_OK);
    ck_assert_uint_eq(hs.bytes_in_use, 0);
    ck_assert(mg_exec_pool_stats(small, &ps) == MG_OK);
    ck_assert_uint_eq(ps.bytes_in_use, 0);
    mg_exec_free(small);
    /* a pool bound at the predicted peak: the run fits it exactly, its
     * prefetch blocks included (from the arena, or from the cache where
     * the arena's layout is larger than the peak) */
    const mg_exec_options eb = {.max_bytes =
                                    mg_plan_predicted_peak(p, d.b, d.nb)};
    ck_assert(mg_exec_new(&eb, &small) == MG_OK);
    ck_assert_msg(mg_exec_run(small, p, d.b, d.nb, 1) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_pool_stats(small, &ps) == MG_OK);
    ck_assert_uint_eq(ps.peak_bytes_in_use, eb.max_bytes);
    ck_assert(mg_exec_host_stats(small, &hs) == MG_OK);
    ck_assert_uint_eq(hs.copies_in, (uint64_t)n);
    /* and in two calls */
    ck_assert_msg(mg_exec_forward(small, p, d.b, d.nb, 1, &sv) == MG_OK,
                  "%s", mg_last_error());
    ck_assert_msg(mg_exec_backward(small, p, sv, d.b, d.nb) == MG_OK, "%s",
                  mg_last_error());
    mg_saved_free(sv);
    ck_assert(mg_exec_pool_stats(small, &ps) == MG_OK);
    ck_assert_uint_eq(ps.peak_bytes_in_use, eb.max_bytes);
    ck_assert_uint_eq(ps.bytes_in_use, 0);
    mg_exec_free(small);
    mg_exec_free(ex);
    mg_plan_free(p);
    md_free(&d, m);
    mg_model_free(m);
}
END_TEST

int main(void) {
    Suite *s = suite_create("offload");
    th_add_tcase(s, "models", 600,
                 TH_TESTS(test_mlp, test_resnet, test_transformer, test_gpt));
    th_add_tcase(s, "budget", 600,
                 TH_TESTS(test_budget_mlp, test_budget_resnet,
                          test_budget_transformer, test_budget_gpt));
    th_add_tcase(s, "errors", 300, TH_TESTS(test_errors));
    return th_run_suite(s);
}
