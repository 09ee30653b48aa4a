/*
 * memgrad_observe.h - seeing inside a run (issue 15): observers attached to
 * an executor, called at the start and end of each run and before and after
 * each step, as Caffe2's observers are attached to a net and its operators.
 *
 * An observer is a struct of callbacks and a user pointer; any callback may
 * be NULL. Observers are called in the order they were attached. A callback
 * that returns anything but MG_OK stops the run: mg_exec_run returns that
 * status, every pool block the run holds is given back, and bound outputs
 * are untouched or hold their final value (the contract of mg_exec_run).
 * With no observer attached the executor tests one flag per step.
 *
 * Callbacks run on the thread that called mg_exec_run and must not call
 * mg_exec_run, mg_exec_observer_attach or mg_exec_observer_detach on the
 * same executor.
 */
#ifndef MEMGRAD_OBSERVE_H
#define MEMGRAD_OBSERVE_H

#include "memgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which part of a training step a step of the plan belongs to: an op of the
 * forward graph, a copy mg_gradients made to recompute a forward tensor
 * that was not kept, or an op of the gradient graph. */
typedef enum mg_phase {
    MG_PHASE_FORWARD = 0,
    MG_PHASE_RECOMPUTE = 1,
    MG_PHASE_BACKWARD = 2
} mg_phase;

/* "forward", "recompute", "backward" ("?" for anything else). */
MG_API
const char *mg_phase_name(mg_phase phase);

/* What an observer is told about one step. Bytes are pool bytes in use
 * (mg_pool_size_class units, as mg_pool_stats): bytes_before when the step
 * starts, bytes_after once its output is allocated and computed and its
 * workspace given back, before the buffers whose last reader it was are
 * released (those show in the next step's bytes_before). In before_op,
 * bytes_after is 0. */
typedef struct mg_step_info {
    const mg_plan *plan;
    int step; /* 0 .. n_steps - 1 */
    int n_steps;
    const char *op;          /* the op's name, e.g. "matmul" */
    mg_tensor tensor;        /* the tensor the step computes */
    const char *tensor_name; /* its name, or NULL */
    mg_phase phase;
    int is_checkpoint; /* a checkpoint chosen or tagged for the
                          backward pass */
    size_t bytes_before, bytes_after;
    size_t workspace_bytes; /* scratch lent for the op (size class) */
    double flops;           /* the op's cost model, as the plan report's */
    double bytes_moved;
} mg_step_info;

typedef struct mg_observer {
    void *user; /* passed back to every callback */
    mg_status (*run_start)(void *user, const mg_plan *plan);
    /* status: how the run went so far (MG_OK, or why it stopped). What
     * run_end returns is the run's status only when status is MG_OK. */
    mg_status (*run_end)(void *user, const mg_plan *plan, mg_status status);
    mg_status (*before_op)(void *user, const mg_step_info *info);
    mg_status (*after_op)(void *user, const mg_step_info *info);
} mg_observer;

/* Attach a copy of *obs to ex; *id (may be NULL) receives the handle that
 * mg_exec_observer_detach takes. */
MG_API
mg_status mg_exec_observer_attach(mg_exec *ex, const mg_observer *obs, int *id);
/* Detach the observer with that handle; MG_ERR_UNKNOWN_ID if none. */
MG_API
mg_status mg_exec_observer_detach(mg_exec *ex, int id);

/* ------------------------------------------------------------------ tensor
 * hooks, as PyTorch's register_hook: a callback on a tensor of the graph,
 * called during every run of a plan that computes it, right after the step
 * that computes it and before any step that reads it. `data` is the value
 * (mg_tensor_nbytes(g, t) bytes, in the executor's memory: host memory for
 * the CPU, device memory for CUDA).
 *
 * A hook belongs to the graph, not to a plan: register it before or after
 * mg_gradients and mg_plan_compile, it applies to every later run.
 *
 * A hook on a gradient tensor (one mg_gradients appended; grads_out, or the
 * gradient of an intermediate h obtained by listing h among the xs) may
 * replace the value by writing into data, e.g. to clip it: every step that
 * reads that tensor afterwards, the rest of the backward pass included,
 * sees the replacement. Gradient rules may pass one gradient tensor on
 * unchanged (add's gradient is its input's for both operands), so a
 * replacement reaches every reader of that tensor.
 *
 * A hook on a forward tensor must only read data. It is called once per
 * run, when the forward pass computes the tensor, even when a checkpoint
 * policy has the backward pass recompute it: the recomputed copy is a
 * tensor of its own (mg_tensor_is_recompute) and does not call the hook
 * again. So a hook sees each forward value exactly once per run, as in an
 * eager framework, whatever the policy. A recomputed copy cannot be hooked,
 * nor can an input or parameter (no step computes them: hook a gradient).
 *
 * A hook that returns anything but MG_OK stops the run as an observer does.
 */
typedef mg_status (*mg_tensor_hook_fn)(void *user, const mg_graph *g,
                                       mg_tensor t, void *data);

/* Register fn on t; *id (may be NULL) receives the handle that
 * mg_tensor_remove_hook takes. Hooks on one tensor run in the order added. */
MG_API
mg_status mg_tensor_add_hook(mg_graph *g, mg_tensor t, mg_tensor_hook_fn fn,
                             void *user, int *id);
MG_API
mg_status mg_tensor_remove_hook(mg_graph *g, int id);

/* ------------------------------------------------------------------ the
 * memory timeline: pool bytes in use step by step, as the plan predicts
 * them before anything runs (the simulation behind mg_plan_predicted_peak,
 * so the largest bytes_after + workspace_bytes is the predicted peak).
 * After a run, an observer's after_op records give the measured series in
 * the same struct, and they are equal step by step. */

/* Fill out[0 .. n_steps-1] with every step's description and its predicted
 * bytes_before and bytes_after (binds as for mg_plan_predicted_peak: caller-
 * bound outputs are not in the pool). Returns the number of steps, writing
 * at most cap records (out may be NULL when cap is 0), or -1 with the
 * error set. */
MG_API
int mg_plan_timeline(const mg_plan *p, const mg_binding *binds, int n_binds,
                     mg_step_info *out, int cap);
/* The timeline as CSV, a header then one row per step:
 *   step,phase,op,tensor,name,checkpoint,workspace_bytes,
 *   predicted_bytes_before,predicted_bytes_after,
 *   measured_bytes_before,measured_bytes_after
 * measured: NULL (its columns left empty), or the n_steps records an
 * observer's after_op saw in one run of p, in step order. */
MG_API
mg_status mg_plan_write_timeline(const mg_plan *p, const mg_binding *binds,
                                 int n_binds, const mg_step_info *measured,
                                 FILE *out);

/* ------------------------------------------------------------------ the
 * profiler, an observer: per step wall time (host clock around the kernel
 * launch: on CUDA, where kernels are asynchronous, a step's time is only
 * that of its launch), the op's flops and bytes moved (the cost model of
 * mg_plan_report), and pool bytes in use. It records every step of every
 * run while attached, until mg_profiler_reset. */
typedef struct mg_profiler mg_profiler;

MG_API
mg_status mg_profiler_new(mg_profiler **out);
MG_API
void mg_profiler_free(mg_profiler *prof); /* NULL is accepted */
/* The observer that feeds prof, for mg_exec_observer_attach. prof must
 * outlive the attachment. */
MG_API
mg_observer mg_profiler_observer(mg_profiler *prof);
/* Forget every recorded step. */
MG_API
void mg_profiler_reset(mg_profiler *prof);
/* Number of steps recorded (over all runs), 0 for NULL. */
MG_API
int mg_profiler_num_events(const mg_profiler *prof);
/* A table of the recorded steps summed by op kind and phase: count, wall
 * time (total and share), flops, bytes moved and the rates they give;
 * then one total per phase. */
MG_API
mg_status mg_profiler_print(const mg_profiler *prof, FILE *out);
/* The recorded steps as Chrome trace JSON ({"traceEvents": [...]}, the
 * format chrome://tracing and Perfetto open): one complete ("X") event per
 * step, on one track per phase, with its step, tensor, flops and bytes as
 * args, and a counter ("C") track "pool bytes in use" set at the start
 * and end of each step. Times in microseconds from the first run's start. */
MG_API
mg_status mg_profiler_write_trace(const mg_profiler *prof, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
