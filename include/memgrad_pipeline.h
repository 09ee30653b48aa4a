/*
 * memgrad_pipeline.h - pipeline-parallel training over MPI: a forward
 * graph is cut into S stages, one per rank of a communicator; a batch is
 * split into M microbatches that flow through the stages, activations
 * forward and their gradients back, as non-blocking MPI point-to-point
 * messages that move while the stages compute. Each stage has its own
 * plan, and that plan counts the microbatches the schedule keeps in flight
 * on the stage, so its predicted pool peak, its checkpoint policy and its
 * byte budget cover the whole stage, not one microbatch.
 *
 *   mg_dist_comm *c;                      // one rank per stage
 *   mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c);
 *   mg_pipe_options o = {.schedule = MG_PIPE_1F1B, .n_micro = 8,
 *                        .checkpoints = {.policy = MG_CKPT_MEMORY}};
 *   mg_pipe *p;
 *   mg_pipe_new(c, g, loss, NULL, 0, &o, &p); // cut automatically
 *   for (each step) {
 *       // binds: n_micro lists of n_binds bindings of g's leaves
 *       mg_status s = mg_pipe_step(p, binds, n_binds, seed, grads, n_grads,
 *                                  losses);
 *       if (s != MG_OK) ... // the same status on every rank
 *       ... update this stage's parameters with grads ...
 *   }
 *   mg_pipe_free(p);
 *
 * The stages. Stage s computes the ops of g between cut s - 1 and cut s;
 * the last stage ends with the loss. Each cut is one tensor of g that
 * separates it: every op after cut s that reads anything before it reads
 * only cut s itself (or leaves). A stage is a graph of its own (copies of
 * g's ops, mg_graph_copy_op): its leaves are the cut tensor arriving from
 * the previous stage (an input) and the inputs and parameters of g that
 * its ops read; its outputs are its cut tensor (or the loss) and the
 * gradients of its parameters and of its incoming cut, for which the
 * gradient of its outgoing cut arrives from the next stage as the seed
 * (mg_gradients' grad_ys). A parameter may be read by one stage only (tied
 * weights across stages are refused). Ops that read only leaves go to the
 * stage of their readers.
 *
 * Schedules. MG_PIPE_GPIPE runs all M forwards, then all M backwards, so
 * every stage holds the saved tensors of M microbatches at once.
 * MG_PIPE_1F1B (PipeDream-Flush) runs S - s - 1 forwards on stage s, then
 * alternates one forward and one backward, so stage s holds at most
 * min(S - s, M). Both run the backwards in microbatch order 0 .. M-1 and
 * sum each parameter's gradients in that order, so the gradients are the
 * same bits as one process that runs g's training plan on each microbatch
 * (seed + m for microbatch m) and sums them in that order into zeros.
 *
 * Memory. With k microbatches in flight the stage's pool peak is
 * (k - 1) x saved + pair (mg_phase_peaks of the stage's plan, its
 * gradients bound to memgrad_pipeline's buffers and its outgoing cut in
 * the pool): the predicted peak, which the pool's measured peak equals
 * (mg_pipe_stats). MG_CKPT_BUDGET's budget_bytes bounds that peak: of
 * the plans it tries (the budget policy with per-microbatch budgets
 * bisected below budget_bytes, and the memory and speed policies, which
 * save less per microbatch), the stage takes the one with the least
 * recomputation whose k microbatches fit. A max_bytes below
 * the predicted peak is refused when the pipeline is made.
 * Outside the pool each stage holds its parameters (caller memory) and
 * buffers of its own: k + 1 incoming activations, k incoming gradients,
 * two outgoing gradients, and two copies of its parameter gradients (this
 * microbatch's and the sum).
 *
 * Failures, as in memgrad_dist.h. A rank whose step fails (a missing
 * binding, an op that fails) goes on with the schedule without computing,
 * sending zeros in place of what it would have sent, and at the end every
 * rank returns MG_ERR_COMM naming the ranks that failed; no gradient
 * buffer is written, and the pipeline stays usable. A rank that stops
 * calling in makes its neighbours time out (mg_dist_options.timeout_s);
 * a rank that times out or meets an MPI error tells every other rank,
 * which then stop waiting, so every rank returns MG_ERR_COMM within about
 * the deadline. The communicator is then broken (mg_dist_comm_broken),
 * and the job should end (MPI_Abort).
 *
 * Data parallel too: split MPI_COMM_WORLD into pipelines (one rank per
 * stage) and replicas (the ranks of one stage), run a pipeline on each,
 * and average each stage's gradients over its replicas with mg_dist_buckets
 * on the replicas' communicator (mg_pipe_stage_params gives the tensors).
 *
 * Threads: the caller initialises MPI. A pipeline is used by one thread
 * at a time. CPU executors only. One pipeline at a time on a
 * communicator: two would share message tags (mg_dist_buckets on the same
 * communicator are fine: they use collectives only). docs/pipeline.md.
 */
#ifndef MEMGRAD_PIPELINE_H
#define MEMGRAD_PIPELINE_H

#include "memgrad_dist.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_pipe_schedule {
    MG_PIPE_GPIPE = 0, /* all forwards, then all backwards */
    MG_PIPE_1F1B = 1   /* one forward, one backward (PipeDream-Flush) */
} mg_pipe_schedule;

typedef struct mg_pipe_options {
    mg_pipe_schedule schedule;
    int n_micro; /* M >= 1 microbatches per step */
    /* The checkpoint policy of every stage. MG_CKPT_COLLECTION: the
     * tensors of g listed (and g's tagged ones) that fall in the stage.
     * MG_CKPT_BUDGET: budget_bytes bounds the stage's predicted pool peak
     * with its microbatches in flight (see Memory above). */
    mg_checkpoints checkpoints;
    size_t max_bytes; /* the executor's pool bound on every rank, 0: none */
    int num_threads;  /* as mg_exec_options.num_threads */
} mg_pipe_options;

typedef struct mg_pipe mg_pipe;

/* Choose n_stages - 1 cut tensors of g (the forward graph of loss) that
 * split it into stages of about equal weight, an op's weight being its
 * share of the flops plus its share of the activation bytes; written to
 * cuts_out in stage order. Only tensors that separate the graph are
 * candidates; MG_ERR_INVALID_ARG if there are fewer than n_stages - 1 of
 * them. No MPI needed. */
MG_API
mg_status mg_pipe_balance(const mg_graph *g, mg_tensor loss, int n_stages,
                          mg_tensor *cuts_out);

/* Check that cuts (n_cuts of them, in stage order) split g's forward graph
 * of loss into n_cuts + 1 stages, without making them: MG_OK, or a status
 * whose message names the tensor at fault (a cut that is a leaf, the loss
 * or not an ancestor of it, listed twice, or that does not separate the
 * graph: the op that reads past it; a parameter read by two stages). No
 * MPI needed. */
MG_API
mg_status mg_pipe_check_cuts(const mg_graph *g, mg_tensor loss,
                             const mg_tensor *cuts, int n_cuts);

/* Make this rank's stage (stage = rank in c) of a pipeline over c: split
 * g at cuts (NULL and n_cuts 0: mg_pipe_balance chooses them, the same on
 * every rank), differentiate the stage with opts->checkpoints, compile its
 * plan and executor. Collective over c: g, loss, cuts and opts must be the
 * same on every rank; n_cuts + 1 must be the size of c. The ranks compare
 * fingerprints of g (every tensor's op kind, attributes, dtype, shape and
 * inputs, and its checkpoint tags), of the cuts and the loss, and of opts
 * (all of it but max_bytes and num_threads, which bound or speed one
 * rank's executor without changing what it computes) before any
 * stage is made; where they differ every rank fails with
 * MG_ERR_INVALID_ARG naming the first rank that differs from rank 0 and
 * what differs ("the microbatch count (n_micro) (8 on rank 0, 4 on rank
 * 1)", "the graph's op kinds"). A rank whose arguments are bad fails with
 * its own status and message, every other rank with MG_ERR_COMM naming
 * it. g need not outlive the pipeline, which keeps copies of its stage. */
MG_API
mg_status mg_pipe_new(mg_dist_comm *c, const mg_graph *g, mg_tensor loss,
                      const mg_tensor *cuts, int n_cuts,
                      const mg_pipe_options *opts, mg_pipe **out);
/* NULL is accepted. Not collective. */
MG_API
void mg_pipe_free(mg_pipe *p);

/* This rank's stage (0 .. S-1), or -1 for NULL. */
MG_API
int mg_pipe_stage(const mg_pipe *p);
/* The parameters of g that this rank's stage reads, in g's id order:
 * writes up to cap of them to out (out may be NULL when cap is 0) and
 * returns how many there are, or -1 for NULL p. */
MG_API
int mg_pipe_stage_params(const mg_pipe *p, mg_tensor *out, int cap);
/* The cut tensors in use (n_stages - 1 of g's ids): as mg_pipe_stage_params. */
MG_API
int mg_pipe_cuts(const mg_pipe *p, mg_tensor *out, int cap);

/*
 * One training step over the pipeline's n_micro microbatches. Collective
 * over the pipeline's communicator.
 *   binds    n_micro lists of n_binds bindings each, microbatch m's at
 *            binds + m * n_binds: memory for g's inputs and parameters.
 *            Each rank reads only those its stage reads (a parameter may
 *            be bound to the same memory in every list).
 *   seed     microbatch m runs with seed + m (dropout).
 *   grads    n_grads bindings of g's parameters to gradient buffers. On
 *            success each of this stage's parameters gets the sum of its
 *            gradients over the microbatches, in order 0 .. M-1 (f32 or
 *            f64 adds into zeros); other entries are ignored, so one list
 *            serves every rank. Written on success only.
 *   losses   NULL, or n_micro doubles that the last stage fills with
 *            each microbatch's loss (other ranks leave it alone).
 * Returns MG_OK on every rank, or an error on every rank (see Failures).
 */
MG_API
mg_status mg_pipe_step(mg_pipe *p, const mg_binding *binds, int n_binds,
                       uint64_t seed, const mg_binding *grads, int n_grads,
                       double *losses);

typedef struct mg_pipe_stats {
    int stage, n_stages, n_micro;
    int in_flight;          /* k: most microbatches held at once */
    int n_ops;              /* ops in the stage's graph (forward) */
    mg_phase_peaks phases;  /* of one microbatch, as mg_plan_phase_peaks */
    size_t predicted_peak;  /* (k - 1) * phases.saved + phases.pair */
    size_t measured_peak;   /* the pool's peak over the last step */
    size_t budget_bytes;    /* the stage's budget (MG_CKPT_BUDGET), or 0 */
    size_t micro_budget;    /* what mg_gradients was given, or 0 */
    mg_ckpt_policy policy;  /* the stage's plan's: under MG_CKPT_BUDGET,
                               budget, memory or speed, whichever fits
                               with the least recomputation */
    double forward_flops;   /* the stage's, one microbatch */
    double step_seconds;    /* wall time of the last step */
    double compute_seconds; /* of it, in mg_exec_forward/backward */
    double wait_seconds;    /* of it, waiting for messages */
    uint64_t steps;         /* steps that returned MG_OK */
    uint64_t bytes_sent;    /* payload bytes sent, all steps */
} mg_pipe_stats;

MG_API
mg_status mg_pipe_get_stats(const mg_pipe *p, mg_pipe_stats *out);

#ifdef __cplusplus
}
#endif
#endif
