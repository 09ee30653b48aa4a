/*
 * test_cuda.c - the CUDA backend against the CPU backend.
 *
 * Without a CUDA device (or in a build without CUDA) it prints
 * "skipped: no CUDA device" and checks only that mg_exec_new refuses
 * MG_DEVICE_CUDA with MG_ERR_UNSUPPORTED and a message, and (with CUDA
 * built in) that the CUDA kernel table covers every op.
 *
 * With a device: every op forward and backward matches the CPU (normalised
 * error <= 1e-5 in f32; cuBLAS runs without TF32), dropout masks equal the
 * CPU's bit for bit, checkpointed gradients equal plain ones bit for bit on
 * the GPU, the pool's measured peak equals the plan's prediction, 1000
 * repeated steps do not grow reserved or device memory, a cudaMalloc
 * failure is a clean MG_ERR_NOMEM (a 1 TiB tensor, a max_bytes below the
 * plan's need, and a model whose activations under policy none take 1.5
 * times the GPU's memory, which the same executor then trains
 * checkpointed), and a bad label is a clean error. Each test is a case of
 * its own (CK_RUN_CASE=name runs one; bench/gpu_run.sh runs each in its
 * own process).
 */
#include "helpers.h"

#include "common/ir.h"

#include <stdarg.h>

#ifdef MG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#endif

static int n_devices(void) {
#ifdef MG_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

/* Runs on every machine: without a device the CUDA exec is refused. */
START_TEST(test_exec_new_cuda) {
    mg_exec *ex = NULL;
    mg_exec_options o = {.device = MG_DEVICE_CUDA};
    mg_clear_error();
    mg_status s = mg_exec_new(&o, &ex);
    if (n_devices() == 0) {
        ck_assert_int_eq(s, MG_ERR_UNSUPPORTED);
        ck_assert_ptr_null(ex);
        ck_assert_msg(strstr(mg_last_error(), "CUDA") != NULL, "message: %s",
                      mg_last_error());
    } else {
        ck_assert_msg(s == MG_OK, "%s", mg_last_error());
        mg_exec_free(ex);
    }
}
END_TEST

#ifdef MG_HAVE_CUDA

/* Needs no device: the kernel table has an entry for every op. */
START_TEST(test_kernel_table_complete) {
    const mg_backend_reg *cuda = mgi_backend_find(MG_DEVICE_CUDA);
    ck_assert_ptr_nonnull(cuda);
    for (int op = 0; op < MG_OP_COUNT; op++)
        ck_assert_msg(cuda->has_kernel((mg_op)op),
                      "the CUDA backend has no kernel for op %s",
                      mgi_op_str((mg_op)op));
}
END_TEST

#define CU_OK(call)                                                            \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call,                      \
                      cudaGetErrorString(e_));                                 \
    } while (0)

static void *dev_copy(const void *host, size_t n) {
    void *d = NULL;
    CU_OK(cudaMalloc(&d, n ? n : 1));
    if (n) CU_OK(cudaMemcpy(d, host, n, cudaMemcpyHostToDevice));
    return d;
}

/* Plans for the GPU are compiled for it: a CPU plan may fuse chains of
 * element-wise ops, which the CUDA backend has no kernel for. */
static const mg_plan_options cuda_po = {.device = MG_DEVICE_CUDA};

static mg_exec *cuda_exec(size_t max_bytes) {
    mg_exec *ex = NULL;
    mg_exec_options o = {.device = MG_DEVICE_CUDA, .max_bytes = max_bytes};
    ck_assert_msg(mg_exec_new(&o, &ex) == MG_OK, "%s", mg_last_error());
    return ex;
}

/* ---- every op, forward and backward, against the CPU -------------------- */

#define MAX_LEAVES 8
#define MAX_OUTS 12

typedef struct op_case {
    mg_graph *g;
    const char *name;
    int n_leaves;
    mg_tensor leaves[MAX_LEAVES];
    void *host[MAX_LEAVES];
    int n_outs;
    mg_tensor outs[MAX_OUTS];
    int exact_forward;          /* dropout: bit-equal, not just close */
    const mg_checkpoints *ckpt; /* for mg_gradients: NULL, or compaction */
} op_case;

static bool ops_seen[MG_OP_COUNT];
static th_rng rng;

static mg_tensor leaf(op_case *c, mg_dtype dt, int ndim, const int64_t *sh,
                      double lo, double hi) {
    char name[16];
    snprintf(name, sizeof name, "in%d", c->n_leaves);
    mg_tensor t = mg_input(c->g, name, dt, ndim, sh);
    TH_OK_T(name, t);
    int64_t n = th_numel(ndim, sh);
    void *h = malloc((size_t)n * mg_dtype_size(dt) + 1);
    if (dt == MG_I32)
        for (int64_t i = 0; i < n; i++)
            ((int32_t *)h)[i] = (int32_t)(th_rng_next(&rng) % (uint64_t)hi);
    else if (dt == MG_I64)
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)h)[i] = (int64_t)(th_rng_next(&rng) % (uint64_t)hi);
    else if (dt == MG_F64) th_fill_f64(&rng, h, n, lo, hi, 0.05);
    else th_fill_f32(&rng, h, n, lo, hi, 0.05);
    c->leaves[c->n_leaves] = t;
    c->host[c->n_leaves++] = h;
    return t;
}

static mg_tensor fin(op_case *c, int ndim, const int64_t *sh) {
    return leaf(c, MG_F32, ndim, sh, -2, 2);
}

static mg_tensor pos(op_case *c, int ndim, const int64_t *sh) {
    return leaf(c, MG_F32, ndim, sh, 0.5, 2);
}

/* Outputs: y and, through loss = sum(y * r) with r random, the gradient of
 * every float leaf. */
static void finish(op_case *c, mg_tensor y) {
    TH_OK_T(c->name, y);
    int nd;
    int64_t sh[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(c->g, y, &nd, sh) == MG_OK);
    mg_tensor xs[MAX_LEAVES];
    int n_xs = 0;
    for (int i = 0; i < c->n_leaves; i++) {
        mg_dtype dt;
        mg_tensor_dtype(c->g, c->leaves[i], &dt);
        if (dt == MG_F32) xs[n_xs++] = c->leaves[i];
    }
    mg_tensor r = fin(c, nd, sh);
    mg_tensor loss = mg_sum(c->g, mg_mul(c->g, y, r), 0, NULL, 0);
    TH_OK_T(c->name, loss);
    c->outs[c->n_outs++] = y;
    ck_assert_msg(mg_gradients(c->g, &loss, 1, NULL, xs, n_xs, c->ckpt,
                               c->outs + 1) == MG_OK,
                  "%s: %s", c->name, mg_last_error());
    c->n_outs += n_xs;
    for (int i = 0; i < mg_graph_num_tensors(c->g); i++) {
        const char *op = mg_tensor_op_name(c->g, i);
        for (int k = 0; k < MG_OP_COUNT; k++)
            if (op && strcmp(op, mgi_op_str((mg_op)k)) == 0) ops_seen[k] = true;
    }
}

/* Every case runs to the end even after one fails, so that a single run on
 * a GPU names every op that disagrees: failures are counted and listed, and
 * the test fails once at the end. */
static int n_failed_cases;
static char failed_cases[2048];

static void case_failed(const op_case *c, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", c->name, msg);
    fflush(stdout);
    if (n_failed_cases++ < 40) {
        size_t at = strlen(failed_cases);
        snprintf(failed_cases + at, sizeof failed_cases - at, "%s%s",
                 at ? ", " : "", c->name);
    }
}

/* Runs c on the CPU (host) or the GPU (device buffers); out[i] gets host
 * copies of the outputs. Returns 0 when the run failed (and says why). */
static int run_case(op_case *c, int gpu, float **out) {
    int ok = 1;
    mg_plan *p = NULL;
    /* each side's own plan: the CUDA one lends cuBLAS its split-K room */
    const mg_plan_options po = {.device = gpu ? MG_DEVICE_CUDA : MG_DEVICE_CPU};
    ck_assert_msg(mg_plan_compile(c->g, c->outs, c->n_outs, &po, &p) == MG_OK,
                  "%s: %s", c->name, mg_last_error());
    mg_exec *ex = NULL;
    if (gpu) ex = cuda_exec(0);
    else ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_binding b[MAX_LEAVES + MAX_OUTS];
    void *dev[MAX_LEAVES + MAX_OUTS] = {0};
    for (int i = 0; i < c->n_leaves; i++) {
        size_t n = mg_tensor_nbytes(c->g, c->leaves[i]);
        dev[i] = gpu ? dev_copy(c->host[i], n) : c->host[i];
        b[i] = (mg_binding){c->leaves[i], dev[i]};
    }
    for (int j = 0; j < c->n_outs; j++) {
        size_t n = mg_tensor_nbytes(c->g, c->outs[j]);
        out[j] = calloc(1, n + 1);
        void *o = out[j];
        if (gpu) CU_OK(cudaMalloc(&o, n + 1));
        dev[c->n_leaves + j] = o;
        b[c->n_leaves + j] = (mg_binding){c->outs[j], o};
    }
    mg_status s = mg_exec_run(ex, p, b, c->n_leaves + c->n_outs, 1234);
    if (s != MG_OK) {
        case_failed(c, "run on %s: %s", gpu ? "cuda" : "cpu", mg_last_error());
        ok = 0;
    }
    if (gpu) {
        for (int j = 0; ok && j < c->n_outs; j++) {
            cudaError_t e = cudaMemcpy(out[j], dev[c->n_leaves + j],
                                       mg_tensor_nbytes(c->g, c->outs[j]),
                                       cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) {
                case_failed(c, "copy back: %s", cudaGetErrorString(e));
                ok = 0;
            }
        }
        for (int i = 0; i < c->n_leaves + c->n_outs; i++) cudaFree(dev[i]);
    }
    mg_exec_free(ex);
    mg_plan_free(p);
    return ok;
}

static void compare_outputs(op_case *c, float **cpu, float **gpu) {
    for (int j = 0; j < c->n_outs; j++) {
        int64_t n = mg_tensor_numel(c->g, c->outs[j]);
        if (j == 0 && c->exact_forward &&
            memcmp(cpu[j], gpu[j], (size_t)n * 4) != 0)
            case_failed(c, "forward differs from the CPU bit-wise");
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)gpu[j][i] - (double)cpu[j][i];
            num += d * d;
            den += (double)cpu[j][i] * cpu[j][i];
        }
        double err = sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
        if (!(err <= 1e-5 || (den == 0 && num == 0)))
            case_failed(c, "output %d (%s): normalised error %.3g vs the CPU",
                        j, j ? "gradient" : "forward", err);
        else if (getenv("MG_CUDA_TEST_VERBOSE"))
            printf("ok %s output %d: %.3g\n", c->name, j, err);
    }
}

static void check_case(op_case *c) {
    float *cpu[MAX_OUTS], *gpu[MAX_OUTS];
    int ok = run_case(c, 0, cpu);
    ok = run_case(c, 1, gpu) && ok;
    if (ok) compare_outputs(c, cpu, gpu);
    for (int j = 0; j < c->n_outs; j++) {
        free(cpu[j]);
        free(gpu[j]);
    }
    for (int i = 0; i < c->n_leaves; i++) free(c->host[i]);
    mg_graph_free(c->g);
}

#define CASE(label)                                                            \
    for (op_case c_ = {.g = mg_graph_new(), .name = (label)}, *c = &c_; c;     \
         check_case(c), c = NULL)

static const int64_t S3_5_7[] = {3, 5, 7};
static const int64_t s34[] = {3, 4}, s4[] = {4}, s234[] = {2, 3, 4},
                     s31[] = {3, 1}, s14[] = {1, 4}, s35[] = {3, 5};

START_TEST(test_every_op_matches_cpu) {
    th_rng_init(&rng, 5);
    n_failed_cases = 0;
    failed_cases[0] = 0;
    memset(ops_seen, 0, sizeof ops_seen);
    /* matmul: 2-D, transposed, batched, shared 2-D operand */
    for (int v = 0; v < 5; v++) CASE("matmul") {
            const int ta = v == 1 || v == 4, tb = v == 2 || v == 4;
            const int64_t a2[] = {ta ? 5 : 4, ta ? 4 : 5},
                          b2[] = {tb ? 3 : 5, tb ? 5 : 3},
                          a3[] = {2, ta ? 5 : 4, ta ? 4 : 5},
                          b3[] = {2, tb ? 3 : 5, tb ? 5 : 3};
            mg_tensor a = v >= 3 ? fin(c, 3, a3) : fin(c, 2, a2);
            mg_tensor b = v == 4 ? fin(c, 3, b3) : fin(c, 2, b2);
            finish(c, mg_matmul(c->g, a, b, ta, tb));
        }
    /* K the longest dimension: a CUDA plan lends cuBLAS room to split it
     * (backend/gemm_split.h), on the forward product and on both gradients
     * (whose K is 24 and 20 there: none) */
    CASE("matmul split-K") {
        const int64_t a2[] = {3000, 24}, b2[] = {3000, 20};
        finish(c, mg_matmul(c->g, fin(c, 2, a2), fin(c, 2, b2), 1, 0));
    }
    CASE("add") finish(c, mg_add(c->g, fin(c, 2, s34), fin(c, 1, s4)));
    CASE("sub") finish(c, mg_sub(c->g, fin(c, 3, s234), fin(c, 2, s31)));
    CASE("mul") finish(c, mg_mul(c->g, fin(c, 2, s31), fin(c, 2, s14)));
    CASE("div") finish(c, mg_div(c->g, fin(c, 2, s34), pos(c, 2, s34)));
    CASE("neg") finish(c, mg_neg(c->g, fin(c, 2, s35)));
    CASE("relu") finish(c, mg_relu(c->g, fin(c, 2, s35)));
    CASE("gelu") finish(c, mg_gelu(c->g, fin(c, 2, s35)));
    CASE("silu") finish(c, mg_silu(c->g, fin(c, 2, s35)));
    CASE("erf") finish(c, mg_erf(c->g, fin(c, 2, s35)));
    CASE("pow") finish(c, mg_pow(c->g, pos(c, 2, s35), 2.5));
    CASE("leaky_relu") finish(c, mg_leaky_relu(c->g, fin(c, 2, s35), 0.1));
    CASE("is_nonzero") {
        mg_tensor x = fin(c, 2, s35);
        finish(c, mg_mul(c->g, mg_is_nonzero(c->g, x), x));
    }
    CASE("cast") {
        /* f32 -> f64 -> f32, and i32 ids -> f32, in one product */
        mg_tensor x = mg_cast(c->g, fin(c, 2, s35), MG_F64);
        mg_tensor ids = mg_cast(c->g, leaf(c, MG_I32, 2, s35, 0, 7), MG_F32);
        finish(c, mg_mul(c->g, mg_cast(c->g, mg_mul(c->g, x, x), MG_F32), ids));
    }
    CASE("tanh") finish(c, mg_tanh(c->g, fin(c, 2, s35)));
    CASE("sigmoid") finish(c, mg_sigmoid(c->g, fin(c, 2, s35)));
    CASE("exp") finish(c, mg_exp(c->g, fin(c, 2, s35)));
    CASE("log") finish(c, mg_log(c->g, pos(c, 2, s35)));
    CASE("sqrt") finish(c, mg_sqrt(c->g, pos(c, 2, s35)));
    CASE("scale") finish(c, mg_scale(c->g, fin(c, 2, s35), 2.5));
    CASE("fill") {
        mg_tensor f = mg_fill(c->g, MG_F32, 2, s34, 1.5);
        finish(c, mg_mul(c->g, fin(c, 2, s34), f));
    }
    {
        const int ax1[] = {1}, ax02[] = {0, 2}, ax0[] = {0};
        const int64_t tall[] = {100, 3}, wide[] = {3, 300};
        CASE("sum axis 1") finish(c, mg_sum(c->g, fin(c, 3, s234), 1, ax1, 0));
        CASE("sum all") finish(c, mg_sum(c->g, fin(c, 3, s234), 0, NULL, 0));
        CASE("mean 0,2") finish(c, mg_mean(c->g, fin(c, 3, s234), 2, ax02, 1));
        CASE("sum long") finish(c, mg_sum(c->g, fin(c, 2, tall), 1, ax0, 0));
        CASE("mean wide") finish(c, mg_mean(c->g, fin(c, 2, wide), 1, ax1, 0));
        CASE("softmax wide") finish(c, mg_softmax(c->g, fin(c, 2, wide), 1));
        CASE("log_softmax")
        finish(c, mg_log_softmax(c->g, fin(c, 2, wide), -1));
    }
    CASE("broadcast_to")
    finish(c, mg_broadcast_to(c->g, fin(c, 2, s31), 3, s234));
    {
        const int64_t s26[] = {2, 6};
        const int perm[] = {2, 0, 1};
        CASE("reshape") finish(c, mg_reshape(c->g, fin(c, 2, s26), 2, s34));
        CASE("permute") finish(c, mg_permute(c->g, fin(c, 3, s234), perm));
        CASE("transpose") finish(c, mg_transpose(c->g, fin(c, 3, s234), 0, 2));
        CASE("softmax inner") finish(c, mg_softmax(c->g, fin(c, 3, s234), 1));
    }
    {
        const int64_t s833[] = {8, 33};
        CASE("dropout") {
            c->exact_forward = 1;
            finish(c, mg_dropout(c->g, fin(c, 2, s833), 0.3, 77));
        }
    }
    {
        const int64_t lg[] = {6, 5}, lb[] = {6};
        CASE("cross_entropy") {
            mg_tensor x = fin(c, 2, lg);
            mg_tensor l = leaf(c, MG_I32, 1, lb, 0, 5);
            finish(c, mg_cross_entropy(c->g, x, l));
        }
        CASE("cross_entropy i64") {
            mg_tensor x = fin(c, 2, lg);
            mg_tensor l = leaf(c, MG_I64, 1, lb, 0, 5);
            finish(c, mg_cross_entropy(c->g, x, l));
        }
        CASE("mse") finish(c, mg_mse(c->g, fin(c, 2, lg), fin(c, 2, lg)));
    }
    {
        const int64_t x1[] = {2, 4, 7, 6}, w1[] = {6, 2, 3, 3};
        const int64_t x2[] = {2, 3, 4, 4}, w2[] = {5, 3, 1, 1};
        const int64_t x3[] = {3, 3, 6, 6}, w3[] = {4, 3, 3, 3};
        CASE("conv2d grouped")
        finish(c, mg_conv2d(c->g, fin(c, 4, x1), fin(c, 4, w1), 1, 2, 1, 0, 1,
                            2, 2));
        CASE("conv2d 1x1")
        finish(c, mg_conv2d(c->g, fin(c, 4, x2), fin(c, 4, w2), 1, 1, 0, 0, 1,
                            1, 1));
        CASE("conv2d")
        finish(c, mg_conv2d(c->g, fin(c, 4, x3), fin(c, 4, w3), 1, 1, 1, 1, 1,
                            1, 1));
        const int64_t xp[] = {2, 3, 7, 6};
        CASE("max_pool2d")
        finish(c, mg_max_pool2d(c->g, fin(c, 4, xp), 3, 2, 2, 2, 1, 1));
        /* the compact saved forms (issue 29): relu's sign mask and the
         * pool's argmax, read by relu_grad_mask, max_pool2d_grad_argmax */
        const mg_checkpoints compact = {.policy = MG_CKPT_NONE, .compact = 1};
        CASE("max_pool2d relu compact") {
            c->ckpt = &compact;
            mg_tensor r = mg_relu(c->g, mg_neg(c->g, fin(c, 4, xp)));
            finish(c, mg_scale(c->g, mg_max_pool2d(c->g, r, 3, 2, 2, 2, 1, 1),
                               2.0));
        }
        /* 16-bit storage (mg_checkpoints.store16): tanh's output packed to
         * bfloat16 (an odd count, 3 * 5 * 7, leaves half a word) and read
         * unpacked by tanh_grad, the same rounding on both devices */
        const mg_checkpoints store16 = {.policy = MG_CKPT_NONE, .store16 = 1};
        CASE("tanh store16") {
            c->ckpt = &store16;
            finish(c, mg_tanh(c->g, fin(c, 3, S3_5_7)));
        }
        CASE("avg_pool2d")
        finish(c, mg_avg_pool2d(c->g, fin(c, 4, xp), 3, 2, 2, 2, 1, 1));
        /* each side's padding, ceil_mode, both divisors */
        const mg_pool2d_opts po = {3, 3, 2, 2, 1, 0, 0, 1, 1, 1},
                             pz = {3, 3, 2, 2, 1, 0, 0, 1, 1, 0};
        CASE("max_pool2d_ex")
        finish(c, mg_max_pool2d_ex(c->g, fin(c, 4, xp), &po));
        CASE("avg_pool2d_ex")
        finish(c, mg_avg_pool2d_ex(c->g, fin(c, 4, xp), &po));
        CASE("avg_pool2d_ex count_include_pad=0")
        finish(c, mg_avg_pool2d_ex(c->g, fin(c, 4, xp), &pz));
        const int64_t xb[] = {4, 3, 5, 2}, g3[] = {3};
        CASE("batchnorm")
        finish(c, mg_batchnorm(c->g, fin(c, 4, xb), fin(c, 1, g3),
                               fin(c, 1, g3), 1e-5));
        /* groups of 2304 elements: a block of 1024 threads, rows of 9
         * columns each thread steps across */
        const int64_t xw[] = {256, 5, 3, 3}, g5w[] = {5};
        CASE("batchnorm wide")
        finish(c, mg_batchnorm(c->g, fin(c, 4, xw), fin(c, 1, g5w),
                               fin(c, 1, g5w), 1e-5));
        /* few channels of many elements: split into chunks over several
         * blocks (src/common/group_reduce.h), with chunk boundaries inside
         * rows (C = 675, 272) and rows of one element (BatchNorm1d) */
        const int64_t xk[] = {16, 3, 27, 25}, g3k[] = {3},
                      xk4[] = {64, 4, 16, 17}, g4k[] = {4}, xk1[] = {40000, 3};
        CASE("batchnorm chunked")
        finish(c, mg_batchnorm(c->g, fin(c, 4, xk), fin(c, 1, g3k),
                               fin(c, 1, g3k), 1e-5));
        CASE("batchnorm chunked 4")
        finish(c, mg_batchnorm(c->g, fin(c, 4, xk4), fin(c, 1, g4k),
                               fin(c, 1, g4k), 1e-5));
        CASE("batchnorm chunked 1d")
        finish(c, mg_batchnorm(c->g, fin(c, 2, xk1), fin(c, 1, g3k),
                               fin(c, 1, g3k), 1e-5));
        {
            const int ax023[] = {0, 2, 3}, ax0[] = {0};
            const int64_t rows[] = {9000, 2};
            CASE("sum chunked 0,2,3")
            finish(c, mg_sum(c->g, fin(c, 4, xk), 3, ax023, 0));
            CASE("mean chunked 0,2,3 keepdims")
            finish(c, mg_mean(c->g, fin(c, 4, xk4), 3, ax023, 1));
            CASE("sum chunked rows")
            finish(c, mg_sum(c->g, fin(c, 2, rows), 1, ax0, 0));
            CASE("mean chunked all")
            finish(c, mg_mean(c->g, fin(c, 2, rows), 0, NULL, 0));
            /* column sums of [A, B] (a bias gradient), over many and
             * few columns */
            const int ax01[] = {0, 1};
            const int64_t cols[] = {100, 300}, cols3[] = {3, 40, 70};
            CASE("sum columns")
            finish(c, mg_sum(c->g, fin(c, 2, cols), 1, ax0, 0));
            CASE("mean columns keepdims")
            finish(c, mg_mean(c->g, fin(c, 3, cols3), 2, ax01, 1));
        }
        const int64_t xl[] = {4, 6, 5}, g65[] = {6, 5}, g5[] = {5};
        CASE("layernorm 2")
        finish(c, mg_layernorm(c->g, fin(c, 3, xl), fin(c, 2, g65),
                               fin(c, 2, g65), 2, 1e-5));
        CASE("layernorm 1")
        finish(c, mg_layernorm(c->g, fin(c, 3, xl), fin(c, 1, g5),
                               fin(c, 1, g5), 1, 1e-5));
        /* many rows: gamma's gradient sums each column over chunks of rows
         * (mg_column_chunks), 32 chunks of 16 or 17 of 520 rows, and 4 of
         * 18 rows of 96 columns */
        const int64_t xlc[] = {40, 13, 7}, g7[] = {7}, xlc2[] = {3, 24, 2, 48},
                      g248[] = {2, 48};
        CASE("layernorm chunked")
        finish(c, mg_layernorm(c->g, fin(c, 3, xlc), fin(c, 1, g7),
                               fin(c, 1, g7), 1, 1e-5));
        CASE("layernorm chunked 2")
        finish(c, mg_layernorm(c->g, fin(c, 4, xlc2), fin(c, 2, g248),
                               fin(c, 2, g248), 2, 1e-5));
    }
    {
        const int64_t a[] = {2, 3, 4}, b[] = {2, 2, 4}, s[] = {2, 3, 5};
        const int64_t before[] = {1, 0}, after[] = {0, 2};
        CASE("concat") {
            mg_tensor xs[2] = {fin(c, 3, a), fin(c, 3, b)};
            finish(c, mg_concat(c->g, 2, xs, 1));
        }
        CASE("slice") finish(c, mg_slice(c->g, fin(c, 3, s), 2, 1, 2));
        CASE("pad") finish(c, mg_pad(c->g, fin(c, 2, s34), before, after));
    }
    {
        const int64_t tb[] = {7, 5}, ix[] = {2, 4}, xm[] = {2, 4, 4};
        CASE("embedding") {
            mg_tensor t = fin(c, 2, tb);
            mg_tensor i = leaf(c, MG_I32, 2, ix, 0, 7);
            finish(c, mg_embedding(c->g, t, i));
        }
        CASE("embedding i64") {
            mg_tensor t = fin(c, 2, tb);
            mg_tensor i = leaf(c, MG_I64, 2, ix, 0, 7);
            finish(c, mg_embedding(c->g, t, i));
        }
        CASE("causal_mask") finish(c, mg_causal_mask(c->g, fin(c, 3, xm), 0.5));
    }
    /* the ops of the ATen-level capture (issue 45) */
    CASE("reciprocal") finish(c, mg_reciprocal(c->g, pos(c, 2, s35)));
    CASE("rsqrt") finish(c, mg_rsqrt(c->g, pos(c, 2, s35)));
    CASE("sin") finish(c, mg_sin(c->g, fin(c, 2, s35)));
    CASE("cos") finish(c, mg_cos(c->g, fin(c, 2, s35)));
    CASE("abs") finish(c, mg_abs(c->g, fin(c, 2, s35)));
    CASE("clamp") finish(c, mg_clamp(c->g, fin(c, 2, s35), -0.5, INFINITY));
    /* their gradients: where on eq, lt, gt */
    CASE("maximum") finish(c, mg_maximum(c->g, fin(c, 2, s34), fin(c, 1, s4)));
    CASE("minimum") finish(c, mg_minimum(c->g, fin(c, 2, s31), fin(c, 2, s14)));
    CASE("comparisons and logical ops") {
        mg_tensor a = fin(c, 2, s34), b = fin(c, 1, s4);
        mg_tensor m = mg_logical_or(
            c->g, mg_logical_and(c->g, mg_le(c->g, a, b), mg_ne(c->g, a, b)),
            mg_logical_not(c->g, mg_ge(c->g, b, a)));
        finish(c, mg_mul(c->g, mg_where(c->g, m, a, b), m));
    }
    CASE("comparisons of ints, where on an int cond") {
        mg_tensor i = leaf(c, MG_I32, 2, s34, 0, 3);
        mg_tensor j = leaf(c, MG_I64, 1, s4, 0, 3);
        mg_tensor k = leaf(c, MG_I32, 1, s4, 0, 3);
        mg_tensor lt = mg_cast(c->g, mg_lt(c->g, i, k), MG_F32);
        mg_tensor w = mg_where(c->g, j, fin(c, 2, s34), lt);
        finish(c, mg_add(c->g, w, mg_cast(c->g, mg_eq(c->g, i, k), MG_F32)));
    }
    {
        const int64_t x3[] = {3, 4, 5}, i1[] = {3, 7, 5}, i0[] = {2, 3, 4},
                      sel[] = {8};
        CASE("gather") {
            mg_tensor x = fin(c, 3, x3);
            finish(c, mg_gather(c->g, x, 1, leaf(c, MG_I32, 3, i1, 0, 4)));
        }
        CASE("gather i64 axis 0") {
            mg_tensor x = fin(c, 3, x3);
            finish(c, mg_gather(c->g, x, 0, leaf(c, MG_I64, 3, i0, 0, 3)));
        }
        CASE("index_select") {
            mg_tensor x = fin(c, 3, x3);
            finish(c,
                   mg_index_select(c->g, x, -1, leaf(c, MG_I64, 1, sel, 0, 5)));
        }
        CASE("cumsum") finish(c, mg_cumsum(c->g, fin(c, 3, x3), 1));
        CASE("cumsum axis 0") finish(c, mg_cumsum(c->g, fin(c, 3, x3), 0));
    }
    {
        /* Lq != Lk; by the GEMM form (6 batch entries in one chunk) */
        const int64_t qs[] = {2, 3, 70, 5}, ks[] = {2, 3, 300, 5},
                      vs[] = {2, 3, 300, 4}, ms[] = {2, 1, 70, 300};
        CASE("attention causal")
        finish(c, mg_attention(c->g, fin(c, 4, qs), fin(c, 4, ks),
                               fin(c, 4, vs), 1, 0));
        CASE("attention_ex mask dropout") {
            mg_tensor q = fin(c, 4, qs), k = fin(c, 4, ks), v = fin(c, 4, vs);
            mg_tensor m = fin(c, 4, ms); /* its gradient: attention_grad_mask */
            const mg_attention_opts o = {.dropout_p = 0.2, .seed = 9};
            finish(c, mg_attention_ex(c->g, q, k, v, m, &o));
        }
    }
    {
        /* one batch entry's scores (600 x 900) exceed what the GEMM form
         * may borrow (src/common/attn_tiles.h): the kernels by rows, which
         * the cases above no longer reach */
        const int64_t qs[] = {1, 2, 600, 5}, ks[] = {1, 2, 900, 5},
                      vs[] = {1, 2, 900, 4};
        CASE("attention by rows")
        finish(c, mg_attention(c->g, fin(c, 4, qs), fin(c, 4, ks),
                               fin(c, 4, vs), 0, 0));
    }
    {
        /* 7 rows in chunks of 3 (the last of 1), a vocabulary wider than a
         * row block's 256 threads; int32 and int64 labels */
        const int64_t hs[] = {7, 5}, ws[] = {300, 5}, lb[] = {7};
        CASE("linear_cross_entropy") {
            mg_tensor h = fin(c, 2, hs), w = fin(c, 2, ws);
            mg_tensor l = leaf(c, MG_I32, 1, lb, 0, 300);
            finish(c, mg_linear_cross_entropy(c->g, h, w, l, 3));
        }
        CASE("linear_cross_entropy i64 default chunk") {
            mg_tensor h = fin(c, 2, hs), w = fin(c, 2, ws);
            mg_tensor l = leaf(c, MG_I64, 1, lb, 0, 300);
            finish(c, mg_linear_cross_entropy(c->g, h, w, l, 0));
        }
        CASE("linear_cross_entropy_ex ignore_index") {
            /* labels in [0, 3) with class 1 ignored: about a third of
             * the rows, the kept count and the zeroed rows on the device */
            mg_tensor h = fin(c, 2, hs), w = fin(c, 2, ws);
            mg_tensor l = leaf(c, MG_I64, 1, lb, 0, 3);
            const mg_linear_ce_opts o = {
                .chunk_rows = 3, .has_ignore_index = 1, .ignore_index = 1};
            finish(c, mg_linear_cross_entropy_ex(c->g, h, w, l, MG_NO_TENSOR, &o));
        }
    }
    for (int k = MG_OP_PARAM + 1; k < MG_OP_COUNT; k++) /* leaves: none */
        ck_assert_msg(ops_seen[k], "no case runs op %s on the GPU",
                      mgi_op_str((mg_op)k));
    ck_assert_msg(n_failed_cases == 0, "%d failures on the GPU: %s",
                  n_failed_cases, failed_cases);
}
END_TEST

/* ---- an MLP with dropout: checkpointing, peak, repeated steps ---------- */

#define MLP_DEPTH 8
#define MLP_W 64
#define MLP_B 256 /* > MLP_W: the weight gradients' K is the longest */
#define MLP_C 10

typedef struct mlp {
    mg_graph *g;
    mg_tensor x, labels, loss;
    mg_tensor params[2 * MLP_DEPTH + 2], grads[2 * MLP_DEPTH + 2];
    int n_params;
    void *dev[2 * MLP_DEPTH + 4]; /* x, labels, params */
    void *dgrad[2 * MLP_DEPTH + 2];
    void *dloss;
    mg_binding binds[4 * MLP_DEPTH + 8];
    int n_binds;
} mlp;

static void mlp_build(mlp *m, const mg_checkpoints *ck) {
    memset(m, 0, sizeof *m);
    th_rng r;
    th_rng_init(&r, 42);
    m->g = mg_graph_new();
    const int64_t xs[] = {MLP_B, MLP_W}, ls[] = {MLP_B};
    m->x = mg_input(m->g, "x", MG_F32, 2, xs);
    m->labels = mg_input(m->g, "labels", MG_I32, 1, ls);
    mg_tensor h = m->x;
    for (int l = 0; l <= MLP_DEPTH; l++) {
        const int64_t out = l == MLP_DEPTH ? MLP_C : MLP_W;
        const int64_t ws[] = {MLP_W, out}, bs[] = {out};
        mg_tensor w = mg_param(m->g, "w", MG_F32, 2, ws);
        mg_tensor b = mg_param(m->g, "b", MG_F32, 1, bs);
        m->params[m->n_params++] = w;
        m->params[m->n_params++] = b;
        h = mg_add(m->g, mg_matmul(m->g, h, w, 0, 0), b);
        if (l < MLP_DEPTH)
            h = mg_dropout(m->g, mg_relu(m->g, h), 0.1, (uint64_t)l);
    }
    m->loss = mg_cross_entropy(m->g, h, m->labels);
    TH_OK_T("mlp", m->loss);
    ck_assert_msg(mg_gradients(m->g, &m->loss, 1, NULL, m->params, m->n_params,
                               ck, m->grads) == MG_OK,
                  "%s", mg_last_error());
    /* device data, the same for every build of the graph */
    float *hx = malloc(sizeof(float) * MLP_B * MLP_W);
    int32_t hl[MLP_B];
    th_fill_f32(&r, hx, MLP_B * MLP_W, -1, 1, 0);
    for (int i = 0; i < MLP_B; i++) hl[i] = (int32_t)(th_rng_next(&r) % MLP_C);
    m->dev[0] = dev_copy(hx, sizeof(float) * MLP_B * MLP_W);
    m->dev[1] = dev_copy(hl, sizeof hl);
    m->binds[m->n_binds++] = (mg_binding){m->x, m->dev[0]};
    m->binds[m->n_binds++] = (mg_binding){m->labels, m->dev[1]};
    for (int i = 0; i < m->n_params; i++) {
        size_t n = mg_tensor_nbytes(m->g, m->params[i]);
        float *hp = malloc(n);
        th_fill_f32(&r, hp, (int64_t)(n / 4), -0.2, 0.2, 0);
        m->dev[2 + i] = dev_copy(hp, n);
        free(hp);
        m->binds[m->n_binds++] = (mg_binding){m->params[i], m->dev[2 + i]};
        CU_OK(cudaMalloc(&m->dgrad[i], n));
        m->binds[m->n_binds++] = (mg_binding){m->grads[i], m->dgrad[i]};
    }
    CU_OK(cudaMalloc(&m->dloss, sizeof(float)));
    m->binds[m->n_binds++] = (mg_binding){m->loss, m->dloss};
    free(hx);
}

static mg_plan *mlp_plan(const mlp *m, int without_recompute, mg_device d) {
    mg_tensor outs[2 * MLP_DEPTH + 3];
    int n = 0;
    outs[n++] = m->loss;
    for (int i = 0; i < m->n_params; i++) outs[n++] = m->grads[i];
    /* A CPU plan run on the GPU must not fuse: the CUDA backend has no
     * fused kernel and refuses such a plan (mg_plan_options.no_fusion). */
    mg_plan_options o = {.without_recompute = without_recompute,
                         .device = d,
                         .no_fusion = d == MG_DEVICE_CPU};
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, n, &o, &p) == MG_OK, "%s",
                  mg_last_error());
    return p;
}

/* Host copies of loss and gradients, concatenated. */
static float *mlp_grads(const mlp *m, size_t *total) {
    size_t n = 4;
    for (int i = 0; i < m->n_params; i++)
        n += mg_tensor_nbytes(m->g, m->grads[i]);
    char *h = malloc(n), *at = h + 4;
    CU_OK(cudaMemcpy(h, m->dloss, 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < m->n_params; i++) {
        size_t b = mg_tensor_nbytes(m->g, m->grads[i]);
        CU_OK(cudaMemcpy(at, m->dgrad[i], b, cudaMemcpyDeviceToHost));
        at += b;
    }
    *total = n;
    return (float *)h;
}

static void mlp_free(mlp *m) {
    for (int i = 0; i < 2 + m->n_params; i++) cudaFree(m->dev[i]);
    for (int i = 0; i < m->n_params; i++) cudaFree(m->dgrad[i]);
    cudaFree(m->dloss);
    mg_graph_free(m->g);
}

static float *mlp_run(mlp *m, int without_recompute, mg_device d, size_t *n,
                      size_t *peak, size_t *predicted) {
    mg_plan *p = mlp_plan(m, without_recompute, d);
    mg_exec *ex = cuda_exec(0);
    ck_assert_msg(mg_exec_run(ex, p, m->binds, m->n_binds, 7) == MG_OK, "%s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    *peak = st.peak_bytes_in_use;
    *predicted = mg_plan_predicted_peak(p, m->binds, m->n_binds);
    float *g = mlp_grads(m, n);
    mg_exec_free(ex);
    mg_plan_free(p);
    return g;
}

START_TEST(test_checkpointed_bit_equal_and_peak) {
    mlp plain, ck;
    mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
    mlp_build(&plain, NULL);
    mlp_build(&ck, &c);
    size_t n1, n2, n3, n4, peak, pred, pred_cuda, pred_cpu;
    const mg_device CU = MG_DEVICE_CUDA;
    float *a = mlp_run(&plain, 0, CU, &n1, &peak, &pred_cuda);
    ck_assert_msg(peak == pred_cuda, "plain: peak %zu, predicted %zu", peak,
                  pred_cuda);
    float *b = mlp_run(&ck, 0, CU, &n2, &peak, &pred);
    ck_assert_msg(peak == pred, "checkpointed: peak %zu, predicted %zu", peak,
                  pred);
    float *d = mlp_run(&ck, 1, CU, &n3, &peak, &pred);
    ck_assert_msg(peak == pred, "without_recompute: peak %zu, predicted %zu",
                  peak, pred);
    /* a CPU plan on the GPU: cuBLAS without a workspace, perhaps another
     * algorithm, so close to the CUDA plan's gradients, not bit-equal */
    float *e = mlp_run(&plain, 0, MG_DEVICE_CPU, &n4, &peak, &pred_cpu);
    ck_assert_msg(peak == pred_cpu, "CPU plan: peak %zu, predicted %zu", peak,
                  pred_cpu);
    /* the split-K room is transient: it raises the peak or not */
    ck_assert_msg(pred_cpu <= pred_cuda,
                  "the CUDA plan predicts %zu, the CPU plan %zu", pred_cuda,
                  pred_cpu);
    ck_assert(n1 == n2 && n2 == n3 && n3 == n4);
    ck_assert_msg(memcmp(a, b, n1) == 0,
                  "checkpointed gradients differ from plain ones on the GPU");
    ck_assert_msg(memcmp(b, d, n1) == 0,
                  "recomputed and kept activations give different gradients");
    double num = 0, den = 0;
    for (size_t i = 0; i < n1 / 4; i++) {
        num += ((double)a[i] - e[i]) * ((double)a[i] - e[i]);
        den += (double)e[i] * e[i];
    }
    ck_assert_msg(num <= 1e-10 * den,
                  "CUDA and CPU plans' gradients differ by %.3g (normalised)",
                  sqrt(num / den));
    free(a);
    free(b);
    free(d);
    free(e);
    mlp_free(&plain);
    mlp_free(&ck);
}
END_TEST

START_TEST(test_1000_steps_no_growth) {
    mlp m;
    mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
    mlp_build(&m, &c);
    mg_plan *p = mlp_plan(&m, 0, MG_DEVICE_CUDA);
    mg_exec *ex = cuda_exec(0);
    mg_pool_stats first, st;
    size_t free1 = 0, free2 = 0, total = 0;
    for (int step = 0; step < 1000; step++) {
        ck_assert_msg(mg_exec_run(ex, p, m.binds, m.n_binds, (uint64_t)step) ==
                          MG_OK,
                      "step %d: %s", step, mg_last_error());
        if (step == 0) {
            mg_exec_pool_stats(ex, &first);
            CU_OK(cudaMemGetInfo(&free1, &total));
        }
    }
    mg_exec_pool_stats(ex, &st);
    CU_OK(cudaMemGetInfo(&free2, &total));
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert_msg(st.bytes_reserved == first.bytes_reserved,
                  "reserved grew from %zu to %zu", first.bytes_reserved,
                  st.bytes_reserved);
    ck_assert_uint_eq(st.peak_bytes_in_use, first.peak_bytes_in_use);
    ck_assert_uint_eq(st.system_allocs, first.system_allocs);
    /* 1 MiB of slack for the driver; a per-step leak of 1 KiB is more */
    ck_assert_msg(free2 + ((size_t)1 << 20) >= free1,
                  "free device memory went from %zu to %zu", free1, free2);
    mg_exec_pool_trim(ex);
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_reserved, 0);
    mg_exec_free(ex);
    mg_plan_free(p);
    mlp_free(&m);
}
END_TEST

/* A tensor bigger than any GPU: cudaMalloc fails, the pool trims and
 * retries, and the run ends with MG_ERR_NOMEM and nothing held. */
START_TEST(test_cuda_out_of_memory) {
    mg_graph *g = mg_graph_new();
    const int64_t huge[] = {(int64_t)1 << 38}; /* 1 TiB of f32 */
    mg_tensor y = mg_sum(g, mg_fill(g, MG_F32, 1, huge, 1.0), 0, NULL, 0);
    TH_OK_T("huge", y);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, &cuda_po, &p) == MG_OK);
    mg_exec *ex = cuda_exec(0);
    mg_status s = mg_exec_run(ex, p, NULL, 0, 0);
    ck_assert_int_eq(s, MG_ERR_NOMEM);
    ck_assert_msg(strstr(mg_last_error(), "out of memory"), "%s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    /* the executor still works */
    mg_graph *g2 = mg_graph_new();
    const int64_t sh[] = {1000};
    mg_tensor y2 = mg_sum(g2, mg_fill(g2, MG_F32, 1, sh, 0.5), 0, NULL, 0);
    mg_plan *p2 = NULL;
    ck_assert(mg_plan_compile(g2, &y2, 1, &cuda_po, &p2) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p2, NULL, 0, 0) == MG_OK, "%s",
                  mg_last_error());
    const void *dy = NULL;
    ck_assert(mg_exec_tensor_data(ex, y2, &dy) == MG_OK);
    float hy = 0;
    CU_OK(cudaMemcpy(&hy, dy, 4, cudaMemcpyDeviceToHost));
    ck_assert(hy == 500.0f);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_plan_free(p2);
    mg_graph_free(g);
    mg_graph_free(g2);
}
END_TEST

/* A max_bytes below what the plan needs: MG_ERR_NOMEM with a message that
 * names the limit, nothing held, and the same executor runs the plan once
 * the limit is lifted on a fresh one. */
START_TEST(test_cuda_max_bytes_below_need) {
    mlp m;
    mlp_build(&m, NULL);
    mg_plan *p = mlp_plan(&m, 0, MG_DEVICE_CUDA);
    size_t need = mg_plan_predicted_peak(p, m.binds, m.n_binds);
    mg_exec *ex = cuda_exec(need / 2);
    mg_status s = mg_exec_run(ex, p, m.binds, m.n_binds, 1);
    ck_assert_msg(s == MG_ERR_NOMEM, "status %d: %s", s, mg_last_error());
    ck_assert_msg(strstr(mg_last_error(), "max_bytes") ||
                      strstr(mg_last_error(), "out of memory"),
                  "%s", mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    mg_exec_free(ex);
    ex = cuda_exec(need);
    ck_assert_msg(mg_exec_run(ex, p, m.binds, m.n_binds, 1) == MG_OK, "%s",
                  mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    mlp_free(&m);
}
END_TEST

/* A chain whose layer outputs under policy none take 1.5 times the GPU's
 * memory: one [8192, 256] weight shared by every layer, so the parameters
 * stay small and only activations grow. */
static mg_graph *deep_chain(int depth, const mg_checkpoints *ck, mg_tensor *x,
                            mg_tensor *w, mg_tensor outs[2]) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[] = {8192, 256}, ws[] = {256, 256};
    *x = mg_input(g, "x", MG_F32, 2, xs);
    *w = mg_param(g, "w", MG_F32, 2, ws);
    mg_tensor h = *x;
    for (int l = 0; l < depth; l++) h = mg_tanh(g, mg_matmul(g, h, *w, 0, 0));
    outs[0] = mg_sum(g, h, 0, NULL, 0);
    TH_OK_T("deep chain", outs[0]);
    ck_assert_msg(mg_gradients(g, &outs[0], 1, NULL, w, 1, ck, &outs[1]) ==
                      MG_OK,
                  "%s", mg_last_error());
    return g;
}

START_TEST(test_cuda_model_bigger_than_gpu) {
    size_t free_b = 0, total = 0;
    CU_OK(cudaMemGetInfo(&free_b, &total));
    const size_t act = (size_t)8192 * 256 * 4;
    const int depth = (int)(total / act * 3 / 2);
    mg_checkpoints mem = {.policy = MG_CKPT_MEMORY};
    mg_tensor x, w, outs[2], x2, w2, outs2[2];
    mg_graph *g = deep_chain(depth, NULL, &x, &w, outs);
    mg_graph *g2 = deep_chain(depth, &mem, &x2, &w2, outs2);
    mg_plan *p = NULL, *p2 = NULL;
    ck_assert(mg_plan_compile(g, outs, 2, &cuda_po, &p) == MG_OK);
    ck_assert(mg_plan_compile(g2, outs2, 2, &cuda_po, &p2) == MG_OK);
    void *dx = NULL, *dw = NULL, *dloss = NULL, *dgw = NULL;
    CU_OK(cudaMalloc(&dx, act));
    CU_OK(cudaMalloc(&dw, 256 * 256 * 4));
    CU_OK(cudaMalloc(&dgw, 256 * 256 * 4));
    CU_OK(cudaMalloc(&dloss, 4));
    CU_OK(cudaMemset(dx, 0, act));
    CU_OK(cudaMemset(dw, 0, 256 * 256 * 4));
    mg_exec *ex = cuda_exec(0);
    mg_binding b[] = {{x, dx}, {w, dw}, {outs[0], dloss}, {outs[1], dgw}};
    printf("model_bigger_than_gpu: depth %d, policy none predicts %.1f GiB "
           "on a %.1f GiB GPU\n",
           depth, mg_plan_predicted_peak(p, b, 4) / 1073741824.0,
           total / 1073741824.0);
    mg_status s = mg_exec_run(ex, p, b, 4, 0);
    ck_assert_msg(s == MG_ERR_NOMEM, "policy none: status %d: %s", s,
                  mg_last_error());
    ck_assert_msg(strstr(mg_last_error(), "out of memory"), "%s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    /* the same executor then trains the same model checkpointed, within
     * its own prediction (the failed run's high-water mark forgotten) */
    mg_exec_pool_reset_peak(ex);
    mg_binding b2[] = {{x2, dx}, {w2, dw}, {outs2[0], dloss}, {outs2[1], dgw}};
    ck_assert_msg(mg_exec_run(ex, p2, b2, 4, 0) == MG_OK, "%s",
                  mg_last_error());
    mg_exec_pool_stats(ex, &st);
    ck_assert_msg(st.peak_bytes_in_use == mg_plan_predicted_peak(p2, b2, 4),
                  "checkpointed: peak %zu, predicted %zu", st.peak_bytes_in_use,
                  mg_plan_predicted_peak(p2, b2, 4));
    mg_exec_free(ex);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dgw);
    cudaFree(dloss);
    mg_plan_free(p);
    mg_plan_free(p2);
    mg_graph_free(g);
    mg_graph_free(g2);
}
END_TEST

START_TEST(test_cuda_bad_label) {
    mg_graph *g = mg_graph_new();
    const int64_t ls[] = {3, 5}, lb[] = {3};
    mg_tensor x = mg_input(g, "logits", MG_F32, 2, ls);
    mg_tensor l = mg_input(g, "labels", MG_I32, 1, lb);
    mg_tensor y = mg_cross_entropy(g, x, l);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, &cuda_po, &p) == MG_OK);
    float hx[15] = {0};
    int32_t hl[3] = {1, 7, 2};
    void *dx = dev_copy(hx, sizeof hx), *dl = dev_copy(hl, sizeof hl);
    mg_binding b[] = {{x, dx}, {l, dl}};
    mg_exec *ex = cuda_exec(0);
    ck_assert_int_eq(mg_exec_run(ex, p, b, 2, 0), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "label 7") &&
                      strstr(mg_last_error(), "row 1"),
                  "%s", mg_last_error());
    mg_exec_free(ex);
    cudaFree(dx);
    cudaFree(dl);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* linear_cross_entropy's label check, forward and gradient: a bad label
 * in the second chunk (chunks of 2 rows) is reported with its row in the
 * whole batch, as the CPU reports it. */
START_TEST(test_cuda_bad_label_linear_ce) {
    for (int backward = 0; backward < 2; backward++) {
        mg_graph *g = mg_graph_new();
        const int64_t hs[] = {4, 3}, ws[] = {5, 3}, lb[] = {4};
        mg_tensor h = mg_input(g, "h", MG_F32, 2, hs);
        mg_tensor w = mg_param(g, "w", MG_F32, 2, ws);
        mg_tensor l = mg_input(g, "labels", MG_I32, 1, lb);
        mg_tensor y = mg_linear_cross_entropy(g, h, w, l, 2);
        mg_tensor out = y;
        if (backward)
            ck_assert(mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &out) == MG_OK);
        mg_plan *p = NULL;
        ck_assert(mg_plan_compile(g, &out, 1, &cuda_po, &p) == MG_OK);
        float hh[12] = {0}, hw[15] = {0};
        int32_t hl[4] = {1, 0, 4, -100};
        void *dh = dev_copy(hh, sizeof hh), *dw = dev_copy(hw, sizeof hw),
             *dl = dev_copy(hl, sizeof hl);
        mg_binding b[] = {{h, dh}, {w, dw}, {l, dl}};
        mg_exec *ex = cuda_exec(0);
        ck_assert_int_eq(mg_exec_run(ex, p, b, 3, 0), MG_ERR_INVALID_ARG);
        ck_assert_msg(strstr(mg_last_error(), "label -100 at row 3") &&
                          strstr(mg_last_error(), "linear_cross_entropy"),
                      "%s", mg_last_error());
        mg_exec_free(ex);
        cudaFree(dh);
        cudaFree(dw);
        cudaFree(dl);
        mg_plan_free(p);
        mg_graph_free(g);
    }
}
END_TEST

/* An int64 label of 2^32 + 1 is refused as itself, not truncated to 1. */
START_TEST(test_cuda_bad_label_i64) {
    mg_graph *g = mg_graph_new();
    const int64_t ls[] = {3, 5}, lb[] = {3};
    mg_tensor x = mg_input(g, "logits", MG_F32, 2, ls);
    mg_tensor l = mg_input(g, "labels", MG_I64, 1, lb);
    mg_tensor y = mg_cross_entropy(g, x, l);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, &cuda_po, &p) == MG_OK);
    float hx[15] = {0};
    int64_t hl[3] = {1, ((int64_t)1 << 32) + 1, 2};
    void *dx = dev_copy(hx, sizeof hx), *dl = dev_copy(hl, sizeof hl);
    mg_binding b[] = {{x, dx}, {l, dl}};
    mg_exec *ex = cuda_exec(0);
    ck_assert_int_eq(mg_exec_run(ex, p, b, 2, 0), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "label 4294967297") &&
                      strstr(mg_last_error(), "row 1"),
                  "%s", mg_last_error());
    mg_exec_free(ex);
    cudaFree(dx);
    cudaFree(dl);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* No CUDA kernel computes in 16 bits yet (issue 47): a bf16 or f16 op is
 * refused with MG_ERR_DTYPE naming the op and the dtype, never run on
 * 2-byte elements read as 4-byte ones. */
START_TEST(test_cuda_half_refused) {
    const mg_dtype dts[2] = {MG_BF16, MG_F16};
    for (int k = 0; k < 2; k++) {
        mg_graph *g = mg_graph_new();
        const int64_t as[] = {4, 8}, bs[] = {8, 3};
        mg_tensor a = mg_input(g, "a", dts[k], 2, as);
        mg_tensor b = mg_input(g, "b", dts[k], 2, bs);
        mg_tensor y = mg_matmul(g, a, b, 0, 0);
        mg_plan *p = NULL;
        ck_assert(mg_plan_compile(g, &y, 1, &cuda_po, &p) == MG_OK);
        uint16_t ha[32] = {0}, hb[24] = {0};
        void *da = dev_copy(ha, sizeof ha), *db = dev_copy(hb, sizeof hb);
        mg_binding bd[] = {{a, da}, {b, db}};
        mg_exec *ex = cuda_exec(0);
        ck_assert_int_eq(mg_exec_run(ex, p, bd, 2, 0), MG_ERR_DTYPE);
        ck_assert_msg(strstr(mg_last_error(), "matmul") &&
                          strstr(mg_last_error(), mg_dtype_name(dts[k])),
                      "%s", mg_last_error());
        mg_exec_free(ex);
        cudaFree(da);
        cudaFree(db);
        mg_plan_free(p);
        mg_graph_free(g);
    }
}
END_TEST

#endif /* MG_HAVE_CUDA */

static void add_case(Suite *s, const char *name, const TTest *t) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

int main(void) {
    const int gpu = n_devices() > 0;
    if (!gpu) printf("skipped: no CUDA device\n");
    Suite *s = suite_create("cuda");
    /* One case per test, so that CK_RUN_CASE=<name> runs one test in a
     * process of its own (bench/gpu_run.sh does): a fault in one cannot
     * hide the others. */
    add_case(s, "exec_new", test_exec_new_cuda);
#ifdef MG_HAVE_CUDA
    add_case(s, "kernel_table", test_kernel_table_complete);
    if (gpu) {
        add_case(s, "every_op", test_every_op_matches_cpu);
        add_case(s, "checkpointed", test_checkpointed_bit_equal_and_peak);
        add_case(s, "steps_1000", test_1000_steps_no_growth);
        add_case(s, "out_of_memory", test_cuda_out_of_memory);
        add_case(s, "max_bytes", test_cuda_max_bytes_below_need);
        add_case(s, "bigger_than_gpu", test_cuda_model_bigger_than_gpu);
        add_case(s, "bad_label", test_cuda_bad_label);
        add_case(s, "bad_label_i64", test_cuda_bad_label_i64);
        add_case(s, "bad_label_linear_ce", test_cuda_bad_label_linear_ce);
        add_case(s, "half_refused", test_cuda_half_refused);
    }
#endif
    SRunner *sr = srunner_create(s);
    /* CUDA does not survive fork(): n_devices() above initialised it. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* 77: ctest's SKIP_RETURN_CODE (cmake/cuda.cmake), so that a machine
     * without a GPU reports the GPU tests as skipped, not passed; the
     * device-less checks above still fail the test if they fail. */
    return failed ? EXIT_FAILURE : gpu ? EXIT_SUCCESS : 77;
}
