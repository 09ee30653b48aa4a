/*
 * autodiff.c - mg_gradients: reverse-mode differentiation that appends the
 * gradient graph to the forward graph.
 *
 * Gradients are graph ops built by each op's gradient rule (the op table),
 * so the backward pass is an ordinary part of the graph: the planner
 * schedules it, and the checkpointing rewriter can recompute through it.
 * Nothing here knows a particular op, or a checkpoint policy: checkpoint.c
 * says what the forward pass keeps, recompute.c makes the copies, and
 * policy_memory.c runs the memory policy's search over builds from here.
 */
#include "../graph/graph.h"
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

static bool is_float(mg_dtype d) { return mgi_dtype_is_float(d); }

static mg_status check_args(const mg_graph *g, const mg_tensor *ys, int n_ys,
                            const mg_tensor *grad_ys, const mg_tensor *xs,
                            int n_xs, const mg_tensor *grads_out) {
    if (!g)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_gradients: graph is NULL");
    if (!ys || n_ys < 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: needs at least one y (got %s, %d)",
                            ys ? "ys" : "NULL", n_ys);
    if (!xs || n_xs < 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: needs at least one x (got %s, %d)",
                            xs ? "xs" : "NULL", n_xs);
    if (!grads_out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: grads_out is NULL");
    char label[160];
    mg_status s;
    for (int j = 0; j < n_ys; j++) {
        if ((s = mgi_graph_check_id(g, ys[j], "mg_gradients (y)")) != MG_OK)
            return s;
        const mg_node *y = &g->nodes[ys[j]];
        if (!is_float(mgi_node_desc(g, y)->dtype))
            return mg_set_error(
                MG_ERR_DTYPE,
                "mg_gradients: y %s is %s; only float tensors "
                "can be differentiated",
                mgi_graph_tensor_label(g, ys[j], label, sizeof label),
                mg_dtype_name(mgi_node_desc(g, y)->dtype));
        mg_tensor seed = grad_ys ? grad_ys[j] : MG_NO_TENSOR;
        if (seed == MG_NO_TENSOR) {
            if (mgi_tdesc_numel(mgi_node_desc(g, y)) != 1) {
                char shape[128];
                return mg_set_error(
                    MG_ERR_SHAPE,
                    "mg_gradients: y %s has shape %s; a y with more than one "
                    "element needs a seed gradient in grad_ys",
                    mgi_graph_tensor_label(g, ys[j], label, sizeof label),
                    mgi_shape_str(mgi_node_desc(g, y), shape, sizeof shape));
            }
            continue;
        }
        if ((s = mgi_graph_check_id(g, seed, "mg_gradients (grad_ys)")) !=
            MG_OK)
            return s;
        const mg_node *sd = &g->nodes[seed];
        if (!mgi_tdesc_same_shape(mgi_node_desc(g, sd), mgi_node_desc(g, y)) ||
            mgi_node_desc(g, sd)->dtype != mgi_node_desc(g, y)->dtype) {
            char a[128], b[128], label2[160];
            return mg_set_error(
                mgi_node_desc(g, sd)->dtype != mgi_node_desc(g, y)->dtype
                    ? MG_ERR_DTYPE
                    : MG_ERR_SHAPE,
                "mg_gradients: seed %s is %s %s but y %s is %s %s",
                mgi_graph_tensor_label(g, seed, label2, sizeof label2),
                mgi_shape_str(mgi_node_desc(g, sd), a, sizeof a),
                mg_dtype_name(mgi_node_desc(g, sd)->dtype),
                mgi_graph_tensor_label(g, ys[j], label, sizeof label),
                mgi_shape_str(mgi_node_desc(g, y), b, sizeof b),
                mg_dtype_name(mgi_node_desc(g, y)->dtype));
        }
    }
    for (int i = 0; i < n_xs; i++) {
        if ((s = mgi_graph_check_id(g, xs[i], "mg_gradients (x)")) != MG_OK)
            return s;
        if (!is_float(mgi_graph_desc(g, xs[i])->dtype))
            return mg_set_error(
                MG_ERR_DTYPE,
                "mg_gradients: x %s is %s; gradients exist only for float "
                "tensors",
                mgi_graph_tensor_label(g, xs[i], label, sizeof label),
                mg_dtype_name(mgi_graph_desc(g, xs[i])->dtype));
        /* mg_matmul read this transpose's input in place: the product's
         * gradient flows to the input, not through it, so a gradient with
         * respect to it would silently miss that product */
        if (g->nodes[xs[i]].flags & MG_NODE_FOLDED)
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_gradients: x %s is a transpose that mg_matmul reads in "
                "place (its input, tensor %d, is what the product reads); "
                "ask for the gradient of tensor %d and transpose it",
                mgi_graph_tensor_label(g, xs[i], label, sizeof label),
                (int)g->nodes[xs[i]].in[0], (int)g->nodes[xs[i]].in[0]);
    }
    return MG_OK;
}

/* Add a contribution to the gradient accumulated for tensor t. Fan-out
 * contributions arrive in reverse topological order of their consumers, so
 * the sum is built in the same order every time. */
static mg_status accumulate(mg_graph *g, mg_tensor *gsum, mg_tensor t,
                            mg_tensor contrib) {
    if (contrib == MG_NO_TENSOR) return MG_ERR_INTERNAL;
    if (gsum[t] == MG_NO_TENSOR) {
        gsum[t] = contrib;
        return MG_OK;
    }
    mg_tensor sum = mg_add(g, gsum[t], contrib);
    if (sum == MG_NO_TENSOR) return MG_ERR_INTERNAL;
    gsum[t] = sum;
    return MG_OK;
}

/* Status to return after a builder gave MG_NO_TENSOR: its message is set. */
static mg_status builder_failed(void) {
    mg_status s = mg_last_status();
    return s != MG_OK ? s
                      : mg_set_error(MG_ERR_INTERNAL,
                                     "mg_gradients: a "
                                     "gradient op could not be built");
}

/* Run v's gradient rule on recomputed values. A recomputed v is its copy,
 * whose inputs are copies already. A kept v is read as it is, but the rule
 * is handed the copies of its inputs (rules read their inputs from their
 * arguments, see op_table.h), so the backward ops never read a forward
 * tensor the forward pass has released. The graph itself is not edited. */
static mg_status call_grad_rule(mg_graph *g, mg_recompute *r, mg_tensor v,
                                mg_tensor gy, const bool *need,
                                mg_tensor *gin) {
    const bool kept = !r || r->keep[v];
    /* kept in 16 bits: y is the unpacked copy, whose node is an unpack, so
     * the rule gets v's own node with its inputs' copies, as a kept v */
    const bool packed = r && r->store16 && r->store16[v];
    const mg_tensor first_copy = g->n;
    const mg_tensor y = kept ? v : mgi_recompute_get(g, r, v);
    if (y == MG_NO_TENSOR) return builder_failed();
    /* A copy: the rule's builder calls may move g->nodes. */
    mg_node node = g->nodes[packed ? v : y];
    for (int k = 0; r && (kept || packed) && k < node.n_in; k++) {
        node.in[k] = mgi_recompute_get(g, r, node.in[k]);
        if (node.in[k] == MG_NO_TENSOR) return builder_failed();
    }
    const mg_tensor first_rule = g->n;
    mg_status s =
        mgi_op_table[node.op].grad(g, &node, node.in, y, gy, need, gin);
    if (s == MG_OK) {
        mgi_recompute_forget_unread(g, r, first_copy, first_rule);
        mgi_recompute_release_remat(g, r, first_copy, first_rule);
    }
    return s;
}

/* Backpropagate over `order` (topological, ancestors of the ys) with
 * `relevant` marking the nodes on a path from some x to some y. With r,
 * rules read recomputed copies of the forward tensors r does not keep. */
static mg_status backprop(mg_graph *g, const mg_tensor *order, int32_t n_order,
                          const bool *relevant, mg_recompute *r,
                          mg_tensor *gsum) {
    char label[160];
    for (int32_t k = n_order - 1; k >= 0; k--) {
        mg_tensor v = order[k];
        if (!relevant[v] || gsum[v] == MG_NO_TENSOR) continue;
        /* Copy what we need: building ops may move g->nodes. Only the
         * op and inputs, not the node: it is hundreds of bytes, and every
         * trial of the budget search copied each one. */
        const mg_op_def *def = &mgi_op_table[g->nodes[v].op];
        const int n_in = g->nodes[v].n_in;
        mg_tensor in[MG_MAX_INPUTS];
        memcpy(in, g->nodes[v].in, sizeof in);
        bool need[MG_MAX_INPUTS] = {false};
        bool any = false;
        for (int i = 0; i < n_in; i++) {
            need[i] = relevant[in[i]] && !(def->no_grad_inputs & (1u << i)) &&
                      is_float(mgi_graph_desc(g, in[i])->dtype);
            any = any || need[i];
        }
        if (!any) continue;
        if (!def->grad)
            return mg_set_error(
                MG_ERR_NOT_DIFFERENTIABLE,
                "mg_gradients: op %s has no gradient rule",
                mgi_graph_tensor_label(g, v, label, sizeof label));
        mg_tensor gin[MG_MAX_INPUTS];
        for (int i = 0; i < MG_MAX_INPUTS; i++) gin[i] = MG_NO_TENSOR;
        mg_status s = mgi_recompute_enter(g, r, v);
        if (s == MG_OK) s = call_grad_rule(g, r, v, gsum[v], need, gin);
        if (s != MG_OK) return s;
        for (int i = 0; i < n_in; i++) {
            if (!need[i]) continue;
            if (gin[i] == MG_NO_TENSOR) return builder_failed();
            if ((s = accumulate(g, gsum, in[i], gin[i])) != MG_OK)
                return builder_failed();
        }
    }
    return MG_OK;
}

/* What one mg_gradients call learns of the forward graph before it builds
 * anything, indexed by tensor id (the graph as it was before the call).
 * It is the same for every trial of the policies' searches and for the
 * final build, since each trial leaves the graph as it found it, so it is
 * found once and shared. */
typedef struct ad_forward {
    mg_tensor *order; /* the ancestors of the ys, in topological order */
    int32_t n_order;
    bool *marks;    /* in order */
    bool *relevant; /* in order and depends on some x */
    bool *forward;  /* in order and computed (not a leaf) */
    bool *is_y;
    /* Policy memory: the articulation points of the forward graph, where
     * its segments may end; NULL under the other policies. */
    bool *is_ap;
} ad_forward;

static void forward_free(ad_forward *f) {
    free(f->order);
    free(f->marks);
    free(f->relevant);
    free(f->forward);
    free(f->is_y);
    free(f->is_ap);
    memset(f, 0, sizeof *f);
}

/* The call's one igraph view of the forward graph (analysis.c) and what it
 * answers: with order, the topological order where the creation order is
 * not one (a graph rewired by mg_tensor_set_input), the leaves first, as
 * they read nothing; with aps, the articulation points. The leaves are no
 * vertices of it: the memory policy cuts between computed tensors, and a
 * parameter that two layers read does not join them. */
static mg_status forward_from_igraph(const mg_graph *g, ad_forward *f,
                                     bool order, bool aps) {
    mgi_graph_view *v;
    mg_status s = mgi_graph_view_new(g, f->forward, NULL, &v, "mg_gradients");
    if (s == MG_OK && order) {
        int32_t k = 0, n_computed = 0;
        for (int32_t t = 0; t < g->n; t++)
            if (f->marks[t] && !f->forward[t]) f->order[k++] = t;
        s = mgi_graph_view_topo_order(v, f->order + k, &n_computed);
        f->n_order = k + n_computed;
    }
    if (s == MG_OK && aps) {
        f->is_ap = calloc((size_t)(g->n ? g->n : 1), sizeof *f->is_ap);
        s = f->is_ap
                ? mgi_graph_view_articulation_points(v, f->is_ap)
                : mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    }
    mgi_graph_view_free(v);
    return s;
}

/* Order the ancestors of the ys, mark which are computed, which depend on
 * an x and which are ys; for policy memory, find the articulation points.
 * igraph is asked only where the sweep cannot answer alone, and then
 * once, however many builds the policy's search tries. */
static mg_status forward_analyse(const mg_graph *g, const mg_tensor *ys,
                                 int n_ys, const mg_tensor *xs, int n_xs,
                                 const mg_checkpoints *ckpt, ad_forward *f) {
    const size_t n = (size_t)(g->n ? g->n : 1);
    memset(f, 0, sizeof *f);
    f->order = malloc(n * sizeof *f->order);
    f->marks = calloc(n, sizeof *f->marks);
    f->relevant = calloc(n, sizeof *f->relevant);
    f->forward = calloc(n, sizeof *f->forward);
    f->is_y = calloc(n, sizeof *f->is_y);
    if (!f->order || !f->marks || !f->relevant || !f->forward || !f->is_y)
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    bool in_order = true;
    mg_status s =
        mgi_graph_ancestors_sweep(g, ys, n_ys, NULL, f->marks, f->order,
                                  &f->n_order, &in_order, "mg_gradients");
    if (s != MG_OK) return s;
    for (int32_t t = 0; t < g->n; t++)
        f->forward[t] =
            f->marks[t] && !(mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF);
    const bool aps = ckpt && ckpt->policy == MG_CKPT_MEMORY;
    if (!in_order || aps) s = forward_from_igraph(g, f, !in_order, aps);
    if (s != MG_OK) return s;
    /* relevant = depends on some x (and, being in `order`, feeds some y). */
    for (int i = 0; i < n_xs; i++) f->relevant[xs[i]] = f->marks[xs[i]];
    for (int32_t k = 0; k < f->n_order; k++) {
        mg_tensor t = f->order[k];
        const mg_node *nd = &g->nodes[t];
        for (int i = 0; i < nd->n_in && !f->relevant[t]; i++)
            f->relevant[t] = f->relevant[nd->in[i]];
    }
    bool any = false;
    for (int j = 0; j < n_ys; j++) {
        f->is_y[ys[j]] = true;
        any = any || f->relevant[ys[j]];
    }
    if (!any) {
        char label[160];
        return mg_set_error(
            MG_ERR_INVALID_ARG,
            "mg_gradients: no y depends on any x (e.g. y %s), "
            "so every gradient would be zero",
            mgi_graph_tensor_label(g, ys[0], label, sizeof label));
    }
    return MG_OK;
}

/* Scratch arrays of one build, indexed by tensor id (the graph as it was
 * before the call), beside the call's forward analysis. */
typedef struct ad_work {
    const ad_forward *fw;
    mg_tensor *gsum, *copy, *stack, *made;
    int32_t *mark;
    bool *keep, *chosen;
    bool *store16;     /* NULL unless mg_checkpoints.store16 */
    mg_tensor *pack16; /* the same */
} ad_work;

static mg_status work_alloc(ad_work *w, const ad_forward *fw,
                            int32_t n_nodes) {
    size_t n = (size_t)(n_nodes ? n_nodes : 1);
    memset(w, 0, sizeof *w);
    w->fw = fw;
    w->gsum = malloc(n * sizeof *w->gsum);
    w->copy = malloc(n * sizeof *w->copy);
    w->stack = malloc(n * sizeof *w->stack);
    w->made = malloc(n * sizeof *w->made);
    w->mark = malloc(n * sizeof *w->mark);
    w->keep = calloc(n, sizeof *w->keep);
    w->chosen = calloc(n, sizeof *w->chosen);
    if (!w->gsum || !w->copy || !w->stack || !w->made || !w->mark ||
        !w->keep || !w->chosen)
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (size_t i = 0; i < n; i++) {
        w->gsum[i] = w->copy[i] = MG_NO_TENSOR;
        w->mark[i] = -1;
    }
    return MG_OK;
}

static void work_free(ad_work *w) {
    free(w->gsum);
    free(w->copy);
    free(w->stack);
    free(w->made);
    free(w->mark);
    free(w->keep);
    free(w->chosen);
    free(w->store16);
    free(w->pack16);
}

/* mg_checkpoints.compact under policy none: a tensor r that an op reads
 * whole in its gradient (MG_OPF_READS_WHOLE: a conv's weight gradient
 * reads its input, a matmul's its operands), so that no pack can hold it,
 * is not kept where it is cheap to make again (MG_OPF_CHEAP) from inputs
 * the backward pass keeps anyway; nor is a cheap input of r whose own
 * inputs are kept. A backward op that reads r reads a copy that
 * recompute.c makes from those inputs just before it, with the same
 * kernels on the same inputs, so the same bits. The pattern is
 * r = relu(batchnorm(x, gamma, beta)) feeding a convolution, in every
 * block of a pre-activation ResNet and of torchvision's: x is kept for
 * the batch norm's gradient, so r costs nothing beyond it, at the price of
 * one batch norm and one relu per block in the backward pass. Under the
 * other policies the kept set is the policy's, and left as it is. */
static bool kept_or_leaf(const mg_graph *g, const ad_work *w, mg_tensor t) {
    return w->keep[t] || (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF);
}

/* Whether t is a cheap forward op, not a y, that can be made again. */
static bool cheap(const mg_graph *g, const ad_work *w, mg_tensor t) {
    return (mgi_op_table[g->nodes[t].op].flags & MG_OPF_CHEAP) &&
           w->fw->forward[t] && !w->fw->is_y[t];
}

/* Whether every input of t is kept or a leaf. */
static bool inputs_kept(const mg_graph *g, const ad_work *w, mg_tensor t) {
    const mg_node *nd = &g->nodes[t];
    for (int k = 0; k < nd->n_in; k++)
        if (!kept_or_leaf(g, w, nd->in[k])) return false;
    return true;
}

/* An input of r that is made again with it: a cheap one whose inputs are
 * kept (so it need not be kept itself). */
static bool rebuilt_input(const mg_graph *g, const ad_work *w, mg_tensor i) {
    return cheap(g, w, i) && inputs_kept(g, w, i);
}

static mg_status rebuild_cheap(const mg_graph *g, int32_t n, ad_work *w) {
    /* whole[t]: t feeds an op whose gradient reads t whole. Where only
     * packs read it (a max pool's argmax, relu's sign), compact.c keeps
     * those, less than a rebuilt copy's transient tensor. */
    bool *whole = calloc((size_t)(n ? n : 1), sizeof *whole);
    if (!whole)
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (int32_t k = 0; k < w->fw->n_order; k++) {
        const mg_node *nd = &g->nodes[w->fw->order[k]];
        if (mgi_op_table[nd->op].flags & MG_OPF_READS_WHOLE)
            for (int i = 0; i < nd->n_in; i++) whole[nd->in[i]] = true;
    }
    for (int32_t t = 0; t < n; t++) {
        if (!whole[t] || !w->keep[t] || !cheap(g, w, t)) continue;
        const mg_node *r = &g->nodes[t];
        /* decided for every input before any keep[] changes */
        bool rebuilt[MG_MAX_INPUTS], ok = true;
        for (int k = 0; k < r->n_in; k++) {
            rebuilt[k] = rebuilt_input(g, w, r->in[k]);
            ok = ok && (rebuilt[k] || kept_or_leaf(g, w, r->in[k]));
        }
        if (!ok) continue;
        for (int k = 0; k < r->n_in; k++)
            if (rebuilt[k]) w->keep[r->in[k]] = false;
        w->keep[t] = false;
    }
    free(whole);
    return MG_OK;
}

/* mg_checkpoints.store16: every float32 tensor the policy keeps for the
 * backward pass, other than the ys and leaves, is kept in 16 bits instead
 * (recompute.c makes its pack and unpacked copies). */
static mg_status store16_choose(const mg_graph *g, int32_t n, ad_work *w) {
    free(w->store16);
    free(w->pack16);
    w->store16 = calloc((size_t)(n ? n : 1), sizeof *w->store16);
    w->pack16 = malloc((size_t)(n ? n : 1) * sizeof *w->pack16);
    if (!w->store16 || !w->pack16)
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (int32_t t = 0; t < n; t++) {
        w->pack16[t] = MG_NO_TENSOR;
        if (!w->keep[t] || !w->fw->forward[t] || w->fw->is_y[t] ||
            mgi_graph_desc(g, t)->dtype != MG_F32)
            continue;
        w->keep[t] = false;
        w->store16[t] = true;
    }
    return MG_OK;
}

static mg_status gradients_build(mg_graph *g, const mg_tensor *ys, int n_ys,
                                 const mg_tensor *grad_ys, const mg_tensor *xs,
                                 int n_xs, const mg_checkpoints *ckpt,
                                 const mg_memory_search *m, ad_work *w,
                                 mg_tensor *result) {
    const int32_t n = g->n;
    const ad_forward *fw = w->fw;
    mg_status s = mgi_checkpoints_choose(g, ckpt, m, fw->order, fw->n_order,
                                         fw->forward, fw->is_y, fw->is_ap,
                                         w->keep, w->chosen);
    if (s != MG_OK) return s;
    if (ckpt && ckpt->compact && ckpt->policy == MG_CKPT_NONE) {
        s = rebuild_cheap(g, n, w);
        if (s != MG_OK) return s;
    }
    if (ckpt && ckpt->store16) {
        s = store16_choose(g, n, w);
        if (s != MG_OK) return s;
    }
    bool recompute = false;
    for (int32_t t = 0; t < n && !recompute; t++)
        recompute = fw->forward[t] && !w->keep[t];
    /* A gradient rule adds one to three nodes per forward op, and a
     * recomputed segment one more: room for that at once. */
    mgi_graph_reserve(g, (int64_t)n * (recompute ? 4 : 3) + 64);
    mg_recompute r = {.keep = w->keep,
                      .copy = w->copy,
                      .stack = w->stack,
                      .n = n,
                      .cur_seg = -1,
                      .made = w->made,
                      .mark = w->mark,
                      .store16 = w->store16,
                      .pack16 = w->pack16};
    /* The budget policy's point may carry a multi-level plan. */
    if (ckpt && ckpt->policy == MG_CKPT_BUDGET && m && !m->plain) {
        r.ml = ((const mg_budget_point *)m)->ml;
        r.remat = ((const mg_budget_point *)m)->remat;
        r.lazy = r.remat != NULL;
    }

    for (int j = 0; j < n_ys; j++) {
        if (!fw->relevant[ys[j]]) continue;
        const mg_node *y = &g->nodes[ys[j]];
        mg_tensor seed = grad_ys ? grad_ys[j] : MG_NO_TENSOR;
        if (seed == MG_NO_TENSOR) {
            mg_tdesc d = *mgi_node_desc(g, y);
            seed = mg_fill(g, d.dtype, d.ndim, d.shape, 1.0);
            if (seed == MG_NO_TENSOR) return builder_failed();
        }
        if (accumulate(g, w->gsum, ys[j], seed) != MG_OK)
            return builder_failed();
    }
    s = backprop(g, fw->order, fw->n_order, fw->relevant, recompute ? &r : NULL,
                 w->gsum);
    if (s == MG_OK && ckpt && ckpt->compact)
        s = mgi_compact_saved(g, n, w->keep, fw->is_y);
    if (s != MG_OK) return s;

    for (int i = 0; i < n_xs; i++) {
        result[i] = w->gsum[xs[i]];
        if (result[i] != MG_NO_TENSOR) continue;
        /* No y depends on this x: its gradient is zero, as in jax.grad. */
        mg_tdesc d = *mgi_graph_desc(g, xs[i]);
        result[i] = mg_fill(g, d.dtype, d.ndim, d.shape, 0.0);
        if (result[i] == MG_NO_TENSOR) return builder_failed();
    }
    return MG_OK;
}

/* The arguments of one mg_gradients call. */
typedef struct ad_call {
    const mg_tensor *ys, *grad_ys, *xs;
    int n_ys, n_xs;
    const mg_checkpoints *ckpt;
    const ad_forward *fw; /* found once for every build of the call */
} ad_call;

/* Append the backward graph once. On success w and result describe it; on
 * failure the caller truncates the graph. */
static mg_status build_once(mg_graph *g, const ad_call *c,
                            const mg_memory_search *m, ad_work *w,
                            mg_tensor *result) {
    mg_status s = work_alloc(w, c->fw, g->n);
    if (s != MG_OK) return s;
    const unsigned flags_before = g->building_flags;
    g->building_flags |= MG_NODE_BACKWARD;
    s = gradients_build(g, c->ys, c->n_ys, c->grad_ys, c->xs, c->n_xs, c->ckpt,
                        m, w, result);
    g->building_flags = flags_before;
    return s;
}

/* One trial of the memory policy's search (policy_memory.c): the backward
 * graph at point m, whose scratch arrays the search does not need. */
static mg_status build_trial(mg_graph *g, const void *ctx,
                             const mg_memory_search *m, mg_tensor *result) {
    ad_work w;
    mg_status s = build_once(g, ctx, m, &w, result);
    work_free(&w);
    return s;
}

mg_status mgi_gradients_point(mg_graph *g, const mg_tensor *ys, int n_ys,
                              const mg_tensor *xs, int n_xs,
                              const mg_budget_point *point,
                              mg_tensor *grads_out) {
    mg_status s = check_args(g, ys, n_ys, NULL, xs, n_xs, grads_out);
    if (s != MG_OK) return s;
    if (!point)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: budget point is NULL");
    const mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                               .budget_bytes = SIZE_MAX};
    ad_forward fw;
    const ad_call call = {ys, NULL, xs, n_ys, n_xs, &ck, &fw};
    const int32_t n_before = g->n;
    const uint64_t rng_before = g->rng_offset;
    ad_work w = {0};
    s = forward_analyse(g, ys, n_ys, xs, n_xs, &ck, &fw);
    if (s == MG_OK) s = build_once(g, &call, &point->search, &w, grads_out);
    if (s == MG_OK) {
        for (int32_t t = 0; t < n_before; t++)
            if (w.chosen[t]) g->nodes[t].flags |= MG_NODE_CHOSEN;
    } else {
        mgi_graph_truncate(g, n_before);
        g->rng_offset = rng_before;
    }
    work_free(&w);
    forward_free(&fw);
    return s;
}

static void budget_point_free(mg_budget_point *m) {
    free(m->keep_set);
    free(m->remat);
    mgi_ml_plan_free(m->ml);
    free(m->ml);
    free(m->search.bwd_reads);
    free(m->offload);
    m->offload = NULL;
    m->keep_set = m->remat = NULL;
    m->ml = NULL;
    m->search.bwd_reads = NULL;
}

/* The budget policy with compaction: its search run twice, with the packs
 * and without them, and the plan that fits with fewer recomputed flops
 * taken (the compacted one on a tie). At a low budget the compacted plans
 * can fit nowhere the plain ones do (mg-checkmate's U-Net: 38656 against
 * 38400 bytes; not from where the packs are made: making each after its
 * source's last forward reader moved no peak), and compaction must never
 * make the policy worse. *call's
 * checkpoints become *plain when the plain plan wins. */
static mg_status budget_search_compact(mg_graph *g, ad_call *call,
                                       mg_checkpoints *plain,
                                       mg_budget_point *m) {
    const mg_checkpoints *packed = call->ckpt;
    mg_status s = mgi_budget_search(g, packed, call->ys, call->n_ys, call->n_xs,
                                    build_trial, call, m);
    if (s != MG_OK && s != MG_ERR_NOMEM) return s;
    if (s == MG_OK && m->flops == 0) return MG_OK; /* nothing to beat */
    *plain = *packed;
    plain->compact = 0;
    ad_call pc = *call;
    pc.ckpt = plain;
    mg_budget_point mp = {.search = {.segment_factor = 1.0}};
    mg_status sp = mgi_budget_search(g, plain, call->ys, call->n_ys, call->n_xs,
                                     build_trial, &pc, &mp);
    if (sp != MG_OK && sp != MG_ERR_NOMEM) {
        budget_point_free(m);
        return sp;
    }
    if (sp == MG_OK && (s != MG_OK || mp.flops < m->flops)) {
        budget_point_free(m);
        *m = mp;
        call->ckpt = plain;
        mg_clear_error();
        return MG_OK;
    }
    if (s == MG_OK) {
        budget_point_free(&mp);
        mg_clear_error();
        return MG_OK;
    }
    const size_t min_peak =
        mp.min_peak < m->min_peak ? mp.min_peak : m->min_peak;
    return mg_set_error(MG_ERR_NOMEM,
                        "mg_gradients: no checkpoint schedule fits the "
                        "budget of %zu bytes; the smallest budget that fits "
                        "is %zu bytes (policy none needs %zu, %zu with "
                        "compaction; pool bytes with the ys and gradients "
                        "in caller memory)",
                        packed->budget_bytes, min_peak, mp.peak_none,
                        m->peak_none);
}

mg_status mg_gradients(mg_graph *g, const mg_tensor *ys, int n_ys,
                       const mg_tensor *grad_ys, const mg_tensor *xs, int n_xs,
                       const mg_checkpoints *checkpoints,
                       mg_tensor *grads_out) {
    mg_status s = check_args(g, ys, n_ys, grad_ys, xs, n_xs, grads_out);
    if (s != MG_OK) return s;
    if ((s = mgi_checkpoints_check(g, checkpoints)) != MG_OK) return s;

    ad_forward fw;
    s = forward_analyse(g, ys, n_ys, xs, n_xs, checkpoints, &fw);
    if (s != MG_OK) {
        forward_free(&fw);
        return s;
    }
    ad_call call = {ys, grad_ys, xs, n_ys, n_xs, checkpoints, &fw};
    mg_checkpoints plain;
    const int32_t n_before = g->n;
    const uint64_t rng_before = g->rng_offset;
    mg_budget_point m = {.search = {.segment_factor = 1.0}};
    const bool budget = checkpoints && checkpoints->policy == MG_CKPT_BUDGET;
    if (budget && checkpoints->compact)
        s = budget_search_compact(g, &call, &plain, &m);
    else if (budget)
        s = mgi_budget_search(g, checkpoints, ys, n_ys, n_xs, build_trial,
                              &call, &m);
    else
        s = mgi_memory_search_best(g, checkpoints, n_xs, build_trial, &call,
                                   &m.search);
    if (s != MG_OK) {
        forward_free(&fw);
        return s;
    }
    ad_work w;
    mg_tensor *result = malloc((size_t)n_xs * sizeof *result);
    s = result ? build_once(g, &call, &m.search, &w, result)
               : mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    if (s == MG_OK) {
        memcpy(grads_out, result, (size_t)n_xs * sizeof *result);
        for (int32_t t = 0; t < n_before; t++) {
            if (w.chosen[t]) g->nodes[t].flags |= MG_NODE_CHOSEN;
            /* the last budget call's choice only */
            if (budget) g->nodes[t].flags &= (uint8_t)~MG_NODE_OFFLOAD;
            if (m.offload && m.offload[t])
                g->nodes[t].flags |= MG_NODE_OFFLOAD;
        }
    } else {
        /* Leave the graph as the caller had it. */
        mgi_graph_truncate(g, n_before);
        g->rng_offset = rng_before;
    }
    if (result) work_free(&w);
    free(result);
    budget_point_free(&m);
    forward_free(&fw);
    return s;
}
