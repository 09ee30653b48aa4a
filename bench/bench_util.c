/*
 * bench_util.c - what every mg-bench command uses: the usage text and the
 * error exits, parsing option values (integers, lists, byte sizes,
 * checkpoint policies) and measuring (clock, median, RSS, physical memory,
 * which BLAS runs).
 */
#include "../src/common/proc_status.h"
#include "bench.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ usage */

void bench_usage_print(FILE *out) {
    fprintf(
        out,
        "usage: mg-bench depth   [--model NAME] [--depths N,N,...] [--policy "
        "P,P,...]\n"
        "                        [--batch B] [--width W] [--repeat K] [--csv "
        "FILE]\n"
        "                        [--max-bytes BYTES] [--device cpu|cuda]\n"
        "                        [--plan-only yes|no]\n"
        "       mg-bench rewrite [--ops N,N,...] [--shape chain,residual] "
        "[--repeat K]\n"
        "                        [--csv FILE]\n"
        "       mg-bench step    [--model NAME] [--depth N] [--policy P] "
        "[--batch B]\n"
        "                        [--width W] [--repeat K] [--load FILE]\n"
        "                        [--save-grads FILE] [--max-bytes BYTES]\n"
        "                        [--device cpu|cuda] [--compact yes|no]\n"
        "                        [--store16 yes|no] [--plan-only yes|no]\n"
        "                        [--fusion yes|no] [--seq T]\n"
        "       mg-bench observe [--model NAME] [--depth N] [--policy P] "
        "[--batch B]\n"
        "                        [--width W] [--repeat K] [--trace FILE]\n"
        "       mg-bench budget  [--model NAME] [--depth N] [--fractions "
        "F,F,...]\n"
        "                        [--batch B] [--width W] [--repeat K] [--csv "
        "FILE]\n"
        "                        [--memory-point 0|1] [--plan-only yes|no]\n"
        "                        [--dropout P] [--compact yes|no]\n"
        "       mg-bench attention [--batch B] [--heads H] [--seq T] [--dim "
        "D]\n"
        "                        [--causal 0|1] [--repeat K]\n"
        "       mg-bench live    [--model NAME] [--depth N] [--policy P] "
        "[--batch B]\n"
        "                        [--width W] [--compact yes|no]\n"
        "       mg-bench lce     [--rows N] [--dim D] [--vocab V,V,...]\n"
        "                        [--chunks C,C,...] [--repeat K]\n"
        "       mg-bench --help\n"
        "\n"
        "depth: for each depth and policy, build the model, differentiate it "
        "under\n"
        "  the policy, compile the plan and time --repeat training steps "
        "(forward\n"
        "  and backward, after one untimed warm-up step). Parameters and "
        "their\n"
        "  gradient buffers are caller memory, so peak_bytes (the pool's "
        "measured\n"
        "  peak in one step) is activations, recomputed values and "
        "temporaries.\n"
        "  The policies of one depth run interleaved (step k of each, then "
        "step\n"
        "  k+1 of each), so that load from other processes falls on all of "
        "them\n"
        "  alike; time_ratio_vs_none compares medians of the same run.\n"
        "  --model     one of the models below (default mlp)\n"
        "  --depths    default 8,16,32,64,128,256,512,1024\n"
        "  --policy    none, memory, speed, collection (default "
        "none,memory,speed;\n"
        "              collection keeps every round(sqrt(n))-th of the model's "
        "n\n"
        "              layer or block outputs, as checkpoint_sequential "
        "would)\n"
        "  --batch     default: the model's, below\n"
        "  --width     default: the model's, below\n"
        "  --repeat    timed steps per case, median reported (default 5)\n"
        "  --csv       also write one row per case to FILE, columns\n"
        "              model,policy,depth,batch,width,peak_bytes,\n"
        "              "
        "predicted_peak_bytes,param_bytes,activation_bytes_one_layer,\n"
        "              "
        "recompute_flops_ratio,time_ms_median,time_ratio_vs_none\n"
        "  --plan-only yes: plan every case and print CSV rows\n"
        "              model,policy,depth,batch,width,predicted_peak_bytes,\n"
        "              recompute_flops_ratio on stdout; run no step\n"
        "  --compact   yes: mg_checkpoints.compact, relu signs and max-pool\n"
        "              argmaxes kept compact (depth, step, budget: there\n"
        "              every plan, none's too, so budgets are fractions of\n"
        "              compacted none's peak). Default: no\n"
        "  --dropout   P: the mlp's, transformer's and gpt's dropout, 0 <= P < "
        "1\n"
        "              (default 0: none). Dropout after a relu leaves the "
        "relu\n"
        "              output read only by its own gradient: --compact keeps\n"
        "              its sign bits\n"
        "  --seq       T: the gpt's sequence length (default 512)\n"
        "  --fusion    no: mg_plan_options.no_fusion, one step per op\n"
        "              (chains of element-wise ops unfused). Default: yes\n"
        "  --store16   yes: mg_checkpoints.store16, float32 activations kept\n"
        "              in 16 bits (bfloat16; LOSSY gradients) (depth, step,\n"
        "              budget).\n"
        "              Default: no\n"
        "  --max-bytes refuse (and say so) a case whose predicted peak plus "
        "its\n"
        "              parameters, gradients and inputs exceeds BYTES; "
        "suffixes\n"
        "              K, M, G (powers of 1024). Default: half of physical "
        "memory\n"
        "              (with --device cuda: half of the GPU's memory)\n"
        "  --device    cpu (default) or cuda: run the steps on the CUDA "
        "backend,\n"
        "              inputs, parameters, gradients and loss in device "
        "memory\n"
        "              (cudaMalloc, uploaded once). Times are wall clock "
        "around\n"
        "              mg_exec_run (the backend synchronises before it "
        "returns);\n"
        "              stderr also gives the median by CUDA events. The "
        "table's\n"
        "              header names the device and the GPU; the CSV columns "
        "stay\n"
        "              the same. Exits 2, saying why, when this build has no "
        "CUDA\n"
        "              or no CUDA device is found\n"
        "\n"
        "rewrite: time mg_gradients (differentiate and rewrite, policy memory) "
        "and\n"
        "  mg_plan_compile on a graph of N forward ops, median of --repeat "
        "runs;\n"
        "  building the forward graph is timed separately.\n"
        "  --ops       default 10000,100000,1000000\n"
        "  --shape     chain (x -> tanh -> tanh ...), residual (h + tanh(h) "
        "blocks)\n"
        "              or both (default chain,residual)\n"
        "  --repeat    default 5\n"
        "  --csv       columns "
        "shape,ops,tensors,plan_steps,build_ms,gradients_ms,\n"
        "              plan_ms,total_ms (total = gradients + plan)\n"
        "\n"
        "step: one model at one depth under one policy, for "
        "bench/compare_torch.py.\n"
        "  --load FILE reads the model's input, its target and then its "
        "parameters\n"
        "  (mg_model.params order, memgrad_models.h) as raw little-endian f32\n"
        "  (labels int32), back to back; without it they come from the "
        "model's\n"
        "  seeded initialisation. --save-grads FILE writes the parameters'\n"
        "  gradients in the same order as raw f32. Prints key=value\n"
        "  lines: blas, loss, time_ms_median, time_ms (each step), "
        "peak_bytes,\n"
        "  predicted_peak_bytes, pool_reserved_bytes (the pool's blocks, in "
        "use\n"
        "  or cached, after the first step: peak_bytes plus what its size "
        "classes\n"
        "  could not reuse), rss_before_bytes, rss_peak_bytes (whole process,\n"
        "  around the first step), param_bytes, recompute_flops_ratio, "
        "segments\n"
        "  and checkpoints (of the plan); device; with --device cuda also "
        "gpu,\n"
        "  event_ms_median and event_ms (CUDA events around each step). "
        "--device\n"
        "  is as for depth; --load/--save-grads files stay host files.\n"
        "  --depth default 64, --policy default none, --repeat default 5.\n"
        "  --plan-only yes: plan, run no step: the plan's lines only\n"
        "  (predicted_peak_bytes, predicted_peak_without_recompute,\n"
        "  recompute_flops_ratio, segments, checkpoints).\n"
        "\n"
        "budget: policy none, then MG_CKPT_BUDGET at each --fractions of "
        "none's\n"
        "  predicted peak (default 0.02,0.05,0.1,0.2,0.3,0.5,1.0); one CSV row "
        "each:\n"
        "  model,depth,batch,width,budget_fraction,budget_bytes,\n"
        "  "
        "predicted_peak_bytes,peak_bytes,recompute_flops_ratio,forward_share,\n"
        "  time_ms_median,time_ratio_vs_none,time_bound_limit,time_bound.\n"
        "  forward_share: none's forward-only\n"
        "  plan's time over none's step time. Each row interleaves none's "
        "step,\n"
        "  none's forward-only plan and the budget's step --repeat times, and "
        "its\n"
        "  ratios are between those medians (the machine's load drifts). An "
        "infeasible budget gets\n"
        "  empty peaks and the error on stderr. --depth default 1024, --repeat "
        "3.\n"
        "  --memory-point 1 adds a row at policy memory's predicted peak.\n"
        "  time_bound checks issue 29's (time - 1) <= 1.1 x recompute x\n"
        "  forward share (time_bound_limit: the largest time ratio it "
        "allows).\n"
        "  --plan-only yes: plan, run no step: at each fraction of none's\n"
        "  predicted peak without compaction, the budget policy without and\n"
        "  with compaction, one CSV row each fraction:\n"
        "  model,depth,batch,width,dropout,budget_fraction,budget_bytes,\n"
        "  predicted_peak_bytes,recompute_flops_ratio,\n"
        "  compact_predicted_peak_bytes,compact_recompute_flops_ratio\n"
        "  (empty where nothing fits); --compact is not read.\n"
        "\n"
        "lce: a language model's head, h [N, D] through w [V, D] to the mean\n"
        "  cross-entropy, with the gradients of h and w: fused and chunked\n"
        "  (mg_linear_cross_entropy) against matmul + cross_entropy; for each\n"
        "  the predicted and measured pool peak, the largest tensor and the\n"
        "  median step time (steps of all builds interleaved).\n"
        "  --rows      N, default 1024 (GPT-2 shape: T 256 x batch 4)\n"
        "  --dim       D, default 256\n"
        "  --vocab     default 8192,50257\n"
        "  --chunks    -1 (the unfused pair), 0 (the op's default chunk) or\n"
        "              rows per chunk; default -1,0\n"
        "  --repeat    default 3\n"
        "\n"
        "models (memgrad_models.h builders; the defaults make activations "
        "dominate\n"
        "weights, as in openai's ResNet plots with batch 1280):\n");
    for (int i = 0; i < bench_n_models; i++) {
        const bench_model_spec *s = &bench_models[i];
        fprintf(out, "  %-12s %s\n  %-12s default --batch %d --width %d\n",
                s->name, s->summary, "", s->default_batch, s->default_width);
    }
    fprintf(
        out,
        "  mlp: a layer holds batch x width activations against width x width\n"
        "  weights; batch 1024 x width 256 is 1 MiB against 256 KiB (4x). "
        "Depth\n"
        "  1024 under policy none holds about 1 GiB of activations and a step "
        "takes\n"
        "  seconds on two cores. The reasons for the other defaults are in\n"
        "  bench/models.c.\n");
}

int bench_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mg-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fprintf(stderr,
            "usage: mg-bench depth   [--model NAME] [--depths N,...] "
            "[--policy P,...] [--batch B]\n"
            "                        [--width W] [--repeat K] [--csv FILE] "
            "[--max-bytes BYTES]\n"
            "       mg-bench rewrite [--ops N,...] [--shape chain,residual] "
            "[--repeat K] [--csv FILE]\n"
            "       mg-bench step    [--model NAME] [--depth N] [--policy P] "
            "[--load FILE] ...\n"
            "       (depth and step: --device cpu|cuda)\n"
            "       mg-bench --help  (every option and its default)\n");
    return 2;
}

/* The status behind mg_last_error() after a builder returned NULL. */
mg_status bench_builder_status(void) {
    return mg_last_error()[0] ? MG_ERR_INVALID_ARG : MG_ERR_NOMEM;
}

int bench_fail(const char *what, mg_status s) {
    fprintf(stderr, "mg-bench: %s: %s: %s\n", what, mg_status_str(s),
            mg_last_error());
    return 1;
}

int bench_model_check(const char *name, const bench_model_spec **spec) {
    *spec = bench_model_find(name);
    if (!*spec)
        return bench_usage_error("unknown model '%s'; known models: %s", name,
                                 bench_model_names());
    return 0;
}

/* ------------------------------------------------------------------ parsing */

int bench_long_parse(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int bench_opt_next(int argc, char **argv, int i, common_opts *o,
                   const char **opt, const char **value) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        bench_usage_print(stdout);
        return 0;
    }
    if (!v) return bench_usage_error("%s needs a value", a);
    int common = o ? bench_common_opt_parse(a, v, o) : 0;
    if (common == 1) return BENCH_OPT_DONE;
    if (common != 0) return common;
    *opt = a;
    *value = v;
    return BENCH_OPT_OWN;
}

int bench_common_opt_parse(const char *opt, const char *value, common_opts *o) {
    if (!strcmp(opt, "--batch")) {
        if (!bench_long_parse(value, 1, 1L << 24, &o->batch))
            return bench_usage_error("bad --batch '%s'", value);
    } else if (!strcmp(opt, "--width")) {
        if (!bench_long_parse(value, 1, 1L << 24, &o->width))
            return bench_usage_error("bad --width '%s'", value);
    } else if (!strcmp(opt, "--repeat")) {
        if (!bench_long_parse(value, 1, 100000, &o->repeat))
            return bench_usage_error("bad --repeat '%s'", value);
    } else if (!strcmp(opt, "--device")) {
        if (!bench_device_parse(value, &o->device))
            return bench_usage_error("bad --device '%s' (cpu or cuda)", value);
    } else if (!strcmp(opt, "--max-bytes")) {
        if (!bench_bytes_parse(value, &o->max_bytes))
            return bench_usage_error("bad --max-bytes '%s'", value);
    } else if (!strcmp(opt, "--compact")) {
        if (bench_yes_no_parse(opt, value, &o->compact)) return 2;
    } else if (!strcmp(opt, "--dropout")) {
        char *end;
        errno = 0;
        const double p = strtod(value, &end);
        if (errno || end == value || *end || !(p >= 0 && p < 1))
            return bench_usage_error("bad --dropout '%s' (0 <= p < 1)", value);
        o->dropout = p;
    } else if (!strcmp(opt, "--seq")) {
        if (!bench_long_parse(value, 1, 1L << 20, &o->seq))
            return bench_usage_error("bad --seq '%s'", value);
    } else if (!strcmp(opt, "--fusion")) {
        if (strcmp(value, "yes") && strcmp(value, "no"))
            return bench_usage_error("bad --fusion '%s' (yes or no)", value);
        o->no_fusion = !strcmp(value, "no");
    } else if (!strcmp(opt, "--store16")) {
        if (bench_yes_no_parse(opt, value, &o->store16)) return 2;
    } else if (o->model && !strcmp(opt, "--model")) {
        o->model = value;
    } else if (o->depth > 0 && !strcmp(opt, "--depth")) {
        if (!bench_long_parse(value, 1, 1L << 20, &o->depth))
            return bench_usage_error("bad --depth '%s'", value);
    } else {
        return 0;
    }
    return 1;
}

int bench_yes_no_parse(const char *opt, const char *value, int *flag) {
    if (strcmp(value, "yes") && strcmp(value, "no"))
        return bench_usage_error("bad %s '%s' (yes or no)", opt, value);
    *flag = !strcmp(value, "yes");
    return 0;
}

/* "8,16,1e4" -> up to cap positive integers (1e4-style accepted). */
int bench_int_list_parse(const char *s, long lo, long hi, long *out, int cap) {
    int n = 0;
    char buf[1024];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (!bench_long_parse(tok, lo, hi, &v)) {
            char *end;
            double d = strtod(tok, &end);
            if (end == tok || *end || d != floor(d) || d < (double)lo ||
                d > (double)hi)
                return -1;
            v = (long)d;
        }
        if (n == cap) return -1;
        out[n++] = v;
    }
    return n;
}

int bench_bytes_parse(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return 0;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i') end++;
    if (*end == 'B') end++;
    if (*end) return 0;
    *out = (size_t)(v * mul);
    return 1;
}

/* Policy names as mg_ckpt_policy_name gives them; not budget, which has a
 * command of its own (mg-bench budget) and needs a byte count. */
int bench_policy_list_parse(const char *s, mg_ckpt_policy *out, int cap) {
    int n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        mg_ckpt_policy p;
        if (mg_ckpt_policy_parse(tok, &p) != MG_OK || p == MG_CKPT_BUDGET ||
            n == cap)
            return -1;
        out[n++] = p;
    }
    return n;
}

/* --------------------------------------------------------------- measuring */

/* "OpenBLAS core SkylakeX, 2 threads", found at run time through the
 * symbols OpenBLAS exports (memgrad links it; mg-bench does not name it).
 * Debian 12's OpenBLAS picks its SSE3 "Prescott" kernels on CPUs it does
 * not know, several times slower: the core is worth recording. */
void bench_blas_info(char *buf, size_t len) {
    void *self = dlopen(NULL, RTLD_LAZY);
    char *(*corename)(void) = NULL;
    int (*threads)(void) = NULL;
    if (self) {
        *(void **)&corename = dlsym(self, "openblas_get_corename");
        *(void **)&threads = dlsym(self, "openblas_get_num_threads");
    }
    if (corename && threads)
        snprintf(buf, len, "OpenBLAS core %s, %d threads", corename(),
                 threads());
    else snprintf(buf, len, "BLAS: not OpenBLAS or not found");
    if (self) dlclose(self);
}

double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double bench_process_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double bench_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c || n < 1) {
        free(c);
        return NAN;
    }
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

size_t bench_physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return (size_t)8 << 30;
    return (size_t)pages * (size_t)page;
}

/* VmRSS or VmHWM of this process in bytes (0 if unreadable): the reader
 * tests/test_rss.c uses too. */
size_t bench_proc_status_bytes(const char *key) {
    return mgi_proc_status_bytes(key);
}

/* Reset VmHWM to the current RSS (Linux >= 4.0); 0 if not possible. */
int bench_rss_peak_reset(void) { return mgi_proc_peak_reset(); }

double bench_mib(size_t b) { return (double)b / (1024.0 * 1024.0); }
