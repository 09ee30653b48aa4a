/*
 * pipeline_split.c - cutting a forward graph into pipeline stages
 * (memgrad_pipeline.h): checking a list of cut tensors and placing every op
 * in a stage, choosing cuts that balance flops and activation bytes, and
 * copying one stage into a graph of its own with mg_graph_copy_op.
 */
#include "pipeline.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool op_is(const mg_graph *g, mg_tensor t, const char *name) {
    const char *op = mg_tensor_op_name(g, t);
    return op && strcmp(op, name) == 0;
}

/* "'h1' (#12 relu)" or "#12 (relu)", as memgrad's own messages. */
static const char *label(const mg_graph *g, mg_tensor t, char *buf,
                         size_t len) {
    const char *name = mg_tensor_name(g, t);
    const char *op = mg_tensor_op_name(g, t);
    if (name) snprintf(buf, len, "'%s' (#%d %s)", name, (int)t, op ? op : "?");
    else snprintf(buf, len, "#%d (%s)", (int)t, op ? op : "?");
    return buf;
}

void mgi_pipe_split_free(mgi_pipe_split *sp) {
    if (!sp) return;
    free(sp->stage);
    free(sp->order);
    free(sp->is_leaf);
    free(sp->is_param);
    memset(sp, 0, sizeof *sp);
}

/* The ancestors of loss in a topological order (inputs before readers):
 * increasing id where ids are topological over them (the order g was
 * built in, unless mg_tensor_set_input rewired an op), else a depth-first
 * post-order. MG_ERR_CYCLE on a cycle. */
static mg_status topo_order(const mg_graph *g, mg_tensor loss, const char *who,
                            mgi_pipe_split *sp) {
    int32_t n = sp->n;
    uint8_t *state = calloc((size_t)n, 1);
    mg_tensor *stack = malloc((size_t)n * sizeof *stack);
    int *next = malloc((size_t)n * sizeof *next);
    if (!state || !stack || !next) {
        free(state);
        free(stack);
        free(next);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    mg_status s = MG_OK;
    int32_t top = 0;
    bool by_id = true;
    stack[top++] = loss;
    next[loss] = 0;
    state[loss] = 1;
    while (top > 0) {
        mg_tensor t = stack[top - 1];
        int ni = mg_tensor_num_inputs(g, t);
        if (next[t] < ni) {
            mg_tensor u = mg_tensor_input(g, t, next[t]++);
            if (u >= t) by_id = false;
            if (state[u] == 1) {
                char la[160];
                s = mg_set_error(MG_ERR_CYCLE,
                                 "%s: the graph has a cycle through %s", who,
                                 label(g, u, la, sizeof la));
                break;
            }
            if (state[u] == 0) {
                state[u] = 1;
                next[u] = 0;
                stack[top++] = u;
            }
            continue;
        }
        state[t] = 2;
        sp->order[sp->n_order++] = t;
        top--;
    }
    if (s == MG_OK && by_id) {
        sp->n_order = 0;
        for (int32_t t = 0; t < n; t++)
            if (state[t] == 2) sp->order[sp->n_order++] = t;
    }
    free(state);
    free(stack);
    free(next);
    return s;
}

/* The loss must be a forward op's float scalar in the graph. */
static mg_status check_loss(const mg_graph *g, mg_tensor loss, int32_t n,
                            const char *who) {
    char la[160];
    if (loss < 0 || loss >= n)
        return mg_set_error(MG_ERR_UNKNOWN_ID,
                            "%s: loss: tensor id %d is not in the graph (it "
                            "has %d tensors)",
                            who, (int)loss, (int)n);
    if (op_is(g, loss, "input") || op_is(g, loss, "param") ||
        mg_tensor_is_backward(g, loss) || mg_tensor_numel(g, loss) != 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: loss %s must be a forward op's scalar", who,
                            label(g, loss, la, sizeof la));
    mg_dtype dt;
    mg_tensor_dtype(g, loss, &dt);
    if (dt != MG_F32 && dt != MG_F64)
        return mg_set_error(MG_ERR_DTYPE, "%s: loss %s is %s, not a float", who,
                            label(g, loss, la, sizeof la), mg_dtype_name(dt));
    return MG_OK;
}

/* Each cut a computed ancestor of the loss, before it, listed once;
 * cut_of[t] gets the index of cut t. */
static mg_status check_cuts(const mg_graph *g, mg_tensor loss,
                            const mg_tensor *cuts, int n_cuts,
                            const mgi_pipe_split *sp, int *cut_of,
                            const char *who) {
    char la[160];
    for (int k = 0; k < n_cuts; k++) {
        mg_tensor t = cuts[k];
        if (t < 0 || t >= sp->n)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "%s: cut %d: tensor id %d is not in the graph",
                                who, k, (int)t);
        if (t == loss)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: cut %d is the loss %s: a cut must come "
                                "before it",
                                who, k, label(g, t, la, sizeof la));
        if (sp->stage[t] == -1)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: cut %d, %s, is not an ancestor of the "
                                "loss",
                                who, k, label(g, t, la, sizeof la));
        if (sp->is_leaf[t])
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: cut %d, %s, is a leaf: a cut must be a "
                                "computed tensor",
                                who, k, label(g, t, la, sizeof la));
        if (cut_of[t] >= 0)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: %s is listed twice (cuts %d and %d)", who,
                                label(g, t, la, sizeof la), cut_of[t], k);
        cut_of[t] = k;
    }
    return MG_OK;
}

/* Place: the loss in the last stage, cut k in stage k, and every other op
 * in the earliest stage of its readers (as late as it can go), so that ops
 * reading only leaves join the stage that needs them. */
static void place_ops(const mg_graph *g, mg_tensor loss, int n_cuts,
                      const int *cut_of, mgi_pipe_split *sp) {
    for (int32_t i = sp->n_order - 1; i >= 0; i--) {
        mg_tensor t = sp->order[i];
        if (sp->is_leaf[t]) continue;
        if (t == loss) sp->stage[t] = n_cuts;
        else if (cut_of[t] >= 0) sp->stage[t] = cut_of[t];
        int ni = mg_tensor_num_inputs(g, t);
        for (int j = 0; j < ni; j++) {
            mg_tensor u = mg_tensor_input(g, t, j);
            if (sp->is_leaf[u] || cut_of[u] >= 0) continue;
            if (sp->stage[t] < sp->stage[u]) sp->stage[u] = sp->stage[t];
        }
    }
}

/* The edge u -> t, t in stage st: a cut is read in the next stage only,
 * anything else in its own stage; a parameter in one stage (pstage[u], the
 * stage of its first reader). */
static mg_status check_edge(const mg_graph *g, const mgi_pipe_split *sp,
                            const int *cut_of, int *pstage, mg_tensor u,
                            mg_tensor t, int st, const char *who) {
    char la[160], lb[160];
    if (sp->is_param[u]) {
        mg_status s = MG_OK;
        if (pstage[u] >= 0 && pstage[u] != st)
            s = mg_set_error(MG_ERR_INVALID_ARG,
                             "%s: parameter %s is read by stages %d and %d: a "
                             "parameter must belong to one stage (move a cut)",
                             who, label(g, u, la, sizeof la), pstage[u], st);
        pstage[u] = st;
        return s;
    }
    if (sp->is_leaf[u]) return MG_OK;
    if (cut_of[u] >= 0) {
        if (st == cut_of[u] + 1) return MG_OK;
        return mg_set_error(
            MG_ERR_INVALID_ARG,
            "%s: cut %d, %s, does not separate the graph: it is read by %s in "
            "stage %d, not in stage %d (cuts go in stage order, and every "
            "reader of a cut must come after it)",
            who, cut_of[u], label(g, u, la, sizeof la),
            label(g, t, lb, sizeof lb), st, cut_of[u] + 1);
    }
    if (sp->stage[u] == st) return MG_OK;
    return mg_set_error(
        MG_ERR_INVALID_ARG,
        "%s: the cuts do not separate the graph: %s of stage %d is read by %s "
        "of stage %d, past cut %d (only a cut may cross from one stage to the "
        "next)",
        who, label(g, u, la, sizeof la), sp->stage[u],
        label(g, t, lb, sizeof lb), st, sp->stage[u]);
}

/* Check every edge into a placed op (check_edge). */
static mg_status check_edges(const mg_graph *g, const mgi_pipe_split *sp,
                             const int *cut_of, int *pstage, const char *who) {
    mg_status s = MG_OK;
    for (int32_t i = 0; s == MG_OK && i < sp->n_order; i++) {
        mg_tensor t = sp->order[i];
        if (sp->is_leaf[t]) continue;
        int ni = mg_tensor_num_inputs(g, t);
        for (int j = 0; s == MG_OK && j < ni; j++)
            s = check_edge(g, sp, cut_of, pstage, mg_tensor_input(g, t, j), t,
                           sp->stage[t], who);
    }
    return s;
}

mg_status mgi_pipe_split_make(const mg_graph *g, mg_tensor loss,
                              const mg_tensor *cuts, int n_cuts,
                              const char *who, mgi_pipe_split *sp) {
    memset(sp, 0, sizeof *sp);
    if (!g) return mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", who);
    if (n_cuts < 0 || (n_cuts > 0 && !cuts))
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: %d cuts with a %s list",
                            who, n_cuts, cuts ? "non-NULL" : "NULL");
    int32_t n = mg_graph_num_tensors(g);
    mg_status s = check_loss(g, loss, n, who);
    if (s != MG_OK) return s;
    sp->n = n;
    sp->n_stages = n_cuts + 1;
    sp->stage = malloc((size_t)n * sizeof *sp->stage);
    sp->order = malloc((size_t)n * sizeof *sp->order);
    sp->is_leaf = calloc((size_t)n, sizeof *sp->is_leaf);
    sp->is_param = calloc((size_t)n, sizeof *sp->is_param);
    int *cut_of = malloc((size_t)n * sizeof *cut_of);
    int *pstage = malloc((size_t)n * sizeof *pstage); /* params' stage */
    if (!sp->stage || !sp->order || !sp->is_leaf || !sp->is_param || !cut_of ||
        !pstage) {
        free(cut_of);
        free(pstage);
        mgi_pipe_split_free(sp);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    s = topo_order(g, loss, who, sp);
    for (int32_t t = 0; t < n; t++) {
        sp->stage[t] = -1;
        cut_of[t] = -1;
        pstage[t] = -1;
    }
    for (int32_t i = 0; s == MG_OK && i < sp->n_order; i++) {
        mg_tensor t = sp->order[i];
        sp->is_param[t] = op_is(g, t, "param");
        sp->is_leaf[t] = sp->is_param[t] || op_is(g, t, "input");
        sp->stage[t] = INT_MAX; /* needed: placed below */
    }
    if (s == MG_OK) s = check_cuts(g, loss, cuts, n_cuts, sp, cut_of, who);
    if (s == MG_OK) place_ops(g, loss, n_cuts, cut_of, sp);
    if (s == MG_OK) s = check_edges(g, sp, cut_of, pstage, who);
    free(cut_of);
    free(pstage);
    if (s != MG_OK) mgi_pipe_split_free(sp);
    return s;
}

mg_status mg_pipe_check_cuts(const mg_graph *g, mg_tensor loss,
                             const mg_tensor *cuts, int n_cuts) {
    mgi_pipe_split sp;
    mg_status s =
        mgi_pipe_split_make(g, loss, cuts, n_cuts, "mg_pipe_check_cuts", &sp);
    mgi_pipe_split_free(&sp);
    return s;
}

/* mg_pipe_balance's view of the needed ops, in order: ops[i], each op's
 * pos and its last reader's pos, whether it is free (reads no input,
 * directly or through other ops: those move to their readers' stage),
 * the prefix weight wsum and the candidate cuts cand. */
typedef struct {
    int32_t *pos, *last, *cand;
    bool *free_op;
    mg_tensor *ops;
    double *wsum;
    int32_t n_ops, n_cand;
} balance_view;

static void balance_view_free(balance_view *v) {
    free(v->pos);
    free(v->last);
    free(v->free_op);
    free(v->ops);
    free(v->wsum);
    free(v->cand);
}

/* The needed ops in order, which are free, each one's last reader, and
 * the prefix sums of its weight: its share of the flops plus its share of
 * the activation bytes. */
static void balance_weigh(const mg_graph *g, const mgi_pipe_split *sp,
                          balance_view *v) {
    double ftot = 0, btot = 0;
    v->n_ops = 0;
    for (int32_t i = 0; i < sp->n_order; i++) {
        mg_tensor t = sp->order[i];
        if (sp->is_leaf[t]) continue;
        v->pos[t] = v->n_ops;
        v->last[t] = -1;
        v->ops[v->n_ops++] = t;
        ftot += mg_tensor_flops(g, t);
        btot += (double)mg_tensor_nbytes(g, t);
        /* free: reads no input, only parameters (or such ops): a weight
         * transform or a constant, which goes to its readers' stage */
        bool no_input = true;
        int ni = mg_tensor_num_inputs(g, t);
        for (int j = 0; j < ni; j++) {
            mg_tensor u = mg_tensor_input(g, t, j);
            if (sp->is_leaf[u] ? !sp->is_param[u] : !v->free_op[u])
                no_input = false;
        }
        v->free_op[t] = no_input;
    }
    for (int32_t i = 0; i < v->n_ops; i++) {
        int ni = mg_tensor_num_inputs(g, v->ops[i]);
        for (int j = 0; j < ni; j++) {
            mg_tensor u = mg_tensor_input(g, v->ops[i], j);
            if (!sp->is_leaf[u] && v->last[u] < i) v->last[u] = i;
        }
    }
    v->wsum[0] = 0;
    for (int32_t i = 0; i < v->n_ops; i++) {
        mg_tensor t = v->ops[i];
        double w = (ftot > 0 ? mg_tensor_flops(g, t) / ftot : 0) +
                   (btot > 0 ? (double)mg_tensor_nbytes(g, t) / btot : 0);
        v->wsum[i + 1] = v->wsum[i] + w;
    }
}

/* ops[i] separates the graph when no earlier op (but the free ones) is
 * read after it. */
static void balance_candidates(mg_tensor loss, balance_view *v) {
    int32_t reach = -1;
    v->n_cand = 0;
    for (int32_t i = 0; i < v->n_ops; i++) {
        mg_tensor t = v->ops[i];
        if (!v->free_op[t] && t != loss && reach <= i) v->cand[v->n_cand++] = i;
        if (!v->free_op[t] && v->last[t] > reach) reach = v->last[t];
    }
}

/* Cut k at the candidate whose prefix weight is nearest k / S of the
 * whole, in order, leaving enough candidates for the cuts after it. */
static void balance_choose(const balance_view *v, int n_stages,
                           mg_tensor *cuts_out) {
    double total = v->wsum[v->n_ops];
    int32_t from = 0;
    for (int k = 1; k < n_stages; k++) {
        double target = total * k / n_stages;
        int32_t best = from, until = v->n_cand - (n_stages - 1 - k);
        for (int32_t c = from; c < until; c++)
            if (fabs(v->wsum[v->cand[c] + 1] - target) <
                fabs(v->wsum[v->cand[best] + 1] - target))
                best = c;
        cuts_out[k - 1] = v->ops[v->cand[best]];
        from = best + 1;
    }
}

mg_status mg_pipe_balance(const mg_graph *g, mg_tensor loss, int n_stages,
                          mg_tensor *cuts_out) {
    const char *who = "mg_pipe_balance";
    if (n_stages < 1 || (n_stages > 1 && !cuts_out))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %d stages with a %s cuts_out (need >= 1)", who,
                            n_stages, cuts_out ? "non-NULL" : "NULL");
    mgi_pipe_split sp;
    mg_status s = mgi_pipe_split_make(g, loss, NULL, 0, who, &sp);
    if (s != MG_OK || n_stages == 1) {
        mgi_pipe_split_free(&sp);
        return s;
    }
    size_t n = (size_t)sp.n;
    balance_view v = {
        .pos = malloc(n * sizeof *v.pos),
        .last = malloc(n * sizeof *v.last),
        .free_op = calloc(n, sizeof *v.free_op),
        .ops = malloc(n * sizeof *v.ops),
        .wsum = malloc((n + 1) * sizeof *v.wsum),
        .cand = malloc(n * sizeof *v.cand),
    };
    if (!v.pos || !v.last || !v.free_op || !v.ops || !v.wsum || !v.cand) {
        s = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        goto done;
    }
    balance_weigh(g, &sp, &v);
    balance_candidates(loss, &v);
    if (v.n_cand < n_stages - 1) {
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "%s: the graph has %d tensors that separate it, too "
                         "few for %d stages",
                         who, (int)v.n_cand, n_stages);
        goto done;
    }
    balance_choose(&v, n_stages, cuts_out);
    mgi_pipe_split_free(&sp);
    s = mgi_pipe_split_make(g, loss, cuts_out, n_stages - 1, who, &sp);
done:
    mgi_pipe_split_free(&sp);
    balance_view_free(&v);
    return s;
}

void mgi_pipe_stage_free(mgi_pipe_stage_graph *st) {
    if (!st) return;
    mg_graph_free(st->g);
    free(st->p_src);
    free(st->p_st);
    free(st->in_src);
    free(st->in_st);
    free(st->map);
    memset(st, 0, sizeof *st);
}

mg_status mgi_pipe_stage_build(const mg_graph *g, const mgi_pipe_split *sp,
                               mg_tensor loss, const mg_tensor *cuts, int s,
                               const char *who, mgi_pipe_stage_graph *st) {
    memset(st, 0, sizeof *st);
    int32_t n = sp->n;
    st->act_in = MG_NO_TENSOR;
    st->g = mg_graph_new();
    st->map = malloc((size_t)n * sizeof *st->map);
    st->p_src = malloc((size_t)n * sizeof *st->p_src);
    st->p_st = malloc((size_t)n * sizeof *st->p_st);
    st->in_src = malloc((size_t)n * sizeof *st->in_src);
    st->in_st = malloc((size_t)n * sizeof *st->in_st);
    bool *reads = calloc((size_t)n, sizeof *reads);
    mg_status status = MG_OK;
    char la[160];
    if (!st->g || !st->map || !st->p_src || !st->p_st || !st->in_src ||
        !st->in_st || !reads) {
        status = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        goto done;
    }
    for (int32_t t = 0; t < n; t++) st->map[t] = MG_NO_TENSOR;
    if (s > 0) {
        mg_tensor c = cuts[s - 1];
        int nd;
        int64_t shape[MG_MAX_DIMS];
        mg_dtype dt;
        mg_tensor_shape(g, c, &nd, shape);
        mg_tensor_dtype(g, c, &dt);
        char name[200];
        const char *cn = mg_tensor_name(g, c);
        if (cn) snprintf(name, sizeof name, "pipe.in.%s", cn);
        else snprintf(name, sizeof name, "pipe.in.#%d", (int)c);
        st->act_in = mg_input(st->g, name, dt, nd, shape);
        if (st->act_in == MG_NO_TENSOR) {
            status = mg_last_status();
            goto done;
        }
        st->map[c] = st->act_in;
    }
    /* The leaves the stage reads, copied in id order; then its ops. */
    for (int32_t i = 0; i < sp->n_order; i++) {
        mg_tensor t = sp->order[i];
        if (sp->is_leaf[t] || sp->stage[t] != s) continue;
        int ni = mg_tensor_num_inputs(g, t);
        for (int j = 0; j < ni; j++) {
            mg_tensor u = mg_tensor_input(g, t, j);
            if (sp->is_leaf[u]) reads[u] = true;
        }
    }
    for (int32_t u = 0; u < n; u++) {
        if (!reads[u]) continue;
        mg_tensor c = mg_graph_copy_op(st->g, g, u, NULL, 0);
        if (c == MG_NO_TENSOR) {
            status = mg_last_status();
            goto done;
        }
        st->map[u] = c;
        if (sp->is_param[u]) {
            st->p_src[st->n_params] = u;
            st->p_st[st->n_params++] = c;
        } else {
            st->in_src[st->n_inputs] = u;
            st->in_st[st->n_inputs++] = c;
        }
    }
    for (int32_t i = 0; i < sp->n_order; i++) {
        mg_tensor t = sp->order[i];
        if (sp->is_leaf[t] || sp->stage[t] != s) continue;
        mg_tensor in[8];
        int ni = mg_tensor_num_inputs(g, t);
        for (int j = 0; j < ni && j < 8; j++)
            in[j] = st->map[mg_tensor_input(g, t, j)];
        mg_tensor c = mg_graph_copy_op(st->g, g, t, in, ni);
        if (c == MG_NO_TENSOR) {
            char why[512];
            snprintf(why, sizeof why, "%s", mg_last_error());
            status = mg_set_error(mg_last_status(),
                                  "%s: stage %d: copying %s failed: %s", who, s,
                                  label(g, t, la, sizeof la), why);
            goto done;
        }
        st->map[t] = c;
        st->n_ops++;
        st->flops += mg_tensor_flops(g, t);
    }
    st->y = st->map[s == sp->n_stages - 1 ? loss : cuts[s]];
done:
    free(reads);
    if (status != MG_OK) mgi_pipe_stage_free(st);
    return status;
}
