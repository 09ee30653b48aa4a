/*
 * cmd_lce.c - mg-bench lce: a language model's head and loss, h [N, D]
 * (an input) through w [V, D] to the mean cross-entropy against labels,
 * and the gradients of h and w, built two ways and compiled without
 * checkpointing:
 *   fused    mg_linear_cross_entropy(h, w, labels, chunk) (issue 46 item 3)
 *   unfused  mg_cross_entropy(mg_matmul(h, w, 0, 1), labels)
 * For each: the planner's predicted peak and the pool's measured peak
 * (bytes beyond the caller's h, w, labels, loss and gradients, which are
 * bound), the largest tensor of the graph, and the median time of --repeat
 * forward+backward steps after one untimed warm-up; the two builds of one
 * vocabulary run interleaved (step k of each, then step k + 1), so that
 * load from other processes falls on both. Public API only.
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct lce_opts {
    long rows, dim, repeat;
    long chunk[BENCH_MAX_LIST]; /* 0: the op's default; -1: unfused */
    int n_chunk;
    long vocab[BENCH_MAX_LIST];
    int n_vocab;
} lce_opts;

typedef struct lce_case {
    long chunk;
    mg_graph *g;
    mg_plan *p;
    mg_exec *ex;
    mg_binding b[6];
    size_t predicted, measured, largest;
    double *ms;
} lce_case;

/* The buffers both builds of one vocabulary read and write. */
typedef struct lce_bufs {
    float *h, *w, *gh, *gw, loss;
    int32_t *lab;
} lce_bufs;

static int lce_prepare(const lce_opts *o, long v, lce_bufs *m, lce_case *c) {
    c->g = mg_graph_new();
    mg_graph *g = c->g;
    if (!g) return bench_fail("mg_graph_new", MG_ERR_NOMEM);
    const int64_t hs[2] = {o->rows, o->dim}, ws[2] = {v, o->dim},
                  ls[1] = {o->rows};
    mg_tensor h = mg_input(g, "h", MG_F32, 2, hs);
    mg_tensor w = mg_param(g, "w", MG_F32, 2, ws);
    mg_tensor lab = mg_input(g, "labels", MG_I32, 1, ls);
    mg_tensor loss = c->chunk >= 0
                         ? mg_linear_cross_entropy(g, h, w, lab, c->chunk)
                         : mg_cross_entropy(g, mg_matmul(g, h, w, 0, 1), lab);
    if (loss == MG_NO_TENSOR)
        return bench_fail("building the loss", bench_builder_status());
    const mg_tensor wrt[2] = {h, w};
    mg_tensor gr[2];
    mg_status s = mg_gradients(g, &loss, 1, NULL, wrt, 2, NULL, gr);
    if (s != MG_OK) return bench_fail("mg_gradients", s);
    c->largest = 0;
    for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++)
        if (mg_tensor_nbytes(g, t) > c->largest)
            c->largest = mg_tensor_nbytes(g, t);
    const mg_tensor outs[3] = {loss, gr[0], gr[1]};
    s = mg_plan_compile(g, outs, 3, NULL, &c->p);
    if (s != MG_OK) return bench_fail("mg_plan_compile", s);
    const mg_binding b[6] = {{h, m->h},        {w, m->w},      {lab, m->lab},
                             {loss, &m->loss}, {gr[0], m->gh}, {gr[1], m->gw}};
    memcpy(c->b, b, sizeof b);
    c->predicted = mg_plan_predicted_peak(c->p, c->b, 6);
    s = mg_exec_new(NULL, &c->ex);
    if (s != MG_OK) return bench_fail("mg_exec_new", s);
    c->ms = malloc((size_t)o->repeat * sizeof *c->ms);
    if (!c->ms) return bench_fail("malloc", MG_ERR_NOMEM);
    return 0;
}

static void lce_case_free(lce_case *c) {
    free(c->ms);
    if (c->ex) mg_exec_free(c->ex);
    mg_plan_free(c->p);
    mg_graph_free(c->g);
    memset(c, 0, sizeof *c);
}

static int lce_vocab(const lce_opts *o, long v) {
    const size_t nh = (size_t)(o->rows * o->dim), nw = (size_t)(v * o->dim);
    lce_bufs m = {0};
    m.h = malloc(nh * sizeof *m.h);
    m.gh = malloc(nh * sizeof *m.gh);
    m.w = malloc(nw * sizeof *m.w);
    m.gw = malloc(nw * sizeof *m.gw);
    m.lab = malloc((size_t)o->rows * sizeof *m.lab);
    lce_case c[BENCH_MAX_LIST + 1];
    memset(c, 0, sizeof c);
    int rc = 0, n = 0;
    if (!m.h || !m.gh || !m.w || !m.gw || !m.lab) {
        rc = bench_fail("malloc", MG_ERR_NOMEM);
        goto done;
    }
    for (size_t i = 0; i < nh; i++) m.h[i] = (float)sin(0.37 * (double)i);
    for (size_t i = 0; i < nw; i++)
        m.w[i] = 0.1f * (float)cos(0.11 * (double)i);
    for (long i = 0; i < o->rows; i++) m.lab[i] = (int32_t)((i * 7919) % v);
    for (n = 0; n < o->n_chunk; n++) {
        c[n].chunk = o->chunk[n];
        rc = lce_prepare(o, v, &m, &c[n]);
        if (rc) {
            n++;
            goto done;
        }
    }
    /* a warm-up step each (untimed), then the timed steps interleaved */
    for (long k = -1; k < o->repeat; k++)
        for (int i = 0; i < n; i++) {
            if (k < 0) mg_exec_pool_reset_peak(c[i].ex);
            const double t0 = bench_now_ms();
            mg_status s = mg_exec_run(c[i].ex, c[i].p, c[i].b, 6, 1);
            if (s != MG_OK) {
                rc = bench_fail("mg_exec_run", s);
                goto done;
            }
            if (k >= 0) c[i].ms[k] = bench_now_ms() - t0;
            if (k < 0) {
                mg_pool_stats st;
                mg_exec_pool_stats(c[i].ex, &st);
                c[i].measured = st.peak_bytes_in_use;
            }
        }
    for (int i = 0; i < n; i++) {
        char name[32];
        if (c[i].chunk < 0) snprintf(name, sizeof name, "unfused");
        else if (c[i].chunk == 0) snprintf(name, sizeof name, "fused/default");
        else snprintf(name, sizeof name, "fused/%ld", c[i].chunk);
        printf("%-14s %6ld %5ld %7ld %12.1f %12.1f %12.1f %10.1f\n", name,
               o->rows, o->dim, v, bench_mib(c[i].predicted),
               bench_mib(c[i].measured), bench_mib(c[i].largest),
               bench_median(c[i].ms, (int)o->repeat));
    }
    fflush(stdout);
done:
    for (int i = 0; i < n; i++) lce_case_free(&c[i]);
    free(m.h), free(m.gh), free(m.w), free(m.gw), free(m.lab);
    return rc;
}

/* "a,b,c" into out (at most BENCH_MAX_LIST), each in [lo, hi]. */
static int lce_list(const char *s, long lo, long hi, long *out, int *n) {
    char buf[512];
    if (strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n == BENCH_MAX_LIST || !bench_long_parse(tok, lo, hi, &out[*n]))
            return 0;
        (*n)++;
    }
    return *n > 0;
}

int bench_cmd_lce(int argc, char **argv) {
    lce_opts o = {.rows = 1024, .dim = 256, .repeat = 3};
    o.n_chunk = 2, o.chunk[0] = -1, o.chunk[1] = 0;
    o.n_vocab = 2, o.vocab[0] = 8192, o.vocab[1] = 50257;
    for (int i = 0; i < argc; i += 2) {
        const char *opt, *value;
        int rc = bench_opt_next(argc, argv, i, NULL, &opt, &value);
        if (rc != BENCH_OPT_OWN) return rc == BENCH_OPT_DONE ? 2 : rc;
        long *dst = !strcmp(opt, "--rows")     ? &o.rows
                    : !strcmp(opt, "--dim")    ? &o.dim
                    : !strcmp(opt, "--repeat") ? &o.repeat
                                               : NULL;
        if (dst) {
            if (!bench_long_parse(value, 1, 1L << 24, dst))
                return bench_usage_error("lce: bad %s %s", opt, value);
        } else if (!strcmp(opt, "--vocab")) {
            if (!lce_list(value, 1, 1L << 24, o.vocab, &o.n_vocab))
                return bench_usage_error("lce: bad --vocab %s", value);
        } else if (!strcmp(opt, "--chunks")) {
            if (!lce_list(value, -1, 1L << 24, o.chunk, &o.n_chunk))
                return bench_usage_error("lce: bad --chunks %s", value);
        } else {
            return bench_usage_error("lce: unknown option %s", opt);
        }
    }
    char blas[128];
    bench_blas_info(blas, sizeof blas);
    printf("# mg-bench lce: f32, no checkpointing; %s\n", blas);
    printf("# peak: pool bytes beyond the bound h, w, labels, loss and "
           "gradients, predicted by the plan and measured in the first "
           "step;\n# median of %ld interleaved steps (forward and backward) "
           "after one warm-up\n",
           o.repeat);
    printf("%-14s %6s %5s %7s %12s %12s %12s %10s\n", "head", "N", "D", "V",
           "pred_MiB", "meas_MiB", "largest_MiB", "median_ms");
    for (int i = 0; i < o.n_vocab; i++) {
        int rc = lce_vocab(&o, o.vocab[i]);
        if (rc) return rc;
    }
    return 0;
}
