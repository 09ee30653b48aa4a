/*
 * cuda_norm.cu - batchnorm and layernorm, forward and backward, over the
 * [A, B, C] view of x that the CPU uses (mg_norm_dims): one block per group
 * with fixed-order block reductions.
 */
#include "cuda_internal.h"

/* ---- batchnorm, layernorm -------------------------------------------------
 */

/* x viewed as [A, B, C], normalised per b over A * C (see cpu_norm.c).
 * A thread visits elements e = threadIdx.x, + blockDim.x, ... of its
 * group as (i, j) = (e / C, e % C), kept up to date by one add and one
 * compare per step: a 64-bit division per element cost more than the
 * memory traffic. */
struct norm_walk {
    int64_t i, j;   /* the element: row i < A, column j < C */
    int64_t di, dj; /* blockDim.x as whole rows and the rest */
    __device__ explicit norm_walk(const mg_norm_dims &d)
        : i(d.c ? threadIdx.x / d.c : d.a), j(d.c ? threadIdx.x % d.c : 0),
          di(d.c ? blockDim.x / d.c : 0), dj(d.c ? blockDim.x % d.c : 0) {}
    __device__ bool more(const mg_norm_dims &d) const { return i < d.a; }
    __device__ void next(const mg_norm_dims &d) {
        i += di;
        j += dj;
        if (j >= d.c) {
            j -= d.c;
            i++;
        }
    }
    /* the element's offset in x for group b */
    __device__ int64_t at(const mg_norm_dims &d, int64_t b) const {
        return (i * d.b + b) * d.c + j;
    }
    /* its gamma/beta index */
    __device__ int64_t k(const mg_norm_dims &d, int64_t b) const {
        return d.gamma_by_c ? j : b;
    }
};

#define NORM_FOR(w, d) for (norm_walk w(d); w.more(d); w.next(d))

/* Threads per group: many, so that a group (a batchnorm channel of N*H*W
 * elements) has enough loads in flight; a power of two for the sums. */
static inline unsigned norm_threads(int64_t n) {
    unsigned t = 32;
    while (t < 1024 && (int64_t)t < n) t *= 2;
    return t;
}

/* Two-pass mean and rstd of group b, summed in double; every thread of the
 * block gets them. As on the CPU (cpu_norm.c), the mean is carried as
 * mean + mean_lo, the float and the rest of the double sum, and values are
 * centred as (x - mean) - mean_lo: exact near the mean, so an output near
 * 0 keeps its sign where rounding the mean to float would cost half an ulp
 * of |mean|. sh has room for blockDim.x doubles. */
template <typename T>
__device__ void norm_stats(const T *x, const mg_norm_dims &d, int64_t b, T *sh,
                           T *mean, T *mean_lo, T *rstd) {
    double *shd = reinterpret_cast<double *>(sh);
    const int64_t cnt = d.a * d.c;
    double s = 0;
    NORM_FOR(w, d) s += (double)x[w.at(d, b)];
    const double m = cu_block_sum(s, shd) / (double)cnt;
    const T mt = (T)m, ml = (T)(m - (double)mt);
    double v = 0;
    NORM_FOR(w, d) {
        const T u = (x[w.at(d, b)] - mt) - ml;
        v += (double)(u * u);
    }
    v = cu_block_sum(v, shd);
    *mean = mt;
    *mean_lo = ml;
    *rstd = (T)(1.0 / sqrt(v / (double)cnt + d.eps));
}

/* Shared memory of a norm kernel: T sums and the statistics' doubles. */
static inline size_t norm_shared(unsigned threads) {
    return threads * sizeof(double);
}

template <typename T>
__global__ void k_norm_fwd(const T *x, const T *gamma, const T *beta, T *y,
                           mg_norm_dims d) {
    CU_SHARED(T, sh);
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, ml, rs;
        norm_stats(x, d, b, sh, &m, &ml, &rs);
        NORM_FOR(w, d) {
            const int64_t o = w.at(d, b), k = w.k(d, b);
            y[o] = ((x[o] - m) - ml) * rs * gamma[k] + beta[k];
        }
    }
}

template <typename T>
__global__ void k_norm_grad_input(const T *gy, const T *x, const T *gamma,
                                  T *dx, mg_norm_dims d) {
    CU_SHARED(T, sh);
    const int64_t cnt = d.a * d.c;
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, ml, rs, s1 = 0, s2 = 0;
        norm_stats(x, d, b, sh, &m, &ml, &rs);
        NORM_FOR(w, d) {
            const int64_t o = w.at(d, b), k = w.k(d, b);
            const T h = gy[o] * gamma[k];
            s1 += h;
            s2 += h * ((x[o] - m) - ml) * rs;
        }
        const T mh = cu_block_sum(s1, sh) / (T)cnt;
        const T mhx = cu_block_sum(s2, sh) / (T)cnt;
        NORM_FOR(w, d) {
            const int64_t o = w.at(d, b), k = w.k(d, b);
            const T h = gy[o] * gamma[k];
            dx[o] = rs * (h - mh - ((x[o] - m) - ml) * rs * mhx);
        }
    }
}

/* batchnorm: dgamma[b] = sum over the group of gy * xhat. Layernorm keeps
 * each group's mean, mean_lo and rstd in st[3b..3b+2] for
 * k_norm_grad_gamma_c. */
template <typename T>
__global__ void k_norm_grad_gamma_b(const T *gy, const T *x, T *dg, T *st,
                                    mg_norm_dims d) {
    CU_SHARED(T, sh);
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, ml, rs;
        norm_stats(x, d, b, sh, &m, &ml, &rs);
        if (st) {
            if (threadIdx.x == 0) {
                st[3 * b] = m;
                st[3 * b + 1] = ml;
                st[3 * b + 2] = rs;
            }
            continue;
        }
        T s = 0;
        NORM_FOR(w, d) {
            const int64_t o = w.at(d, b);
            s += gy[o] * (((x[o] - m) - ml) * rs);
        }
        s = cu_block_sum(s, sh);
        if (threadIdx.x == 0) dg[b] = s;
    }
}

/* layernorm (A = 1): dgamma[j] = sum over rows b of gy * xhat, in row order */
template <typename T>
__global__ void k_norm_grad_gamma_c(const T *gy, const T *x, T *dg, const T *st,
                                    mg_norm_dims d) {
    CU_FOR(j, d.c) {
        T s = 0;
        for (int64_t b = 0; b < d.b; b++) {
            const int64_t o = b * d.c + j;
            s += gy[o] * (((x[o] - st[3 * b]) - st[3 * b + 1]) * st[3 * b + 2]);
        }
        dg[j] = s;
    }
}

/* ---- batchnorm over few channels of many elements ----------------------
 * A ResNet's channels (16 to 64 of N * H * W elements each) are too few
 * groups to fill the GPU one block each, so each channel is split into
 * chunks (src/common/group_reduce.h), each chunk's partial sums go to the
 * workspace, and every block adds a channel's partials in chunk order. The
 * arithmetic per element is the one-block kernels' above. */

/* The mean of channel b from its partial sums of x, as norm_stats has it. */
template <typename T>
__device__ void bn_mean(const double *psum, const cu_chunks &k, int64_t b,
                        T *mt, T *ml) {
    const double m = cu_chunks_total(psum, k, b) / (double)k.cnt;
    *mt = (T)m;
    *ml = (T)(m - (double)*mt);
}

template <typename T>
__device__ T bn_rstd(const double *pvar, const cu_chunks &k, int64_t b,
                     double eps) {
    return (T)(1.0 / sqrt(cu_chunks_total(pvar, k, b) / (double)k.cnt + eps));
}

#define BN_CHUNK_FOR(w, d, k) for (cu_chunk_walk w(k, d.c); w.more(); w.next())

/* psum[b][p]: the sum of chunk p of channel b */
template <typename T>
__global__ void k_bn_sum(const T *x, mg_norm_dims d, cu_chunks k,
                         double *psum) {
    CU_SHARED(double, sh);
    const int64_t b = blockIdx.y;
    double s = 0;
    BN_CHUNK_FOR(w, d, k) s += (double)x[w.at(d.b, b)];
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) psum[b * k.P + blockIdx.x] = s;
}

/* pvar[b][p]: the sum of chunk p's squares about the mean */
template <typename T>
__global__ void k_bn_var(const T *x, mg_norm_dims d, cu_chunks k,
                         const double *psum, double *pvar) {
    CU_SHARED(double, sh);
    const int64_t b = blockIdx.y;
    T m, ml;
    bn_mean(psum, k, b, &m, &ml);
    double v = 0;
    BN_CHUNK_FOR(w, d, k) {
        const T u = (x[w.at(d.b, b)] - m) - ml;
        v += (double)(u * u);
    }
    v = cu_block_sum(v, sh);
    if (threadIdx.x == 0) pvar[b * k.P + blockIdx.x] = v;
}

template <typename T>
__global__ void k_bn_fwd(const T *x, const T *gamma, const T *beta, T *y,
                         mg_norm_dims d, cu_chunks k, const double *psum,
                         const double *pvar) {
    const int64_t b = blockIdx.y;
    T m, ml;
    bn_mean(psum, k, b, &m, &ml);
    const T rs = bn_rstd<T>(pvar, k, b, d.eps), g = gamma[b], be = beta[b];
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        y[o] = ((x[o] - m) - ml) * rs * g + be;
    }
}

/* p1[b][p], p2[b][p]: chunk p's sums of h = gy * gamma and of h * xhat
 * (with gamma = NULL: of gy * xhat into p2 alone, for dgamma) */
template <typename T>
__global__ void k_bn_grad_sums(const T *gy, const T *x, const T *gamma,
                               mg_norm_dims d, cu_chunks k, const double *psum,
                               const double *pvar, double *p1, double *p2) {
    CU_SHARED(double, sh);
    const int64_t b = blockIdx.y;
    T m, ml;
    bn_mean(psum, k, b, &m, &ml);
    const T rs = bn_rstd<T>(pvar, k, b, d.eps), g = gamma ? gamma[b] : (T)1;
    double s1 = 0, s2 = 0;
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        if (gamma) {
            const T h = gy[o] * g;
            s1 += (double)h;
            s2 += (double)(h * ((x[o] - m) - ml) * rs);
        } else {
            s2 += (double)(gy[o] * (((x[o] - m) - ml) * rs));
        }
    }
    if (p1) {
        s1 = cu_block_sum(s1, sh);
        if (threadIdx.x == 0) p1[b * k.P + blockIdx.x] = s1;
    }
    s2 = cu_block_sum(s2, sh);
    if (threadIdx.x == 0) p2[b * k.P + blockIdx.x] = s2;
}

template <typename T>
__global__ void k_bn_grad_input(const T *gy, const T *x, const T *gamma, T *dx,
                                mg_norm_dims d, cu_chunks k, const double *psum,
                                const double *pvar, const double *p1,
                                const double *p2) {
    const int64_t b = blockIdx.y;
    T m, ml;
    bn_mean(psum, k, b, &m, &ml);
    const T rs = bn_rstd<T>(pvar, k, b, d.eps), g = gamma[b];
    const T mh = (T)(cu_chunks_total(p1, k, b) / (double)k.cnt);
    const T mhx = (T)(cu_chunks_total(p2, k, b) / (double)k.cnt);
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        const T h = gy[o] * g;
        dx[o] = rs * (h - mh - ((x[o] - m) - ml) * rs * mhx);
    }
}

template <typename T>
__global__ void k_bn_grad_gamma_total(const double *p, T *dg, int64_t nb,
                                      cu_chunks k) {
    CU_FOR(b, nb) dg[b] = (T)cu_chunks_total(p, k, b);
}

/* The chunks of a batchnorm op, or false where one block per channel is
 * used (layernorm, many channels, small ones): the same rule as the op
 * table's workspace (mg_batchnorm_workspace). */
static bool bn_split(const mg_norm_dims &d, cu_chunks *k) {
    if (d.gamma_by_c) return false;
    const int64_t P = mg_group_chunks(d.b, d.a * d.c);
    if (P <= 1) return false;
    *k = cu_chunks_of(P, d.a * d.c);
    return true;
}

/* The statistics' partial sums into w[0] and w[1] (each B * P doubles). */
template <typename T>
static mg_status bn_stats(cu_ctx *c, const mg_kargs *a, const T *x,
                          const mg_norm_dims &d, const cu_chunks &k,
                          double *w) {
    const dim3 grid((unsigned)k.P, (unsigned)d.b);
    const size_t sh = CU_CHUNK_THREADS * sizeof(double);
    double *psum = w, *pvar = w + d.b * k.P;
    k_bn_sum<T><<<grid, CU_CHUNK_THREADS, sh, c->stream>>>(x, d, k, psum);
    k_bn_var<T><<<grid, CU_CHUNK_THREADS, sh, c->stream>>>(x, d, k, psum,
                                                           pvar);
    return cu_check_launch(a, "batchnorm statistics");
}

mg_status cu_norm(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d = {};
    mg_status s = mg_norm_dims_setup(a, &a->in[0].d, &d);
    if (s != MG_OK) return s;
    cu_chunks k;
    if (bn_split(d, &k)) {
        void *w = NULL;
        s = cu_work(a, 2 * (size_t)(d.b * k.P) * sizeof(double), &w);
        if (s != MG_OK) return s;
        double *psum = (double *)w, *pvar = psum + d.b * k.P;
        CU_BY_FLOAT(a, a->out.d.dtype, {
            const T *x = (const T *)a->in[0].data;
            s = bn_stats<T>(c, a, x, d, k, psum);
            if (s != MG_OK) return s;
            k_bn_fwd<T><<<dim3((unsigned)k.P, (unsigned)d.b), CU_CHUNK_THREADS,
                          0, c->stream>>>(
                x, (const T *)a->in[1].data, (const T *)a->in[2].data,
                (T *)a->out.data, d, k, psum, pvar);
        });
        return MG_OK;
    }
    const unsigned t = norm_threads(d.a * d.c);
    CU_BY_FLOAT(
        a, a->out.d.dtype,
        (k_norm_fwd<T><<<cu_grid_rows(d.b), t, norm_shared(t), c->stream>>>(
            (const T *)a->in[0].data, (const T *)a->in[1].data,
            (const T *)a->in[2].data, (T *)a->out.data, d)));
    return MG_OK;
}

mg_status cu_norm_grad_input(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d = {};
    mg_status s = mg_norm_dims_setup(a, &a->in[1].d, &d);
    if (s != MG_OK) return s;
    cu_chunks k;
    if (bn_split(d, &k)) {
        void *w = NULL;
        s = cu_work(a, 4 * (size_t)(d.b * k.P) * sizeof(double), &w);
        if (s != MG_OK) return s;
        const int64_t n = d.b * k.P;
        double *psum = (double *)w, *pvar = psum + n, *p1 = pvar + n,
               *p2 = p1 + n;
        const dim3 grid((unsigned)k.P, (unsigned)d.b);
        CU_BY_FLOAT(a, a->out.d.dtype, {
            const T *gy = (const T *)a->in[0].data,
                    *x = (const T *)a->in[1].data,
                    *g = (const T *)a->in[2].data;
            s = bn_stats<T>(c, a, x, d, k, psum);
            if (s != MG_OK) return s;
            k_bn_grad_sums<T><<<grid, CU_CHUNK_THREADS,
                                CU_CHUNK_THREADS * sizeof(double), c->stream>>>(
                gy, x, g, d, k, psum, pvar, p1, p2);
            k_bn_grad_input<T><<<grid, CU_CHUNK_THREADS, 0, c->stream>>>(
                gy, x, g, (T *)a->out.data, d, k, psum, pvar, p1, p2);
        });
        return MG_OK;
    }
    const unsigned t = norm_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_norm_grad_input<T>
                 <<<cu_grid_rows(d.b), t, norm_shared(t), c->stream>>>(
                     (const T *)a->in[0].data, (const T *)a->in[1].data,
                     (const T *)a->in[2].data, (T *)a->out.data, d)));
    return MG_OK;
}

/* layernorm keeps each row's mean, mean_lo and rstd for the column pass. */
size_t cu_norm_grad_gamma_workspace(const mg_kargs *a) {
    mg_norm_dims d = {};
    if (mg_norm_dims_setup(a, &a->in[1].d, &d) != MG_OK || !d.gamma_by_c)
        return 0;
    return (size_t)(3 * d.b) * mg_dtype_size(a->out.d.dtype);
}

mg_status cu_norm_grad_gamma(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d = {};
    mg_status s = mg_norm_dims_setup(a, &a->in[1].d, &d);
    if (s != MG_OK) return s;
    cu_chunks k;
    if (bn_split(d, &k)) {
        void *w = NULL;
        s = cu_work(a, 3 * (size_t)(d.b * k.P) * sizeof(double), &w);
        if (s != MG_OK) return s;
        const int64_t n = d.b * k.P;
        double *psum = (double *)w, *pvar = psum + n, *p2 = pvar + n;
        CU_BY_FLOAT(a, a->out.d.dtype, {
            const T *gy = (const T *)a->in[0].data,
                    *x = (const T *)a->in[1].data;
            s = bn_stats<T>(c, a, x, d, k, psum);
            if (s != MG_OK) return s;
            k_bn_grad_sums<T><<<dim3((unsigned)k.P, (unsigned)d.b),
                                CU_CHUNK_THREADS,
                                CU_CHUNK_THREADS * sizeof(double), c->stream>>>(
                gy, x, (const T *)NULL, d, k, psum, pvar, (double *)NULL, p2);
            k_bn_grad_gamma_total<T><<<cu_blocks(d.b), CU_THREADS, 0,
                                       c->stream>>>(p2, (T *)a->out.data, d.b,
                                                    k);
        });
        return MG_OK;
    }
    const unsigned t = norm_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype, {
        const T *gy = (const T *)a->in[0].data, *x = (const T *)a->in[1].data;
        T *dg = (T *)a->out.data, *st = NULL;
        if (d.gamma_by_c) {
            void *w = NULL;
            s = cu_work(a, (size_t)(3 * d.b) * sizeof(T), &w);
            if (s != MG_OK) return s;
            st = (T *)w;
        }
        k_norm_grad_gamma_b<T>
            <<<cu_grid_rows(d.b), t, norm_shared(t), c->stream>>>(gy, x, dg, st,
                                                                  d);
        if (d.gamma_by_c) {
            s = cu_check_launch(a, "layernorm statistics");
            if (s != MG_OK) return s;
            k_norm_grad_gamma_c<T>
                <<<cu_blocks(d.c), CU_THREADS, 0, c->stream>>>(gy, x, dg, st,
                                                               d);
        }
    });
    return MG_OK;
}
