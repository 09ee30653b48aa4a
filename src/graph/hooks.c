/*
 * hooks.c - tensor hooks (memgrad_observe.h), PyTorch's register_hook for a
 * static graph. They are kept on the graph by tensor id, not on a plan:
 * mg_gradients only appends nodes, so a hook registered before the rewrite
 * still names the same tensor after it, and every plan compiled from the
 * graph calls it. A recomputed copy is a node of its own, without the hook,
 * which is what makes a forward hook fire once per run.
 */
#include "graph.h"
#include "memgrad_observe.h"

#include <stdlib.h>
#include <string.h>

typedef struct hook {
    mg_tensor t;
    mg_tensor_hook_fn fn;
    void *user;
    int id;
} hook;

struct mgi_hooks {
    hook *list;
    int n, cap, next_id;
};

void mgi_hooks_free(struct mgi_hooks *h) {
    if (!h) return;
    free(h->list);
    free(h);
}

bool mgi_hooks_any(const mg_graph *g) { return g->hooks && g->hooks->n > 0; }

bool mgi_hooks_on(const mg_graph *g, mg_tensor t) {
    const struct mgi_hooks *h = g->hooks;
    for (int i = 0; h && i < h->n; i++)
        if (h->list[i].t == t) return true;
    return false;
}

mg_status mg_tensor_add_hook(mg_graph *g, mg_tensor t, mg_tensor_hook_fn fn,
                             void *user, int *id) {
    if (!g || !fn)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_add_hook: %s is NULL",
                            g ? "fn" : "graph");
    mg_status s = mgi_graph_check_id(g, t, "mg_tensor_add_hook: tensor");
    if (s != MG_OK) return s;
    char label[160];
    const mg_node *n = &g->nodes[t];
    if (mgi_op_table[n->op].flags & MG_OPF_LEAF)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_add_hook: %s is an input or parameter, "
                            "which no step computes; hook its gradient",
                            mgi_graph_tensor_label(g, t, label, sizeof label));
    if (n->flags & MG_NODE_RECOMPUTE)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_add_hook: %s is a recomputed copy; "
                            "hook the forward tensor it recomputes (#%d)",
                            mgi_graph_tensor_label(g, t, label, sizeof label),
                            (int)n->orig);
    struct mgi_hooks *h = g->hooks;
    if (!h && !(h = g->hooks = calloc(1, sizeof *h)))
        return mg_set_error(MG_ERR_NOMEM, "mg_tensor_add_hook: out of memory");
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 4;
        hook *list = realloc(h->list, (size_t)cap * sizeof *list);
        if (!list)
            return mg_set_error(MG_ERR_NOMEM,
                                "mg_tensor_add_hook: out of memory");
        h->list = list;
        h->cap = cap;
    }
    h->list[h->n] = (hook){t, fn, user, h->next_id++};
    if (id) *id = h->list[h->n].id;
    h->n++;
    return MG_OK;
}

mg_status mg_tensor_remove_hook(mg_graph *g, int id) {
    if (!g)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_tensor_remove_hook: graph is NULL");
    struct mgi_hooks *h = g->hooks;
    for (int i = 0; h && i < h->n; i++)
        if (h->list[i].id == id) {
            memmove(&h->list[i], &h->list[i + 1],
                    (size_t)(h->n - i - 1) * sizeof *h->list);
            h->n--;
            return MG_OK;
        }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_tensor_remove_hook: no hook %d on this graph", id);
}

mg_status mgi_hooks_call(const mg_graph *g, mg_tensor t, void *data) {
    const struct mgi_hooks *h = g->hooks;
    for (int i = 0; h && i < h->n; i++) {
        if (h->list[i].t != t) continue;
        mg_clear_error();
        mg_status s = h->list[i].fn(h->list[i].user, g, t, data);
        if (s == MG_OK) continue;
        char why[256], label[160];
        snprintf(why, sizeof why, "%s",
                 mg_last_status() == s && mg_last_error()[0]
                     ? mg_last_error()
                     : mg_status_str(s));
        return mg_set_error(
            s, "mg_exec_run: hook %d on %s stopped the run: %s", h->list[i].id,
            mgi_graph_tensor_label(g, t, label, sizeof label), why);
    }
    return MG_OK;
}
