/*
 * test_gradcheck.c - analytic gradients from mg_gradients against float64
 * central finite differences, one part per op family in tests/gradcheck/
 * (named as src/graph/ops_*.c), plus autodiff as a whole and the MG_F32
 * backward kernels against the MG_F64 ones.
 *
 * For an op under test y = op(x...), the loss is L = sum(y * W) with W a
 * random fixed weight input (so the seed gradient of y is not all ones).
 * FD re-runs a separate forward-only plan for L; see gc_check in
 * helpers/gradcheck.h. Every check records the ops it differentiated, and
 * the last test fails on an op in MG_OP_LIST that no check reached: it
 * needs the whole suite run (not one case picked with CK_RUN_CASE).
 */
#include "helpers.h"

#define GRADCHECK_PARTS(X)                                                     \
    TH_OP_FAMILIES(X)                                                          \
    X(autodiff)                                                                \
    X(f32)

#define GRADCHECK_PART_DECL(f) void gradcheck_##f##_tcase(Suite *s);
GRADCHECK_PARTS(GRADCHECK_PART_DECL)
#undef GRADCHECK_PART_DECL

/* ------------------------------------------------------------------ coverage
 * Ops with no input to differentiate: the leaves and fill (a constant). */
static int no_inputs(const char *op) {
    return !strcmp(op, "input") || !strcmp(op, "param") || !strcmp(op, "fill");
}

/* The compact saved forms' packs (issue 29): built by mg_gradients for the
 * backward pass, like the *_grad helpers, though they read forward
 * tensors. */
static int compact_pack(const char *op) {
    return !strcmp(op, "pack_sign") || !strcmp(op, "max_pool2d_argmax");
}

/* 16-bit storage (mg_checkpoints.store16) rounds on purpose and packs
 * only float32 tensors, so no float64 finite-difference check builds it:
 * tests/test_store16.c checks its bits and its measured error instead. */
static int lossy_storage(const char *op) {
    return !strcmp(op, "pack_bf16") || !strcmp(op, "unpack_bf16");
}

START_TEST(test_every_op_gradchecked) {
    ck_assert_msg(gc_record_is_open(), "the check record was not opened");
    for (int k = 0; k < GC_N_OPS; k++) {
        const char *op = gc_op_name(k);
        if (no_inputs(op) || lossy_storage(op)) continue;
        /* a backward helper (*_grad) must be computed by the analytic
         * gradient of some check; every other op differentiated by one */
        if (strstr(op, "_grad") || compact_pack(op))
            ck_assert_msg(gc_record_count(k, GC_BACKWARD) > 0,
                          "no finite-difference check computes backward op "
                          "%s in its analytic gradient",
                          op);
        else
            ck_assert_msg(gc_record_count(k, GC_FORWARD) > 0,
                          "no finite-difference check differentiates op %s",
                          op);
    }
}
END_TEST

int main(void) {
    gc_record_open();
    Suite *s = suite_create("gradcheck");
#define GRADCHECK_PART_ADD(f) gradcheck_##f##_tcase(s);
    GRADCHECK_PARTS(GRADCHECK_PART_ADD)
#undef GRADCHECK_PART_ADD
    /* last: it reads what the checks above recorded */
    th_add_tcase(s, "coverage", 0, TH_TESTS(test_every_op_gradchecked));
    int rc = th_run_suite(s);
    gc_record_close();
    return rc;
}
