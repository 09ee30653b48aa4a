/*
 * graph.c - the graph IR: node storage, leaves, the generic node builder
 * that checks ids and runs an op's shape rule, introspection and editing.
 *
 * Ops are appended in creation order, so a graph built only through the
 * builder is already topologically sorted; mg_tensor_set_input can break
 * that, which is why schedules take their order from analysis.c.
 */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const mg_attrs mgi_attrs_zero;

/* Node attributes live in blocks that never move, so a node's attrs
 * pointer stays valid while g->nodes grows; they are taken in node order,
 * so undoing the newest nodes gives back the newest attributes. */
#define ATTRS_PER_BLOCK 256
typedef struct mgi_attrs_block {
    struct mgi_attrs_block *older;
    int used;
    mg_attrs a[ATTRS_PER_BLOCK];
} mgi_attrs_block;

/* A home for a copy of *a in g's blocks, or NULL when out of memory. */
static mg_attrs *attrs_take(mg_graph *g) {
    mgi_attrs_block *b = g->attrs_blocks;
    if (!b || b->used == ATTRS_PER_BLOCK) {
        if (!(b = malloc(sizeof *b))) return NULL;
        b->older = g->attrs_blocks;
        b->used = 0;
        g->attrs_blocks = b;
    }
    return &b->a[b->used++];
}

/* Give back the newest n attributes taken. */
static void attrs_give_back(mg_graph *g, int32_t n) {
    while (n > 0 && g->attrs_blocks) {
        mgi_attrs_block *b = g->attrs_blocks;
        int k = n < b->used ? (int)n : b->used;
        b->used -= k;
        n -= k;
        if (b->used == 0) {
            g->attrs_blocks = b->older;
            free(b);
        }
    }
}

static bool attrs_all_zero(const mg_attrs *a) {
    return memcmp(a, &mgi_attrs_zero, sizeof *a) == 0;
}

mg_graph *mg_graph_new(void) {
    mg_graph *g = calloc(1, sizeof *g);
    if (!g) mg_set_error(MG_ERR_NOMEM, "mg_graph_new: out of memory");
    return g;
}

void mg_graph_free(mg_graph *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_names; i++) free(g->names[i]);
    free(g->names);
    free(g->nodes);
    free(g->descs.d);
    free(g->descs.nbytes);
    free(g->descs.slot);
    while (g->attrs_blocks) {
        mgi_attrs_block *b = g->attrs_blocks;
        g->attrs_blocks = b->older;
        free(b);
    }
    mgi_hooks_free(g->hooks);
    free(g);
}

int32_t mg_graph_num_tensors(const mg_graph *g) { return g ? g->n : 0; }

void mgi_graph_truncate(mg_graph *g, int32_t n) {
    int32_t owned = 0;
    for (int32_t i = n; i < g->n; i++) {
        const int32_t k = g->nodes[i].name;
        if (k) {
            free(g->names[k - 1]);
            g->names[k - 1] = NULL;
        }
        owned += (g->nodes[i].flags & MG_NODE_OWN_ATTRS) != 0;
    }
    attrs_give_back(g, owned);
    if (n < g->n) g->n = n;
    /* the slots of names given after the kept nodes' are free again: a
     * search that builds and truncates trial graphs reuses them */
    while (g->n_names > 0 && !g->names[g->n_names - 1]) g->n_names--;
}

const char *mgi_graph_tensor_label(const mg_graph *g, mg_tensor t, char *buf,
                                   size_t len) {
    if (!g || t < 0 || t >= g->n) {
        snprintf(buf, len, "#%d", (int)t);
        return buf;
    }
    const mg_node *n = &g->nodes[t];
    const char *name = mgi_graph_name(g, t);
    if (name)
        snprintf(buf, len, "'%s' (#%d %s)", name, (int)t, mgi_op_str(n->op));
    else snprintf(buf, len, "#%d (%s)", (int)t, mgi_op_str(n->op));
    return buf;
}

void mgi_graph_missing_input(const char *op, int i) {
    /* A failed inner builder call already said why: keep its message, so
     * nested calls report the cause, not a cascade. Only an MG_NO_TENSOR
     * from nowhere gets a message of its own. */
    if (mg_last_status() != MG_OK) return;
    if (i < 0)
        mg_set_error(MG_ERR_UNKNOWN_ID,
                     "%s: an input is MG_NO_TENSOR (the result of a failed "
                     "builder call?)",
                     op);
    else
        mg_set_error(MG_ERR_UNKNOWN_ID,
                     "%s: input %d is MG_NO_TENSOR (the result of a failed "
                     "builder call?)",
                     op, i);
}

mg_status mgi_graph_check_id(const mg_graph *g, mg_tensor t, const char *what) {
    if (!g) return mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", what);
    if (t < 0 || t >= g->n)
        return mg_set_error(MG_ERR_UNKNOWN_ID,
                            "%s: tensor id %d is not in the graph (it has %d "
                            "tensors)",
                            what, (int)t, (int)g->n);
    return MG_OK;
}

static mg_status graph_reserve(mg_graph *g) {
    if (g->n < g->cap) return MG_OK;
    int32_t cap = g->cap ? g->cap * 2 : 64;
    mg_node *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes)
        return mg_set_error(MG_ERR_NOMEM,
                            "graph: out of memory growing to %d "
                            "tensors",
                            (int)cap);
    g->nodes = nodes;
    g->cap = cap;
    return MG_OK;
}

/* ---- descriptors ----------------------------------------------------------
 */

static uint32_t desc_hash(const mg_tdesc *d) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)d->dtype;
    h = (h ^ (uint64_t)d->ndim) * 1099511628211ull;
    for (int i = 0; i < d->ndim; i++)
        h = (h ^ (uint64_t)d->shape[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static bool desc_same(const mg_tdesc *a, const mg_tdesc *b) {
    return a->dtype == b->dtype && mgi_tdesc_same_shape(a, b);
}

static mg_status descs_rehash(mgi_desc_table *t, uint32_t n_slots) {
    int32_t *slot = calloc(n_slots, sizeof *slot);
    if (!slot) return MG_ERR_NOMEM;
    for (int32_t k = 0; k < t->n; k++) {
        uint32_t i = desc_hash(&t->d[k]) & (n_slots - 1);
        while (slot[i]) i = (i + 1) & (n_slots - 1);
        slot[i] = k + 1;
    }
    free(t->slot);
    t->slot = slot;
    t->n_slots = n_slots;
    return MG_OK;
}

/* The index of d in g's table, or -1; *slot_out: where it would go.
 * hint: a descriptor index to try first (an input's), or -1. */
static int32_t descs_find(const mg_graph *g, const mg_tdesc *d, int32_t hint,
                          uint32_t *slot_out) {
    const mgi_desc_table *t = &g->descs;
    if (hint >= 0 && desc_same(&t->d[hint], d)) return hint;
    if (t->n_slots == 0) return -1;
    uint32_t i = desc_hash(d) & (t->n_slots - 1);
    for (; t->slot[i]; i = (i + 1) & (t->n_slots - 1))
        if (desc_same(&t->d[t->slot[i] - 1], d)) return t->slot[i] - 1;
    *slot_out = i;
    return -1;
}

/* Add d, which descs_find did not find (slot: where it said), and which
 * output_check passed. */
static mg_status descs_add(mg_graph *g, const mg_tdesc *d, uint32_t slot,
                           int32_t *out) {
    mgi_desc_table *t = &g->descs;
    if (t->n_slots == 0) {
        if (descs_rehash(t, 64) != MG_OK) goto nomem;
        slot = desc_hash(d) & (t->n_slots - 1); /* the table is empty */
    }
    if (t->n == t->cap) {
        const int32_t cap = t->cap ? t->cap * 2 : 16;
        mg_tdesc *nd = realloc(t->d, (size_t)cap * sizeof *nd);
        if (nd) t->d = nd;
        size_t *nb = realloc(t->nbytes, (size_t)cap * sizeof *nb);
        if (nb) t->nbytes = nb;
        if (!nd || !nb) goto nomem;
        t->cap = cap;
    }
    mg_tdesc c = {.dtype = d->dtype, .ndim = d->ndim};
    for (int k = 0; k < d->ndim; k++) c.shape[k] = d->shape[k];
    t->d[t->n] = c;
    t->nbytes[t->n] = mgi_tdesc_nbytes(&c);
    t->has_half = t->has_half || mgi_dtype_is_half(c.dtype);
    t->slot[slot] = t->n + 1;
    *out = t->n++;
    if ((uint32_t)t->n * 2 > t->n_slots) {
        if (t->n_slots > UINT32_MAX / 2 ||
            descs_rehash(t, t->n_slots * 2) != MG_OK) {
            /* the table stays valid at its old size; undo the add */
            t->n--;
            t->slot[slot] = 0;
            goto nomem;
        }
    }
    return MG_OK;
nomem:
    return mg_set_error(MG_ERR_NOMEM,
                        "graph: out of memory for a tensor descriptor");
}

void mgi_graph_reserve(mg_graph *g, int64_t n) {
    if (n <= g->cap || n > INT32_MAX) return;
    mg_node *nodes = realloc(g->nodes, (size_t)n * sizeof *nodes);
    if (!nodes) return; /* a hint: growing node by node still works */
    g->nodes = nodes;
    g->cap = (int32_t)n;
}

/* "matmul(#0 'x' [2,3] f32, #1 'w' [4,5] f32)" for shape errors. */
static void describe_call(const mg_graph *g, mg_op op, int n_in,
                          const mg_tensor *in, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "%s(", mgi_op_str(op));
    for (int i = 0; i < n_in && used < len; i++) {
        const char *name = mgi_graph_name(g, in[i]);
        char shape[128];
        used += (size_t)snprintf(
            buf + used, len - used, "%s#%d%s%s%s %s %s", i ? ", " : "",
            (int)in[i], name ? " '" : "", name ? name : "", name ? "'" : "",
            mgi_shape_str(mgi_graph_desc(g, in[i]), shape, sizeof shape),
            mg_dtype_name(mgi_graph_desc(g, in[i])->dtype));
    }
    if (used < len) snprintf(buf + used, len - used, ")");
}

static mg_status check_inputs(const mg_graph *g, mg_op op, int n_in,
                              const mg_tensor *in) {
    const mg_op_def *def = &mgi_op_table[op];
    if (n_in > def->n_inputs || n_in < def->n_inputs - def->n_optional) {
        if (def->n_optional)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: takes %d to %d inputs, got %d", def->name,
                                def->n_inputs - def->n_optional, def->n_inputs,
                                n_in);
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: takes %d inputs, got %d",
                            def->name, def->n_inputs, n_in);
    }
    if (n_in > 0 && !in)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: inputs are NULL",
                            def->name);
    for (int i = 0; i < n_in; i++) {
        if (in[i] < 0 || in[i] >= g->n)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "%s: input %d is tensor id %d, which is not in "
                                "the graph (it has %d tensors)",
                                def->name, i, (int)in[i], (int)g->n);
    }
    return MG_OK;
}

/* Every op's output, whatever its shape rule computed: sizes >= 1, an
 * element count that fits int64_t and a byte size that fits PTRDIFF_MAX,
 * so that no kernel or allocation ever sees a wrapped count. */
static mg_status output_check(const mg_tdesc *out, char *why, size_t len) {
    for (int i = 0; i < out->ndim; i++)
        if (out->shape[i] < 1) {
            snprintf(why, len, "the output would have size %lld along axis %d",
                     (long long)out->shape[i], i);
            return MG_ERR_SHAPE;
        }
    if (!mgi_tdesc_fits(out)) {
        char buf[160];
        snprintf(why, len,
                 "the output %s %s would have more elements or bytes than "
                 "int64_t / PTRDIFF_MAX can hold",
                 mgi_shape_str(out, buf, sizeof buf),
                 mg_dtype_name(out->dtype));
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

/* Status s for the call op(in), with why (or s's own words) after the
 * call's description. */
static mg_status call_failed(const mg_graph *g, mg_op op, int n_in,
                             const mg_tensor *in, mg_status s,
                             const char *why) {
    char call[768];
    describe_call(g, op, n_in, in, call, sizeof call);
    return mg_set_error(s, "%s: %s", call, why[0] ? why : mg_status_str(s));
}

/* The op's shape rule on its inputs, into *out, with a message naming the
 * call if it fails. check_out: also output_check *out (add_node checks
 * only descriptors its graph has not seen). */
static mg_status infer_node(const mg_graph *g, mg_op op, int n_in,
                            const mg_tensor *in, const mg_attrs *attrs,
                            mg_tdesc *out, bool check_out) {
    const mg_op_def *def = &mgi_op_table[op];
    /* Not "= {0}": zeroing all six was most of the cost of adding a node
     * (issue 32). An absent optional input reads as zero. */
    mg_tdesc in_d[MG_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) in_d[i] = *mgi_graph_desc(g, in[i]);
    for (int i = n_in; i < def->n_inputs; i++)
        memset(&in_d[i], 0, sizeof in_d[i]);
    char why[256]; /* not "" = zeroing 256 bytes on every node (issue 32) */
    why[0] = '\0';
    mg_status s = def->infer(in_d, n_in, attrs, out, why, sizeof why);
    if (s == MG_OK && check_out) s = output_check(out, why, sizeof why);
    return s == MG_OK ? MG_OK : call_failed(g, op, n_in, in, s, why);
}

/* shared: attrs is a node's attrs pointer, to share; otherwise a caller's
 * struct (or NULL: none), copied into g's blocks unless it is all zero. */
static mg_tensor add_node(mg_graph *g, mg_op op, int n_in, const mg_tensor *in,
                          const mg_attrs *attrs, bool shared) {
    if (!g) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", mgi_op_str(op));
        return MG_NO_TENSOR;
    }
    for (int i = 0; i < n_in; i++)
        if (in && in[i] == MG_NO_TENSOR) {
            mgi_graph_missing_input(mgi_op_str(op), i);
            return MG_NO_TENSOR;
        }
    if (check_inputs(g, op, n_in, in) != MG_OK) return MG_NO_TENSOR;

    /* Copies: in may point into g->nodes, which growing moves (attrs
     * never does: it is the caller's or in g's blocks). */
    mg_tensor ins[MG_MAX_INPUTS];
    for (int i = 0; i < n_in && i < MG_MAX_INPUTS; i++) ins[i] = in[i];
    in = ins;
    if (!attrs) attrs = &mgi_attrs_zero;
    mg_tdesc out;
    memset(&out, 0, sizeof out);
    if (infer_node(g, op, n_in, in, attrs, &out, false) != MG_OK)
        return MG_NO_TENSOR;
    uint32_t slot = 0;
    int32_t desc =
        descs_find(g, &out, n_in > 0 ? g->nodes[in[0]].desc : -1, &slot);
    if (desc < 0) {
        /* a descriptor the graph has seen passed this check before */
        char why[256] = "";
        const mg_status bad = output_check(&out, why, sizeof why);
        if (bad != MG_OK) {
            call_failed(g, op, n_in, in, bad, why);
            return MG_NO_TENSOR;
        }
        if (descs_add(g, &out, slot, &desc) != MG_OK) return MG_NO_TENSOR;
    }
    if (graph_reserve(g) != MG_OK) return MG_NO_TENSOR;
    unsigned own = 0;
    if (!shared && attrs != &mgi_attrs_zero) {
        if (attrs_all_zero(attrs)) {
            attrs = &mgi_attrs_zero;
        } else {
            mg_attrs *copy = attrs_take(g);
            if (!copy) {
                mg_set_error(MG_ERR_NOMEM,
                             "%s: out of memory for its attributes",
                             mgi_op_str(op));
                return MG_NO_TENSOR;
            }
            *copy = *attrs;
            attrs = copy;
            own = MG_NODE_OWN_ATTRS;
        }
    }

    mg_node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->desc = desc;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->attrs = attrs;
    n->flags = g->building_flags | own;
    n->orig = MG_NO_TENSOR;
    return g->n++;
}

mg_status mgi_graph_node_rewrite(mg_graph *g, mg_tensor t, mg_op op,
                                 const mg_tensor *in, const mg_tdesc *shape) {
    mg_node *n = &g->nodes[t];
    const int n_in = n->n_in;
    mg_status s = check_inputs(g, op, n_in, in);
    if (s != MG_OK) return s;
    mg_attrs a = *n->attrs;
    a.ndim = shape->ndim;
    memcpy(a.shape, shape->shape, sizeof a.shape);
    mg_tdesc out;
    memset(&out, 0, sizeof out);
    if ((s = infer_node(g, op, n_in, in, &a, &out, true)) != MG_OK) return s;
    if (!desc_same(&out, mgi_graph_desc(g, t))) {
        char label[160];
        return mg_set_error(
            MG_ERR_INTERNAL, "%s: %s would change the tensor's shape or dtype",
            mgi_graph_tensor_label(g, t, label, sizeof label), mgi_op_str(op));
    }
    if (n->flags & MG_NODE_OWN_ATTRS) {
        *(mg_attrs *)n->attrs = a; /* its own: nothing else reads it */
    } else {
        mg_attrs *copy = attrs_take(g);
        if (!copy)
            return mg_set_error(MG_ERR_NOMEM,
                                "%s: out of memory for its attributes",
                                mgi_op_str(op));
        *copy = a;
        n->attrs = copy;
        n->flags |= MG_NODE_OWN_ATTRS;
    }
    n->op = op;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    return MG_OK;
}

mg_tensor mgi_graph_add_node(mg_graph *g, mg_op op, int n_in,
                             const mg_tensor *in, const mg_attrs *attrs) {
    return add_node(g, op, n_in, in, attrs, false);
}

mg_tensor mgi_graph_add_node_shared(mg_graph *g, mg_op op, int n_in,
                                    const mg_tensor *in,
                                    const mg_attrs *node_attrs) {
    return add_node(g, op, n_in, in, node_attrs, true);
}

/* Name node t copy (owned from here on, or NULL to unset). */
static mg_status names_set(mg_graph *g, mg_tensor t, char *copy) {
    mg_node *n = &g->nodes[t];
    if (n->name) {
        free(g->names[n->name - 1]);
        g->names[n->name - 1] = copy;
        /* an empty slot is nobody's: mgi_graph_truncate may reuse it */
        if (!copy) n->name = 0;
        return MG_OK;
    }
    if (!copy) return MG_OK;
    if (g->n_names == g->cap_names) {
        const int32_t cap = g->cap_names ? g->cap_names * 2 : 16;
        char **names = realloc(g->names, (size_t)cap * sizeof *names);
        if (!names) {
            free(copy);
            return MG_ERR_NOMEM;
        }
        g->names = names;
        g->cap_names = cap;
    }
    g->names[g->n_names++] = copy;
    n->name = g->n_names;
    return MG_OK;
}

/* ---- leaves -------------------------------------------------------------- */

static mg_tensor add_leaf(mg_graph *g, mg_op op, const char *name,
                          mg_dtype dtype, int ndim, const int64_t *shape) {
    const char *what = mgi_op_str(op);
    if (!g) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s '%s': graph is NULL", what,
                     name ? name : "");
        return MG_NO_TENSOR;
    }
    if (mg_dtype_size(dtype) == 0) {
        mg_set_error(MG_ERR_DTYPE, "%s '%s': unknown dtype %d", what,
                     name ? name : "", (int)dtype);
        return MG_NO_TENSOR;
    }
    if (ndim < 0 || ndim > MG_MAX_DIMS || (ndim > 0 && !shape)) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "%s '%s': ndim %d needs a shape of 0..%d dims", what,
                     name ? name : "", ndim, MG_MAX_DIMS);
        return MG_NO_TENSOR;
    }
    mg_tdesc d = {.dtype = dtype, .ndim = ndim};
    for (int i = 0; i < ndim; i++) {
        /* Reject sizes whose element count or byte size would not fit. */
        d.shape[i] = shape[i];
        d.ndim = i + 1;
        if (shape[i] < 1 || !mgi_tdesc_fits(&d)) {
            mg_set_error(MG_ERR_SHAPE,
                         "%s '%s': dim %d has size %lld (sizes must be >= 1 "
                         "and the tensor must fit in memory)",
                         what, name ? name : "", i, (long long)shape[i]);
            return MG_NO_TENSOR;
        }
    }
    uint32_t slot = 0;
    int32_t desc = descs_find(g, &d, -1, &slot);
    if (desc < 0 && descs_add(g, &d, slot, &desc) != MG_OK) return MG_NO_TENSOR;
    if (graph_reserve(g) != MG_OK) return MG_NO_TENSOR;
    char *copy = NULL;
    if (name && !(copy = strdup(name))) {
        mg_set_error(MG_ERR_NOMEM, "%s '%s': out of memory", what, name);
        return MG_NO_TENSOR;
    }
    mg_node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->desc = desc;
    n->attrs = &mgi_attrs_zero;
    n->flags = g->building_flags;
    n->orig = MG_NO_TENSOR;
    if (names_set(g, g->n, copy) != MG_OK) {
        mg_set_error(MG_ERR_NOMEM, "%s '%s': out of memory", what, name);
        return MG_NO_TENSOR;
    }
    return g->n++;
}

mg_tensor mg_input(mg_graph *g, const char *name, mg_dtype dtype, int ndim,
                   const int64_t *shape) {
    return add_leaf(g, MG_OP_INPUT, name, dtype, ndim, shape);
}

mg_tensor mg_param(mg_graph *g, const char *name, mg_dtype dtype, int ndim,
                   const int64_t *shape) {
    return add_leaf(g, MG_OP_PARAM, name, dtype, ndim, shape);
}

/* ---- introspection ------------------------------------------------------- */

mg_status mg_tensor_shape(const mg_graph *g, mg_tensor t, int *ndim,
                          int64_t shape[MG_MAX_DIMS]) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_shape");
    if (s != MG_OK) return s;
    if (!ndim || !shape)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_shape: output pointer is NULL");
    const mg_tdesc *d = mgi_graph_desc(g, t);
    *ndim = d->ndim;
    for (int i = 0; i < *ndim; i++) shape[i] = d->shape[i];
    return MG_OK;
}

mg_status mg_tensor_dtype(const mg_graph *g, mg_tensor t, mg_dtype *dtype) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_dtype");
    if (s != MG_OK) return s;
    if (!dtype)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_dtype: output pointer is NULL");
    *dtype = mgi_graph_desc(g, t)->dtype;
    return MG_OK;
}

/* The one place a caller can say what a buffer holds: a raw binding's
 * void * cannot, and an int64 label buffer read as int32 gives wrong labels
 * that are still in range (issue 11: {1, 2} read as {1, 0}). */
mg_status mg_bind(const mg_graph *g, mg_tensor t, void *data, mg_dtype dtype,
                  mg_binding *out) {
    mg_status s = mgi_graph_check_id(g, t, "mg_bind");
    if (s != MG_OK) return s;
    char label[160];
    mgi_graph_tensor_label(g, t, label, sizeof label);
    if (!out || !data)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_bind: %s for %s is NULL",
                            out ? "data" : "out", label);
    const mg_dtype want = mgi_graph_desc(g, t)->dtype;
    if (mg_dtype_size(dtype) == 0)
        return mg_set_error(MG_ERR_DTYPE, "mg_bind: unknown dtype %d for %s",
                            (int)dtype, label);
    if (dtype != want)
        return mg_set_error(MG_ERR_DTYPE,
                            "mg_bind: %s is %s but the buffer holds %s; "
                            "declare the tensor as %s or convert the buffer",
                            label, mg_dtype_name(want), mg_dtype_name(dtype),
                            mg_dtype_name(dtype));
    *out = (mg_binding){t, data};
    return MG_OK;
}

int64_t mg_tensor_numel(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_numel") != MG_OK) return -1;
    return mgi_tdesc_numel(mgi_graph_desc(g, t));
}

size_t mg_tensor_nbytes(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_nbytes") != MG_OK) return 0;
    return mgi_graph_nbytes(g, t);
}

const char *mg_tensor_name(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_name") != MG_OK) return NULL;
    return mgi_graph_name(g, t);
}

mg_status mg_tensor_set_name(mg_graph *g, mg_tensor t, const char *name) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_set_name");
    if (s != MG_OK) return s;
    char *copy = NULL;
    if (name && !(copy = strdup(name)))
        return mg_set_error(MG_ERR_NOMEM, "mg_tensor_set_name: out of memory");
    if (names_set(g, t, copy) != MG_OK)
        return mg_set_error(MG_ERR_NOMEM, "mg_tensor_set_name: out of memory");
    return MG_OK;
}

const char *mg_tensor_op_name(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_op_name") != MG_OK) return NULL;
    return mgi_op_str(g->nodes[t].op);
}

/* FNV-1a over the bytes of a 64-bit word, low byte first: the same on
 * every host of one byte order, which is what ranks that compare hashes
 * share. */
static uint64_t attrs_mix(uint64_t h, uint64_t w) {
    for (int i = 0; i < 8; i++) {
        h ^= (w >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t attrs_mix_f(uint64_t h, double v) {
    uint64_t w;
    memcpy(&w, &v, sizeof w);
    return attrs_mix(h, w);
}

/* Field by field, never the struct's bytes: its padding is not part of
 * the value and need not be equal between two equal attribute sets. Every
 * field of mg_attrs (src/common/ir.h) is here; a field added there must be
 * added here too, or pipeline ranks whose ops differ only in it would
 * agree (issue 49). */
mg_status mg_tensor_attrs_hash(const mg_graph *g, mg_tensor t, uint64_t *out) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_attrs_hash");
    if (s != MG_OK) return s;
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_attrs_hash: out is NULL");
    const mg_attrs *a = g->nodes[t].attrs;
    uint64_t h = 0xcbf29ce484222325ULL;
    h = attrs_mix(h, (uint64_t)a->trans_a);
    h = attrs_mix(h, (uint64_t)a->trans_b);
    h = attrs_mix(h, (uint64_t)a->naxes);
    h = attrs_mix(h, (uint64_t)a->keepdims);
    h = attrs_mix(h, (uint64_t)a->axis);
    h = attrs_mix(h, (uint64_t)a->ndim);
    h = attrs_mix(h, (uint64_t)a->dtype);
    for (int i = 0; i < MG_MAX_DIMS; i++) {
        h = attrs_mix(h, (uint64_t)a->axes[i]);
        h = attrs_mix(h, (uint64_t)a->perm[i]);
        h = attrs_mix(h, (uint64_t)a->shape[i]);
        h = attrs_mix(h, (uint64_t)a->start[i]);
    }
    h = attrs_mix_f(h, a->alpha);
    h = attrs_mix_f(h, a->p);
    h = attrs_mix(h, a->seed);
    h = attrs_mix(h, a->offset);
    h = attrs_mix(h, (uint64_t)a->causal);
    for (int i = 0; i < 2; i++) {
        h = attrs_mix(h, (uint64_t)a->stride[i]);
        h = attrs_mix(h, (uint64_t)a->pad[i]);
        h = attrs_mix(h, (uint64_t)a->dilation[i]);
        h = attrs_mix(h, (uint64_t)a->kernel[i]);
        h = attrs_mix(h, (uint64_t)a->pad_end[i]);
    }
    h = attrs_mix(h, (uint64_t)a->ceil_mode);
    h = attrs_mix(h, (uint64_t)a->count_include_pad);
    h = attrs_mix(h, (uint64_t)a->groups);
    h = attrs_mix_f(h, a->eps);
    h = attrs_mix(h, (uint64_t)a->n_norm_axes);
    h = attrs_mix(h, (uint64_t)a->chunk_rows);
    h = attrs_mix(h, (uint64_t)a->has_ignore_index);
    h = attrs_mix(h, (uint64_t)a->ignore_index);
    h = attrs_mix(h, (uint64_t)a->reverse);
    h = attrs_mix_f(h, a->lo);
    h = attrs_mix_f(h, a->hi);
    *out = h;
    return MG_OK;
}

mg_tensor mg_tensor_find(const mg_graph *g, const char *name) {
    if (!g || !name) {
        mg_set_error(MG_ERR_INVALID_ARG, "mg_tensor_find: %s is NULL",
                     g ? "name" : "graph");
        return MG_NO_TENSOR;
    }
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].name && strcmp(mgi_graph_name(g, i), name) == 0)
            return i;
    mg_set_error(MG_ERR_UNKNOWN_ID, "mg_tensor_find: no tensor named '%s'",
                 name);
    return MG_NO_TENSOR;
}

int mg_tensor_is_backward(const mg_graph *g, mg_tensor t) {
    if (!g || t < 0 || t >= g->n) return 0;
    return (g->nodes[t].flags & MG_NODE_BACKWARD) != 0;
}

int mg_tensor_num_inputs(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_num_inputs") != MG_OK) return -1;
    return g->nodes[t].n_in;
}

mg_tensor mg_tensor_input(const mg_graph *g, mg_tensor t, int k) {
    if (mgi_graph_check_id(g, t, "mg_tensor_input") != MG_OK)
        return MG_NO_TENSOR;
    if (k < 0 || k >= g->nodes[t].n_in) {
        char label[160];
        mg_set_error(MG_ERR_INVALID_ARG,
                     "mg_tensor_input: %s has %d inputs, "
                     "no input %d",
                     mgi_graph_tensor_label(g, t, label, sizeof label),
                     g->nodes[t].n_in, k);
        return MG_NO_TENSOR;
    }
    return g->nodes[t].in[k];
}

mg_status mg_tensor_set_checkpoint(mg_graph *g, mg_tensor t, int on) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_set_checkpoint");
    if (s != MG_OK) return s;
    if (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF) {
        char label[160];
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_set_checkpoint: %s is caller memory, "
                            "always available; only computed tensors can be "
                            "checkpoints",
                            mgi_graph_tensor_label(g, t, label, sizeof label));
    }
    if (on) g->nodes[t].flags |= MG_NODE_CHECKPOINT;
    else g->nodes[t].flags &= ~(unsigned)MG_NODE_CHECKPOINT;
    return MG_OK;
}

int mg_tensor_is_checkpoint(const mg_graph *g, mg_tensor t) {
    if (!g || t < 0 || t >= g->n) return 0;
    return (g->nodes[t].flags & (MG_NODE_CHECKPOINT | MG_NODE_CHOSEN)) != 0;
}

int mg_tensor_is_recompute(const mg_graph *g, mg_tensor t) {
    if (!g || t < 0 || t >= g->n) return 0;
    return (g->nodes[t].flags & MG_NODE_RECOMPUTE) != 0;
}

int mg_tensor_is_pack(const mg_graph *g, mg_tensor t) {
    if (!g || t < 0 || t >= g->n) return 0;
    return (g->nodes[t].flags & MG_NODE_PACK) != 0;
}

mg_tensor mg_tensor_recompute_source(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_recompute_source") != MG_OK)
        return MG_NO_TENSOR;
    return g->nodes[t].orig;
}

int mg_graph_checkpoints(const mg_graph *g, mg_tensor *out, int cap) {
    if (!g) {
        mg_set_error(MG_ERR_INVALID_ARG, "mg_graph_checkpoints: graph is NULL");
        return -1;
    }
    int n = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (!(g->nodes[i].flags & MG_NODE_CHOSEN)) continue;
        if (out && n < cap) out[n] = i;
        n++;
    }
    return n;
}

int mg_graph_offloads(const mg_graph *g, mg_tensor *out, int cap) {
    if (!g) {
        mg_set_error(MG_ERR_INVALID_ARG, "mg_graph_offloads: graph is NULL");
        return -1;
    }
    int n = 0;
    for (int32_t i = 0; i < g->n; i++) {
        if (!(g->nodes[i].flags & MG_NODE_OFFLOAD)) continue;
        if (out && n < cap) out[n] = i;
        n++;
    }
    return n;
}

mg_status mg_tensor_set_input(mg_graph *g, mg_tensor t, int slot,
                              mg_tensor src) {
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_set_input");
    if (s != MG_OK) return s;
    if ((s = mgi_graph_check_id(g, src, "mg_tensor_set_input (source)")) !=
        MG_OK)
        return s;
    mg_node *n = &g->nodes[t];
    char label[160];
    if (slot < 0 || slot >= n->n_in)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_set_input: %s has %d inputs, no slot %d",
                            mgi_graph_tensor_label(g, t, label, sizeof label),
                            n->n_in, slot);
    mg_tensor in[MG_MAX_INPUTS];
    memcpy(in, n->in, sizeof in);
    in[slot] = src;
    mg_tdesc out;
    if ((s = infer_node(g, n->op, n->n_in, in, n->attrs, &out, true)) != MG_OK)
        return s;
    if (!desc_same(&out, mgi_graph_desc(g, t)))
        return mg_set_error(MG_ERR_SHAPE,
                            "mg_tensor_set_input: rewiring %s would change its "
                            "shape or dtype",
                            mgi_graph_tensor_label(g, t, label, sizeof label));
    n->in[slot] = src;
    return MG_OK;
}

mg_tensor mg_graph_copy_op(mg_graph *dst, const mg_graph *src, mg_tensor t,
                           const mg_tensor *inputs, int n_inputs) {
    const char *who = "mg_graph_copy_op";
    if (!dst) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: dst is NULL", who);
        return MG_NO_TENSOR;
    }
    if (mgi_graph_check_id(src, t, who) != MG_OK) return MG_NO_TENSOR;
    const mg_node *n = &src->nodes[t];
    char label[160];
    if (n->flags & (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE)) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "%s: %s was appended by mg_gradients; copy forward ops "
                     "only",
                     who, mgi_graph_tensor_label(src, t, label, sizeof label));
        return MG_NO_TENSOR;
    }
    if (n_inputs != n->n_in || (n_inputs > 0 && !inputs)) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: %s has %d inputs, given %d%s",
                     who, mgi_graph_tensor_label(src, t, label, sizeof label),
                     n->n_in, n_inputs, inputs ? "" : " with a NULL list");
        return MG_NO_TENSOR;
    }
    mg_tensor y;
    if (n->op == MG_OP_INPUT || n->op == MG_OP_PARAM) {
        const mg_tdesc *d = mgi_node_desc(src, n);
        y = add_leaf(dst, n->op, mgi_graph_name(src, t), d->dtype, d->ndim,
                     d->shape);
    } else {
        y = mgi_graph_add_node(dst, n->op, n->n_in, inputs, n->attrs);
        if (y != MG_NO_TENSOR &&
            !desc_same(mgi_graph_desc(dst, y), mgi_graph_desc(src, t))) {
            mgi_graph_truncate(dst, y);
            mg_set_error(MG_ERR_SHAPE,
                         "%s: the copy of %s gets another shape or dtype "
                         "from its inputs",
                         who,
                         mgi_graph_tensor_label(src, t, label, sizeof label));
            return MG_NO_TENSOR;
        }
        if (y != MG_NO_TENSOR && n->name &&
            mg_tensor_set_name(dst, y, mgi_graph_name(src, t)) != MG_OK) {
            mgi_graph_truncate(dst, y);
            return MG_NO_TENSOR;
        }
    }
    if (y == MG_NO_TENSOR) return MG_NO_TENSOR;
    dst->nodes[y].flags |= n->flags & MG_NODE_CHECKPOINT;
    if (dst->rng_offset < src->rng_offset) dst->rng_offset = src->rng_offset;
    return y;
}

double mg_tensor_flops(const mg_graph *g, mg_tensor t) {
    if (mgi_graph_check_id(g, t, "mg_tensor_flops") != MG_OK) return -1;
    double flops = 0;
    mgi_graph_op_cost(g, t, &flops, NULL);
    return flops;
}

/* ---- cost ---------------------------------------------------------------- */

void mgi_graph_op_cost(const mg_graph *g, mg_tensor t, double *flops,
                       double *bytes) {
    const mg_node *n = &g->nodes[t];
    const mg_op_def *def = &mgi_op_table[n->op];
    mg_tdesc in[MG_MAX_INPUTS];
    double moved = (double)mgi_graph_nbytes(g, t);
    for (int i = 0; i < n->n_in; i++) {
        in[i] = *mgi_graph_desc(g, n->in[i]);
        moved += (double)mgi_tdesc_nbytes(&in[i]);
    }
    if (flops)
        *flops = def->flops
                     ? def->flops(in, n->n_in, n->attrs, mgi_node_desc(g, n))
                     : def->flops_per_elem *
                           (double)mgi_tdesc_numel(mgi_node_desc(g, n));
    if (bytes) *bytes = (def->flags & MG_OPF_LEAF) ? 0.0 : moved;
}

size_t mgi_graph_op_workspace(const mg_graph *g, mg_tensor t) {
    const mg_node *n = &g->nodes[t];
    mg_workspace_fn *ws = mgi_op_table[n->op].workspace;
    size_t widened; /* a bfloat16 or float16 op: ops_widen.c */
    if (mgi_graph_widen_workspace(g, t, ws, &widened)) return widened;
    if (!ws) return 0;
    mg_tdesc in[MG_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) in[i] = *mgi_graph_desc(g, n->in[i]);
    return ws(in, n->n_in, n->attrs, mgi_node_desc(g, n));
}

/* ---- text and DOT -------------------------------------------------------- */

mg_status mg_graph_dump(const mg_graph *g, FILE *out) {
    if (!g || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_graph_dump: %s is NULL",
                            g ? "out" : "graph");
    for (int32_t i = 0; i < g->n; i++) {
        const mg_node *n = &g->nodes[i];
        char shape[128];
        fprintf(out, "%%%d = %s(", (int)i, mgi_op_str(n->op));
        for (int k = 0; k < n->n_in; k++)
            fprintf(out, "%s%%%d", k ? ", " : "", (int)n->in[k]);
        fprintf(out, ") %s %s",
                mgi_shape_str(mgi_node_desc(g, n), shape, sizeof shape),
                mg_dtype_name(mgi_node_desc(g, n)->dtype));
        if (n->name) fprintf(out, " '%s'", mgi_graph_name(g, i));
        if (n->flags & MG_NODE_BACKWARD) fprintf(out, " [backward]");
        if (n->flags & (MG_NODE_CHOSEN | MG_NODE_CHECKPOINT))
            fprintf(out, " [checkpoint]");
        if (n->flags & MG_NODE_RECOMPUTE)
            fprintf(out, " [recomputes %%%d]", (int)n->orig);
        fputc('\n', out);
    }
    return MG_OK;
}

/* Names are the caller's strings: quote what DOT would misread. */
static void write_dot_escaped(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        if (*s == '\n') fputs("\\n", out);
        else fputc(*s, out);
    }
}

mg_status mg_graph_write_dot(const mg_graph *g, FILE *out) {
    if (!g || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_graph_write_dot: %s is NULL",
                            g ? "out" : "graph");
    fprintf(out, "digraph memgrad {\n  rankdir=TB;\n  node [fontsize=10];\n");
    for (int32_t i = 0; i < g->n; i++) {
        const mg_node *n = &g->nodes[i];
        char shape[128];
        bool leaf = (mgi_op_table[n->op].flags & MG_OPF_LEAF) != 0;
        const char *style = "";
        if (n->flags & (MG_NODE_CHOSEN | MG_NODE_CHECKPOINT))
            style = " style=bold penwidth=3";
        else if (n->flags & MG_NODE_RECOMPUTE) style = " style=dashed";
        else if (n->flags & MG_NODE_BACKWARD)
            style = " style=filled fillcolor=lightgrey";
        fprintf(out, "  t%d [label=\"", (int)i);
        if (n->name) {
            write_dot_escaped(out, mgi_graph_name(g, i));
            fputs("\\n", out);
        }
        fprintf(out, "%s\\n%s %s\" shape=%s%s];\n", mgi_op_str(n->op),
                mgi_shape_str(mgi_node_desc(g, n), shape, sizeof shape),
                mg_dtype_name(mgi_node_desc(g, n)->dtype),
                leaf ? "ellipse" : "box", style);
        for (int k = 0; k < n->n_in; k++)
            fprintf(out, "  t%d -> t%d;\n", (int)n->in[k], (int)i);
    }
    fprintf(out, "}\n");
    return MG_OK;
}
