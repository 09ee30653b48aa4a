/*
 * cpu_reduce.c - sum and mean over a set of axes, and broadcast_to, their
 * adjoint. Each output is accumulated in its own dtype in input index
 * order (serially by one walk over the input, or one output per thread,
 * which adds the same terms in the same order; a reduced last dim's rows
 * are summed with mgi_cpu_sum8 and added whole), except a reduction to one
 * value, which takes the fixed split of cpu_kernels.h: bits never depend
 * on the thread count.
 */
#include "common/group_reduce.h" /* mg_reduce_axes */
#include "cpu_kernels.h"

#define REDUCE_DEF(T, SUF)                                                     \
    /* everything into one value: the fixed split of cpu_kernels.h */          \
    static mg_status reduce_all_##SUF(const T *x, T *y, const mg_layout *l,    \
                                      int64_t mean_of) {                       \
        const int64_t n = mg_layout_rows(l) * l->shape[l->ndim - 1];           \
        const int64_t ch = mgi_split_chunk(n, 16384);                          \
        const int64_t nch = (n + ch - 1) / ch;                                 \
        T part[MG_SPLIT_MAX];                                                  \
        MG_CPU_PAR_LOOP(n, for (int64_t k = 0; k < nch; k++), {                \
            const int64_t hi = (k + 1) * ch < n ? (k + 1) * ch : n;            \
            part[k] = mgi_cpu_sum8_##SUF(x + k * ch, hi - k * ch);             \
        });                                                                    \
        T s = 0;                                                               \
        for (int64_t k = 0; k < nch; k++) s += part[k];                        \
        y[0] = mean_of ? s / (T)mean_of : s;                                   \
        return MG_OK;                                                          \
    }                                                                          \
    /* One output per iteration, its terms added in the order the serial       \
     * walk below adds them (input index order: the reduced coordinates        \
     * lexicographically), so the bits match it at any thread count. */        \
    static mg_status reduce_par_##SUF(const T *x, T *y, int64_t ny,            \
                                      const mg_layout *l, int64_t mean_of) {   \
        int kept[MG_MAX_DIMS], red[MG_MAX_DIMS], nk = 0, nr = 0;               \
        int64_t in_stride[MG_MAX_DIMS], step = 1, nred = 1;                    \
        for (int i = l->ndim - 1; i >= 0; i--) {                               \
            in_stride[i] = step;                                               \
            step *= l->shape[i];                                               \
        }                                                                      \
        for (int i = 0; i < l->ndim; i++) {                                    \
            if (l->stride[0][i] == 0) {                                        \
                red[nr++] = i;                                                 \
                nred *= l->shape[i];                                           \
            } else {                                                           \
                kept[nk++] = i;                                                \
            }                                                                  \
        }                                                                      \
        const int64_t nl = nr ? l->shape[red[nr - 1]] : 1;                     \
        const int64_t sl = nr ? in_stride[red[nr - 1]] : 0;                    \
        /* the serial walk sums a reduced last dim with mgi_cpu_sum8 */        \
        const bool inner_red = nr && red[nr - 1] == l->ndim - 1;               \
        MG_CPU_PAR_LOOP(step, for (int64_t o = 0; o < ny; o++), {              \
            int64_t base = 0, rem = o;                                         \
            for (int j = nk - 1; j >= 0; j--) {                                \
                base += rem % l->shape[kept[j]] * in_stride[kept[j]];          \
                rem /= l->shape[kept[j]];                                      \
            }                                                                  \
            T acc = 0;                                                         \
            for (int64_t q = 0; q < nred / nl; q++) {                          \
                int64_t off = base, rq = q;                                    \
                for (int j = nr - 2; j >= 0; j--) {                            \
                    off += rq % l->shape[red[j]] * in_stride[red[j]];          \
                    rq /= l->shape[red[j]];                                    \
                }                                                              \
                if (inner_red) acc += mgi_cpu_sum8_##SUF(x + off, nl);         \
                else                                                           \
                    for (int64_t i = 0; i < nl; i++) acc += x[off + i * sl];   \
            }                                                                  \
            y[o] = mean_of ? acc / (T)mean_of : acc;                           \
        });                                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status reduce_##SUF(const T *x, T *y, int64_t ny,                \
                                  const mg_layout *l, int64_t mean_of) {       \
        if (ny == 1) return reduce_all_##SUF(x, y, l, mean_of);                \
        if (mgi_cpu_par(mg_layout_rows(l) * l->shape[l->ndim - 1]))            \
            return reduce_par_##SUF(x, y, ny, l, mean_of);                     \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                       \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->shape[last], rows = mg_layout_rows(l);            \
        const int64_t sy = l->stride[0][last];                                 \
        for (int64_t i = 0; i < ny; i++) y[i] = 0;                             \
        for (int64_t r = 0; r < rows; r++, x += n) {                           \
            T *py = y + off[0];                                                \
            if (sy == 0) {                                                     \
                *py += mgi_cpu_sum8_##SUF(x, n);                               \
            } else {                                                           \
                for (int64_t i = 0; i < n; i++) py[i * sy] += x[i];            \
            }                                                                  \
            mg_layout_next(l, idx, off);                                       \
        }                                                                      \
        if (mean_of) {                                                         \
            const T count = (T)mean_of;                                        \
            for (int64_t i = 0; i < ny; i++) y[i] /= count;                    \
        }                                                                      \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(REDUCE_DEF)

/* mean: divide by the number of elements summed into each output. */
static mg_status reduce(const mg_kargs *ka, int mean) {
    const mg_tdesc *dx = &ka->in[0].d;
    const mg_attrs *at = ka->attrs;
    const int64_t nx = mgi_tdesc_numel(dx), ny = mgi_tdesc_numel(&ka->out.d);
    bool reduced[MG_MAX_DIMS];
    const int bad = mg_reduce_axes(dx, at, ny, reduced);
    if (bad >= 0)
        return mg_kernel_fail(ka, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", at->axes[bad],
                              dx->ndim);
    /* Domain: the input; slot 0: where each input element lands in y. */
    mg_layout l;
    mg_layout_init(&l, dx);
    int64_t step = 1;
    for (int i = dx->ndim - 1; i >= 0; i--) {
        l.stride[0][i] = reduced[i] ? 0 : step;
        if (!reduced[i]) step *= dx->shape[i];
    }
    if (step != ny)
        return mg_kernel_fail(ka, MG_ERR_SHAPE,
                              "reduced input has %lld elements, output %lld",
                              (long long)step, (long long)ny);
    mg_layout_coalesce(&l);
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, reduce, ka->in[0].data,
                           ka->out.data, ny, &l, mean ? nx / ny : 0);
}

mg_status mgi_cpu_sum(const mg_kargs *ka) { return reduce(ka, 0); }

mg_status mgi_cpu_mean(const mg_kargs *ka) { return reduce(ka, 1); }

/* broadcast_to, the adjoint of sum: a gather with stride 0 on repeated
 * dims. */
mg_status mgi_cpu_broadcast_to(const mg_kargs *ka) {
    mg_layout l;
    mg_layout_init(&l, &ka->out.d);
    mg_layout_broadcast(&l, 0, &ka->in[0].d);
    return mgi_cpu_gather(ka, &l);
}
