/*
 * pipeline.c - pipeline-parallel training over MPI (memgrad_pipeline.h):
 * each rank differentiates and plans its own stage, counting the
 * microbatches its schedule keeps in flight, and runs GPipe or 1F1B with
 * the forward and backward phases of that plan (mg_exec_forward,
 * mg_exec_backward), activations and gradients moving between neighbours
 * as MPI_Isend / MPI_Irecv posted ahead of the compute that needs them.
 * Waits have the communicator's deadline; a rank that gives up tells the
 * others (a one-int message on a tag of its own), and the step ends with
 * the status agreement of comm.c.
 */
#include "pipeline.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Message tags: microbatch m's activation 2m, its gradient 2m + 1; the
 * "I gave up" message the largest tag MPI always allows. */
#define TAG_ABORT 32767
#define MG_PIPE_MAX_MICRO 16000

struct mg_pipe {
    mg_dist_comm *c;
    int stage, n_stages, n_micro, in_flight;
    mg_pipe_schedule schedule;
    mgi_pipe_stage_graph st;
    mg_tensor *cuts;
    int n_cuts;
    mg_tensor gin;     /* the seed: gradient of y (not on the last stage) */
    mg_tensor gact;    /* gradient of act_in (not on stage 0) */
    mg_tensor *p_grad; /* per parameter, its gradient in the stage graph */
    mg_plan *plan;
    mg_exec *ex;
    int observer_id;
    mg_phase_peaks pk;
    size_t predicted, budget, micro_budget;
    mg_ckpt_policy chosen; /* the policy the stage's plan was made with */
    /* buffers */
    size_t act_bytes, y_bytes;
    int n_act, n_gin;
    void **act, **gin_buf, *gact_buf[2], *zeros;
    MPI_Request *act_req, *gin_req, gact_req[2], *y_req;
    mg_saved **saved;
    void **gtmp, **gacc;
    size_t *gbytes;
    mg_dtype *gdt;
    mg_binding *sb; /* scratch: one microbatch's bindings of the stage */
    int abort_val, abort_in;
    MPI_Request abort_req;
    bool abort_posted;
    mg_pipe_stats stats;
};

/* ------------------------------------------------------------ messages */

/* Cancel posted receives and complete them: a receive that was already
 * matched finishes into its buffer now, not after the buffer is freed
 * (MPI_Request_free would let it land later). Completing a cancelled
 * receive is local, so this does not wait on a dead peer. */
static void cancel_all(MPI_Request *r, int n) {
    for (int i = 0; i < n; i++)
        if (r[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&r[i]);
            MPI_Wait(&r[i], MPI_STATUS_IGNORE);
        }
}

/* Give up: tell every other rank (never waited for), drop what is posted,
 * and break the communicator. */
static void pipe_give_up(mg_pipe *p) {
    mg_dist_comm *c = p->c;
    p->abort_val = c->rank;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        MPI_Request q;
        if (MPI_Isend(&p->abort_val, 1, MPI_INT, r, TAG_ABORT, c->comm, &q) ==
            MPI_SUCCESS)
            MPI_Request_free(&q);
    }
    if (p->act_req) cancel_all(p->act_req, p->n_act);
    if (p->gin_req) cancel_all(p->gin_req, p->n_gin);
}

/* Let MPI move what is posted (it progresses only inside MPI calls). */
static void pipe_progress(mg_pipe *p) {
    int done;
    if (p->act_req)
        MPI_Testall(p->n_act, p->act_req, &done, MPI_STATUSES_IGNORE);
    if (p->gin_req)
        MPI_Testall(p->n_gin, p->gin_req, &done, MPI_STATUSES_IGNORE);
    if (p->y_req) MPI_Testall(p->n_micro, p->y_req, &done, MPI_STATUSES_IGNORE);
    MPI_Testall(2, p->gact_req, &done, MPI_STATUSES_IGNORE);
}

static mg_status progress_after_op(void *user, const mg_step_info *info) {
    (void)info;
    pipe_progress(user);
    return MG_OK;
}

/* Wait for n requests with the communicator's deadline, watching for
 * another rank giving up. */
static mg_status pipe_wait(mg_pipe *p, const char *who, MPI_Request *reqs,
                           int n, const char *what, int peer) {
    mg_dist_comm *c = p->c;
    double t0 = mgi_dist_now();
    double deadline = c->timeout_s < 0 ? -1 : t0 + c->timeout_s;
    mg_status s = MG_OK;
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            s = mgi_dist_mpi_fail(c, who, "MPI_Testall", rc);
            pipe_give_up(p);
            break;
        }
        if (done) break;
        int got = 0;
        MPI_Status st;
        rc = p->abort_posted ? MPI_Test(&p->abort_req, &got, &st) : MPI_SUCCESS;
        if (rc == MPI_SUCCESS && got) {
            p->abort_posted = false;
            mgi_dist_break(c, "rank %d gave up", st.MPI_SOURCE);
            s = mg_set_error(MG_ERR_COMM,
                             "%s: rank %d (stage %d): rank %d gave up (it "
                             "timed out or met an MPI error) while this rank "
                             "waited for %s from rank %d",
                             who, c->rank, p->stage, st.MPI_SOURCE, what, peer);
            pipe_give_up(p);
            break;
        }
        if (deadline >= 0 && mgi_dist_now() > deadline) {
            mgi_dist_break(c, "timed out after %g s waiting for other ranks",
                           c->timeout_s);
            s = mg_set_error(MG_ERR_COMM,
                             "%s: rank %d (stage %d): timed out after %g s "
                             "waiting for %s from rank %d (it failed or "
                             "stopped calling in)",
                             who, c->rank, p->stage, c->timeout_s, what, peer);
            pipe_give_up(p);
            break;
        }
        if (polls > 2000) {
            struct timespec ts = {0, 50 * 1000}; /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
    p->stats.wait_seconds += mgi_dist_now() - t0;
    return s;
}

/* ------------------------------------------------------------ making one */

static void stage_plan_free(mg_pipe *p) {
    mg_plan_free(p->plan);
    p->plan = NULL;
    mgi_pipe_stage_free(&p->st);
    free(p->p_grad);
    p->p_grad = NULL;
}

/* Under MG_CKPT_COLLECTION, the listed tensors of g that this stage
 * computes, as the stage graph's tensors: *coll (the caller frees it)
 * becomes k's list. */
static mg_status stage_collection(const mg_pipe *p, const mgi_pipe_split *sp,
                                  const mg_checkpoints *ck, const char *who,
                                  mg_tensor **coll, mg_checkpoints *k) {
    const mgi_pipe_stage_graph *st = &p->st;
    *coll = malloc(((size_t)ck->n_tensors + 1) * sizeof **coll);
    if (!*coll) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    int nc = 0;
    for (int i = 0; i < ck->n_tensors; i++) {
        mg_tensor t = ck->tensors[i];
        if (t >= 0 && t < sp->n && st->map[t] != MG_NO_TENSOR &&
            (p->stage == 0 || t != p->cuts[p->stage - 1]) &&
            st->map[t] != st->y && !sp->is_leaf[t])
            (*coll)[nc++] = st->map[t];
    }
    k->tensors = *coll;
    k->n_tensors = nc;
    return MG_OK;
}

/* The stage plan's phase peaks into p->pk with the gradients (outs[1..])
 * bound, as the pipeline's buffers are, and the outgoing cut (outs[0]) in
 * the pool: the data pointers are not read. */
static mg_status stage_peaks(mg_pipe *p, const mg_tensor *outs, int n_out,
                             const char *who) {
    static char dummy[8];
    mg_binding *b = malloc((size_t)n_out * sizeof *b);
    if (!b) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 1; i < n_out; i++) b[i - 1] = (mg_binding){outs[i], dummy};
    mg_status s = mg_plan_phase_peaks(p->plan, b, n_out - 1, &p->pk);
    free(b);
    return s;
}

/* Build stage s's graph, its gradients (with micro_budget for
 * MG_CKPT_BUDGET), its plan and its phase peaks; p->predicted gets the
 * stage's peak with p->in_flight microbatches. */
static mg_status stage_plan(mg_pipe *p, const mg_graph *g,
                            const mgi_pipe_split *sp, mg_tensor loss,
                            const mg_checkpoints *ck, size_t micro_budget,
                            const char *who) {
    mg_status s =
        mgi_pipe_stage_build(g, sp, loss, p->cuts, p->stage, who, &p->st);
    if (s != MG_OK) return s;
    mgi_pipe_stage_graph *st = &p->st;
    int last = p->stage == p->n_stages - 1;
    p->gin = p->gact = MG_NO_TENSOR;
    if (!last) {
        int nd;
        int64_t shape[MG_MAX_DIMS];
        mg_dtype dt;
        mg_tensor_shape(st->g, st->y, &nd, shape);
        mg_tensor_dtype(st->g, st->y, &dt);
        p->gin = mg_input(st->g, "pipe.grad_in", dt, nd, shape);
        if (p->gin == MG_NO_TENSOR) return mg_last_status();
    }
    int n_xs = st->n_params + (st->act_in != MG_NO_TENSOR);
    if (n_xs == 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: stage %d reads no parameter: move cut %d "
                            "later",
                            who, p->stage, p->stage);
    mg_tensor *xs = malloc((size_t)n_xs * sizeof *xs);
    mg_tensor *gout = malloc((size_t)n_xs * sizeof *gout);
    mg_tensor *outs = malloc(((size_t)n_xs + 1) * sizeof *outs);
    mg_tensor *coll = NULL;
    p->p_grad = malloc(((size_t)st->n_params + 1) * sizeof *p->p_grad);
    if (!xs || !gout || !outs || !p->p_grad) {
        s = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        goto done;
    }
    for (int i = 0; i < st->n_params; i++) xs[i] = st->p_st[i];
    if (st->act_in != MG_NO_TENSOR) xs[st->n_params] = st->act_in;
    mg_checkpoints k = *ck;
    if (k.policy == MG_CKPT_COLLECTION &&
        (s = stage_collection(p, sp, ck, who, &coll, &k)) != MG_OK)
        goto done;
    if (k.policy == MG_CKPT_BUDGET) k.budget_bytes = micro_budget;
    mg_tensor ys[1] = {st->y}, gys[1] = {p->gin};
    s = mg_gradients(st->g, ys, 1, last ? NULL : gys, xs, n_xs, &k, gout);
    if (s != MG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", mg_last_error());
        s = mg_set_error(s, "%s: stage %d: %s", who, p->stage, why);
        goto done;
    }
    int n_out = 0;
    outs[n_out++] = st->y;
    for (int i = 0; i < st->n_params; i++) {
        p->p_grad[i] = gout[i];
        outs[n_out++] = gout[i];
    }
    if (st->act_in != MG_NO_TENSOR) {
        p->gact = gout[st->n_params];
        outs[n_out++] = p->gact;
    }
    mg_plan_options po = {.budget_bytes =
                              k.policy == MG_CKPT_BUDGET ? micro_budget : 0};
    s = mg_plan_compile(st->g, outs, n_out, &po, &p->plan);
    if (s != MG_OK) goto done;
    if ((s = stage_peaks(p, outs, n_out, who)) != MG_OK) goto done;
    p->predicted = (size_t)(p->in_flight - 1) * p->pk.saved + p->pk.pair;
done:
    free(xs);
    free(gout);
    free(outs);
    free(coll);
    return s;
}

/* Plan the stage with policy `pol` (micro budget b for MG_CKPT_BUDGET)
 * and say whether its peak fits `budget`, with its recomputed flops.
 * MG_ERR_NOMEM from mg_gradients (b below one microbatch's need) is a
 * plan that does not fit. The plan is freed again. */
static mg_status try_plan(mg_pipe *p, const mg_graph *g,
                          const mgi_pipe_split *sp, mg_tensor loss,
                          const mg_checkpoints *ck, mg_ckpt_policy pol,
                          size_t b, size_t budget, bool *fits,
                          double *recompute, size_t *least, const char *who) {
    mg_checkpoints k = *ck;
    k.policy = pol;
    *fits = false;
    mg_status s = stage_plan(p, g, sp, loss, &k, b, who);
    if (s == MG_OK) {
        mg_plan_summary sum;
        s = mg_plan_summarize(p->plan, NULL, 0, &sum);
        *recompute = sum.recompute_flops;
        if (p->predicted < *least) *least = p->predicted;
        *fits = s == MG_OK && p->predicted <= budget;
    } else if (s == MG_ERR_NOMEM) {
        s = MG_OK;
    }
    stage_plan_free(p);
    return s;
}

/* MG_CKPT_BUDGET for a stage: among the checkpoint plans tried, the one
 * with the least recomputation whose stage peak, with the stage's
 * microbatches in flight, fits budget_bytes. Tried: the budget policy with
 * per-microbatch budgets bisected between 0 and budget_bytes (to 1/256 of
 * it; the largest that fits), and the memory and speed policies, whose
 * plans save less per microbatch than the budget policy's for one
 * microbatch at the same peak: with many microbatches in flight the saved
 * state, not one microbatch's peak, is what counts. */
static mg_status stage_plan_budget(mg_pipe *p, const mg_graph *g,
                                   const mgi_pipe_split *sp, mg_tensor loss,
                                   const mg_checkpoints *ck, const char *who) {
    size_t budget = ck->budget_bytes, lo = 0, hi = budget, least = SIZE_MAX;
    mg_ckpt_policy best_pol = MG_CKPT_BUDGET;
    size_t best_b = 0;
    double best_rc = -1, rc = 0;
    bool fits, any = false;
    mg_status s;
    for (int tries = 0; tries < 40; tries++) {
        size_t b = tries == 0 ? hi : lo + (hi - lo) / 2;
        s = try_plan(p, g, sp, loss, ck, MG_CKPT_BUDGET, b, budget, &fits, &rc,
                     &least, who);
        if (s != MG_OK) return s;
        if (fits) {
            if (!any || rc < best_rc) {
                best_rc = rc;
                best_b = b;
            }
            any = true;
            lo = b;
            if (tries == 0) break;
        } else {
            hi = b;
        }
        if (hi - lo <= budget / 256 + 1) break;
    }
    const mg_ckpt_policy others[2] = {MG_CKPT_SPEED, MG_CKPT_MEMORY};
    for (int i = 0; i < 2; i++) {
        s = try_plan(p, g, sp, loss, ck, others[i], 0, budget, &fits, &rc,
                     &least, who);
        if (s != MG_OK) return s;
        if (fits && (!any || rc < best_rc)) {
            best_rc = rc;
            best_pol = others[i];
            best_b = 0;
            any = true;
        }
    }
    if (!any) {
        if (least == SIZE_MAX)
            return mg_set_error(MG_ERR_NOMEM,
                                "%s: stage %d: budget_bytes %zu is below "
                                "what one microbatch needs",
                                who, p->stage, budget);
        return mg_set_error(MG_ERR_NOMEM,
                            "%s: stage %d: no checkpoints fit budget_bytes "
                            "%zu with %d microbatches in flight (the least "
                            "peak found: %zu)",
                            who, p->stage, budget, p->in_flight, least);
    }
    mg_checkpoints k = *ck;
    k.policy = best_pol;
    s = stage_plan(p, g, sp, loss, &k, best_b, who);
    if (s == MG_OK) {
        p->micro_budget = best_b;
        p->chosen = best_pol;
    }
    return s;
}

static void *zalloc(size_t n) { return calloc(1, n ? n : 1); }

static mg_status alloc_buffers(mg_pipe *p, const char *who) {
    mgi_pipe_stage_graph *st = &p->st;
    int last = p->stage == p->n_stages - 1;
    if (st->act_in != MG_NO_TENSOR)
        p->act_bytes = mg_tensor_nbytes(st->g, st->act_in);
    if (!last) p->y_bytes = mg_tensor_nbytes(st->g, st->y);
    if (p->act_bytes > INT_MAX || p->y_bytes > INT_MAX)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "%s: stage %d: a cut of %zu bytes is more than "
                            "one MPI message holds",
                            who, p->stage,
                            p->act_bytes > p->y_bytes ? p->act_bytes
                                                      : p->y_bytes);
    int M = p->n_micro;
    p->n_act = p->act_bytes ? (p->in_flight + 1 < M ? p->in_flight + 1 : M) : 0;
    p->n_gin = last ? 0 : p->in_flight;
    size_t np = (size_t)st->n_params;
    p->act = calloc((size_t)p->n_act + 1, sizeof *p->act);
    p->act_req = malloc(((size_t)p->n_act + 1) * sizeof *p->act_req);
    p->gin_buf = calloc((size_t)p->n_gin + 1, sizeof *p->gin_buf);
    p->gin_req = malloc(((size_t)p->n_gin + 1) * sizeof *p->gin_req);
    p->y_req = malloc((size_t)M * sizeof *p->y_req);
    p->saved = calloc((size_t)M, sizeof *p->saved);
    p->gtmp = calloc(np + 1, sizeof *p->gtmp);
    p->gacc = calloc(np + 1, sizeof *p->gacc);
    p->gbytes = calloc(np + 1, sizeof *p->gbytes);
    p->gdt = calloc(np + 1, sizeof *p->gdt);
    p->sb = malloc((np + (size_t)st->n_inputs + 8) * sizeof *p->sb);
    size_t zb = p->act_bytes > p->y_bytes ? p->act_bytes : p->y_bytes;
    p->zeros = zalloc(zb);
    if (!p->act || !p->act_req || !p->gin_buf || !p->gin_req || !p->y_req ||
        !p->saved || !p->gtmp || !p->gacc || !p->gbytes || !p->gdt || !p->sb ||
        !p->zeros)
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; i < p->n_act; i++) {
        p->act_req[i] = MPI_REQUEST_NULL;
        if (!(p->act[i] = zalloc(p->act_bytes)))
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    for (int i = 0; i < p->n_gin; i++) {
        p->gin_req[i] = MPI_REQUEST_NULL;
        if (!(p->gin_buf[i] = zalloc(p->y_bytes)))
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    for (int m = 0; m < M; m++) p->y_req[m] = MPI_REQUEST_NULL;
    for (int i = 0; i < 2; i++) {
        p->gact_req[i] = MPI_REQUEST_NULL;
        if (p->act_bytes && !(p->gact_buf[i] = zalloc(p->act_bytes)))
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    for (size_t i = 0; i < np; i++) {
        p->gbytes[i] = mg_tensor_nbytes(st->g, st->p_st[i]);
        mg_tensor_dtype(st->g, st->p_st[i], &p->gdt[i]);
        p->gtmp[i] = zalloc(p->gbytes[i]);
        p->gacc[i] = zalloc(p->gbytes[i]);
        if (!p->gtmp[i] || !p->gacc[i])
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    return MG_OK;
}

void mg_pipe_free(mg_pipe *p) {
    if (!p) return;
    int finalized = 1;
    MPI_Finalized(&finalized);
    /* the abort receive lands in p: complete it before p goes, on a broken
     * communicator too (a late rank's abort message arrives after the
     * step gave up; ASan saw it written into freed memory at finalize) */
    if (p->abort_posted && !finalized) {
        MPI_Cancel(&p->abort_req);
        MPI_Wait(&p->abort_req, MPI_STATUS_IGNORE);
    }
    if (p->saved)
        for (int m = 0; m < p->n_micro; m++) mg_saved_free(p->saved[m]);
    mg_exec_free(p->ex);
    for (int i = 0; p->act && i < p->n_act; i++) free(p->act[i]);
    for (int i = 0; p->gin_buf && i < p->n_gin; i++) free(p->gin_buf[i]);
    for (int i = 0; p->gtmp && i < p->st.n_params; i++) free(p->gtmp[i]);
    for (int i = 0; p->gacc && i < p->st.n_params; i++) free(p->gacc[i]);
    stage_plan_free(p);
    free(p->act);
    free(p->act_req);
    free(p->gin_buf);
    free(p->gin_req);
    free(p->y_req);
    free(p->saved);
    free(p->gact_buf[0]);
    free(p->gact_buf[1]);
    free(p->zeros);
    free(p->gtmp);
    free(p->gacc);
    free(p->gbytes);
    free(p->gdt);
    free(p->sb);
    free(p->cuts);
    free(p);
}

/* ------------------------------------------------------------ agreeing
 * What makes two ranks' pipelines one: every rank must split the same
 * graph at the same cuts, with the same options, or the stages do not fit
 * together and the gradients are silently another graph's (a relu on one
 * rank and a tanh on another trained, issue 49). Each rank fingerprints
 * its arguments in parts; the parts' hash goes into the agreement, and
 * where it differs the parts themselves are exchanged, so that the
 * refusal names what differs. The scalar parts are the values themselves,
 * printed as they are. Not in it: max_bytes and num_threads, which bound
 * or speed one rank's executor without changing what it computes (ranks
 * may have different memory: each stage's peak is its own). */
enum {
    FP_N_MICRO,   /* value */
    FP_SCHEDULE,  /* value */
    FP_POLICY,    /* value */
    FP_BUDGET,    /* value */
    FP_CKPT,      /* hash: the policy's other options, the tagged tensors */
    FP_CUTS,      /* hash: the cut tensors and the loss */
    FP_N_TENSORS, /* value */
    FP_OPS,       /* hash: per tensor, its op kind */
    FP_ATTRS,     /* hash: per tensor, its op's attributes */
    FP_DTYPES,    /* hash: per tensor */
    FP_SHAPES,    /* hash: per tensor */
    FP_EDGES,     /* hash: per tensor, its inputs' ids */
    FP_N
};

static const char *const fp_names[FP_N] = {
    [FP_N_MICRO] = "the microbatch count (n_micro)",
    [FP_SCHEDULE] = "the schedule",
    [FP_POLICY] = "the checkpoint policy",
    [FP_BUDGET] = "the budget (checkpoints.budget_bytes)",
    [FP_CKPT] = "the checkpoint options (min_bytes, compact, store16, the "
                "listed tensors or the graph's tagged ones)",
    [FP_CUTS] = "the cut tensors or the loss",
    [FP_N_TENSORS] = "the graph's tensor count",
    [FP_OPS] = "the graph's op kinds",
    [FP_ATTRS] = "the graph's op attributes",
    [FP_DTYPES] = "the graph's dtypes",
    [FP_SHAPES] = "the graph's shapes",
    [FP_EDGES] = "the graph's edges (which tensors each op reads)"};

static uint64_t hash_str(uint64_t h, const char *str) {
    for (const char *c = str ? str : ""; *c; c++)
        h = mgi_dist_hash(h, (uint64_t)(unsigned char)*c);
    return mgi_dist_hash(h, 0); /* the end: "ab","c" is not "a","bc" */
}

static mg_status pipe_fingerprint(const mg_graph *g, mg_tensor loss,
                                  const mg_tensor *cuts, int n_cuts,
                                  const mg_pipe_options *o, uint64_t *fp) {
    const uint64_t seed = 0xcbf29ce484222325ULL;
    const mg_checkpoints *ck = &o->checkpoints;
    fp[FP_N_MICRO] = (uint64_t)o->n_micro;
    fp[FP_SCHEDULE] = (uint64_t)o->schedule;
    fp[FP_POLICY] = (uint64_t)ck->policy;
    fp[FP_BUDGET] = (uint64_t)ck->budget_bytes;
    uint64_t h = mgi_dist_hash(seed, (uint64_t)ck->min_bytes);
    h = mgi_dist_hash(h, (uint64_t)ck->compact);
    h = mgi_dist_hash(h, (uint64_t)ck->store16);
    h = mgi_dist_hash(h, (uint64_t)ck->n_tensors);
    for (int i = 0; i < ck->n_tensors; i++)
        h = mgi_dist_hash(h, (uint64_t)ck->tensors[i]);
    const int32_t n = mg_graph_num_tensors(g);
    for (int32_t t = 0; t < n; t++)
        if (mg_tensor_is_checkpoint(g, t)) h = mgi_dist_hash(h, (uint64_t)t);
    fp[FP_CKPT] = h;
    h = mgi_dist_hash(seed, (uint64_t)loss);
    h = mgi_dist_hash(h, (uint64_t)n_cuts);
    for (int k = 0; k < n_cuts; k++) h = mgi_dist_hash(h, (uint64_t)cuts[k]);
    fp[FP_CUTS] = h;
    fp[FP_N_TENSORS] = (uint64_t)n;
    uint64_t ops = seed, attrs = seed, dts = seed, shapes = seed, edges = seed;
    for (int32_t t = 0; t < n; t++) {
        ops = hash_str(ops, mg_tensor_op_name(g, t));
        uint64_t a;
        mg_status s = mg_tensor_attrs_hash(g, t, &a);
        if (s != MG_OK) return s;
        attrs = mgi_dist_hash(attrs, a);
        mg_dtype dt;
        int nd;
        int64_t shape[MG_MAX_DIMS];
        if ((s = mg_tensor_dtype(g, t, &dt)) != MG_OK ||
            (s = mg_tensor_shape(g, t, &nd, shape)) != MG_OK)
            return s;
        dts = mgi_dist_hash(dts, (uint64_t)dt);
        shapes = mgi_dist_hash(shapes, (uint64_t)nd);
        for (int d = 0; d < nd; d++)
            shapes = mgi_dist_hash(shapes, (uint64_t)shape[d]);
        const int n_in = mg_tensor_num_inputs(g, t);
        edges = mgi_dist_hash(edges, (uint64_t)n_in);
        for (int k = 0; k < n_in; k++)
            edges = mgi_dist_hash(edges, (uint64_t)mg_tensor_input(g, t, k));
    }
    fp[FP_OPS] = ops;
    fp[FP_ATTRS] = attrs;
    fp[FP_DTYPES] = dts;
    fp[FP_SHAPES] = shapes;
    fp[FP_EDGES] = edges;
    return MG_OK;
}

static uint64_t fp_combine(const uint64_t *fp) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int k = 0; k < FP_N; k++) h = mgi_dist_hash(h, fp[k]);
    return h;
}

/* A scalar part's value as the refusal prints it. */
static void fp_value(int k, uint64_t v, char *buf, size_t len) {
    switch (k) {
    case FP_SCHEDULE:
        snprintf(buf, len, "%s",
                 v == MG_PIPE_GPIPE  ? "gpipe"
                 : v == MG_PIPE_1F1B ? "1f1b"
                                     : "?");
        break;
    case FP_POLICY:
        snprintf(buf, len, "%s", mg_ckpt_policy_name((mg_ckpt_policy)v));
        break;
    case FP_N_MICRO:
    case FP_BUDGET:
    case FP_N_TENSORS: snprintf(buf, len, "%llu", (unsigned long long)v); break;
    default: buf[0] = '\0';
    }
}

/* The ranks' fingerprints differ (rank `differs` first): exchange the
 * parts and say, on every rank alike, what the first rank that differs
 * from rank 0 was given otherwise. Collective. */
static mg_status pipe_explain(mg_dist_comm *c, const uint64_t *fp, int differs,
                              const char *who) {
    uint64_t *all = malloc((size_t)c->size * FP_N * sizeof *all);
    if (!all) {
        /* the others are in the exchange below: they time out */
        mgi_dist_break(c, "out of memory in %s", who);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    MPI_Request req;
    int rc = MPI_Iallgather(fp, FP_N, MPI_UINT64_T, all, FP_N, MPI_UINT64_T,
                            c->comm, &req);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mgi_dist_mpi_fail(c, who, "MPI_Iallgather", rc);
    }
    mg_status s = mgi_dist_wait(c, who, &req, 1);
    if (s != MG_OK) {
        free(all);
        return s;
    }
    int r = 1, n_other = 0;
    while (r < c->size &&
           !memcmp(all + (size_t)r * FP_N, all, FP_N * sizeof *all))
        r++;
    for (int q = r + 1; q < c->size; q++)
        n_other += memcmp(all + (size_t)q * FP_N, all, FP_N * sizeof *all) != 0;
    if (r == c->size) { /* cannot be: the hash is of these words */
        free(all);
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d was given other arguments "
                            "than rank 0",
                            who, c->rank, differs);
    }
    char what[1024] = "";
    size_t len = 0;
    int n_parts = 0;
    for (int k = 0; k < FP_N && len < sizeof what; k++) {
        const uint64_t mine = all[k], theirs = all[(size_t)r * FP_N + k];
        if (mine == theirs) continue;
        char a[32], b[32];
        fp_value(k, mine, a, sizeof a);
        fp_value(k, theirs, b, sizeof b);
        if (a[0])
            len += (size_t)snprintf(what + len, sizeof what - len,
                                    "%s%s (%s on rank 0, %s on rank %d)",
                                    n_parts ? "; " : "", fp_names[k], a, b, r);
        else
            len += (size_t)snprintf(what + len, sizeof what - len, "%s%s",
                                    n_parts ? "; " : "", fp_names[k]);
        n_parts++;
    }
    free(all);
    char others[64] = "";
    if (n_other)
        snprintf(others, sizeof others, " (and %d more rank%s)", n_other,
                 n_other == 1 ? "" : "s");
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "%s: rank %d: rank %d%s was given other arguments "
                        "than rank 0: %s differ%s; g, loss, cuts and opts "
                        "must be the same on every rank",
                        who, c->rank, r, others, what, n_parts == 1 ? "s" : "");
}

/* This rank's arguments checked, its cuts and its fingerprint made: its
 * share of mg_pipe_new up to the first agreement. */
static mg_status pipe_args(mg_pipe *p, const mg_graph *g, mg_tensor loss,
                           const mg_tensor *cuts, int n_cuts,
                           const mg_pipe_options *o, uint64_t *fp,
                           const char *who) {
    mg_dist_comm *c = p->c;
    if (o->n_micro < 1 || o->n_micro > MG_PIPE_MAX_MICRO)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: n_micro %d out of range (1 .. %d)", who,
                            o->n_micro, MG_PIPE_MAX_MICRO);
    if (o->schedule != MG_PIPE_GPIPE && o->schedule != MG_PIPE_1F1B)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: unknown schedule %d", who,
                            (int)o->schedule);
    if (!strcmp(mg_ckpt_policy_name(o->checkpoints.policy), "?"))
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: unknown policy %d", who,
                            (int)o->checkpoints.policy);
    if (o->checkpoints.n_tensors < 0 ||
        (o->checkpoints.n_tensors > 0 && !o->checkpoints.tensors))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: checkpoints: %d tensors with a %s list", who,
                            o->checkpoints.n_tensors,
                            o->checkpoints.tensors ? "non-NULL" : "NULL");
    if (o->checkpoints.policy == MG_CKPT_BUDGET &&
        o->checkpoints.budget_bytes == 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: policy budget with budget_bytes 0", who);
    if (!g) return mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", who);
    if (!cuts && n_cuts == 0 && c->size > 1) {
        /* Balanced cuts: the same on every rank (a pure function of g). */
        p->cuts = malloc((size_t)c->size * sizeof *p->cuts);
        if (!p->cuts)
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        mg_status s = mg_pipe_balance(g, loss, c->size, p->cuts);
        if (s != MG_OK) return s;
        p->n_cuts = c->size - 1;
    } else {
        if (n_cuts < 0 || (n_cuts > 0 && !cuts))
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: %d cuts with a %s list", who, n_cuts,
                                cuts ? "non-NULL" : "NULL");
        if (n_cuts + 1 != c->size)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: %d cuts make %d stages, but the "
                                "communicator has %d ranks (one per stage)",
                                who, n_cuts, n_cuts + 1, c->size);
        p->cuts = malloc(((size_t)n_cuts + 1) * sizeof *p->cuts);
        if (!p->cuts)
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        if (n_cuts) memcpy(p->cuts, cuts, (size_t)n_cuts * sizeof *cuts);
        p->n_cuts = n_cuts;
    }
    p->n_stages = p->n_cuts + 1;
    p->stage = c->rank;
    p->n_micro = o->n_micro;
    p->schedule = o->schedule;
    int ahead = p->n_stages - p->stage;
    p->in_flight = o->schedule == MG_PIPE_GPIPE
                       ? o->n_micro
                       : (ahead < o->n_micro ? ahead : o->n_micro);
    return pipe_fingerprint(g, loss, p->cuts, p->n_cuts, o, fp);
}

/* This rank's stage: its graph, plan, executor and buffers, once every
 * rank agrees on the arguments. */
static mg_status pipe_build(mg_pipe *p, const mg_graph *g, mg_tensor loss,
                            const mg_pipe_options *o, const char *who) {
    mgi_pipe_split sp;
    mg_status s = mgi_pipe_split_make(g, loss, p->cuts, p->n_cuts, who, &sp);
    if (s != MG_OK) return s;
    if (o->checkpoints.policy == MG_CKPT_BUDGET) {
        p->budget = o->checkpoints.budget_bytes;
        s = stage_plan_budget(p, g, &sp, loss, &o->checkpoints, who);
    } else {
        p->chosen = o->checkpoints.policy;
        s = stage_plan(p, g, &sp, loss, &o->checkpoints, 0, who);
    }
    mgi_pipe_split_free(&sp);
    if (s != MG_OK) return s;
    if (o->max_bytes && p->predicted > o->max_bytes)
        return mg_set_error(MG_ERR_NOMEM,
                            "%s: stage %d needs %zu pool bytes with %d "
                            "microbatches in flight (predicted), more than "
                            "max_bytes %zu",
                            who, p->stage, p->predicted, p->in_flight,
                            o->max_bytes);
    mg_exec_options eo = {.device = MG_DEVICE_CPU,
                          .max_bytes = o->max_bytes,
                          .num_threads = o->num_threads};
    s = mg_exec_new(&eo, &p->ex);
    if (s != MG_OK) return s;
    mg_observer ob = {.user = p, .after_op = progress_after_op};
    s = mg_exec_observer_attach(p->ex, &ob, &p->observer_id);
    if (s != MG_OK) return s;
    s = alloc_buffers(p, who);
    if (s != MG_OK) return s;
    p->stats.stage = p->stage;
    p->stats.n_stages = p->n_stages;
    p->stats.n_micro = p->n_micro;
    p->stats.in_flight = p->in_flight;
    p->stats.n_ops = p->st.n_ops;
    p->stats.phases = p->pk;
    p->stats.predicted_peak = p->predicted;
    p->stats.budget_bytes = p->budget;
    p->stats.micro_budget = p->micro_budget;
    p->stats.policy = p->chosen;
    p->stats.forward_flops = p->st.flops;
    return MG_OK;
}

mg_status mg_pipe_new(mg_dist_comm *c, const mg_graph *g, mg_tensor loss,
                      const mg_tensor *cuts, int n_cuts,
                      const mg_pipe_options *opts, mg_pipe **out) {
    const char *who = "mg_pipe_new";
    if (out) *out = NULL;
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    mg_pipe_options defaults = {.schedule = MG_PIPE_1F1B, .n_micro = 1};
    const mg_pipe_options *o = opts ? opts : &defaults;
    mg_pipe *p = calloc(1, sizeof *p);
    uint64_t fp[FP_N] = {0};
    mg_status local;
    if (!out) local = mg_set_error(MG_ERR_INVALID_ARG, "%s: out is NULL", who);
    else if (!p) local = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    else {
        p->c = c;
        p->abort_req = MPI_REQUEST_NULL;
        p->gact_req[0] = p->gact_req[1] = MPI_REQUEST_NULL;
        local = pipe_args(p, g, loss, cuts, n_cuts, o, fp, who);
    }
    /* Two agreements: on the arguments first, so that ranks given other
     * graphs or options are told what differs before any of them plans a
     * stage of a pipeline that cannot be; then on the stages made. */
    int differs = -1;
    s = mgi_dist_agree_which(c, who, local, fp_combine(fp),
                             local != MG_OK ? local : MG_ERR_COMM, &differs);
    if (s == MG_OK && differs >= 0) s = pipe_explain(c, fp, differs, who);
    if (s == MG_OK) {
        local = pipe_build(p, g, loss, o, who);
        s = mgi_dist_agree(c, who, local, 0,
                           local != MG_OK ? local : MG_ERR_COMM);
    }
    if (s == MG_OK) {
        int rc = MPI_Irecv(&p->abort_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ABORT,
                           c->comm, &p->abort_req);
        if (rc != MPI_SUCCESS) s = mgi_dist_mpi_fail(c, who, "MPI_Irecv", rc);
        else p->abort_posted = true;
    }
    if (s != MG_OK) {
        mg_pipe_free(p);
        return s;
    }
    *out = p;
    return MG_OK;
}

int mg_pipe_stage(const mg_pipe *p) { return p ? p->stage : -1; }

int mg_pipe_stage_params(const mg_pipe *p, mg_tensor *out, int cap) {
    if (!p) return -1;
    for (int i = 0; i < p->st.n_params && i < cap && out; i++)
        out[i] = p->st.p_src[i];
    return p->st.n_params;
}

int mg_pipe_cuts(const mg_pipe *p, mg_tensor *out, int cap) {
    if (!p) return -1;
    for (int i = 0; i < p->n_cuts && i < cap && out; i++) out[i] = p->cuts[i];
    return p->n_cuts;
}

mg_status mg_pipe_get_stats(const mg_pipe *p, mg_pipe_stats *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_pipe_get_stats: %s is NULL",
                            p ? "out" : "pipe");
    *out = p->stats;
    return MG_OK;
}

/* ------------------------------------------------------------ one step */

/* Microbatch m's bindings of the stage's leaves into p->sb; *n gets the
 * count. A leaf without memory is this rank's error. */
static mg_status micro_binds(mg_pipe *p, const mg_binding *binds, int n_binds,
                             int m, int *n, const char *who) {
    const mgi_pipe_stage_graph *st = &p->st;
    const mg_binding *list = binds + (size_t)m * (size_t)n_binds;
    int k = 0;
    for (int i = 0; i < st->n_params + st->n_inputs; i++) {
        mg_tensor src =
            i < st->n_params ? st->p_src[i] : st->in_src[i - st->n_params];
        mg_tensor dst =
            i < st->n_params ? st->p_st[i] : st->in_st[i - st->n_params];
        void *data = NULL;
        for (int j = 0; j < n_binds; j++)
            if (list[j].tensor == src) data = list[j].data;
        if (!data) {
            const char *name = mg_tensor_name(st->g, dst);
            return mg_set_error(MG_ERR_UNBOUND,
                                "%s: stage %d, microbatch %d: %s '%s' (tensor "
                                "%d of the graph) has no memory bound",
                                who, p->stage, m,
                                i < st->n_params ? "parameter" : "input",
                                name ? name : "?", (int)src);
        }
        p->sb[k++] = (mg_binding){dst, data};
    }
    *n = k;
    return MG_OK;
}

static void accumulate(mg_pipe *p) {
    for (int i = 0; i < p->st.n_params; i++) {
        size_t n = p->gbytes[i] / mg_dtype_size(p->gdt[i]);
        if (p->gdt[i] == MG_F32) {
            float *a = p->gacc[i];
            const float *g = p->gtmp[i];
            for (size_t e = 0; e < n; e++) a[e] += g[e];
        } else {
            double *a = p->gacc[i];
            const double *g = p->gtmp[i];
            for (size_t e = 0; e < n; e++) a[e] += g[e];
        }
    }
}

/* The schedule of stage s: op i of 2M is microbatch *m's forward (returns
 * 1) or backward (returns 0). */
static int schedule_op(const mg_pipe *p, int i, int *m) {
    int M = p->n_micro;
    if (p->schedule == MG_PIPE_GPIPE) {
        *m = i < M ? i : i - M;
        return i < M;
    }
    int w = p->in_flight - 1; /* warm-up forwards */
    if (i < w) {
        *m = i;
        return 1;
    }
    int j = i - w;
    if (j < 2 * (M - w)) { /* steady: forward w + j/2, then backward j/2 */
        *m = j % 2 == 0 ? w + j / 2 : j / 2;
        return j % 2 == 0;
    }
    *m = (M - w) + (j - 2 * (M - w));
    return 0;
}

/* One step's state across its 2M operations. A rank's own error (local,
 * with its message in own) does not stop the schedule: the rank keeps
 * sending zeros so that its peers are not left waiting, and every rank
 * learns of the error in the agreement at the end. rc is the first MPI
 * call that failed; s from pipe_wait (a peer gave up, or the deadline)
 * stops the schedule at once. */
typedef struct {
    const mg_binding *binds;
    int n_binds;
    uint64_t seed;
    mg_status local;
    char own[512];
    int rc;
    const char *who;
} step_state;

/* Keep this rank's error message: later calls may overwrite mg_last_error
 * before the agreement reports it. */
static void keep_own(step_state *x) {
    snprintf(x->own, sizeof x->own, "%s", mg_last_error());
}

/* The caller's gradient buffer of each stage parameter into gout, after
 * checking the argument lists; every microbatch's bindings checked too. */
static mg_status step_check_args(mg_pipe *p, const step_state *x,
                                 const mg_binding *grads, int n_grads,
                                 void **gout) {
    const mgi_pipe_stage_graph *st = &p->st;
    const char *who = x->who;
    if (x->n_binds < 0 || (x->n_binds > 0 && !x->binds) || n_grads < 0 ||
        (n_grads > 0 && !grads))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %d bindings (list %s), %d gradients (list "
                            "%s)",
                            who, x->n_binds, x->binds ? "given" : "NULL",
                            n_grads, grads ? "given" : "NULL");
    for (int i = 0; i < st->n_params; i++) {
        for (int j = 0; j < n_grads; j++)
            if (grads[j].tensor == st->p_src[i]) gout[i] = grads[j].data;
        if (!gout[i]) {
            const char *name = mg_tensor_name(st->g, st->p_st[i]);
            return mg_set_error(MG_ERR_UNBOUND,
                                "%s: stage %d: parameter '%s' (tensor %d) "
                                "has no gradient buffer",
                                who, p->stage, name ? name : "?",
                                (int)st->p_src[i]);
        }
    }
    for (int m = 0; m < p->n_micro; m++) {
        int nb;
        mg_status s = micro_binds(p, x->binds, x->n_binds, m, &nb, who);
        if (s != MG_OK) return s;
    }
    return MG_OK;
}

/* Microbatch m's forward on this stage; its output y stays in the saved
 * state. Sets x->local on this rank's error. */
static void forward_compute(mg_pipe *p, step_state *x, int m, int slot) {
    const mgi_pipe_stage_graph *st = &p->st;
    int nb;
    micro_binds(p, x->binds, x->n_binds, m, &nb, x->who);
    if (st->act_in != MG_NO_TENSOR)
        p->sb[nb++] = (mg_binding){st->act_in, p->act[slot]};
    double tc = mgi_dist_now();
    x->local = mg_exec_forward(p->ex, p->plan, p->sb, nb, x->seed + (uint64_t)m,
                               &p->saved[m]);
    p->stats.compute_seconds += mgi_dist_now() - tc;
    if (x->local != MG_OK) keep_own(x);
}

/* A forward operation: wait for microbatch m's activation, run the stage,
 * then record the loss (last stage) or send y on and post the receive of
 * its gradient. */
static mg_status step_forward(mg_pipe *p, step_state *x, int m,
                              double *losses) {
    const mgi_pipe_stage_graph *st = &p->st;
    mg_dist_comm *c = p->c;
    const int last = p->stage == p->n_stages - 1;
    int slot = p->n_act ? m % p->n_act : 0;
    if (p->n_act) {
        mg_status s = pipe_wait(p, x->who, &p->act_req[slot], 1,
                                "an activation", p->stage - 1);
        if (s != MG_OK) return s;
    }
    if (x->local == MG_OK) forward_compute(p, x, m, slot);
    const void *y = NULL;
    if (x->local == MG_OK &&
        mg_saved_tensor_data(p->saved[m], st->y, &y) != MG_OK) {
        x->local = mg_last_status();
        keep_own(x);
    }
    if (last) {
        if (x->local == MG_OK && losses) {
            mg_dtype dt;
            mg_tensor_dtype(st->g, st->y, &dt);
            losses[m] =
                dt == MG_F32 ? (double)*(const float *)y : *(const double *)y;
        }
        return MG_OK;
    }
    int next = p->stage + 1;
    x->rc = MPI_Isend(x->local == MG_OK ? y : p->zeros, (int)p->y_bytes,
                      MPI_BYTE, next, 2 * m, c->comm, &p->y_req[m]);
    if (x->rc == MPI_SUCCESS)
        x->rc = MPI_Irecv(p->gin_buf[m % p->n_gin], (int)p->y_bytes, MPI_BYTE,
                          next, 2 * m + 1, c->comm, &p->gin_req[m % p->n_gin]);
    p->stats.bytes_sent += p->y_bytes;
    return MG_OK;
}

/* Microbatch m's backward on this stage into p->gtmp, added to p->gacc.
 * The gradient of act_in goes to gact_buf[gs]. Sets x->local on this
 * rank's error. */
static void backward_compute(mg_pipe *p, step_state *x, int m, int gs) {
    const mgi_pipe_stage_graph *st = &p->st;
    const int last = p->stage == p->n_stages - 1;
    int nb;
    micro_binds(p, x->binds, x->n_binds, m, &nb, x->who);
    if (st->act_in != MG_NO_TENSOR)
        p->sb[nb++] = (mg_binding){st->act_in, p->act[m % p->n_act]};
    if (!last) p->sb[nb++] = (mg_binding){p->gin, p->gin_buf[m % p->n_gin]};
    if (p->gact != MG_NO_TENSOR)
        p->sb[nb++] = (mg_binding){p->gact, p->gact_buf[gs]};
    double tc = mgi_dist_now();
    /* the gradients: one binding each, appended after the leaves (sb has
     * room for params + inputs + 8) */
    mg_binding *gb = malloc(((size_t)st->n_params + (size_t)nb) * sizeof *gb);
    if (!gb) {
        x->local = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", x->who);
    } else {
        memcpy(gb, p->sb, (size_t)nb * sizeof *gb);
        for (int k = 0; k < st->n_params; k++)
            gb[nb + k] = (mg_binding){p->p_grad[k], p->gtmp[k]};
        x->local = mg_exec_backward(p->ex, p->plan, p->saved[m], gb,
                                    nb + st->n_params);
        free(gb);
    }
    p->stats.compute_seconds += mgi_dist_now() - tc;
    if (x->local == MG_OK) accumulate(p);
    else keep_own(x);
}

/* A backward operation: wait for microbatch m's gradient from the next
 * stage and for the send from two backwards ago out of the same gact
 * buffer, run the stage's backward, send the gradient of the activation
 * back, free the saved state and post the receive of the activation the
 * freed slot is for next. */
static mg_status step_backward(mg_pipe *p, step_state *x, int m) {
    mg_dist_comm *c = p->c;
    const int M = p->n_micro, last = p->stage == p->n_stages - 1;
    const int prev = p->stage - 1, next = p->stage + 1;
    mg_status s;
    int gs = m % 2;
    if (!last) {
        s = pipe_wait(p, x->who, &p->gin_req[m % p->n_gin], 1, "a gradient",
                      next);
        if (s != MG_OK) return s;
    }
    if (p->act_bytes) {
        s = pipe_wait(p, x->who, &p->gact_req[gs], 1,
                      "an earlier gradient's send", prev);
        if (s != MG_OK) return s;
    }
    if (x->local == MG_OK) backward_compute(p, x, m, gs);
    if (p->act_bytes) {
        x->rc = MPI_Isend(x->local == MG_OK ? p->gact_buf[gs] : p->zeros,
                          (int)p->act_bytes, MPI_BYTE, prev, 2 * m + 1, c->comm,
                          &p->gact_req[gs]);
        p->stats.bytes_sent += p->act_bytes;
    }
    if (!last && x->rc == MPI_SUCCESS) {
        /* the activation left from the saved state: wait for it before the
         * saved state goes back to the pool */
        s = pipe_wait(p, x->who, &p->y_req[m], 1, "an activation's send", next);
        if (s != MG_OK) return s;
    }
    mg_saved_free(p->saved[m]);
    p->saved[m] = NULL;
    int nm = m + p->n_act;
    if (p->n_act && nm < M && x->rc == MPI_SUCCESS)
        x->rc = MPI_Irecv(p->act[nm % p->n_act], (int)p->act_bytes, MPI_BYTE,
                          prev, 2 * nm, c->comm, &p->act_req[nm % p->n_act]);
    return MG_OK;
}

/* The schedule's 2M operations, after posting the first activations'
 * receives, k + 1 ahead. */
static mg_status step_run_schedule(mg_pipe *p, step_state *x, double *losses) {
    mg_status s = MG_OK;
    for (int m = 0; m < p->n_act && x->rc == MPI_SUCCESS; m++)
        x->rc = MPI_Irecv(p->act[m], (int)p->act_bytes, MPI_BYTE, p->stage - 1,
                          2 * m, p->c->comm, &p->act_req[m]);
    for (int i = 0; s == MG_OK && x->rc == MPI_SUCCESS && i < 2 * p->n_micro;
         i++) {
        int m;
        if (schedule_op(p, i, &m)) s = step_forward(p, x, m, losses);
        else s = step_backward(p, x, m);
    }
    return s;
}

mg_status mg_pipe_step(mg_pipe *p, const mg_binding *binds, int n_binds,
                       uint64_t seed, const mg_binding *grads, int n_grads,
                       double *losses) {
    const char *who = "mg_pipe_step";
    if (!p) return mg_set_error(MG_ERR_INVALID_ARG, "%s: pipe is NULL", who);
    mg_dist_comm *c = p->c;
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    double t0 = mgi_dist_now();
    p->stats.wait_seconds = p->stats.compute_seconds = 0;
    mgi_pipe_stage_graph *st = &p->st;
    step_state x = {.binds = binds,
                    .n_binds = n_binds,
                    .seed = seed,
                    .local = MG_OK,
                    .own = "",
                    .rc = MPI_SUCCESS,
                    .who = who};
    void **gout = calloc((size_t)st->n_params + 1, sizeof *gout);
    if (!gout) x.local = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    else x.local = step_check_args(p, &x, grads, n_grads, gout);
    if (x.local != MG_OK) keep_own(&x);
    for (int i = 0; i < st->n_params; i++) memset(p->gacc[i], 0, p->gbytes[i]);
    mg_exec_pool_reset_peak(p->ex);

    s = step_run_schedule(p, &x, losses);
    if (s == MG_OK && x.rc != MPI_SUCCESS) {
        s = mgi_dist_mpi_fail(c, who, "MPI point-to-point", x.rc);
        pipe_give_up(p);
    }
    if (s == MG_OK)
        s = pipe_wait(p, who, p->gact_req, 2, "the last sends", p->stage - 1);
    for (int m = 0; m < p->n_micro; m++) {
        mg_saved_free(p->saved[m]);
        p->saved[m] = NULL;
    }
    mg_pool_stats ps;
    mg_exec_pool_stats(p->ex, &ps);
    p->stats.measured_peak = ps.peak_bytes_in_use;
    if (s == MG_OK) {
        if (x.local != MG_OK) mg_set_error(x.local, "%s", x.own);
        s = mgi_dist_agree(c, who, x.local, 0, MG_ERR_COMM);
    }
    if (s == MG_OK) {
        for (int i = 0; i < st->n_params; i++)
            memcpy(gout[i], p->gacc[i], p->gbytes[i]);
        p->stats.steps++;
    }
    free(gout);
    p->stats.step_seconds = mgi_dist_now() - t0;
    return s;
}
