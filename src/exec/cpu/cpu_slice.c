/*
 * cpu_slice.c - slice, pad and concat, which all copy one box of elements
 * from a dense source into a dense destination at some corner. They move
 * bytes, not values, so one code path serves every dtype.
 */
#include "cpu_kernels.h"

#include <string.h>

/* Copies the box of shape box->shape from src at src_at to dst at dst_at
 * (NULL: the origin). Coalescing turns runs that are contiguous in both
 * tensors into one memcpy. */
static void copy_box(const mg_kbuf *src, const int64_t *src_at,
                     const mg_kbuf *dst, const int64_t *dst_at,
                     const mg_tdesc *box) {
    const size_t es = mg_dtype_size(dst->d.dtype);
    int64_t base[2];
    mg_layout l;
    mg_layout_box(&l, base, &src->d, src_at, &dst->d, dst_at, box);
    mg_layout_coalesce(&l);
    const int last = l.ndim - 1;
    const int64_t n = l.shape[last], rows = mg_layout_rows(&l);
    const int64_t s1 = l.stride[0][last], d1 = l.stride[1][last];
    int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};
    for (int64_t r = 0; r < rows; r++) {
        const char *s =
            (const char *)src->data + (size_t)(base[0] + off[0]) * es;
        char *d = (char *)dst->data + (size_t)(base[1] + off[1]) * es;
        if (s1 == 1 && d1 == 1) {
            memcpy(d, s, (size_t)n * es);
        } else { /* a box one element wide along x's last axis */
            for (int64_t i = 0; i < n; i++)
                memcpy(d + (size_t)(i * d1) * es, s + (size_t)(i * s1) * es,
                       es);
        }
        mg_layout_next(&l, idx, off);
    }
}

mg_status mgi_cpu_slice(const mg_kargs *ka) {
    copy_box(&ka->in[0], ka->attrs->start, &ka->out, NULL, &ka->out.d);
    return MG_OK;
}

mg_status mgi_cpu_pad(const mg_kargs *ka) {
    memset(ka->out.data, 0, mgi_tdesc_nbytes(&ka->out.d));
    copy_box(&ka->in[0], NULL, &ka->out, ka->attrs->start, &ka->in[0].d);
    return MG_OK;
}

mg_status mgi_cpu_concat(const mg_kargs *ka) {
    int64_t at[MG_MAX_DIMS];
    mg_status s = mg_concat_corner(ka, at);
    if (s != MG_OK) return s;
    copy_box(&ka->in[0], NULL, &ka->out, NULL, &ka->in[0].d);
    copy_box(&ka->in[1], NULL, &ka->out, at, &ka->in[1].d);
    return MG_OK;
}
