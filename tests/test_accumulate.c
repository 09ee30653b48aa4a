/*
 * test_accumulate.c - outputs accumulated into caller memory
 * (mg_exec_accumulate, issue 28 item 3): a bound gradient gets the run's
 * value added into it, element by element as PyTorch's AccumulateGrad
 * adds into .grad, with the bits of that float addition; through
 * mg_exec_run and through the two-call phases; what the pool reserves is
 * the plan's arena and outputs plus one slot as large as the largest
 * accumulated output; and what cannot be accumulated is refused.
 */
#include "helpers.h"
#include "helpers/model_step.h"
#include "memgrad_models.h"

/* A ResNet's training step with every gradient bound (seeds 5 and 6). */
typedef th_train acc_case;

static void case_init(acc_case *c, mg_ckpt_policy pol) {
    const mg_checkpoints ck = {.policy = pol};
    th_train_open(c, th_small_model(MG_MODEL_RESNET), "resnet", &ck, true);
}

static void case_free(acc_case *c) { th_train_close(c); }

static float *grad_buf(const acc_case *c, int i) {
    return th_step_grad(&c->d, i);
}

static int64_t grad_n(const acc_case *c, int i) {
    return (int64_t)(mg_tensor_nbytes(c->m->g, c->m->grads[i]) / sizeof(float));
}

/* One step, through mg_exec_run or through the phases. */
static void step(mg_exec *ex, const acc_case *c, bool phased) {
    if (!phased) {
        ck_assert_msg(mg_exec_run(ex, c->p, c->d.binds, c->d.n_binds, 1) ==
                          MG_OK,
                      "%s", mg_last_error());
        return;
    }
    mg_saved *sv = NULL;
    ck_assert_msg(mg_exec_forward(ex, c->p, c->d.binds, c->d.n_binds, 1, &sv) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert_msg(mg_exec_backward(ex, c->p, sv, c->d.binds, c->d.n_binds) ==
                      MG_OK,
                  "%s", mg_last_error());
    mg_saved_free(sv);
}

/* Gradients g of one step; then from a random start s, two accumulating
 * steps give exactly (s + g) + g in float, and the pool reserves the
 * plan's arena and outputs plus the slot (the largest gradient's size
 * class), with no system allocation after the first accumulating step. */
START_TEST(test_accumulates_bits) {
    const bool phased = _i % 2;
    acc_case c;
    case_init(&c, _i / 2 ? MG_CKPT_MEMORY : MG_CKPT_NONE);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    step(ex, &c, phased);
    float **g = calloc((size_t)c.d.n_params, sizeof *g),
          **want = calloc((size_t)c.d.n_params, sizeof *want);
    ck_assert(g && want);
    th_rng r;
    th_rng_init(&r, 11);
    size_t slot = 0;
    for (int i = 0; i < c.d.n_params; i++) {
        const int64_t n = grad_n(&c, i);
        g[i] = malloc((size_t)n * sizeof(float));
        want[i] = malloc((size_t)n * sizeof(float));
        memcpy(g[i], grad_buf(&c, i), (size_t)n * sizeof(float));
        th_fill_f32(&r, grad_buf(&c, i), n, -1, 1, 0);
        for (int64_t e = 0; e < n; e++) {
            volatile float s1 = grad_buf(&c, i)[e] + g[i][e];
            want[i][e] = s1 + g[i][e];
        }
        const size_t cls = mg_pool_size_class((size_t)n * sizeof(float));
        if (cls > slot) slot = cls;
    }
    ck_assert(mg_exec_accumulate(ex, c.m->grads, c.d.n_params) == MG_OK);
    step(ex, &c, phased);
    const mg_pool_stats first = th_pool_stats(ex);
    step(ex, &c, phased);
    for (int i = 0; i < c.d.n_params; i++)
        ck_assert_msg(memcmp(grad_buf(&c, i), want[i],
                             (size_t)grad_n(&c, i) * sizeof(float)) == 0,
                      "gradient %d: not the float sum", i);
    mg_plan_arena a;
    ck_assert(mg_plan_arena_info(c.p, c.d.binds, c.d.n_binds, &a) == MG_OK);
    const mg_pool_stats s = th_pool_stats(ex);
    ck_assert_uint_eq(s.bytes_reserved, a.reserved + slot);
    ck_assert_uint_eq(s.system_allocs, first.system_allocs);
    const size_t pred = mg_plan_predicted_peak(c.p, c.d.binds, c.d.n_binds);
    ck_assert(s.peak_bytes_in_use <= pred + slot);
    /* accumulation off: the next step writes the gradients again */
    ck_assert(mg_exec_accumulate(ex, NULL, 0) == MG_OK);
    step(ex, &c, phased);
    for (int i = 0; i < c.d.n_params; i++)
        ck_assert(memcmp(grad_buf(&c, i), g[i],
                         (size_t)grad_n(&c, i) * sizeof(float)) == 0);
    for (int i = 0; i < c.d.n_params; i++) {
        free(g[i]);
        free(want[i]);
    }
    free(g);
    free(want);
    mg_exec_free(ex);
    case_free(&c);
}
END_TEST

/* Gradients left in the pool are computed as usual whatever the list
 * says; the list names tensors of any plan of the graph. */
START_TEST(test_unbound_not_accumulated) {
    acc_case c;
    case_init(&c, MG_CKPT_NONE);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    const int n_leaves = c.d.n_binds - c.d.n_params;
    ck_assert(mg_exec_run(ex, c.p, c.d.binds, n_leaves, 1) == MG_OK);
    const void *g0 = NULL;
    ck_assert(mg_exec_tensor_data(ex, c.m->grads[0], &g0) == MG_OK);
    const size_t nb = mg_tensor_nbytes(c.m->g, c.m->grads[0]);
    void *want = malloc(nb);
    memcpy(want, g0, nb);
    ck_assert(mg_exec_accumulate(ex, c.m->grads, c.d.n_params) == MG_OK);
    ck_assert(mg_exec_run(ex, c.p, c.d.binds, n_leaves, 1) == MG_OK);
    ck_assert(mg_exec_tensor_data(ex, c.m->grads[0], &g0) == MG_OK);
    ck_assert(memcmp(g0, want, nb) == 0);
    free(want);
    mg_exec_free(ex);
    case_free(&c);
}
END_TEST

/* Refusals: a status and a message naming the call or the tensor, and
 * the caller's memory untouched. */
START_TEST(test_accumulate_errors) {
    const mg_tensor one = 0, neg = -3;
    ck_assert_int_eq(mg_exec_accumulate(NULL, &one, 1), MG_ERR_INVALID_ARG);
    ck_assert(strstr(mg_last_error(), "mg_exec_accumulate"));
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_int_eq(mg_exec_accumulate(ex, &one, -1), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_exec_accumulate(ex, NULL, 2), MG_ERR_INVALID_ARG);
    ck_assert(strstr(mg_last_error(), "NULL list"));
    ck_assert_int_eq(mg_exec_accumulate(ex, &neg, 1), MG_ERR_UNKNOWN_ID);
    ck_assert(strstr(mg_last_error(), "-3"));
    /* y = x * x is an output, and z = y * y reads it */
    mg_graph *g = mg_graph_new();
    const int64_t shape[1] = {4};
    const mg_tensor x = mg_input(g, "x", MG_F32, 1, shape);
    const mg_tensor y = mg_mul(g, x, x), z = mg_mul(g, y, y);
    const mg_tensor outs[2] = {y, z};
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, outs, 2, NULL, &p) == MG_OK);
    float xv[4] = {1, 2, 3, 4}, yv[4] = {7, 7, 7, 7}, zv[4] = {9, 9, 9, 9};
    const mg_binding b[3] = {{x, xv}, {y, yv}, {z, zv}};
    ck_assert(mg_exec_accumulate(ex, &y, 1) == MG_OK);
    ck_assert_int_eq(mg_exec_run(ex, p, b, 3, 0), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "mg_exec_accumulate") &&
                      strstr(mg_last_error(), "reads it"),
                  "%s", mg_last_error());
    for (int i = 0; i < 4; i++) ck_assert(yv[i] == 7 && zv[i] == 9);
    /* z is read by no step: accumulated */
    ck_assert(mg_exec_accumulate(ex, &z, 1) == MG_OK);
    ck_assert(mg_exec_run(ex, p, b, 3, 0) == MG_OK);
    for (int i = 0; i < 4; i++) {
        const float v = xv[i] * xv[i];
        ck_assert(yv[i] == v && zv[i] == 9 + v * v);
    }
    mg_plan_free(p);
    mg_graph_free(g);
    mg_exec_free(ex);
}
END_TEST

int main(void) {
    Suite *s = suite_create("accumulate");
    th_add_tcase_loops(
        s, "accumulate", 120, TH_LOOPS({test_accumulates_bits, 0, 4}),
        TH_TESTS(test_unbound_not_accumulated, test_accumulate_errors));
    return th_run_suite(s);
}
