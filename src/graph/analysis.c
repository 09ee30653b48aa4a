/*
 * analysis.c - graph analysis: topological order and cycle detection on
 * igraph, the articulation points the memory policy cuts at (a search of
 * our own, checked against igraph's in test_analysis.c), and the ancestor
 * marking that schedules are built from.
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

mg_status mgi_graph_ancestors_order(const mg_graph *g, const mg_tensor *roots,
                                    int n_roots, const mg_tensor *remap,
                                    bool *needed, mg_tensor *order,
                                    int32_t *n_order, const char *what) {
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
    if (!in_order) {
        free(keys);
        memset(needed, 0, (size_t)g->n * sizeof *needed);
        s = mgi_graph_mark_ancestors(g, roots, n_roots, remap, needed, what);
        if (s == MG_OK)
            s = mgi_graph_topo_order(g, needed, remap, order, n_order);
        return s;
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

/* The directed (or undirected) igraph graph on the included nodes, with
 * ids[v] the node of igraph vertex v. vid and ids have room for g->n. */
static igraph_error_t build_igraph(const mg_graph *g, const bool *include,
                                   const mg_tensor *remap, bool directed,
                                   int32_t *vid, mg_tensor *ids, igraph_t *ig) {
    int32_t nv = 0;
    igraph_integer_t ne = 0;
    for (int32_t i = 0; i < g->n; i++) {
        vid[i] = -1;
        if (include && !include[i]) continue;
        vid[i] = nv;
        ids[nv++] = i;
        ne += g->nodes[i].n_in;
    }
    igraph_vector_int_t edges;
    IGRAPH_CHECK(igraph_vector_int_init(&edges, 2 * ne));
    IGRAPH_FINALLY(igraph_vector_int_destroy, &edges);
    igraph_integer_t k = 0;
    for (int32_t v = 0; v < nv; v++) {
        for (int j = 0; j < g->nodes[ids[v]].n_in; j++) {
            mg_tensor in = input_of(g, remap, ids[v], j);
            if (vid[in] < 0) continue; /* input outside the set */
            VECTOR(edges)[k++] = vid[in];
            VECTOR(edges)[k++] = v;
        }
    }
    IGRAPH_CHECK(igraph_vector_int_resize(&edges, k));
    IGRAPH_CHECK(igraph_create(ig, &edges, nv, directed));
    igraph_vector_int_destroy(&edges);
    IGRAPH_FINALLY_CLEAN(1);
    return IGRAPH_SUCCESS;
}

/* An igraph view of the included nodes, built under the igraph guard:
 * opened by ig_view_open, which holds the guard until ig_view_close. */
typedef struct ig_view {
    igraph_guard guard;
    igraph_t ig;
    bool built;
    int32_t *vid;   /* per node id: igraph vertex, or -1 */
    mg_tensor *ids; /* per igraph vertex: node id */
} ig_view;

static mg_status ig_view_open(const mg_graph *g, const bool *include,
                              const mg_tensor *remap, bool directed, ig_view *v,
                              const char *what) {
    v->built = false;
    v->vid = malloc((size_t)(g->n ? g->n : 1) * sizeof *v->vid);
    v->ids = malloc((size_t)(g->n ? g->n : 1) * sizeof *v->ids);
    igraph_guard_enter(&v->guard);
    if (!v->vid || !v->ids)
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    igraph_error_t e =
        build_igraph(g, include, remap, directed, v->vid, v->ids, &v->ig);
    if (e != IGRAPH_SUCCESS) return igraph_failed(e, what);
    v->built = true;
    return MG_OK;
}

static void ig_view_close(ig_view *v) {
    if (v->built) igraph_destroy(&v->ig);
    igraph_guard_leave(&v->guard);
    free(v->vid);
    free(v->ids);
}

/* Articulation points by Hopcroft and Tarjan's depth-first search, made
 * iterative (a chain of 10^6 ops is as deep), on a compressed adjacency
 * list of 32-bit ids. igraph's igraph_articulation_points needed an
 * igraph_t built for every call (64-bit edge lists sorted, incidence lists
 * made): that was about 30% of what mg_gradients spent on a chain (issue
 * 32). The set is unique, so any correct search gives igraph's answer;
 * test_analysis.c checks this one against igraph on random graphs. */
typedef struct ap_work {
    int32_t *start; /* per node: its edges in adj[start[v] .. start[v+1]) */
    int32_t *adj;
    int32_t *disc; /* discovery time from 1; 0: not yet seen */
    int32_t *low;  /* the earliest discovery time reachable below it */
    int32_t *next; /* per node on the stack: its next edge to follow */
    mg_tensor *stack;
    bool *is_ap;
} ap_work;

static void ap_work_free(ap_work *w) {
    free(w->start);
    free(w->adj);
    free(w->disc);
    free(w->low);
    free(w->next);
    free(w->stack);
    free(w->is_ap);
}

static bool ap_in(const bool *include, mg_tensor t) {
    return !include || include[t];
}

/* The undirected edges between included nodes, both ways, into w->start
 * and w->adj. A repeated input makes a repeated edge and a node reading
 * itself a loop: neither changes which nodes are articulation points. */
static mg_status ap_adjacency(const mg_graph *g, const bool *include,
                              ap_work *w) {
    const int32_t n = g->n;
    int32_t *start = w->start;
    for (int32_t v = 0; v < n; v++) {
        if (!ap_in(include, v)) continue;
        const mg_node *nd = &g->nodes[v];
        for (int k = 0; k < nd->n_in; k++) {
            const mg_tensor in = nd->in[k];
            if (in == v || !ap_in(include, in)) continue;
            start[v + 1]++;
            start[in + 1]++;
        }
    }
    for (int32_t v = 0; v < n; v++) start[v + 1] += start[v];
    if (!(w->adj = malloc((size_t)(start[n] ? start[n] : 1) * sizeof *w->adj)))
        return mg_set_error(MG_ERR_NOMEM, "articulation points: out of memory");
    /* fill with start[v] as v's cursor, then shift back by one node */
    for (int32_t v = 0; v < n; v++) {
        if (!ap_in(include, v)) continue;
        const mg_node *nd = &g->nodes[v];
        for (int k = 0; k < nd->n_in; k++) {
            const mg_tensor in = nd->in[k];
            if (in == v || !ap_in(include, in)) continue;
            w->adj[start[v]++] = in;
            w->adj[start[in]++] = v;
        }
    }
    for (int32_t v = n; v > 0; v--) start[v] = start[v - 1];
    start[0] = 0;
    return MG_OK;
}

/* One depth-first search from root over its component. A node u other
 * than the root is a point when some child v in the search tree reaches
 * nothing discovered before u (low[v] >= disc[u]); the root, when it has
 * two children or more. Following the tree edge back to the parent only
 * lowers low[v] to disc[parent], which leaves that test as it was. */
static void ap_search(ap_work *w, mg_tensor root, int32_t *time) {
    int32_t top = 0, root_children = 0;
    w->disc[root] = w->low[root] = ++*time;
    w->next[root] = w->start[root];
    w->stack[top++] = root;
    while (top > 0) {
        const mg_tensor v = w->stack[top - 1];
        if (w->next[v] < w->start[v + 1]) {
            const mg_tensor u = w->adj[w->next[v]++];
            if (!w->disc[u]) {
                w->disc[u] = w->low[u] = ++*time;
                w->next[u] = w->start[u];
                w->stack[top++] = u;
                if (v == root) root_children++;
            } else if (w->disc[u] < w->low[v]) {
                w->low[v] = w->disc[u];
            }
            continue;
        }
        if (--top == 0) break;
        const mg_tensor p = w->stack[top - 1];
        if (w->low[v] < w->low[p]) w->low[p] = w->low[v];
        if (p != root && w->low[v] >= w->disc[p]) w->is_ap[p] = true;
    }
    if (root_children > 1) w->is_ap[root] = true;
}

/* The articulation points of the included nodes, in id order. */
mg_status mgi_graph_articulation_points(const mg_graph *g, const bool *include,
                                        mg_tensor *out, int32_t *n_out) {
    const size_t n = (size_t)g->n, sz = n ? n : 1;
    ap_work w = {0};
    w.start = calloc(n + 1, sizeof *w.start);
    w.disc = calloc(sz, sizeof *w.disc);
    w.low = malloc(sz * sizeof *w.low);
    w.next = malloc(sz * sizeof *w.next);
    w.stack = malloc(sz * sizeof *w.stack);
    w.is_ap = calloc(sz, sizeof *w.is_ap);
    mg_status s = MG_OK;
    if (!w.start || !w.disc || !w.low || !w.next || !w.stack || !w.is_ap)
        s = mg_set_error(MG_ERR_NOMEM, "articulation points: out of memory");
    if (s == MG_OK) s = ap_adjacency(g, include, &w);
    if (s == MG_OK) {
        int32_t time = 0, k = 0;
        for (mg_tensor v = 0; v < g->n; v++)
            if (ap_in(include, v) && !w.disc[v]) ap_search(&w, v, &time);
        for (mg_tensor v = 0; v < g->n; v++)
            if (w.is_ap[v]) out[k++] = v;
        *n_out = k;
    }
    ap_work_free(&w);
    return s;
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
    ig_view v;
    mg_status s =
        ig_view_open(g, include, remap, true, &v, "topological order");
    igraph_vector_int_t res;
    if (s == MG_OK) {
        igraph_bool_t dag = 0;
        igraph_error_t e = igraph_is_dag(&v.ig, &dag);
        if (e == IGRAPH_SUCCESS && !dag) {
            s = report_cycle(g, &v.ig, v.ids);
        } else if (e == IGRAPH_SUCCESS &&
                   (e = igraph_vector_int_init(&res, 0)) == IGRAPH_SUCCESS) {
            e = igraph_topological_sorting(&v.ig, &res, IGRAPH_OUT);
            if (e == IGRAPH_SUCCESS) {
                *n_order = (int32_t)igraph_vector_int_size(&res);
                for (int32_t i = 0; i < *n_order; i++)
                    order[i] = v.ids[VECTOR(res)[i]];
            }
            igraph_vector_int_destroy(&res);
        }
        if (e != IGRAPH_SUCCESS) s = igraph_failed(e, "topological order");
    }
    ig_view_close(&v);
    return s;
}
