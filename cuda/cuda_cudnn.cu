/*
 * cuda_cudnn.cu - conv2d and its two gradients through cuDNN, when the
 * build found it (MG_HAVE_CUDNN). cuda_conv.cu asks here first and runs its
 * own im2col + cuBLAS path whenever cuDNN declines.
 *
 * Three rules keep the plan and the gradients what they were:
 *   - an algorithm is chosen only among those whose workspace fits what the
 *     executor lent from the pool (the op table's rule), so the plan's peak,
 *     predicted without a device, still counts every byte, and no scratch
 *     lives outside the pool;
 *   - only deterministic algorithms with FMA math (no TF32) are taken, so a
 *     recomputed convolution gives the bits of the first one and float32
 *     matches the CPU;
 *   - the choice depends only on the convolution's sizes, the dtype and the
 *     lent bytes, and is cached per executor (no globals), so the original
 *     and its recomputation always run the same algorithm.
 * MG_CUDA_CONV=im2col turns cuDNN off for an executor, for comparison.
 * MG_CUDNN_VERBOSE=1 prints, for each new convolution, cuDNN's ranked
 * candidates (determinism, math, workspace) and the choice on stderr; =2
 * also times every algorithm with cudnnFind*, which allocates its own
 * scratch outside the pool: a diagnostic, never for a measured run.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef MG_HAVE_CUDNN
#include <cudnn.h>

enum { DNN_CACHE = 128, DNN_ALGOS = 16 };

/* One convolution as cuDNN sees it, and what was chosen for it. */
typedef struct dnn_key {
    int mode, dtype, dims[16];
    size_t work_bytes;
} dnn_key;

typedef struct dnn_entry {
    dnn_key key;
    int algo; /* -1: cuDNN declined, use im2col */
} dnn_entry;

struct cu_dnn {
    cudnnHandle_t h;
    int verbose; /* MG_CUDNN_VERBOSE */
    int n;
    dnn_entry e[DNN_CACHE];
};

typedef struct dnn_descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} dnn_descs;

static void descs_free(dnn_descs *s) {
    if (s->x) cudnnDestroyTensorDescriptor(s->x);
    if (s->y) cudnnDestroyTensorDescriptor(s->y);
    if (s->w) cudnnDestroyFilterDescriptor(s->w);
    if (s->conv) cudnnDestroyConvolutionDescriptor(s->conv);
    memset(s, 0, sizeof *s);
}

/* cuDNN's 4-D descriptors take ints: sizes past INT_MAX elements stay on
 * the im2col path. */
static bool fits_int(const mg_conv_dims *d) {
    const int64_t lim = 0x7fffffff;
    return d->n * d->c * d->h * d->w <= lim &&
           d->n * d->o * d->oh * d->ow <= lim && d->o * d->k <= lim;
}

static bool descs_make(dnn_descs *s, const mg_conv_dims *d,
                       cudnnDataType_t dt) {
    memset(s, 0, sizeof *s);
    bool ok =
        cudnnCreateTensorDescriptor(&s->x) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateTensorDescriptor(&s->y) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateFilterDescriptor(&s->w) == CUDNN_STATUS_SUCCESS &&
        cudnnCreateConvolutionDescriptor(&s->conv) == CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, dt, (int)d->n,
                                   (int)d->c, (int)d->h,
                                   (int)d->w) == CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, dt, (int)d->n,
                                   (int)d->o, (int)d->oh,
                                   (int)d->ow) == CUDNN_STATUS_SUCCESS &&
        cudnnSetFilter4dDescriptor(s->w, dt, CUDNN_TENSOR_NCHW, (int)d->o,
                                   (int)d->cg, d->kh,
                                   d->kw) == CUDNN_STATUS_SUCCESS &&
        /* cross-correlation, as conv2d is everywhere else */
        cudnnSetConvolution2dDescriptor(s->conv, d->ph, d->pw, d->sh, d->sw,
                                        d->dh, d->dw, CUDNN_CROSS_CORRELATION,
                                        dt) == CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolutionGroupCount(s->conv, (int)d->groups) ==
            CUDNN_STATUS_SUCCESS &&
        /* FMA only: no TF32 tensor cores, so f32 is IEEE f32 */
        cudnnSetConvolutionMathType(s->conv, CUDNN_FMA_MATH) ==
            CUDNN_STATUS_SUCCESS;
    if (!ok) descs_free(s);
    return ok;
}

/* cuDNN's own ranking (its heuristics, no timing runs), filtered. */
template <typename Perf>
static int first_usable(const Perf *p, int n, size_t work) {
    for (int i = 0; i < n; i++)
        if (p[i].status == CUDNN_STATUS_SUCCESS &&
            p[i].determinism == CUDNN_DETERMINISTIC &&
            p[i].mathType != CUDNN_TENSOR_OP_MATH &&
            p[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
            p[i].memory <= work)
            return (int)p[i].algo;
    return -1;
}

/* MG_CUDNN_VERBOSE: the candidates of one convolution, ranked (by cuDNN's
 * heuristics, or by time from cudnnFind*: time in ms, -1 for none). */
template <typename Perf>
static void list_candidates(const char *how, const char *mode,
                            const mg_conv_dims *d, const Perf *p, int n,
                            size_t work) {
    fprintf(stderr,
            "cudnn %s %s: n %lld c %lld %lldx%lld -> o %lld %lldx%lld, "
            "kernel %dx%d stride %dx%d, lent %zu bytes\n",
            how, mode, (long long)d->n, (long long)d->c, (long long)d->h,
            (long long)d->w, (long long)d->o, (long long)d->oh,
            (long long)d->ow, (int)d->kh, (int)d->kw, (int)d->sh, (int)d->sw,
            work);
    for (int i = 0; i < n; i++)
        fprintf(stderr,
                "  algo %d status %d deterministic %d math %d memory %zu "
                "time %.3f%s\n",
                (int)p[i].algo, (int)p[i].status,
                p[i].determinism == CUDNN_DETERMINISTIC, (int)p[i].mathType,
                p[i].memory, (double)p[i].time,
                p[i].memory > work ? " (more than lent)" : "");
}

static int choose(cudnnHandle_t h, const dnn_descs *s, int mode, size_t work,
                  int verbose, const mg_conv_dims *d) {
    int n = 0, algo = -1;
    if (mode == CU_CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t p[DNN_ALGOS];
        if (cudnnGetConvolutionForwardAlgorithm_v7(h, s->x, s->w, s->conv, s->y,
                                                   DNN_ALGOS, &n,
                                                   p) != CUDNN_STATUS_SUCCESS)
            return -1;
        algo = first_usable(p, n, work);
        if (verbose) list_candidates("heuristics", "forward", d, p, n, work);
        if (verbose > 1 && cudnnFindConvolutionForwardAlgorithm(
                               h, s->x, s->w, s->conv, s->y, DNN_ALGOS, &n,
                               p) == CUDNN_STATUS_SUCCESS)
            list_candidates("timed", "forward", d, p, n, work);
    } else if (mode == CU_CONV_GRAD_INPUT) {
        cudnnConvolutionBwdDataAlgoPerf_t p[DNN_ALGOS];
        if (cudnnGetConvolutionBackwardDataAlgorithm_v7(
                h, s->w, s->y, s->conv, s->x, DNN_ALGOS, &n, p) !=
            CUDNN_STATUS_SUCCESS)
            return -1;
        algo = first_usable(p, n, work);
        if (verbose) list_candidates("heuristics", "grad_input", d, p, n, work);
        if (verbose > 1 && cudnnFindConvolutionBackwardDataAlgorithm(
                               h, s->w, s->y, s->conv, s->x, DNN_ALGOS, &n,
                               p) == CUDNN_STATUS_SUCCESS)
            list_candidates("timed", "grad_input", d, p, n, work);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[DNN_ALGOS];
        if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h, s->x, s->y, s->conv, s->w, DNN_ALGOS, &n, p) !=
            CUDNN_STATUS_SUCCESS)
            return -1;
        algo = first_usable(p, n, work);
        if (verbose)
            list_candidates("heuristics", "grad_weight", d, p, n, work);
        if (verbose > 1 && cudnnFindConvolutionBackwardFilterAlgorithm(
                               h, s->x, s->y, s->conv, s->w, DNN_ALGOS, &n,
                               p) == CUDNN_STATUS_SUCCESS)
            list_candidates("timed", "grad_weight", d, p, n, work);
    }
    if (verbose) fprintf(stderr, "  chosen: algo %d\n", algo);
    return algo;
}

static dnn_key key_of(const mg_kargs *a, const mg_conv_dims *d, int mode) {
    dnn_key k;
    memset(&k, 0, sizeof k);
    k.mode = mode;
    k.dtype = (int)a->out.d.dtype;
    const int64_t v[16] = {d->n,  d->c,  d->h,  d->w,     d->o,  d->oh,
                           d->ow, d->kh, d->kw, d->sh,    d->sw, d->ph,
                           d->pw, d->dh, d->dw, d->groups};
    for (int i = 0; i < 16; i++) k.dims[i] = (int)v[i];
    k.work_bytes = a->work_bytes;
    return k;
}

/* The cached choice, or a new one; -1 when cuDNN has none that fits. */
static int algo_for(cu_dnn *dnn, const mg_kargs *a, const mg_conv_dims *d,
                    int mode, const dnn_descs *s) {
    const dnn_key k = key_of(a, d, mode);
    for (int i = 0; i < dnn->n; i++)
        if (memcmp(&dnn->e[i].key, &k, sizeof k) == 0) return dnn->e[i].algo;
    const int algo = choose(dnn->h, s, mode, a->work_bytes, dnn->verbose, d);
    /* A full cache only costs a query per call, never a different choice:
     * the heuristics answer the same for the same sizes. */
    if (dnn->n < DNN_CACHE) dnn->e[dnn->n++] = (dnn_entry){k, algo};
    return algo;
}

static cudnnStatus_t run(cu_dnn *dnn, const mg_kargs *a, const dnn_descs *s,
                         int mode, int algo) {
    const double one = 1, zero = 0; /* cuDNN reads doubles for f64 */
    const float onef = 1, zerof = 0;
    const bool f64 = a->out.d.dtype == MG_F64;
    const void *al = f64 ? (const void *)&one : (const void *)&onef;
    const void *be = f64 ? (const void *)&zero : (const void *)&zerof;
    const void *in0 = a->in[0].data, *in1 = a->in[1].data;
    if (mode == CU_CONV_FORWARD) /* (x, w) -> y */
        return cudnnConvolutionForward(dnn->h, al, s->x, in0, s->w, in1,
                                       s->conv, (cudnnConvolutionFwdAlgo_t)algo,
                                       a->work, a->work_bytes, be, s->y,
                                       a->out.data);
    if (mode == CU_CONV_GRAD_INPUT) /* (gy, w) -> dx */
        return cudnnConvolutionBackwardData(
            dnn->h, al, s->w, in1, s->y, in0, s->conv,
            (cudnnConvolutionBwdDataAlgo_t)algo, a->work, a->work_bytes, be,
            s->x, a->out.data);
    /* (gy, x) -> dw */
    return cudnnConvolutionBackwardFilter(
        dnn->h, al, s->x, in1, s->y, in0, s->conv,
        (cudnnConvolutionBwdFilterAlgo_t)algo, a->work, a->work_bytes, be, s->w,
        a->out.data);
}

bool cu_dnn_conv(cu_ctx *c, const mg_kargs *a, const mg_conv_dims *d, int mode,
                 mg_status *s) {
    cu_dnn *dnn = c->dnn;
    if (!dnn || !fits_int(d) || d->n == 0) return false;
    const mg_dtype dt = a->out.d.dtype;
    if (dt != MG_F32 && dt != MG_F64) return false;
    dnn_descs ds;
    if (!descs_make(&ds, d,
                    dt == MG_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT))
        return false;
    const int algo = algo_for(dnn, a, d, mode, &ds);
    bool done = false;
    if (algo >= 0) {
        cudnnStatus_t e = run(dnn, a, &ds, mode, algo);
        done = true;
        *s = e == CUDNN_STATUS_SUCCESS
                 ? MG_OK
                 : mg_kernel_fail(
                       a,
                       e == CUDNN_STATUS_ALLOC_FAILED ? MG_ERR_NOMEM
                                                      : MG_ERR_INTERNAL,
                       "cuDNN error in %s (algorithm %d): %s",
                       mgi_op_str(a->op), algo, cudnnGetErrorString(e));
    }
    descs_free(&ds);
    return done;
}

mg_status cu_dnn_new(cu_ctx *c) {
    c->dnn = NULL;
    const char *conv = getenv("MG_CUDA_CONV");
    if (conv && strcmp(conv, "im2col") == 0) return MG_OK;
    cu_dnn *dnn = (cu_dnn *)calloc(1, sizeof *dnn);
    if (!dnn)
        return mg_set_error(MG_ERR_NOMEM, "cuda backend: out of memory for "
                                          "the cuDNN state");
    cudnnStatus_t e = cudnnCreate(&dnn->h);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnSetStream(dnn->h, c->stream);
    if (e != CUDNN_STATUS_SUCCESS) {
        if (dnn->h) cudnnDestroy(dnn->h);
        free(dnn);
        cudaGetLastError();
        /* cuDNN's library may be missing or too old on this machine at
         * run time: convolutions then take the im2col path. */
        return MG_OK;
    }
    const char *v = getenv("MG_CUDNN_VERBOSE");
    dnn->verbose = v ? atoi(v) : 0;
    c->dnn = dnn;
    return MG_OK;
}

void cu_dnn_free(cu_ctx *c) {
    if (!c->dnn) return;
    cudnnDestroy(c->dnn->h);
    free(c->dnn);
    c->dnn = NULL;
}

const char *cu_dnn_name(const cu_ctx *c) { return c->dnn ? "cudnn" : "im2col"; }

#else /* no cuDNN in this build */

bool cu_dnn_conv(cu_ctx *, const mg_kargs *, const mg_conv_dims *, int,
                 mg_status *) {
    return false;
}
mg_status cu_dnn_new(cu_ctx *c) {
    c->dnn = NULL;
    return MG_OK;
}
void cu_dnn_free(cu_ctx *) {}
const char *cu_dnn_name(const cu_ctx *) { return "im2col"; }

#endif
