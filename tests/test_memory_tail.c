/*
 * test_memory_tail.c - the memory policy does not recompute its last
 * segments where keeping them costs no peak (policy_memory.c): against the
 * collection policy given the very checkpoints the memory policy chose
 * (which recomputes everything else, as the memory policy did before), its
 * plan has no higher peak and no more recomputed flops, and on a ResNet
 * strictly fewer; the gradients stay those of plain backprop, bit for bit.
 */
#include "helpers.h"
#include "helpers/model_step.h"
#include "memgrad_models.h"

typedef struct tail_case {
    th_train t; /* the gradients bound: after one run */
    mg_plan_summary s;
} tail_case;

static mg_model *make(int kind) {
    switch (kind) {
    case 0: return mg_model_resnet(4, 8, 4, 16, 10, MG_F32, 3);
    case 1: return mg_model_mlp(12, 64, 8, 32, 10, 0.0, MG_F32, 3);
    default: return mg_model_unet(3, 8, 2, 32, MG_F32, 3);
    }
}

/* Build kind's model, differentiate it under ck, compile, summarize and
 * run one training step; ck NULL: plain backprop. */
static void case_run(tail_case *c, int kind, const mg_checkpoints *ck) {
    th_train_open(&c->t, make(kind), "model", ck, true);
    ck_assert(mg_plan_summarize(c->t.p, NULL, 0, &c->s) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, c->t.p, c->t.d.binds, c->t.d.n_binds, 1) ==
                      MG_OK,
                  "%s", mg_last_error());
    mg_exec_free(ex);
}

static void case_free(tail_case *c) { th_train_close(&c->t); }

static void same_grads(const tail_case *a, const tail_case *b,
                       const char *what) {
    ck_assert_int_eq(a->t.m->n_params, b->t.m->n_params);
    for (int i = 0; i < a->t.m->n_params; i++)
        ck_assert_msg(memcmp(th_step_grad(&a->t.d, i), th_step_grad(&b->t.d, i),
                             mg_tensor_nbytes(a->t.m->g, a->t.m->grads[i])) ==
                          0,
                      "%s: gradient %d differs from plain backprop", what, i);
}

START_TEST(test_tail_not_recomputed) {
    const int kind = _i;
    const char *name[] = {"resnet", "mlp", "unet"};
    tail_case plain, mem, col;
    case_run(&plain, kind, NULL);
    const mg_checkpoints ckm = {.policy = MG_CKPT_MEMORY};
    case_run(&mem, kind, &ckm);
    /* the memory policy's own checkpoints, given as a collection */
    mg_tensor chosen[1024];
    const int nc = mg_graph_checkpoints(mem.t.m->g, chosen, 1024);
    ck_assert(nc > 0 && nc <= 1024);
    const mg_checkpoints ckc = {
        .policy = MG_CKPT_COLLECTION, .tensors = chosen, .n_tensors = nc};
    case_run(&col, kind, &ckc);
    ck_assert_int_eq(mg_graph_checkpoints(col.t.m->g, NULL, 0), nc);
    printf("%-6s %d checkpoints: memory peak %zu, recomputed %.4g flops; "
           "collection peak %zu, recomputed %.4g flops\n",
           name[kind], nc, mem.s.budget_peak, mem.s.recompute_flops,
           col.s.budget_peak, col.s.recompute_flops);
    ck_assert_uint_le(mem.s.budget_peak, col.s.budget_peak);
    ck_assert(mem.s.recompute_flops <= col.s.recompute_flops);
    if (kind == 0) /* the ResNet's last segment is kept */
        ck_assert_msg(mem.s.recompute_flops < col.s.recompute_flops,
                      "resnet: memory recomputes %g flops, its checkpoints "
                      "alone %g",
                      mem.s.recompute_flops, col.s.recompute_flops);
    same_grads(&mem, &plain, "memory");
    same_grads(&col, &plain, "collection");
    case_free(&plain);
    case_free(&mem);
    case_free(&col);
}
END_TEST

int main(void) {
    Suite *s = suite_create("memory_tail");
    th_add_tcase_loops(s, "memory_tail", 120,
                       TH_LOOPS({test_tail_not_recomputed, 0, 3}), NULL);
    return th_run_suite(s);
}
