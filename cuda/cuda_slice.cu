/*
 * cuda_slice.cu - slice, pad and concat, which all copy one box of elements
 * from a dense source into a dense destination at some corner, through the
 * box layout the CPU uses (mg_layout_box) and cu_move.
 */
#include "cuda_internal.h"

/* The box of shape `box` from src at src_at to dst at dst_at (NULL: 0). */
static mg_status copy_box(cu_ctx *c, const mg_kargs *a, const mg_kbuf *src,
                          const int64_t *src_at, const mg_kbuf *dst,
                          const int64_t *dst_at, const mg_tdesc *box) {
    int64_t base[2];
    mg_layout ml;
    mg_layout_box(&ml, base, &src->d, src_at, &dst->d, dst_at, box);
    if (mgi_tdesc_numel(box) == 0) return MG_OK;
    return cu_move(c, a, src->data, dst->data, &ml, base[0], base[1]);
}

mg_status cu_slice(cu_ctx *c, const mg_kargs *a) {
    return copy_box(c, a, &a->in[0], a->attrs->start, &a->out, NULL, &a->out.d);
}

mg_status cu_pad(cu_ctx *c, const mg_kargs *a) {
    mg_status s = cu_check(
        a,
        cudaMemsetAsync(a->out.data, 0, mgi_tdesc_nbytes(&a->out.d), c->stream),
        "pad memset");
    if (s != MG_OK) return s;
    return copy_box(c, a, &a->in[0], NULL, &a->out, a->attrs->start,
                    &a->in[0].d);
}

mg_status cu_concat(cu_ctx *c, const mg_kargs *a) {
    int64_t at[MG_MAX_DIMS];
    mg_status s = mg_concat_corner(a, at);
    if (s != MG_OK) return s;
    s = copy_box(c, a, &a->in[0], NULL, &a->out, NULL, &a->in[0].d);
    if (s != MG_OK) return s;
    return copy_box(c, a, &a->in[1], NULL, &a->out, at, &a->in[1].d);
}
