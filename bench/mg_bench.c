/*
 * mg_bench.c - mg-bench: memory and time of memgrad training steps against
 * depth, per checkpoint policy (issue 6), and the cost of differentiating,
 * rewriting and planning very large graphs.
 *
 *   mg-bench depth   --model M --depths 8,16,... --policy none,memory,...
 *   mg-bench rewrite --ops N[,N...] --shape chain,residual
 *   mg-bench step    one model, one policy, weights from a file, gradients
 *                    and measurements out (the memgrad side of
 *                    bench/compare_torch.py)
 *
 * `mg-bench --help` gives every option with its default. Tables go to
 * stdout, progress to stderr; a bad argument prints the usage and exits 2.
 *
 * What a "training step" is here: one mg_exec_run of a plan whose outputs
 * are the loss and the gradient of every parameter, with the inputs, the
 * parameters, the gradient buffers and the loss bound as caller memory. No
 * optimizer update runs, so every step (and every policy) sees the same
 * weights. The pool's peak therefore counts activations, recomputed values
 * and temporaries only.
 */
#include "models.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>
#include <unistd.h>

#define BENCH_MAX_LIST 64

/* ------------------------------------------------------------------ usage */

static void print_usage(FILE *out) {
    fprintf(out,
"usage: mg-bench depth   [--model NAME] [--depths N,N,...] [--policy P,P,...]\n"
"                        [--batch B] [--width W] [--repeat K] [--csv FILE]\n"
"                        [--max-bytes BYTES]\n"
"       mg-bench rewrite [--ops N,N,...] [--shape chain,residual] [--repeat K]\n"
"                        [--csv FILE]\n"
"       mg-bench step    [--model NAME] [--depth N] [--policy P] [--batch B]\n"
"                        [--width W] [--repeat K] [--load FILE]\n"
"                        [--save-grads FILE] [--max-bytes BYTES]\n"
"       mg-bench --help\n"
"\n"
"depth: for each depth and policy, build the model, differentiate it under\n"
"  the policy, compile the plan and time --repeat training steps (forward\n"
"  and backward, after one untimed warm-up step). Parameters and their\n"
"  gradient buffers are caller memory, so peak_bytes (the pool's measured\n"
"  peak in one step) is activations, recomputed values and temporaries.\n"
"  The policies of one depth run interleaved (step k of each, then step\n"
"  k+1 of each), so that load from other processes falls on all of them\n"
"  alike; time_ratio_vs_none compares medians of the same run.\n"
"  --model     one of the models below (default mlp)\n"
"  --depths    default 8,16,32,64,128,256,512,1024\n"
"  --policy    none, memory, speed, collection (default none,memory,speed;\n"
"              collection keeps every round(sqrt(n))-th of the model's n\n"
"              layer or block outputs, as checkpoint_sequential would)\n"
"  --batch     default: the model's, below\n"
"  --width     default: the model's, below\n"
"  --repeat    timed steps per case, median reported (default 5)\n"
"  --csv       also write one row per case to FILE, columns\n"
"              model,policy,depth,batch,width,peak_bytes,\n"
"              predicted_peak_bytes,param_bytes,activation_bytes_one_layer,\n"
"              recompute_flops_ratio,time_ms_median,time_ratio_vs_none\n"
"  --max-bytes refuse (and say so) a case whose predicted peak plus its\n"
"              parameters, gradients and inputs exceeds BYTES; suffixes\n"
"              K, M, G (powers of 1024). Default: half of physical memory\n"
"\n"
"rewrite: time mg_gradients (differentiate and rewrite, policy memory) and\n"
"  mg_plan_compile on a graph of N forward ops, median of --repeat runs;\n"
"  building the forward graph is timed separately.\n"
"  --ops       default 10000,100000,1000000\n"
"  --shape     chain (x -> tanh -> tanh ...), residual (h + tanh(h) blocks)\n"
"              or both (default chain,residual)\n"
"  --repeat    default 5\n"
"  --csv       columns shape,ops,tensors,plan_steps,build_ms,gradients_ms,\n"
"              plan_ms,total_ms (total = gradients + plan)\n"
"\n"
"step: one model at one depth under one policy, for bench/compare_torch.py.\n"
"  --load FILE reads the model's input, its target and then its parameters\n"
"  (mg_model.params order, memgrad_models.h) as raw little-endian f32\n"
"  (labels int32), back to back; without it they come from the model's\n"
"  seeded initialisation. --save-grads FILE writes the parameters'\n"
"  gradients in the same order as raw f32. Prints key=value\n"
"  lines: blas, loss, time_ms_median, time_ms (each step), peak_bytes,\n"
"  predicted_peak_bytes, pool_reserved_bytes (the pool's blocks, in use\n"
"  or cached, after the first step: peak_bytes plus what its size classes\n"
"  could not reuse), rss_before_bytes, rss_peak_bytes (whole process,\n"
"  around the first step), param_bytes, recompute_flops_ratio, segments\n"
"  and checkpoints (of the plan).\n"
"  --depth default 64, --policy default none, --repeat default 5.\n"
"\n"
"models (memgrad_models.h builders; the defaults make activations dominate\n"
"weights, as in openai's ResNet plots with batch 1280):\n");
    for (int i = 0; i < bench_n_models; i++) {
        const bench_model_spec *s = &bench_models[i];
        fprintf(out, "  %-12s %s\n  %-12s default --batch %d --width %d\n",
                s->name, s->summary, "", s->default_batch, s->default_width);
    }
    fprintf(out,
"  mlp: a layer holds batch x width activations against width x width\n"
"  weights; batch 1024 x width 256 is 1 MiB against 256 KiB (4x). Depth\n"
"  1024 under policy none holds about 1 GiB of activations and a step takes\n"
"  seconds on two cores. The reasons for the other defaults are in\n"
"  bench/models.c.\n");
}

static int usage_error(const char *fmt, ...) {
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
            "       mg-bench --help  (every option and its default)\n");
    return 2;
}

/* The status behind mg_last_error() after a builder returned NULL. */
static mg_status builder_status(void) {
    return mg_last_error()[0] ? MG_ERR_INVALID_ARG : MG_ERR_NOMEM;
}

static int fail(const char *what, mg_status s) {
    fprintf(stderr, "mg-bench: %s: %s: %s\n", what, mg_status_str(s),
            mg_last_error());
    return 1;
}

/* ------------------------------------------------------------------ parsing */

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* "8,16,1e4" -> up to cap positive integers (1e4-style accepted). */
static int parse_int_list(const char *s, long lo, long hi, long *out,
                          int cap) {
    int n = 0;
    char buf[1024];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (!parse_long(tok, lo, hi, &v)) {
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

static int parse_bytes(const char *s, size_t *out) {
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

typedef struct policy_name {
    const char *name;
    mg_ckpt_policy policy;
} policy_name;

static const policy_name policies[] = {{"none", MG_CKPT_NONE},
                                       {"collection", MG_CKPT_COLLECTION},
                                       {"memory", MG_CKPT_MEMORY},
                                       {"speed", MG_CKPT_SPEED}};

static const char *policy_str(mg_ckpt_policy p) {
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        if (policies[i].policy == p) return policies[i].name;
    return "?";
}

static int parse_policy_list(const char *s, mg_ckpt_policy *out, int cap) {
    int n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof policies / sizeof *policies &&
               strcmp(policies[i].name, tok))
            i++;
        if (i == sizeof policies / sizeof *policies || n == cap) return -1;
        out[n++] = policies[i].policy;
    }
    return n;
}

/* --------------------------------------------------------------- measuring */

/* "OpenBLAS core SkylakeX, 2 threads", found at run time through the
 * symbols OpenBLAS exports (memgrad links it; mg-bench does not name it).
 * Debian 12's OpenBLAS picks its SSE3 "Prescott" kernels on CPUs it does
 * not know, several times slower: the core is worth recording. */
static void blas_info(char *buf, size_t len) {
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
    else
        snprintf(buf, len, "BLAS: not OpenBLAS or not found");
    if (self) dlclose(self);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
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

static size_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return (size_t)8 << 30;
    return (size_t)pages * (size_t)page;
}

/* VmRSS or VmHWM of this process in bytes (0 if unreadable). */
static size_t proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0, n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            kib = (size_t)strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kib * 1024;
}

/* Reset VmHWM to the current RSS (Linux >= 4.0); 0 if not possible. */
static int reset_rss_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* ----------------------------------------------------------- one test case */

/* A model differentiated under one policy with a compiled plan. The
 * model's data tensors are mm->input and mm->target ("inputs" below, in
 * that order), its parameters mm->params and their gradients mm->grads. */
typedef struct bench_case {
    mg_ckpt_policy policy;
    mg_model *mm;
    size_t act_one_layer;
    mg_tensor inputs[2];
    mg_plan *plan;
    mg_plan_summary sum;
    size_t param_bytes, input_bytes;
    mg_binding *binds;     /* to a bench_memory, once it exists */
    int n_binds;
    mg_exec *ex;
} bench_case;

static void case_free(bench_case *c) {
    mg_exec_free(c->ex);
    mg_plan_free(c->plan);
    mg_model_free(c->mm);
    free(c->binds);
    memset(c, 0, sizeof *c);
}

/* Bytes a case needs while it runs: its predicted pool peak plus the
 * caller memory (parameters, their gradients, inputs). */
static size_t case_need(const bench_case *c) {
    return c->sum.predicted_peak + 2 * c->param_bytes + c->input_bytes;
}

/* Caller memory for one model shape; shared by every policy of a depth
 * (the loss is written by each run in turn). */
typedef struct bench_memory {
    void *inputs[2];
    void **params, **grads;
    int n_params;
    float loss;
} bench_memory;

static void memory_free(bench_memory *mem) {
    for (int i = 0; i < 2; i++) free(mem->inputs[i]);
    for (int i = 0; mem->params && i < mem->n_params; i++) {
        free(mem->params[i]);
        free(mem->grads[i]);
    }
    free(mem->params);
    free(mem->grads);
    memset(mem, 0, sizeof *mem);
}

/* Point the bindings at mem for this case's tensor ids. With mem NULL, a
 * placeholder address: enough for predicting the peak (nothing runs). */
static mg_status case_bind(const bench_case *c, bench_memory *mem,
                           mg_binding **binds_out, int *n_out) {
    static char placeholder[1];
    const mg_model *m = c->mm;
    int n = 2 + 2 * m->n_params + 1;
    mg_binding *b = malloc((size_t)n * sizeof *b);
    if (!b) return MG_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < 2; i++)
        b[k++] = (mg_binding){c->inputs[i], mem ? mem->inputs[i] : placeholder};
    for (int i = 0; i < m->n_params; i++) {
        b[k++] = (mg_binding){m->params[i], mem ? mem->params[i] : placeholder};
        b[k++] = (mg_binding){m->grads[i], mem ? mem->grads[i] : placeholder};
    }
    b[k++] = (mg_binding){m->loss, mem ? (void *)&mem->loss : placeholder};
    *binds_out = b;
    *n_out = n;
    return MG_OK;
}

/* Build, differentiate under `policy`, compile and summarize. Policy
 * collection keeps every round(sqrt(n))-th of the model's blocks (layer or
 * block outputs): sqrt(n) checkpoints placed by hand, as
 * torch.utils.checkpoint.checkpoint_sequential places them. */
static mg_status case_prepare(const bench_model_spec *spec,
                              const bench_model_cfg *cfg,
                              mg_ckpt_policy policy, bench_case *c) {
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->mm = spec->build(cfg, &c->act_one_layer);
    if (!c->mm) return builder_status();
    mg_model *m = c->mm;
    mg_graph *g = m->g;
    c->inputs[0] = m->input;
    c->inputs[1] = m->target;
    mg_status s = MG_OK;
    if (policy == MG_CKPT_COLLECTION && m->n_blocks > 1) {
        int every = (int)lround(sqrt((double)m->n_blocks));
        for (int i = every - 1; s == MG_OK && i < m->n_blocks - 1; i += every)
            s = mg_tensor_set_checkpoint(g, m->blocks[i], 1);
        if (s != MG_OK) return s;
    }
    mg_checkpoints ck = {.policy = policy};
    if ((s = mg_model_gradients(m, &ck)) != MG_OK) return s;
    mg_tensor *outs = malloc((size_t)(m->n_params + 1) * sizeof *outs);
    if (!outs) return MG_ERR_NOMEM;
    outs[0] = m->loss;
    memcpy(outs + 1, m->grads, (size_t)m->n_params * sizeof *outs);
    s = mg_plan_compile(g, outs, m->n_params + 1, NULL, &c->plan);
    free(outs);
    if (s != MG_OK) return s;
    for (int i = 0; i < m->n_params; i++)
        c->param_bytes += mg_tensor_nbytes(g, m->params[i]);
    for (int i = 0; i < 2; i++)
        c->input_bytes += mg_tensor_nbytes(g, c->inputs[i]);
    mg_binding *b;
    int nb;
    if ((s = case_bind(c, NULL, &b, &nb)) != MG_OK) return s;
    s = mg_plan_summarize(c->plan, b, nb, &c->sum);
    free(b);
    return s;
}

/* Allocate inputs, parameters and gradient buffers for the tensors of c
 * (any case of the same model shape can then bind them with case_bind) and
 * fill inputs and parameters: from `load` when given (input, target, then
 * the parameters in order, raw, back to back), else with the model's own
 * seeded initialisation (mg_model_init_params / mg_model_init_data). */
static int memory_alloc(const bench_case *c, bench_memory *mem,
                        const char *load) {
    const mg_model *m = c->mm;
    memset(mem, 0, sizeof *mem);
    mem->n_params = m->n_params;
    mem->params = calloc((size_t)m->n_params, sizeof *mem->params);
    mem->grads = calloc((size_t)m->n_params, sizeof *mem->grads);
    if (!mem->params || !mem->grads) return 0;
    for (int i = 0; i < 2 + m->n_params; i++) {
        int is_input = i < 2;
        int j = is_input ? i : i - 2;
        size_t nbytes =
            mg_tensor_nbytes(m->g, is_input ? c->inputs[j] : m->params[j]);
        void *p = malloc(nbytes);
        if (!p) return 0;
        if (is_input) mem->inputs[j] = p;
        else mem->params[j] = p;
        if (!is_input && !(mem->grads[j] = malloc(nbytes))) return 0;
    }
    if (!load) {
        mg_status s = mg_model_init_params(m, m->seed, mem->params);
        if (s == MG_OK)
            s = mg_model_init_data(m, m->seed, mem->inputs[0], mem->inputs[1]);
        if (s != MG_OK) {
            fail("initialising the model", s);
            return 0;
        }
        return 1;
    }
    FILE *f = fopen(load, "rb");
    if (!f) {
        fprintf(stderr, "mg-bench: cannot open %s: %s\n", load,
                strerror(errno));
        return 0;
    }
    int ok = 1;
    for (int i = 0; ok && i < 2 + m->n_params; i++) {
        int is_input = i < 2;
        int j = is_input ? i : i - 2;
        mg_tensor t = is_input ? c->inputs[j] : m->params[j];
        size_t nbytes = mg_tensor_nbytes(m->g, t);
        if (fread(is_input ? mem->inputs[j] : mem->params[j], 1, nbytes, f) !=
            nbytes) {
            fprintf(stderr, "mg-bench: %s is too short for %s\n", load,
                    is_input ? "the inputs" : "the parameters");
            ok = 0;
        }
    }
    if (ok && fgetc(f) != EOF) {
        fprintf(stderr, "mg-bench: %s is longer than the inputs and "
                "parameters of this model\n", load);
        ok = 0;
    }
    fclose(f);
    return ok;
}

typedef struct step_result {
    double time_ms_median;
    double *times; /* repeat entries */
    size_t peak_bytes;
    size_t reserved_bytes; /* the pool's reservation after the first step */
    size_t rss_before, rss_peak;
    float loss;
} step_result;

/* Bind c to mem, make its executor and run one untimed warm-up step, which
 * also gives the pool peak and the process RSS around a first step. */
static mg_status case_warm_up(bench_case *c, bench_memory *mem, int repeat,
                              step_result *r) {
    memset(r, 0, sizeof *r);
    r->times = calloc((size_t)repeat, sizeof *r->times);
    if (!r->times) return MG_ERR_NOMEM;
    mg_status s = case_bind(c, mem, &c->binds, &c->n_binds);
    if (s == MG_OK) s = mg_exec_new(NULL, &c->ex);
    if (s != MG_OK) return s;
    r->rss_before = proc_status_bytes("VmRSS");
    int have_hwm = reset_rss_peak();
    mg_exec_pool_reset_peak(c->ex);
    s = mg_exec_run(c->ex, c->plan, c->binds, c->n_binds, 0);
    r->rss_peak = have_hwm ? proc_status_bytes("VmHWM") : 0;
    mg_pool_stats st;
    mg_exec_pool_stats(c->ex, &st);
    r->peak_bytes = st.peak_bytes_in_use;
    r->reserved_bytes = st.bytes_reserved;
    r->loss = mem->loss;
    return s;
}

/* Timed step k of c (after case_warm_up). */
static mg_status case_timed_step(bench_case *c, int k, step_result *r) {
    mg_exec_pool_reset_peak(c->ex);
    double t0 = now_ms();
    mg_status s = mg_exec_run(c->ex, c->plan, c->binds, c->n_binds, 0);
    r->times[k] = now_ms() - t0;
    mg_pool_stats st;
    mg_exec_pool_stats(c->ex, &st);
    if (st.peak_bytes_in_use > r->peak_bytes)
        r->peak_bytes = st.peak_bytes_in_use;
    return s;
}

/* Allocates the lazy pages of OpenBLAS and the pool once, so a later RSS
 * measurement sees the model's own memory: a tiny matmul plan. */
static void warm_up_runtime(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {64, 64};
    mg_tensor a = mg_input(g, "a", MG_F32, 2, s);
    mg_tensor y = mg_sum(g, mg_matmul(g, a, a, 0, 0), 0, NULL, 0);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    static float data[64 * 64];
    mg_binding b = {a, data};
    if (mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK &&
        mg_exec_new(NULL, &ex) == MG_OK)
        mg_exec_run(ex, p, &b, 1, 0);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}

/* ------------------------------------------------------------------ depth */

typedef struct depth_row {
    mg_ckpt_policy policy;
    int depth, refused;
    size_t peak, predicted, param_bytes, act_one_layer;
    double recompute_ratio, time_ms;
} depth_row;

typedef struct common_opts {
    const bench_model_spec *spec;
    long batch, width, repeat;
    size_t max_bytes;
    const char *csv;
} common_opts;

static const char *csv_header =
    "model,policy,depth,batch,width,peak_bytes,predicted_peak_bytes,"
    "param_bytes,activation_bytes_one_layer,recompute_flops_ratio,"
    "time_ms_median,time_ratio_vs_none\n";

static int model_check(const char *name, const bench_model_spec **spec) {
    *spec = bench_model_find(name);
    if (!*spec)
        return usage_error("unknown model '%s'; known models: %s", name,
                           bench_model_names());
    return 0;
}

static void print_depth_rows(const common_opts *o, const depth_row *rows,
                             int n, FILE *csv) {
    const depth_row *none = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].policy == MG_CKPT_NONE && !rows[i].refused) none = &rows[i];
    for (int i = 0; i < n; i++) {
        const depth_row *r = &rows[i];
        if (r->refused) {
            printf("%-11s %-10s %6d  refused: predicted peak plus parameters, "
                   "gradients and inputs exceed --max-bytes %.0f MiB\n",
                   o->spec->name, policy_str(r->policy), r->depth,
                   mib(o->max_bytes));
            continue;
        }
        double tr = none ? r->time_ms / none->time_ms : NAN;
        double pr = none ? (double)r->peak / (double)none->peak : NAN;
        printf("%-11s %-10s %6d %11.2f %11.2f %8.3f %9.3f %11.1f %8.3f %9.2f\n",
               o->spec->name, policy_str(r->policy), r->depth, mib(r->peak),
               mib(r->predicted), pr, r->recompute_ratio, r->time_ms, tr,
               (double)r->peak / (double)r->act_one_layer);
        if (csv) {
            fprintf(csv, "%s,%s,%d,%ld,%ld,%zu,%zu,%zu,%zu,%.6f,%.3f,",
                    o->spec->name, policy_str(r->policy), r->depth, o->batch,
                    o->width, r->peak, r->predicted, r->param_bytes,
                    r->act_one_layer, r->recompute_ratio, r->time_ms);
            if (none) fprintf(csv, "%.4f\n", tr);
            else fprintf(csv, "\n");
        }
    }
    fflush(stdout);
    if (csv) fflush(csv);
}

/* Every policy at one depth. The policies' steps are interleaved (step k
 * of each policy, then step k+1 of each), so that load from other
 * processes on a shared machine falls on all of them alike and the time
 * ratios stay meaningful; the cases then hold their pools at the same time.
 * If together they would pass --max-bytes, they run one after another. */
static int depth_one(const common_opts *o, int depth,
                     const mg_ckpt_policy *pol, int n_pol, FILE *csv) {
    bench_model_cfg cfg = {depth, (int)o->batch, (int)o->width};
    bench_case cases[8];
    step_result res[8];
    depth_row rows[8];
    memset(cases, 0, sizeof cases);
    memset(res, 0, sizeof res);
    bench_memory mem = {0};
    int rc = 0, have_mem = 0, n_run = 0;
    size_t together = 0;
    char label[128];
    for (int p = 0; p < n_pol; p++) {
        bench_case *c = &cases[p];
        snprintf(label, sizeof label, "%s depth %d policy %s", o->spec->name,
                 depth, policy_str(pol[p]));
        fprintf(stderr, "[%s] building, differentiating, planning\n", label);
        mg_status s = case_prepare(o->spec, &cfg, pol[p], c);
        if (s != MG_OK) {
            rc = fail(label, s);
            goto done;
        }
        rows[p] = (depth_row){
            .policy = pol[p], .depth = depth,
            .predicted = c->sum.predicted_peak, .param_bytes = c->param_bytes,
            .act_one_layer = c->act_one_layer,
            .recompute_ratio = c->sum.forward_flops > 0
                                   ? c->sum.recompute_flops / c->sum.forward_flops
                                   : 0};
        if (case_need(c) > o->max_bytes) {
            fprintf(stderr, "[%s] refused: predicted peak %.1f MiB plus %.1f "
                    "MiB of parameters, gradients and inputs exceeds "
                    "--max-bytes %.1f MiB\n", label,
                    mib(c->sum.predicted_peak),
                    mib(2 * c->param_bytes + c->input_bytes),
                    mib(o->max_bytes));
            rows[p].refused = 1;
            case_free(c);
            continue;
        }
        if (!have_mem) {
            if (!memory_alloc(c, &mem, NULL)) {
                fprintf(stderr, "mg-bench: %s: out of memory for the "
                        "parameters\n", label);
                rc = 1;
                goto done;
            }
            have_mem = 1;
            together = 2 * c->param_bytes + c->input_bytes;
        }
        together += c->sum.predicted_peak;
        n_run++;
    }
    int interleave = together <= o->max_bytes;
    if (!interleave && n_run > 1)
        fprintf(stderr, "[depth %d] the policies' pools together would pass "
                "--max-bytes; running them one after another\n", depth);
    /* Interleaved: one round of warm-ups, then rounds of timed steps.
     * Otherwise each case runs all its steps and frees its pool. */
    int n_groups = interleave ? 1 : n_pol;
    for (int grp = 0; grp < n_groups; grp++) {
        int lo = interleave ? 0 : grp, hi = interleave ? n_pol : grp + 1;
        for (int k = -1; k < (int)o->repeat; k++)
            for (int p = lo; p < hi; p++) {
                bench_case *c = &cases[p];
                if (rows[p].refused) continue;
                snprintf(label, sizeof label, "%s depth %d policy %s",
                         o->spec->name, depth, policy_str(pol[p]));
                mg_status s;
                if (k < 0) {
                    fprintf(stderr, "[%s] warm-up step\n", label);
                    s = case_warm_up(c, &mem, (int)o->repeat, &res[p]);
                } else {
                    fprintf(stderr, "[%s] step %d/%ld\n", label, k + 1,
                            o->repeat);
                    s = case_timed_step(c, k, &res[p]);
                }
                if (s != MG_OK) {
                    rc = fail(label, s);
                    goto done;
                }
            }
        for (int p = lo; p < hi; p++) {
            bench_case *c = &cases[p];
            if (rows[p].refused) continue;
            step_result *r = &res[p];
            snprintf(label, sizeof label, "%s depth %d policy %s",
                     o->spec->name, depth, policy_str(pol[p]));
            r->time_ms_median = median(r->times, (int)o->repeat);
            rows[p].peak = r->peak_bytes;
            rows[p].time_ms = r->time_ms_median;
            if (r->peak_bytes != c->sum.predicted_peak)
                fprintf(stderr, "[%s] measured peak %zu bytes != predicted "
                        "%zu\n", label, r->peak_bytes, c->sum.predicted_peak);
            if (!isfinite(r->loss))
                fprintf(stderr, "[%s] loss is %g\n", label, (double)r->loss);
            fprintf(stderr, "[%s] median %.1f ms, peak %.2f MiB, loss %.4f\n",
                    label, r->time_ms_median, mib(r->peak_bytes),
                    (double)r->loss);
            mg_exec_free(c->ex); /* its pool goes back now */
            c->ex = NULL;
        }
    }
    print_depth_rows(o, rows, n_pol, csv);
done:
    for (int p = 0; p < n_pol; p++) {
        case_free(&cases[p]);
        free(res[p].times);
    }
    memory_free(&mem);
    return rc;
}

static int cmd_depth(int argc, char **argv) {
    const char *model = "mlp", *depths_s = "8,16,32,64,128,256,512,1024",
               *policy_s = "none,memory,speed";
    common_opts o = {.batch = 0, .width = 0, .repeat = 5,
                     .max_bytes = physical_memory() / 2};
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            return 0;
        }
        if (!v) return usage_error("%s needs a value", a);
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--depths")) depths_s = v;
        else if (!strcmp(a, "--policy")) policy_s = v;
        else if (!strcmp(a, "--batch")) {
            if (!parse_long(v, 1, 1L << 24, &o.batch))
                return usage_error("bad --batch '%s'", v);
        } else if (!strcmp(a, "--width")) {
            if (!parse_long(v, 1, 1L << 24, &o.width))
                return usage_error("bad --width '%s'", v);
        } else if (!strcmp(a, "--repeat")) {
            if (!parse_long(v, 1, 100000, &o.repeat))
                return usage_error("bad --repeat '%s'", v);
        } else if (!strcmp(a, "--csv")) o.csv = v;
        else if (!strcmp(a, "--max-bytes")) {
            if (!parse_bytes(v, &o.max_bytes))
                return usage_error("bad --max-bytes '%s'", v);
        } else return usage_error("unknown option '%s' for depth", a);
    }
    int rc = model_check(model, &o.spec);
    if (rc) return rc;
    long depths[BENCH_MAX_LIST];
    mg_ckpt_policy pol[8];
    int n_depths = parse_int_list(depths_s, 1, 1L << 20, depths,
                                  BENCH_MAX_LIST);
    if (n_depths < 1) return usage_error("bad --depths '%s'", depths_s);
    int n_pol = parse_policy_list(policy_s, pol, 8);
    if (n_pol < 1)
        return usage_error("bad --policy '%s' (none, memory, speed, "
                           "collection)", policy_s);
    if (!o.batch) o.batch = o.spec->default_batch;
    if (!o.width) o.width = o.spec->default_width;

    FILE *csv = NULL;
    if (o.csv) {
        if (!(csv = fopen(o.csv, "w"))) {
            fprintf(stderr, "mg-bench: cannot write %s: %s\n", o.csv,
                    strerror(errno));
            return 1;
        }
        fputs(csv_header, csv);
    }
    fprintf(stderr, "mg-bench depth: model %s, batch %ld, width %ld, %ld "
            "timed steps per case, --max-bytes %.0f MiB\n", o.spec->name,
            o.batch, o.width, o.repeat, mib(o.max_bytes));
    char blas[128];
    blas_info(blas, sizeof blas);
    printf("# %s\n", blas);
    printf("# model %s, batch %ld, width %ld, f32; peak = pool peak in one "
           "training step (parameters and gradients are caller memory)\n",
           o.spec->name, o.batch, o.width);
    printf("%-11s %-10s %6s %11s %11s %8s %9s %11s %8s %9s\n", "model",
           "policy", "depth", "peak_MiB", "pred_MiB", "peak/no", "recompute",
           "time_ms", "time/no", "peak/layer");
    for (int d = 0; d < n_depths && !rc; d++)
        rc = depth_one(&o, (int)depths[d], pol, n_pol, csv);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "mg-bench: error writing %s\n", o.csv);
        rc = 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ step */

static int write_grads(const char *path, const bench_case *c,
                       const bench_memory *mem) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "mg-bench: cannot write %s: %s\n", path,
                strerror(errno));
        return 0;
    }
    int ok = 1;
    for (int i = 0; ok && i < c->mm->n_params; i++) {
        size_t n = mg_tensor_nbytes(c->mm->g, c->mm->params[i]);
        ok = fwrite(mem->grads[i], 1, n, f) == n;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "mg-bench: error writing %s\n", path);
    return ok;
}

static int cmd_step(int argc, char **argv) {
    const char *model = "mlp", *load = NULL, *save = NULL, *policy_s = "none";
    long depth = 64;
    common_opts o = {.repeat = 5, .max_bytes = physical_memory() / 2};
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            return 0;
        }
        if (!v) return usage_error("%s needs a value", a);
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--depth")) {
            if (!parse_long(v, 1, 1L << 20, &depth))
                return usage_error("bad --depth '%s'", v);
        } else if (!strcmp(a, "--policy")) policy_s = v;
        else if (!strcmp(a, "--batch")) {
            if (!parse_long(v, 1, 1L << 24, &o.batch))
                return usage_error("bad --batch '%s'", v);
        } else if (!strcmp(a, "--width")) {
            if (!parse_long(v, 1, 1L << 24, &o.width))
                return usage_error("bad --width '%s'", v);
        } else if (!strcmp(a, "--repeat")) {
            if (!parse_long(v, 1, 100000, &o.repeat))
                return usage_error("bad --repeat '%s'", v);
        } else if (!strcmp(a, "--load")) load = v;
        else if (!strcmp(a, "--save-grads")) save = v;
        else if (!strcmp(a, "--max-bytes")) {
            if (!parse_bytes(v, &o.max_bytes))
                return usage_error("bad --max-bytes '%s'", v);
        } else return usage_error("unknown option '%s' for step", a);
    }
    int rc = model_check(model, &o.spec);
    if (rc) return rc;
    mg_ckpt_policy pol;
    if (parse_policy_list(policy_s, &pol, 1) != 1)
        return usage_error("bad --policy '%s' (one of none, memory, speed, "
                           "collection)", policy_s);
    if (!o.batch) o.batch = o.spec->default_batch;
    if (!o.width) o.width = o.spec->default_width;
    bench_model_cfg cfg = {(int)depth, (int)o.batch, (int)o.width};
    bench_case c;
    mg_status s = case_prepare(o.spec, &cfg, pol, &c);
    if (s != MG_OK) {
        case_free(&c);
        return fail("building the model", s);
    }
    size_t need = c.sum.predicted_peak + 2 * c.param_bytes + c.input_bytes;
    if (need > o.max_bytes) {
        fprintf(stderr, "mg-bench: refused: predicted peak %.1f MiB plus "
                "%.1f MiB of parameters, gradients and inputs exceeds "
                "--max-bytes %.1f MiB\n", mib(c.sum.predicted_peak),
                mib(2 * c.param_bytes + c.input_bytes), mib(o.max_bytes));
        case_free(&c);
        return 1;
    }
    bench_memory mem;
    if (!memory_alloc(&c, &mem, load)) {
        memory_free(&mem);
        case_free(&c);
        return 1;
    }
    /* Touch the gradient buffers, as PyTorch's side pre-allocates .grad:
     * both sides then start the measured step with them resident. */
    for (int i = 0; i < mem.n_params; i++)
        memset(mem.grads[i], 0, mg_tensor_nbytes(c.mm->g, c.mm->params[i]));
    warm_up_runtime();
    step_result r = {0};
    s = case_warm_up(&c, &mem, (int)o.repeat, &r);
    for (int k = 0; s == MG_OK && k < o.repeat; k++)
        s = case_timed_step(&c, k, &r);
    r.time_ms_median = median(r.times, (int)o.repeat);
    if (s != MG_OK) rc = fail("running", s);
    if (!rc && save && !write_grads(save, &c, &mem)) rc = 1;
    if (!rc) {
        char blas[128];
        blas_info(blas, sizeof blas);
        printf("model=%s\npolicy=%s\ndepth=%ld\nbatch=%ld\nwidth=%ld\n"
               "blas=%s\n", o.spec->name, policy_str(pol), depth, o.batch,
               o.width, blas);
        printf("loss=%.9g\ntime_ms_median=%.3f\ntime_ms=", (double)r.loss,
               r.time_ms_median);
        for (int k = 0; k < o.repeat; k++)
            printf("%s%.3f", k ? "," : "", r.times[k]);
        printf("\npeak_bytes=%zu\npredicted_peak_bytes=%zu\n"
               "predicted_peak_without_recompute=%zu\n"
               "pool_reserved_bytes=%zu\n"
               "param_bytes=%zu\nrss_before_bytes=%zu\nrss_peak_bytes=%zu\n"
               "recompute_flops_ratio=%.6f\nsegments=%d\ncheckpoints=%d\n",
               r.peak_bytes, c.sum.predicted_peak,
               c.sum.predicted_peak_without_recompute, r.reserved_bytes,
               c.param_bytes,
               r.rss_before, r.rss_peak,
               c.sum.forward_flops > 0
                   ? c.sum.recompute_flops / c.sum.forward_flops
                   : 0.0,
               c.sum.n_segments, c.sum.n_checkpoints);
    }
    free(r.times);
    memory_free(&mem);
    case_free(&c);
    return rc;
}

/* ------------------------------------------------------------------ rewrite */

/* N forward ops on a 16-element f32 vector, ending in a scalar sum:
 * chain:    p -> tanh -> tanh -> ... (N-1 tanh) -> sum
 * residual: h -> h + tanh(h) blocks ((N-1)/2 of them) -> sum
 * Differentiated with respect to the parameter p. */
static mg_status build_rewrite_graph(const char *shape, long n_ops,
                                     mg_graph **g_out, mg_tensor *p_out,
                                     mg_tensor *y_out) {
    mg_graph *g = mg_graph_new();
    if (!g) return MG_ERR_NOMEM;
    int64_t s[1] = {16};
    mg_tensor p = mg_param(g, "p", MG_F32, 1, s), h = p;
    if (!strcmp(shape, "chain"))
        for (long i = 0; i < n_ops - 1; i++) h = mg_tanh(g, h);
    else
        for (long i = 0; i < (n_ops - 1) / 2; i++)
            h = mg_add(g, h, mg_tanh(g, h));
    mg_tensor y = mg_sum(g, h, 0, NULL, 0);
    *g_out = g;
    *p_out = p;
    *y_out = y;
    if (y == MG_NO_TENSOR) {
        mg_graph_free(g);
        *g_out = NULL;
        return MG_ERR_NOMEM;
    }
    return MG_OK;
}

static int cmd_rewrite(int argc, char **argv) {
    const char *ops_s = "10000,100000,1000000", *shape_s = "chain,residual",
               *csv_path = NULL;
    long repeat = 5;
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            return 0;
        }
        if (!v) return usage_error("%s needs a value", a);
        if (!strcmp(a, "--ops")) ops_s = v;
        else if (!strcmp(a, "--shape")) shape_s = v;
        else if (!strcmp(a, "--csv")) csv_path = v;
        else if (!strcmp(a, "--repeat")) {
            if (!parse_long(v, 1, 100000, &repeat))
                return usage_error("bad --repeat '%s'", v);
        } else return usage_error("unknown option '%s' for rewrite", a);
    }
    long ops[BENCH_MAX_LIST];
    int n_ops = parse_int_list(ops_s, 3, 50000000L, ops, BENCH_MAX_LIST);
    if (n_ops < 1) return usage_error("bad --ops '%s' (integers >= 3)", ops_s);
    const char *shapes[2];
    int n_shapes = 0;
    {
        char buf[64];
        if (strlen(shape_s) >= sizeof buf)
            return usage_error("bad --shape '%s'", shape_s);
        strcpy(buf, shape_s);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if (n_shapes == 2) return usage_error("bad --shape '%s'", shape_s);
            if (!strcmp(tok, "chain")) shapes[n_shapes++] = "chain";
            else if (!strcmp(tok, "residual")) shapes[n_shapes++] = "residual";
            else
                return usage_error("bad --shape '%s' (chain, residual)",
                                   shape_s);
        }
        if (!n_shapes) return usage_error("bad --shape '%s'", shape_s);
    }
    FILE *csv = NULL;
    if (csv_path) {
        if (!(csv = fopen(csv_path, "w"))) {
            fprintf(stderr, "mg-bench: cannot write %s: %s\n", csv_path,
                    strerror(errno));
            return 1;
        }
        fputs("shape,ops,tensors,plan_steps,build_ms,gradients_ms,plan_ms,"
              "total_ms\n", csv);
    }
    printf("# mg-bench rewrite: median of %ld runs; gradients = mg_gradients "
           "(differentiate + rewrite, policy memory), plan = mg_plan_compile\n",
           repeat);
    printf("%-9s %9s %9s %9s %10s %12s %10s %10s\n", "shape", "ops",
           "tensors", "steps", "build_ms", "gradients_ms", "plan_ms",
           "total_ms");
    double *tb = malloc((size_t)repeat * sizeof *tb),
           *tg = malloc((size_t)repeat * sizeof *tg),
           *tp = malloc((size_t)repeat * sizeof *tp),
           *tt = malloc((size_t)repeat * sizeof *tt);
    int rc = 0;
    if (!tb || !tg || !tp || !tt) {
        rc = fail("rewrite", MG_ERR_NOMEM);
        goto out;
    }
    for (int si = 0; si < n_shapes; si++)
        for (int oi = 0; oi < n_ops; oi++) {
            int32_t n_tensors = 0, n_steps = 0;
            for (long k = 0; k < repeat; k++) {
                fprintf(stderr, "[rewrite] %s %ld ops: run %ld/%ld\n",
                        shapes[si], ops[oi], k + 1, repeat);
                mg_graph *g;
                mg_tensor p, y, gp;
                double t0 = now_ms();
                mg_status s = build_rewrite_graph(shapes[si], ops[oi], &g, &p,
                                                  &y);
                double t1 = now_ms();
                if (s != MG_OK) {
                    rc = fail("building the graph", s);
                    goto out;
                }
                mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
                s = mg_gradients(g, &y, 1, NULL, &p, 1, &ck, &gp);
                double t2 = now_ms();
                mg_plan *plan = NULL;
                mg_tensor outs[2] = {y, gp};
                if (s == MG_OK) s = mg_plan_compile(g, outs, 2, NULL, &plan);
                double t3 = now_ms();
                if (s != MG_OK) {
                    mg_graph_free(g);
                    rc = fail("differentiating and planning", s);
                    goto out;
                }
                tb[k] = t1 - t0;
                tg[k] = t2 - t1;
                tp[k] = t3 - t2;
                tt[k] = t3 - t1;
                n_tensors = mg_graph_num_tensors(g);
                n_steps = mg_plan_num_steps(plan);
                mg_plan_free(plan);
                mg_graph_free(g);
            }
            double mb = median(tb, (int)repeat), mgr = median(tg, (int)repeat),
                   mp = median(tp, (int)repeat), mt = median(tt, (int)repeat);
            printf("%-9s %9ld %9d %9d %10.1f %12.1f %10.1f %10.1f\n",
                   shapes[si], ops[oi], (int)n_tensors, (int)n_steps, mb, mgr,
                   mp, mt);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%s,%ld,%d,%d,%.3f,%.3f,%.3f,%.3f\n", shapes[si],
                        ops[oi], (int)n_tensors, (int)n_steps, mb, mgr, mp, mt);
        }
out:
    free(tb);
    free(tg);
    free(tp);
    free(tt);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "mg-bench: error writing %s\n", csv_path);
        rc = 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    if (argc < 2) return usage_error("no command given");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "depth")) return cmd_depth(argc - 2, argv + 2);
    if (!strcmp(cmd, "rewrite")) return cmd_rewrite(argc - 2, argv + 2);
    if (!strcmp(cmd, "step")) return cmd_step(argc - 2, argv + 2);
    return usage_error("unknown command '%s' (depth, rewrite, step)", cmd);
}
