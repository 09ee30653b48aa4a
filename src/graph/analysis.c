/*
 * analysis.c - graph analysis on igraph: one igraph graph of a set of nodes
 * (mgi_graph_view), which gives their topological order, the cycle a
 * rewired graph may hold and the articulation points the memory policy
 * cuts at; and the ancestor marking and sweep that schedules are built
 * from, which need no igraph while the creation order is topological.
 * mg_gradients builds at most one view per call (for policy memory, or a
 * rewired graph) and takes everything from it (autodiff.c): building an
 * igraph_t was about 30% of what a call spent when every trial of the
 * memory policy's search built its own (issue 32).
 *
 * Debian's igraph is built without thread safety (IGRAPH_THREAD_SAFE 0), and
 * its default error handler aborts the process. Every igraph call therefore
 * runs inside igraph_guard_enter/leave: a process-wide mutex, with igraph's
 * error and warning handlers switched to "ignore" and restored afterwards,
 * so that igraph reports errors as return codes and never touches stderr.
 */
#include "graph.h"

#include <igraph.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t igraph_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct igraph_guard {
    igraph_error_handler_t *old_error;
    igraph_warning_handler_t *old_warning;
} igraph_guard;

static void igraph_guard_enter(igraph_guard *gd) {
    pthread_mutex_lock(&igraph_lock);
    gd->old_error = igraph_set_error_handler(igraph_error_handler_ignore);
    gd->old_warning = igraph_set_warning_handler(igraph_warning_handler_ignore);
}

static void igraph_guard_leave(igraph_guard *gd) {
    igraph_set_warning_handler(gd->old_warning);
    igraph_set_error_handler(gd->old_error);
    pthread_mutex_unlock(&igraph_lock);
}

static mg_tensor input_of(const mg_graph *g, const mg_tensor *remap,
                          mg_tensor t, int k) {
    mg_tensor in = g->nodes[t].in[k];
    return remap ? remap[in] : in;
}

mg_status mgi_graph_mark_ancestors(const mg_graph *g, const mg_tensor *roots,
                                   int n_roots, const mg_tensor *remap,
                                   bool *needed, const char *what) {
    /* Iterative DFS; `needed` doubles as the visited set, so a cycle made
     * with mg_tensor_set_input cannot make it loop. The stack holds each
     * node at most once. Marking everything instead on a failed
     * allocation would schedule ops that read unbound leaves and fail
     * later with a misleading status (issue 11), so say NOMEM now. */
    mg_tensor *stack = malloc((size_t)(g->n ? g->n : 1) * sizeof *stack);
    int32_t top = 0;
    if (!stack) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < n_roots; i++)
        if (!needed[roots[i]]) {
            needed[roots[i]] = true;
            stack[top++] = roots[i];
        }
    while (top > 0) {
        mg_tensor t = stack[--top];
        for (int k = 0; k < g->nodes[t].n_in; k++) {
            mg_tensor in = input_of(g, remap, t, k);
            if (!needed[in]) {
                needed[in] = true;
                stack[top++] = in;
            }
        }
    }
    free(stack);
    return MG_OK;
}

static int key_cmp(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Note pack p (MG_NODE_PACK) as needed, keyed by (its input, its id). */
static mg_status pack_note(const mg_graph *g, const mg_tensor *remap,
                           mg_tensor p, int64_t **keys, int32_t *n_keys,
                           const char *what) {
    if (!*keys && !(*keys = malloc((size_t)g->n * sizeof **keys)))
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    (*keys)[(*n_keys)++] = (int64_t)input_of(g, remap, p, 0) << 32 | p;
    return MG_OK;
}

mg_status mgi_graph_ancestors_sweep(const mg_graph *g, const mg_tensor *roots,
                                    int n_roots, const mg_tensor *remap,
                                    bool *needed, mg_tensor *order,
                                    int32_t *n_order, bool *in_creation_order,
                                    const char *what) {
    mg_tensor hi = -1;
    for (int i = 0; i < n_roots; i++) {
        needed[roots[i]] = true;
        if (roots[i] > hi) hi = roots[i];
    }
    /* Each marked node marks its inputs before the sweep reaches them, as
     * long as every one is earlier: then the marks are the ancestors, and
     * the creation order over them is topological, which is the order
     * mgi_graph_topo_order keeps. A compact saved form's pack
     * (MG_NODE_PACK, src/rewrite/compact.c) is made after the backward
     * ops that read it but belongs right after the forward tensor it
     * packs: it is scheduled there, so that the tensor dies in the forward
     * pass. keys lists the packs, by (input, id). */
    bool in_order = true;
    int64_t *keys = NULL;
    int32_t n_keys = 0;
    mg_status s = MG_OK;
    for (mg_tensor t = hi; in_order && s == MG_OK && t >= 0; t--) {
        if (!needed[t]) continue;
        const mg_node *nd = &g->nodes[t];
        if (nd->flags & MG_NODE_PACK)
            s = pack_note(g, remap, t, &keys, &n_keys, what);
        for (int k = 0; k < nd->n_in && s == MG_OK; k++) {
            const mg_tensor in = input_of(g, remap, t, k);
            if (in >= t) {
                if ((g->nodes[in].flags & MG_NODE_PACK) &&
                    input_of(g, remap, in, 0) < t) {
                    if (!needed[in]) {
                        needed[in] = true;
                        needed[input_of(g, remap, in, 0)] = true;
                        s = pack_note(g, remap, in, &keys, &n_keys, what);
                    }
                    continue;
                }
                in_order = false;
            }
            needed[in] = true;
        }
    }
    if (s != MG_OK) {
        free(keys);
        return s;
    }
    *in_creation_order = in_order;
    if (!in_order) {
        /* the sweep stopped part way: its marks are not the ancestors */
        free(keys);
        memset(needed, 0, (size_t)g->n * sizeof *needed);
        return mgi_graph_mark_ancestors(g, roots, n_roots, remap, needed,
                                        what);
    }
    int32_t k = 0;
    if (!n_keys) {
        for (mg_tensor t = 0; t <= hi; t++)
            if (needed[t]) order[k++] = t;
    } else {
        qsort(keys, (size_t)n_keys, sizeof *keys, key_cmp);
        int32_t j = 0;
        for (mg_tensor t = 0; t <= hi; t++) {
            if (!needed[t] || (g->nodes[t].flags & MG_NODE_PACK)) continue;
            order[k++] = t;
            for (; j < n_keys && (keys[j] >> 32) == t; j++)
                order[k++] = (mg_tensor)(keys[j] & 0xffffffff);
        }
    }
    free(keys);
    *n_order = k;
    return MG_OK;
}

/* Name one op that lies on a cycle: an end of an edge in igraph's feedback
 * arc set (the edges whose removal makes the graph acyclic). */
static mg_status report_cycle(const mg_graph *g, const igraph_t *ig,
                              const mg_tensor *ids) {
    igraph_vector_int_t fas;
    char label[160];
    igraph_error_t e = igraph_vector_int_init(&fas, 0);
    if (e == IGRAPH_SUCCESS) {
        e = igraph_feedback_arc_set(ig, &fas, NULL, IGRAPH_FAS_APPROX_EADES);
        if (e == IGRAPH_SUCCESS && igraph_vector_int_size(&fas) > 0) {
            igraph_integer_t from, to;
            igraph_edge(ig, VECTOR(fas)[0], &from, &to);
            igraph_vector_int_destroy(&fas);
            char label2[160];
            return mg_set_error(
                MG_ERR_CYCLE,
                "graph has a cycle: %s reads %s, which depends on it",
                mgi_graph_tensor_label(g, ids[to], label, sizeof label),
                mgi_graph_tensor_label(g, ids[from], label2, sizeof label2));
        }
        igraph_vector_int_destroy(&fas);
    }
    if (e == IGRAPH_ENOMEM) /* not the cycle's fault */
        return mg_set_error(MG_ERR_NOMEM, "graph has a cycle; naming an op "
                                          "on it ran out of memory in igraph");
    return mg_set_error(MG_ERR_CYCLE, "graph has a cycle");
}

static mg_status igraph_failed(igraph_error_t e, const char *what) {
    if (e == IGRAPH_ENOMEM)
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory in igraph", what);
    return mg_set_error(MG_ERR_INTERNAL, "%s: igraph error: %s", what,
                        igraph_strerror(e));
}

mg_status mgi_graph_ancestors_order(const mg_graph *g, const mg_tensor *roots,
                                    int n_roots, const mg_tensor *remap,
                                    bool *needed, mg_tensor *order,
                                    int32_t *n_order, const char *what) {
    bool in_order;
    mg_status s = mgi_graph_ancestors_sweep(g, roots, n_roots, remap, needed,
                                            order, n_order, &in_order, what);
    if (s == MG_OK && !in_order)
        s = mgi_graph_topo_order(g, needed, remap, order, n_order);
    return s;
}

/* Creation order is topological unless mg_tensor_set_input rewired a node
 * to read a later one. When it holds we keep it: it is the order the caller
 * wrote the model in, and mg_gradients appends backward ops in the order
 * that keeps liveness short. */
static bool creation_order_is_topological(const mg_graph *g,
                                          const bool *include,
                                          const mg_tensor *remap) {
    for (int32_t i = 0; i < g->n; i++) {
        if (include && !include[i]) continue;
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (input_of(g, remap, i, k) >= i) return false;
    }
    return true;
}

/* One igraph graph of a set of nodes (analysis.c's view of them): vertex v
 * is node ids[v], the ids increasing with v, and an edge runs from each
 * included input to its reader. The igraph calls on it run under the
 * guard, one at a time; the view itself is its owner's alone. */
struct mgi_graph_view {
    const mg_graph *g;
    igraph_t ig;
    mg_tensor *ids;
};

/* The directed igraph graph on the included nodes into v->ig and v->ids;
 * vid (room for g->n) is scratch. Runs under the guard. */
static igraph_error_t build_igraph(const mg_graph *g, const bool *include,
                                   const mg_tensor *remap, int32_t *vid,
                                   mgi_graph_view *v) {
    int32_t nv = 0;
    igraph_integer_t ne = 0;
    for (int32_t i = 0; i < g->n; i++) {
        vid[i] = -1;
        if (include && !include[i]) continue;
        vid[i] = nv;
        v->ids[nv++] = i;
        ne += g->nodes[i].n_in;
    }
    igraph_vector_int_t edges;
    IGRAPH_CHECK(igraph_vector_int_init(&edges, 2 * ne));
    IGRAPH_FINALLY(igraph_vector_int_destroy, &edges);
    igraph_integer_t k = 0;
    for (int32_t u = 0; u < nv; u++) {
        for (int j = 0; j < g->nodes[v->ids[u]].n_in; j++) {
            mg_tensor in = input_of(g, remap, v->ids[u], j);
            if (vid[in] < 0) continue; /* input outside the set */
            VECTOR(edges)[k++] = vid[in];
            VECTOR(edges)[k++] = u;
        }
    }
    IGRAPH_CHECK(igraph_vector_int_resize(&edges, k));
    IGRAPH_CHECK(igraph_create(&v->ig, &edges, nv, IGRAPH_DIRECTED));
    igraph_vector_int_destroy(&edges);
    IGRAPH_FINALLY_CLEAN(1);
    return IGRAPH_SUCCESS;
}

mg_status mgi_graph_view_new(const mg_graph *g, const bool *include,
                             const mg_tensor *remap, mgi_graph_view **out,
                             const char *what) {
    const size_t sz = (size_t)(g->n ? g->n : 1);
    *out = NULL;
    mgi_graph_view *v = calloc(1, sizeof *v);
    int32_t *vid = malloc(sz * sizeof *vid);
    if (v) v->ids = malloc(sz * sizeof *v->ids);
    if (!v || !vid || !v->ids) {
        if (v) free(v->ids);
        free(v);
        free(vid);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    }
    v->g = g;
    igraph_guard gd;
    igraph_guard_enter(&gd);
    const igraph_error_t e = build_igraph(g, include, remap, vid, v);
    igraph_guard_leave(&gd);
    free(vid);
    if (e != IGRAPH_SUCCESS) { /* igraph freed what it had made */
        free(v->ids);
        free(v);
        return igraph_failed(e, what);
    }
    *out = v;
    return MG_OK;
}

void mgi_graph_view_free(mgi_graph_view *v) {
    if (!v) return;
    igraph_guard gd;
    igraph_guard_enter(&gd);
    igraph_destroy(&v->ig);
    igraph_guard_leave(&gd);
    free(v->ids);
    free(v);
}

mg_status mgi_graph_view_topo_order(const mgi_graph_view *v, mg_tensor *order,
                                    int32_t *n_order) {
    igraph_guard gd;
    igraph_guard_enter(&gd);
    mg_status s = MG_OK;
    igraph_bool_t dag = 0;
    igraph_vector_int_t res;
    igraph_error_t e = igraph_is_dag(&v->ig, &dag);
    if (e == IGRAPH_SUCCESS && !dag) {
        s = report_cycle(v->g, &v->ig, v->ids);
    } else if (e == IGRAPH_SUCCESS &&
               (e = igraph_vector_int_init(&res, 0)) == IGRAPH_SUCCESS) {
        e = igraph_topological_sorting(&v->ig, &res, IGRAPH_OUT);
        if (e == IGRAPH_SUCCESS) {
            *n_order = (int32_t)igraph_vector_int_size(&res);
            for (int32_t i = 0; i < *n_order; i++)
                order[i] = v->ids[VECTOR(res)[i]];
        }
        igraph_vector_int_destroy(&res);
    }
    igraph_guard_leave(&gd);
    if (e != IGRAPH_SUCCESS) s = igraph_failed(e, "topological order");
    return s;
}

mg_status mgi_graph_view_articulation_points(const mgi_graph_view *v,
                                             bool *is_ap) {
    igraph_guard gd;
    igraph_guard_enter(&gd);
    igraph_vector_int_t res;
    igraph_error_t e = igraph_vector_int_init(&res, 0);
    if (e == IGRAPH_SUCCESS) {
        /* edge directions are ignored: the cut is in the undirected graph */
        e = igraph_articulation_points(&v->ig, &res);
        /* igraph lists them in search order; marks need no sorting (on a
         * chain of 10^5 ops, sorting them was 6% of mg_gradients) */
        const igraph_integer_t n = igraph_vector_int_size(&res);
        for (igraph_integer_t i = 0; e == IGRAPH_SUCCESS && i < n; i++)
            is_ap[v->ids[VECTOR(res)[i]]] = true;
        igraph_vector_int_destroy(&res);
    }
    igraph_guard_leave(&gd);
    if (e != IGRAPH_SUCCESS) return igraph_failed(e, "articulation points");
    return MG_OK;
}

mg_status mgi_graph_topo_order(const mg_graph *g, const bool *include,
                               const mg_tensor *remap, mg_tensor *order,
                               int32_t *n_order) {
    if (creation_order_is_topological(g, include, remap)) {
        int32_t k = 0;
        for (int32_t i = 0; i < g->n; i++)
            if (!include || include[i]) order[k++] = i;
        *n_order = k;
        return MG_OK;
    }
    mgi_graph_view *v;
    mg_status s = mgi_graph_view_new(g, include, remap, &v, "topological order");
    if (s == MG_OK) s = mgi_graph_view_topo_order(v, order, n_order);
    mgi_graph_view_free(v);
    return s;
}
