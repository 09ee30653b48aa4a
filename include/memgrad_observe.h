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
    int step;                /* 0 .. n_steps - 1 */
    int n_steps;
    const char *op;          /* the op's name, e.g. "matmul" */
    mg_tensor tensor;        /* the tensor the step computes */
    const char *tensor_name; /* its name, or NULL */
    mg_phase phase;
    int is_checkpoint;       /* a checkpoint chosen or tagged for the
                                backward pass */
    size_t bytes_before, bytes_after;
    size_t workspace_bytes;  /* scratch lent for the op (size class) */
    double flops;            /* the op's cost model, as the plan report's */
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
mg_status mg_exec_observer_attach(mg_exec *ex, const mg_observer *obs,
                                  int *id);
/* Detach the observer with that handle; MG_ERR_UNKNOWN_ID if none. */
MG_API
mg_status mg_exec_observer_detach(mg_exec *ex, int id);

#ifdef __cplusplus
}
#endif
#endif
