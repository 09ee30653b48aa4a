/*
 * bench/offload/offload_gpt.c - issue 51's CPU bench: the GPT builder's
 * training step at a budget of a fraction (0.3) of policy none's pool
 * peak in the budget's measure, planned by MG_CKPT_BUDGET with
 * recomputation only and with offload allowed (CPU host tier), each
 * step's predicted time (forward, backward and recomputed flops at the
 * measured compute rate, plus the copies' exposed seconds at the measured
 * host bandwidth) beside its measured median, and the predicted and
 * measured pool and host peaks. On a CPU the host tier saves no memory
 * anywhere (docs/offload.md): the run shows the planner's choice and its
 * predictions, not a speed-up.
 *
 *   offload_gpt LAYERS D_MODEL SEQ BATCH VOCAB FRACTION REPEAT
 */
#include "memgrad.h"
#include "memgrad_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CHECK(x)                                                               \
    do {                                                                       \
        if ((x) != MG_OK) {                                                    \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                 \
                    mg_last_error());                                          \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef struct cfg {
    int layers, d, seq, batch, vocab, repeat;
} cfg;

typedef struct row {
    const char *name;
    int ok;
    size_t budget_peak, predicted, measured, host_pred, host_meas;
    int n_off;
    double flops, rflops, exposed, t_pred, t_meas;
    /* the prepared step */
    mg_model *m;
    mg_plan *p;
    mg_exec *ex;
    mg_binding *b;
    int nb;
    void **w, **gr;
    void *in, *tg;
    mg_tensor *outs, *off;
    double loss;
    double *t; /* per round */
} row;

/* Build, differentiate under ck (NULL: none), compile (offload as the
 * policy chose, at bw and rate) and warm up. */
static void prepare(const cfg *c, const mg_checkpoints *ck, double bw,
                    double rate, row *r) {
    mg_model *m = mg_model_gpt(c->layers, c->d, 4, c->seq, c->batch, c->vocab,
                               0.0, MG_F32, 7);
    if (!m) CHECK(mg_last_status());
    mg_status st = mg_model_gradients(m, ck);
    if (st == MG_ERR_NOMEM) {
        r->ok = 0;
        fprintf(stderr, "%s: %s\n", r->name, mg_last_error());
        mg_model_free(m);
        return;
    }
    CHECK(st);
    r->ok = 1;
    r->m = m;
    const int np = m->n_params;
    r->w = calloc((size_t)np, sizeof *r->w);
    r->gr = calloc((size_t)np, sizeof *r->gr);
    r->b = calloc((size_t)(2 * np + 4), sizeof *r->b);
    r->outs = calloc((size_t)(np + 1), sizeof *r->outs);
    r->in = malloc(mg_tensor_nbytes(m->g, m->input));
    r->tg = malloc(mg_tensor_nbytes(m->g, m->target));
    r->t = calloc((size_t)c->repeat, sizeof *r->t);
    int no = 0;
    for (int i = 0; i < np; i++) {
        r->w[i] = malloc(mg_tensor_nbytes(m->g, m->params[i]));
        r->gr[i] = malloc(mg_tensor_nbytes(m->g, m->params[i]));
    }
    CHECK(mg_model_init_params(m, 1, r->w));
    CHECK(mg_model_init_data(m, 2, r->in, r->tg));
    r->b[r->nb++] = (mg_binding){m->input, r->in};
    r->b[r->nb++] = (mg_binding){m->target, r->tg};
    for (int i = 0; i < np; i++)
        r->b[r->nb++] = (mg_binding){m->params[i], r->w[i]};
    r->b[r->nb++] = (mg_binding){m->loss, &r->loss};
    r->outs[no++] = m->loss;
    for (int i = 0; i < np; i++) {
        r->b[r->nb++] = (mg_binding){m->grads[i], r->gr[i]};
        r->outs[no++] = m->grads[i];
    }
    const int n_off = mg_graph_offloads(m->g, NULL, 0);
    r->off = malloc((size_t)(n_off + 1) * sizeof *r->off);
    mg_graph_offloads(m->g, r->off, n_off);
    const mg_plan_options po = {.offload = r->off,
                                .n_offload = n_off,
                                .host_bandwidth = bw,
                                .compute_rate = rate};
    CHECK(mg_plan_compile(m->g, r->outs, no, &po, &r->p));
    mg_plan_summary s;
    mg_plan_offload info;
    CHECK(mg_plan_summarize(r->p, r->b, r->nb, &s));
    CHECK(mg_plan_offload_info(r->p, &info));
    r->n_off = n_off;
    r->budget_peak = s.budget_peak;
    r->predicted = s.predicted_peak;
    r->host_pred = info.host_peak;
    r->flops = s.forward_flops + s.backward_flops;
    r->rflops = s.recompute_flops;
    r->exposed = info.copy_seconds - info.hidden_seconds;
    r->t_pred = rate > 0 ? (r->flops + r->rflops) / rate + r->exposed : 0;
    CHECK(mg_exec_new(&(mg_exec_options){.num_threads = 1}, &r->ex));
    CHECK(mg_exec_run(r->ex, r->p, r->b, r->nb, 3)); /* warm-up */
}

/* One timed step of r, into round k. */
static void time_step(row *r, int k) {
    if (!r->ok) return;
    const double t0 = now();
    CHECK(mg_exec_run(r->ex, r->p, r->b, r->nb, 3));
    r->t[k] = now() - t0;
}

/* The median step, the peaks measured, and everything freed. */
static void finish(const cfg *c, row *r) {
    if (!r->ok) return;
    r->t_meas = median(r->t, c->repeat);
    mg_pool_stats ps;
    mg_host_stats hs;
    CHECK(mg_exec_pool_stats(r->ex, &ps));
    CHECK(mg_exec_host_stats(r->ex, &hs));
    r->measured = ps.peak_bytes_in_use;
    r->host_meas = hs.peak_bytes_in_use;
    mg_exec_free(r->ex);
    mg_plan_free(r->p);
    for (int i = 0; i < r->m->n_params; i++) {
        free(r->w[i]);
        free(r->gr[i]);
    }
    free(r->w);
    free(r->gr);
    free(r->b);
    free(r->outs);
    free(r->off);
    free(r->in);
    free(r->tg);
    free(r->t);
    mg_model_free(r->m);
}

/* memcpy's bandwidth on this machine: the host tier's copies */
static double host_bandwidth(void) {
    const size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double t[7];
    for (int k = 0; k < 7; k++) {
        const double t0 = now();
        memcpy(b, a, n);
        t[k] = now() - t0;
        a[k] = b[n - 1 - (size_t)k]; /* keep the copies */
    }
    free(a);
    free(b);
    return (double)n / median(t, 7);
}

static void print_row(const row *r) {
    if (!r->ok) {
        printf("%-22s  does not fit the budget\n", r->name);
        return;
    }
    printf("%-22s %8zu %10zu %10zu %9zu %9zu %5d %9.3g %8.3g %9.4f %9.4f "
           "%6.3f\n",
           r->name, r->budget_peak, r->predicted, r->measured, r->host_pred,
           r->host_meas, r->n_off, r->rflops, r->exposed, r->t_pred, r->t_meas,
           r->t_pred > 0 ? r->t_meas / r->t_pred : 0.0);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: offload_gpt LAYERS D_MODEL SEQ BATCH VOCAB "
                        "FRACTION REPEAT\n");
        return 2;
    }
    cfg c = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]),
             atoi(argv[4]), atoi(argv[5]), atoi(argv[7])};
    const double frac = atof(argv[6]);
    if (c.repeat < 1 || !(frac > 0)) return 2;
    const double bw = host_bandwidth();
    /* the compute rate from policy none's own steps, first */
    row none = {.name = "none"};
    prepare(&c, NULL, 0, 0, &none);
    for (int k = 0; k < c.repeat; k++) time_step(&none, k);
    const double rate = none.flops / median(none.t, c.repeat);
    none.t_pred = none.flops / rate;
    const size_t budget = (size_t)(frac * (double)none.budget_peak);
    printf("# GPT %d layers, d_model %d, 4 heads, seq %d, batch %d, vocab %d, "
           "f32, one thread\n",
           c.layers, c.d, c.seq, c.batch, c.vocab);
    printf("# host bandwidth (memcpy, 64 MiB, median of 7): %.3g bytes/s\n",
           bw);
    printf("# compute rate (policy none's flops / its median step, first "
           "%d steps): %.3g flops/s\n",
           c.repeat, rate);
    printf("# budget: %.2f x none's budget peak %zu = %zu bytes\n", frac,
           none.budget_peak, budget);
    printf("# step times: medians of %d rounds, each round one step of each "
           "plan in turn\n",
           c.repeat);
    row rec = {.name = "recompute only"}, off = {.name = "recompute+offload"};
    const mg_checkpoints ck_rec = {.policy = MG_CKPT_BUDGET,
                                   .budget_bytes = budget};
    const mg_checkpoints ck_off = {.policy = MG_CKPT_BUDGET,
                                   .budget_bytes = budget,
                                   .offload = 1,
                                   .host_bandwidth = bw,
                                   .compute_rate = rate};
    prepare(&c, &ck_rec, bw, rate, &rec);
    prepare(&c, &ck_off, bw, rate, &off);
    for (int k = 0; k < c.repeat; k++) {
        time_step(&none, k);
        time_step(&rec, k);
        time_step(&off, k);
    }
    finish(&c, &none);
    finish(&c, &rec);
    finish(&c, &off);
    printf("%-22s %8s %10s %10s %9s %9s %5s %9s %8s %9s %9s %6s\n", "plan",
           "budget_pk", "pred_peak", "meas_peak", "host_pred", "host_meas",
           "n_off", "rflops", "exposed_s", "pred_s", "meas_s", "meas/pred");
    print_row(&none);
    print_row(&rec);
    print_row(&off);
    if (rec.ok && off.ok)
        printf("# step time vs none: recompute only %.3fx predicted, %.3fx "
               "measured; recompute+offload %.3fx predicted, %.3fx measured\n",
               rec.t_pred / none.t_pred, rec.t_meas / none.t_meas,
               off.t_pred / none.t_pred, off.t_meas / none.t_meas);
    const int exact = none.predicted == none.measured &&
                      (!rec.ok || rec.predicted == rec.measured) &&
                      (!off.ok || (off.predicted == off.measured &&
                                   off.host_pred == off.host_meas));
    printf("# predicted == measured peaks (pool, host): %s\n",
           exact ? "yes" : "NO");
    return exact ? 0 : 1;
}
