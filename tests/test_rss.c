/*
 * test_rss.c - what the operating system sees stays what the plan says
 * (issue 28 item 5, for the C API): the growth of the process's resident
 * set during a new executor's first training step stays within the
 * reservation mg_plan_arena_info predicts plus RSS_OVERHEAD, a fixed
 * allowance for what is not the pool's (the kernels' thread stacks and
 * scratch, malloc's bookkeeping, the step's own small allocations).
 *
 * The peak resident set is read from VmHWM after resetting it through
 * /proc/self/clear_refs (Linux 4.0 and later). Under AddressSanitizer the
 * shadow memory and quarantine make RSS meaningless, and without
 * clear_refs there is nothing to read: both are reported as skipped.
 */
#include "common/proc_status.h"
#include "helpers.h"
#include "memgrad_models.h"

#include <stdio.h>
#include <string.h>

/* The allowance beyond the predicted reservation, in bytes. */
#define RSS_OVERHEAD (8u << 20)

#if defined(__SANITIZE_ADDRESS__)
#define RSS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_UNDER_ASAN 1
#endif
#endif

/* Load the kernels' lazy state (OpenBLAS's threads and buffers, oneDNN's
 * primitives) with one small step of the same model kind on an executor
 * of its own, so that the step measured sees only its own memory. */
static void warm_up(mg_model_kind kind) {
    mg_model *m = kind == MG_MODEL_MLP
                      ? mg_model_mlp(2, 32, 8, 32, 4, 0.0, MG_F32, 1)
                      : mg_model_resnet(1, 8, 2, 16, 4, MG_F32, 1);
    ck_assert(m != NULL);
    ck_assert(mg_model_gradients(m, NULL) == MG_OK);
    mg_exec *ex = NULL;
    mg_plan *p = NULL;
    void **w = calloc((size_t)m->n_params, sizeof *w);
    mg_binding *b = calloc((size_t)m->n_params + 2, sizeof *b);
    ck_assert(w && b);
    for (int i = 0; i < m->n_params; i++) {
        w[i] = calloc(1, mg_tensor_nbytes(m->g, m->params[i]));
        b[i] = (mg_binding){m->params[i], w[i]};
    }
    ck_assert(mg_model_init_params(m, 1, w) == MG_OK);
    void *x = calloc(1, mg_tensor_nbytes(m->g, m->input));
    void *t = calloc(1, mg_tensor_nbytes(m->g, m->target));
    ck_assert(mg_model_init_data(m, 2, x, t) == MG_OK);
    b[m->n_params] = (mg_binding){m->input, x};
    b[m->n_params + 1] = (mg_binding){m->target, t};
    mg_tensor outs[1] = {m->loss};
    ck_assert(mg_plan_compile(m->g, outs, 1, NULL, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, m->n_params + 2, 1) == MG_OK, "%s",
                  mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < m->n_params; i++) free(w[i]);
    free(w);
    free(b);
    free(x);
    free(t);
    mg_model_free(m);
}

typedef struct rss_case {
    const char *name;
    mg_model_kind kind;
    mg_ckpt_policy policy;
} rss_case;

static const rss_case cases[] = {
    {"mlp none", MG_MODEL_MLP, MG_CKPT_NONE},
    {"mlp memory", MG_MODEL_MLP, MG_CKPT_MEMORY},
    {"resnet none", MG_MODEL_RESNET, MG_CKPT_NONE},
    {"resnet memory", MG_MODEL_RESNET, MG_CKPT_MEMORY},
};

START_TEST(test_first_step_rss) {
    const rss_case *c = &cases[_i];
    warm_up(c->kind);
    mg_model *m = c->kind == MG_MODEL_MLP
                      ? mg_model_mlp(16, 512, 1024, 512, 10, 0.0, MG_F32, 3)
                      : mg_model_resnet(4, 16, 64, 32, 10, MG_F32, 3);
    ck_assert_msg(m != NULL, "%s", mg_last_error());
    mg_checkpoints ck = {.policy = c->policy};
    ck_assert(mg_model_gradients(m, &ck) == MG_OK);
    const int n = m->n_params;
    /* caller memory, written before the measurement starts */
    void **mem = calloc((size_t)(2 * n + 2), sizeof *mem);
    mg_binding *b = calloc((size_t)(2 * n + 2), sizeof *b);
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    ck_assert(mem && b && outs);
    for (int i = 0; i < n; i++) {
        mem[i] = calloc(1, mg_tensor_nbytes(m->g, m->params[i]));
        b[i] = (mg_binding){m->params[i], mem[i]};
        mem[n + i] = calloc(1, mg_tensor_nbytes(m->g, m->grads[i]));
        memset(mem[n + i], 1, mg_tensor_nbytes(m->g, m->grads[i]));
        b[n + i] = (mg_binding){m->grads[i], mem[n + i]};
        outs[1 + i] = m->grads[i];
    }
    ck_assert(mg_model_init_params(m, 5, mem) == MG_OK);
    mem[2 * n] = calloc(1, mg_tensor_nbytes(m->g, m->input));
    mem[2 * n + 1] = calloc(1, mg_tensor_nbytes(m->g, m->target));
    ck_assert(mg_model_init_data(m, 6, mem[2 * n], mem[2 * n + 1]) == MG_OK);
    b[2 * n] = (mg_binding){m->input, mem[2 * n]};
    b[2 * n + 1] = (mg_binding){m->target, mem[2 * n + 1]};
    outs[0] = m->loss;
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, outs, n + 1, NULL, &p) == MG_OK);
    mg_plan_arena a;
    ck_assert(mg_plan_arena_info(p, b, 2 * n + 2, &a) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);

    ck_assert(mgi_proc_peak_reset());
    const size_t before = mgi_proc_status_bytes("VmRSS");
    ck_assert_msg(mg_exec_run(ex, p, b, 2 * n + 2, 1) == MG_OK, "%s",
                  mg_last_error());
    const size_t peak = mgi_proc_status_bytes("VmHWM");
    const size_t grew = peak > before ? peak - before : 0;
    printf("%-13s reserved %6.2f MiB (arena %6.2f MiB), RSS grew %6.2f MiB "
           "in the first step\n",
           c->name, (double)a.reserved / 1048576.0, (double)a.bytes / 1048576.0,
           (double)grew / 1048576.0);
    ck_assert_msg(grew <= a.reserved + RSS_OVERHEAD,
                  "%s: RSS grew %zu bytes; the plan reserves %zu, + %u "
                  "allowed",
                  c->name, grew, a.reserved, RSS_OVERHEAD);
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < 2 * n + 2; i++) free(mem[i]);
    free(mem);
    free(b);
    free(outs);
    mg_model_free(m);
}
END_TEST

static bool under_asan(void) {
#ifdef RSS_UNDER_ASAN
    return true;
#else
    return false;
#endif
}

int main(void) {
    if (under_asan()) {
        puts("skipped: RSS is not measurable under AddressSanitizer");
        return 77;
    }
    if (!mgi_proc_peak_reset()) {
        puts("skipped: /proc/self/clear_refs cannot reset VmHWM here");
        return 77;
    }
    Suite *s = suite_create("rss");
    TCase *tc = tcase_create("rss");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_first_step_rss, 0,
                        (int)(sizeof cases / sizeof *cases));
    suite_add_tcase(s, tc);
    return th_run_suite(s);
}
