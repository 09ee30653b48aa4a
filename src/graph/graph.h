/*
 * graph.h - the graph IR inside memgrad: nodes (one per tensor), the
 * node builder and the graph analysis helpers. What each op is (shape,
 * gradient and cost rules) is in op_table.h.
 *
 * Every tensor is the single output of one node. Leaves are nodes whose op
 * is MG_OP_INPUT or MG_OP_PARAM. Node ids are the public mg_tensor ids.
 */
#ifndef MG_GRAPH_H
#define MG_GRAPH_H

#include "../common/ir.h"
#include "op_table.h"

enum {
    MG_NODE_BACKWARD = 1u << 0,   /* appended by mg_gradients */
    MG_NODE_CHECKPOINT = 1u << 1, /* tagged by the caller as a checkpoint */
    MG_NODE_CHOSEN = 1u << 2,     /* kept by a checkpoint policy */
    MG_NODE_RECOMPUTE = 1u << 3,  /* a recomputed copy of node `orig` */
    MG_NODE_OWN_ATTRS = 1u << 4,  /* attrs is its own, in g's blocks */
    /* a compact saved form's pack (src/rewrite/compact.c): scheduled right
     * after its input, though made after the backward ops that read it */
    MG_NODE_PACK = 1u << 5,
    /* chosen by MG_CKPT_BUDGET to be offloaded (mg_graph_offloads) */
    MG_NODE_OFFLOAD = 1u << 6,
    /* a transpose some matmul reads in place (ops_matmul.c): that product
     * contributes nothing to a gradient with respect to it, so
     * mg_gradients refuses it as an x */
    MG_NODE_FOLDED = 1u << 7
};

typedef struct mg_node {
    uint16_t op; /* an mg_op */
    uint8_t n_in;
    uint8_t flags; /* MG_NODE_* */
    /* Its descriptor: an index into the graph's table of distinct ones
     * (mgi_graph_desc). Inline, the 72-byte descriptor made a node 128
     * bytes, and faulting in a 10^6-op training graph's 384 MB was a third
     * of differentiating it; most nodes share a shape with an input
     * (issue 32). */
    int32_t desc;
    mg_tensor in[MG_MAX_INPUTS];
    /* Never NULL, never changed once the node is made: mgi_attrs_zero for
     * an op without attributes, else a copy in the graph's attribute
     * blocks, which recomputed copies share. Out of line, as most nodes
     * have none: inline, mg_attrs made a node 448 bytes and a 10^6-op
     * training graph 1.3 GB to fault in (issue 32). */
    const mg_attrs *attrs;
    mg_tensor orig; /* MG_NODE_RECOMPUTE: the forward node it recomputes */
    /* Its name: 1 + an index into the graph's names (mgi_graph_name), or
     * 0; most nodes (the backward ones) have none. 48 bytes a node. */
    int32_t name;
} mg_node;
_Static_assert(MG_OP_COUNT <= UINT16_MAX && MG_MAX_INPUTS <= UINT8_MAX &&
                   MG_NODE_FOLDED <= UINT8_MAX,
               "mg_node's op, n_in or flags field is too narrow");

/* The distinct descriptors of a graph's tensors, each with its byte
 * size, computed once: planning asks for it several times per step. Only
 * grows: a node never changes its descriptor. */
typedef struct mgi_desc_table {
    mg_tdesc *d;
    size_t *nbytes; /* per descriptor: mgi_tdesc_nbytes */
    int32_t n, cap;
    int32_t *slot; /* hash slots: a descriptor's index + 1, or 0 if empty */
    uint32_t n_slots;
    /* whether any descriptor is bfloat16 or float16: planning asks every
     * step whether it runs widened (ops_widen.c), and a graph without
     * 16-bit tensors answers no at once */
    bool has_half;
} mgi_desc_table;

struct mgi_hooks;       /* hooks.c */
struct mgi_attrs_block; /* graph.c */

/* The attributes of every node whose op has none. */
extern const mg_attrs mgi_attrs_zero;

struct mg_graph {
    mg_node *nodes;
    int32_t n, cap;
    uint64_t rng_offset;     /* next free dropout counter */
    unsigned building_flags; /* OR-ed into every new node's flags */
    struct mgi_hooks *hooks; /* tensor hooks (memgrad_observe.h), or NULL */
    struct mgi_attrs_block *attrs_blocks; /* node attributes, newest first */
    mgi_desc_table descs;
    char **names; /* owned; NULL where a node's name was unset */
    int32_t n_names, cap_names;
};

/* The name of tensor t, or NULL. */
static inline const char *mgi_graph_name(const mg_graph *g, mg_tensor t) {
    const int32_t k = g->nodes[t].name;
    return k ? g->names[k - 1] : NULL;
}

/* Room for n nodes without growing again, where a caller knows about how
 * many it will add: doubling a 10^5-node array copies and pages in 1.5
 * times its size over again (issue 32). A hint: without the memory, nodes
 * are still added one by one. */
void mgi_graph_reserve(mg_graph *g, int64_t n);

/* The descriptor of tensor t, and its bytes. */
static inline const mg_tdesc *mgi_graph_desc(const mg_graph *g, mg_tensor t) {
    return &g->descs.d[g->nodes[t].desc];
}
static inline size_t mgi_graph_nbytes(const mg_graph *g, mg_tensor t) {
    return g->descs.nbytes[g->nodes[t].desc];
}
static inline const mg_tdesc *mgi_node_desc(const mg_graph *g,
                                            const mg_node *n) {
    return &g->descs.d[n->desc];
}

/* ---- tensor hooks (hooks.c) ---------------------------------------------- */

void mgi_hooks_free(struct mgi_hooks *h);
/* True if any hook is registered on g. */
bool mgi_hooks_any(const mg_graph *g);
bool mgi_hooks_on(const mg_graph *g, mg_tensor t);
/* Call the hooks registered on t, in registration order, with its value;
 * the first error stops them and is returned with a message naming t. */
mg_status mgi_hooks_call(const mg_graph *g, mg_tensor t, void *data);

/* ---- graph internals ----------------------------------------------------- */

/* Check ids (MG_NO_TENSOR propagates silently), run the shape rule, append
 * the node. Returns its id or MG_NO_TENSOR with the error set. */
mg_tensor mgi_graph_add_node(mg_graph *g, mg_op op, int n_in,
                             const mg_tensor *in, const mg_attrs *attrs);
/* As mgi_graph_add_node with the attributes of an existing node (its
 * attrs pointer), shared rather than copied: a recomputed copy's. */
mg_tensor mgi_graph_add_node_shared(mg_graph *g, mg_op op, int n_in,
                                    const mg_tensor *in,
                                    const mg_attrs *node_attrs);
/* Input i (-1: the caller's label names it) is MG_NO_TENSOR: keep the
 * pending error, or set one. */
void mgi_graph_missing_input(const char *op, int i);
/* Validate a tensor id given by the caller; `what` names the argument. */
mg_status mgi_graph_check_id(const mg_graph *g, mg_tensor t, const char *what);
/* "'fc1' (#12 matmul)" or "#12 (matmul)" for error messages. */
const char *mgi_graph_tensor_label(const mg_graph *g, mg_tensor t, char *buf,
                                   size_t len);
/* Make node t compute op with inputs in[0..n_in) instead (the compaction
 * pass's readers), with its attributes' ndim and shape set to *shape; the
 * op's shape rule must give t's descriptor again. The node's own copy of
 * its attributes is written over, so nothing else may share it. */
mg_status mgi_graph_node_rewrite(mg_graph *g, mg_tensor t, mg_op op,
                                 const mg_tensor *in, const mg_tdesc *shape);
/* Drop every node with id >= n (used to undo a failed mg_gradients). */
void mgi_graph_truncate(mg_graph *g, int32_t n);

/* Build helpers used by gradient rules. */
/* Sum t down to `shape` (the inverse of broadcasting). */
mg_tensor mgi_sum_to(mg_graph *g, mg_tensor t, const mg_tdesc *shape);
/* Dropout with an explicit RNG offset: the gradient of dropout replays the
 * forward mask through it. */
mg_tensor mgi_dropout_at(mg_graph *g, mg_tensor x, double p, uint64_t seed,
                         uint64_t offset);

/* Flops and bytes moved to compute tensor t from its inputs. */
void mgi_graph_op_cost(const mg_graph *g, mg_tensor t, double *flops,
                       double *bytes);
/* Workspace bytes the kernels computing t need (0 for most ops). */
size_t mgi_graph_op_workspace(const mg_graph *g, mg_tensor t);
/* For a step on bfloat16 or float16 tensors (common/widen.h): true, with
 * *bytes its float32 copies plus its rule ws (NULL: none) on the float32
 * descriptors. False for any other step. (ops_widen.c) */
bool mgi_graph_widen_workspace(const mg_graph *g, mg_tensor t,
                               mg_workspace_fn *ws, size_t *bytes);

/* ---- analysis (igraph) --------------------------------------------------- */

/* Topological order of the nodes marked in `include` (all when NULL),
 * reading inputs through remap as mgi_graph_mark_ancestors does,
 * written to order[] with its length in *n_order. Fails with MG_ERR_CYCLE
 * naming an op on a cycle. Runs igraph with its error handler switched off
 * so that nothing aborts the process. */
mg_status mgi_graph_topo_order(const mg_graph *g, const bool *include,
                               const mg_tensor *remap, mg_tensor *order,
                               int32_t *n_order);
/* Mark in `needed` (length g->n, zeroed by the caller) every node the given
 * roots depend on, roots included. With remap (NULL: none), node i's input
 * j is read as remap[in[j]]. MG_ERR_NOMEM (message prefixed by what) if its
 * scratch stack cannot be allocated. */
mg_status mgi_graph_mark_ancestors(const mg_graph *g, const mg_tensor *roots,
                                   int n_roots, const mg_tensor *remap,
                                   bool *needed, const char *what);
/* mgi_graph_mark_ancestors then mgi_graph_topo_order over them, with the
 * same remap (NULL: none): the same marks and the same order. When the
 * creation order is topological over the ancestors (unless
 * mg_tensor_set_input rewired one to read a later node), one sweep from
 * the last root down does both and reads the nodes in order, where the
 * search reads them scattered; the planner runs this on every candidate
 * of the budget search. */
mg_status mgi_graph_ancestors_order(const mg_graph *g, const mg_tensor *roots,
                                    int n_roots, const mg_tensor *remap,
                                    bool *needed, mg_tensor *order,
                                    int32_t *n_order, const char *what);
/* mgi_graph_ancestors_order's sweep alone: the marks always, and the order
 * only when *in_creation_order comes back true. Otherwise the order is the
 * caller's to find (mg_gradients takes it from the igraph view it builds
 * anyway, rather than have a second one built). */
mg_status mgi_graph_ancestors_sweep(const mg_graph *g, const mg_tensor *roots,
                                    int n_roots, const mg_tensor *remap,
                                    bool *needed, mg_tensor *order,
                                    int32_t *n_order, bool *in_creation_order,
                                    const char *what);

/* An igraph graph of the nodes marked in `include` (all when NULL), with an
 * edge from each included input (read through remap, NULL: none) to its
 * reader: built once, then asked for the order, the cycle and the
 * articulation points. It answers for the graph as it was when built. */
typedef struct mgi_graph_view mgi_graph_view;

/* Build it into *out (NULL on failure; MG_ERR_NOMEM prefixed by what). */
mg_status mgi_graph_view_new(const mg_graph *g, const bool *include,
                             const mg_tensor *remap, mgi_graph_view **out,
                             const char *what);
/* NULL is accepted. */
void mgi_graph_view_free(mgi_graph_view *v);
/* igraph's topological order of the view's nodes into order[] (room for
 * their count), or MG_ERR_CYCLE naming an op on a cycle. */
mg_status mgi_graph_view_topo_order(const mgi_graph_view *v, mg_tensor *order,
                                    int32_t *n_order);
/* igraph's articulation points of the view with its edges undirected:
 * is_ap[t] (room for the graph's nodes when the view was built) is set
 * true for each, and left alone for every other node. */
mg_status mgi_graph_view_articulation_points(const mgi_graph_view *v,
                                             bool *is_ap);

#endif
