/*
 * cpu_norm.c - batchnorm and layernorm, forward and backward, as one
 * kernel family. x is viewed as [A, B, C] (mg_norm_dims in
 * kernel_shared.h) and normalised per group b over its A * C elements.
 * Statistics are recomputed per group in every kernel with two passes
 * (mean, then the biased variance of x - mean), which keeps the variance
 * accurate when |mean| is large against the spread. A batchnorm group is
 * N*H*W elements, and float accumulation over all of it cost about half the
 * accuracy PyTorch has; so each row of C elements is summed in T (a loop
 * with eight running partial sums, which the compiler keeps in one vector
 * register without reordering anything, and the row sums in double; the
 * gradients' sums over a group are taken the same way.
 * The mean is carried as two floats, mean + mean_lo (the rest of the
 * double sum), and centred values are (x - mean) - mean_lo. Near the mean
 * x - mean is exact, so an output near 0 (a ReLU's kink after a batchnorm
 * with beta 0) keeps its sign and relative precision instead of the half
 * ulp of |mean| that rounding the mean to float costs: that half ulp sent
 * one U-Net activation a few 1e-7 above zero to exactly 0, and the ReLU
 * after it moved a whole channel's gradient (docs/onnx.md).
 *
 * With xhat = (x - mean) * rstd and h = gy * gamma, the gradients are
 *   dx     = rstd * (h - mean(h) - xhat * mean(h * xhat))   per group
 *   dgamma = sum of gy * xhat over everything gamma is broadcast along
 */
#include "cpu_kernels.h"

#include <string.h>
#include <tgmath.h>

#define NORM_DEF(T, SUF)                                                       \
    /* sum of (r[j] - m)^p for p = 1 or 2, in a fixed order */                 \
    static T row_sum_##SUF(const T *r, int64_t n, T m, T ml, int squares) {    \
        T acc[8] = {0};                                                        \
        int64_t j = 0;                                                         \
        for (; j + 8 <= n; j += 8)                                             \
            for (int k = 0; k < 8; k++) {                                      \
                const T e = (r[j + k] - m) - ml;                               \
                acc[k] += squares ? e * e : e;                                 \
            }                                                                  \
        T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +                        \
              ((acc[4] + acc[5]) + (acc[6] + acc[7]));                         \
        for (; j < n; j++) {                                                   \
            const T e = (r[j] - m) - ml;                                       \
            s += squares ? e * e : e;                                          \
        }                                                                      \
        return s;                                                              \
    }                                                                          \
    /* h = gy * gamma (gamma[j], or gamma[0] for every j when gs is 0):        \
     * sums of h and h * xhat, element j into partial j % 8 */                 \
    static void h_sums_##SUF(const T *gy, const T *x, const T *g, int gs,      \
                             int64_t n, T m, T ml, T rs, T *ph_out,            \
                             T *phx_out) {                                     \
        /* local partials: the outputs may alias the inputs as far as the      \
         * compiler knows, which would keep them in memory */                  \
        T ph[8] = {0}, phx[8] = {0};                                           \
        const T g0 = g[0];                                                     \
        int64_t j = 0;                                                         \
        if (gs) {                                                              \
            for (; j + 8 <= n; j += 8)                                         \
                for (int k = 0; k < 8; k++) {                                  \
                    const T h = gy[j + k] * g[j + k];                          \
                    ph[k] += h;                                                \
                    phx[k] += h * ((x[j + k] - m) - ml) * rs;                  \
                }                                                              \
        } else {                                                               \
            for (; j + 8 <= n; j += 8)                                         \
                for (int k = 0; k < 8; k++) {                                  \
                    const T h = gy[j + k] * g0;                                \
                    ph[k] += h;                                                \
                    phx[k] += h * ((x[j + k] - m) - ml) * rs;                  \
                }                                                              \
        }                                                                      \
        for (; j < n; j++) {                                                   \
            const T h = gy[j] * g[gs ? j : 0];                                 \
            ph[j & 7] += h;                                                    \
            phx[j & 7] += h * ((x[j] - m) - ml) * rs;                          \
        }                                                                      \
        for (int k = 0; k < 8; k++) ph_out[k] = ph[k], phx_out[k] = phx[k];    \
    }                                                                          \
    static void stats_##SUF(const T *x, const mg_norm_dims *d, int64_t b,      \
                            T *mean, T *mean_lo, T *rstd) {                    \
        const double count = (double)(d->a * d->c);                            \
        double s = 0, v = 0;                                                   \
        for (int64_t i = 0; i < d->a; i++) {                                   \
            const T *r = x + (i * d->b + b) * d->c;                            \
            s += row_sum_##SUF(r, d->c, 0, 0, 0);                              \
        }                                                                      \
        const double m = s / count;                                            \
        const T mt = (T)m, ml = (T)(m - (double)mt);                           \
        for (int64_t i = 0; i < d->a; i++) {                                   \
            const T *r = x + (i * d->b + b) * d->c;                            \
            v += row_sum_##SUF(r, d->c, mt, ml, 1);                            \
        }                                                                      \
        *mean = mt;                                                            \
        *mean_lo = ml;                                                         \
        *rstd = (T)(1.0 / sqrt(v / count + d->eps));                           \
    }                                                                          \
    static mg_status norm_fwd_##SUF(const T *x, const T *gamma, const T *beta, \
                                    T *y, const mg_norm_dims *d) {             \
        MG_CPU_PAR_LOOP(                                                       \
            d->a * d->b * d->c, for (int64_t b = 0; b < d->b; b++), {          \
                T m, ml, rs;                                                   \
                stats_##SUF(x, d, b, &m, &ml, &rs);                            \
                for (int64_t i = 0; i < d->a; i++) {                           \
                    const int64_t o = (i * d->b + b) * d->c;                   \
                    for (int64_t j = 0; j < d->c; j++) {                       \
                        const int64_t k = d->gamma_by_c ? j : b;               \
                        y[o + j] =                                             \
                            ((x[o + j] - m) - ml) * rs * gamma[k] + beta[k];   \
                    }                                                          \
                }                                                              \
            });                                                                \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status norm_grad_input_##SUF(const T *gy, const T *x,            \
                                           const T *gamma, T *dx,              \
                                           const mg_norm_dims *d) {            \
        const double count = (double)(d->a * d->c);                            \
        MG_CPU_PAR_LOOP(                                                       \
            d->a * d->b * d->c, for (int64_t b = 0; b < d->b; b++), {          \
                T m, ml, rs;                                                   \
                double sh = 0, shx = 0;                                        \
                stats_##SUF(x, d, b, &m, &ml, &rs);                            \
                for (int64_t i = 0; i < d->a; i++) {                           \
                    const int64_t o = (i * d->b + b) * d->c;                   \
                    T ph[8] = {0}, phx[8] = {0};                               \
                    if (d->gamma_by_c)                                         \
                        h_sums_##SUF(gy + o, x + o, gamma, 1, d->c, m, ml, rs, \
                                     ph, phx);                                 \
                    else                                                       \
                        h_sums_##SUF(gy + o, x + o, gamma + b, 0, d->c, m, ml, \
                                     rs, ph, phx);                             \
                    sh += (double)(((ph[0] + ph[1]) + (ph[2] + ph[3])) +       \
                                   ((ph[4] + ph[5]) + (ph[6] + ph[7])));       \
                    shx += (double)(((phx[0] + phx[1]) + (phx[2] + phx[3])) +  \
                                    ((phx[4] + phx[5]) + (phx[6] + phx[7])));  \
                }                                                              \
                const T mh = (T)(sh / count), mhx = (T)(shx / count);          \
                for (int64_t i = 0; i < d->a; i++) {                           \
                    const int64_t o = (i * d->b + b) * d->c;                   \
                    for (int64_t j = 0; j < d->c; j++) {                       \
                        const T h = gy[o + j] * gamma[d->gamma_by_c ? j : b];  \
                        dx[o + j] =                                            \
                            rs * (h - mh - ((x[o + j] - m) - ml) * rs * mhx);  \
                    }                                                          \
                }                                                              \
            });                                                                \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status norm_grad_gamma_##SUF(const T *gy, const T *x, T *dg,     \
                                           const mg_norm_dims *d) {            \
        memset(dg, 0, (size_t)(d->gamma_by_c ? d->c : d->b) * sizeof(T));      \
        /* groups apart unless every group adds into the same dg[j] */         \
        MG_CPU_PAR_LOOP(                                                       \
            d->gamma_by_c ? 0 : d->a * d->b * d->c,                            \
            for (int64_t b = 0; b < d->b; b++), {                              \
                T m, ml, rs;                                                   \
                double acc = 0; /* batchnorm: this group's whole sum */        \
                stats_##SUF(x, d, b, &m, &ml, &rs);                            \
                for (int64_t i = 0; i < d->a; i++) {                           \
                    const int64_t o = (i * d->b + b) * d->c;                   \
                    if (d->gamma_by_c) {                                       \
                        for (int64_t j = 0; j < d->c; j++)                     \
                            dg[j] += gy[o + j] * (((x[o + j] - m) - ml) * rs); \
                        continue;                                              \
                    }                                                          \
                    T p[8] = {0};                                              \
                    int64_t j = 0;                                             \
                    for (; j + 8 <= d->c; j += 8)                              \
                        for (int k = 0; k < 8; k++)                            \
                            p[k] += gy[o + j + k] *                            \
                                    (((x[o + j + k] - m) - ml) * rs);          \
                    for (; j < d->c; j++)                                      \
                        p[j & 7] += gy[o + j] * (((x[o + j] - m) - ml) * rs);  \
                    acc += (double)(((p[0] + p[1]) + (p[2] + p[3])) +          \
                                    ((p[4] + p[5]) + (p[6] + p[7])));          \
                }                                                              \
                if (!d->gamma_by_c) dg[b] = (T)acc;                            \
            });                                                                \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(NORM_DEF)

/* batchnorm and layernorm: (x, gamma, beta) */
mg_status mgi_cpu_norm(const mg_kargs *ka) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(ka, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, norm_fwd,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->in[2].data, ka->out.data, &d);
}

/* (gy, x, gamma) -> dx */
mg_status mgi_cpu_norm_grad_input(const mg_kargs *ka) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(ka, &ka->in[1].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, norm_grad_input,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->in[2].data, ka->out.data, &d);
}

/* (gy, x) -> dgamma */
mg_status mgi_cpu_norm_grad_gamma(const mg_kargs *ka) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(ka, &ka->in[1].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, norm_grad_gamma,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->out.data, &d);
}
