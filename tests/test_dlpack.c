/*
 * test_dlpack.c - the DLPack contract (memgrad_dlpack.h): tensors bound
 * zero-copy with dtype, shape, strides, byte offset and device checked;
 * exported outputs sharing their pool block, which a later run never hands
 * out while held and which goes back to the pool exactly once, when the
 * last holder lets go; deleters called exactly once; a write into an
 * exported forward output that the backward phase reads is an error.
 */
#include "helpers.h"

#include "memgrad_dlpack.h"

static DLTensor dl_of(void *data, mg_dtype dt, int ndim, int64_t *shape) {
    DLTensor t = {.data = data,
                  .device = {kDLCPU, 0},
                  .ndim = ndim,
                  .dtype = {dt == MG_I32 ? kDLInt : kDLFloat,
                            (uint8_t)(8 * mg_dtype_size(dt)), 1},
                  .shape = shape};
    return t;
}

typedef struct tiny {
    mg_graph *g;
    mg_tensor x, w, y, gy, gw;
    mg_plan *plan, *train;
} tiny;

/* y = relu(x * w) with x [2, 3] and w [3]; train also gives dw. */
static void tiny_make(tiny *m) {
    m->g = mg_graph_new();
    m->x = mg_input(m->g, "x", MG_F32, 2, S(2, 3));
    m->w = mg_param(m->g, "w", MG_F32, 1, S(3));
    m->gy = mg_input(m->g, "gy", MG_F32, 2, S(2, 3));
    m->y = mg_relu(m->g, mg_mul(m->g, m->x, m->w));
    TH_OK_T("y", m->y);
    ck_assert(mg_gradients(m->g, &m->y, 1, &m->gy, &m->w, 1, NULL, &m->gw) ==
              MG_OK);
    ck_assert(mg_plan_compile(m->g, &m->y, 1, NULL, &m->plan) == MG_OK);
    mg_tensor outs[2] = {m->y, m->gw};
    ck_assert(mg_plan_compile(m->g, outs, 2, NULL, &m->train) == MG_OK);
}

static void tiny_free(tiny *m) {
    mg_plan_free(m->plan);
    mg_plan_free(m->train);
    mg_graph_free(m->g);
}

static int deleted;
static void count_deleter(DLManagedTensor *m) {
    (void)m;
    deleted++;
}

START_TEST(test_bind_checks) {
    tiny m;
    tiny_make(&m);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    /* x lives 8 bytes into its buffer: byte_offset is honoured */
    float xbuf[2 + 6] = {99, 99, 1, -2, 3, -4, 5, -6};
    float w[3] = {1, 2, 3}, y[6] = {0};
    int64_t sx[2] = {2, 3}, sw[1] = {3};
    DLTensor dx = dl_of(xbuf, MG_F32, 2, sx);
    dx.byte_offset = 2 * sizeof(float);
    DLManagedTensor mw = {.dl_tensor = dl_of(w, MG_F32, 1, sw),
                          .deleter = count_deleter};
    DLManagedTensor my = {.dl_tensor = dl_of(y, MG_F32, 2, sx),
                          .deleter = count_deleter};
    mg_binding b[3];
    ck_assert(mg_dlpack_bind(ex, m.plan, m.x, &dx, &b[0]) == MG_OK);
    ck_assert(mg_dlpack_bind_managed(ex, m.plan, m.w, &mw, &b[1]) == MG_OK);
    ck_assert(mg_dlpack_bind_managed(ex, m.plan, m.y, &my, &b[2]) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, m.plan, b, 3, 0) == MG_OK, "%s",
                  mg_last_error());
    const float want[6] = {1, 0, 9, 0, 10, 0};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(y[i], want[i]);
    ck_assert_int_eq(deleted, 0); /* borrowed: memgrad never deletes */

    mg_binding bb;
    /* wrong dtype */
    DLTensor bad = dl_of(w, MG_F64, 1, sw);
    ck_assert_int_eq(mg_dlpack_bind(ex, m.plan, m.w, &bad, &bb), MG_ERR_DTYPE);
    ck_assert_msg(strstr(mg_last_error(), "'w'") &&
                      strstr(mg_last_error(), "f32"),
                  "%s", mg_last_error());
    /* a transposed view [3, 2] of x's memory has the right shape for a
     * [3, 2] tensor but not contiguous strides; for x use strides (1, 2) */
    int64_t st[2] = {1, 2};
    bad = dl_of(xbuf, MG_F32, 2, sx);
    bad.strides = st;
    ck_assert_int_eq(mg_dlpack_bind(ex, m.plan, m.x, &bad, &bb),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "not contiguous"), "%s",
                  mg_last_error());
    /* explicit compact strides are fine, and size-1 dims may have any */
    int64_t ok_st[2] = {3, 1};
    bad.strides = ok_st;
    ck_assert(mg_dlpack_bind(ex, m.plan, m.x, &bad, &bb) == MG_OK);
    /* wrong device */
    bad = dl_of(w, MG_F32, 1, sw);
    bad.device.device_type = kDLCUDA;
    ck_assert_int_eq(mg_dlpack_bind(ex, m.plan, m.w, &bad, &bb),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "on CUDA"), "%s", mg_last_error());
    /* wrong shape */
    int64_t s4[1] = {4};
    bad = dl_of(w, MG_F32, 1, s4);
    ck_assert_int_eq(mg_dlpack_bind(ex, m.plan, m.w, &bad, &bb), MG_ERR_SHAPE);
    ck_assert_msg(strstr(mg_last_error(), "[3]") &&
                      strstr(mg_last_error(), "[4]"),
                  "%s", mg_last_error());
    /* misaligned byte offset */
    bad = dl_of(w, MG_F32, 1, sw);
    bad.byte_offset = 2;
    ck_assert_int_eq(mg_dlpack_bind(ex, m.plan, m.w, &bad, &bb),
                     MG_ERR_INVALID_ARG);
    my.deleter(&my);
    mw.deleter(&mw);
    ck_assert_int_eq(deleted, 2);
    deleted = 0;
    mg_exec_free(ex);
    tiny_free(&m);
}
END_TEST

static int64_t *exported_values_ok(DLManagedTensor *e, const float *want) {
    const float *v = e->dl_tensor.data;
    for (int i = 0; i < 6; i++) ck_assert_float_eq(v[i], want[i]);
    return e->dl_tensor.shape;
}

START_TEST(test_export_held_across_runs) {
    tiny m;
    tiny_make(&m);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float x[6] = {1, -2, 3, -4, 5, -6}, w[3] = {1, 2, 3};
    mg_binding b[2] = {{m.x, x}, {m.w, w}};
    ck_assert(mg_exec_run(ex, m.plan, b, 2, 0) == MG_OK);
    DLManagedTensor *e1 = NULL, *e2 = NULL;
    ck_assert(mg_exec_export(ex, m.y, &e1) == MG_OK);
    ck_assert(mg_exec_export(ex, m.y, &e2) == MG_OK);
    ck_assert_ptr_eq(e1->dl_tensor.data, e2->dl_tensor.data);
    ck_assert_int_eq(e1->dl_tensor.ndim, 2);
    int64_t *shape = exported_values_ok(e1, (const float[]){1, 0, 9, 0, 10, 0});
    ck_assert(shape[0] == 2 && shape[1] == 3);
    ck_assert(e1->dl_tensor.dtype.code == kDLFloat &&
              e1->dl_tensor.dtype.bits == 32);
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.exported_blocks, 1);
    ck_assert_uint_eq(st.exported_bytes, mg_pool_size_class(6 * 4));
    /* the next run takes another block and leaves the held one alone */
    for (int i = 0; i < 6; i++) x[i] = 100;
    ck_assert(mg_exec_run(ex, m.plan, b, 2, 0) == MG_OK);
    const void *fresh;
    ck_assert(mg_exec_tensor_data(ex, m.y, &fresh) == MG_OK);
    ck_assert_ptr_ne(fresh, e1->dl_tensor.data);
    exported_values_ok(e1, (const float[]){1, 0, 9, 0, 10, 0});
    ck_assert_float_eq(((const float *)fresh)[0], 100);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 2 * mg_pool_size_class(6 * 4));
    e1->deleter(e1);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.exported_blocks, 1); /* e2 still holds it */
    e2->deleter(e2);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.exported_blocks, 0);
    ck_assert_uint_eq(st.exported_bytes, 0);
    ck_assert_uint_eq(st.bytes_in_use, mg_pool_size_class(6 * 4));
    /* exported, then released by the executor first: the consumer's
     * deleter is the last holder */
    ck_assert(mg_exec_export(ex, m.y, &e1) == MG_OK);
    mg_exec_release(ex);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, mg_pool_size_class(6 * 4));
    ck_assert_float_eq(((const float *)e1->dl_tensor.data)[0], 100);
    e1->deleter(e1);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    /* an export outliving its executor frees it when deleted */
    ck_assert(mg_exec_run(ex, m.plan, b, 2, 0) == MG_OK);
    ck_assert(mg_exec_export(ex, m.y, &e1) == MG_OK);
    mg_exec_free(ex);
    ck_assert_float_eq(((const float *)e1->dl_tensor.data)[0], 100);
    e1->deleter(e1);
    tiny_free(&m);
}
END_TEST

START_TEST(test_export_errors_and_phases) {
    tiny m;
    tiny_make(&m);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float x[6] = {1, -2, 3, -4, 5, -6}, w[3] = {1, 2, 3}, y[6];
    float gy[6] = {1, 1, 1, 1, 1, 1};
    mg_binding b[3] = {{m.x, x}, {m.w, w}, {m.y, y}};
    ck_assert(mg_exec_run(ex, m.plan, b, 3, 0) == MG_OK);
    DLManagedTensor *e = NULL;
    ck_assert_int_eq(mg_exec_export(ex, m.y, &e), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "caller bound"), "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_exec_export(ex, m.gw, &e), MG_ERR_UNKNOWN_ID);
    ck_assert_ptr_null(e);
    /* the seed gradient goes in through DLPack, dw comes out through it */
    int64_t sy[2] = {2, 3};
    DLTensor dgy = dl_of(gy, MG_F32, 2, sy);
    mg_saved *sv = NULL;
    ck_assert(mg_exec_forward(ex, m.train, b, 2, 0, &sv) == MG_OK);
    mg_binding bw[3] = {{m.x, x}, {m.w, w}};
    ck_assert(mg_dlpack_bind(ex, m.train, m.gy, &dgy, &bw[2]) == MG_OK);
    int64_t bad_shape[2] = {3, 2};
    DLTensor bad = dl_of(gy, MG_F32, 2, bad_shape);
    mg_binding bb;
    ck_assert_int_eq(mg_dlpack_bind(ex, m.train, m.gy, &bad, &bb),
                     MG_ERR_SHAPE);
    ck_assert_msg(strstr(mg_last_error(), "'gy'"), "%s", mg_last_error());
    ck_assert_msg(mg_exec_backward(ex, m.train, sv, bw, 3) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_export(ex, m.gw, &e) == MG_OK);
    const float *gw = e->dl_tensor.data;
    /* dw_j = sum_i gy * x_ij where x_ij * w_j > 0 */
    ck_assert_float_eq(gw[0], 1);
    ck_assert_float_eq(gw[1], 5);
    ck_assert_float_eq(gw[2], 3);
    mg_saved_free(sv);
    mg_exec_release(ex);
    e->deleter(e);
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    tiny_free(&m);
}
END_TEST

/* A forward output leaves the forward phase zero-copy: its block goes
 * back to the pool when both mg_saved_free and the consumer let go, in
 * either order, and a backward phase in between leaves it alone. */
START_TEST(test_saved_export) {
    tiny m;
    tiny_make(&m);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float x[6] = {1, -2, 3, -4, 5, -6}, w[3] = {1, 2, 3};
    float gy[6] = {1, 1, 1, 1, 1, 1};
    const float want[6] = {1, 0, 9, 0, 10, 0};
    mg_binding b[3] = {{m.x, x}, {m.w, w}, {m.gy, gy}};
    mg_pool_stats st;
    for (int order = 0; order < 2; order++) {
        mg_saved *sv = NULL;
        ck_assert(mg_exec_forward(ex, m.train, b, 2, 0, &sv) == MG_OK);
        const void *held = NULL;
        ck_assert(mg_saved_tensor_data(sv, m.y, &held) == MG_OK);
        DLManagedTensor *e = NULL, *e2 = NULL;
        ck_assert(mg_saved_export(sv, m.y, &e) == MG_OK);
        ck_assert(mg_saved_export(sv, m.y, &e2) == MG_OK);
        ck_assert_ptr_eq(e->dl_tensor.data, held); /* no copy */
        exported_values_ok(e, want);
        mg_exec_pool_stats(ex, &st);
        ck_assert_uint_eq(st.exported_blocks, 1);
        e2->deleter(e2);
        ck_assert_msg(mg_exec_backward(ex, m.train, sv, b, 3) == MG_OK, "%s",
                      mg_last_error());
        exported_values_ok(e, want);
        mg_exec_release(ex); /* the gradient */
        if (order == 0) {
            mg_saved_free(sv);
            mg_exec_pool_stats(ex, &st);
            ck_assert_uint_eq(st.bytes_in_use, mg_pool_size_class(6 * 4));
            exported_values_ok(e, want);
            e->deleter(e);
        } else {
            e->deleter(e);
            mg_exec_pool_stats(ex, &st);
            ck_assert_uint_eq(st.bytes_in_use, mg_pool_size_class(6 * 4));
            mg_saved_free(sv);
        }
        mg_exec_pool_stats(ex, &st);
        ck_assert_uint_eq(st.bytes_in_use, 0);
        ck_assert_uint_eq(st.exported_blocks, 0);
    }
    /* errors: NULL, a gradient (not a forward output), a bound output */
    mg_saved *sv = NULL;
    ck_assert(mg_exec_forward(ex, m.train, b, 2, 0, &sv) == MG_OK);
    DLManagedTensor *e = NULL;
    ck_assert_int_eq(mg_saved_export(NULL, m.y, &e), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_saved_export(sv, m.y, NULL), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_saved_export(sv, m.gw, &e), MG_ERR_UNKNOWN_ID);
    ck_assert_msg(strstr(mg_last_error(), "not an output of the forward"), "%s",
                  mg_last_error());
    ck_assert_ptr_null(e);
    mg_saved_free(sv);
    float y[6];
    mg_binding bo[3] = {{m.x, x}, {m.w, w}, {m.y, y}};
    ck_assert(mg_exec_forward(ex, m.train, bo, 3, 0, &sv) == MG_OK);
    ck_assert_int_eq(mg_saved_export(sv, m.y, &e), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "caller bound"), "%s",
                  mg_last_error());
    mg_saved_free(sv);
    mg_exec_free(ex);
    tiny_free(&m);
}
END_TEST

/* y = tanh(p), p = x * w with w broadcast over x's rows, each seeded
 * (gy, gp) and differentiated for w (gw), planned for y, p and gw: two
 * exportable forward outputs, one of which (y) backward reads. */
typedef struct pair_net {
    mg_graph *g;
    mg_tensor x, w, gy, gp, p, y, gw;
    mg_tensor outs[3]; /* y, p, gw */
    mg_plan *plan;
} pair_net;

static void pair_net_make(pair_net *n) {
    mg_graph *g = n->g = mg_graph_new();
    n->x = mg_input(g, "x", MG_F32, 2, S(2, 3));
    n->w = mg_param(g, "w", MG_F32, 1, S(3));
    n->gy = mg_input(g, "gy", MG_F32, 2, S(2, 3));
    n->gp = mg_input(g, "gp", MG_F32, 2, S(2, 3));
    n->p = mg_mul(g, n->x, n->w);
    TH_OK_T("p", n->p);
    ck_assert(mg_tensor_set_name(g, n->p, "p") == MG_OK);
    n->y = mg_tanh(g, n->p);
    TH_OK_T("y", n->y);
    ck_assert(mg_tensor_set_name(g, n->y, "y") == MG_OK);
    mg_tensor ys[2] = {n->y, n->p}, seeds[2] = {n->gy, n->gp};
    ck_assert(mg_gradients(g, ys, 2, seeds, &n->w, 1, NULL, &n->gw) == MG_OK);
    n->outs[0] = n->y;
    n->outs[1] = n->p;
    n->outs[2] = n->gw;
    n->plan = NULL;
    ck_assert(mg_plan_compile(g, n->outs, 3, NULL, &n->plan) == MG_OK);
}

static void pair_net_free(pair_net *n) {
    mg_plan_free(n->plan);
    mg_graph_free(n->g);
}

/* A write into an exported forward output that the backward phase reads
 * (tanh's output) makes mg_exec_backward fail, naming it, and leaves
 * saved usable: with the bytes restored the backward phase gives the
 * gradients of an untouched run. An output backward does not read (the
 * product x * w, whose gradient reads only x) may be written freely. */
START_TEST(test_saved_export_written) {
    pair_net n;
    pair_net_make(&n);
    const mg_tensor x = n.x, w = n.w, gy = n.gy, gp = n.gp, p = n.p, y = n.y,
                    gw = n.gw;
    mg_plan *plan = n.plan;
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float xv[6] = {1, -2, 3, -4, 5, -6}, wv[3] = {0.1f, 0.2f, 0.3f};
    float ones[6] = {1, 1, 1, 1, 1, 1};
    mg_binding b[4] = {{x, xv}, {w, wv}, {gy, ones}, {gp, ones}};
    /* the gradients of an untouched pair of phases */
    mg_saved *sv = NULL;
    ck_assert(mg_exec_forward(ex, plan, b, 2, 0, &sv) == MG_OK);
    ck_assert_msg(mg_exec_backward(ex, plan, sv, b, 4) == MG_OK, "%s",
                  mg_last_error());
    const void *d = NULL;
    float want[3];
    ck_assert(mg_exec_tensor_data(ex, gw, &d) == MG_OK);
    memcpy(want, d, sizeof want);
    mg_exec_release(ex);
    mg_saved_free(sv);

    ck_assert(mg_exec_forward(ex, plan, b, 2, 0, &sv) == MG_OK);
    DLManagedTensor *ey = NULL, *ep = NULL;
    ck_assert(mg_saved_export(sv, y, &ey) == MG_OK);
    ck_assert(mg_saved_export(sv, p, &ep) == MG_OK);
    float *yd = ey->dl_tensor.data, *pd = ep->dl_tensor.data;
    pd[0] *= 2; /* backward never reads p: no error */
    float keep = yd[4];
    yd[4] *= 2; /* y.mul_(2) on one element */
    ck_assert_int_eq(mg_exec_backward(ex, plan, sv, b, 4), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'y'") &&
                      strstr(mg_last_error(), "written after the forward"),
                  "%s", mg_last_error());
    yd[4] = keep;
    ck_assert_msg(mg_exec_backward(ex, plan, sv, b, 4) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_tensor_data(ex, gw, &d) == MG_OK);
    ck_assert_mem_eq(d, want, sizeof want);
    mg_exec_release(ex);
    mg_saved_free(sv);
    ey->deleter(ey);
    ep->deleter(ep);
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    pair_net_free(&n);
}
END_TEST

/* mg_exec_free while a saved state and one of its exports are alive, then
 * the export's deleter and mg_saved_free in either order: the saved state
 * holds a reference on its executor, as an export does, so the executor
 * goes with the last of them. Before, the deleter-then-mg_saved_free
 * order destroyed the executor while mg_saved_free still gave blocks back
 * to its pool (a use-after-free, seen by ASan). Each of the two forward
 * outputs (y, p) is the exported one in turn, so that a block mg_saved_free
 * gives back after the exported one's is always there, whatever order it
 * holds them in. */
START_TEST(test_saved_outlives_exec) {
    pair_net n;
    pair_net_make(&n);
    const mg_tensor x = n.x, w = n.w, p = n.p, *outs = n.outs;
    mg_plan *plan = n.plan;
    float xv[6] = {1, -2, 3, -4, 5, -6}, wv[3] = {0.1f, 0.2f, 0.3f};
    float pw[6];
    for (int i = 0; i < 6; i++) pw[i] = xv[i] * wv[i % 3];
    mg_binding b[2] = {{x, xv}, {w, wv}};
    for (int k = 0; k < 2; k++)
        for (int deleter_first = 0; deleter_first < 2; deleter_first++) {
            mg_exec *ex = NULL;
            ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
            mg_saved *sv = NULL;
            ck_assert(mg_exec_forward(ex, plan, b, 2, 0, &sv) == MG_OK);
            DLManagedTensor *e = NULL;
            ck_assert(mg_saved_export(sv, outs[k], &e) == MG_OK);
            mg_exec_free(ex); /* the wrong order: saved and e still out */
            /* both stay readable: the executor's pool is still there */
            const void *d = NULL;
            ck_assert(mg_saved_tensor_data(sv, p, &d) == MG_OK);
            ck_assert_mem_eq(d, pw, sizeof pw);
            const float *ev = e->dl_tensor.data;
            ck_assert_float_eq_tol(ev[0], k == 0 ? tanhf(pw[0]) : pw[0], 1e-6f);
            if (deleter_first) {
                e->deleter(e);
                mg_saved_free(sv); /* the executor goes here */
            } else {
                mg_saved_free(sv);
                e->deleter(e); /* or here */
            }
        }
    pair_net_free(&n);
}
END_TEST

TH_MAIN("dlpack", "dlpack", 60, test_bind_checks, test_export_held_across_runs,
        test_export_errors_and_phases, test_saved_export,
        test_saved_export_written, test_saved_outlives_exec)
