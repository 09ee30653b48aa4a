/*
 * test_backend_table.c - the backend table and the workspace contract:
 * the executor finds its backend by device, each backend reports which ops
 * it runs, and every backend's workspace query stays within the workspace
 * the plan lends (the op table's rule), so all scratch memory comes from
 * the pool and the predicted peak counts it. A step whose backend needs
 * more than the plan lends is refused, never run with outside memory.
 *
 * Uses the library's internal headers (src/ is on the include path).
 */
#include "helpers.h"

#include "backend/backend.h"
#include "backend/gemm_split.h"
#include "common/attn_tiles.h"
#include "exec/cpu/cpu_kernels.h"
#include "rewrite/schedule.h"

static const int64_t NCHW[4] = {2, 4, 9, 8};

/* A training graph over conv2d (several geometries), max and average
 * pooling, layernorm, an embedding, cross-entropy and linear
 * cross-entropy: every op that borrows workspace on some backend. Returns the
 * plan of its gradients. */
static mg_plan *workspace_plan(mg_graph *g) {
    mg_tensor x = mg_input(g, "x", MG_F32, 4, NCHW);
    const int64_t w3[4] = {4, 2, 3, 3}, w1[4] = {4, 4, 1, 1};
    mg_tensor wa = mg_param(g, "wa", MG_F32, 4, w3);
    mg_tensor wb = mg_param(g, "wb", MG_F32, 4, w1);
    mg_tensor wc = mg_param(g, "wc", MG_F32, 4, w3);
    /* grouped 3x3 with padding, a direct 1x1, a strided dilated one */
    mg_tensor h = mg_conv2d(g, x, wa, 1, 1, 1, 1, 1, 1, 2);
    /* pools that keep the shape (oneDNN's scratch, and max_pool2d_grad's
     * forward y and argmax, on the CPU) */
    h = mg_max_pool2d(g, mg_relu(g, h), 3, 3, 1, 1, 1, 1);
    h = mg_conv2d(g, h, wb, 1, 1, 0, 0, 1, 1, 1);
    h = mg_avg_pool2d(g, h, 3, 3, 1, 1, 1, 1);
    h = mg_conv2d(g, h, wc, 2, 1, 2, 1, 2, 1, 2);
    const int64_t ln[1] = {8};
    mg_tensor gam = mg_param(g, "gamma", MG_F32, 1, ln);
    mg_tensor bet = mg_param(g, "beta", MG_F32, 1, ln);
    mg_tensor flat =
        mg_sum(g, mg_layernorm(g, h, gam, bet, 1, 1e-5), 0, NULL, 0);
    const int64_t tab[2] = {7, 5}, idx[1] = {6}, lab[1] = {6};
    mg_tensor table = mg_param(g, "table", MG_F32, 2, tab);
    mg_tensor ids = mg_input(g, "ids", MG_I32, 1, idx);
    mg_tensor labels = mg_input(g, "labels", MG_I32, 1, lab);
    mg_tensor logits = mg_embedding(g, table, ids);
    /* index_select's gradient borrows the CSR of its index for CUDA */
    const int64_t sel[1] = {9};
    mg_tensor cols = mg_input(g, "cols", MG_I64, 1, sel);
    mg_tensor picked =
        mg_sum(g, mg_index_select(g, table, 1, cols), 0, NULL, 0);
    mg_tensor loss =
        mg_add(g, mg_add(g, mg_cross_entropy(g, logits, labels), flat), picked);
    /* linear_cross_entropy in chunks of 4 of its 6 rows, both passes */
    const int64_t wv[2] = {9, 5};
    mg_tensor wout = mg_param(g, "wout", MG_F32, 2, wv);
    loss = mg_add(g, loss, mg_linear_cross_entropy(g, logits, wout, labels, 4));
    const mg_tensor xs[7] = {wa, wb, wc, gam, table, x, wout};
    mg_tensor grads[7];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, xs, 7, NULL, grads),
                     MG_OK);
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, grads, 7, NULL, &p), MG_OK);
    return p;
}

/* Step s as the executor hands it to a kernel, without data. */
static mg_kargs step_args(const mg_plan *p, int32_t s) {
    const mg_plan_step *st = &p->step[s];
    mg_kargs a = {.op = st->op,
                  .attrs = p->g->nodes[p->steps[s]].attrs,
                  .n_in = st->n_in};
    for (int i = 0; i < st->n_in; i++) a.in[i].d = *mg_plan_desc(p, st->in[i]);
    a.out.d = *mg_plan_desc(p, p->steps[s]);
    return a;
}

START_TEST(test_table_finds_cpu) {
    ck_assert_int_ge(mgi_backend_table_size, 1);
    const mg_backend_reg *cpu = mgi_backend_find(MG_DEVICE_CPU);
    ck_assert_ptr_nonnull(cpu);
    ck_assert_str_eq(cpu->name, "CPU");
    ck_assert_int_ge(cpu->device_count(), 1);
    ck_assert_ptr_null(mgi_backend_find((mg_device)42));
    mg_backend b;
    ck_assert_int_eq(cpu->init(&b), MG_OK);
    /* every op the CPU kernel table has, and only those, is supported */
    for (int op = 0; op < MG_OP_COUNT; op++) {
        bool leaf = op == MG_OP_INPUT || op == MG_OP_PARAM;
        ck_assert_msg(b.supports_op(b.ctx, (mg_op)op) ==
                          (leaf || mgi_cpu_kernels[op] != NULL),
                      "supports_op disagrees with the kernel table on %s",
                      mgi_op_str((mg_op)op));
    }
    ck_assert(!b.supports_op(b.ctx, MG_OP_COUNT));
    b.destroy(b.ctx);
}
END_TEST

START_TEST(test_workspace_within_plan) {
    mg_graph *g = mg_graph_new();
    mg_plan *p = workspace_plan(g);
    mg_backend cpu;
    ck_assert_int_eq(mgi_backend_cpu_init(&cpu), MG_OK);
    int borrowing = 0, pool_grads = 0, index_select_grads = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        mg_kargs a = step_args(p, s);
        size_t need = cpu.workspace(cpu.ctx, &a);
        ck_assert_msg(need <= mg_plan_step_work(&p->step[s]),
                      "cpu needs %zu bytes for %s, the plan lends %zu", need,
                      mgi_op_str(a.op), mg_plan_step_work(&p->step[s]));
        borrowing += need > 0;
        /* a plan skips the backends' query for ops they say need none */
        for (int b = 0; b < mgi_backend_table_size; b++) {
            const mg_backend_reg *r = mgi_backend_table[b];
            if (r->plan_workspace && r->plan_workspace_op &&
                !r->plan_workspace_op(a.op))
                ck_assert_msg(r->plan_workspace(&a) == 0,
                              "%s asks workspace for %s, which its "
                              "plan_workspace_op leaves out",
                              r->name, mgi_op_str(a.op));
        }
        /* CSR of 9 positions into 5 columns: 5 + 1 + 9 int64 */
        if (a.op == MG_OP_INDEX_SELECT_GRAD) {
            index_select_grads++;
            ck_assert_uint_ge(mg_plan_step_work(&p->step[s]),
                              (5 + 1 + 9) * sizeof(int64_t));
        }
        /* oneDNN's max-pool backward keeps the forward's y and argmax */
        if (a.op == MG_OP_MAX_POOL2D_GRAD) {
            pool_grads++;
            if (mgi_onednn_conv_available() &&
                mgi_cpu_pool_path() == MGI_POOL_ONEDNN)
                ck_assert_uint_gt(need, 0);
        }
#ifdef MG_HAVE_CUDA
        /* through the registry, as the planner would: in a module build
         * this loads libmemgrad-cuda.so (no device needed) */
        size_t cneed = mgi_backend_find(MG_DEVICE_CUDA)->kernel_workspace(&a);
        ck_assert_msg(cneed <= mg_plan_step_work(&p->step[s]),
                      "cuda needs %zu bytes for %s, the plan lends %zu", cneed,
                      mgi_op_str(a.op), mg_plan_step_work(&p->step[s]));
        borrowing += cneed > 0;
#endif
    }
    /* the non-direct convolutions and their gradients borrow */
    ck_assert_int_ge(borrowing, 4);
    ck_assert_int_eq(pool_grads, 1);
    ck_assert_int_eq(index_select_grads, 1);
    cpu.destroy(cpu.ctx);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* A batchnorm over few channels of many elements, and the sums of its
 * gradients: the op table lends the partial sums of the GPU's chunks
 * (src/common/group_reduce.h) and exactly what the CUDA kernels ask. */
START_TEST(test_chunked_reductions_lent) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[4] = {16, 3, 27, 25}, cs[1] = {3};
    mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
    mg_tensor gam = mg_param(g, "gamma", MG_F32, 1, cs);
    mg_tensor bet = mg_param(g, "beta", MG_F32, 1, cs);
    mg_tensor y = mg_batchnorm(g, x, gam, bet, 1e-5);
    const int ax[3] = {0, 2, 3};
    mg_tensor loss =
        mg_sum(g, mg_mean(g, mg_mul(g, y, y), 3, ax, 0), 0, NULL, 0);
    const mg_tensor wrt[3] = {x, gam, bet};
    mg_tensor grads[3];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, grads),
                     MG_OK);
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, grads, 3, NULL, &p), MG_OK);
    int lent[MG_OP_COUNT] = {0};
    for (int32_t s = 0; s < p->n_steps; s++) {
        mg_kargs a = step_args(p, s);
        const size_t work = mg_plan_step_work(&p->step[s]);
        if (work > 0) lent[a.op]++;
#ifdef MG_HAVE_CUDA
        size_t cneed = mgi_backend_find(MG_DEVICE_CUDA)->kernel_workspace(&a);
        /* the rule is shared: the plan lends what the kernel asks, rounded
         * up to whole 256-byte units */
        ck_assert_msg(cneed <= work && work - cneed < MG_STEP_WORK_UNIT,
                      "cuda needs %zu bytes for %s, the plan lends %zu", cneed,
                      mgi_op_str(a.op), work);
#endif
    }
    /* 16 * 675 elements per channel: 2 chunks of each of 3 channels */
    ck_assert_int_ge(lent[MG_OP_BATCHNORM], 1);
    ck_assert_int_ge(lent[MG_OP_BATCHNORM_GRAD_INPUT], 1);
    ck_assert_int_ge(lent[MG_OP_BATCHNORM_GRAD_GAMMA], 1);
    ck_assert_int_ge(lent[MG_OP_MEAN] + lent[MG_OP_SUM], 1);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* Attention's workspace on both CUDA forms: where a chunk of batch
 * entries' score matrices fits (the GEMM form) and where one entry's alone
 * is too big (by rows, D only). The op table's rule covers the CUDA
 * kernels' query, and lends exactly it where the GEMM form needs more than
 * the CPU's tiles (src/common/attn_tiles.h). */
START_TEST(test_attention_lent) {
    /* lq * lk: 70 * 300 fits 24 entries, 600 * 900 none; 1 * 100000 fits
     * 5 entries of 6, more than the CPU's tiles for 6 rows */
    const int64_t shapes[3][2] = {{70, 300}, {600, 900}, {1, 100000}};
    for (int v = 0; v < 3; v++) {
        mg_graph *g = mg_graph_new();
        const int64_t qs[4] = {2, 3, shapes[v][0], 5},
                      ks[4] = {2, 3, shapes[v][1], 5},
                      vs[4] = {2, 3, shapes[v][1], 4};
        mg_tensor q = mg_param(g, "q", MG_F32, 4, qs);
        mg_tensor k = mg_param(g, "k", MG_F32, 4, ks);
        mg_tensor val = mg_param(g, "v", MG_F32, 4, vs);
        mg_tensor y = mg_attention(g, q, k, val, v == 0, 0);
        mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
        const mg_tensor wrt[3] = {q, k, val};
        mg_tensor grads[3];
        ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, grads),
                         MG_OK);
        mg_plan *p = NULL;
        ck_assert_int_eq(mg_plan_compile(g, grads, 3, NULL, &p), MG_OK);
        int seen = 0;
        for (int32_t st = 0; st < p->n_steps; st++) {
            mg_kargs a = step_args(p, st);
            if (a.op != MG_OP_ATTENTION && a.op != MG_OP_ATTENTION_GRAD)
                continue;
            seen++;
            const int grad = a.op == MG_OP_ATTENTION_GRAD;
            const size_t work = mg_plan_step_work(&p->step[st]);
            const int64_t chunk =
                mg_attn_cuda_chunk(6, shapes[v][0], shapes[v][1], grad);
            ck_assert_int_eq(chunk, v == 0 ? 6 : v == 1 ? 0 : 5);
            const size_t cuda = (size_t)mg_attn_cuda_elems(6, shapes[v][0],
                                                           shapes[v][1], grad) *
                                sizeof(float);
            ck_assert_uint_le(cuda, work);
            if (v == 2) /* the GEMM form needs more than the CPU here */
                ck_assert_uint_lt(work - cuda, MG_STEP_WORK_UNIT);
#ifdef MG_HAVE_CUDA
            size_t cneed =
                mgi_backend_find(MG_DEVICE_CUDA)->kernel_workspace(&a);
            ck_assert_msg(cneed == cuda,
                          "cuda asks %zu bytes for %s, the rule says %zu",
                          cneed, mgi_op_str(a.op), cuda);
#endif
        }
        ck_assert_int_eq(seen, 2);
        mg_plan_free(p);
        mg_graph_free(g);
    }
}
END_TEST

/* The cuBLAS workspace of a CUDA plan (backend/gemm_split.h): only where K
 * is the longest dimension and the output small, never overflowing. */
START_TEST(test_gemm_split_rule) {
    ck_assert_uint_eq(mg_gemm_split_bytes(64, 32, 256, 1, 4),
                      (size_t)MG_GEMM_SPLIT_PARTS * 64 * 32 * 4);
    ck_assert_uint_eq(mg_gemm_split_bytes(64, 32, 256, 3, 8),
                      (size_t)MG_GEMM_SPLIT_PARTS * 64 * 32 * 3 * 8);
    ck_assert_uint_eq(mg_gemm_split_bytes(256, 32, 64, 1, 4), 0); /* k < m */
    ck_assert_uint_eq(mg_gemm_split_bytes(32, 64, 64, 1, 4), 0);  /* k = n */
    ck_assert_uint_eq(mg_gemm_split_bytes(0, 32, 64, 1, 4), 0);
    /* outputs with tiles enough for every SM, and products whose sizes
     * overflow 64 bits, get none */
    ck_assert_uint_eq(mg_gemm_split_bytes(2048, 2048, 1 << 20, 1, 4), 0);
    ck_assert_uint_eq(mg_gemm_split_bytes(512, 512, 1 << 20, 16, 4), 0);
    ck_assert_uint_eq(mg_gemm_split_bytes((int64_t)1 << 40, (int64_t)1 << 40,
                                          INT64_MAX, 1, 4),
                      0);
    ck_assert_uint_eq(mgi_plan_extra_offset(0), 0);
    ck_assert_uint_eq(mgi_plan_extra_offset(1), MGI_PLAN_EXTRA_ALIGN);
    ck_assert_uint_eq(mgi_plan_extra_offset(MGI_PLAN_EXTRA_ALIGN),
                      MGI_PLAN_EXTRA_ALIGN);
}
END_TEST

/* A linear layer's training plan for the CPU and for CUDA: the CUDA plan
 * lends the weight gradient's product (K = the batch, the longest) the
 * rule's bytes beyond its own workspace and nothing more anywhere; its
 * predicted peak counts them, and the executor reaches that peak. Run on
 * the CPU, whose kernels leave the extra bytes alone, it gives the CPU
 * plan's bits. An unknown device is refused. */
START_TEST(test_cuda_plan_lends_gemm_split) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[2] = {256, 64}, ws[2] = {64, 32};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, xs);
    mg_tensor w = mg_param(g, "w", MG_F32, 2, ws);
    mg_tensor h = mg_tanh(g, mg_matmul(g, x, w, 0, 0));
    mg_tensor loss = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
    const mg_tensor wrt[2] = {w, x};
    mg_tensor grads[2];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 2, NULL, grads),
                     MG_OK);
    const mg_tensor outs[3] = {loss, grads[0], grads[1]};
    mg_plan *cpu = NULL, *cuda = NULL, *bad = NULL;
    /* unfused, as CUDA plans are, so that the steps pair up */
    const mg_plan_options ou = {.no_fusion = 1};
    ck_assert_int_eq(mg_plan_compile(g, outs, 3, &ou, &cpu), MG_OK);
    const mg_plan_options oc = {.device = MG_DEVICE_CUDA};
    ck_assert_int_eq(mg_plan_compile(g, outs, 3, &oc, &cuda), MG_OK);
    const mg_plan_options ob = {.device = (mg_device)7};
    ck_assert_int_eq(mg_plan_compile(g, outs, 3, &ob, &bad),
                     MG_ERR_INVALID_ARG);
    ck_assert_ptr_null(bad);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "unknown device 7"));

    /* a build without CUDA has no CUDA row, so its CUDA plans lend none */
    const bool built = mgi_backend_find(MG_DEVICE_CUDA) != NULL;
    ck_assert_int_eq(cpu->n_steps, cuda->n_steps);
    int lent = 0;
    size_t most = 0;
    for (int32_t st = 0; st < cpu->n_steps; st++) {
        ck_assert_int_eq(cpu->steps[st], cuda->steps[st]);
        const mg_kargs a = step_args(cuda, st);
        const size_t split = mg_gemm_split_step_bytes(&a);
        const size_t w_cpu = mg_plan_step_work(&cpu->step[st]),
                     w_cuda = mg_plan_step_work(&cuda->step[st]);
        if (!split || !built) {
            ck_assert_uint_eq(w_cuda, w_cpu);
            continue;
        }
        /* dW = x^T dh: [64, 32] over K = 256 */
        lent++;
        ck_assert_int_eq(a.op, MG_OP_MATMUL);
        ck_assert_uint_eq(split, (size_t)MG_GEMM_SPLIT_PARTS * 64 * 32 * 4);
        ck_assert_uint_eq(w_cuda, mgi_plan_extra_offset(w_cpu) + split);
        if (split > most) most = split;
    }
    ck_assert_int_eq(lent, built ? 1 : 0);

    float *xd = malloc(256 * 64 * sizeof *xd), *wd = malloc(64 * 32 * 4);
    for (int i = 0; i < 256 * 64; i++) xd[i] = (float)((i * 37) % 101) / 101;
    for (int i = 0; i < 64 * 32; i++) wd[i] = (float)((i * 13) % 29) / 290;
    float res[2][1 + 64 * 32];
    size_t peak[2], pred[2];
    for (int v = 0; v < 2; v++) {
        mg_plan *p = v ? cuda : cpu;
        float *dx = malloc(256 * 64 * sizeof *dx);
        const mg_binding b[5] = {{x, xd},
                                 {w, wd},
                                 {loss, &res[v][0]},
                                 {grads[0], &res[v][1]},
                                 {grads[1], dx}};
        mg_exec *ex = NULL;
        ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
        ck_assert_int_eq(mg_exec_run(ex, p, b, 5, 1), MG_OK);
        mg_pool_stats ps;
        ck_assert_int_eq(mg_exec_pool_stats(ex, &ps), MG_OK);
        peak[v] = ps.peak_bytes_in_use;
        pred[v] = mg_plan_predicted_peak(p, b, 5);
        ck_assert_uint_eq(peak[v], pred[v]);
        mg_exec_free(ex);
        free(dx);
    }
    ck_assert_uint_ge(pred[1], pred[0]);
    ck_assert_uint_le(pred[1], pred[0] + mg_pool_size_class(most));
    ck_assert_int_eq(memcmp(res[0], res[1], sizeof res[0]), 0);
    free(xd);
    free(wd);
    mg_plan_free(cpu);
    mg_plan_free(cuda);
    mg_graph_free(g);
}
END_TEST

/* A plan that lends less than the backend needs is refused before any
 * kernel runs, and the run leaves nothing in use. */
START_TEST(test_short_workspace_refused) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 4, NCHW);
    const int64_t ws[4] = {3, 4, 3, 3};
    mg_tensor w = mg_param(g, "w", MG_F32, 4, ws);
    mg_tensor y = mg_conv2d(g, x, w, 1, 1, 1, 1, 1, 1, 1);
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, &y, 1, NULL, &p), MG_OK);
    ck_assert_int_eq(p->n_steps, 1);
    ck_assert_uint_gt(p->step[0].work_units, 0);
    p->step[0].work_units = 0;
    float *xd = calloc(2 * 4 * 9 * 8, sizeof *xd);
    float *wd = calloc(3 * 4 * 3 * 3, sizeof *wd);
    const mg_binding b[2] = {{x, xd}, {w, wd}};
    mg_exec *ex = NULL;
    ck_assert_int_eq(mg_exec_new(NULL, &ex), MG_OK);
    ck_assert_int_eq(mg_exec_run(ex, p, b, 2, 1), MG_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "workspace"));
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "cpu backend"));
    mg_pool_stats st;
    ck_assert_int_eq(mg_exec_pool_stats(ex, &st), MG_OK);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    free(xd);
    free(wd);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("backend_table", "core", 0, test_table_finds_cpu,
        test_workspace_within_plan, test_chunked_reductions_lent,
        test_attention_lent, test_short_workspace_refused, test_gemm_split_rule,
        test_cuda_plan_lends_gemm_split)
