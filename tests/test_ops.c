/*
 * test_ops.c - every op on the CPU: forward values in MG_F32 and MG_F64 and
 * the argument checks of its builder, one part per op family in tests/ops/
 * (named as src/graph/ops_*.c), and the checks that span the families: the
 * CPU backend has a kernel for every op in MG_OP_LIST, and an unread input
 * may be bound.
 */
#include "helpers.h"

#include "backend/backend.h"
#include "common/ir.h"

#define OPS_PARTS(X) TH_OP_FAMILIES(X)

#define OPS_PART_DECL(f) void ops_##f##_tcase(Suite *s);
OPS_PARTS(OPS_PART_DECL)
#undef OPS_PART_DECL

/* ------------------------------------------------------------------ kernels
 * The one place this test reads the CPU backend's kernel table, through
 * its registry row. Leaves (input, param) are caller memory and need no
 * kernel. */
static int cpu_has_kernel(mg_op op) {
    return mgi_backend_find(MG_DEVICE_CPU)->has_kernel(op);
}

START_TEST(test_cpu_kernel_table_complete) {
    for (int op = 0; op < MG_OP_COUNT; op++)
        ck_assert_msg(cpu_has_kernel((mg_op)op),
                      "the CPU backend has no kernel for op %s",
                      mgi_op_str((mg_op)op));
}
END_TEST

/* ------------------------------------------------------------------ binding
 * The header asks that every input the plan reads be bound; binding an input
 * that this plan happens not to read (another output's input, or a leaf a
 * gradient rule did not need) must not make the run fail. */

START_TEST(test_bind_unread_input) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    double xv[3] = {1, -2, 3}, zv[3] = {4, 5, 6}, out[3] = {0, 0, 0};
    mg_tensor x = mg_input(g, "x", MG_F64, 1, S(3));
    mg_tensor z = mg_input(g, "z", MG_F64, 1, S(3));
    mg_tensor y = mg_neg(g, x);
    TH_OK_T("neg", y);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert_msg(mg_exec_new(NULL, &ex) == MG_OK, "%s", mg_last_error());
    mg_binding b[3] = {{x, xv}, {z, zv}, {y, out}};
    mg_status st = mg_exec_run(ex, p, b, 3, 0);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
    ck_assert_msg(st == MG_OK,
                  "plan for neg(x) with inputs x and z both bound: run "
                  "returned %s (%s); binding an input the plan does not read "
                  "should be accepted",
                  mg_status_str(st), msg);
    ck_assert_msg(out[0] == -1 && out[1] == 2 && out[2] == -3,
                  "neg: got %g %g %g", out[0], out[1], out[2]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ops");
#define OPS_PART_ADD(f) ops_##f##_tcase(s);
    OPS_PARTS(OPS_PART_ADD)
#undef OPS_PART_ADD
    th_add_tcase(s, "kernels", 0, TH_TESTS(test_cpu_kernel_table_complete));
    th_add_tcase(s, "binding", 0, TH_TESTS(test_bind_unread_input));
    return th_run_suite(s);
}
