/*
 * checkpoint.c - the checkpoint policies: which forward tensors the forward
 * pass keeps for the backward pass. Everything else is recomputed (see
 * recompute.c), so this file decides the memory/compute trade-off and
 * nothing else.
 *
 * memory: segments of about sqrt(total forward bytes) each. Boundaries are
 * articulation points of the forward graph (igraph's, found once per
 * mg_gradients call in autodiff.c) when there are enough
 * of them; otherwise, in each stretch of the topological order, the cut with
 * the fewest live bytes (a multi-tensor separator: every tensor produced
 * before the cut and read after it). docs/checkpointing.md says why.
 *
 * Also the policies' names and the text form of a byte budget, as the
 * command-line tools take them.
 */
#include "rewrite.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every policy, in enum order: the one place their names are spelled. */
static const char *const policy_names[] = {[MG_CKPT_NONE] = "none",
                                           [MG_CKPT_COLLECTION] = "collection",
                                           [MG_CKPT_MEMORY] = "memory",
                                           [MG_CKPT_SPEED] = "speed",
                                           [MG_CKPT_BUDGET] = "budget"};
#define N_POLICIES ((int)(sizeof policy_names / sizeof *policy_names))

const char *mg_ckpt_policy_name(mg_ckpt_policy p) {
    return (int)p >= 0 && (int)p < N_POLICIES ? policy_names[p] : "?";
}

mg_status mg_ckpt_policy_parse(const char *name, mg_ckpt_policy *out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_ckpt_policy_parse: out is NULL");
    for (int i = 0; name && i < N_POLICIES; i++)
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (mg_ckpt_policy)i;
            return MG_OK;
        }
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "mg_ckpt_policy_parse: '%s' is no policy (none, "
                        "collection, memory, speed, budget)",
                        name ? name : "(null)");
}

static mg_status bad_budget(const char *text, const char *why) {
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "mg_budget_parse: '%.64s' is no budget (%s; a budget "
                        "is a byte count such as 1048576 or 64M, with K, M "
                        "or G for 2^10, 2^20 or 2^30 bytes, or a fraction "
                        "of plain backprop's peak such as 0.25x)",
                        text, why);
}

mg_status mg_budget_parse(const char *text, size_t *bytes, double *fraction) {
    if (!bytes || !fraction)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_budget_parse: %s is NULL",
                            bytes ? "fraction" : "bytes");
    if (!text) return bad_budget("(null)", "no text");
    /* The number: digits with at most one point, nothing else (no sign,
     * space, exponent, hexadecimal, inf or nan); then the suffix. */
    const size_t num = strspn(text, "0123456789.");
    const char *suffix = text + num, *point = memchr(text, '.', num);
    if (strspn(text, "0123456789") == 0 && !(point == text && num > 1))
        return bad_budget(text, "not a number");
    if (point && memchr(point + 1, '.', num - (size_t)(point - text) - 1))
        return bad_budget(text, "not a number");
    errno = 0;
    if (!*suffix) {
        if (point) return bad_budget(text, "a byte count is whole");
        const unsigned long long v = strtoull(text, NULL, 10);
        if (errno || v > SIZE_MAX) return bad_budget(text, "too large");
        if (v == 0) return bad_budget(text, "a budget must be above 0");
        *bytes = (size_t)v;
        *fraction = 0;
        return MG_OK;
    }
    const double v = strtod(text, NULL);
    if (!strcmp(suffix, "x")) {
        if (!(v > 0) || !isfinite(v))
            return bad_budget(text, "a fraction must be above 0");
        *bytes = 0;
        *fraction = v;
        return MG_OK;
    }
    static const char *const units[3][2] = {
        {"K", "KiB"}, {"M", "MiB"}, {"G", "GiB"}};
    int shift = -1;
    for (int u = 0; u < 3 && shift < 0; u++)
        if (!strcmp(suffix, units[u][0]) || !strcmp(suffix, units[u][1]))
            shift = 10 * (u + 1);
    if (shift < 0)
        return bad_budget(text, "the suffix is none of K, M, G or x");
    /* Exactly, not through a double: budgets round down, and a double
     * rounds to nearest ("1.99999999999999999999999999999G" became 2^31,
     * above the text's value; "9007199254740993K" lost its last unit).
     * The whole part times 2^shift, plus the first `shift` binary digits
     * of the fraction. */
    const size_t n_int = point ? (size_t)(point - text) : num;
    unsigned long long whole = 0;
    for (size_t i = 0; i < n_int; i++) {
        const unsigned d = (unsigned)(text[i] - '0');
        if (whole > (ULLONG_MAX - d) / 10) return bad_budget(text, "too large");
        whole = whole * 10 + d;
    }
    if (whole > (unsigned long long)(SIZE_MAX >> shift))
        return bad_budget(text, "too large");
    size_t frac_bits = 0;
    if (point) {
        /* Trailing zeros add nothing; the other digits all may (0.99...9
         * stays below 1 however many 9s), so double them in place, in a
         * copy: each doubling's carry out of the first digit is the next
         * binary digit. */
        size_t n_frac = num - n_int - 1;
        while (n_frac && point[n_frac] == '0') n_frac--;
        if (n_frac) {
            char *f = malloc(n_frac);
            if (!f)
                return mg_set_error(MG_ERR_NOMEM,
                                    "mg_budget_parse: out of memory for "
                                    "%zu digits",
                                    n_frac);
            for (size_t i = 0; i < n_frac; i++)
                f[i] = (char)(point[1 + i] - '0');
            for (int bit = 0; bit < shift; bit++) {
                int carry = 0;
                for (size_t i = n_frac; i-- > 0;) {
                    const int d = 2 * f[i] + carry;
                    f[i] = (char)(d % 10);
                    carry = d / 10;
                }
                frac_bits = 2 * frac_bits + (size_t)carry;
            }
            free(f);
        }
    }
    /* whole << shift has `shift` zero bits below, frac_bits < 2^shift:
     * the sum cannot overflow. */
    const size_t b = ((size_t)whole << shift) + frac_bits;
    if (b == 0) return bad_budget(text, "a budget must be above 0");
    *bytes = b;
    *fraction = 0;
    return MG_OK;
}

mg_status mgi_checkpoints_check(const mg_graph *g, const mg_checkpoints *c) {
    if (!c) return MG_OK;
    if (c->compact != 0 && c->compact != 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: compact = %d must be 0 or 1",
                            c->compact);
    if (c->store16 != 0 && c->store16 != 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: store16 = %d must be 0 or 1",
                            c->store16);
    if (c->offload != 0 && c->offload != 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: offload = %d must be 0 or 1",
                            c->offload);
    if (c->offload && c->policy != MG_CKPT_BUDGET)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: offload is a choice of the budget "
                            "policy; policy %s does not take it",
                            mg_ckpt_policy_name(c->policy));
    if (c->offload && (!(c->host_bandwidth > 0) || !(c->compute_rate > 0) ||
                       c->host_bandwidth > 1e300 || c->compute_rate > 1e300))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: offload needs host_bandwidth and "
                            "compute_rate > 0 (got %g and %g)",
                            c->host_bandwidth, c->compute_rate);
    if (c->offload && (c->compact || c->store16))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: offload with %s is not supported",
                            c->compact ? "compact" : "store16");
    switch (c->policy) {
    case MG_CKPT_NONE:
    case MG_CKPT_MEMORY:
    case MG_CKPT_SPEED:
    case MG_CKPT_BUDGET: return MG_OK;
    case MG_CKPT_COLLECTION:
        if (c->n_tensors < 0 || (c->n_tensors > 0 && !c->tensors))
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_gradients: collection of %d checkpoints "
                                "with tensors %s",
                                c->n_tensors, c->tensors ? "set" : "NULL");
        for (int i = 0; i < c->n_tensors; i++) {
            mg_status s = mgi_graph_check_id(g, c->tensors[i],
                                             "mg_gradients (checkpoint)");
            if (s != MG_OK) return s;
        }
        return MG_OK;
    }
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "mg_gradients: unknown checkpoint policy %d",
                        (int)c->policy);
}

/* A listed checkpoint must be a computed forward tensor and not a y. */
static mg_status check_listed(const mg_graph *g, mg_tensor t,
                              const bool *forward, const bool *is_y) {
    char label[160];
    mgi_graph_tensor_label(g, t, label, sizeof label);
    if (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: checkpoint %s is caller memory, "
                            "always available; list computed tensors only",
                            label);
    if (!forward[t])
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: checkpoint %s is not in the "
                            "forward graph of the ys",
                            label);
    if (is_y[t])
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: checkpoint %s is a y; ys are "
                            "always kept",
                            label);
    return MG_OK;
}

static mg_status choose_collection(const mg_graph *g, const mg_checkpoints *c,
                                   const bool *forward, const bool *is_y,
                                   bool *keep) {
    for (int i = 0; i < c->n_tensors; i++) {
        mg_status s = check_listed(g, c->tensors[i], forward, is_y);
        if (s != MG_OK) return s;
        keep[c->tensors[i]] = true;
    }
    for (int32_t t = 0; t < g->n; t++)
        if (forward[t] && (g->nodes[t].flags & MG_NODE_CHECKPOINT)) {
            mg_status s = check_listed(g, t, forward, is_y);
            if (s != MG_OK) return s;
            keep[t] = true;
        }
    return MG_OK;
}

static bool expensive(const mg_graph *g, mg_tensor t) {
    return (mgi_op_table[g->nodes[t].op].flags & MG_OPF_EXPENSIVE) != 0;
}

/* Keep the outputs of expensive ops. With bwd_reads, only those plain
 * backprop's backward pass reads anyway: keeping another (a matmul output
 * only an add reads, which plain backprop frees straight after the add)
 * would hold it to the backward pass and raise the peak. The cheap
 * consumers of the others are kept instead, as plain backprop keeps them,
 * so no expensive op is ever recomputed. */
static void choose_speed(const mg_graph *g, const bool *forward,
                         const bool *bwd_reads, bool *keep) {
    for (int32_t t = 0; t < g->n; t++)
        if (forward[t] && expensive(g, t) && (!bwd_reads || bwd_reads[t]))
            keep[t] = true;
    if (!bwd_reads) return;
    for (int32_t t = 0; t < g->n; t++) {
        const mg_node *nd = &g->nodes[t];
        if (!forward[t] || expensive(g, t)) continue;
        for (int k = 0; k < nd->n_in && !keep[t]; k++)
            keep[t] = forward[nd->in[k]] && expensive(g, nd->in[k]) &&
                      !keep[nd->in[k]];
    }
}

/* ---- memory policy ------------------------------------------------------- */

typedef struct fwd_order {
    mg_tensor *order; /* forward tensors in topological (id) order */
    int32_t n;
    int32_t *pos; /* per tensor id: index in order, or -1 */
    double total_bytes;
    double factor; /* segment length, in units of the balanced length */
} fwd_order;

/* The byte budget of one segment. sqrt(total * mean) makes the number of
 * segments and the size of each about sqrt(n) for n equal tensors: the
 * balance of kept against recomputed-and-live bytes if every recomputed
 * tensor stayed live. Only those a gradient rule reads do (an MLP's matmul
 * and bias outputs are read by none), so the best length is some factor of
 * that; policy_memory.c tries several and keeps the lowest predicted peak. */
static double segment_budget(const fwd_order *fo) {
    double mean = fo->total_bytes / (fo->n ? fo->n : 1);
    return fo->factor * sqrt(fo->total_bytes * mean);
}

static bool candidate(const mg_graph *g, mg_tensor t, const bool *is_y,
                      size_t min_bytes) {
    return !is_y[t] && mgi_graph_nbytes(g, t) >= min_bytes &&
           mgi_tdesc_numel(mgi_graph_desc(g, t)) > 1;
}

/* Walk the order; every time a segment's bytes reach the budget, keep the
 * latest articulation point seen. Returns how many were kept. */
static int32_t choose_articulation(const mg_graph *g, const fwd_order *fo,
                                   const bool *is_ap, const bool *is_y,
                                   size_t min_bytes, bool *keep) {
    double budget = segment_budget(fo), acc = 0;
    int32_t kept = 0;
    mg_tensor last_ap = MG_NO_TENSOR;
    for (int32_t i = 0; i < fo->n; i++) {
        mg_tensor t = fo->order[i];
        acc += (double)mgi_graph_nbytes(g, t);
        if (is_ap[t] && candidate(g, t, is_y, min_bytes)) last_ap = t;
        if (acc >= budget && last_ap != MG_NO_TENSOR) {
            keep[last_ap] = true;
            kept++;
            last_ap = MG_NO_TENSOR;
            acc = 0;
        }
    }
    return kept;
}

/* Multi-tensor separators: the cut after position p keeps every forward
 * tensor produced at or before p and read after p. In each stretch of
 * about one budget of bytes, cut where that set is smallest. */
static mg_status choose_cuts(const mg_graph *g, const fwd_order *fo,
                             const bool *is_y, size_t min_bytes, bool *keep) {
    int32_t n = fo->n;
    int32_t *last = malloc((size_t)(n ? n : 1) * sizeof *last);
    double *live = calloc((size_t)n + 1, sizeof *live);
    if (!last || !live) {
        free(last);
        free(live);
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    }
    for (int32_t i = 0; i < n; i++) last[i] = i;
    for (int32_t i = 0; i < n; i++) {
        const mg_node *nd = &g->nodes[fo->order[i]];
        for (int k = 0; k < nd->n_in; k++) {
            int32_t p = fo->pos[nd->in[k]];
            if (p >= 0 && last[p] < i) last[p] = i;
        }
    }
    /* live[p] = bytes of tensors with pos <= p < last: a difference array */
    for (int32_t i = 0; i < n; i++) {
        double b = (double)mgi_graph_nbytes(g, fo->order[i]);
        live[i] += b;
        live[last[i]] -= b;
    }
    for (int32_t i = 1; i < n; i++) live[i] += live[i - 1];

    double budget = segment_budget(fo), acc = 0;
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        acc += (double)mgi_graph_nbytes(g, fo->order[i]);
        if (best < 0 || live[i] < live[best]) best = i;
        if (acc < budget || i == n - 1) continue;
        for (int32_t j = 0; j <= best; j++)
            /* min_bytes holds here as at articulation points: a
             * separator's smaller members are recomputed instead. */
            if (last[j] > best && candidate(g, fo->order[j], is_y, min_bytes))
                keep[fo->order[j]] = true;
        best = -1;
        acc = 0;
    }
    free(last);
    free(live);
    return MG_OK;
}

/* The checkpoints go to chosen; with m->keep_tail, the tensors after them
 * that are not recomputed go to keep alone: they are no checkpoints (not
 * reported as such, nor held to min_bytes), just not recomputed, as under
 * policy none. */
static mg_status choose_memory(const mg_graph *g, const mg_checkpoints *c,
                               const mg_memory_search *m,
                               const mg_tensor *order, int32_t n_order,
                               const bool *forward, const bool *is_y,
                               const bool *is_ap, bool *chosen,
                               bool *keep_tail) {
    bool *keep = chosen;
    fwd_order fo = {.factor = m->segment_factor};
    size_t sz = (size_t)(g->n ? g->n : 1);
    if (!is_ap) /* the caller's analysis finds them for this policy */
        return mg_set_error(MG_ERR_INTERNAL, "mg_gradients: policy memory "
                                             "without articulation points");
    fo.order = malloc(sz * sizeof *fo.order);
    fo.pos = malloc(sz * sizeof *fo.pos);
    mg_status s = MG_OK;
    if (!fo.order || !fo.pos)
        s = mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    if (s == MG_OK) {
        for (int32_t t = 0; t < g->n; t++) fo.pos[t] = -1;
        for (int32_t i = 0; i < n_order; i++) {
            mg_tensor t = order[i];
            if (!forward[t]) continue;
            fo.pos[t] = fo.n;
            fo.order[fo.n++] = t;
            fo.total_bytes += (double)mgi_graph_nbytes(g, t);
        }
        /* Enough articulation points for the budget spacing? A chain has
         * one per tensor; a U-Net none between encoder and decoder. */
        double want = fo.total_bytes / (segment_budget(&fo) + 1);
        bool *trial = calloc(sz, sizeof *trial);
        if (!trial) {
            s = mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
        } else {
            int32_t got =
                choose_articulation(g, &fo, is_ap, is_y, c->min_bytes, trial);
            if (!m->force_cuts && got + 1 >= want / 2) {
                for (int32_t t = 0; t < g->n; t++) keep[t] |= trial[t];
            } else {
                s = choose_cuts(g, &fo, is_y, c->min_bytes, keep);
            }
            free(trial);
        }
    }
    if (s == MG_OK && m->keep_tail > 0) {
        /* the forward tensors after the keep_tail-th last checkpoint */
        int32_t from = fo.n, seen = 0;
        while (from > 0 && seen < m->keep_tail)
            if (keep[fo.order[--from]]) seen++;
        if (seen < m->keep_tail) from = -1; /* fewer: keep everything */
        for (int32_t i = from + 1; i < fo.n; i++) keep_tail[fo.order[i]] = true;
    }
    free(fo.order);
    free(fo.pos);
    return s;
}

mg_status mgi_checkpoints_choose(const mg_graph *g, const mg_checkpoints *c,
                                 const mg_memory_search *m,
                                 const mg_tensor *order, int32_t n_order,
                                 const bool *forward, const bool *is_y,
                                 const bool *is_ap, bool *keep, bool *chosen) {
    mg_ckpt_policy policy = c && !m->plain ? c->policy : MG_CKPT_NONE;
    for (int32_t t = 0; t < g->n; t++) {
        chosen[t] = false;
        keep[t] = policy == MG_CKPT_NONE || is_y[t] ||
                  (mgi_op_table[g->nodes[t].op].flags & MG_OPF_NO_RECOMPUTE);
    }
    mg_status s = MG_OK;
    switch (policy) {
    case MG_CKPT_NONE: return MG_OK;
    case MG_CKPT_COLLECTION:
        s = choose_collection(g, c, forward, is_y, chosen);
        break;
    case MG_CKPT_SPEED: choose_speed(g, forward, m->bwd_reads, chosen); break;
    case MG_CKPT_BUDGET: { /* policy_budget.c's search chose the set */
        const mg_budget_point *bp = (const mg_budget_point *)m;
        for (int32_t t = 0; bp && bp->keep_set && t < g->n; t++)
            chosen[t] = bp->keep_set[t];
        break;
    }
    case MG_CKPT_MEMORY:
        s = choose_memory(g, c, m, order, n_order, forward, is_y, is_ap,
                          chosen, keep);
        break;
    default:
        return mg_set_error(MG_ERR_INTERNAL, "mg_gradients: policy '%s'",
                            mg_ckpt_policy_name(policy));
    }
    for (int32_t t = 0; t < g->n; t++) {
        chosen[t] = chosen[t] && forward[t] && !is_y[t];
        keep[t] = keep[t] || chosen[t];
    }
    return s;
}
