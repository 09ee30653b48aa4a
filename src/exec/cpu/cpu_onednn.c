/*
 * cpu_onednn.c - conv2d and its two gradient ops, and max and average
 * pooling and their gradients, through oneDNN's primitives (issue 14),
 * where the library was built with oneDNN; the im2col path of cpu_conv.c
 * and the loops of cpu_pool.c run otherwise, for f64, and for a geometry
 * oneDNN refuses.
 *
 * memgrad's tensors stay plain NCHW (weights OIHW) between ops. oneDNN's
 * fastest kernels want blocked layouts (nChw16c), so by default each op
 * lets the primitive choose its layouts and reorders its operands in and
 * its result out inside the op; the reordered copies and oneDNN's
 * scratchpad (scratchpad_mode user) all live in the op's workspace, lent
 * from memgrad's pool and counted by the plan (the plan asks the backend
 * table for it, schedule.c), so no memory is allocated behind the pool's
 * back. MG_CONV=onednn-plain keeps the primitive on plain layouts (no
 * reorders, slower kernels); MG_CONV=im2col turns oneDNN off.
 *
 * Pooling stays on plain NCHW in and out (MG_POOL=loops turns oneDNN
 * off). By default a pool takes oneDNN only where oneDNN has a JIT kernel
 * for plain NCHW (jit:avx512_core has; on an AVX2 machine oneDNN 2.6 runs
 * its simple_nchw reference loops, 2 to 5 times slower than cpu_pool.c's
 * there: bench/results/pool-onednn*.txt); MG_POOL=onednn takes it
 * whatever the implementation. Max pooling and oneDNN agree on the element a
 * window picks: the first maximum in row-major window order, never padding
 * (test_onednn checks ties bit for bit). A NaN is the exception: memgrad's max
 * counts it as larger than any number, so that it propagates as in PyTorch,
 * while oneDNN's skips it; a max pool whose x holds a NaN therefore runs
 * the loops (od_has_nan, one read of x). oneDNN's include-padding
 * divisor is always KH * KW, so an average pool whose ceil_mode windows
 * reach past the end padding (where memgrad's divisor is smaller,
 * mg_pool2d_divisor) stays on the loops. The max-pool gradient adds the gy
 * of overlapping windows that share their argmax in oneDNN's order, not
 * the loops' output order: the same up to rounding, so by default a
 * max-pool gradient whose windows overlap runs the loops, as its compact
 * form does (od_pool_key_of).
 * max_pool2d_grad receives (gy, x), while oneDNN's max-pool backward wants
 * the forward's workspace (each window's argmax): the op runs the forward
 * training primitive on x into y and argmax scratch in its own workspace,
 * then the backward primitive.
 *
 * Primitives are created once per (op, geometry, path) and cached in the
 * executor (its CPU backend's context), never per step; a plan's compile
 * only asks their workspace size, remembered in a fixed table. A
 * recomputed convolution or pool therefore runs the same primitive on the
 * same inputs and gives the same bits.
 */
#include "cpu_kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Which convolution path MG_CONV asks for (read at each query, so that a
 * test can switch it with setenv between plans). */
int mgi_cpu_conv_path(void) {
    const char *e = getenv("MG_CONV");
    if (e && strcmp(e, "im2col") == 0) return MGI_CONV_IM2COL;
    if (e && strcmp(e, "onednn-plain") == 0) return MGI_CONV_ONEDNN_PLAIN;
    return MGI_CONV_ONEDNN;
}

/* Which pooling path MG_POOL asks for, read like MG_CONV. */
int mgi_cpu_pool_path(void) {
    const char *e = getenv("MG_POOL");
    if (e && strcmp(e, "loops") == 0) return MGI_POOL_LOOPS;
    if (e && strcmp(e, "onednn") == 0) return MGI_POOL_ONEDNN;
    return MGI_POOL_AUTO;
}

static bool od_is_conv(mg_op op) {
    return op == MG_OP_CONV2D || op == MG_OP_CONV2D_GRAD_INPUT ||
           op == MG_OP_CONV2D_GRAD_WEIGHT;
}

static bool od_is_pool(mg_op op) {
    return op == MG_OP_MAX_POOL2D || op == MG_OP_AVG_POOL2D ||
           op == MG_OP_MAX_POOL2D_GRAD || op == MG_OP_AVG_POOL2D_GRAD;
}

#ifndef MG_HAVE_ONEDNN

bool mgi_onednn_conv_available(void) { return false; }

bool mgi_onednn_conv_workspace(const mg_kargs *a, size_t *bytes) {
    (void)a, (void)bytes;
    return false;
}

mgi_onednn_cache *mgi_onednn_cache_new(void) { return NULL; }

void mgi_onednn_cache_free(mgi_onednn_cache *c) { (void)c; }

bool mgi_onednn_conv_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s) {
    (void)c, (void)a, (void)s;
    return false;
}

bool mgi_onednn_pool_workspace(const mg_kargs *a, size_t *bytes) {
    (void)a, (void)bytes, (void)od_is_conv, (void)od_is_pool;
    return false;
}

bool mgi_onednn_pool_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s) {
    (void)c, (void)a, (void)s;
    return false;
}

#else

#include "common/threads.h"

#include <dnnl.h>
#include <pthread.h>
#ifndef _OPENMP /* the thread count is oneDNN's own then: one size */
static int omp_get_max_threads(void) { return 1; }
static void omp_set_num_threads(int n) { (void)n; }
#endif

#define OD_ALIGN ((size_t)64)

/* An op's operands in the order of mg_kargs: in[0], in[1], out. */
enum { OD_NARGS = 3 };

typedef struct od_key {
    mg_op op;
    int path; /* MG_CONV's for convolutions, MG_POOL's for pools */
    int64_t n, c, h, w, o, oh, ow, groups;
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int ph1, pw1, cip; /* pools: end pads, count_include_pad */
} od_key;

typedef struct od_arg {
    int arg;                  /* DNNL_ARG_SRC, ... */
    dnnl_memory_desc_t user;  /* memgrad's plain layout */
    dnnl_memory_desc_t prim;  /* the primitive's */
    dnnl_primitive_t reorder; /* user -> prim (inputs), prim -> user (out) */
    size_t off;               /* of the reordered copy in the workspace */
} od_arg;

typedef struct od_entry {
    od_key key;
    bool ok; /* false: oneDNN refused this geometry; use im2col */
    dnnl_primitive_t prim;
    od_arg args[OD_NARGS];
    size_t scratch; /* bytes at the start of the workspace */
    size_t total;   /* workspace bytes, scratch and copies */
    /* max_pool2d_grad: the forward training primitive, which writes y and
     * the argmax workspace into the op's workspace at y_off and ws_off */
    dnnl_primitive_t fwd;
    dnnl_memory_desc_t y_md, ws_md;
    size_t y_off, ws_off;
    struct od_entry *next;
} od_entry;

static pthread_mutex_t od_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t od_engine;
static dnnl_stream_t od_stream;
static bool od_init_done, od_init_ok;

bool mgi_onednn_conv_available(void) { return true; }

static size_t od_round(size_t n) {
    return (n + OD_ALIGN - 1) / OD_ALIGN * OD_ALIGN;
}

static bool od_conv_key_of(const mg_kargs *a, od_key *k) {
    mg_conv_dims d = {0};
    if (a->out.d.dtype != MG_F32 || a->n_in != 2 ||
        a->in[0].d.dtype != MG_F32 || a->in[1].d.dtype != MG_F32)
        return false;
    /* mg_conv_dims_of_op writes a failure message for bad shapes; the
     * im2col path reports those, so ask it without a message buffer. */
    mg_kargs q = *a;
    q.why = NULL;
    q.why_len = 0;
    if (mg_conv_dims_of_op(&q, &d) != MG_OK) return false;
    /* field by field after a memset, so that the padding is zero too:
     * keys compare with memcmp */
    memset(k, 0, sizeof *k);
    k->op = a->op;
    k->path = mgi_cpu_conv_path();
    k->n = d.n, k->c = d.c, k->h = d.h, k->w = d.w;
    k->o = d.o, k->oh = d.oh, k->ow = d.ow, k->groups = d.groups;
    k->kh = d.kh, k->kw = d.kw, k->sh = d.sh, k->sw = d.sw;
    k->ph = d.ph, k->pw = d.pw, k->dh = d.dh, k->dw = d.dw;
    return k->path != MGI_CONV_IM2COL;
}

/* oneDNN's right padding: what makes its output size formula give o for
 * windows of k at stride s over n with left padding p; negative where the
 * last window stops short of x's end, more than memgrad's end padding
 * where a ceil_mode window overhangs it. */
static int64_t od_pad_r(int64_t o, int s, int k, int d, int64_t n, int p) {
    return (o - 1) * s + (int64_t)(k - 1) * d + 1 - n - p;
}

static bool od_pool_key_of(const mg_kargs *a, od_key *k) {
    const bool fwd = a->op == MG_OP_MAX_POOL2D || a->op == MG_OP_AVG_POOL2D;
    if (a->out.d.dtype != MG_F32 || a->in[0].d.dtype != MG_F32 ||
        (a->n_in > 1 && a->in[1].d.dtype != MG_F32))
        return false;
    mg_pool2d_dims d = {0};
    mg_kargs q = *a; /* as in od_conv_key_of: the loops report bad shapes */
    q.why = NULL;
    q.why_len = 0;
    const mg_tdesc *x = fwd ? &a->in[0].d : &a->out.d;
    const mg_tdesc *y = fwd ? &a->out.d : &a->in[0].d;
    if (mg_pool2d_dims_setup(&q, x, y, &d) != MG_OK) return false;
    memset(k, 0, sizeof *k);
    k->op = a->op;
    k->path = mgi_cpu_pool_path();
    k->n = x->shape[0], k->c = x->shape[1], k->h = d.h, k->w = d.w;
    k->o = k->c, k->oh = d.oh, k->ow = d.ow, k->groups = 1;
    k->kh = d.kh, k->kw = d.kw, k->sh = d.sh, k->sw = d.sw;
    k->ph = d.ph, k->pw = d.pw, k->dh = 1, k->dw = 1;
    k->ph1 = d.ph1, k->pw1 = d.pw1;
    const bool avg =
        a->op == MG_OP_AVG_POOL2D || a->op == MG_OP_AVG_POOL2D_GRAD;
    k->cip = avg && d.cip;
    /* oneDNN's include-padding divisor is KH * KW for every window, ours
     * the window clipped to the padded input: the same unless a window
     * overhangs the end padding (ceil_mode) */
    if (k->cip && (od_pad_r(k->oh, k->sh, k->kh, 1, k->h, k->ph) > k->ph1 ||
                   od_pad_r(k->ow, k->sw, k->kw, 1, k->w, k->pw) > k->pw1))
        return false;
    /* Where windows overlap, one element can take the gradient of several;
     * oneDNN's backward adds those in its own order, the loops and the
     * compact argmax reader (max_pool2d_grad_argmax) in output order. By
     * default the loops run it, so that compaction gives the same bits on
     * every host (MG_POOL=onednn still takes oneDNN). */
    if (a->op == MG_OP_MAX_POOL2D_GRAD && k->path == MGI_POOL_AUTO &&
        (k->sh < k->kh || k->sw < k->kw))
        return false;
    return k->path != MGI_POOL_LOOPS;
}

static bool od_key_of(const mg_kargs *a, od_key *k) {
    if (od_is_conv(a->op)) return od_conv_key_of(a, k);
    if (od_is_pool(a->op)) return od_pool_key_of(a, k);
    return false;
}

/* A reorder from src to dst with a user scratchpad; its scratchpad size is
 * added into *scratch as a maximum (reorders and the primitive run one
 * after another, so they share the scratch region). */
static bool od_reorder(const dnnl_memory_desc_t *src,
                       const dnnl_memory_desc_t *dst,
                       const_dnnl_primitive_attr_t attr, dnnl_primitive_t *out,
                       size_t *scratch) {
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_reorder_primitive_desc_create(&pd, src, od_engine, dst, od_engine,
                                           attr) != dnnl_success)
        return false;
    size_t sp = dnnl_memory_desc_get_size(
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    if (sp > *scratch) *scratch = sp;
    bool ok = dnnl_primitive_create(out, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* A convolution's memory descriptors: x, y and w as the primitive may
 * choose them (any layout on MGI_CONV_ONEDNN), their plain forms (NCHW,
 * OIHW or GOIHW), and its strides, dilations and paddings. */
typedef struct od_conv_md {
    dnnl_memory_desc_t x, y, w, xu, yu, wu;
    dnnl_dims_t st, dil, pl, pr;
} od_conv_md;

/* A primitive's operands in mg_kargs order: the plain descriptor of each,
 * the query for the primitive's own, and its DNNL_ARG. */
typedef struct od_operands {
    const dnnl_memory_desc_t *user[OD_NARGS];
    dnnl_query_t q[OD_NARGS];
    int args[OD_NARGS];
} od_operands;

static bool od_conv_md_init(const od_key *k, od_conv_md *m) {
    memset(m, 0, sizeof *m);
    const bool any = k->path == MGI_CONV_ONEDNN;
    const dnnl_format_tag_t act = any ? dnnl_format_tag_any : dnnl_nchw;
    /* Ungrouped weights as 4-D OIHW, not 5-D GOIHW with one group: the
     * same bytes, but oneDNN 2.6's jit_1x1 backward-data kernel refuses
     * grouped weights, and a 1x1 convolution's input gradient then took
     * the general jit:avx2 kernel, 2 to 3 times slower (resnet50). */
    const bool grouped = k->groups > 1;
    const int wnd = grouped ? 5 : 4;
    const dnnl_format_tag_t wplain = grouped ? dnnl_goihw : dnnl_oihw;
    const dnnl_format_tag_t wtag = any ? dnnl_format_tag_any : wplain;
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w};
    dnnl_dims_t yd = {k->n, k->o, k->oh, k->ow};
    dnnl_dims_t wd = {k->groups, k->o / k->groups, k->c / k->groups, k->kh,
                      k->kw};
    if (!grouped) memmove(wd, wd + 1, 4 * sizeof wd[0]);
    if (dnnl_memory_desc_init_by_tag(&m->x, 4, xd, dnnl_f32, act) ||
        dnnl_memory_desc_init_by_tag(&m->y, 4, yd, dnnl_f32, act) ||
        dnnl_memory_desc_init_by_tag(&m->w, wnd, wd, dnnl_f32, wtag) ||
        dnnl_memory_desc_init_by_tag(&m->xu, 4, xd, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&m->yu, 4, yd, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&m->wu, wnd, wd, dnnl_f32, wplain))
        return false;
    /* memgrad pads both sides alike; oneDNN's right padding is whatever
     * makes its output size formula give OH, OW: negative where the last
     * window stops short of x's edge (a 1x1 stride-2 shortcut on an even
     * size), which oneDNN accepts. */
    m->st[0] = k->sh, m->st[1] = k->sw;
    m->dil[0] = k->dh - 1, m->dil[1] = k->dw - 1;
    m->pl[0] = k->ph, m->pl[1] = k->pw;
    m->pr[0] = od_pad_r(k->oh, k->sh, k->kh, k->dh, k->h, k->ph);
    m->pr[1] = od_pad_r(k->ow, k->sw, k->kw, k->dw, k->w, k->pw);
    return true;
}

/* The primitive descriptor of k's op into *pd (the forward one, which a
 * backward one is hinted with, into *fpd unless it is *pd), and its
 * operands; the caller destroys both descriptors. */
static bool od_conv_pd(const od_key *k, od_conv_md *m,
                       const_dnnl_primitive_attr_t attr,
                       dnnl_primitive_desc_t *fpd, dnnl_primitive_desc_t *pd,
                       od_operands *o) {
    dnnl_convolution_desc_t fd, bd;
    bool ok;
    if (dnnl_dilated_convolution_forward_desc_init(
            &fd, dnnl_forward_training, dnnl_convolution_direct, &m->x, &m->w,
            NULL, &m->y, m->st, m->dil, m->pl, m->pr) != dnnl_success ||
        dnnl_primitive_desc_create(fpd, &fd, attr, od_engine, NULL) !=
            dnnl_success)
        return false;
    switch (k->op) {
    case MG_OP_CONV2D: /* (x, w) -> y */
        *pd = *fpd;
        *fpd = NULL;
        *o = (od_operands){
            {&m->xu, &m->wu, &m->yu},
            {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
            {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}};
        return true;
    case MG_OP_CONV2D_GRAD_INPUT: /* (gy, w) -> gx */
        *o = (od_operands){
            {&m->yu, &m->wu, &m->xu},
            {dnnl_query_diff_dst_md, dnnl_query_weights_md,
             dnnl_query_diff_src_md},
            {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}};
        ok = dnnl_dilated_convolution_backward_data_desc_init(
                 &bd, dnnl_convolution_direct, &m->x, &m->w, &m->y, m->st,
                 m->dil, m->pl, m->pr) == dnnl_success;
        break;
    case MG_OP_CONV2D_GRAD_WEIGHT: /* (gy, x) -> gw */
        *o = (od_operands){
            {&m->yu, &m->xu, &m->wu},
            {dnnl_query_diff_dst_md, dnnl_query_src_md,
             dnnl_query_diff_weights_md},
            {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS}};
        ok = dnnl_dilated_convolution_backward_weights_desc_init(
                 &bd, dnnl_convolution_direct, &m->x, &m->w, NULL, &m->y, m->st,
                 m->dil, m->pl, m->pr) == dnnl_success;
        break;
    default: return false;
    }
    /* a backward primitive, hinted with the forward one */
    return ok && dnnl_primitive_desc_create(pd, &bd, attr, od_engine, *fpd) ==
                     dnnl_success;
}

/* The primitive of pd into e, with a reorder for each operand whose
 * layout the primitive chose differently from the plain one (inputs into
 * its layout, the output back), and e's workspace: the scratchpad the
 * primitive and the reorders share, then the operands' copies. */
static bool od_conv_finish(od_entry *e, const_dnnl_primitive_desc_t pd,
                           const_dnnl_primitive_attr_t attr,
                           const od_operands *o) {
    size_t scratch = dnnl_memory_desc_get_size(
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    size_t copies = 0;
    bool ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    for (int i = 0; ok && i < OD_NARGS; i++) {
        od_arg *g = &e->args[i];
        g->arg = o->args[i];
        g->user = *o->user[i];
        g->prim = *dnnl_primitive_desc_query_md(pd, o->q[i], 0);
        if (dnnl_memory_desc_equal(&g->user, &g->prim)) continue;
        ok = i < 2
                 ? od_reorder(&g->user, &g->prim, attr, &g->reorder, &scratch)
                 : od_reorder(&g->prim, &g->user, attr, &g->reorder, &scratch);
        g->off = copies;
        copies += od_round(dnnl_memory_desc_get_size(&g->prim));
    }
    if (ok) {
        e->scratch = od_round(scratch);
        for (int i = 0; i < OD_NARGS; i++) e->args[i].off += e->scratch;
        e->total = e->scratch + copies;
    }
    return ok;
}

/* Build the convolution primitive (and reorders) for k into e; false if
 * oneDNN refuses the geometry. */
static bool od_build_conv(const od_key *k, od_entry *e) {
    od_conv_md m;
    if (!od_conv_md_init(k, &m)) return false;
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return false;
    bool ok = dnnl_primitive_attr_set_scratchpad_mode(
                  attr, dnnl_scratchpad_mode_user) == dnnl_success;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    od_operands o;
    ok = ok && od_conv_pd(k, &m, attr, &fpd, &pd, &o);
    ok = ok && od_conv_finish(e, pd, attr, &o);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* Whether oneDNN implements pd with a JIT kernel ("jit:avx2", ...), not a
 * reference loop ("simple_nchw:any", "ref:any"). */
static bool od_is_jit(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
               dnnl_success &&
           impl && strncmp(impl, "jit", 3) == 0;
}

/* Build the pooling primitive(s) for k into e, all on plain NCHW; false if
 * oneDNN refuses the geometry, or has only a reference kernel for it and
 * MG_POOL does not ask for oneDNN. */
static bool od_build_pool(const od_key *k, od_entry *e) {
    const bool is_max =
        k->op == MG_OP_MAX_POOL2D || k->op == MG_OP_MAX_POOL2D_GRAD;
    const bool fwd = k->op == MG_OP_MAX_POOL2D || k->op == MG_OP_AVG_POOL2D;
    const dnnl_alg_kind_t alg = is_max   ? dnnl_pooling_max
                                : k->cip ? dnnl_pooling_avg_include_padding
                                         : dnnl_pooling_avg_exclude_padding;
    dnnl_dims_t xd = {k->n, k->c, k->h, k->w};
    dnnl_dims_t yd = {k->n, k->c, k->oh, k->ow};
    dnnl_memory_desc_t x, y;
    if (dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, dnnl_nchw))
        return false;
    dnnl_dims_t st = {k->sh, k->sw}, ker = {k->kh, k->kw};
    dnnl_dims_t pl = {k->ph, k->pw};
    dnnl_dims_t pr = {od_pad_r(k->oh, k->sh, k->kh, 1, k->h, k->ph),
                      od_pad_r(k->ow, k->sw, k->kw, 1, k->w, k->pw)};
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return false;
    bool ok = dnnl_primitive_attr_set_scratchpad_mode(
                  attr, dnnl_scratchpad_mode_user) == dnnl_success;
    dnnl_pooling_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    /* a forward op needs no argmax, a backward one's hint is training */
    ok = ok && dnnl_pooling_forward_desc_init(
                   &fd, fwd ? dnnl_forward_inference : dnnl_forward_training,
                   alg, &x, &y, st, ker, pl, pr) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&fpd, &fd, attr, od_engine, NULL) ==
                   dnnl_success;
    size_t scratch = 0, extra = 0;
    if (ok && fwd) {
        pd = fpd;
        fpd = NULL;
        e->args[0] = (od_arg){.arg = DNNL_ARG_SRC, .user = x};
        e->args[1] = (od_arg){.arg = 0}; /* unused */
        e->args[2] = (od_arg){.arg = DNNL_ARG_DST, .user = y};
    } else if (ok) { /* (gy[, x]) -> gx */
        ok = dnnl_pooling_backward_desc_init(&bd, alg, &x, &y, st, ker, pl,
                                             pr) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &bd, attr, od_engine, fpd) ==
                 dnnl_success;
        e->args[0] = (od_arg){.arg = DNNL_ARG_DIFF_DST, .user = y};
        e->args[1] = (od_arg){.arg = DNNL_ARG_SRC, .user = x};
        e->args[2] = (od_arg){.arg = DNNL_ARG_DIFF_SRC, .user = x};
    }
    if (ok && is_max && !fwd) {
        /* y and the argmax workspace, after the scratchpad */
        e->y_md = y;
        e->ws_md =
            *dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
        e->y_off = 0;
        e->ws_off = od_round(dnnl_memory_desc_get_size(&y));
        extra = e->ws_off + od_round(dnnl_memory_desc_get_size(&e->ws_md));
        scratch = dnnl_memory_desc_get_size(
            dnnl_primitive_desc_query_md(fpd, dnnl_query_scratchpad_md, 0));
        ok = dnnl_primitive_create(&e->fwd, fpd) == dnnl_success;
    }
    /* by default only a JIT kernel: the loops beat oneDNN's reference */
    if (ok && k->path == MGI_POOL_AUTO)
        ok = od_is_jit(pd) && (!fpd || od_is_jit(fpd));
    if (ok) {
        size_t sp = dnnl_memory_desc_get_size(
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        if (sp > scratch) scratch = sp; /* the two run one after another */
        ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    for (int i = 0; i < OD_NARGS; i++) e->args[i].prim = e->args[i].user;
    if (ok) {
        e->scratch = od_round(scratch);
        e->y_off += e->scratch;
        e->ws_off += e->scratch;
        e->total = e->scratch + extra;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    dnnl_primitive_attr_destroy(attr);
    return ok;
}

static bool od_build(const od_key *k, od_entry *e) {
    return od_is_pool(k->op) ? od_build_pool(k, e) : od_build_conv(k, e);
}

static void od_entry_clear(od_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->fwd) dnnl_primitive_destroy(e->fwd);
    for (int i = 0; i < OD_NARGS; i++)
        if (e->args[i].reorder) dnnl_primitive_destroy(e->args[i].reorder);
    e->prim = e->fwd = NULL;
    for (int i = 0; i < OD_NARGS; i++) e->args[i].reorder = NULL;
}

static bool od_init(void) {
    pthread_mutex_lock(&od_lock);
    if (!od_init_done) {
        od_init_done = true;
        od_init_ok =
            dnnl_engine_create(&od_engine, dnnl_cpu, 0) == dnnl_success &&
            dnnl_stream_create(&od_stream, od_engine,
                               dnnl_stream_default_flags) == dnnl_success;
    }
    pthread_mutex_unlock(&od_lock);
    return od_init_ok;
}

/* Plan-time sizes: a fixed table (no allocation, so a plan's compile
 * allocates the same whatever was compiled before), keyed as the
 * executors' caches are; a full table only means building again. Each
 * size holds for runs on up to cap threads. */
#define OD_SIZES 1024
static struct od_size {
    od_key key;
    bool used, ok;
    int cap;
    size_t total;
} od_sizes[OD_SIZES];

static bool od_workspace(const mg_kargs *a, size_t *bytes) {
    od_key k;
    if (!od_key_of(a, &k) || !od_init()) return false;
    pthread_mutex_lock(&od_lock);
    int i = 0;
    for (; i < OD_SIZES && od_sizes[i].used; i++)
        if (memcmp(&od_sizes[i].key, &k, sizeof k) == 0) break;
    struct od_size found = i < OD_SIZES ? od_sizes[i] : (struct od_size){0};
    const int cur = omp_get_max_threads(), cap = mgi_threads_cap();
    /* a size taken under a lower cap (the thread count was raised past the
     * processor count since) is taken again: pools' scratchpads grow with
     * the threads */
    if (!found.used || found.cap < cap) {
        /* oneDNN sizes its scratchpad by the thread count the primitive is
         * built under, and a run may use more threads than this compile
         * has (mg_exec_options.num_threads, up to mgi_threads_cap()): take
         * the larger of the two sizes. */
        found =
            (struct od_size){.key = k, .used = true, .ok = true, .cap = cap};
        for (int t = cur;; t = cap) {
            od_entry e = {.key = k};
            omp_set_num_threads(t);
            found.ok = found.ok && od_build(&k, &e);
            if (e.total > found.total) found.total = e.total;
            od_entry_clear(&e);
            if (t == cap) break;
        }
        omp_set_num_threads(cur);
        if (i < OD_SIZES) od_sizes[i] = found;
    }
    pthread_mutex_unlock(&od_lock);
    if (found.ok) *bytes = found.total;
    return found.ok;
}

bool mgi_onednn_conv_workspace(const mg_kargs *a, size_t *bytes) {
    return od_is_conv(a->op) && od_workspace(a, bytes);
}

bool mgi_onednn_pool_workspace(const mg_kargs *a, size_t *bytes) {
    return od_is_pool(a->op) && od_workspace(a, bytes);
}

/* An executor's primitives, convolutions' and pools', built on first
 * use. */
typedef struct mgi_onednn_cache {
    od_entry *head;
} mgi_onednn_cache;

mgi_onednn_cache *mgi_onednn_cache_new(void) {
    return calloc(1, sizeof(mgi_onednn_cache));
}

void mgi_onednn_cache_free(mgi_onednn_cache *c) {
    if (!c) return;
    for (od_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        od_entry_clear(e);
        free(e);
    }
    free(c);
}

/* c's entry for a in *out, built on first use. False where a is not for
 * oneDNN (f64, MG_CONV=im2col, a geometry oneDNN refuses); true with *out
 * NULL when memory ran out, which the caller reports rather than switch
 * paths behind the plan's back. */
static bool od_lookup(mgi_onednn_cache *c, const mg_kargs *a,
                      const od_entry **out) {
    od_key k;
    *out = NULL;
    if (!od_key_of(a, &k) || !od_init()) return false;
    od_entry *e = c->head;
    while (e && memcmp(&e->key, &k, sizeof k) != 0) e = e->next;
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) return true;
        e->key = k;
        e->ok = od_build(&k, e);
        if (!e->ok) od_entry_clear(e); /* remember the refusal only */
        e->next = c->head;
        c->head = e;
    }
    *out = e;
    return e->ok;
}

/* A memory object over ptr with descriptor md (cheap: no allocation of
 * data; made per call since a memory object's handle is not thread-safe
 * to share). */
static bool od_mem(const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *m) {
    return dnnl_memory_create(m, md, od_engine, ptr) == dnnl_success;
}

static bool od_exec(dnnl_primitive_t p, dnnl_memory_t src, int src_arg,
                    dnnl_memory_t dst, int dst_arg, dnnl_memory_t sp) {
    dnnl_exec_arg_t ea[3] = {
        {src_arg, src}, {dst_arg, dst}, {DNNL_ARG_SCRATCHPAD, sp}};
    return dnnl_primitive_execute(p, od_stream, sp ? 3 : 2, ea) == dnnl_success;
}

bool mgi_onednn_conv_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s) {
    const od_entry *e;
    if (!c || !od_is_conv(a->op) || !od_lookup(c, a, &e)) return false;
    if (!e) {
        *s = mg_kernel_fail(a, MG_ERR_NOMEM,
                            "out of memory caching a oneDNN primitive");
        return true;
    }
    if (a->work_bytes < e->total) {
        *s = mg_kernel_fail(a, MG_ERR_INTERNAL,
                            "oneDNN conv needs %zu bytes of workspace, got %zu",
                            e->total, a->work_bytes);
        return true;
    }
    char *work = a->work;
    void *data[OD_NARGS] = {a->in[0].data, a->in[1].data, a->out.data};
    dnnl_memory_t user[OD_NARGS] = {0}, prim[OD_NARGS] = {0}, sp = NULL;
    /* oneDNN's scratchpad is a plain byte buffer at the workspace's start;
     * none is passed where the primitive and reorders need none. */
    bool ok = true;
    if (e->scratch) {
        dnnl_memory_desc_t spd;
        const dnnl_dims_t n = {(dnnl_dim_t)e->scratch};
        ok = dnnl_memory_desc_init_by_tag(&spd, 1, n, dnnl_u8, dnnl_a) ==
                 dnnl_success &&
             od_mem(&spd, work, &sp);
    }
    for (int i = 0; ok && i < OD_NARGS; i++) {
        const od_arg *g = &e->args[i];
        ok = od_mem(&g->user, data[i], &user[i]);
        if (ok && g->reorder) ok = od_mem(&g->prim, work + g->off, &prim[i]);
    }
    /* operands in, the op, the result out; all on the one stream */
    for (int i = 0; ok && i < 2; i++)
        if (e->args[i].reorder)
            ok = od_exec(e->args[i].reorder, user[i], DNNL_ARG_FROM, prim[i],
                         DNNL_ARG_TO, sp);
    if (ok) {
        dnnl_exec_arg_t ea[OD_NARGS + 1];
        for (int i = 0; i < OD_NARGS; i++)
            ea[i] = (dnnl_exec_arg_t){e->args[i].arg,
                                      e->args[i].reorder ? prim[i] : user[i]};
        ea[OD_NARGS] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sp};
        ok = dnnl_primitive_execute(e->prim, od_stream, OD_NARGS + (sp != NULL),
                                    ea) == dnnl_success;
    }
    if (ok && e->args[2].reorder)
        ok = od_exec(e->args[2].reorder, prim[2], DNNL_ARG_FROM, user[2],
                     DNNL_ARG_TO, sp);
    if (ok) ok = dnnl_stream_wait(od_stream) == dnnl_success;
    for (int i = 0; i < OD_NARGS; i++) {
        if (user[i]) dnnl_memory_destroy(user[i]);
        if (prim[i]) dnnl_memory_destroy(prim[i]);
    }
    if (sp) dnnl_memory_destroy(sp);
    *s = ok ? MG_OK
            : mg_kernel_fail(a, MG_ERR_INTERNAL, "oneDNN failed to run %s",
                             mgi_op_str(a->op));
    return true;
}

/* Whether x's n elements hold a NaN (an OR of flags: the same answer on
 * any thread count). The simd pragmas vectorise it (GCC's -O2 does not),
 * which makes it 3 times faster: 0.9 ms for the ResNet stem's 6.4M floats
 * on one thread, against 2.6 to 9 ms for oneDNN's max pool of them
 * (bench/pool_onednn). */
static bool od_has_nan(const float *x, int64_t n) {
    int bad = 0;
#ifdef _OPENMP
    if (mgi_cpu_par(n)) {
#pragma omp parallel for simd schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < n; i++) bad |= x[i] != x[i];
        return bad;
    }
#endif
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; i++) bad |= x[i] != x[i];
    return bad;
}

/* A pool: the op's operands are plain, so they go to the primitive as
 * they are; only oneDNN's scratchpad and, for max_pool2d_grad, the
 * forward's y and argmax come from the workspace. */
bool mgi_onednn_pool_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s) {
    const od_entry *e;
    if (!c || !od_is_pool(a->op) || !od_lookup(c, a, &e)) return false;
    /* a NaN must win a max: the loops' rule, not oneDNN's */
    if (e && (a->op == MG_OP_MAX_POOL2D || a->op == MG_OP_MAX_POOL2D_GRAD)) {
        const mg_tdesc *xd =
            a->op == MG_OP_MAX_POOL2D ? &a->in[0].d : &a->out.d;
        if (od_has_nan(a->op == MG_OP_MAX_POOL2D ? a->in[0].data
                                                 : a->in[1].data,
                       mgi_tdesc_numel(xd)))
            return false;
    }
    if (!e) {
        *s = mg_kernel_fail(a, MG_ERR_NOMEM,
                            "out of memory caching a oneDNN primitive");
        return true;
    }
    if (a->work_bytes < e->total) {
        *s = mg_kernel_fail(a, MG_ERR_INTERNAL,
                            "oneDNN %s needs %zu bytes of workspace, got %zu",
                            mgi_op_str(a->op), e->total, a->work_bytes);
        return true;
    }
    char *work = a->work;
    dnnl_memory_t in0 = NULL, in1 = NULL, out = NULL, y = NULL, ws = NULL;
    dnnl_memory_t sp = NULL;
    bool ok = true;
    if (e->scratch) {
        dnnl_memory_desc_t spd;
        const dnnl_dims_t n = {(dnnl_dim_t)e->scratch};
        ok = dnnl_memory_desc_init_by_tag(&spd, 1, n, dnnl_u8, dnnl_a) ==
                 dnnl_success &&
             od_mem(&spd, work, &sp);
    }
    ok = ok && od_mem(&e->args[0].user, a->in[0].data, &in0) &&
         od_mem(&e->args[2].user, a->out.data, &out);
    if (ok && e->fwd) {
        /* max_pool2d_grad: x through the forward, for its argmax */
        ok = od_mem(&e->args[1].user, a->in[1].data, &in1) &&
             od_mem(&e->y_md, work + e->y_off, &y) &&
             od_mem(&e->ws_md, work + e->ws_off, &ws);
        dnnl_exec_arg_t fa[4] = {{DNNL_ARG_SRC, in1},
                                 {DNNL_ARG_DST, y},
                                 {DNNL_ARG_WORKSPACE, ws},
                                 {DNNL_ARG_SCRATCHPAD, sp}};
        ok = ok && dnnl_primitive_execute(e->fwd, od_stream, sp ? 4 : 3, fa) ==
                       dnnl_success;
    }
    if (ok) {
        dnnl_exec_arg_t ea[4] = {{e->args[0].arg, in0}, {e->args[2].arg, out}};
        int n = 2;
        if (ws) ea[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, ws};
        if (sp) ea[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sp};
        ok = dnnl_primitive_execute(e->prim, od_stream, n, ea) == dnnl_success;
    }
    if (ok) ok = dnnl_stream_wait(od_stream) == dnnl_success;
    dnnl_memory_t all[6] = {in0, in1, out, y, ws, sp};
    for (int i = 0; i < 6; i++)
        if (all[i]) dnnl_memory_destroy(all[i]);
    *s = ok ? MG_OK
            : mg_kernel_fail(a, MG_ERR_INTERNAL, "oneDNN failed to run %s",
                             mgi_op_str(a->op));
    return true;
}

#endif
