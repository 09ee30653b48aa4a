/*
 * op_table.h - what memgrad knows about each op: its rules (shape, gradient,
 * cost, workspace) and flags, one mg_op_def per entry of MG_OP_LIST.
 *
 * The table needs no graph internals: graph.c reads it to build nodes, and
 * op_table.c, which fills it, knows nothing of graph.c.
 */
#ifndef MG_OP_TABLE_H
#define MG_OP_TABLE_H

#include "../common/ir.h"

/* A node of the graph IR (graph.h). */
typedef struct mg_node mg_node;

enum {
    MG_OPF_LEAF = 1u << 0,   /* input or parameter: memory from the caller */
    MG_OPF_RANDOM = 1u << 1, /* reads the RNG: recompute must replay it */
    MG_OPF_NO_RECOMPUTE = 1u << 2, /* side effects: always keep the output */
    MG_OPF_EXPENSIVE = 1u << 3,    /* kept by MG_CKPT_SPEED (matmul, conv) */
    /* Its gradient reads its inputs whole, so no compact saved form can
     * stand in for them (matmul, conv) */
    MG_OPF_READS_WHOLE = 1u << 4,
    /* Cheap to make again from its inputs: under policy none with
     * compaction, where a READS_WHOLE op reads it and its inputs are kept
     * anyway, it is made again for the backward pass rather than kept
     * (relu, batch norm: src/rewrite/autodiff.c, rebuild_cheap) */
    MG_OPF_CHEAP = 1u << 5,
    /* Its output is its input 0's bytes, unchanged (a reshape): a plan
     * makes it a view of that input's block, with no buffer and no
     * kernel, where nothing can write through it into memory it must not
     * (src/rewrite/schedule.c, plan_views; issue 46) */
    MG_OPF_VIEW = 1u << 6,
    /* One value per output element from the inputs' values at that
     * element (broadcast), by a body of MG_UNARY_OPS or MG_BINARY_OPS
     * (backend/kernel_shared.h), or dropout's (from the element's index
     * too): a compiled plan may run a chain of such ops as one fused
     * kernel (src/rewrite/fuse.c) */
    MG_OPF_ELEMENTWISE = 1u << 7
};

/* The rules are function types, so that ops_internal.h declares each rule
 * through its type (mg_infer_fn mgi_matmul_infer;) and the table holds
 * pointers to them. */

/* Shape rule: fill out from the inputs and attributes, or return an error
 * status and a short reason in why (the caller adds op and input names). */
typedef mg_status mg_infer_fn(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t why_len);

/* Gradient rule, written with builder calls on g. It is handed everything
 * it may read about the op: node, a copy of the op's node (op, attributes,
 * output descriptor) that stays valid while the rule appends nodes, which
 * can move g->nodes; and in[0..node->n_in), the tensors to read for the
 * op's inputs (node->in holds the same ids). Under checkpointing these are
 * recomputed copies, not the node's forward inputs, so a rule cannot read a
 * tensor the forward pass has released. y is the tensor holding the op's
 * output (its recomputed copy, if it has one), gy its gradient. For each
 * input i with need[i] set, store the gradient in gin[i] (same shape as
 * input i). Return MG_OK or the failing builder's status. */
typedef mg_status mg_grad_fn(mg_graph *g, const mg_node *node,
                             const mg_tensor *in, mg_tensor y, mg_tensor gy,
                             const bool *need, mg_tensor *gin);

/* Cost rule: floating point operations to compute out. */
typedef double mg_flops_fn(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           const mg_tdesc *out);

/* Scratch rule: bytes of workspace the op's kernels need (an im2col
 * buffer, say). A plan lends the larger of this and what the backends'
 * plan_workspace queries ask (src/backend/backend.h: oneDNN's scratchpad is
 * known only to oneDNN), and each backend's workspace query must not
 * exceed that. The executor lends it from the pool for the length of the
 * op, so the plan's peak prediction counts it. */
typedef size_t mg_workspace_fn(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               const mg_tdesc *out);

/* A compact saved form (issue 29): how a backward helper op can read less
 * than a whole saved tensor, with no change to any bit of its result. Its
 * input `slot` reads a forward tensor t; the same output comes from op
 * `reader`, which reads in that slot pack(t), the output of op `pack` on
 * t alone with this op's attributes (a sign mask of 1 bit per element, a
 * max-pool's argmax of 1 byte per output). The reader gets this op's
 * attributes with ndim and shape set to t's shape. reader 0 (MG_OP_INPUT):
 * none. The compaction pass (src/rewrite/compact.c) reads only this field,
 * never op names; a pack's shape rule refuses the cases it cannot encode
 * (a pool window over 256 elements), and the pass then keeps t whole. */
typedef struct mg_saved_form {
    int slot;
    mg_op pack;
    mg_op reader;
} mg_saved_form;

typedef struct mg_op_def {
    const char *name;
    int n_inputs;
    /* How many of the last inputs may be left out (attention's mask). */
    int n_optional;
    unsigned flags;
    mg_infer_fn *infer;
    mg_grad_fn *grad;           /* NULL: not differentiable */
    mg_flops_fn *flops;         /* NULL: flops_per_elem * numel(out) */
    mg_workspace_fn *workspace; /* NULL: none */
    double flops_per_elem;
    /* Bitmask of inputs that gradients never flow into (labels, say). */
    unsigned no_grad_inputs;
    mg_saved_form compact; /* .reader 0: none */
} mg_op_def;

extern const mg_op_def mgi_op_table[MG_OP_COUNT];

#endif
