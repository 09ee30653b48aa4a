/*
 * checkmate_milp.h - an exact reference for MG_CKPT_BUDGET on small
 * training graphs (issue 17): Checkmate's rematerialization MILP (Jain et
 * al., MLSys 2020) over memgrad's training DAG, solved with GLPK, and the
 * memory model both memgrad's plans and the MILP's schedules are measured
 * in. A test oracle (tests/oracle/, beside the tests that trust it):
 * tests/test_checkmate.c checks the budget policy against it, and the
 * bench tool mg-checkmate (bench/milp/checkmate.c) measures the gap with
 * it; public memgrad API only, no memgrad internals.
 *
 * The DAG. A compiled training plan's steps, in the plan's order, with
 * every recomputed copy mapped to its forward source (followed through
 * copies of copies): the non-recompute steps are the DAG's ops v_0..v_{n-1}
 * in that order, which is topological. Each op has a cost (its flops, the
 * cost model mg_plan_summarize and mg_plan_timeline use), a size (the
 * bytes of its output in mg_pool_size_class units; 0 for an output bound
 * to caller memory: the loss and the gradients, as memgrad's pool counts
 * them), a workspace (the scratch its kernel borrows, size-class rounded,
 * as mg_plan_timeline reports it), and its computed inputs. Leaves (inputs,
 * parameters, targets, constants) are caller memory or constant: no op, not
 * counted.
 *
 * The memory model. A schedule is a sequence of op evaluations; an
 * evaluation's output is live from that evaluation until the last
 * evaluation that reads it (the latest evaluation of an op is the one its
 * readers read), or its own evaluation when nothing reads it. At each
 * evaluation the bytes in use are the live outputs' (its own allocated,
 * nothing freed yet) plus its workspace; the peak is their maximum. This
 * is the simulation behind memgrad's mg_plan_predicted_peak, so a plan's
 * peak in its own order is its predicted pool peak.
 *
 * Schedules in Checkmate's stage form: R[t*n+i] != 0 when stage t
 * evaluates v_i (i <= t, R[t*n+t] != 0); a stage evaluates its ops in index
 * order. A memgrad plan maps onto this form: each recompute step belongs to
 * the stage of the next non-recompute step.
 *
 * Compact inputs (issue 29: the third choice). A plan compiled with
 * mg_checkpoints.compact has pack ops (mg_tensor_is_pack: a relu's sign
 * bits, a max pool's argmax) right after the tensors they encode, and
 * backward readers of the packs. The DAG gives each such reader v_j two
 * ways to run: reading the pack (in_form 1) or reading the pack's whole
 * source instead (in_form 2), as the reader's whole-tensor op would; its
 * other inputs (in_form 0) it reads either way. In stage form R[t*n+j] is
 * 1 for an evaluation that reads the packs and 2 for one that reads the
 * sources; ops without such a pair take 1 only. So for every tensor with a
 * compact encoding a schedule chooses to keep it whole, to keep its pack,
 * or to recompute it (and read it whole, or pack it again), each with its
 * exact pool bytes. A pack is a forward op of its own stage either way (a
 * schedule that reads only whole sources still evaluates it there once;
 * unread, its output is freed at once).
 */
#ifndef MG_TESTS_ORACLE_CHECKMATE_MILP_H
#define MG_TESTS_ORACLE_CHECKMATE_MILP_H

#include "memgrad.h"
#include "memgrad_models.h"

#include <stdbool.h>
#include <stddef.h>

/* The message of the last failure of an mgi_ckm_ function (a memgrad
 * call's mg_last_error() included). */
const char *mgi_ckm_last_error(void);

typedef struct mgi_ckm_dag {
    int n;          /* ops v_0 .. v_{n-1}, topological */
    double *cost;   /* flops of each op */
    double *mem;    /* bytes of each op's output, 0 if caller memory */
    double *work;   /* workspace bytes of each op */
    bool *backward; /* added by mg_gradients (never recomputed) */
    int *in_start;  /* distinct computed inputs of v_j: */
    int *in;        /*   in[in_start[j] .. in_start[j+1]-1], all < j */
    /* How v_j reads each input (parallel to in): 0 always; 1 only when the
     * evaluation reads its packs, 2 only when it reads their whole sources
     * instead (see "Compact inputs" above). */
    unsigned char *in_form;
    int n_alt;            /* ops with such a pair of inputs */
    mg_tensor *tensor;    /* v_j's tensor in the graph of the plan */
    double forward_flops; /* sum of the forward ops' cost */
} mgi_ckm_dag;

void mgi_ckm_dag_free(mgi_ckm_dag *d); /* NULL and zeroed dags accepted */

/*
 * The DAG of a compiled plan p of graph g (binds as mg_plan_summarize:
 * bound outputs take no memory). On success *d is filled; R, when not NULL,
 * receives p's own schedule in stage form (n*n bytes, caller frees), and
 * order_peak, when not NULL, the peak of p's steps in their own order
 * under the memory model. Fails with MG_ERR_INVALID_ARG when a recompute
 * step cannot be placed in a stage (none follows it, or its op is already
 * evaluated in that stage).
 */
mg_status mgi_ckm_dag_from_plan(const mg_graph *g, const mg_plan *p,
                                const mg_binding *binds, int n_binds,
                                mgi_ckm_dag *d, unsigned char **R,
                                double *order_peak);

/* What a stage-form schedule costs and needs. */
typedef struct mgi_ckm_eval {
    double recompute_flops; /* sum of the off-diagonal R's costs */
    double peak;            /* bytes, under the memory model */
    int n_recompute;        /* off-diagonal evaluations */
} mgi_ckm_eval;

/*
 * Check that R (n*n) is a valid stage-form schedule of d: lower triangular,
 * R[t,t] = 1, no backward op evaluated outside its own stage (unless
 * recompute_backward), and every evaluation's inputs evaluated before it;
 * then measure it. Fails with MG_ERR_INVALID_ARG naming the first
 * violation.
 */
mg_status mgi_ckm_evaluate(const mgi_ckm_dag *d, const unsigned char *R,
                           bool recompute_backward, mgi_ckm_eval *out);

/*
 * Check the MILP's own account of a schedule: R as mgi_ckm_evaluate, and S
 * (n*n, S[t*n+i] = 1: v_i's output is held from stage t-1 into stage t)
 * strictly lower triangular, S[0,*] = 0, S[t+1,i] <= S[t,i] + R[t,i], and
 * every input i of an evaluation of v_j in stage t evaluated earlier in
 * that stage (R[t,i], i < j) or held into it (S[t,i]). Fails with
 * MG_ERR_INVALID_ARG naming the first violation.
 */
mg_status mgi_ckm_check_held(const mgi_ckm_dag *d, const unsigned char *R,
                             const unsigned char *S);

typedef enum mgi_ckm_outcome {
    MGI_CKM_OPTIMAL = 0,    /* proven optimal */
    MGI_CKM_FEASIBLE = 1,   /* time limit: best schedule found, and a bound */
    MGI_CKM_INFEASIBLE = 2, /* proven: no schedule fits the budget */
    MGI_CKM_NO_SOLUTION = 3 /* time limit before any schedule: bound only */
} mgi_ckm_outcome;

const char *mgi_ckm_outcome_name(mgi_ckm_outcome o);

typedef struct mgi_ckm_options {
    double time_limit_s; /* GLPK's tm_lim; <= 0: none */
    /* Branch-and-bound nodes before GLPK stops (0: no limit): a limit
     * that does not depend on the machine's load, as the wall-clock one
     * does (the outcome past it is as past the time limit). */
    long node_limit;
    /* CPU seconds of this process's solve before GLPK stops (0: no
     * limit), checked between branch-and-bound events: on a loaded
     * machine the wall-clock limit gives a solve a varying share of a
     * core, this one the same work. Past it, as past the time limit. */
    double cpu_limit_s;
    /* A schedule of the DAG (stage form, n*n) that GLPK is offered as its
     * first integer solution, e.g. the budget policy's own; NULL: none.
     * Taken only where it fits the budget (mgi_ckm_result.start_used). */
    const unsigned char *start;
    /* Allow recomputing backward ops (memgrad's rewriter never does; off
     * is the fair comparison). */
    bool recompute_backward;
    /* mg-checkmate only: bisect the MILP's smallest feasible budget */
    bool bisect;
    bool at_budget; /* mg-checkmate only: also solve at the budget */
    /* mg-checkmate only: plans with mg_checkpoints.compact, the MILP with
     * the compact choice (and at each budget also without it) */
    bool compact;
    /* The solver: GLPK (the default, always built) or COIN-OR CBC
     * (Debian's coinor-libcbc-dev, where CMake found it: much stronger on
     * the DAGs with branches, where GLPK's bound stalls). Both solve the
     * same problem; time, CPU and node limits apply to either. */
    enum { MGI_CKM_GLPK = 0, MGI_CKM_CBC = 1 } solver;
    int threads; /* CBC's threads (0, 1: one; nondeterministic above) */
} mgi_ckm_options;

typedef struct mgi_ckm_result {
    mgi_ckm_outcome outcome;
    double recompute_flops; /* the schedule's (OPTIMAL, FEASIBLE) */
    double bound_flops;     /* a proven lower bound on the optimum */
    double seconds;         /* wall time of glp_intopt */
    double milp_peak;       /* max U of the solution, bytes */
    int n_rows, n_cols, n_binaries;
    int start_used;       /* 1: GLPK took options.start, -1: refused, 0: none */
    unsigned char *R, *S; /* n*n each (OPTIMAL, FEASIBLE); caller frees */
} mgi_ckm_result;

/*
 * Build Checkmate's MILP for d at `budget` bytes and solve it with
 * glp_intopt (presolve on), or with CBC under o->solver (MG_ERR_UNSUPPORTED
 * where it was not built in). GLPK prints nothing, and its fatal errors come
 * back as MG_ERR_INTERNAL (glp_error_hook) instead of aborting. On MG_OK
 * *r holds the outcome; free r->R and r->S.
 */
mg_status mgi_ckm_solve(const mgi_ckm_dag *d, double budget,
                        const mgi_ckm_options *o, mgi_ckm_result *r);

/* ---- small training graphs for the tool and the test */

#define MGI_CKM_MAX_PARAMS 128

typedef struct mgi_ckm_net {
    mg_graph *g;     /* owned, unless model is set */
    mg_model *model; /* when built by a memgrad_models.h builder: owned */
    mg_tensor loss;
    mg_tensor leaves[MGI_CKM_MAX_PARAMS + 2]; /* inputs, targets, params */
    int n_leaves;
    mg_tensor grads[MGI_CKM_MAX_PARAMS];
    int n_grads;
} mgi_ckm_net;

/* x [batch, widths[0]] -> (matmul w_l -> tanh)^layers -> mse against a
 * target [batch, widths[layers]], with gradients of the weights under c
 * (NULL: plain backprop). layers in 1..16. */
mg_status mgi_ckm_net_chain(int layers, const int *widths, int batch,
                            const mg_checkpoints *c, mgi_ckm_net *net);

/* Take m (a memgrad_models.h model; owned by net from then on, freed with
 * it, also on failure) and differentiate it under c. */
mg_status mgi_ckm_net_model(mg_model *m, const mg_checkpoints *c,
                            mgi_ckm_net *net);

/* Compile net's loss and gradients, all bound to caller memory (as the
 * budget policy counts them), and fill binds (net->n_leaves + 1 +
 * net->n_grads entries, pointing at one dummy buffer: nothing runs). */
mg_status mgi_ckm_net_plan(const mgi_ckm_net *net, mg_plan **p,
                           mg_binding *binds, int *n_binds);

void mgi_ckm_net_free(mgi_ckm_net *net);

/* One training step's plan on its DAG, for the tool and the test alike:
 * the net compiled (mgi_ckm_net_plan), summarised, mapped
 * (mgi_ckm_dag_from_plan) and measured (mgi_ckm_evaluate). */
typedef struct mgi_ckm_planned {
    mgi_ckm_net net;
    mg_plan *plan;
    mg_binding binds[2 * MGI_CKM_MAX_PARAMS + 4];
    int n_binds;
    mg_plan_summary sum;
    mgi_ckm_dag dag;
    unsigned char *R;  /* the plan's schedule in stage form */
    mgi_ckm_eval eval; /* ... measured in the memory model */
    double order_peak; /* the plan's own order, same model */
} mgi_ckm_planned;

/* p->net as built by one of the builders above (its status in built): the
 * rest of p. A builder's status other than MG_OK is returned as it is (the
 * budget policy's MG_ERR_NOMEM: no plan fits). On failure p is freed and
 * zeroed. */
mg_status mgi_ckm_planned_finish(mg_status built, mgi_ckm_planned *p);
void mgi_ckm_planned_free(mgi_ckm_planned *p); /* zeroed ones accepted */

#endif
