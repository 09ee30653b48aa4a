/*
 * memgrad_onnx.c - memgrad-onnx: plan and train an ONNX model under
 * memgrad's checkpoint policies (issue 12). Outside scripts call it, so the
 * interface below is kept stable.
 *
 *   memgrad-onnx plan MODEL.onnx [--batch N]
 *                     [--policy none,memory,speed,budget] [--budget B]
 *                     [--offload BW,RATE] [--dot FILE]
 *       for each policy: the checkpoints chosen, the predicted pool peak and
 *       the recompute fraction (recomputed flops / forward flops), and for
 *       budget the budget beside the plan's peak in the budget's measure;
 *       --dot writes the graph of the last policy
 *   memgrad-onnx step MODEL.onnx --batch N --policy P [--budget B]
 *                     [--offload BW,RATE] [--input FILE] [--labels FILE] [--save-grads FILE]
 *                     [--repeat K]
 *       runs K training steps (default 1): the loss is the mean
 *       cross-entropy of the first output [N, C] against int32 labels. The
 *       input is raw little-endian f32 in the first input's shape (int32
 *       where that input is integer, as token ids are), the labels raw
 *       int32 [N]; without them, seeded random data. Prints the
 *       loss, the median step time, and the measured and predicted pool
 *       peak. --save-grads writes the gradient of every float initializer,
 *       in the model's initializer order, as raw little-endian f32.
 *       --tensors N1,N2,... with --save-tensors FILE also keeps the named
 *       ONNX values (activations, say) of the step and writes them, in
 *       that order, raw in their dtype: a caller can then check its own
 *       reference on the same side of every ReLU's kink as memgrad's
 *       float32 forward (tests/onnx_torch_crosscheck.py does).
 *       --profile FILE writes the profiler's table (mg_profiler_print:
 *       time by op kind and phase) over the steps after the first, which
 *       warms the pool and the kernels, to FILE ("-": standard output).
 *
 * Integer inputs (token ids) without a file get random ids in [0, 4).
 *
 * --budget B goes with policy budget (MG_CKPT_BUDGET). B is a byte count,
 * whole or with a binary suffix K, M or G (2^10, 2^20, 2^30 bytes: "64M"),
 * or a fraction of plain backprop's peak in the budget's measure written
 * with an x ("0.25x"), as mg_budget_parse reads it. The budget covers
 * memgrad's pool (activations, recomputed copies, intermediate gradients,
 * workspace), with the parameters, inputs, loss and gradients in caller
 * memory, as step binds them. If nothing fits, the message names the
 * smallest budget that does.
 *
 * --offload BW,RATE goes with policy budget too: the policy may then
 * offload saved tensors to the host tier instead of recomputing them
 * (issue 51, docs/offload.md), pricing copies at BW bytes/s beside compute
 * at RATE flops/s, and the plan offloads the tensors it chose. plan prints
 * what is offloaded, its bytes and the overlap predicted; step also the
 * host tier's measured and predicted peak.
 */
#include <memgrad.h>
#include <memgrad_observe.h>
#include <memgrad_onnx.h>

#include "../src/common/proc_status.h"
#include "cli_policy.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_POLICIES 8

static int usage(void) {
    fprintf(stderr,
            "usage: memgrad-onnx plan MODEL.onnx [--batch N] "
            "[--policy none,memory,speed,budget] [--budget B] "
            "[--offload BW,RATE] [--dot FILE]\n"
            "       memgrad-onnx step MODEL.onnx --batch N --policy P "
            "[--budget B] [--offload BW,RATE] [--input FILE] [--labels FILE] "
            "[--save-grads FILE] [--repeat K] "
            "[--tensors N,N,... --save-tensors FILE] [--profile FILE]\n"
            "  --budget goes with policy budget: bytes of memgrad's pool "
            "(BYTES, or with K/M/G = 2^10/2^20/2^30), or a fraction of plain "
            "backprop's peak, e.g. 0.25x\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "memgrad-onnx: %s: %s\n", what, mg_last_error());
    return 1;
}

/* A deterministic generator for the random data (xorshift64*). */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (every thread). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The training graph of one policy: the model, labels, the loss and the
 * gradient of every parameter, compiled into a plan. */
typedef struct job {
    mg_graph *g;
    mg_onnx_model *m;
    mg_tensor labels, loss;
    mg_tensor *grads;
    int n_params;
    mg_tensor *extra; /* --tensors, kept as outputs */
    mg_tensor *offload; /* what the budget policy chose to offload */
    int n_extra;
    mg_plan *plan;
    int64_t n, classes;
} job;

static void job_free(job *j) {
    mg_plan_free(j->plan);
    free(j->grads);
    free(j->offload);
    free(j->extra);
    mg_onnx_model_free(j->m);
    mg_graph_free(j->g);
}

/* The names of --tensors, split and checked while the arguments are
 * parsed (none empty, none twice), so a bad list fails before the model is
 * imported. */
typedef struct name_list {
    char **v;
    int n;
} name_list;

static void names_free(name_list *l) {
    for (int k = 0; k < l->n; k++) free(l->v[k]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int parse_names(const char *arg, name_list *l) {
    int cap = 1;
    for (const char *c = arg; *c; c++) cap += *c == ',';
    if (!(l->v = calloc((size_t)cap, sizeof *l->v))) {
        fprintf(stderr, "memgrad-onnx: out of memory\n");
        return 1;
    }
    for (const char *c = arg;; c++) {
        size_t len = strcspn(c, ",");
        if (len == 0 || len >= 1024) {
            fprintf(stderr, "memgrad-onnx: --tensors: bad name at '%.40s'\n",
                    c);
            return 1;
        }
        if (!(l->v[l->n] = strndup(c, len))) {
            fprintf(stderr, "memgrad-onnx: out of memory\n");
            return 1;
        }
        for (int k = 0; k < l->n; k++)
            if (!strcmp(l->v[k], l->v[l->n])) {
                fprintf(stderr,
                        "memgrad-onnx: --tensors: '%s' is named "
                        "twice\n",
                        l->v[k]);
                l->n++;
                return 1;
            }
        l->n++;
        c += len;
        if (!*c) return 0;
    }
}

/* What tensor t already is in the step's bindings, or NULL: --tensors
 * binds the values it keeps to memory of its own, so it may not name what
 * is bound already (the model's inputs, parameters and constants). */
static const char *bound_as(const job *j, mg_tensor t) {
    for (int i = 0; i < mg_onnx_num_inputs(j->m); i++)
        if (mg_onnx_input(j->m, i) == t)
            return "an input of the model (--input gives its data)";
    for (int i = 0; i < mg_onnx_num_params(j->m); i++)
        if (mg_onnx_param(j->m, i) == t)
            return "a parameter (--save-grads writes its gradient)";
    int nb;
    const mg_binding *b = mg_onnx_bindings(j->m, &nb);
    for (int i = 0; i < nb; i++)
        if (b[i].tensor == t) return "a constant of the model";
    return NULL;
}

/* The model's values named by --tensors: each must be one the model
 * computes, and no two may be the same tensor (an Identity's output is its
 * input's). */
static int find_tensors(job *j, const name_list *names) {
    if (!(j->extra = malloc(sizeof *j->extra * (size_t)names->n))) {
        fprintf(stderr, "memgrad-onnx: out of memory\n");
        return 1;
    }
    for (int k = 0; k < names->n; k++) {
        const char *name = names->v[k];
        mg_tensor t = mg_onnx_find(j->m, name);
        if (t == MG_NO_TENSOR) {
            fprintf(stderr,
                    "memgrad-onnx: --tensors: the model has no "
                    "value named '%s'\n",
                    name);
            return 1;
        }
        const char *what = bound_as(j, t);
        if (what) {
            fprintf(stderr,
                    "memgrad-onnx: --tensors: '%s' is %s, not a "
                    "value the model computes\n",
                    name, what);
            return 1;
        }
        for (int q = 0; q < k; q++)
            if (j->extra[q] == t) {
                fprintf(stderr,
                        "memgrad-onnx: --tensors: '%s' and '%s' are "
                        "the same value\n",
                        names->v[q], name);
                return 1;
            }
        j->extra[j->n_extra++] = t;
    }
    return 0;
}

/* budget: the budget's bytes under policy budget (else unused). rates:
 * NULL, or --offload's host bandwidth and compute rate, with which policy
 * budget may offload (else unused). */
static int job_build(job *j, const char *path, int64_t batch,
                     mg_ckpt_policy pol, size_t budget, const double *rates,
                     const name_list *names) {
    memset(j, 0, sizeof *j);
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = batch;
    j->g = mg_graph_new();
    if (!j->g) return fail("graph");
    if (mg_onnx_import_file(path, &o, j->g, &j->m)) return fail(path);
    mg_tensor y = mg_onnx_output(j->m, 0);
    int nd;
    int64_t sh[MG_MAX_DIMS];
    if (y == MG_NO_TENSOR || mg_tensor_shape(j->g, y, &nd, sh) || nd != 2) {
        fprintf(stderr, "memgrad-onnx: the first output must be [N, C] "
                        "logits\n");
        return 1;
    }
    j->n = sh[0];
    j->classes = sh[1];
    j->labels = mg_input(j->g, "memgrad_onnx_labels", MG_I32, 1, &j->n);
    j->loss = mg_cross_entropy(j->g, y, j->labels);
    if (j->loss == MG_NO_TENSOR) return fail("loss");
    if (names && find_tensors(j, names)) return 1;
    j->n_params = mg_onnx_num_params(j->m);
    if (j->n_params < 1) {
        fprintf(stderr, "memgrad-onnx: the model has no float initializers\n");
        return 1;
    }
    mg_tensor *ps = malloc(sizeof *ps * (size_t)j->n_params);
    j->grads = malloc(sizeof *j->grads * (size_t)j->n_params);
    const int n_outs = j->n_params + 1 + j->n_extra;
    mg_tensor *outs = malloc(sizeof *outs * (size_t)n_outs);
    if (!ps || !j->grads || !outs) {
        free(ps);
        free(outs);
        fprintf(stderr, "memgrad-onnx: out of memory\n");
        return 1;
    }
    for (int k = 0; k < j->n_params; k++) ps[k] = mg_onnx_param(j->m, k);
    if (pol != MG_CKPT_BUDGET) budget = 0;
    mg_checkpoints ck = {.policy = pol, .budget_bytes = budget};
    if (pol == MG_CKPT_BUDGET && rates) {
        ck.offload = 1;
        ck.host_bandwidth = rates[0];
        ck.compute_rate = rates[1];
    }
    mg_status s =
        mg_gradients(j->g, &j->loss, 1, NULL, ps, j->n_params, &ck, j->grads);
    free(ps);
    if (s) {
        free(outs);
        return fail("gradients");
    }
    outs[0] = j->loss;
    memcpy(outs + 1, j->grads, sizeof *outs * (size_t)j->n_params);
    if (j->n_extra)
        memcpy(outs + 1 + j->n_params, j->extra,
               sizeof *outs * (size_t)j->n_extra);
    mg_plan_options po = {.budget_bytes = budget};
    if (ck.offload) {
        if (mg_cli_offloads(j->g, &j->offload, &po.n_offload)) {
            free(outs);
            fprintf(stderr, "memgrad-onnx: out of memory\n");
            return 1;
        }
        po.offload = j->offload;
        po.host_bandwidth = ck.host_bandwidth;
        po.compute_rate = ck.compute_rate;
    }
    s = mg_plan_compile(j->g, outs, n_outs, &po, &j->plan);
    free(outs);
    if (s) return fail("compile");
    return 0;
}

/* Bindings: the model's, its inputs, the labels, and the outputs bound to
 * caller memory (loss and gradients), so the pool holds only
 * intermediates. */
static mg_binding *bindings(job *j, void **inputs, void *labels, float *loss,
                            float **grads, void **extra, int *n_out)
/* (plan passes NULL data: a prediction reads which tensors are bound) */
{
    int nb;
    const mg_binding *mb = mg_onnx_bindings(j->m, &nb);
    int ni = mg_onnx_num_inputs(j->m);
    int n = nb + ni + 2 + j->n_params + j->n_extra;
    mg_binding *b = malloc(sizeof *b * (size_t)n);
    if (!b) return NULL;
    memcpy(b, mb, sizeof *b * (size_t)nb);
    int k = nb;
    for (int i = 0; i < ni; i++)
        b[k++] =
            (mg_binding){mg_onnx_input(j->m, i), inputs ? inputs[i] : NULL};
    b[k++] = (mg_binding){j->labels, labels};
    b[k++] = (mg_binding){j->loss, loss};
    for (int i = 0; i < j->n_params; i++)
        b[k++] = (mg_binding){j->grads[i], grads ? grads[i] : NULL};
    for (int i = 0; i < j->n_extra; i++)
        b[k++] = (mg_binding){j->extra[i], extra ? extra[i] : NULL};
    *n_out = k;
    return b;
}

/* The budget line: the plan's budget beside its peak in the budget's
 * measure (outputs in caller memory). */
static void print_budget(const mg_plan_summary *s) {
    if (s->budget_bytes)
        printf("budget %zu bytes, budget peak %zu bytes: %s\n", s->budget_bytes,
               s->budget_peak,
               s->budget_peak <= s->budget_bytes ? "within" : "ABOVE");
}

/* What the plan offloads (nothing without offload): the tensors, their
 * bytes, the host tier and the overlap the plan predicts. */
static void print_offload(const mg_plan *p, const char *indent) {
    mg_plan_offload o = {0};
    if (mg_plan_offload_info(p, &o) != MG_OK || o.n_offloaded == 0) return;
    /* one printf: GCC 12 at -O3 saw a dangling pointer to o in a second */
    char secs[96] = "";
    if (o.copy_seconds > 0)
        snprintf(secs, sizeof secs, "; %.4g s of copies, %.4g s hidden",
                 o.copy_seconds, o.hidden_seconds);
    printf("%soffloaded: %d tensors, %zu bytes; host tier %zu bytes (peak "
           "%zu); copies beside %d steps (%.4g flops)%s\n",
           indent, o.n_offloaded, o.offloaded_bytes, o.host_bytes, o.host_peak,
           o.overlap_steps, o.overlap_flops, secs);
}

static int cmd_plan(const char *path, int64_t batch, mg_ckpt_policy *pols,
                    int npol, size_t budget, const double *rates,
                    const char *dot) {
    for (int q = 0; q < npol; q++) {
        job j;
        if (job_build(&j, path, batch, pols[q], budget, rates, NULL)) {
            job_free(&j);
            return 1;
        }
        /* predicted with the bindings step makes: leaves, loss and
         * gradients in caller memory */
        int nb;
        mg_binding *b = bindings(&j, NULL, NULL, NULL, NULL, NULL, &nb);
        mg_plan_summary sum;
        if (!b || mg_plan_summarize(j.plan, b, nb, &sum)) {
            free(b);
            job_free(&j);
            return fail("summarize");
        }
        free(b);
        int nck = mg_graph_checkpoints(j.g, NULL, 0);
        printf("policy %s\n  checkpoints: %d", mg_ckpt_policy_name(pols[q]),
               nck);
        if (nck > 0) {
            mg_tensor *ck = malloc(sizeof *ck * (size_t)nck);
            if (ck) {
                mg_graph_checkpoints(j.g, ck, nck);
                for (int k = 0; k < nck; k++) {
                    const char *nm = mg_tensor_name(j.g, ck[k]);
                    printf("%s %s", k ? "," : "",
                           nm ? nm : mg_tensor_op_name(j.g, ck[k]));
                }
                free(ck);
            }
        }
        printf("\n  predicted peak: %zu bytes (plain backprop %zu)\n",
               sum.predicted_peak, sum.predicted_peak_without_recompute);
        printf(
            "  recompute fraction: %.4f (%d recomputed ops in %d segments)\n",
            sum.forward_flops > 0 ? sum.recompute_flops / sum.forward_flops
                                  : 0.0,
            sum.n_recompute, sum.n_segments);
        if (sum.budget_bytes) printf("  ");
        print_budget(&sum);
        print_offload(j.plan, "  ");
        if (dot && q == npol - 1) {
            FILE *f = fopen(dot, "w");
            if (!f || mg_graph_write_dot(j.g, f)) {
                if (f) fclose(f);
                job_free(&j);
                fprintf(stderr, "memgrad-onnx: cannot write %s\n", dot);
                return 1;
            }
            fclose(f);
        }
        job_free(&j);
    }
    return 0;
}

static int read_file(const char *path, void *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "memgrad-onnx: cannot open %s\n", path);
        return 1;
    }
    size_t got = fread(buf, 1, len, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != len || extra) {
        fprintf(stderr, "memgrad-onnx: %s must hold exactly %zu bytes\n", path,
                len);
        return 1;
    }
    return 0;
}

/* Writes the tensors ts[0..n) from data[0..n), raw, one after another. */
static int write_tensors(const char *path, const mg_graph *g,
                         const mg_tensor *ts, void *const *data, int n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "memgrad-onnx: cannot write %s\n", path);
        return 1;
    }
    int bad = 0;
    for (int k = 0; k < n && !bad; k++) {
        size_t len = mg_tensor_nbytes(g, ts[k]);
        bad = fwrite(data[k], 1, len, f) != len;
    }
    if (fclose(f) || bad) {
        fprintf(stderr, "memgrad-onnx: writing %s failed\n", path);
        return 1;
    }
    return 0;
}

static int cmd_step(const char *path, int64_t batch, mg_ckpt_policy pol,
                    size_t budget, const double *rates, const char *input,
                    const char *labels_file,
                    const char *save, int repeat, const name_list *names,
                    const char *save_tensors, const char *profile) {
    job j;
    int rc = 1;
    void **inputs = NULL;
    int32_t *labels = NULL;
    float **grads = NULL;
    void **extra = NULL;
    mg_binding *b = NULL;
    mg_exec *ex = NULL;
    double *times = NULL;
    mg_profiler *prof = NULL;
    FILE *prof_out = NULL;
    if (job_build(&j, path, batch, pol, budget, rates, names)) goto done;
    int ni = mg_onnx_num_inputs(j.m);
    inputs = calloc((size_t)ni + 1, sizeof *inputs);
    labels = malloc(sizeof *labels * (size_t)j.n);
    grads = calloc((size_t)j.n_params, sizeof *grads);
    extra = calloc((size_t)j.n_extra + 1, sizeof *extra);
    times = malloc(sizeof *times * (size_t)repeat);
    if (!inputs || !labels || !grads || !extra || !times) goto nomem;
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < ni; i++) {
        mg_tensor t = mg_onnx_input(j.m, i);
        mg_dtype dt;
        mg_tensor_dtype(j.g, t, &dt);
        size_t nbytes = mg_tensor_nbytes(j.g, t);
        int64_t cnt = mg_tensor_numel(j.g, t);
        if (!(inputs[i] = malloc(nbytes))) goto nomem;
        if (i == 0 && input) {
            if (dt == MG_F64) {
                fprintf(stderr, "memgrad-onnx: --input is f32 or int32, the "
                                "first input is f64\n");
                goto done;
            }
            if (read_file(input, inputs[i], nbytes)) goto done;
            continue;
        }
        for (int64_t e = 0; e < cnt; e++) {
            uint64_t r = rng_next(&seed);
            if (dt == MG_F32)
                ((float *)inputs[i])[e] =
                    (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
            else if (dt == MG_F64)
                ((double *)inputs[i])[e] =
                    (double)(r >> 11) / 9007199254740992.0 * 2 - 1;
            else ((int32_t *)inputs[i])[e] = (int32_t)(r >> 62);
        }
    }
    if (labels_file) {
        if (read_file(labels_file, labels, sizeof *labels * (size_t)j.n))
            goto done;
    } else {
        for (int64_t e = 0; e < j.n; e++)
            labels[e] = (int32_t)(rng_next(&seed) % (uint64_t)j.classes);
    }
    for (int k = 0; k < j.n_params; k++)
        if (!(grads[k] = malloc(mg_tensor_nbytes(j.g, j.grads[k])))) goto nomem;
    for (int k = 0; k < j.n_extra; k++)
        if (!(extra[k] = malloc(mg_tensor_nbytes(j.g, j.extra[k])))) goto nomem;
    float loss = 0;
    int nb;
    if (!(b = bindings(&j, inputs, labels, &loss, grads, extra, &nb)))
        goto nomem;
    size_t predicted = mg_plan_predicted_peak(j.plan, b, nb);
    if (mg_exec_new(NULL, &ex)) {
        fail("executor");
        goto done;
    }
    /* The resident set the steps add (issue 28): the caller's buffers
     * (gradients, extra outputs) touched first, as memory of the caller's
     * that exists before a step, then the peak (VmHWM) reset; what the
     * steps add beyond the pool's reservation is the kernels' lazy state
     * and malloc's own. 0 where /proc cannot say. */
    for (int k = 0; k < j.n_params; k++)
        memset(grads[k], 0, mg_tensor_nbytes(j.g, j.grads[k]));
    for (int k = 0; k < j.n_extra; k++)
        memset(extra[k], 0, mg_tensor_nbytes(j.g, j.extra[k]));
    const bool have_hwm = mgi_proc_peak_reset();
    const size_t rss_before = mgi_proc_status_bytes("VmRSS");
    if (profile && mg_profiler_new(&prof)) {
        fail("profiler");
        goto done;
    }
    double cpu = 0; /* the process's CPU seconds over the steps */
    for (int r = 0; r < repeat; r++) {
        /* the first step warms the pool and the kernels: not profiled
         * unless it is the only one */
        if (prof && r == (repeat > 1)) {
            const mg_observer obs = mg_profiler_observer(prof);
            if (mg_exec_observer_attach(ex, &obs, NULL)) {
                fail("profiler");
                goto done;
            }
        }
        double t0 = now_s(), c0 = cpu_s();
        if (mg_exec_run(ex, j.plan, b, nb, (uint64_t)r)) {
            fail("run");
            goto done;
        }
        times[r] = now_s() - t0;
        cpu += cpu_s() - c0;
    }
    const size_t rss_peak = have_hwm ? mgi_proc_status_bytes("VmHWM") : 0;
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    qsort(times, (size_t)repeat, sizeof *times, cmp_double);
    printf("policy %s\nloss %.7g\nmedian step %.6f s (%d steps)\n"
           "pool peak measured %zu bytes, predicted %zu bytes\n",
           mg_ckpt_policy_name(pol), (double)loss, times[repeat / 2], repeat,
           st.peak_bytes_in_use, predicted);
    /* on a loaded machine the wall time includes waiting for a core */
    printf("mean step cpu %.6f s\n", cpu / repeat);
    printf("rss increase over the steps %zu bytes, pool reserved %zu bytes\n",
           rss_peak > rss_before ? rss_peak - rss_before : 0,
           st.bytes_reserved);
    /* what the plan said the pool would reserve: its arena (which the
     * placement may make larger than the most bytes live at once) plus
     * the blocks of outputs left in the pool */
    mg_plan_arena ar;
    if (mg_plan_arena_info(j.plan, b, nb, &ar)) {
        fail("arena");
        goto done;
    }
    printf("arena %zu bytes (most live at once %zu), pool reservation "
           "predicted %zu bytes\n",
           ar.bytes, ar.live_peak, ar.reserved);
    mg_plan_summary sum;
    if (mg_plan_summarize(j.plan, b, nb, &sum)) {
        fail("summarize");
        goto done;
    }
    print_budget(&sum);
    print_offload(j.plan, "");
    mg_plan_offload off;
    mg_host_stats hs;
    if (mg_plan_offload_info(j.plan, &off) == MG_OK && off.n_offloaded &&
        mg_exec_host_stats(ex, &hs) == MG_OK)
        printf("host tier peak measured %zu bytes, predicted %zu bytes\n",
               hs.peak_bytes_in_use, off.host_peak);
    if (prof) {
        prof_out = strcmp(profile, "-") ? fopen(profile, "w") : stdout;
        if (!prof_out) {
            fprintf(stderr, "memgrad-onnx: cannot write %s\n", profile);
            goto done;
        }
        if (mg_profiler_print(prof, prof_out)) {
            fail("profile");
            goto done;
        }
    }
    if (save &&
        write_tensors(save, j.g, j.grads, (void *const *)grads, j.n_params))
        goto done;
    if (save_tensors &&
        write_tensors(save_tensors, j.g, j.extra, extra, j.n_extra))
        goto done;
    rc = 0;
    goto done;
nomem:
    fprintf(stderr, "memgrad-onnx: out of memory\n");
done:
    if (prof_out && prof_out != stdout) fclose(prof_out);
    mg_exec_free(ex);
    mg_profiler_free(prof);
    free(b);
    for (int i = 0; inputs && i < mg_onnx_num_inputs(j.m); i++) free(inputs[i]);
    free(inputs);
    for (int k = 0; grads && k < j.n_params; k++) free(grads[k]);
    free(grads);
    for (int k = 0; extra && k < j.n_extra; k++) free(extra[k]);
    free(extra);
    free(labels);
    free(times);
    job_free(&j);
    return rc;
}

/* A fraction of plain backprop's peak in the budget's measure, as bytes:
 * the budget_peak of the model's plan under policy none. */
static int budget_of_fraction(const char *path, int64_t batch, double fraction,
                              size_t *budget) {
    job j;
    mg_plan_summary s;
    int rc = job_build(&j, path, batch, MG_CKPT_NONE, 0, NULL, NULL);
    if (!rc && mg_plan_summarize(j.plan, NULL, 0, &s)) rc = fail("summarize");
    job_free(&j);
    if (rc) return rc;
    double b = floor(fraction * (double)s.budget_peak);
    if (!(b >= 1) || b >= (double)SIZE_MAX) {
        fprintf(stderr,
                "memgrad-onnx: --budget %gx of plain backprop's %zu bytes "
                "is no budget\n",
                fraction, s.budget_peak);
        return 2;
    }
    *budget = (size_t)b;
    printf("budget: %g of plain backprop's %zu bytes = %zu bytes\n", fraction,
           s.budget_peak, *budget);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *cmd = argv[1], *path = argv[2];
    int is_plan = !strcmp(cmd, "plan"), is_step = !strcmp(cmd, "step");
    if (!is_plan && !is_step) return usage();
    int64_t batch = 0;
    int repeat = 1;
    const char *policy = is_plan ? "none,memory,speed" : NULL, *dot = NULL,
               *input = NULL, *labels = NULL, *save = NULL, *names = NULL,
               *save_tensors = NULL, *budget_text = NULL,
               *offload = NULL, *profile = NULL;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(a, "--batch")) batch = atoll(v);
        else if (!strcmp(a, "--policy")) policy = v;
        else if (!strcmp(a, "--budget")) budget_text = v;
        else if (!strcmp(a, "--offload")) offload = v;
        else if (is_plan && !strcmp(a, "--dot")) dot = v;
        else if (is_step && !strcmp(a, "--input")) input = v;
        else if (is_step && !strcmp(a, "--labels")) labels = v;
        else if (is_step && !strcmp(a, "--save-grads")) save = v;
        else if (is_step && !strcmp(a, "--tensors")) names = v;
        else if (is_step && !strcmp(a, "--save-tensors")) save_tensors = v;
        else if (is_step && !strcmp(a, "--repeat")) repeat = atoi(v);
        else if (is_step && !strcmp(a, "--profile")) profile = v;
        else return usage();
        i++;
    }
    if (!policy || repeat < 1 || batch < 0 || (is_step && batch < 1) ||
        !names != !save_tensors)
        return usage();
    mg_ckpt_policy pols[MAX_POLICIES];
    int npol = 0;
    char why[256];
    if (mg_cli_policy_list(policy, pols, is_step ? 1 : MAX_POLICIES, &npol, why,
                           sizeof why)) {
        fprintf(stderr, "memgrad-onnx: --policy: %s\n", why);
        return 2;
    }
    int with_budget = 0;
    for (int q = 0; q < npol; q++) with_budget |= pols[q] == MG_CKPT_BUDGET;
    if (with_budget != (budget_text != NULL)) {
        fprintf(stderr, "memgrad-onnx: %s\n",
                budget_text ? "--budget goes with policy budget"
                            : "policy budget needs --budget");
        return usage();
    }
    if (offload && !with_budget) {
        fprintf(stderr, "memgrad-onnx: --offload goes with policy budget\n");
        return usage();
    }
    double rates[2];
    if (offload &&
        mg_cli_offload_rates(offload, &rates[0], &rates[1], why, sizeof why)) {
        fprintf(stderr, "memgrad-onnx: --offload: %s\n", why);
        return usage();
    }
    const double *with_rates = offload ? rates : NULL;
    size_t budget = 0;
    double fraction = 0;
    if (budget_text &&
        mg_budget_parse(budget_text, &budget, &fraction) != MG_OK) {
        fprintf(stderr, "memgrad-onnx: --budget: %s\n", mg_last_error());
        return usage();
    }
    if (fraction > 0) {
        int rc = budget_of_fraction(path, batch, fraction, &budget);
        if (rc) return rc;
    }
    if (is_plan)
        return cmd_plan(path, batch, pols, npol, budget, with_rates, dot);
    name_list list = {NULL, 0};
    if (names && parse_names(names, &list)) {
        names_free(&list);
        return 2;
    }
    int rc = cmd_step(path, batch, pols[0], budget, with_rates, input, labels,
                      save, repeat, names ? &list : NULL, save_tensors,
                      profile);
    names_free(&list);
    return rc;
}
