/*
 * graph.h - the graph IR inside memgrad: nodes (one per tensor), the op
 * table that knows every op, and the graph analysis helpers.
 *
 * Every tensor is the single output of one node. Leaves are nodes whose op
 * is MG_OP_INPUT or MG_OP_PARAM. Node ids are the public mg_tensor ids.
 */
#ifndef MG_GRAPH_H
#define MG_GRAPH_H

#include "../common/ir.h"

enum {
    MG_NODE_BACKWARD = 1u << 0,   /* appended by mg_gradients */
    MG_NODE_CHECKPOINT = 1u << 1, /* tagged by the caller as a checkpoint */
    MG_NODE_CHOSEN = 1u << 2,     /* kept by a checkpoint policy */
    MG_NODE_RECOMPUTE = 1u << 3   /* a recomputed copy of node `orig` */
};

typedef struct mg_node {
    mg_op op;
    mg_tdesc d;
    int n_in;
    mg_tensor in[MG_MAX_INPUTS];
    mg_attrs attrs;
    char *name; /* owned, may be NULL */
    unsigned flags;
    mg_tensor orig; /* MG_NODE_RECOMPUTE: the forward node it recomputes */
} mg_node;

struct mg_graph {
    mg_node *nodes;
    int32_t n, cap;
    uint64_t rng_offset; /* next free dropout counter */
    unsigned building_flags; /* OR-ed into every new node's flags */
};

/* ---- op table ------------------------------------------------------------ */

enum {
    MG_OPF_LEAF = 1u << 0,     /* input or parameter: memory from the caller */
    MG_OPF_RANDOM = 1u << 1,   /* reads the RNG: recompute must replay it */
    MG_OPF_NO_RECOMPUTE = 1u << 2, /* side effects: always keep the output */
    MG_OPF_EXPENSIVE = 1u << 3     /* kept by MG_CKPT_SPEED (matmul, conv) */
};

/* Shape rule: fill out from the inputs and attributes, or return an error
 * status and a short reason in why (the caller adds op and input names). */
typedef mg_status (*mg_infer_fn)(const mg_tdesc *in, int n_in,
                                 const mg_attrs *a, mg_tdesc *out, char *why,
                                 size_t why_len);

/* Gradient rule, written with builder calls on g. y is the op's output
 * tensor, gy its gradient. For each input i with need[i] set, store the
 * gradient in gin[i] (same shape as input i). Return MG_OK or the failing
 * builder's status. A rule reads the op's inputs from g->nodes[y].in during
 * the call and nowhere else: under checkpointing, the rewriter hands it a
 * node whose inputs are recomputed copies. */
typedef mg_status (*mg_grad_fn)(mg_graph *g, mg_tensor y, mg_tensor gy,
                                const bool *need, mg_tensor *gin);

/* Cost rule: floating point operations to compute out. */
typedef double (*mg_flops_fn)(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              const mg_tdesc *out);

/* Scratch rule: bytes of workspace the op's kernels need (an im2col
 * buffer, say), the most that any backend's kernel for it needs (each
 * backend's workspace query, src/exec/backend.h, must not exceed it). The
 * executor lends it from the pool for the length of the op, so the plan's
 * peak prediction counts it. */
typedef size_t (*mg_workspace_fn)(const mg_tdesc *in, int n_in,
                                  const mg_attrs *a, const mg_tdesc *out);

typedef struct mg_op_def {
    const char *name;
    int n_inputs;
    unsigned flags;
    mg_infer_fn infer;
    mg_grad_fn grad;   /* NULL: not differentiable */
    mg_flops_fn flops; /* NULL: flops_per_elem * numel(out) */
    mg_workspace_fn workspace; /* NULL: none */
    double flops_per_elem;
    /* Bitmask of inputs that gradients never flow into (labels, say). */
    unsigned no_grad_inputs;
} mg_op_def;

extern const mg_op_def mg_op_table[MG_OP_COUNT];

/* ---- graph internals ----------------------------------------------------- */

/* Check ids (MG_NO_TENSOR propagates silently), run the shape rule, append
 * the node. Returns its id or MG_NO_TENSOR with the error set. */
mg_tensor mg_graph_add_node(mg_graph *g, mg_op op, int n_in,
                            const mg_tensor *in, const mg_attrs *attrs);
/* Input i (-1: the caller's label names it) is MG_NO_TENSOR: keep the
 * pending error, or set one. */
void mg_graph_missing_input(const char *op, int i);
/* Validate a tensor id given by the caller; `what` names the argument. */
mg_status mg_graph_check_id(const mg_graph *g, mg_tensor t, const char *what);
/* "'fc1' (#12 matmul)" or "#12 (matmul)" for error messages. */
const char *mg_graph_tensor_label(const mg_graph *g, mg_tensor t, char *buf,
                                  size_t len);
/* Drop every node with id >= n (used to undo a failed mg_gradients). */
void mg_graph_truncate(mg_graph *g, int32_t n);

/* Build helpers used by gradient rules. */
/* Sum t down to `shape` (the inverse of broadcasting). */
mg_tensor mg_sum_to(mg_graph *g, mg_tensor t, const mg_tdesc *shape);
/* Dropout with an explicit RNG offset: the gradient of dropout replays the
 * forward mask through it. */
mg_tensor mg_dropout_at(mg_graph *g, mg_tensor x, double p, uint64_t seed,
                        uint64_t offset);

/* Flops and bytes moved to compute tensor t from its inputs. */
void mg_graph_op_cost(const mg_graph *g, mg_tensor t, double *flops,
                      double *bytes);
/* Workspace bytes the kernels computing t need (0 for most ops). */
size_t mg_graph_op_workspace(const mg_graph *g, mg_tensor t);

/* ---- analysis (igraph) --------------------------------------------------- */

/* Topological order of the nodes marked in `include` (all when NULL),
 * reading inputs through remap as mg_graph_mark_ancestors does,
 * written to order[] with its length in *n_order. Fails with MG_ERR_CYCLE
 * naming an op on a cycle. Runs igraph with its error handler switched off
 * so that nothing aborts the process. */
mg_status mg_graph_topo_order(const mg_graph *g, const bool *include,
                              const mg_tensor *remap, mg_tensor *order,
                              int32_t *n_order);
/* Mark in `needed` (length g->n, zeroed by the caller) every node the given
 * roots depend on, roots included. With remap (NULL: none), node i's input
 * j is read as remap[in[j]]. MG_ERR_NOMEM (message prefixed by what) if its
 * scratch stack cannot be allocated. */
mg_status mg_graph_mark_ancestors(const mg_graph *g, const mg_tensor *roots,
                                  int n_roots, const mg_tensor *remap,
                                  bool *needed, const char *what);
/* Articulation points of the undirected graph on the nodes in `include`
 * (edges between included nodes only), written to out[] (room for g->n)
 * with their count in *n_out, in id order. igraph does the work. */
mg_status mg_graph_articulation_points(const mg_graph *g, const bool *include,
                                       mg_tensor *out, int32_t *n_out);

#endif
