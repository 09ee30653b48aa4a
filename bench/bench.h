/*
 * bench.h - what the files of mg-bench share: the options of a subcommand,
 * one test case (bench_case, its caller memory and its step results), and
 * the helpers for usage and errors, parsing and measuring.
 *
 *   bench_util.c   usage and errors, parsing, measuring (clocks, median,
 *                  RSS, physical memory, BLAS info)
 *   bench_case.c   one test case: prepare, bind, memory, warm-up, timed step
 *   bench_device.c --device cuda: device buffers (alloc, upload, download,
 *                  free), device memory and name, CUDA-event timer
 *   cmd_depth.c    mg-bench depth
 *   cmd_rewrite.c  mg-bench rewrite
 *   cmd_step.c     mg-bench step
 *   cmd_observe.c  mg-bench observe (what an observer costs)
 *   cmd_budget.c   mg-bench budget
 *   cmd_attention.c mg-bench attention (fused vs composed attention)
 *   cmd_lce.c      mg-bench lce (linear + cross-entropy fused vs unfused)
 *   mg_bench.c     main() and the subcommand dispatch
 *   models.c       the models (models.h)
 */
#ifndef MG_BENCH_BENCH_H
#define MG_BENCH_BENCH_H

#include "models.h"

#include <stddef.h>
#include <stdio.h>

#define BENCH_MAX_LIST 64

/* ------------------------------------------------------------------ options */

/* The options depth and step share. */
typedef struct common_opts {
    const bench_model_spec *spec;
    long batch, width, repeat;
    size_t max_bytes;
    const char *csv;
    mg_device device; /* --device cpu|cuda */
    int compact;      /* --compact yes|no: mg_checkpoints.compact */
    int store16;      /* --store16 yes|no: mg_checkpoints.store16 */
    double dropout;   /* --dropout P: the model's dropout (mlp, transformer,
                         gpt); 0, none, by default */
    /* --model NAME and --depth N (1 .. 2^20): read only by the commands
     * that set a default (a name, a depth > 0); the others refuse them */
    const char *model;
    long depth;
    int no_fusion;    /* --fusion no: mg_plan_options.no_fusion */
    long seq;         /* --seq T: the gpt's sequence length; 0, its default */
} common_opts;

/* ------------------------------------------------------------ the commands */

int bench_cmd_depth(int argc, char **argv);
int bench_cmd_rewrite(int argc, char **argv);
int bench_cmd_step(int argc, char **argv);
int bench_cmd_observe(int argc, char **argv);
int bench_cmd_budget(int argc, char **argv);
int bench_cmd_attention(int argc, char **argv);
int bench_cmd_live(int argc, char **argv); /* cmd_live.c */
int bench_cmd_lce(int argc, char **argv);  /* cmd_lce.c */

/* ------------------------------------------------------ usage and errors */

void bench_usage_print(FILE *out);
/* Prints "mg-bench: <message>" and the short usage to stderr; returns 2. */
int bench_usage_error(const char *fmt, ...);
mg_status bench_builder_status(void);
/* Prints "mg-bench: what: status: mg_last_error()"; returns 1. */
int bench_fail(const char *what, mg_status s);
/* The model named `name` into *spec; else a usage error (2). */
int bench_model_check(const char *name, const bench_model_spec **spec);

/* ------------------------------------------------------------------ parsing */

int bench_long_parse(const char *s, long lo, long hi, long *out);
/* The option at argv[i] of a subcommand's --option value pairs: --help
 * prints the usage, a missing value is a usage error, and with o the
 * options depth and step share are parsed into it (bench_common_opt_parse).
 * BENCH_OPT_OWN with *opt and *value set when the option is for the
 * caller to read, BENCH_OPT_DONE when it is parsed, else the exit code (0
 * after --help, 2 after a usage error). */
enum { BENCH_OPT_DONE = -1, BENCH_OPT_OWN = -2 };
int bench_opt_next(int argc, char **argv, int i, struct common_opts *o,
                   const char **opt, const char **value);
/* The options depth and step share (--batch, --width, --repeat, --device,
 * --max-bytes, --compact, --dropout, --store16, and --model and --depth
 * where o has defaults for them): 1 if `opt` was one of them and `value` parsed
 * into o, 0 if `opt` is not one of them, or the exit code 2 after a usage
 * error. */
int bench_common_opt_parse(const char *opt, const char *value,
                           struct common_opts *o);
/* --opt yes|no into *flag (1, 0): 0, or the exit code 2 after a usage
 * error naming opt. */
int bench_yes_no_parse(const char *opt, const char *value, int *flag);
/* "8,16,1e4" -> up to cap integers in [lo, hi]; their count, or -1. */
int bench_int_list_parse(const char *s, long lo, long hi, long *out, int cap);
/* "512M", "2GiB", "1e9" -> bytes; 0 if not a positive size. */
int bench_bytes_parse(const char *s, size_t *out);
/* "none,memory" -> up to cap policies; their count, or -1. Names are
 * mg_ckpt_policy_name's. */
int bench_policy_list_parse(const char *s, mg_ckpt_policy *out, int cap);

/* --------------------------------------------------------------- measuring */

void bench_blas_info(char *buf, size_t len);
double bench_now_ms(void);
/* CPU time of the whole process (every thread), in ms. */
double bench_process_cpu_ms(void);
/* CPU time of the calling thread (user and system), in ms: on a loaded
 * machine, what one core spent, where wall time also counts waiting. */
double bench_cpu_ms(void);
/* The median of v[0..n-1]; NAN for n < 1 or without memory. */
double bench_median(const double *v, int n);
size_t bench_physical_memory(void);
size_t bench_proc_status_bytes(const char *key);
int bench_rss_peak_reset(void);
double bench_mib(size_t b);

/* ------------------------------------------------- the device (--device) */

/* "cpu" or "cuda" into *out; 0 if neither. */
int bench_device_parse(const char *s, mg_device *out);
const char *bench_device_str(mg_device d);
/* 0 if a command can run on d. Else prints why (a build without CUDA, no
 * device: mg_last_error() of mg_exec_new) to stderr and returns 2. */
int bench_device_check(mg_device d);
/* Device memory (cudaMalloc); NULL, with a message, on failure or in a
 * build without CUDA. */
void *bench_device_alloc(size_t n);
/* cudaMemcpy host to device / device to host; 0, with a message, on
 * failure. */
int bench_device_upload(void *dst, const void *src, size_t n);
int bench_device_download(void *dst, const void *src, size_t n);
void bench_device_free(void *p);
/* Total memory of the current device; 0 without one. */
size_t bench_device_memory(void);
/* --max-bytes by default: half of d's memory (physical memory for the CPU,
 * or if the device's cannot be read). */
size_t bench_default_max_bytes(mg_device d);
/* "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" or "no CUDA device". */
void bench_device_info(char *buf, size_t len);
/* CUDA events on the legacy default stream around a step: start returns 0
 * on failure, stop the elapsed ms (NAN on failure). */
int bench_device_timer_start(void);
double bench_device_timer_stop(void);
void bench_device_timer_free(void);

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
    mg_binding *binds; /* to a bench_memory, once it exists */
    int n_binds;
    mg_exec *ex;
    mg_device device; /* of the executor: bench_memory's, at warm-up */
} bench_case;

/* Caller memory for one model shape; shared by every policy of a depth
 * (the loss is written by each run in turn). With device MG_DEVICE_CUDA
 * (bench_memory_to_device) inputs, params and grads are device pointers
 * and the runs write the loss to loss_dev; bench_case_warm_up copies it to
 * loss. */
typedef struct bench_memory {
    void *inputs[2];
    void **params, **grads;
    int n_params;
    float loss;
    mg_device device;
    void *loss_dev;
} bench_memory;

typedef struct step_result {
    double time_ms_median;
    double *times;       /* repeat entries, wall clock around mg_exec_run */
    double *event_times; /* on a CUDA device: CUDA events, else NULL */
    double cpu_ms_total; /* the process's CPU time over the timed steps:
                          * on a loaded machine wall time includes waiting
                          * for a core */
    size_t peak_bytes;
    size_t reserved_bytes; /* the pool's reservation after the first step */
    size_t rss_before, rss_peak;
    float loss;
} step_result;

/* The case setup every model command shares, after its options: the model
 * named `model` into o->spec (else a usage error), --batch and --width
 * from its defaults where not given, o->device checked
 * (bench_device_check) and --max-bytes defaulted to half of its memory
 * where not given. 0, or the exit code. */
int bench_case_setup(const char *model, common_opts *o);
/* The model's shape at `depth`, with o's batch and width. */
bench_model_cfg bench_case_cfg(const common_opts *o, long depth);
/* "<prefix> refused: predicted peak ... exceeds --max-bytes ..." on
 * stderr, for a case whose bench_case_need passes max_bytes. */
void bench_case_refusal_print(const char *prefix, const bench_case *c,
                              size_t max_bytes);
/* A case ready to run on o->device: prepared under `policy` (else
 * "building the model" fails), refused when max_bytes is not 0 and its
 * need exceeds it, its memory allocated (bench_memory_alloc: `load` or the
 * model's initialisation) and moved to the device. 0 with c and mem ready,
 * else the exit code with both freed. */
int bench_case_open(const common_opts *o, const bench_model_cfg *cfg,
                    mg_ckpt_policy policy, const char *load, size_t max_bytes,
                    bench_case *c, bench_memory *mem);
mg_status bench_case_prepare(const bench_model_spec *spec,
                             const bench_model_cfg *cfg, mg_ckpt_policy policy,
                             bench_case *c);
/* The same with every field of mg_checkpoints (MG_CKPT_BUDGET's budget). */
mg_status bench_case_prepare_ckpt(const bench_model_spec *spec,
                                  const bench_model_cfg *cfg,
                                  const mg_checkpoints *ckpt, bench_case *c);
void bench_case_free(bench_case *c);
size_t bench_case_need(const bench_case *c);
mg_status bench_case_bind(const bench_case *c, bench_memory *mem,
                          mg_binding **binds_out, int *n_out);
int bench_memory_alloc(const bench_case *c, bench_memory *mem,
                       const char *load);
/* Moves mem (host memory from bench_memory_alloc) to device d: device
 * buffers with the same contents, gradients zeroed; no-op for the CPU. */
int bench_memory_to_device(const bench_case *c, bench_memory *mem, mg_device d);
/* Gradient i into host memory dst (a copy from the device when there). */
int bench_memory_grad_to_host(const bench_case *c, const bench_memory *mem,
                              int i, void *dst);
void bench_memory_free(bench_memory *mem);
mg_status bench_case_warm_up(bench_case *c, bench_memory *mem, int repeat,
                             step_result *r);
mg_status bench_case_timed_step(bench_case *c, int k, step_result *r);

#endif
