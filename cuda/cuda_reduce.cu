/*
 * cuda_reduce.cu - sum and mean over axes, and broadcast_to, their adjoint.
 * Every reduction is a fixed-order tree within one block (or a sequential
 * loop in one thread), never atomics, so results are deterministic run to
 * run.
 */
#include "cuda_internal.h"

#include <string.h>

/* ---- sum, mean --------------------------------------------------------------
 */

/* Kept dims (the output, in order) and reduced dims, with x's strides. */
struct red_dims {
    int nk, nr;
    int64_t kshape[MG_MAX_DIMS], kstride[MG_MAX_DIMS];
    int64_t rshape[MG_MAX_DIMS], rstride[MG_MAX_DIMS];
};

__device__ __forceinline__ int64_t red_off(int n, const int64_t *shape,
                                           const int64_t *stride, int64_t i) {
    int64_t o = 0;
    for (int d = n - 1; d >= 0; d--) {
        o += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return o;
}

/* One block per output: deterministic tree over the reduced elements. */
template <typename T>
__global__ void k_reduce_block(const T *x, T *y, int64_t ny, int64_t nr,
                               red_dims d, int64_t mean_of) {
    CU_SHARED(T, sh);
    for (int64_t o = blockIdx.x; o < ny; o += gridDim.x) {
        const T *px = x + red_off(d.nk, d.kshape, d.kstride, o);
        T acc = 0;
        for (int64_t r = threadIdx.x; r < nr; r += blockDim.x)
            acc += px[red_off(d.nr, d.rshape, d.rstride, r)];
        acc = cu_block_sum(acc, sh);
        if (threadIdx.x == 0) y[o] = mean_of ? acc / (T)mean_of : acc;
    }
}

/* One thread per output, in index order: for short reductions. */
template <typename T>
__global__ void k_reduce_thread(const T *x, T *y, int64_t ny, int64_t nr,
                                red_dims d, int64_t mean_of) {
    CU_FOR(o, ny) {
        const T *px = x + red_off(d.nk, d.kshape, d.kstride, o);
        T acc = 0;
        for (int64_t r = 0; r < nr; r++)
            acc += px[red_off(d.nr, d.rshape, d.rstride, r)];
        y[o] = mean_of ? acc / (T)mean_of : acc;
    }
}

/* Few outputs of many elements each (a bias gradient over N * H * W, a
 * loss's mean): the [A, B, C] view of x (group_reduce.h) in chunks, each
 * chunk's sum into the workspace, then each output adds its chunks in
 * order. */
template <typename T>
__global__ void k_reduce_chunks(const T *x, int64_t nb, int64_t nc, cu_chunks k,
                                double *part) {
    CU_SHARED(double, sh);
    const int64_t b = blockIdx.y;
    double s = 0;
    for (cu_chunk_walk w(k, nc); w.more(); w.next())
        s += (double)x[w.at(nb, b)];
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) part[b * k.P + blockIdx.x] = s;
}

template <typename T>
__global__ void k_reduce_total(const double *part, T *y, int64_t nb,
                               cu_chunks k, int64_t mean_of) {
    CU_FOR(b, nb) {
        const double s = cu_chunks_total(part, k, b);
        y[b] = (T)(mean_of ? s / (double)mean_of : s);
    }
}

/* The chunked reduction where group_reduce.h splits it; *done says so. */
static mg_status reduce_chunked(cu_ctx *c, const mg_kargs *a, int mean,
                                int *done) {
    *done = 0;
    int64_t abc[3];
    const int64_t ny = mgi_tdesc_numel(&a->out.d);
    if (!mg_reduce_abc(&a->in[0].d, a->attrs, ny, abc)) return MG_OK;
    const int64_t P = mg_group_chunks(abc[1], abc[0] * abc[2]);
    if (P <= 1) return MG_OK;
    const cu_chunks k = cu_chunks_of(P, abc[0] * abc[2]);
    void *w = NULL;
    mg_status s = cu_work(a, (size_t)(abc[1] * P) * sizeof(double), &w);
    if (s != MG_OK) return s;
    const int64_t mean_of = mean ? k.cnt : 0;
    CU_BY_FLOAT(a, a->out.d.dtype, {
        k_reduce_chunks<T>
            <<<dim3((unsigned)P, (unsigned)abc[1]), CU_CHUNK_THREADS,
               CU_CHUNK_THREADS * sizeof(double), c->stream>>>(
                (const T *)a->in[0].data, abc[1], abc[2], k, (double *)w);
        k_reduce_total<T><<<cu_blocks(abc[1]), CU_THREADS, 0, c->stream>>>(
            (const double *)w, (T *)a->out.data, abc[1], k, mean_of);
    });
    *done = 1;
    return MG_OK;
}

static mg_status reduce(cu_ctx *c, const mg_kargs *a, int mean) {
    int done = 0;
    mg_status cs = reduce_chunked(c, a, mean, &done);
    if (cs != MG_OK || done) return cs;
    const mg_tdesc *dx = &a->in[0].d;
    const mg_attrs *at = a->attrs;
    const int64_t nx = mgi_tdesc_numel(dx), ny = mgi_tdesc_numel(&a->out.d);
    bool reduced[MG_MAX_DIMS];
    const int bad = mg_reduce_axes(dx, at, ny, reduced);
    if (bad >= 0)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", at->axes[bad],
                              dx->ndim);
    red_dims d;
    memset(&d, 0, sizeof d);
    int64_t stride = 1, kept = 1;
    int64_t xs[MG_MAX_DIMS];
    for (int i = dx->ndim - 1; i >= 0; i--) {
        xs[i] = stride;
        stride *= dx->shape[i];
    }
    for (int i = 0; i < dx->ndim; i++) {
        if (dx->shape[i] == 1) continue;
        if (reduced[i]) {
            d.rshape[d.nr] = dx->shape[i];
            d.rstride[d.nr++] = xs[i];
        } else {
            d.kshape[d.nk] = dx->shape[i];
            d.kstride[d.nk++] = xs[i];
            kept *= dx->shape[i];
        }
    }
    if (kept != ny)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "reduced input has %lld elements, output %lld",
                              (long long)kept, (long long)ny);
    const int64_t nr = ny ? nx / ny : 0, mean_of = mean ? nr : 0;
    CU_BY_FLOAT(a, a->out.d.dtype, {
        if (nr < 64) {
            k_reduce_thread<T><<<cu_blocks(ny), CU_THREADS, 0, c->stream>>>(
                (const T *)a->in[0].data, (T *)a->out.data, ny, nr, d, mean_of);
        } else {
            const unsigned t = cu_row_threads(nr);
            k_reduce_block<T>
                <<<cu_grid_rows(ny), t, t * sizeof(T), c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, ny, nr, d,
                    mean_of);
        }
    });
    return MG_OK;
}

mg_status cu_sum(cu_ctx *c, const mg_kargs *a) { return reduce(c, a, 0); }
mg_status cu_mean(cu_ctx *c, const mg_kargs *a) { return reduce(c, a, 1); }

/* ---- broadcast_to ------------------------------------------------------- */

/* Slot 0: the source strides; slot 1: the contiguous output. */
mg_status cu_broadcast_to(cu_ctx *c, const mg_kargs *a) {
    mg_layout ml;
    mg_layout_init(&ml, &a->out.d);
    mg_layout_broadcast(&ml, 0, &a->in[0].d);
    mg_tdesc out = a->out.d;
    mg_layout_broadcast(&ml, 1, &out);
    return cu_move(c, a, a->in[0].data, a->out.data, &ml, 0, 0);
}
