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

/* layernorm, rows split into chunks (mg_column_chunks): part[p * C + j]
 * sums column j over chunk p's rows, in row order and in double; then each
 * column adds its chunks in chunk order. The split depends only on the
 * shape, so the result is the same run to run. */
template <typename T>
__global__ void k_norm_grad_gamma_part(const T *gy, const T *x, double *part,
                                       const T *st, mg_norm_dims d,
                                       int64_t chunks) {
    CU_FOR(e, chunks * d.c) {
        const int64_t p = e / d.c, j = e % d.c;
        const int64_t b0 = p * d.b / chunks, b1 = (p + 1) * d.b / chunks;
        double s = 0;
        for (int64_t b = b0; b < b1; b++) {
            const int64_t o = b * d.c + j;
            s += (double)(gy[o] * (((x[o] - st[3 * b]) - st[3 * b + 1]) *
                                   st[3 * b + 2]));
        }
        part[e] = s;
    }
}

template <typename T>
__global__ void k_norm_grad_gamma_fold(T *dg, const double *part,
                                       mg_norm_dims d, int64_t chunks) {
    CU_FOR(j, d.c) {
        double s = 0;
        for (int64_t p = 0; p < chunks; p++) s += part[p * d.c + j];
        dg[j] = (T)s;
    }
}

/* ---- batchnorm over few channels of many elements ----------------------
 * A ResNet's channels (16 to 64 of N * H * W elements each) are too few
 * groups to fill the GPU one block each, so each channel is split into
 * chunks (src/common/group_reduce.h). One pass over a chunk sums, in
 * double, x and x^2 and, for the gradients, h (gy * gamma, or gy) and
 * h * x; every block then adds a channel's partials in chunk order. The
 * mean is the one-block kernels' (the double sum over N), carried as float
 * plus remainder; the variance is E[x^2] - mean^2 in double, and
 * sum(h * xhat) = rstd * (sum(h * x) - mean * sum(h)), so the statistics
 * take one read of x and gy instead of two or three. */

enum { BN_SX, BN_SXX, BN_SH, BN_SHX, BN_PARTS };

/* A channel's statistics from its partial sums (slice q of the workspace
 * holds B * P partials of quantity q). */
struct bn_stats {
    double m, rs;   /* mean and rstd in double */
    double sh, shx; /* sum(h), sum(h * x): gradients only */
};

__device__ __forceinline__ bn_stats bn_totals(const double *part,
                                              const cu_chunks &k, int64_t nb,
                                              int64_t b, double eps,
                                              bool grads) {
    const double n = (double)k.cnt;
    bn_stats st;
    st.m = cu_chunks_total(part + BN_SX * nb * k.P, k, b) / n;
    double var =
        cu_chunks_total(part + BN_SXX * nb * k.P, k, b) / n - st.m * st.m;
    if (var < 0) var = 0;
    st.rs = 1.0 / sqrt(var + eps);
    st.sh = grads ? cu_chunks_total(part + BN_SH * nb * k.P, k, b) : 0;
    st.shx = grads ? cu_chunks_total(part + BN_SHX * nb * k.P, k, b) : 0;
    return st;
}

#define BN_CHUNK_FOR(w, d, k) for (cu_chunk_walk w(k, d.c); w.more(); w.next())

/* One pass over chunk blockIdx.x of channel blockIdx.y: sum(x), sum(x^2)
 * and, with gy, sum(h) and sum(h * x), h = gy * gamma (gy without gamma). */
template <typename T>
__global__ void k_bn_sums(const T *x, const T *gy, const T *gamma,
                          mg_norm_dims d, cu_chunks k, double *part) {
    CU_SHARED(double, sh);
    const int64_t b = blockIdx.y, at = b * k.P + blockIdx.x;
    const int64_t slice = d.b * k.P;
    const double g = gamma ? (double)gamma[b] : 1.0;
    double sx = 0, sxx = 0, shs = 0, shx = 0;
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        const double v = (double)x[o];
        sx += v;
        sxx += v * v;
        if (gy) {
            const double h = (double)gy[o] * g;
            shs += h;
            shx += h * v;
        }
    }
    sx = cu_block_sum(sx, sh);
    sxx = cu_block_sum(sxx, sh);
    if (gy) {
        shs = cu_block_sum(shs, sh);
        shx = cu_block_sum(shx, sh);
    }
    if (threadIdx.x == 0) {
        part[BN_SX * slice + at] = sx;
        part[BN_SXX * slice + at] = sxx;
        if (gy) {
            part[BN_SH * slice + at] = shs;
            part[BN_SHX * slice + at] = shx;
        }
    }
}

/* y = ((x - mean) - mean_lo) * rstd * gamma + beta, as k_norm_fwd. */
template <typename T>
__global__ void k_bn_fwd(const T *x, const T *gamma, const T *beta, T *y,
                         mg_norm_dims d, cu_chunks k, const double *part) {
    const int64_t b = blockIdx.y;
    const bn_stats st = bn_totals(part, k, d.b, b, d.eps, false);
    const T m = (T)st.m, ml = (T)(st.m - (double)m), rs = (T)st.rs;
    const T g = gamma[b], be = beta[b];
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        y[o] = ((x[o] - m) - ml) * rs * g + be;
    }
}

/* dx = rstd * (h - mean(h) - xhat * mean(h * xhat)), as k_norm_grad_input */
template <typename T>
__global__ void k_bn_grad_input(const T *gy, const T *x, const T *gamma, T *dx,
                                mg_norm_dims d, cu_chunks k,
                                const double *part) {
    const int64_t b = blockIdx.y;
    const bn_stats st = bn_totals(part, k, d.b, b, d.eps, true);
    const T m = (T)st.m, ml = (T)(st.m - (double)m), rs = (T)st.rs;
    const double n = (double)k.cnt;
    const T mh = (T)(st.sh / n);
    const T mhx = (T)(st.rs * (st.shx - st.m * st.sh) / n);
    const T g = gamma[b];
    BN_CHUNK_FOR(w, d, k) {
        const int64_t o = w.at(d.b, b);
        const T h = gy[o] * g;
        dx[o] = rs * (h - mh - ((x[o] - m) - ml) * rs * mhx);
    }
}

/* dgamma[b] = sum(gy * xhat) = rstd * (sum(gy * x) - mean * sum(gy)) */
template <typename T>
__global__ void k_bn_grad_gamma(T *dg, mg_norm_dims d, cu_chunks k,
                                const double *part) {
    CU_FOR(b, d.b) {
        const bn_stats st = bn_totals(part, k, d.b, b, d.eps, true);
        dg[b] = (T)(st.rs * (st.shx - st.m * st.sh));
    }
}

/* The chunks of a batchnorm op, or false where one block per channel is
 * used (layernorm, many channels, small ones): the same rule as the op
 * table's workspace (mg_batchnorm_workspace, BN_PARTS or 2 partials). */
static bool bn_split(const mg_norm_dims &d, cu_chunks *k) {
    if (d.gamma_by_c) return false;
    const int64_t P = mg_group_chunks(d.b, d.a * d.c);
    if (P <= 1) return false;
    *k = cu_chunks_of(P, d.a * d.c);
    return true;
}

/* The sums of every chunk into the workspace: x's two, and gy's two when
 * gy is given. */
template <typename T>
static mg_status bn_sums(cu_ctx *c, const mg_kargs *a, const T *x, const T *gy,
                         const T *gamma, const mg_norm_dims &d,
                         const cu_chunks &k, double **part) {
    void *w = NULL;
    const int parts = gy ? BN_PARTS : 2;
    mg_status s =
        cu_work(a, (size_t)parts * (size_t)(d.b * k.P) * sizeof(double), &w);
    if (s != MG_OK) return s;
    *part = (double *)w;
    k_bn_sums<T><<<dim3((unsigned)k.P, (unsigned)d.b), CU_CHUNK_THREADS,
                   CU_CHUNK_THREADS * sizeof(double), c->stream>>>(x, gy, gamma,
                                                                   d, k, *part);
    return cu_check_launch(a, "batchnorm sums");
}

mg_status cu_norm(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d = {};
    mg_status s = mg_norm_dims_setup(a, &a->in[0].d, &d);
    if (s != MG_OK) return s;
    cu_chunks k;
    if (bn_split(d, &k)) {
        CU_BY_FLOAT(a, a->out.d.dtype, {
            const T *x = (const T *)a->in[0].data;
            double *part = NULL;
            s = bn_sums<T>(c, a, x, (const T *)NULL, (const T *)NULL, d, k,
                           &part);
            if (s != MG_OK) return s;
            k_bn_fwd<T><<<dim3((unsigned)k.P, (unsigned)d.b), CU_CHUNK_THREADS,
                          0, c->stream>>>(x, (const T *)a->in[1].data,
                                          (const T *)a->in[2].data,
                                          (T *)a->out.data, d, k, part);
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
        CU_BY_FLOAT(a, a->out.d.dtype, {
            const T *gy = (const T *)a->in[0].data,
                    *x = (const T *)a->in[1].data,
                    *g = (const T *)a->in[2].data;
            double *part = NULL;
            s = bn_sums<T>(c, a, x, gy, g, d, k, &part);
            if (s != MG_OK) return s;
            k_bn_grad_input<T>
                <<<dim3((unsigned)k.P, (unsigned)d.b), CU_CHUNK_THREADS, 0,
                   c->stream>>>(gy, x, g, (T *)a->out.data, d, k, part);
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

/* layernorm keeps each row's mean, mean_lo and rstd for the column pass,
 * and the column sums of its chunks of rows (group_reduce.h). */
size_t cu_norm_grad_gamma_workspace(const mg_kargs *a) {
    mg_norm_dims d = {};
    if (mg_norm_dims_setup(a, &a->in[1].d, &d) != MG_OK || !d.gamma_by_c)
        return 0;
    return mg_layernorm_gamma_workspace(d.b, d.c,
                                        mg_dtype_size(a->out.d.dtype));
}

mg_status cu_norm_grad_gamma(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d = {};
    mg_status s = mg_norm_dims_setup(a, &a->in[1].d, &d);
    if (s != MG_OK) return s;
    cu_chunks k;
    if (bn_split(d, &k)) {
        CU_BY_FLOAT(a, a->out.d.dtype, {
            double *part = NULL;
            s = bn_sums<T>(c, a, (const T *)a->in[1].data,
                           (const T *)a->in[0].data, (const T *)NULL, d, k,
                           &part);
            if (s != MG_OK) return s;
            k_bn_grad_gamma<T><<<cu_blocks(d.b), CU_THREADS, 0, c->stream>>>(
                (T *)a->out.data, d, k, part);
        });
        return MG_OK;
    }
    const unsigned t = norm_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype, {
        const T *gy = (const T *)a->in[0].data, *x = (const T *)a->in[1].data;
        T *dg = (T *)a->out.data, *st = NULL;
        const int64_t chunks = d.gamma_by_c ? mg_column_chunks(d.b, d.c) : 1;
        double *part = NULL;
        if (d.gamma_by_c) {
            void *w = NULL;
            s = cu_work(a, mg_layernorm_gamma_workspace(d.b, d.c, sizeof(T)),
                        &w);
            if (s != MG_OK) return s;
            st = (T *)w;
            part = (double *)((char *)w +
                              mg_layernorm_gamma_stats_bytes(d.b, sizeof(T)));
        }
        k_norm_grad_gamma_b<T>
            <<<cu_grid_rows(d.b), t, norm_shared(t), c->stream>>>(gy, x, dg, st,
                                                                  d);
        if (d.gamma_by_c) {
            s = cu_check_launch(a, "layernorm statistics");
            if (s != MG_OK) return s;
            if (chunks > 1) {
                k_norm_grad_gamma_part<T>
                    <<<cu_blocks(chunks * d.c), CU_THREADS, 0, c->stream>>>(
                        gy, x, part, st, d, chunks);
                s = cu_check_launch(a, "layernorm column chunks");
                if (s != MG_OK) return s;
                k_norm_grad_gamma_fold<T>
                    <<<cu_blocks(d.c), CU_THREADS, 0, c->stream>>>(dg, part, d,
                                                                   chunks);
            } else {
                k_norm_grad_gamma_c<T>
                    <<<cu_blocks(d.c), CU_THREADS, 0, c->stream>>>(gy, x, dg,
                                                                   st, d);
            }
        }
    });
    return MG_OK;
}
