/*
 * checkmate_milp.c - Checkmate's rematerialization MILP (Jain et al.,
 * MLSys 2020) over memgrad's training DAG, built with GLPK's API and solved
 * with GLPK or, where CMake found it, COIN-OR CBC; the memory
 * model it shares with memgrad's plans; small training graphs. See
 * checkmate_milp.h for the DAG and the memory model.
 *
 * The MILP, over ops v_0..v_{n-1} in topological order, stage t
 * computing v_t for the first time:
 *
 *   R[t,i]  binary, i <= t: stage t evaluates v_i; R[t,t] = 1. Backward
 *           ops are not variables off the diagonal (memgrad's rewriter
 *           recomputes forward ops only) unless recompute_backward.
 *   S[t,i]  binary, i < t: v_i's output is held from stage t-1 into t.
 *   FREE[t,i,k]  binary, for k evaluated in stage t and i in
 *           DEPS[k] u {k} with bytes > 0: v_i's output is freed right
 *           after v_k in stage t. FREE = R[t,k] (1 - S[t+1,i])
 *           prod_{j in USERS[i], k < j <= t} (1 - R[t,j]), linearized as
 *           FREE <= R[t,k], FREE <= 1 - S[t+1,i], FREE <= 1 - R[t,j] for
 *           each such j (one row each: the same integer points as the
 *           paper's aggregated num_hazards row, a tighter relaxation), and
 *           FREE >= R[t,k] - S[t+1,i] - sum_j R[t,j] (frees as soon as it
 *           can, as the paper's 1 - FREE <= num_hazards).
 *   U[t,k]  continuous in [0, budget]: bytes in use after v_k in stage t,
 *           U[t,0] = sum_i M_i S[t,i] + M_0 R[t,0],
 *           U[t,k] = U[t,k-1] - sum_i M_i FREE[t,i,k-1] + M_k R[t,k];
 *           and U[t,k] + W_k R[t,k] <= budget for the workspace W_k
 *           (memgrad's pool lends it after the output; the paper has no
 *           workspace).
 *   R[t,j] <= R[t,i] + S[t,i]    for each edge i -> j, j <= t
 *   Z[t,j]  binary, for the ops with a pack/whole pair of inputs
 *           (checkmate_milp.h, "Compact inputs"): Z[t,j] <= R[t,j], 1 when
 *           the evaluation reads the whole sources. Wherever R[t,j] stands
 *           for "v_j reads v_i" above (dependencies, and the FREE rows of
 *           v_i at v_j), it becomes X[t,j]: R[t,j] for an input read
 *           always, R[t,j] - Z[t,j] for a pack, Z[t,j] for a whole source.
 *   S[t+1,i] <= S[t,i] + R[t,i]
 *   minimise sum_{t, i < t} cost_i R[t,i]  (the recomputed flops)
 *
 * Bytes are scaled by the largest output and flops by the largest cost
 * before GLPK sees them.
 */
#include "checkmate_milp.h"

#include "memgrad_observe.h"

#include <float.h>
#include <glpk.h>
#include <math.h>
#ifdef MG_HAVE_CBC
#include <Cbc_C_Interface.h>
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ errors */

static char ckm_err[512];

const char *mgi_ckm_last_error(void) { return ckm_err; }

static mg_status ckm_fail(mg_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ckm_err, sizeof ckm_err, fmt, ap);
    va_end(ap);
    return s;
}

/* a memgrad call failed: keep its message */
static mg_status ckm_mg(mg_status s, const char *what) {
    return ckm_fail(s, "%s: %s", what, mg_last_error());
}

/* ------------------------------------------------------------------ dag */

void mgi_ckm_dag_free(mgi_ckm_dag *d) {
    if (!d) return;
    free(d->cost);
    free(d->mem);
    free(d->work);
    free(d->backward);
    free(d->in_start);
    free(d->in);
    free(d->in_form);
    free(d->tensor);
    memset(d, 0, sizeof *d);
}

static mg_tensor ckm_source(const mg_graph *g, mg_tensor t) {
    while (mg_tensor_is_recompute(g, t)) t = mg_tensor_recompute_source(g, t);
    return t;
}

/* Peak of p's steps in their own order under the memory model. */
static double ckm_order_peak(const mg_graph *g, const mg_step_info *st, int ns,
                             const int *stepof, const bool *bound) {
    const int32_t nt = mg_graph_num_tensors(g);
    int *last = malloc((size_t)nt * sizeof *last);
    double *freed = calloc((size_t)ns + 1, sizeof *freed);
    double peak = -1;
    if (last && freed) {
        for (int32_t t = 0; t < nt; t++) last[t] = -1;
        for (int s = 0; s < ns; s++)
            for (int k = 0; k < mg_tensor_num_inputs(g, st[s].tensor); k++) {
                mg_tensor in = mg_tensor_input(g, st[s].tensor, k);
                if (stepof[in] >= 0) last[in] = s;
            }
        double in_use = 0;
        peak = 0;
        for (int s = 0; s < ns; s++) {
            mg_tensor t = st[s].tensor;
            double b = bound[t]
                           ? 0
                           : (double)mg_pool_size_class(mg_tensor_nbytes(g, t));
            in_use += b;
            if (in_use + (double)st[s].workspace_bytes > peak)
                peak = in_use + (double)st[s].workspace_bytes;
            freed[last[t] < 0 ? s : last[t]] += b;
            in_use -= freed[s];
        }
    }
    free(last);
    free(freed);
    return peak;
}

mg_status mgi_ckm_dag_from_plan(const mg_graph *g, const mg_plan *p,
                                const mg_binding *binds, int n_binds,
                                mgi_ckm_dag *d, unsigned char **R_out,
                                double *order_peak) {
    memset(d, 0, sizeof *d);
    if (R_out) *R_out = NULL;
    if (!g || !p)
        return ckm_fail(MG_ERR_INVALID_ARG, "dag: NULL graph or plan");
    const int ns = mg_plan_num_steps(p);
    const int32_t nt = mg_graph_num_tensors(g);
    mg_step_info *st = malloc((size_t)(ns ? ns : 1) * sizeof *st);
    int *idx = malloc((size_t)nt * sizeof *idx);
    int *stepof = malloc((size_t)nt * sizeof *stepof);
    bool *bound = calloc((size_t)nt, sizeof *bound);
    int *pending = malloc((size_t)(ns ? ns : 1) * sizeof *pending);
    unsigned char *R = NULL;
    mg_status s = MG_OK;
    if (!st || !idx || !stepof || !bound || !pending)
        s = ckm_fail(MG_ERR_NOMEM, "dag: out of memory");
    if (s == MG_OK && mg_plan_timeline(p, binds, n_binds, st, ns) != ns)
        s = ckm_mg(mg_last_status(), "mg_plan_timeline");
    int n = 0, n_edges = 0;
    if (s == MG_OK) {
        for (int32_t t = 0; t < nt; t++) idx[t] = stepof[t] = -1;
        for (int i = 0; i < n_binds; i++)
            if (binds[i].tensor >= 0 && binds[i].tensor < nt)
                bound[binds[i].tensor] = true;
        for (int k = 0; k < ns; k++) {
            stepof[st[k].tensor] = k;
            if (!mg_tensor_is_recompute(g, st[k].tensor)) {
                n++;
                n_edges += mg_tensor_num_inputs(g, st[k].tensor);
            }
        }
        d->n = n;
        d->cost = calloc((size_t)(n ? n : 1), sizeof *d->cost);
        d->mem = calloc((size_t)(n ? n : 1), sizeof *d->mem);
        d->work = calloc((size_t)(n ? n : 1), sizeof *d->work);
        d->backward = calloc((size_t)(n ? n : 1), sizeof *d->backward);
        d->in_start = calloc((size_t)n + 1, sizeof *d->in_start);
        /* a pack's input may add one more edge (its whole source) */
        d->in = calloc((size_t)(2 * n_edges + 1), sizeof *d->in);
        d->in_form = calloc((size_t)(2 * n_edges + 1), sizeof *d->in_form);
        d->tensor = calloc((size_t)(n ? n : 1), sizeof *d->tensor);
        R = calloc((size_t)(n ? n : 1) * (size_t)(n ? n : 1), 1);
        if (!d->cost || !d->mem || !d->work || !d->backward || !d->in_start ||
            !d->in || !d->in_form || !d->tensor || !R)
            s = ckm_fail(MG_ERR_NOMEM, "dag: out of memory");
    }
    int j = 0, n_pending = 0, e = 0;
    for (int k = 0; s == MG_OK && k < ns; k++) {
        const mg_tensor t = st[k].tensor;
        if (mg_tensor_is_recompute(g, t)) {
            mg_tensor src = ckm_source(g, t);
            if (idx[src] < 0) {
                s = ckm_fail(MG_ERR_INVALID_ARG,
                             "dag: step %d recomputes "
                             "%%%d before its source %%%d is computed",
                             k, (int)t, (int)src);
                break;
            }
            idx[t] = idx[src];
            pending[n_pending++] = idx[src];
            continue;
        }
        idx[t] = j;
        d->tensor[j] = t;
        d->cost[j] = st[k].flops;
        d->mem[j] =
            bound[t] ? 0 : (double)mg_pool_size_class(mg_tensor_nbytes(g, t));
        d->work[j] = (double)st[k].workspace_bytes;
        d->backward[j] = mg_tensor_is_backward(g, t) != 0;
        if (!d->backward[j]) d->forward_flops += d->cost[j];
        d->in_start[j] = e;
        bool alt = false;
        for (int q = 0; s == MG_OK && q < mg_tensor_num_inputs(g, t); q++) {
            mg_tensor in = mg_tensor_input(g, t, q);
            if (in < 0 || in >= nt || stepof[in] < 0) continue; /* a leaf */
            /* a pack read by a backward op: its whole source (when
             * computed) is the alternative, form 2 */
            mg_tensor whole = MG_NO_TENSOR;
            if (mg_tensor_is_pack(g, in) && mg_tensor_is_backward(g, t)) {
                whole = ckm_source(g, mg_tensor_input(g, in, 0));
                if (whole < 0 || whole >= nt || stepof[whole] < 0)
                    whole = MG_NO_TENSOR;
            }
            for (int side = 0; side < (whole == MG_NO_TENSOR ? 1 : 2); side++) {
                const mg_tensor u = side ? whole : in;
                const unsigned char form =
                    whole == MG_NO_TENSOR ? 0 : (unsigned char)(side + 1);
                int i = idx[u];
                if (i < 0 || i >= j) {
                    s = ckm_fail(MG_ERR_INVALID_ARG,
                                 "dag: %%%d reads %%%d, "
                                 "which no earlier step computes",
                                 (int)t, (int)u);
                    break;
                }
                /* one edge per input: read always wins over one side */
                int r = d->in_start[j];
                while (r < e && d->in[r] != i) r++;
                if (r < e) {
                    if (d->in_form[r] != form) d->in_form[r] = 0;
                    continue;
                }
                d->in[e] = i;
                d->in_form[e++] = form;
            }
        }
        for (int r = d->in_start[j]; r < e; r++) alt |= d->in_form[r] == 2;
        d->n_alt += alt;
        R[(size_t)j * n + j] = 1;
        for (int q = 0; s == MG_OK && q < n_pending; q++) {
            unsigned char *r = &R[(size_t)j * n + pending[q]];
            if (*r)
                s = ckm_fail(MG_ERR_INVALID_ARG,
                             "dag: v_%d is recomputed "
                             "twice in stage %d",
                             pending[q], j);
            *r = 1;
        }
        n_pending = 0;
        j++;
    }
    if (s == MG_OK) {
        d->in_start[n] = e;
        if (n_pending)
            s = ckm_fail(MG_ERR_INVALID_ARG,
                         "dag: the plan ends with %d "
                         "recompute steps",
                         n_pending);
    }
    if (s == MG_OK && order_peak) {
        *order_peak = ckm_order_peak(g, st, ns, stepof, bound);
        if (*order_peak < 0) s = ckm_fail(MG_ERR_NOMEM, "dag: out of memory");
    }
    free(st);
    free(idx);
    free(stepof);
    free(bound);
    free(pending);
    if (s == MG_OK && R_out) *R_out = R;
    else free(R);
    if (s != MG_OK) mgi_ckm_dag_free(d);
    return s;
}

/* ------------------------------------------------------------------ schedules
 */

/* Whether v_j has a pack/whole pair of inputs (may take R = 2). */
static bool ckm_has_alt(const mgi_ckm_dag *d, int j) {
    for (int r = d->in_start[j]; r < d->in_start[j + 1]; r++)
        if (d->in_form && d->in_form[r] == 2) return true;
    return false;
}

/* Whether an evaluation of v_j with stage-form value how (1, 2) reads its
 * input edge r. */
static bool ckm_reads(const mgi_ckm_dag *d, int r, unsigned char how) {
    return !d->in_form || d->in_form[r] == 0 || d->in_form[r] == how;
}

mg_status mgi_ckm_evaluate(const mgi_ckm_dag *d, const unsigned char *R,
                           bool recompute_backward, mgi_ckm_eval *out) {
    const int n = d->n;
    memset(out, 0, sizeof *out);
    for (int t = 0; t < n; t++) {
        if (!R[(size_t)t * n + t])
            return ckm_fail(MG_ERR_INVALID_ARG,
                            "schedule: stage %d does "
                            "not evaluate v_%d",
                            t, t);
        for (int i = 0; i < n; i++) {
            if (R[(size_t)t * n + i] > 2 ||
                (R[(size_t)t * n + i] == 2 && !ckm_has_alt(d, i)))
                return ckm_fail(MG_ERR_INVALID_ARG,
                                "schedule: stage %d evaluates v_%d as %d, "
                                "which has no such form",
                                t, i, R[(size_t)t * n + i]);
            if (!R[(size_t)t * n + i] || i == t) continue;
            if (i > t)
                return ckm_fail(MG_ERR_INVALID_ARG,
                                "schedule: stage %d "
                                "evaluates v_%d, a later op",
                                t, i);
            if (d->backward[i] && !recompute_backward)
                return ckm_fail(MG_ERR_INVALID_ARG,
                                "schedule: stage %d "
                                "recomputes backward op v_%d",
                                t, i);
        }
    }
    size_t cap = (size_t)n * (size_t)(n + 1) / 2 + 1;
    int *seq = malloc(cap * sizeof *seq);
    int *inst_last = malloc(cap * sizeof *inst_last);
    int *latest = malloc((size_t)(n ? n : 1) * sizeof *latest);
    double *freed = calloc(cap, sizeof *freed);
    mg_status s = MG_OK;
    if (!seq || !inst_last || !latest || !freed)
        s = ckm_fail(MG_ERR_NOMEM, "schedule: out of memory");
    int len = 0;
    for (int i = 0; s == MG_OK && i < n; i++) latest[i] = -1;
    for (int t = 0; s == MG_OK && t < n; t++)
        for (int j = 0; s == MG_OK && j <= t; j++) {
            const unsigned char how = R[(size_t)t * n + j];
            if (!how) continue;
            for (int r = d->in_start[j]; r < d->in_start[j + 1]; r++) {
                const int i = d->in[r];
                if (!ckm_reads(d, r, how)) continue;
                if (latest[i] < 0) {
                    s = ckm_fail(MG_ERR_INVALID_ARG,
                                 "schedule: stage %d "
                                 "evaluates v_%d before its input v_%d",
                                 t, j, i);
                    break;
                }
                inst_last[latest[i]] = len;
            }
            if (j != t) {
                out->recompute_flops += d->cost[j];
                out->n_recompute++;
            }
            seq[len] = j;
            inst_last[len] = len;
            latest[j] = len++;
        }
    double in_use = 0;
    for (int k = 0; s == MG_OK && k < len; k++) {
        in_use += d->mem[seq[k]];
        if (in_use + d->work[seq[k]] > out->peak)
            out->peak = in_use + d->work[seq[k]];
        freed[inst_last[k]] += d->mem[seq[k]];
        in_use -= freed[k];
    }
    free(seq);
    free(inst_last);
    free(latest);
    free(freed);
    return s;
}

mg_status mgi_ckm_check_held(const mgi_ckm_dag *d, const unsigned char *R,
                             const unsigned char *S) {
    const int n = d->n;
    for (int t = 0; t < n; t++)
        for (int i = t; i < n; i++)
            if (S[(size_t)t * n + i])
                return ckm_fail(MG_ERR_INVALID_ARG,
                                "held: S[%d,%d] set on "
                                "or above the diagonal",
                                t, i);
    for (int t = 0; t + 1 < n; t++)
        for (int i = 0; i <= t; i++)
            if (S[(size_t)(t + 1) * n + i] && !S[(size_t)t * n + i] &&
                !R[(size_t)t * n + i])
                return ckm_fail(MG_ERR_INVALID_ARG,
                                "held: v_%d held into "
                                "stage %d but neither held into nor "
                                "evaluated in stage %d",
                                i, t + 1, t);
    for (int t = 0; t < n; t++)
        for (int j = 0; j <= t; j++) {
            const unsigned char how = R[(size_t)t * n + j];
            if (!how) continue;
            for (int r = d->in_start[j]; r < d->in_start[j + 1]; r++) {
                const int i = d->in[r];
                if (!ckm_reads(d, r, how)) continue;
                if (!R[(size_t)t * n + i] && !S[(size_t)t * n + i])
                    return ckm_fail(MG_ERR_INVALID_ARG,
                                    "held: stage %d "
                                    "evaluates v_%d but its input v_%d is "
                                    "neither evaluated before it nor held",
                                    t, j, i);
            }
        }
    return MG_OK;
}

/* ------------------------------------------------------------------ MILP */

const char *mgi_ckm_outcome_name(mgi_ckm_outcome o) {
    switch (o) {
    case MGI_CKM_OPTIMAL: return "optimal";
    case MGI_CKM_FEASIBLE: return "time_limit";
    case MGI_CKM_INFEASIBLE: return "infeasible";
    case MGI_CKM_NO_SOLUTION: return "no_solution";
    }
    return "?";
}

/* Everything the solve allocates, on the heap so that it survives a
 * longjmp out of GLPK (automatic variables changed after setjmp would
 * not). */
typedef struct ckm_build {
    glp_prob *lp;
    int *Rc, *Sc, *Uc; /* column of R[t,i], S[t,i], U[t,k]; 0: none */
    int *Zc;           /* Z[t,j]: v_j in stage t reads whole sources */
    int *ia, *ja;      /* the matrix as triplets, 1-based */
    double *ar;
    size_t nz, cap;
    bool oom;
    int *out_start, *out;    /* USERS, from DEPS */
    unsigned char *out_form; /* ... with the edge's in_form */
    int *fcol;               /* FREE columns of the previous op, */
    double *fmem;            /*   with their bytes */
    int n_free, n_free_prev;
    double bound; /* best node bound seen (scaled) */
    bool have_bound;
    long node_limit; /* 0: none */
    double cpu_end;  /* CPU-clock seconds at which to stop; 0: none */
    /* the FREE columns, for the start: FREE[t,i,k] read as form */
    struct ckm_free_meta {
        int col, t, i, k;
        unsigned char form;
    } * fm;
    size_t n_fm, cap_fm;
    const mgi_ckm_dag *d;
    const unsigned char *start; /* a schedule to start from, or NULL */
    double mscale;
    int start_tried; /* 0, then 1 accepted, -1 rejected */
} ckm_build;

static jmp_buf *ckm_jmp;
static char ckm_glpk_msg[256];

static void ckm_error_hook(void *info) {
    (void)info;
    longjmp(*ckm_jmp, 1);
}

/* GLPK's terminal output: kept (the last line) for an error message,
 * never printed. */
static int ckm_term_hook(void *info, const char *s) {
    (void)info;
    size_t l = strlen(ckm_glpk_msg);
    if (l + strlen(s) >= sizeof ckm_glpk_msg) l = 0;
    snprintf(ckm_glpk_msg + l, sizeof ckm_glpk_msg - l, "%s", s);
    return 1;
}

static void nz_add(ckm_build *b, int row, int col, double v) {
    if (b->oom || col == 0 || v == 0) return;
    if (b->nz + 1 >= b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        int *ia = realloc(b->ia, cap * sizeof *ia);
        if (ia) b->ia = ia;
        int *ja = realloc(b->ja, cap * sizeof *ja);
        if (ja) b->ja = ja;
        double *ar = realloc(b->ar, cap * sizeof *ar);
        if (ar) b->ar = ar;
        if (!ia || !ja || !ar) {
            b->oom = true;
            return;
        }
        b->cap = cap;
    }
    b->nz++; /* index 0 unused, as glp_load_matrix wants */
    b->ia[b->nz] = row;
    b->ja[b->nz] = col;
    b->ar[b->nz] = v;
}

static int row_new(glp_prob *lp, int type, double lb, double ub) {
    int r = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, r, type, lb, ub);
    return r;
}

static int col_new(glp_prob *lp, int kind, double lb, double ub, double c) {
    int j = glp_add_cols(lp, 1);
    if (kind == GLP_BV) {
        glp_set_col_kind(lp, j, GLP_BV);
        if (lb == ub) glp_set_col_bnds(lp, j, GLP_FX, lb, ub);
    } else {
        glp_set_col_bnds(lp, j, lb == ub ? GLP_FX : GLP_DB, lb, ub);
    }
    glp_set_obj_coef(lp, j, c);
    return j;
}

static int ckm_start(glp_tree *T, ckm_build *b);
static double *ckm_start_x(const ckm_build *b, int ncols);

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void ckm_callback(glp_tree *T, void *info) {
    ckm_build *b = info;
    if (b->start && !b->start_tried && glp_ios_reason(T) == GLP_IHEUR)
        b->start_tried = ckm_start(T, b);
    if (b->node_limit > 0) {
        int active, total, generated;
        glp_ios_tree_size(T, &active, &total, &generated);
        if (generated > b->node_limit) glp_ios_terminate(T);
    }
    if (b->cpu_end > 0 && cpu_s() > b->cpu_end) glp_ios_terminate(T);
    int node = glp_ios_best_node(T);
    if (node) {
        double v = glp_ios_node_bound(T, node);
        if (!b->have_bound || v > b->bound) b->bound = v;
        b->have_bound = true;
    }
}

/* Add coef * X to row, X the indicator that stage t's evaluation of v_j
 * reads an input of form f: R[t,j] (0), R[t,j] - Z[t,j] (1), Z[t,j] (2).
 * Without a Z column (no pair of inputs) Z is 0. */
static void x_add(ckm_build *b, int row, int n, int t, int j, unsigned char f,
                  double coef) {
    const size_t q = (size_t)t * n + j;
    if (f != 2) nz_add(b, row, b->Rc[q], coef);
    if (f != 0) nz_add(b, row, b->Zc[q], f == 2 ? coef : -coef);
}

/* Add the FREE variables of v_k in stage t and their rows; the previous
 * op's are kept in fcol/fmem for U[t,k+1]'s row. */
static void add_free(ckm_build *b, const mgi_ckm_dag *d, double mscale, int t,
                     int k) {
    const int n = d->n;
    glp_prob *lp = b->lp;
    b->n_free = 0;
    for (int r = d->in_start[k]; r <= d->in_start[k + 1]; r++) {
        const int i = r < d->in_start[k + 1] ? d->in[r] : k;
        const unsigned char fk =
            r < d->in_start[k + 1] && d->in_form ? d->in_form[r] : 0;
        if (d->mem[i] <= 0) continue;
        int f = col_new(lp, GLP_BV, 0, 1, 0);
        if (b->n_fm == b->cap_fm) {
            size_t cap = b->cap_fm ? 2 * b->cap_fm : 1024;
            void *m = realloc(b->fm, cap * sizeof *b->fm);
            if (!m) b->oom = true;
            else {
                b->fm = m;
                b->cap_fm = cap;
            }
        }
        if (b->n_fm < b->cap_fm)
            b->fm[b->n_fm++] = (struct ckm_free_meta){f, t, i, k, fk};
        b->fcol[b->n_free] = f;
        b->fmem[b->n_free++] = d->mem[i] / mscale;
        /* FREE <= X[t,k]: v_k read v_i (R[t,k] without pairs of inputs) */
        int row = row_new(lp, GLP_UP, 0, 0);
        nz_add(b, row, f, 1);
        x_add(b, row, n, t, k, fk, -1);
        /* FREE >= X[t,k] - S[t+1,i] - sum_j X[t,j] */
        int low = row_new(lp, GLP_LO, 0, 0);
        nz_add(b, low, f, 1);
        x_add(b, low, n, t, k, fk, -1);
        if (t + 1 < n) { /* FREE <= 1 - S[t+1,i] */
            const int sc = b->Sc[(size_t)(t + 1) * n + i];
            row = row_new(lp, GLP_UP, 0, 1);
            nz_add(b, row, f, 1);
            nz_add(b, row, sc, 1);
            nz_add(b, low, sc, 1);
        }
        for (int q = b->out_start[i]; q < b->out_start[i + 1]; q++) {
            const int u = b->out[q];
            const int ru = u <= t ? b->Rc[(size_t)t * n + u] : 0;
            if (u <= k || !ru) continue;
            row = row_new(lp, GLP_UP, 0, 1); /* FREE <= 1 - X[t,u] */
            nz_add(b, row, f, 1);
            x_add(b, row, n, t, u, b->out_form[q], 1);
            x_add(b, low, n, t, u, b->out_form[q], 1);
        }
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* X of stage t's evaluation of v_j for an input of form f, from a
 * stage-form schedule R (x_add's indicator, as a number). */
static int x_of(const unsigned char *R, int n, int t, int j, unsigned char f) {
    const unsigned char v = R[(size_t)t * n + j];
    return f == 0 ? v != 0 : v == f;
}

/* Offer GLPK a schedule (b->start, stage form) as an integer solution:
 * every column's value derived as the MILP's rows determine it (S the
 * least holding the schedule needs, each FREE by its product, the U chain).
 * GLPK checks it against every row and bound. 1: taken; 2: not offered,
 * GLPK's incumbent already as good; -1: refused (it breaks a row: a bug
 * here or a schedule over the budget). */
static int ckm_start(glp_tree *T, ckm_build *b) {
    glp_prob *lp = glp_ios_get_prob(T);
    const int ncols = glp_get_num_cols(lp);
    double *x = ckm_start_x(b, ncols);
    if (!x) return -1;
    double obj = 0;
    for (int j = 1; j <= ncols; j++) obj += glp_get_obj_coef(lp, j) * x[j];
    const int st = glp_mip_status(lp);
    int rc;
    if ((st == GLP_FEAS || st == GLP_OPT) &&
        glp_mip_obj_val(lp) <= obj + 1e-9 * (1 + fabs(obj)))
        rc = 2;
    else rc = glp_ios_heur_sol(T, x) == 0 ? 1 : -1;
    free(x);
    return rc;
}

/* Every column's value (1-based, ncols + 1 entries, caller frees) for the
 * schedule b->start, as the MILP's rows determine it: S the least holding
 * the schedule needs, each FREE by its product, the U chain. NULL when
 * out of memory. */
static double *ckm_start_x(const ckm_build *b, int ncols) {
    const mgi_ckm_dag *d = b->d;
    const unsigned char *R = b->start;
    const int n = d->n;
    double *x = calloc((size_t)ncols + 1, sizeof *x);
    unsigned char *S = calloc((size_t)n * (size_t)n, 1);
    double *freed = calloc((size_t)n * (size_t)n, sizeof *freed);
    if (!x || !S || !freed) {
        free(x);
        free(S);
        free(freed);
        return NULL;
    }
    /* S[t,i]: read in stage t before any evaluation there, or held on */
    for (int t = n - 1; t >= 1; t--)
        for (int i = 0; i < t; i++) {
            if (R[(size_t)t * n + i]) continue;
            bool need = t + 1 < n && S[(size_t)(t + 1) * n + i];
            for (int j = i + 1; !need && j <= t; j++)
                for (int r = d->in_start[j]; r < d->in_start[j + 1]; r++)
                    if (d->in[r] == i &&
                        x_of(R, n, t, j, d->in_form ? d->in_form[r] : 0)) {
                        need = true;
                        break;
                    }
            S[(size_t)t * n + i] = need;
        }
    for (size_t q = 0; q < (size_t)n * (size_t)n; q++) {
        if (b->Rc[q]) x[b->Rc[q]] = R[q] != 0;
        if (b->Zc[q]) x[b->Zc[q]] = R[q] == 2;
        if (b->Sc[q]) x[b->Sc[q]] = S[q];
    }
    for (size_t m = 0; m < b->n_fm; m++) {
        const struct ckm_free_meta *f = &b->fm[m];
        int v = f->i == f->k ? R[(size_t)f->t * n + f->k] != 0
                             : x_of(R, n, f->t, f->k, f->form);
        if (f->t + 1 < n && S[(size_t)(f->t + 1) * n + f->i]) v = 0;
        for (int q = b->out_start[f->i]; v && q < b->out_start[f->i + 1]; q++) {
            const int u = b->out[q];
            if (u > f->k && u <= f->t && x_of(R, n, f->t, u, b->out_form[q]))
                v = 0;
        }
        x[f->col] = v;
        if (v) freed[(size_t)f->t * n + f->k] += d->mem[f->i] / b->mscale;
    }
    for (int t = 0; t < n; t++) {
        double u = 0;
        for (int i = 0; i < t; i++)
            u += S[(size_t)t * n + i] * d->mem[i] / b->mscale;
        for (int k = 0; k <= t; k++) {
            if (k > 0) u -= freed[(size_t)t * n + k - 1];
            u += (R[(size_t)t * n + k] != 0) * d->mem[k] / b->mscale;
            if (b->Uc[(size_t)t * n + k]) x[b->Uc[(size_t)t * n + k]] = u;
        }
    }
    free(S);
    free(freed);
    return x;
}

static void build_free(ckm_build *b) {
    free(b->Rc);
    free(b->Sc);
    free(b->Uc);
    free(b->Zc);
    free(b->out_form);
    free(b->ia);
    free(b->ja);
    free(b->ar);
    free(b->out_start);
    free(b->out);
    free(b->fcol);
    free(b->fmem);
    free(b->fm);
    free(b);
}

#ifdef MG_HAVE_CBC
/* Whether x (1-based) meets every row and column bound of lp, to a
 * tolerance relative to the row's size: what CBC is offered as a start
 * must be a feasible point, as GLPK checks its own. */
static bool ckm_x_feasible(glp_prob *lp, const double *x,
                           const CoinBigIndex *cstart, const int *index,
                           const double *value) {
    const int nc = glp_get_num_cols(lp), nr = glp_get_num_rows(lp);
    double *act = calloc((size_t)nr, sizeof *act);
    if (!act) return false;
    bool ok = true;
    for (int j = 1; j <= nc; j++) {
        if (x[j] < glp_get_col_lb(lp, j) - 1e-9 ||
            (glp_get_col_type(lp, j) != GLP_LO &&
             x[j] > glp_get_col_ub(lp, j) + 1e-9))
            ok = false;
        for (CoinBigIndex q = cstart[j - 1]; q < cstart[j]; q++)
            act[index[q]] += value[q] * x[j];
    }
    for (int i = 1; ok && i <= nr; i++) {
        const int type = glp_get_row_type(lp, i);
        const double a = act[i - 1];
        if ((type == GLP_LO || type == GLP_DB || type == GLP_FX) &&
            a < glp_get_row_lb(lp, i) - 1e-9)
            ok = false;
        if ((type == GLP_UP || type == GLP_DB || type == GLP_FX) &&
            a > glp_get_row_ub(lp, i) + 1e-9)
            ok = false;
    }
    free(act);
    return ok;
}

/* Solve the problem built in lp with COIN-OR CBC instead of GLPK (lp
 * stays the one description of the MILP; CBC gets a copy in its column
 * form). On MG_OK r's outcome, seconds, start_used and, through b, the
 * bound are set, and *xout holds the best schedule's columns (1-based)
 * when there is one. */
static mg_status ckm_solve_cbc(ckm_build *b, glp_prob *lp,
                               const mgi_ckm_options *o, mgi_ckm_result *r,
                               double **xout) {
    const int nc = glp_get_num_cols(lp), nr = glp_get_num_rows(lp);
    const size_t nz = (size_t)glp_get_num_nz(lp);
    CoinBigIndex *cstart = malloc(((size_t)nc + 1) * sizeof *cstart);
    int *index = malloc((nz + 1) * sizeof *index);
    double *value = malloc((nz + 1) * sizeof *value);
    double *collb = malloc(((size_t)nc + 1) * sizeof *collb);
    double *colub = malloc(((size_t)nc + 1) * sizeof *colub);
    double *obj = malloc(((size_t)nc + 1) * sizeof *obj);
    double *rowlb = malloc(((size_t)nr + 1) * sizeof *rowlb);
    double *rowub = malloc(((size_t)nr + 1) * sizeof *rowub);
    int *ind = malloc(((size_t)nr + 1) * sizeof *ind);
    double *val = malloc(((size_t)nr + 1) * sizeof *val);
    int *all = malloc(((size_t)nc + 1) * sizeof *all);
    double *x0 = NULL;
    Cbc_Model *m = NULL;
    mg_status s = MG_OK;
    if (!cstart || !index || !value || !collb || !colub || !obj || !rowlb ||
        !rowub || !ind || !val || !all) {
        s = ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
        goto done;
    }
    size_t k = 0;
    cstart[0] = 0;
    for (int j = 1; j <= nc; j++) {
        const int len = glp_get_mat_col(lp, j, ind, val);
        for (int q = 1; q <= len; q++, k++) {
            index[k] = ind[q] - 1;
            value[k] = val[q];
        }
        cstart[j] = (CoinBigIndex)k;
        const int type = glp_get_col_type(lp, j);
        collb[j - 1] =
            type == GLP_FR || type == GLP_UP ? -DBL_MAX : glp_get_col_lb(lp, j);
        colub[j - 1] =
            type == GLP_FR || type == GLP_LO ? DBL_MAX : glp_get_col_ub(lp, j);
        obj[j - 1] = glp_get_obj_coef(lp, j);
        all[j - 1] = j - 1;
    }
    for (int i = 1; i <= nr; i++) {
        const int type = glp_get_row_type(lp, i);
        rowlb[i - 1] =
            type == GLP_FR || type == GLP_UP ? -DBL_MAX : glp_get_row_lb(lp, i);
        rowub[i - 1] =
            type == GLP_FR || type == GLP_LO ? DBL_MAX : glp_get_row_ub(lp, i);
    }
    m = Cbc_newModel();
    if (!m) {
        s = ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
        goto done;
    }
    Cbc_loadProblem(m, nc, nr, cstart, index, value, collb, colub, obj, rowlb,
                    rowub);
    for (int j = 1; j <= nc; j++)
        if (glp_get_col_kind(lp, j) != GLP_CV) Cbc_setInteger(m, j - 1);
    Cbc_setObjSense(m, 1);
    Cbc_setLogLevel(m, 0);
    Cbc_setParameter(m, "log", "0");
    Cbc_setParameter(m, "slog", "0");
    /* the optimum proven, not within CBC's default relative gap */
    Cbc_setParameter(m, "ratioGap", "0");
    Cbc_setParameter(m, "allowableGap", "1e-9");
    char num[64];
    if (o->cpu_limit_s > 0) {
        Cbc_setParameter(m, "timeMode", "cpu");
        snprintf(num, sizeof num, "%.3f", o->cpu_limit_s);
        Cbc_setParameter(m, "sec", num);
    } else if (o->time_limit_s > 0) {
        Cbc_setParameter(m, "timeMode", "elapsed");
        snprintf(num, sizeof num, "%.3f", o->time_limit_s);
        Cbc_setParameter(m, "sec", num);
    }
    if (o->node_limit > 0) {
        snprintf(num, sizeof num, "%ld", o->node_limit);
        Cbc_setParameter(m, "maxNodes", num);
    }
    if (o->threads > 1) {
        snprintf(num, sizeof num, "%d", o->threads);
        Cbc_setParameter(m, "threads", num);
    }
    if (b->start) {
        x0 = ckm_start_x(b, nc);
        if (!x0) {
            s = ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
            goto done;
        }
        if (ckm_x_feasible(lp, x0, cstart, index, value)) {
            Cbc_setMIPStartI(m, nc, all, x0 + 1);
            r->start_used = 1;
        } else {
            r->start_used = -1;
        }
    }
    const double t0 = now_s();
    Cbc_solve(m);
    r->seconds = now_s() - t0;
    const double *best = Cbc_bestSolution(m);
    if (Cbc_status(m) == 2 || Cbc_isAbandoned(m)) {
        s = ckm_fail(MG_ERR_INTERNAL, "milp: CBC abandoned the solve");
        goto done;
    }
    if (Cbc_isProvenInfeasible(m) && !best) r->outcome = MGI_CKM_INFEASIBLE;
    else if (Cbc_isProvenOptimal(m) && best) r->outcome = MGI_CKM_OPTIMAL;
    else if (best) r->outcome = MGI_CKM_FEASIBLE;
    else r->outcome = MGI_CKM_NO_SOLUTION;
    b->bound = Cbc_getBestPossibleObjValue(m);
    b->have_bound = isfinite(b->bound) && fabs(b->bound) < 1e30;
    if (best) {
        double *x = malloc(((size_t)nc + 1) * sizeof *x);
        if (!x) {
            s = ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
            goto done;
        }
        x[0] = 0;
        memcpy(x + 1, best, (size_t)nc * sizeof *x);
        *xout = x;
    }
done:
    if (m) Cbc_deleteModel(m);
    free(x0);
    free(cstart);
    free(index);
    free(value);
    free(collb);
    free(colub);
    free(obj);
    free(rowlb);
    free(rowub);
    free(ind);
    free(val);
    free(all);
    return s;
}
#else
static mg_status ckm_solve_cbc(ckm_build *b, glp_prob *lp,
                               const mgi_ckm_options *o, mgi_ckm_result *r,
                               double **xout) {
    (void)b, (void)lp, (void)o, (void)r, (void)xout;
    return ckm_fail(MG_ERR_UNSUPPORTED,
                    "milp: built without CBC (coinor-libcbc-dev)");
}
#endif

mg_status mgi_ckm_solve(const mgi_ckm_dag *d, double budget,
                        const mgi_ckm_options *o, mgi_ckm_result *r) {
    memset(r, 0, sizeof *r);
    const int n = d->n;
    if (n < 1) return ckm_fail(MG_ERR_INVALID_ARG, "milp: empty DAG");
    if (!(budget >= 0))
        return ckm_fail(MG_ERR_INVALID_ARG, "milp: budget %g", budget);
    const bool rb = o && o->recompute_backward;
    const size_t nn = (size_t)n * (size_t)n;
    ckm_build *b = calloc(1, sizeof *b);
    if (!b) return ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
    const int max_deps = d->in_start[n] + n + 1;
    b->Rc = calloc(nn, sizeof *b->Rc);
    b->Sc = calloc(nn, sizeof *b->Sc);
    b->Uc = calloc(nn, sizeof *b->Uc);
    b->Zc = calloc(nn, sizeof *b->Zc);
    b->out_form = calloc((size_t)max_deps, sizeof *b->out_form);
    b->out_start = calloc((size_t)n + 1, sizeof *b->out_start);
    b->out = calloc((size_t)max_deps, sizeof *b->out);
    b->fcol = calloc((size_t)max_deps, sizeof *b->fcol);
    b->fmem = calloc((size_t)max_deps, sizeof *b->fmem);
    r->R = calloc(nn, 1);
    r->S = calloc(nn, 1);
    if (!b->Rc || !b->Sc || !b->Uc || !b->Zc || !b->out_start || !b->out ||
        !b->out_form || !b->fcol || !b->fmem || !r->R || !r->S) {
        build_free(b);
        free(r->R);
        free(r->S);
        memset(r, 0, sizeof *r);
        return ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
    }
    /* USERS[i] from DEPS[j] */
    for (int j = 0; j < n; j++)
        for (int q = d->in_start[j]; q < d->in_start[j + 1]; q++)
            b->out_start[d->in[q] + 1]++;
    for (int i = 0; i < n; i++) b->out_start[i + 1] += b->out_start[i];
    {
        int *fill = b->fcol; /* scratch until the build */
        memcpy(fill, b->out_start, (size_t)n * sizeof *fill);
        for (int j = 0; j < n; j++)
            for (int q = d->in_start[j]; q < d->in_start[j + 1]; q++) {
                b->out_form[fill[d->in[q]]] = d->in_form ? d->in_form[q] : 0;
                b->out[fill[d->in[q]]++] = j;
            }
    }
    double mscale = 0, cscale = 0;
    for (int i = 0; i < n; i++) {
        if (d->mem[i] > mscale) mscale = d->mem[i];
        if (d->work[i] > mscale) mscale = d->work[i];
        if (d->cost[i] > cscale) cscale = d->cost[i];
    }
    if (mscale <= 0) mscale = 1;
    if (cscale <= 0) cscale = 1;
    /* the budget, scaled, admitting round-off at exact equality */
    const double cap = budget / mscale * (1 + 1e-9) + 1e-9;

    jmp_buf jb;
    ckm_jmp = &jb;
    ckm_glpk_msg[0] = 0;
    glp_term_hook(ckm_term_hook, NULL);
    glp_error_hook(ckm_error_hook, NULL);
    if (setjmp(jb)) {
        /* GLPK failed and its environment is unusable: drop all of it */
        glp_free_env();
        build_free(b);
        free(r->R);
        free(r->S);
        memset(r, 0, sizeof *r);
        return ckm_fail(MG_ERR_INTERNAL, "milp: GLPK error: %s", ckm_glpk_msg);
    }
    glp_prob *lp = b->lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    /* columns: R, S, U (FREE comes stage by stage below) */
    for (int t = 0; t < n; t++)
        for (int i = 0; i <= t; i++) {
            if (i == t) b->Rc[(size_t)t * n + i] = col_new(lp, GLP_BV, 1, 1, 0);
            else if (!d->backward[i] || rb)
                b->Rc[(size_t)t * n + i] =
                    col_new(lp, GLP_BV, 0, 1, d->cost[i] / cscale);
            if (i < t) b->Sc[(size_t)t * n + i] = col_new(lp, GLP_BV, 0, 1, 0);
            b->Uc[(size_t)t * n + i] = col_new(lp, GLP_CV, 0, cap, 0);
        }
    /* Z[t,j] <= R[t,j] for the ops with a pair of inputs */
    for (int j = 0; j < n; j++) {
        if (!ckm_has_alt(d, j)) continue;
        for (int t = j; t < n; t++) {
            const size_t q = (size_t)t * n + j;
            if (!b->Rc[q]) continue;
            b->Zc[q] = col_new(lp, GLP_BV, 0, 1, 0);
            int row = row_new(lp, GLP_UP, 0, 0);
            nz_add(b, row, b->Zc[q], 1);
            nz_add(b, row, b->Rc[q], -1);
        }
    }
    for (int t = 0; t < n; t++) {
        /* dependencies: X[t,j] <= R[t,i] + S[t,i] (X: x_add) */
        for (int j = 0; j <= t; j++) {
            const int rj = b->Rc[(size_t)t * n + j];
            if (!rj) continue;
            for (int q = d->in_start[j]; q < d->in_start[j + 1]; q++) {
                const int i = d->in[q];
                int row = row_new(lp, GLP_UP, 0, 0);
                x_add(b, row, n, t, j, d->in_form ? d->in_form[q] : 0, 1);
                nz_add(b, row, b->Rc[(size_t)t * n + i], -1);
                nz_add(b, row, b->Sc[(size_t)t * n + i], -1);
            }
        }
        /* holding: S[t+1,i] <= S[t,i] + R[t,i] */
        for (int i = 0; t + 1 < n && i <= t; i++) {
            int row = row_new(lp, GLP_UP, 0, 0);
            nz_add(b, row, b->Sc[(size_t)(t + 1) * n + i], 1);
            nz_add(b, row, b->Sc[(size_t)t * n + i], -1);
            nz_add(b, row, b->Rc[(size_t)t * n + i], -1);
        }
        /* memory: the U chain, with the frees after each op */
        b->n_free = 0;
        for (int k = 0; k <= t; k++) {
            const int rk = b->Rc[(size_t)t * n + k];
            int row = row_new(lp, GLP_FX, 0, 0);
            nz_add(b, row, b->Uc[(size_t)t * n + k], 1);
            nz_add(b, row, rk, -d->mem[k] / mscale);
            if (k == 0) {
                for (int i = 0; i < t; i++)
                    nz_add(b, row, b->Sc[(size_t)t * n + i],
                           -d->mem[i] / mscale);
            } else {
                nz_add(b, row, b->Uc[(size_t)t * n + k - 1], -1);
                for (int f = 0; f < b->n_free; f++)
                    nz_add(b, row, b->fcol[f], b->fmem[f]);
            }
            b->n_free = 0;
            if (rk && d->work[k] > 0) { /* U[t,k] + W_k R[t,k] <= budget */
                row = row_new(lp, GLP_UP, 0, cap);
                nz_add(b, row, b->Uc[(size_t)t * n + k], 1);
                nz_add(b, row, rk, d->work[k] / mscale);
            }
            if (rk) add_free(b, d, mscale, t, k);
        }
    }
    if (b->oom) {
        glp_delete_prob(lp);
        glp_error_hook(NULL, NULL);
        glp_term_hook(NULL, NULL);
        build_free(b);
        free(r->R);
        free(r->S);
        memset(r, 0, sizeof *r);
        return ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
    }
    glp_load_matrix(lp, (int)b->nz, b->ia, b->ja, b->ar);
    r->n_rows = glp_get_num_rows(lp);
    r->n_cols = glp_get_num_cols(lp);
    r->n_binaries = glp_get_num_bin(lp);

    b->d = d;
    b->mscale = mscale;
    b->start = o ? o->start : NULL;
    double *x = NULL; /* the solution, 1-based as GLPK's columns */
    mg_status s = MG_OK;
    int ret = 0, lp_status = GLP_OPT;
    if (o && o->solver == MGI_CKM_CBC) {
        s = ckm_solve_cbc(b, lp, o, r, &x);
        goto decode;
    }
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.gmi_cuts = GLP_ON;
    parm.mir_cuts = GLP_ON;
    parm.cov_cuts = GLP_ON;
    parm.clq_cuts = GLP_ON;
    parm.mip_gap = 0;
    if (o && o->time_limit_s > 0)
        parm.tm_lim = o->time_limit_s * 1000 > 2e9
                          ? 2000000000
                          : (int)(o->time_limit_s * 1000);
    parm.cb_func = ckm_callback;
    parm.cb_info = b;
    b->node_limit = o ? o->node_limit : 0;
    const double t0 = now_s();
    if (o && o->cpu_limit_s > 0) b->cpu_end = cpu_s() + o->cpu_limit_s;
    if (b->start) {
        /* GLPK's callback sees the presolved problem, whose columns are
         * not ours: with a start, no presolve, and the LP relaxation
         * solved first (glp_intopt then needs its optimal basis) */
        parm.presolve = GLP_OFF;
        glp_smcp sm;
        glp_init_smcp(&sm);
        sm.msg_lev = GLP_MSG_OFF;
        if (o->time_limit_s > 0) sm.tm_lim = parm.tm_lim;
        ret = glp_simplex(lp, &sm);
        lp_status = glp_get_status(lp);
        if (ret == 0 && lp_status == GLP_OPT) ret = glp_intopt(lp, &parm);
        else if (ret == GLP_ETMLIM) lp_status = GLP_UNDEF;
    } else {
        ret = glp_intopt(lp, &parm);
    }
    r->seconds = now_s() - t0;
    r->start_used = b->start_tried;
    const int mip = glp_mip_status(lp);
    if (lp_status == GLP_UNDEF) {
        r->outcome = MGI_CKM_NO_SOLUTION; /* the LP ran out of time */
    } else if (lp_status == GLP_NOFEAS || ret == GLP_ENOPFS ||
               mip == GLP_NOFEAS) {
        r->outcome = MGI_CKM_INFEASIBLE;
    } else if (ret == 0 && mip == GLP_OPT) {
        r->outcome = MGI_CKM_OPTIMAL;
    } else if (ret == GLP_ETMLIM || ret == GLP_ESTOP) {
        r->outcome = mip == GLP_FEAS ? MGI_CKM_FEASIBLE : MGI_CKM_NO_SOLUTION;
    } else {
        s = ckm_fail(MG_ERR_INTERNAL,
                     "milp: glp_intopt returned %d (mip "
                     "status %d)",
                     ret, mip);
    }
    if (s == MG_OK &&
        (r->outcome == MGI_CKM_OPTIMAL || r->outcome == MGI_CKM_FEASIBLE)) {
        const int ncols = glp_get_num_cols(lp);
        x = malloc(((size_t)ncols + 1) * sizeof *x);
        if (!x) s = ckm_fail(MG_ERR_NOMEM, "milp: out of memory");
        for (int j = 1; x && j <= ncols; j++) x[j] = glp_mip_col_val(lp, j);
    }
decode:
    if (s == MG_OK && x &&
        (r->outcome == MGI_CKM_OPTIMAL || r->outcome == MGI_CKM_FEASIBLE)) {
        for (size_t q = 0; q < nn; q++) {
            if (b->Rc[q] && x[b->Rc[q]] > 0.5)
                r->R[q] = b->Zc[q] && x[b->Zc[q]] > 0.5 ? 2 : 1;
            if (b->Sc[q]) r->S[q] = x[b->Sc[q]] > 0.5;
            if (b->Uc[q]) {
                const int k = (int)(q % (size_t)n);
                /* R[t,k] was read above: q = t n + k */
                double u = x[b->Uc[q]] * mscale + (r->R[q] ? d->work[k] : 0);
                if (u > r->milp_peak) r->milp_peak = u;
            }
        }
        for (int t = 0; t < n; t++)
            for (int i = 0; i < t; i++)
                if (r->R[(size_t)t * n + i]) r->recompute_flops += d->cost[i];
    }
    if (r->outcome == MGI_CKM_OPTIMAL) {
        r->bound_flops = r->recompute_flops;
    } else if (r->outcome == MGI_CKM_FEASIBLE ||
               r->outcome == MGI_CKM_NO_SOLUTION) {
        double bd = b->have_bound ? b->bound * cscale : 0;
        if (bd < 0) bd = 0;
        if (r->outcome == MGI_CKM_FEASIBLE && bd > r->recompute_flops)
            bd = r->recompute_flops;
        r->bound_flops = bd;
    }
    free(x);
    glp_delete_prob(lp);
    glp_error_hook(NULL, NULL);
    glp_term_hook(NULL, NULL);
    build_free(b);
    if (s != MG_OK ||
        !(r->outcome == MGI_CKM_OPTIMAL || r->outcome == MGI_CKM_FEASIBLE)) {
        free(r->R);
        free(r->S);
        r->R = r->S = NULL;
    }
    return s;
}

/* ------------------------------------------------------------------ nets */

void mgi_ckm_net_free(mgi_ckm_net *net) {
    if (!net) return;
    if (net->model) mg_model_free(net->model);
    else mg_graph_free(net->g);
    memset(net, 0, sizeof *net);
}

mg_status mgi_ckm_net_chain(int layers, const int *widths, int batch,
                            const mg_checkpoints *c, mgi_ckm_net *net) {
    memset(net, 0, sizeof *net);
    if (layers < 1 || layers > 16 || !widths || batch < 1)
        return ckm_fail(MG_ERR_INVALID_ARG, "chain: %d layers, batch %d",
                        layers, batch);
    mg_graph *g = net->g = mg_graph_new();
    if (!g) return ckm_fail(MG_ERR_NOMEM, "chain: out of memory");
    mg_tensor x =
        mg_input(g, "x", MG_F32, 2, (const int64_t[]){batch, widths[0]});
    mg_tensor y = mg_input(g, "target", MG_F32, 2,
                           (const int64_t[]){batch, widths[layers]});
    net->leaves[net->n_leaves++] = x;
    net->leaves[net->n_leaves++] = y;
    mg_tensor h = x, w[16];
    for (int l = 0; l < layers; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        w[l] = mg_param(g, name, MG_F32, 2,
                        (const int64_t[]){widths[l], widths[l + 1]});
        net->leaves[net->n_leaves++] = w[l];
        h = mg_tanh(g, mg_matmul(g, h, w[l], 0, 0));
    }
    net->loss = mg_mse(g, h, y);
    mg_status s =
        net->loss == MG_NO_TENSOR
            ? ckm_mg(mg_last_status(), "chain")
            : mg_gradients(g, &net->loss, 1, NULL, w, layers, c, net->grads);
    if (s == MG_OK) net->n_grads = layers;
    else {
        if (net->loss != MG_NO_TENSOR) ckm_mg(s, "chain: mg_gradients");
        mgi_ckm_net_free(net);
    }
    return s;
}

mg_status mgi_ckm_net_model(mg_model *m, const mg_checkpoints *c,
                            mgi_ckm_net *net) {
    memset(net, 0, sizeof *net);
    if (!m)
        return ckm_mg(mg_last_status() != MG_OK ? mg_last_status()
                                                : MG_ERR_INVALID_ARG,
                      "model");
    net->model = m;
    net->g = m->g;
    if (m->n_params > MGI_CKM_MAX_PARAMS) {
        mgi_ckm_net_free(net);
        return ckm_fail(MG_ERR_INVALID_ARG, "model: %d parameters, at most %d",
                        m->n_params, MGI_CKM_MAX_PARAMS);
    }
    mg_status s = mg_model_gradients(m, c);
    if (s != MG_OK) {
        ckm_mg(s, "mg_model_gradients");
        mgi_ckm_net_free(net);
        return s;
    }
    net->loss = m->loss;
    net->leaves[net->n_leaves++] = m->input;
    net->leaves[net->n_leaves++] = m->target;
    for (int i = 0; i < m->n_params; i++) {
        net->leaves[net->n_leaves++] = m->params[i];
        net->grads[net->n_grads++] = m->grads[i];
    }
    return MG_OK;
}

void mgi_ckm_planned_free(mgi_ckm_planned *p) {
    mgi_ckm_dag_free(&p->dag);
    free(p->R);
    mg_plan_free(p->plan);
    mgi_ckm_net_free(&p->net);
    memset(p, 0, sizeof *p);
}

mg_status mgi_ckm_planned_finish(mg_status built, mgi_ckm_planned *p) {
    mg_status s = built;
    if (s == MG_OK)
        s = mgi_ckm_net_plan(&p->net, &p->plan, p->binds, &p->n_binds);
    if (s == MG_OK && (s = mg_plan_summarize(p->plan, p->binds, p->n_binds,
                                             &p->sum)) != MG_OK)
        s = ckm_mg(s, "mg_plan_summarize");
    if (s == MG_OK)
        s = mgi_ckm_dag_from_plan(p->net.g, p->plan, p->binds, p->n_binds,
                                  &p->dag, &p->R, &p->order_peak);
    if (s == MG_OK) s = mgi_ckm_evaluate(&p->dag, p->R, false, &p->eval);
    if (s != MG_OK) mgi_ckm_planned_free(p);
    return s;
}

mg_status mgi_ckm_net_plan(const mgi_ckm_net *net, mg_plan **p,
                           mg_binding *binds, int *n_binds) {
    /* nothing runs: every binding points at the same dummy buffer */
    static double dummy[8];
    mg_tensor outs[MGI_CKM_MAX_PARAMS + 1];
    int n = 0;
    for (int i = 0; i < net->n_grads; i++) outs[n++] = net->grads[i];
    outs[n++] = net->loss;
    /* unfused: the MILP's memory model has one op a step, as the budget
     * policy's search and its measure (mg_plan_summary.budget_peak) do */
    const mg_plan_options unfused = {.no_fusion = 1};
    mg_status s = mg_plan_compile(net->g, outs, n, &unfused, p);
    if (s != MG_OK) return ckm_mg(s, "mg_plan_compile");
    *n_binds = 0;
    for (int i = 0; i < net->n_leaves; i++)
        binds[(*n_binds)++] = (mg_binding){net->leaves[i], dummy};
    for (int i = 0; i < n; i++)
        binds[(*n_binds)++] = (mg_binding){outs[i], dummy};
    return MG_OK;
}
