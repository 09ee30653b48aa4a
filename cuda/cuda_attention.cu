/*
 * cuda_attention.cu - the fused attention op and its backward op (below),
 * and causal_mask: over the last two axes [L1, L2] of x, entries above the
 * diagonal (column j > row i) take the fill value; the rest are copied.
 */
#include "cuda_internal.h"

#include "common/attn_tiles.h" /* the GEMM chunks, shared with the rule */

/* Over the last two axes [rows, cols]: j > i takes value, the rest x. */
template <typename T>
__global__ void k_causal_mask(const T *x, T *y, int64_t n, int64_t rows,
                              int64_t cols, T v) {
    CU_FOR(e, n) {
        const int64_t j = e % cols, i = (e / cols) % rows;
        y[e] = j > i ? v : x[e];
    }
}

mg_status cu_causal_mask(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *d = &a->out.d;
    if (d->ndim < 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "causal_mask needs 2 or more dims");
    const int64_t rows = d->shape[d->ndim - 2], cols = d->shape[d->ndim - 1];
    const int64_t n = mgi_tdesc_numel(d);
    CU_BY_FLOAT(a, d->dtype,
                k_causal_mask<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, n, rows, cols,
                    (T)a->attrs->alpha));
    return MG_OK;
}

/* ---- fused attention ------------------------------------------------------
 * Deterministic kernels (each output element summed in one fixed order; no
 * atomics) with the CPU's formulas, in two forms. Where a chunk of batch
 * entries' score matrices fits the workspace (src/common/attn_tiles.h), the
 * products go through cuBLAS: s = q k^T, a row kernel (one warp per row)
 * for the softmax, and o = p v; the backward adds dp = do v^T, a row kernel
 * for the weights and ds, and dv = p^T do, dq = ds k, dk = ds^T q. Else
 * plain kernels: the forward runs one block per query row over chunks of
 * blockDim keys with an online softmax, and the backward computes dq with a
 * block per query row and dk, dv with a block per key row, each
 * recomputing the scores and weights it needs. Both backwards first take
 * D = rowsum(do * o) - glse per row. */

#define CU_ATTN_THREADS 128

/* Block-wide max (op 0) or sum (op 1) of v over the block, in a fixed tree
 * order; red holds blockDim.x entries. Every thread gets the result. */
template <typename T> __device__ T cu_attn_reduce(T v, T *red, int op) {
    const unsigned t = threadIdx.x;
    __syncthreads();
    red[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            const T o = red[t + s];
            red[t] = op ? red[t] + o : (o > red[t] ? o : red[t]);
        }
        __syncthreads();
    }
    const T r = red[0];
    __syncthreads();
    return r;
}

/* For each column c < width: the sum over t < n of w[t] * src[t * ld + c],
 * handed to f(c, sum). One thread per column would leave most of the block
 * idle (a head has 32 dims, a block 128 threads), so the block splits into
 * G = blockDim.x / width groups, group g summing t in [g n / G,
 * (g + 1) n / G), and the first `width` threads add the groups' partials
 * in group order: a fixed order, so the result is the same run to run.
 * part holds blockDim.x entries; every thread of the block calls this. */
template <typename T, typename F>
__device__ void cu_attn_cols(const T *w, const T *src, int64_t ld, int64_t n,
                             int64_t width, T *part, F f) {
    const int64_t G =
        width < (int64_t)blockDim.x ? (int64_t)blockDim.x / width : 1;
    if (G == 1) {
        for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
            T acc = 0;
            for (int64_t t = 0; t < n; t++) acc += w[t] * src[t * ld + c];
            f(c, acc);
        }
        return;
    }
    const int64_t g = threadIdx.x / width, c = threadIdx.x % width;
    if (g < G) {
        const int64_t t0 = g * n / G, t1 = (g + 1) * n / G;
        T acc = 0;
        for (int64_t t = t0; t < t1; t++) acc += w[t] * src[t * ld + c];
        part[threadIdx.x] = acc;
    }
    __syncthreads();
    if ((int64_t)threadIdx.x < width) {
        T acc = 0;
        for (int64_t k = 0; k < G; k++) acc += part[k * width + threadIdx.x];
        f((int64_t)threadIdx.x, acc);
    }
    __syncthreads();
}

/* Score of query row i (of batch entry b) against key j: scale q.k + mask. */
template <typename T>
__device__ T cu_attn_score(const T *qr, const T *kr, const T *mb,
                           const mg_attn_dims &d, T scale, int64_t i,
                           int64_t j) {
    T s = 0;
    for (int64_t e = 0; e < d.d; e++) s += qr[e] * kr[e];
    s *= scale;
    if (mb) s += mb[i * d.ms_r + j * d.ms_c];
    return s;
}

template <typename T>
__global__ void k_attn_fwd(const T *q, const T *k, const T *v, const T *mask,
                           T *y, mg_attn_dims d, T scale, int causal, double p,
                           uint64_t key, uint64_t offset) {
    extern __shared__ unsigned char cu_attn_sm[];
    T *w = (T *)cu_attn_sm, *red = w + blockDim.x;
    const int64_t ldy = d.dv + 1;
    const T keep = (T)(1.0 / (1.0 - p));
    for (int64_t row = blockIdx.x; row < d.batch * d.lq; row += gridDim.x) {
        const int64_t b = row / d.lq, i = row % d.lq;
        const T *qr = q + row * d.d, *kb = k + b * d.lk * d.d,
                *vb = v + b * d.lk * d.dv;
        const T *mb = mask ? mask + mg_attn_mask_base(&d, b) : NULL;
        T *yr = y + row * ldy;
        const int64_t kend = causal && i + 1 < d.lk ? i + 1 : d.lk;
        for (int64_t c = threadIdx.x; c < d.dv; c += blockDim.x) yr[c] = 0;
        T m = -INFINITY, l = 0;
        for (int64_t j0 = 0; j0 < kend; j0 += blockDim.x) {
            const int64_t j = j0 + threadIdx.x;
            const T s =
                j < kend ? cu_attn_score(qr, kb + j * d.d, mb, d, scale, i, j)
                         : (T)-INFINITY;
            const T cm = cu_attn_reduce(s, red, 0);
            const T m_new = cm > m ? cm : m;
            if (m_new == (T)-INFINITY) continue; /* the same in every thread */
            const T alpha = exp(m - m_new);
            const T e = j < kend ? exp(s - m_new) : (T)0;
            l = l * alpha + cu_attn_reduce(e, red, 1);
            w[threadIdx.x] =
                p > 0 && j < kend &&
                        !(mg_rng_uniform(mg_rng_hash(
                              key, offset + (uint64_t)(row * d.lk + j))) >= p)
                    ? (T)0
                    : (p > 0 ? e * keep : e);
            __syncthreads();
            const int64_t n = kend - j0 < (int64_t)blockDim.x
                                  ? kend - j0
                                  : (int64_t)blockDim.x;
            cu_attn_cols(
                w, vb + j0 * d.dv, d.dv, n, d.dv, red,
                [&](int64_t c, T acc) { yr[c] = yr[c] * alpha + acc; });
            m = m_new;
            __syncthreads();
        }
        for (int64_t c = threadIdx.x; c < d.dv; c += blockDim.x) yr[c] /= l;
        if (threadIdx.x == 0) yr[d.dv] = m + log(l);
        __syncthreads();
    }
}

/* D = rowsum(do * o) - glse for every row, into the workspace. */
template <typename T>
__global__ void k_attn_rowdot(const T *y, const T *gy, T *D, int64_t rows,
                              int64_t dv) {
    CU_FOR(r, rows) {
        const T *yr = y + r * (dv + 1), *gr = gy + r * (dv + 1);
        T acc = 0;
        for (int64_t c = 0; c < dv; c++) acc += gr[c] * yr[c];
        D[r] = acc - gr[dv];
    }
}

/* The weight p (dropped and rescaled: pd) and the score gradient ds of
 * query i and key j (of batch entry b, global row `row`). */
template <typename T>
__device__ void cu_attn_pds(const T *q, const T *k, const T *v, const T *y,
                            const T *gy, const T *D, const T *mb,
                            const mg_attn_dims &d, T scale, double p,
                            uint64_t key, uint64_t offset, int64_t b, int64_t i,
                            int64_t j, T *pd, T *ds) {
    const int64_t row = b * d.lq + i, ldy = d.dv + 1;
    const T s = cu_attn_score(q + row * d.d, k + (b * d.lk + j) * d.d, mb, d,
                              scale, i, j);
    const T pw = exp(s - y[row * ldy + d.dv]);
    const T *gr = gy + row * ldy, *vr = v + (b * d.lk + j) * d.dv;
    T dp = 0;
    for (int64_t c = 0; c < d.dv; c++) dp += gr[c] * vr[c];
    T w = pw;
    if (p > 0) {
        const T keep = (T)(1.0 / (1.0 - p));
        const int kept = mg_rng_uniform(mg_rng_hash(
                             key, offset + (uint64_t)(row * d.lk + j))) >= p;
        dp = kept ? dp * keep : (T)0;
        w = kept ? pw * keep : (T)0;
    }
    *pd = w;
    *ds = pw * (dp - D[row]);
}

template <typename T>
__global__ void k_attn_dq(const T *q, const T *k, const T *v, const T *y,
                          const T *gy, const T *mask, const T *D, T *g,
                          mg_attn_dims d, T scale, int causal, double p,
                          uint64_t key, uint64_t offset) {
    extern __shared__ unsigned char cu_attn_sm[];
    T *dsm = (T *)cu_attn_sm, *part = dsm + blockDim.x;
    const int64_t per = d.lq * d.d + d.lk * d.d + d.lk * d.dv;
    for (int64_t row = blockIdx.x; row < d.batch * d.lq; row += gridDim.x) {
        const int64_t b = row / d.lq, i = row % d.lq;
        const T *mb = mask ? mask + mg_attn_mask_base(&d, b) : NULL;
        T *dq = g + b * per + i * d.d;
        const int64_t kend = causal && i + 1 < d.lk ? i + 1 : d.lk;
        for (int64_t c = threadIdx.x; c < d.d; c += blockDim.x) dq[c] = 0;
        for (int64_t j0 = 0; j0 < kend; j0 += blockDim.x) {
            const int64_t j = j0 + threadIdx.x;
            T pd = 0, ds = 0;
            if (j < kend)
                cu_attn_pds(q, k, v, y, gy, D, mb, d, scale, p, key, offset, b,
                            i, j, &pd, &ds);
            dsm[threadIdx.x] = ds;
            __syncthreads();
            const int64_t n = kend - j0 < (int64_t)blockDim.x
                                  ? kend - j0
                                  : (int64_t)blockDim.x;
            const T *kb = k + (b * d.lk + j0) * d.d;
            cu_attn_cols(dsm, kb, d.d, n, d.d, part,
                         [&](int64_t c, T acc) { dq[c] += scale * acc; });
            __syncthreads();
        }
    }
}

template <typename T>
__global__ void k_attn_dkv(const T *q, const T *k, const T *v, const T *y,
                           const T *gy, const T *mask, const T *D, T *g,
                           mg_attn_dims d, T scale, int causal, double p,
                           uint64_t key, uint64_t offset) {
    extern __shared__ unsigned char cu_attn_sm[];
    T *dsm = (T *)cu_attn_sm, *psm = dsm + blockDim.x, *part = psm + blockDim.x;
    const int64_t per = d.lq * d.d + d.lk * d.d + d.lk * d.dv, ldy = d.dv + 1;
    for (int64_t kr = blockIdx.x; kr < d.batch * d.lk; kr += gridDim.x) {
        const int64_t b = kr / d.lk, j = kr % d.lk;
        const T *mb = mask ? mask + mg_attn_mask_base(&d, b) : NULL;
        T *dk = g + b * per + d.lq * d.d + j * d.d;
        T *dvr = g + b * per + d.lq * d.d + d.lk * d.d + j * d.dv;
        const int64_t istart = causal ? j : 0; /* rows i >= j see key j */
        for (int64_t c = threadIdx.x; c < d.d; c += blockDim.x) dk[c] = 0;
        for (int64_t c = threadIdx.x; c < d.dv; c += blockDim.x) dvr[c] = 0;
        for (int64_t i0 = istart; i0 < d.lq; i0 += blockDim.x) {
            const int64_t i = i0 + threadIdx.x;
            T pd = 0, ds = 0;
            if (i < d.lq)
                cu_attn_pds(q, k, v, y, gy, D, mb, d, scale, p, key, offset, b,
                            i, j, &pd, &ds);
            dsm[threadIdx.x] = ds;
            psm[threadIdx.x] = pd;
            __syncthreads();
            const int64_t n = d.lq - i0 < (int64_t)blockDim.x
                                  ? d.lq - i0
                                  : (int64_t)blockDim.x;
            const T *qb = q + (b * d.lq + i0) * d.d;
            const T *gb = gy + (b * d.lq + i0) * ldy;
            cu_attn_cols(dsm, qb, d.d, n, d.d, part,
                         [&](int64_t c, T acc) { dk[c] += scale * acc; });
            cu_attn_cols(psm, gb, ldy, n, d.dv, part,
                         [&](int64_t c, T acc) { dvr[c] += acc; });
            __syncthreads();
        }
    }
}

/* ---- the GEMM form ----------------------------------------------------- */

/* Deterministic warp-wide sum and max: at each step lane x adds lane
 * x ^ o's value to its own, and a + b == b + a, so every lane ends with
 * the same bits. */
template <typename T> __device__ T cu_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ T cu_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        const T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* Row r of the chunk that starts at batch entry b0: its batch entry b,
 * query i, global row b * lq + i, the keys causality leaves it (ncol) and
 * its mask row (NULL: none). */
struct cu_attn_row {
    int64_t b, i, row, ncol;
    const void *mr;
};
template <typename T>
__device__ cu_attn_row cu_attn_row_of(const mg_attn_dims &d, const T *mask,
                                      int64_t b0, int64_t r, int causal) {
    cu_attn_row w;
    w.b = b0 + r / d.lq;
    w.i = r % d.lq;
    w.row = w.b * d.lq + w.i;
    w.ncol = causal && w.i + 1 < d.lk ? w.i + 1 : d.lk;
    w.mr = mask ? mask + mg_attn_mask_base(&d, w.b) + w.i * d.ms_r : NULL;
    return w;
}

#define CU_ATTN_WARP_ROWS(r, rows)                                             \
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;    \
         r < (rows); r += (int64_t)gridDim.x * blockDim.x / 32)

/* Forward, one warp per row of the chunk's scores s (q k^T): the softmax
 * of scale s + mask over the keys causality leaves, dropped and rescaled,
 * back into s (0 beyond them), and the row's log-sum-exp into column dv of
 * y. A row with no finite score gets l = 0, so NaN weights and lse -inf,
 * as on the CPU. */
template <typename T>
__global__ void k_attn_fwd_rows(T *s, T *y, const T *mask, mg_attn_dims d,
                                int64_t b0, int64_t rows, T scale, int causal,
                                double p, uint64_t key, uint64_t offset) {
    const int lane = threadIdx.x & 31;
    const T keep = (T)(1.0 / (1.0 - p));
    CU_ATTN_WARP_ROWS(r, rows) {
        const cu_attn_row w = cu_attn_row_of(d, mask, b0, r, causal);
        const T *mr = (const T *)w.mr;
        T *sr = s + r * d.lk;
        T m = -INFINITY;
        for (int64_t j = lane; j < w.ncol; j += 32) {
            T v = sr[j] * scale;
            if (mr) v += mr[j * d.ms_c];
            sr[j] = v;
            m = v > m ? v : m;
        }
        m = cu_warp_max(m);
        T l = 0;
        for (int64_t j = lane; j < w.ncol; j += 32) {
            const T e = m == (T)-INFINITY ? (T)0 : (T)exp(sr[j] - m);
            sr[j] = e;
            l += e;
        }
        l = cu_warp_sum(l);
        const T inv = (T)1 / l;
        for (int64_t j = lane; j < d.lk; j += 32) {
            T pw = 0;
            if (j < w.ncol) {
                pw = sr[j] * inv;
                if (p > 0)
                    pw = mg_rng_uniform(mg_rng_hash(
                             key, offset + (uint64_t)(w.row * d.lk + j))) >= p
                             ? pw * keep
                             : (T)0;
            }
            sr[j] = pw;
        }
        if (lane == 0) y[w.row * (d.dv + 1) + d.dv] = m + (T)log(l);
    }
}

/* Backward, one warp per row of the chunk: from s = q k^T and dp = do v^T,
 * the weights p = exp(scale s + mask - lse), dropped and rescaled, into s,
 * and scale * p * (dp' - D) into dp, where dp' is dp dropped and rescaled
 * like the weights; both 0 beyond the keys causality leaves. */
template <typename T>
__global__ void k_attn_bwd_rows(T *s, T *dp, const T *y, const T *mask,
                                const T *D, mg_attn_dims d, int64_t b0,
                                int64_t rows, T scale, int causal, double p,
                                uint64_t key, uint64_t offset) {
    const int lane = threadIdx.x & 31;
    const T keep = (T)(1.0 / (1.0 - p));
    CU_ATTN_WARP_ROWS(r, rows) {
        const cu_attn_row w = cu_attn_row_of(d, mask, b0, r, causal);
        const T *mr = (const T *)w.mr;
        const T lse = y[w.row * (d.dv + 1) + d.dv], Di = D[w.row];
        T *sr = s + r * d.lk, *pr = dp + r * d.lk;
        for (int64_t j = lane; j < d.lk; j += 32) {
            T wt = 0, ds = 0;
            if (j < w.ncol) {
                T v = sr[j] * scale;
                if (mr) v += mr[j * d.ms_c];
                const T pw = (T)exp(v - lse);
                T g = pr[j];
                wt = pw;
                if (p > 0) {
                    const int kept =
                        mg_rng_uniform(mg_rng_hash(
                            key, offset + (uint64_t)(w.row * d.lk + j))) >= p;
                    g = kept ? g * keep : (T)0;
                    wt = kept ? pw * keep : (T)0;
                }
                ds = scale * (pw * (g - Di));
            }
            sr[j] = wt;
            pr[j] = ds;
        }
    }
}

/* Batch entries per GEMM round, 0 where the kernels go by rows: the shared
 * rule, and rows too for empty heads (cuBLAS with no inner dim would leave
 * the scores unset). */
static int64_t attn_chunk(int64_t batch, int64_t lq, int64_t lk, int64_t dd,
                          int64_t dv, int grad) {
    if (dd <= 0 || dv <= 0) return 0;
    return mg_attn_cuda_chunk(batch, lq, lk, grad);
}
static int64_t attn_chunk_of(const mg_attn_dims &d, int grad) {
    return attn_chunk(d.batch, d.lq, d.lk, d.d, d.dv, grad);
}

template <typename T>
static mg_status attn_fwd_gemm(cu_ctx *c, const mg_kargs *a,
                               const mg_attn_dims &d, int64_t chunk, T *s) {
    const mg_attrs *at = a->attrs;
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    const T *q = (const T *)a->in[0].data, *k = (const T *)a->in[1].data,
            *v = (const T *)a->in[2].data;
    const T *m = d.has_mask ? (const T *)a->in[3].data : (const T *)NULL;
    T *y = (T *)a->out.data;
    const int64_t ldy = d.dv + 1, lqk = d.lq * d.lk;
    for (int64_t b0 = 0; b0 < d.batch; b0 += chunk) {
        const int64_t cb = d.batch - b0 < chunk ? d.batch - b0 : chunk;
        mg_status st = cu_gemm<T>(
            c, a, 0, 1, d.lq, d.lk, d.d, q + b0 * d.lq * d.d, d.d, d.lq * d.d,
            k + b0 * d.lk * d.d, d.d, d.lk * d.d, (T)0, s, d.lk, lqk, cb);
        if (st != MG_OK) return st;
        const int64_t rows = cb * d.lq;
        k_attn_fwd_rows<T><<<cu_blocks(rows * 32), CU_THREADS, 0, c->stream>>>(
            s, y, m, d, b0, rows, (T)at->alpha, at->causal, at->p, key,
            at->offset);
        st = cu_gemm<T>(c, a, 0, 0, d.lq, d.dv, d.lk, s, d.lk, lqk,
                        v + b0 * d.lk * d.dv, d.dv, d.lk * d.dv, (T)0,
                        y + b0 * d.lq * ldy, ldy, d.lq * ldy, cb);
        if (st != MG_OK) return st;
    }
    return MG_OK;
}

/* dq, dk and dv of each batch entry into g (packed as attention_grad's
 * output), D already in the workspace's first rows. */
template <typename T>
static mg_status attn_bwd_gemm(cu_ctx *c, const mg_kargs *a,
                               const mg_attn_dims &d, int64_t chunk, const T *D,
                               T *s) {
    const mg_attrs *at = a->attrs;
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    const T *q = (const T *)a->in[0].data, *k = (const T *)a->in[1].data,
            *v = (const T *)a->in[2].data, *y = (const T *)a->in[3].data,
            *gy = (const T *)a->in[4].data;
    const T *m = d.has_mask ? (const T *)a->in[5].data : (const T *)NULL;
    T *g = (T *)a->out.data;
    const int64_t ldy = d.dv + 1, lqk = d.lq * d.lk;
    const int64_t per = d.lq * d.d + d.lk * d.d + d.lk * d.dv;
    T *dp = s + chunk * lqk;
    for (int64_t b0 = 0; b0 < d.batch; b0 += chunk) {
        const int64_t cb = d.batch - b0 < chunk ? d.batch - b0 : chunk;
        const T *qb = q + b0 * d.lq * d.d, *kb = k + b0 * d.lk * d.d,
                *vb = v + b0 * d.lk * d.dv, *gb = gy + b0 * d.lq * ldy;
        T *gq = g + b0 * per, *gk = gq + d.lq * d.d, *gv = gk + d.lk * d.d;
        mg_status st =
            cu_gemm<T>(c, a, 0, 1, d.lq, d.lk, d.d, qb, d.d, d.lq * d.d, kb,
                       d.d, d.lk * d.d, (T)0, s, d.lk, lqk, cb);
        if (st == MG_OK)
            st = cu_gemm<T>(c, a, 0, 1, d.lq, d.lk, d.dv, gb, ldy, d.lq * ldy,
                            vb, d.dv, d.lk * d.dv, (T)0, dp, d.lk, lqk, cb);
        if (st != MG_OK) return st;
        const int64_t rows = cb * d.lq;
        k_attn_bwd_rows<T><<<cu_blocks(rows * 32), CU_THREADS, 0, c->stream>>>(
            s, dp, y, m, D, d, b0, rows, (T)at->alpha, at->causal, at->p, key,
            at->offset);
        st = cu_gemm<T>(c, a, 1, 0, d.lk, d.dv, d.lq, s, d.lk, lqk, gb, ldy,
                        d.lq * ldy, (T)0, gv, d.dv, per, cb);
        if (st == MG_OK)
            st = cu_gemm<T>(c, a, 0, 0, d.lq, d.d, d.lk, dp, d.lk, lqk, kb, d.d,
                            d.lk * d.d, (T)0, gq, d.d, per, cb);
        if (st == MG_OK)
            st = cu_gemm<T>(c, a, 1, 0, d.lk, d.d, d.lq, dp, d.lk, lqk, qb, d.d,
                            d.lq * d.d, (T)0, gk, d.d, per, cb);
        if (st != MG_OK) return st;
    }
    return MG_OK;
}

/* ---- the row form and the ops ------------------------------------------ */

/* The scores' gradient ds [batch, Lq, Lk] (attention_grad_mask), one
 * element per thread. */
template <typename T>
__global__ void k_attn_dmask(const T *q, const T *k, const T *v, const T *y,
                             const T *gy, const T *mask, const T *D, T *ds,
                             mg_attn_dims d, T scale, int causal, double p,
                             uint64_t key, uint64_t offset) {
    CU_FOR(e, d.batch * d.lq * d.lk) {
        const int64_t j = e % d.lk, i = (e / d.lk) % d.lq,
                      b = e / (d.lk * d.lq);
        T pd = 0, dsv = 0;
        if (!(causal && j > i))
            cu_attn_pds(q, k, v, y, gy, D,
                        mask ? mask + mg_attn_mask_base(&d, b)
                             : (const T *)NULL,
                        d, scale, p, key, offset, b, i, j, &pd, &dsv);
        ds[e] = dsv;
    }
}

/* From the op's inputs (the workspace queries get no checked dims): the
 * GEMM form's workspace elements, 0 where the kernels go by rows; and in
 * *rows, batch * Lq, which D takes. */
static int64_t attn_gemm_elems(const mg_kargs *a, int grad, int64_t *rows) {
    const mg_tdesc *q = &a->in[0].d, *k = &a->in[1].d, *v = &a->in[2].d;
    const int nd = q->ndim;
    *rows = 0;
    if (a->n_in < 3 || nd < 2 || k->ndim != nd || v->ndim != nd) return 0;
    int64_t batch = 1;
    for (int i = 0; i < nd - 2; i++) batch *= q->shape[i];
    const int64_t lq = q->shape[nd - 2], lk = k->shape[nd - 2];
    *rows = batch * lq;
    if (attn_chunk(batch, lq, lk, q->shape[nd - 1], v->shape[nd - 1], grad) ==
        0)
        return 0;
    return mg_attn_cuda_elems(batch, lq, lk, grad);
}

size_t cu_attention_workspace(const mg_kargs *a) {
    int64_t rows;
    return (size_t)attn_gemm_elems(a, 0, &rows) *
           mg_dtype_size(a->in[0].d.dtype);
}

size_t cu_attention_grad_workspace(const mg_kargs *a) {
    int64_t rows;
    const int64_t gemm = attn_gemm_elems(a, 1, &rows);
    /* attention_grad_mask, and the row form, keep D alone */
    const int64_t elems =
        a->op == MG_OP_ATTENTION_GRAD && gemm > 0 ? gemm : rows;
    return (size_t)elems * mg_dtype_size(a->in[0].d.dtype);
}

mg_status cu_attention(cu_ctx *c, const mg_kargs *a) {
    mg_attn_dims d;
    mg_status s = mg_attn_dims_setup(a, 3, &d);
    if (s != MG_OK) return s;
    const mg_attrs *at = a->attrs;
    const int64_t chunk = attn_chunk_of(d, 0);
    if (chunk > 0) {
        void *work = NULL;
        s = cu_work(a, cu_attention_workspace(a), &work);
        if (s != MG_OK) return s;
        CU_BY_FLOAT(a, a->out.d.dtype,
                    return attn_fwd_gemm<T>(c, a, d, chunk, (T *)work));
    }
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    const int64_t rows = d.batch * d.lq;
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_attn_fwd<T><<<cu_grid_rows(rows), CU_ATTN_THREADS,
                                 2 * CU_ATTN_THREADS * sizeof(T), c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (const T *)a->in[2].data,
                    d.has_mask ? (const T *)a->in[3].data : (const T *)NULL,
                    (T *)a->out.data, d, (T)at->alpha, at->causal, at->p, key,
                    at->offset)));
    return MG_OK;
}

/* attention_grad (dq, dk, dv packed) or attention_grad_mask (ds): D
 * first, then the gradient kernels, all on the context's stream. */
template <typename T>
static mg_status attn_grad_launch(cu_ctx *c, const mg_kargs *a,
                                  const mg_attn_dims &d, T *D) {
    const mg_attrs *at = a->attrs;
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    const int64_t rows = d.batch * d.lq;
    const T *q = (const T *)a->in[0].data, *k = (const T *)a->in[1].data,
            *v = (const T *)a->in[2].data, *y = (const T *)a->in[3].data,
            *gy = (const T *)a->in[4].data;
    const T *m = d.has_mask ? (const T *)a->in[5].data : (const T *)NULL;
    T *g = (T *)a->out.data;
    const T scale = (T)at->alpha;
    k_attn_rowdot<T>
        <<<cu_blocks(rows), CU_THREADS, 0, c->stream>>>(y, gy, D, rows, d.dv);
    if (a->op == MG_OP_ATTENTION_GRAD_MASK) {
        const int64_t n = rows * d.lk;
        k_attn_dmask<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            q, k, v, y, gy, m, D, g, d, scale, at->causal, at->p, key,
            at->offset);
        return MG_OK;
    }
    const int64_t chunk = attn_chunk_of(d, 1);
    if (chunk > 0)
        return attn_bwd_gemm<T>(c, a, d, chunk, D,
                                D + mg_attn_cuda_d_elems(d.batch, d.lq));
    k_attn_dq<T><<<cu_grid_rows(rows), CU_ATTN_THREADS,
                   2 * CU_ATTN_THREADS * sizeof(T), c->stream>>>(
        q, k, v, y, gy, m, D, g, d, scale, at->causal, at->p, key, at->offset);
    k_attn_dkv<T><<<cu_grid_rows(d.batch * d.lk), CU_ATTN_THREADS,
                    3 * CU_ATTN_THREADS * sizeof(T), c->stream>>>(
        q, k, v, y, gy, m, D, g, d, scale, at->causal, at->p, key, at->offset);
    return MG_OK;
}

mg_status cu_attention_grad(cu_ctx *c, const mg_kargs *a) {
    mg_attn_dims d;
    mg_status s = mg_attn_dims_setup(a, 5, &d);
    if (s != MG_OK) return s;
    void *work = NULL;
    s = cu_work(a, cu_attention_grad_workspace(a), &work);
    if (s != MG_OK) return s;
    CU_BY_FLOAT(a, a->out.d.dtype,
                return attn_grad_launch<T>(c, a, d, (T *)work));
    return MG_OK;
}
