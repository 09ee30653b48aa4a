/*
 * arena.c - addresses for a plan's buffers, chosen before it runs (issue
 * 28). Every buffer that lives and dies within one run (an intermediate,
 * a recomputed copy, a kernel's workspace) gets an offset into one arena,
 * so the executor allocates that arena once and a run takes nothing else
 * from the system: the arena's size is what the run reserves, known when
 * the plan is compiled, fragmentation included. Tensors that outlive the
 * run (outputs, retained tensors, a forward phase's saved state) stay out
 * of it: the caller may hold them as long as it likes, and a block held
 * from one run must not pin the memory the next run lays out.
 *
 * Lifetimes are measured on a clock of two ticks per step: step s's output
 * lives from 2s, its workspace during [2s+1, 2s+2), and a tensor released
 * after step s is free from 2s+2 on, when step s+1 allocates. So an
 * output never shares memory with an input of its own step, nor a
 * workspace with either.
 *
 * No one greedy order wins on every schedule, so a few are tried and the
 * smallest layout is kept, as TensorFlow Lite's arena planner and
 * ggml-alloc do in spirit: a sweep in schedule order with best fit among
 * the free gaps (linear in the steps, for plans of any size), and, for
 * plans small enough that a quadratic pass is cheap, greedy placements
 * (largest first, longest first, largest area first; TensorFlow Lite's
 * "by breadth": the busiest moments first), each into the tightest or the
 * lowest gap its lifetime allows.
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

/* One buffer to place: its bytes (a size class) and [born, died), in
 * ticks that fit int32_t (plan_lay_out checks): 16 bytes a request, where
 * 64-bit ticks made it 24 and 72 MB to page in for a 10^6-op plan. */
typedef struct arena_req {
    size_t size;
    int32_t born, died;
} arena_req;

/* Requests up to this many also get the quadratic greedy orders, and up
 * to the second, the breadth orders (quadratic too, with a larger
 * constant). */
#define MG_ARENA_GREEDY_MAX 3000
#define MG_ARENA_BREADTH_MAX 1200

/* ---- sweep with best fit ------------------------------------------------ */

/* Free gaps below the top of the arena, sorted by offset. */
typedef struct gap_list {
    size_t *off, *len;
    size_t n;
    size_t top, high; /* current end of the used range; its maximum */
} gap_list;

static size_t gaps_take(gap_list *g, size_t size) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < g->n; i++)
        if (g->len[i] >= size && (best == SIZE_MAX || g->len[i] < g->len[best]))
            best = i;
    size_t off;
    if (best != SIZE_MAX) {
        off = g->off[best];
        g->off[best] += size;
        g->len[best] -= size;
        if (g->len[best] == 0) {
            memmove(&g->off[best], &g->off[best + 1],
                    (g->n - best - 1) * sizeof *g->off);
            memmove(&g->len[best], &g->len[best + 1],
                    (g->n - best - 1) * sizeof *g->len);
            g->n--;
        }
        return off;
    }
    /* No gap holds it: grow at the top, from a free gap touching it. */
    if (g->n > 0 && g->off[g->n - 1] + g->len[g->n - 1] == g->top) {
        off = g->off[--g->n];
    } else {
        off = g->top;
    }
    g->top = off + size;
    if (g->top > g->high) g->high = g->top;
    return off;
}

static void gaps_give(gap_list *g, size_t off, size_t size) {
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (g->off[mid] < off) lo = mid + 1;
        else hi = mid;
    }
    const bool join_prev = lo > 0 && g->off[lo - 1] + g->len[lo - 1] == off;
    const bool join_next = lo < g->n && off + size == g->off[lo];
    if (join_prev && join_next) {
        g->len[lo - 1] += size + g->len[lo];
        memmove(&g->off[lo], &g->off[lo + 1], (g->n - lo - 1) * sizeof *g->off);
        memmove(&g->len[lo], &g->len[lo + 1], (g->n - lo - 1) * sizeof *g->len);
        g->n--;
    } else if (join_prev) {
        g->len[lo - 1] += size;
    } else if (join_next) {
        g->off[lo] = off;
        g->len[lo] += size;
    } else {
        memmove(&g->off[lo + 1], &g->off[lo], (g->n - lo) * sizeof *g->off);
        memmove(&g->len[lo + 1], &g->len[lo], (g->n - lo) * sizeof *g->len);
        g->off[lo] = off;
        g->len[lo] = size;
        g->n++;
    }
    /* A gap that reaches the top is no gap: the top comes down to it. */
    if (g->n > 0 && g->off[g->n - 1] + g->len[g->n - 1] == g->top) {
        g->top = g->off[g->n - 1];
        g->n--;
    }
}

/* The requests in time order: at each tick, frees before allocations.
 * Requests are listed by birth; by_died lists them by death. The same
 * walk counts the most bytes live at once (no layout is smaller) into
 * *live_peak, which a pass of its own did (issue 32). */
static size_t lay_out_sweep(const arena_req *rq, size_t n,
                            const int32_t *by_died, gap_list *g, size_t *off,
                            size_t *live_peak) {
    g->n = g->top = g->high = 0;
    size_t d = 0, live = 0, peak = 0;
    for (size_t i = 0; i < n; i++) {
        while (d < n && rq[by_died[d]].died <= rq[i].born) {
            const int32_t j = by_died[d++];
            gaps_give(g, off[j], rq[j].size);
            live -= rq[j].size;
        }
        off[i] = gaps_take(g, rq[i].size);
        live += rq[i].size;
        if (live > peak) peak = live;
    }
    *live_peak = peak;
    return g->high;
}

/* ---- greedy placements -------------------------------------------------- */

static bool overlaps(const arena_req *a, const arena_req *b) {
    return a->born < b->died && b->born < a->died;
}

/* qsort has no context argument in C11: keys carry what they sort by. */
typedef struct lay_key {
    size_t size;
    int64_t born, life;
    size_t i;
} lay_key;

static int by_size(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    if (a->born != b->born) return a->born < b->born ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int by_size_life(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    if (a->life != b->life) return a->life < b->life ? 1 : -1;
    return by_size(x, y);
}

static int by_life(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->life != b->life) return a->life < b->life ? 1 : -1;
    return by_size(x, y);
}

static int by_area(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    const double u = (double)a->size * (double)a->life;
    const double v = (double)b->size * (double)b->life;
    if (u != v) return u < v ? 1 : -1;
    return by_size(x, y);
}

/* Offsets for the requests in key order, each in the smallest (best fit)
 * or lowest (first fit) gap among the placed requests its lifetime
 * overlaps, or above them. placed: scratch of n, kept sorted by offset.
 * Returns the arena size. */
static size_t lay_out_greedy(const arena_req *rq, const lay_key *key, size_t n,
                             bool first_fit, size_t *placed, size_t *off) {
    size_t n_placed = 0, total = 0;
    for (size_t k = 0; k < n; k++) {
        const size_t i = key[k].i;
        size_t end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (size_t j = 0; j < n_placed; j++) {
            const size_t q = placed[j];
            if (!overlaps(&rq[i], &rq[q])) continue;
            if (off[q] > end) {
                const size_t gap = off[q] - end;
                if (gap >= rq[i].size && gap < best_gap) {
                    best_gap = gap;
                    best = end;
                    if (first_fit) break;
                }
            }
            if (off[q] + rq[q].size > end) end = off[q] + rq[q].size;
        }
        off[i] = best != SIZE_MAX ? best : end;
        if (off[i] + rq[i].size > total) total = off[i] + rq[i].size;
        size_t at = n_placed++;
        while (at > 0 && off[placed[at - 1]] > off[i]) {
            placed[at] = placed[at - 1];
            at--;
        }
        placed[at] = i;
    }
    return total;
}

/* ---- the plan's layout -------------------------------------------------- */

/* A plan of 10^6 steps has as many requests: every array here is touched
 * once per pass, so they are few and small (about 40 bytes a request). */
typedef struct arena_scratch {
    arena_req *rq;    /* the requests, by birth: born is 2s for step s's
                         output, 2s+1 for its workspace */
    int32_t *by_died; /* the requests by death */
    size_t *off;      /* per request: its offset */
    gap_list g;
    /* the greedy orders' (small plans only) */
    lay_key *key;
    size_t *placed, *trial;
    bool *listed; /* the breadth orders' (smaller plans only) */
} arena_scratch;

static void scratch_free(arena_scratch *sc) {
    free(sc->rq);
    free(sc->by_died);
    free(sc->off);
    free(sc->g.off);
    free(sc->g.len);
    free(sc->key);
    free(sc->placed);
    free(sc->trial);
    free(sc->listed);
}

/* The requests of p into sc, by birth: per step, its output unless kept
 * or never released, and its workspace when it has one. by_died follows
 * the release lists, which list deaths in time order. last: per tensor,
 * scratch. Returns the number of requests. */
static size_t plan_requests(const mg_plan *p, arena_scratch *sc,
                            int32_t *last) {
    for (int32_t t = 0; t < p->n_tensors; t++) last[t] = -1;
    for (int32_t s = 0; s < p->n_steps; s++)
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            last[p->release[r]] = s;
    size_t n = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const mg_tensor t = p->steps[s];
        if (!(p->role[t] & MG_ROLE_KEPT) && last[t] >= 0) {
            sc->rq[n] = (arena_req){mg_pool_size_class(mg_plan_nbytes(p, t)),
                                    2 * s, 2 * last[t] + 2};
            last[t] = -2 - (int32_t)n; /* now: its request, encoded */
            n++;
        }
        if (p->step[s].work_units) {
            sc->rq[n++] =
                (arena_req){mg_pool_size_class(mg_plan_step_work(&p->step[s])),
                            2 * s + 1, 2 * s + 2};
        }
    }
    /* deaths at tick 2s+2: step s's workspace, then what it releases (the
     * order within a tick leaves the same gaps) */
    size_t d = 0, k = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        while (k < n && sc->rq[k].born <= 2 * s + 1) {
            if (sc->rq[k].born % 2 == 1) sc->by_died[d++] = (int32_t)k;
            k++;
        }
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1];
             r++) {
            const int32_t code = last[p->release[r]];
            if (code <= -2) sc->by_died[d++] = -2 - code;
        }
    }
    return n;
}

/* sc->key: the requests by breadth. Moments (ticks at which a request is
 * born) by the bytes live then, most first; at each, the requests live
 * then and not yet listed, in the order `within`. Quadratic: small plans
 * only. */
static void breadth_order(arena_scratch *sc, size_t n,
                          int (*within)(const void *, const void *)) {
    /* the moments, with their live bytes, in sc->placed and sc->trial */
    size_t *moment = sc->placed, *live = sc->trial;
    for (size_t k = 0; k < n; k++) {
        moment[k] = k;
        live[k] = 0;
        for (size_t j = 0; j < n; j++)
            if (sc->rq[j].born <= sc->rq[k].born &&
                sc->rq[k].born < sc->rq[j].died)
                live[k] += sc->rq[j].size;
    }
    /* insertion sort of moments by live bytes, most first (stable) */
    for (size_t k = 1; k < n; k++) {
        const size_t m = moment[k];
        size_t at = k;
        while (at > 0 && live[moment[at - 1]] < live[m]) {
            moment[at] = moment[at - 1];
            at--;
        }
        moment[at] = m;
    }
    size_t n_key = 0;
    bool *listed = sc->listed;
    memset(listed, 0, n);
    for (size_t k = 0; k < n && n_key < n; k++) {
        const int64_t tick = sc->rq[moment[k]].born;
        const size_t first = n_key;
        for (size_t j = 0; j < n; j++)
            if (!listed[j] && sc->rq[j].born <= tick && tick < sc->rq[j].died) {
                listed[j] = true;
                sc->key[n_key++] =
                    (lay_key){sc->rq[j].size, sc->rq[j].born,
                              sc->rq[j].died - sc->rq[j].born, j};
            }
        qsort(sc->key + first, n_key - first, sizeof *sc->key, within);
    }
}

/* Keep trial if it is smaller than the best so far. */
static void keep_smaller(arena_scratch *sc, size_t n, size_t sz, size_t *best) {
    if (sz < *best) {
        *best = sz;
        memcpy(sc->off, sc->trial, n * sizeof *sc->off);
    }
}

/* Lay out the n requests of sc; writes sc->off and *live_peak (the most
 * bytes of the requests live at once), returns the size. */
static size_t lay_out_best(arena_scratch *sc, size_t n, size_t *live_peak) {
    size_t total =
        lay_out_sweep(sc->rq, n, sc->by_died, &sc->g, sc->off, live_peak);
    if (n > MG_ARENA_GREEDY_MAX) return total;
    int (*const orders[])(const void *, const void *) = {by_size, by_size_life,
                                                         by_area, by_life};
    const size_t n_orders = sizeof orders / sizeof *orders;
    for (size_t t = 0; t < 2 * n_orders; t++) {
        for (size_t i = 0; i < n; i++)
            sc->key[i] = (lay_key){sc->rq[i].size, sc->rq[i].born,
                                   sc->rq[i].died - sc->rq[i].born, i};
        qsort(sc->key, n, sizeof *sc->key, orders[t / 2]);
        keep_smaller(sc, n,
                     lay_out_greedy(sc->rq, sc->key, n, t % 2 == 1, sc->placed,
                                    sc->trial),
                     &total);
    }
    /* by breadth (TensorFlow Lite's other greedy): the busiest moments
     * first */
    for (size_t o = 0; n <= MG_ARENA_BREADTH_MAX && o < n_orders; o++) {
        breadth_order(sc, n, orders[o]);
        for (int first_fit = 0; first_fit < 2; first_fit++)
            keep_smaller(sc, n,
                         lay_out_greedy(sc->rq, sc->key, n, first_fit,
                                        sc->placed, sc->trial),
                         &total);
    }
    return total;
}

static mg_status nomem(const mg_plan *p) {
    return mg_set_error(MG_ERR_NOMEM,
                        "mg_plan_compile: out of memory laying out the arena "
                        "of %d steps",
                        (int)p->n_steps);
}

static mg_status plan_lay_out(mg_plan *p, int32_t *last) {
    if (p->n_steps > (INT32_MAX - 2) / 2)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: %d steps are more than the "
                            "arena's clock counts (at most %d)",
                            (int)p->n_steps, (INT32_MAX - 2) / 2);
    const size_t cap = 2 * (size_t)p->n_steps + 1;
    p->out_off = malloc(cap / 2 * sizeof *p->out_off + 1);
    p->work_off = malloc(cap / 2 * sizeof *p->work_off + 1);
    arena_scratch sc = {0};
    sc.rq = malloc(cap * sizeof *sc.rq);
    sc.by_died = malloc(cap * sizeof *sc.by_died);
    mg_status s = MG_OK;
    if (!p->out_off || !p->work_off || !sc.rq || !sc.by_died) s = nomem(p);
    size_t n = 0;
    if (s == MG_OK) {
        n = plan_requests(p, &sc, last);
        const size_t c = n ? n : 1;
        sc.off = malloc(c * sizeof *sc.off);
        /* gaps: at most one per request freed so far, so n */
        sc.g.off = malloc(c * sizeof *sc.g.off);
        sc.g.len = malloc(c * sizeof *sc.g.len);
        if (n <= MG_ARENA_GREEDY_MAX) {
            sc.key = malloc(c * sizeof *sc.key);
            sc.placed = malloc(c * sizeof *sc.placed);
            sc.trial = malloc(c * sizeof *sc.trial);
            if (!sc.key || !sc.placed || !sc.trial) s = nomem(p);
        }
        if (n <= MG_ARENA_BREADTH_MAX && !(sc.listed = malloc(c))) s = nomem(p);
        if (!sc.off || !sc.g.off || !sc.g.len) s = nomem(p);
    }
    if (s == MG_OK) {
        p->arena_live_peak = 0;
        p->arena_bytes = n ? lay_out_best(&sc, n, &p->arena_live_peak) : 0;
        /* the requests are by birth: one pass writes every step's pair */
        size_t k = 0;
        for (int32_t st = 0; st < p->n_steps; st++) {
            const int32_t tick = 2 * st;
            p->out_off[st] =
                k < n && sc.rq[k].born == tick ? sc.off[k++] : SIZE_MAX;
            p->work_off[st] =
                k < n && sc.rq[k].born == tick + 1 ? sc.off[k++] : SIZE_MAX;
        }
    }
    scratch_free(&sc);
    return s;
}

/* Phase q of p is a stretch of p's steps (split.c, a forward prefix):
 * its buffers take p's offsets, so a forward phase's saved tensors sit
 * where p's layout put them, alive into the backward phase as in one
 * call, and the pair reserves p's arena, not one per phase plus blocks
 * for the saved state (issue 28). p keeps its outputs out of the arena,
 * so only saved tensors that p releases are placed there. q points into
 * p's offset arrays, as into its step arrays (mgi_phase_unshare): copies
 * were 48 MB to page in for a 10^6-op plan (issue 32). */
static void phase_share_layout(mg_plan *q, const mg_plan *p, int32_t from) {
    q->out_off = p->out_off + from;
    q->work_off = p->work_off + from;
    q->arena_bytes = p->arena_bytes;
    q->arena_live_peak = p->arena_live_peak;
}

mg_status mgi_plan_lay_out(mg_plan *p, int32_t *last) {
    mg_status s = plan_lay_out(p, last);
    mg_plan *f = p->phase[0], *b = p->phase[1];
    if (s != MG_OK || !f) return s;
    if (f->steps == p->steps && b->steps == p->steps + f->n_steps) {
        phase_share_layout(f, p, 0);
        phase_share_layout(b, p, f->n_steps);
        return MG_OK;
    }
    /* interleaved phases: p's times are not theirs, so each has its own
     * layout and the saved state takes blocks of its own */
    for (int k = 0; k < 2 && s == MG_OK; k++)
        s = plan_lay_out(p->phase[k], last);
    return s;
}

mg_status mg_plan_arena_info(const mg_plan *p, const mg_binding *binds,
                             int n_binds, mg_plan_arena *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_arena_info: %s is NULL",
                            p ? "out" : "plan");
    if (n_binds < 0 || (n_binds > 0 && !binds))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_arena_info: %d bindings%s", n_binds,
                            n_binds < 0 ? "" : " with a NULL list");
    mg_plan_arena a = {p->arena_bytes, p->arena_live_peak, p->arena_bytes};
    /* Kept tensors the run computes take blocks of their own, unless the
     * caller bound them (a bound tensor is named once: mg_exec_run refuses
     * a second binding). */
    for (int32_t k = 0; k < p->n_kept; k++) {
        const mg_tensor t = p->kept[k];
        if (!(p->role[t] & MG_ROLE_COMPUTED)) continue;
        bool bound = false;
        for (int i = 0; i < n_binds && !bound; i++)
            bound = binds[i].tensor == t;
        if (!bound)
            a.reserved +=
                mg_pool_size_class(mgi_tdesc_nbytes(mg_plan_desc(p, t)));
    }
    *out = a;
    return MG_OK;
}
