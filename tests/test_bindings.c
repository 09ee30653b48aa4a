/*
 * test_bindings.c - what memgrad.h promises about caller bindings: data
 * must be aligned to its dtype (refused with a message otherwise, never
 * read misaligned), bindings of leaves the plan does not read are ignored
 * without being checked, and the functions that take a binding list
 * (mg_plan_predicted_peak, mg_plan_summarize, mg_plan_report, mg_exec_run,
 * mg_plan_arena_info, mg_plan_phase_peaks, mg_plan_timeline) agree on
 * which lists are bad.
 */
#include "helpers.h"

#include <memgrad_observe.h>

#include <stdalign.h>

/* y = relu(x) * 2 over f32 [4]; a second input `unused` nothing reads, and
 * an f64 input z with w = z + z. */
typedef struct net {
    mg_graph *g;
    mg_tensor x, y, unused, z, w;
} net;

static net net_build(void) {
    net n;
    n.g = mg_graph_new();
    const int64_t s[1] = {4};
    n.x = mg_input(n.g, "x", MG_F32, 1, s);
    n.unused = mg_input(n.g, "unused", MG_F32, 1, s);
    n.y = mg_scale(n.g, mg_relu(n.g, n.x), 2.0);
    n.z = mg_input(n.g, "z", MG_F64, 1, s);
    n.w = mg_add(n.g, n.z, n.z);
    ck_assert_int_ge(n.w, 0);
    return n;
}

static mg_status run(mg_plan *p, const mg_binding *b, int nb) {
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_status s = mg_exec_run(ex, p, b, nb, 1);
    mg_exec_free(ex);
    return s;
}

START_TEST(test_misaligned_bindings_are_refused) {
    net n = net_build();
    mg_plan *p = NULL;
    const mg_tensor outs[2] = {n.y, n.w};
    ck_assert(mg_plan_compile(n.g, outs, 2, NULL, &p) == MG_OK);
    /* one buffer, so that offsets into it give misaligned pointers */
    alignas(16) unsigned char raw[4 * 8 * 4 + 16];
    memset(raw, 0, sizeof raw);
    float *x = (float *)(void *)raw, *y = (float *)(void *)(raw + 32);
    double *z = (double *)(void *)(raw + 64), *w = (double *)(void *)(raw + 96);
    mg_binding b[4] = {{n.x, x}, {n.y, y}, {n.z, z}, {n.w, w}};
    ck_assert_msg(run(p, b, 4) == MG_OK, "%s", mg_last_error());

    /* a float input at an odd address */
    b[0].data = raw + 1;
    ck_assert_int_eq(run(p, b, 4), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "aligned"));
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "'x'"));
    b[0].data = x;
    /* an output at an address 2 mod 4 */
    b[1].data = raw + 34;
    ck_assert_int_eq(run(p, b, 4), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "aligned"));
    b[1].data = y;
    /* f64 needs 8: 4-aligned is not enough */
    b[2].data = raw + 68;
    ck_assert_int_eq(run(p, b, 4), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "f64"));
    b[2].data = z;
    ck_assert_msg(run(p, b, 4) == MG_OK, "%s", mg_last_error());
    mg_plan_free(p);
    mg_graph_free(n.g);
}
END_TEST

START_TEST(test_unread_leaves_are_ignored) {
    net n = net_build();
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(n.g, &n.y, 1, NULL, &p) == MG_OK);
    float x[4] = {-1, 2, -3, 4}, y[4] = {0}, other[4];
    double zbuf[4];
    /* unread leaves: `unused` with NULL data, z bound twice, misaligned,
     * and overlapping the output: none of it is looked at */
    mg_binding b[6] = {{n.x, x},
                       {n.y, y},
                       {n.unused, NULL},
                       {n.z, zbuf},
                       {n.z, (unsigned char *)(void *)zbuf + 1},
                       {n.unused, y}};
    ck_assert_msg(run(p, b, 6) == MG_OK, "%s", mg_last_error());
    const float want[4] = {0, 4, 0, 8};
    ck_assert(memcmp(y, want, sizeof y) == 0);
    /* a leaf the plan reads is still checked */
    mg_binding bad[2] = {{n.x, NULL}, {n.y, other}};
    ck_assert_int_eq(run(p, bad, 2), MG_ERR_INVALID_ARG);
    /* and an id the graph does not have is still an error */
    mg_binding unknown[3] = {{n.x, x}, {n.y, other}, {999, x}};
    ck_assert_int_eq(run(p, unknown, 3), MG_ERR_UNKNOWN_ID);
    mg_plan_free(p);
    mg_graph_free(n.g);
}
END_TEST

START_TEST(test_binding_lists_agree) {
    net n = net_build();
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(n.g, &n.y, 1, NULL, &p) == MG_OK);
    float x[4] = {0}, y[4];
    mg_binding b[2] = {{n.x, x}, {n.y, y}};
    mg_plan_summary sum;
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(devnull);

    /* a negative count: every function refuses it */
    mg_clear_error();
    ck_assert_uint_eq(mg_plan_predicted_peak(p, b, -1), 0);
    ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_plan_predicted_peak"));
    ck_assert_int_eq(mg_plan_summarize(p, b, -1, &sum), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_plan_summarize"));
    ck_assert_int_eq(mg_plan_report(p, b, -1, devnull), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(run(p, b, -1), MG_ERR_INVALID_ARG);
    /* a NULL list with a positive count likewise */
    mg_clear_error();
    ck_assert_uint_eq(mg_plan_predicted_peak(p, NULL, 2), 0);
    ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_plan_summarize(p, NULL, 2, &sum), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_plan_report(p, NULL, 2, devnull), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(run(p, NULL, 2), MG_ERR_INVALID_ARG);
    /* and all accept none at all, or a good list */
    mg_clear_error();
    ck_assert_uint_gt(mg_plan_predicted_peak(p, NULL, 0), 0);
    ck_assert_int_eq(mg_last_status(), MG_OK);
    ck_assert_int_eq(mg_plan_summarize(p, NULL, 0, &sum), MG_OK);
    size_t peak_bound = mg_plan_predicted_peak(p, b, 2);
    ck_assert_int_eq(mg_plan_summarize(p, b, 2, &sum), MG_OK);
    ck_assert_uint_eq(sum.predicted_peak, peak_bound);
    ck_assert_int_eq(mg_plan_report(p, b, 2, devnull), MG_OK);
    ck_assert_int_eq(run(p, b, 2), MG_OK);
    fclose(devnull);
    mg_plan_free(p);
    mg_graph_free(n.g);
}
END_TEST

/* A binding of a tensor id the plan does not know is refused by every
 * function that takes a list, as mg_exec_run refuses it, with the index
 * and the id in the message; a known tensor that is not an output (an
 * input the plan does not read) is no error to any of them. */
START_TEST(test_unknown_ids_refused_alike) {
    mg_graph *g = mg_graph_new();
    const int64_t s[1] = {4};
    mg_tensor x = mg_param(g, "x", MG_F32, 1, s);
    mg_tensor unused = mg_input(g, "unused", MG_F32, 1, s);
    mg_tensor loss = mg_sum(g, mg_mul(g, x, x), 0, NULL, 0);
    mg_tensor gx;
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &x, 1, NULL, &gx), MG_OK);
    const mg_tensor outs[2] = {loss, gx};
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, outs, 2, NULL, &p) == MG_OK);
    float xd[4] = {1, 2, 3, 4}, ud[4], l, gd[4];
    FILE *devnull = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(devnull);
    mg_plan_summary sum;
    mg_plan_arena a;
    mg_phase_peaks pk;
    mg_step_info info[16];
    const mg_tensor bad_ids[2] = {999, -3};
    for (int v = 0; v < 2; v++) {
        const mg_binding b[3] = {{x, xd}, {gx, gd}, {bad_ids[v], &l}};
        char want[64];
        snprintf(want, sizeof want, "binding 2 names tensor id %d",
                 (int)bad_ids[v]);
        mg_clear_error();
        ck_assert_uint_eq(mg_plan_predicted_peak(p, b, 3), 0);
        ck_assert_int_eq(mg_last_status(), MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), want));
        ck_assert_int_eq(mg_plan_summarize(p, b, 3, &sum), MG_ERR_UNKNOWN_ID);
        ck_assert_int_eq(mg_plan_report(p, b, 3, devnull), MG_ERR_UNKNOWN_ID);
        ck_assert_int_eq(mg_plan_arena_info(p, b, 3, &a), MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_plan_arena_info"));
        ck_assert_ptr_nonnull(strstr(mg_last_error(), want));
        ck_assert_int_eq(mg_plan_phase_peaks(p, b, 3, &pk), MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_plan_phase_peaks"));
        ck_assert_int_eq(mg_plan_timeline(p, b, 3, info, 16), -1);
        ck_assert_int_eq(mg_last_status(), MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_plan_timeline"));
        ck_assert_int_eq(run(p, b, 3), MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), want));
        /* the forward phase names itself and the caller's index */
        mg_exec *ex = NULL;
        mg_saved *sv = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert_int_eq(mg_exec_forward(ex, p, b, 3, 1, &sv),
                         MG_ERR_UNKNOWN_ID);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "mg_exec_forward"));
        ck_assert_ptr_nonnull(strstr(mg_last_error(), want));
        ck_assert_ptr_null(sv);
        mg_exec_free(ex);
    }
    const mg_binding ok[4] = {{x, xd}, {gx, gd}, {loss, &l}, {unused, ud}};
    mg_clear_error();
    ck_assert_uint_gt(mg_plan_predicted_peak(p, ok, 4), 0);
    ck_assert_int_eq(mg_last_status(), MG_OK);
    ck_assert_int_eq(mg_plan_summarize(p, ok, 4, &sum), MG_OK);
    ck_assert_int_eq(mg_plan_arena_info(p, ok, 4, &a), MG_OK);
    ck_assert_int_eq(mg_plan_phase_peaks(p, ok, 4, &pk), MG_OK);
    ck_assert_int_gt(mg_plan_timeline(p, ok, 4, info, 16), 0);
    ck_assert_int_eq(run(p, ok, 4), MG_OK);
    ck_assert(l == 30.0f && gd[3] == 8.0f);
    fclose(devnull);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("bindings", "bindings", 120, test_misaligned_bindings_are_refused,
        test_unread_leaves_are_ignored, test_binding_lists_agree,
        test_unknown_ids_refused_alike)
