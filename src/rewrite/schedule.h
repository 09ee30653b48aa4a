/*
 * schedule.h - the compiled plan: one linear order of ops, the last reader
 * of every buffer, and what the caller must bind. The executor only walks
 * it; every decision about order and lifetime is made here. The plan
 * carries the step records the executor walks; tensor descriptors,
 * attributes and labels it reads from the graph's nodes, which never
 * change once made (the graph must outlive the plan, memgrad.h).
 */
#ifndef MG_SCHEDULE_H
#define MG_SCHEDULE_H

#include "../backend/backend.h"
#include "../graph/graph.h"

enum {
    MG_ROLE_NONE = 0,     /* not read or computed by the plan */
    MG_ROLE_LEAF = 1,     /* caller memory, read by some step */
    MG_ROLE_COMPUTED = 2, /* written by a step */
    MG_ROLE_KEPT = 4,     /* output or retained: not released by the run */
    /* computed inside a fused step (fuse.c): an intermediate without a
     * buffer */
    MG_ROLE_ABSORBED = 8
};

/* A step's workspace is counted in units of this many bytes, the pool's
 * size-class alignment (size_class.c, which rounds every block to it):
 * 32 bits of units hold 1 TiB. */
#define MG_STEP_WORK_UNIT 256

/* One step as the executor runs it; the tensor it computes is
 * p->steps[s]. 32 bytes a step. */
typedef struct mg_plan_step {
    uint32_t work_units;         /* workspace its kernel borrows */
    mg_tensor in[MG_MAX_INPUTS]; /* as this plan reads them (remapped) */
    uint16_t op;                 /* an mg_op */
    uint8_t n_in;
    /* 1: a view (schedule.c, plan_views): its output is the block of
     * in[0], which names the block's owner (never itself a view); no
     * buffer, no kernel, and that block lives until the view's last
     * reader. It fits in the record's padding: still 32 bytes. */
    uint8_t view;
    /* Its attributes are its node's (p->g->nodes[t].attrs), read there:
     * a copy here made every step 368 bytes, and paging in a 10^6-op
     * plan's records cost more than computing them (issue 32). */
} mg_plan_step;
_Static_assert(MG_OP_COUNT <= UINT16_MAX && MG_MAX_INPUTS <= UINT8_MAX,
               "mg_plan_step's op and n_in fields are too narrow");
_Static_assert(sizeof(mg_plan_step) <= 32, "mg_plan_step grew past 32 bytes");

/* The workspace bytes of step st (a multiple of MG_STEP_WORK_UNIT). */
static inline size_t mg_plan_step_work(const mg_plan_step *st) {
    return (size_t)st->work_units * MG_STEP_WORK_UNIT;
}

struct mg_plan {
    const mg_graph *g;
    int32_t n_tensors; /* graph size when compiled; ids below it are valid */
    uint8_t *role;     /* per tensor id, MG_ROLE_* bits */
    int32_t n_steps;
    mg_tensor *steps;   /* computed tensors in execution order */
    mg_plan_step *step; /* per step: its record, in the same order */
    /* A tensor's descriptor and whether it is a leaf are its node's
     * (mg_plan_desc, mg_plan_leaf), which never change once the node is
     * made: a copy per tensor id was 80 bytes, 240 MB to page in for a
     * 10^6-op plan and the largest part of compiling it (issue 32). In a
     * backward phase a saved tensor is a leaf by its role (MG_ROLE_LEAF),
     * as the phase shares the plan's graph. */
    /* After step s, release release[release_start[s] .. release_start[s+1]) */
    int32_t *release_start;
    mg_tensor *release;
    int32_t n_leaves;
    mg_tensor *leaves; /* leaves some step reads, or that are outputs */
    int32_t n_kept;
    mg_tensor *kept; /* outputs then retained, without repeats */
    /* Inputs are read through this map: with without_recompute, each
     * recomputed copy -> its forward tensor; NULL for the identity. */
    mg_tensor *remap;
    /* A training plan's forward and backward phases (split.c), or NULL
     * for a plan without backward steps (unless it keeps a leaf no step
     * reads: a gradient that is the seed itself). They share the plan's remap
     * array (a copy per phase was most of what a 10^6-op plan wrote,
     * issue 32); mg_plan_free frees it once. */
    struct mg_plan *phase[2];
    /* In a backward phase: the forward tensors it reads from a saved
     * state, marked as leaves; n_saved of them in saved. */
    int32_t n_saved;
    mg_tensor *saved;
    /* The arena (arena.c): every buffer that lives and dies within a run
     * at its offset, chosen at compile time. Per step, its output's offset
     * and its workspace's, or SIZE_MAX where the buffer is not in the
     * arena (a kept tensor, which outlives the run; no workspace). */
    size_t *out_off, *work_off;
    size_t arena_bytes;     /* the arena's size: what a run reserves */
    size_t arena_live_peak; /* the most of its bytes live at once */
    /* mg_plan_options.budget_bytes: the budget the plan was made for, or
     * 0; mg_plan_summary reports it beside the plan's budget_peak. */
    size_t budget_bytes;
    /* mg_plan_options.device: the device whose kernels' scratch the steps'
     * workspace was sized for (a CUDA plan lends cuBLAS some, gemm_split.h). */
    mg_device device;
    /* mg_plan_options.offload's copies (offload.h), or NULL */
    struct mg_offload_plan *offload;
    /* In a phase of a plan that offloads (split.c): that plan's copies
     * (not the phase's own: mg_plan_free leaves them to the plan), and
     * the index in that plan of the phase's first step, which the copies'
     * step numbers count from. NULL elsewhere. */
    const struct mg_offload_plan *phase_offload;
    int32_t phase_base;
    /* The fused chains of its MG_STEP_FUSED steps (fuse.c), or NULL for
     * none; its phases share it, and mg_plan_free frees it once. */
    struct mgi_fusion *fusion;
    /* whether it was compiled to fuse (the device's backend fuses, and
     * mg_plan_options.no_fusion was 0), chains or not */
    bool fuses;
};

/* The descriptor of tensor t (its node's). */
static inline const mg_tdesc *mg_plan_desc(const mg_plan *p, mg_tensor t) {
    return mgi_graph_desc(p->g, t);
}

/* Its bytes (mgi_tdesc_nbytes of its descriptor, computed once). */
static inline size_t mg_plan_nbytes(const mg_plan *p, mg_tensor t) {
    return mgi_graph_nbytes(p->g, t);
}

/* Whether t is an input or parameter node: memory from the caller. */
static inline bool mg_plan_leaf(const mg_plan *p, mg_tensor t) {
    return (mgi_op_table[p->g->nodes[t].op].flags & MG_OPF_LEAF) != 0;
}

/* Whether t's node may be a view of its input 0's block (MG_OPF_VIEW,
 * the same bytes) and carries no hook, which may write into a gradient
 * (memgrad_observe.h): whether it is one also depends on the plan
 * (schedule.c, plan_views). */
static inline bool mgi_node_viewable(const mg_graph *g, mg_tensor t) {
    const mg_node *n = &g->nodes[t];
    return (mgi_op_table[n->op].flags & MG_OPF_VIEW) &&
           mgi_graph_nbytes(g, t) == mgi_graph_nbytes(g, n->in[0]) &&
           !mgi_hooks_on(g, t);
}

/* Input k of the node of tensor t, as this plan reads it. */
static inline mg_tensor mg_plan_input(const mg_plan *p, mg_tensor t, int k) {
    const mg_tensor in = p->g->nodes[t].in[k];
    return p->remap ? p->remap[in] : in;
}

/* A binding list as the plan's predictions read it, checked as mg_exec_run
 * checks it: MG_ERR_INVALID_ARG for a negative n_binds or a NULL list of
 * n_binds > 0, MG_ERR_UNKNOWN_ID for a tensor id the plan does not know
 * (a known tensor the plan does not keep is not an error: one list serves
 * a run and its prediction, as in mg_exec_run). Errors begin with what. */
mg_status mgi_plan_binds_check(const mg_plan *p, const mg_binding *binds,
                               int n_binds, const char *what);
/* The same, then per tensor id whether binds gives it caller memory: the
 * kept tensors it names, in a calloc'ed array in *bound (MG_ERR_NOMEM if
 * it cannot be had). */
mg_status mgi_plan_bound(const mg_plan *p, const mg_binding *binds, int n_binds,
                         const char *what, bool **bound);
/* mg_plan_predicted_peak with a status: mgi_plan_bound's, MG_ERR_NOMEM if
 * its scratch memory cannot be had; errors are prefixed by what. */
mg_status mgi_plan_peak(const mg_plan *p, const mg_binding *binds, int n_binds,
                        const char *what, size_t *peak);

/* Scratch of mgi_graph_peak, kept by a caller that measures many graphs
 * (the budget policy's search): its arrays grow to the largest graph and
 * are then reused, where fresh ones would fault in every page again each
 * time. Zero-initialise; free with mgi_peak_scratch_free. */
typedef struct mg_peak_scratch {
    int32_t cap;
    bool *needed;     /* per tensor: an ancestor of the outputs */
    mg_tensor *order; /* the schedule, leaves included: n_order of them */
    int32_t n_order;
    mg_tensor *steps; /* its computed tensors, in the same order */
    int32_t n_steps;
    int32_t *last;    /* per tensor: the step of its last reader */
    size_t *bytes;    /* per step: its output's pool bytes */
    size_t *work;     /* per step: its workspace's pool bytes */
    size_t *freed;    /* per step: pool bytes freed after it */
    mg_tensor *remap; /* per tensor, with without_recompute */
    int32_t *cand;    /* the steps that may be views (plan_views' rule) */
} mg_peak_scratch;

void mgi_peak_scratch_free(mg_peak_scratch *sc);

/* What mgi_graph_peak predicts: the plan of mg_plan_compile(g, outputs,
 * n_outputs, {.without_recompute}), run with binds, or with every output
 * bound to caller memory. */
typedef struct mg_peak_query {
    const mg_tensor *outputs;
    int n_outputs;
    bool without_recompute;
    bool all_bound;
    const mg_binding *binds; /* when not all_bound */
    int n_binds;
    /* the plan fuses element-wise chains (mgi_plan_fuse) */
    bool fuse;
} mg_peak_query;

/* The peak that mgi_plan_peak predicts for q's plan, without building
 * that plan (its step records, tensor copies and phases): the same order,
 * the same releases, the same size classes. sc->order and sc->steps then
 * hold the schedule. Errors are prefixed by what. */
mg_status mgi_graph_peak(const mg_graph *g, const mg_peak_query *q,
                         mg_peak_scratch *sc, const char *what, size_t *peak);

/* Lay out the arena of p and of its phases (arena.c). */
/* last: scratch of p->n_tensors entries (the caller's, reused: a fresh
 * array per pass pages in again what the last pass paged in). */
/* mg_plan_compile without options and without views: every reshape a
 * copy with a block of its own, as in a plan that offloads (the offload
 * pricer's reference plan). */
mg_status mgi_plan_compile_copies(const mg_graph *g, const mg_tensor *outputs,
                                  int n_outputs, mg_plan **out);
mg_status mgi_plan_lay_out(mg_plan *p, int32_t *last);

/* The layout arena.c gives a plan's buffers, for n buffers of size[i]
 * bytes live during [born[i], died[i]) (born in order, born < died; the
 * plan's clock has two ticks a step): off[i] per buffer, *live_peak the
 * most bytes live at once; returns the arena's size, or SIZE_MAX for
 * lifetimes out of order or beyond 32 bits, or no memory. greedy false: the
 * sweep alone. For tests (test_arena). */
size_t mgi_arena_lay_out(const size_t *size, const int64_t *born,
                         const int64_t *died, size_t n, bool greedy,
                         size_t *off, size_t *live_peak);

/* Build p->phase[0] (forward) and p->phase[1] (backward) when p has
 * backward or recompute steps (split.c). bwd: per tensor id the plan
 * reads or computes, whether its node is a backward or recompute one
 * (mg_plan_compile notes it while it reads the node anyway: another pass
 * over the nodes of a 10^6-op plan was 400 MB to read, issue 32). */
/* last, fill: scratch of p->n_tensors + 1 entries each. */
mg_status mgi_plan_split(mg_plan *p, const bool *bwd, int32_t *last,
                         int32_t *fill);
/* Let go of what phase q shares with its plan p (its remap array,
 * and its step arrays where they are a stretch of p's), so that
 * mg_plan_free(q) frees only q's own. */
void mgi_phase_unshare(mg_plan *q, const mg_plan *p);

/* ---- fused element-wise chains (fuse.c) ---------------------------------- */

/* The chains a plan runs as one step each: the chain's last op makes its
 * tensor (the root), which the step computes; the other ops' tensors
 * (absorbed) get no buffer and no step. */
typedef struct mgi_fusion {
    int32_t n;           /* chains */
    mg_tensor *root;     /* per chain, sorted by id */
    int32_t *start;      /* per chain + 1: its ops are [start[c], start[c+1]) */
    mg_fused_instr *ins; /* the ops, each chain's in evaluation order */
    mg_tensor *member;   /* per op: the tensor it computes in the graph */
    /* during compilation, per tensor id: 1 absorbed, 2 the root of a
     * chain; then freed */
    uint8_t *mark;
    /* per chain, as the marks' roots: its external inputs */
    uint8_t *n_ext;
    mg_tensor *ext; /* MG_MAX_INPUTS per chain */
} mgi_fusion;

void mgi_fusion_free(mgi_fusion *f);
/* The index of the chain whose root is t, or -1 (a binary search). */
int32_t mgi_fusion_chain(const mgi_fusion *f, mg_tensor t);
/* Find the chains of element-wise ops among the computed tensors of
 * order[0..n_order) (p's topological order; p->role has its kept
 * tensors), into *out (NULL when there are none). A chain is a tree of
 * ops flagged MG_OPF_ELEMENTWISE, of one dtype and the root's shape, on
 * consecutive steps, each but the root read by one op alone, which is in
 * the chain, and neither kept nor hooked; all forward, all recomputed or all backward;
 * at most MG_FUSE_MAX ops and MG_MAX_INPUTS external inputs. Since every
 * absorbed tensor has the root's size and the chain's steps were
 * consecutive, the fused plan's peak is never above the unfused one's. */
/* scratch: n_order ints it may write over, or NULL (it allocates its
 * own): the caller's, where it has some whose pages it touches anyway. */
mg_status mgi_plan_fuse(const mg_plan *p, const mg_tensor *order,
                        int32_t n_order, int32_t *scratch, mgi_fusion **out);
/* The tensors fusion absorbs in the plan of order[0..n_order) that keeps
 * kept[0..n_kept), reading inputs through remap (NULL: none): a calloc'ed
 * array of g->n flags into *absorbed, for mgi_graph_peak; scratch as for
 * mgi_plan_fuse. */
mg_status mgi_fuse_absorbed(const mg_graph *g, const mg_tensor *remap,
                            const mg_tensor *kept, int n_kept,
                            const mg_tensor *order, int32_t n_order,
                            int32_t *scratch, uint8_t **absorbed);
/* The chain of fused step t of p (an MG_STEP_FUSED step's tensor):
 * *ins and *n, or false when p has no chain rooted at t. */
bool mgi_fusion_find(const mg_plan *p, mg_tensor t, const mg_fused_instr **ins,
                     const mg_tensor **members, int *n);
/* Flops and bytes moved of step s: its op's, or for a fused step the sum
 * of its ops' flops and the bytes of its inputs and output. */
void mgi_plan_step_cost(const mg_plan *p, int32_t s, double *flops,
                        double *bytes);

#endif
