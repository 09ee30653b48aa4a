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
 * ggml-alloc do in spirit. A sweep in schedule order with best fit among
 * the free gaps runs on every plan (linear in the steps). Where it leaves
 * the arena above the most bytes live at once (no layout is smaller), the
 * greedy placements follow (largest first, longest first, largest area
 * first; TensorFlow Lite's "by breadth": the busiest moments first, after
 * Pisarchyk & Lee 2020), each into the tightest or the lowest gap its
 * lifetime allows, then rounds of squeaky-wheel optimisation (Joslin &
 * Clements 1999: what ended up above the live peak goes earlier next
 * round), until a layout reaches the live peak. A greedy placement looks
 * only at the buffers whose lifetimes overlap its own, so its work is the
 * number of overlapping pairs; that number, counted in one linear pass,
 * bounds all of it (MG_ARENA_GREEDY_WORK), whatever the plan's size. On
 * the torchvision zoo (bench/arena_zoo.py) DenseNet's sweep was 1.10 of
 * the live peak and the largest-first order reaches it; the test ResNet
 * (tests/data/resnet.onnx, policy memory) stays at 1.08 under every fixed
 * order and reaches it in the squeaky-wheel rounds.
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

/* The most work the greedy orders may do on one plan, in overlapping
 * pairs visited (lay_out_best); chosen by measurement on the zoo's plans,
 * so that those that use all of it take about as long again as the rest
 * of compiling them. A plan whose single greedy pass costs more keeps the
 * sweep's layout. */
#define MG_ARENA_GREEDY_WORK ((size_t)1 << 22)
/* The most rounds of the squeaky-wheel search (lay_out_squeaky). */
#define MG_ARENA_SQUEAKY_ROUNDS 32

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

/* Which requests' lifetimes overlap, for the greedy orders: request i
 * (by birth) overlaps those born before it and alive at its birth,
 * back[back_start[i] .. back_start[i + 1]), and every request born after it
 * while it lives, i + 1 .. fwd_end[i] - 1 (births are in order). So a
 * greedy placement looks only at the requests it could collide with: its
 * work is the number of overlapping pairs, not n^2, and that number,
 * counted before anything is built, is what caps it (MG_ARENA_GREEDY_WORK). */
typedef struct arena_nbrs {
    int32_t *back_start, *back, *fwd_end;
} arena_nbrs;

/* The overlapping pairs of the n requests (one per pair), or a number
 * above limit as soon as they are more: on a long plan whose saved
 * activations all overlap, that is soon. */
static size_t count_overlaps(const arena_req *rq, size_t n,
                             const int32_t *by_died, size_t limit) {
    size_t d = 0, live = 0, pairs = 0;
    for (size_t i = 0; i < n && pairs <= limit; i++) {
        while (d < n && rq[by_died[d]].died <= rq[i].born) d++, live--;
        pairs += live++;
    }
    return pairs;
}

/* Fills nb (back holds count_overlaps' pairs). act, pos: scratch of n. */
static void nbrs_build(const arena_req *rq, size_t n, const int32_t *by_died,
                       arena_nbrs *nb, int32_t *act, int32_t *pos) {
    size_t d = 0, n_act = 0, e = 0;
    for (size_t i = 0; i < n; i++) nb->fwd_end[i] = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        while (d < n && rq[by_died[d]].died <= rq[i].born) {
            const int32_t j = by_died[d++];
            act[pos[j]] = act[--n_act];
            pos[act[pos[j]]] = pos[j];
            nb->fwd_end[j] = (int32_t)i;
        }
        nb->back_start[i] = (int32_t)e;
        memcpy(nb->back + e, act, n_act * sizeof *act);
        e += n_act;
        pos[i] = (int32_t)n_act;
        act[n_act++] = (int32_t)i;
    }
    nb->back_start[n] = (int32_t)e;
}

/* A placed buffer's bytes [off, end). */
typedef struct span {
    size_t off, end;
} span;

/* Sorts v by offset: quicksort (middle pivot), insertion sort below 16. */
static void spans_sort(span *v, size_t n) {
    while (n > 16) {
        const size_t pivot = v[n / 2].off;
        size_t i = 0, j = n - 1;
        for (;;) {
            while (v[i].off < pivot) i++;
            while (v[j].off > pivot) j--;
            if (i >= j) break;
            const span t = v[i];
            v[i++] = v[j];
            v[j--] = t;
        }
        /* [0, j] <= pivot <= [j + 1, n): recurse into the smaller half */
        if (j + 1 < n - j - 1) {
            spans_sort(v, j + 1);
            v += j + 1;
            n -= j + 1;
        } else {
            spans_sort(v + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (size_t k = 1; k < n; k++) {
        const span t = v[k];
        size_t at = k;
        while (at > 0 && v[at - 1].off > t.off) {
            v[at] = v[at - 1];
            at--;
        }
        v[at] = t;
    }
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
 * overlaps, or above them. Those are found in nb and sorted by offset,
 * or, with placed (scratch of n), by a scan of every placed request kept
 * in offset order: n^2 / 2 cheap tests, fewer than nb's sorts cost where
 * most requests overlap most others (lay_out_best chooses). buf: scratch
 * of n. Returns the arena size. */
static size_t lay_out_greedy(const arena_req *rq, const arena_nbrs *nb,
                             const lay_key *key, size_t n, bool first_fit,
                             span *buf, size_t *placed, size_t *off) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) off[i] = SIZE_MAX;
    for (size_t k = 0; k < n; k++) {
        const size_t i = key[k].i;
        size_t m = 0;
        if (placed) {
            for (size_t p = 0; p < k; p++) {
                const size_t j = placed[p];
                if (rq[i].born < rq[j].died && rq[j].born < rq[i].died)
                    buf[m++] = (span){off[j], off[j] + rq[j].size};
            }
        } else {
            for (int32_t e = nb->back_start[i]; e < nb->back_start[i + 1];
                 e++) {
                const int32_t j = nb->back[e];
                if (off[j] != SIZE_MAX)
                    buf[m++] = (span){off[j], off[j] + rq[j].size};
            }
            for (size_t j = i + 1; j < (size_t)nb->fwd_end[i]; j++)
                if (off[j] != SIZE_MAX)
                    buf[m++] = (span){off[j], off[j] + rq[j].size};
            spans_sort(buf, m);
        }
        size_t end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (size_t q = 0; q < m; q++) {
            if (buf[q].off > end) {
                const size_t gap = buf[q].off - end;
                if (gap >= rq[i].size && gap < best_gap) {
                    best_gap = gap;
                    best = end;
                    if (first_fit) break;
                }
            }
            if (buf[q].end > end) end = buf[q].end;
        }
        off[i] = best != SIZE_MAX ? best : end;
        if (off[i] + rq[i].size > total) total = off[i] + rq[i].size;
        if (placed) {
            size_t at = k;
            while (at > 0 && off[placed[at - 1]] > off[i]) {
                placed[at] = placed[at - 1];
                at--;
            }
            placed[at] = i;
        }
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
    /* the greedy orders' (plans the sweep leaves above the live peak) */
    arena_nbrs nb;
    lay_key *key;
    size_t *trial, *live; /* live: the breadth order's, per moment */
    span *buf;
    size_t *placed; /* NULL, or lay_out_greedy's scan order */
} arena_scratch;

static void scratch_free(arena_scratch *sc) {
    free(sc->rq);
    free(sc->by_died);
    free(sc->off);
    free(sc->g.off);
    free(sc->g.len);
    free(sc->nb.back_start);
    free(sc->nb.back);
    free(sc->nb.fwd_end);
    free(sc->key);
    free(sc->trial);
    free(sc->live);
    free(sc->buf);
    free(sc->placed);
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

/* Moments (births) by the bytes live then (in size), most first. */
static int by_live(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    return (a->i > b->i) - (a->i < b->i);
}

static void list_once(const arena_req *rq, size_t j, size_t *listed,
                      lay_key *key, size_t *n_key) {
    if (listed[j]) return;
    listed[j] = 1;
    key[(*n_key)++] =
        (lay_key){rq[j].size, rq[j].born, rq[j].died - rq[j].born, j};
}

/* sc->key: the requests by breadth. Moments (ticks at which a request is
 * born) by the bytes live then, most first; at each, the requests live
 * then and not yet listed, in the order `within`. The requests live at
 * request m's birth are m's earlier overlaps, m and those born with it. */
static void breadth_order(arena_scratch *sc, size_t n,
                          int (*within)(const void *, const void *)) {
    const arena_req *rq = sc->rq;
    const arena_nbrs *nb = &sc->nb;
    lay_key *key = sc->key;
    size_t *moment = sc->trial, *listed = sc->live;
    for (size_t m = 0; m < n; m++) {
        size_t live = 0;
        for (int32_t e = nb->back_start[m]; e < nb->back_start[m + 1]; e++)
            live += rq[nb->back[e]].size;
        for (size_t j = m; j < n && rq[j].born == rq[m].born; j++)
            live += rq[j].size;
        key[m] = (lay_key){live, rq[m].born, 0, m};
    }
    qsort(key, n, sizeof *key, by_live);
    for (size_t k = 0; k < n; k++) {
        moment[k] = key[k].i;
        listed[k] = 0;
    }
    size_t n_key = 0;
    for (size_t k = 0; k < n && n_key < n; k++) {
        const size_t m = moment[k], first = n_key;
        for (int32_t e = nb->back_start[m]; e < nb->back_start[m + 1]; e++)
            list_once(rq, (size_t)nb->back[e], listed, key, &n_key);
        for (size_t j = m; j < n && rq[j].born == rq[m].born; j++)
            list_once(rq, j, listed, key, &n_key);
        qsort(key + first, n_key - first, sizeof *key, within);
    }
}

/* Keep trial if it is smaller than the best so far. */
static void keep_smaller(arena_scratch *sc, size_t n, size_t sz, size_t *best) {
    if (sz < *best) {
        *best = sz;
        memcpy(sc->off, sc->trial, n * sizeof *sc->off);
    }
}

/* Squeaky wheel optimisation (Joslin & Clements 1999) after the fixed
 * orders: lay the requests out by priority, first fit; each request that
 * ends above the live peak gains priority in proportion to how far above,
 * so the next round places it earlier. Starts from the size order; at
 * most MG_ARENA_SQUEAKY_ROUNDS rounds within the work left. */
static void lay_out_squeaky(arena_scratch *sc, size_t n, size_t live_peak,
                            size_t pass, size_t *spent, size_t *total) {
    size_t *prio = sc->live;
    for (size_t i = 0; i < n; i++)
        sc->key[i] = (lay_key){sc->rq[i].size, sc->rq[i].born,
                               sc->rq[i].died - sc->rq[i].born, i};
    qsort(sc->key, n, sizeof *sc->key, by_size);
    for (size_t k = 0; k < n; k++) prio[sc->key[k].i] = (n - k) * 1024;
    for (int round = 0; round<MG_ARENA_SQUEAKY_ROUNDS && * total> live_peak &&
                        *spent + pass <= MG_ARENA_GREEDY_WORK;
         round++, *spent += pass) {
        for (size_t i = 0; i < n; i++) sc->key[i] = (lay_key){prio[i], 0, 0, i};
        qsort(sc->key, n, sizeof *sc->key, by_live);
        const size_t z = lay_out_greedy(sc->rq, &sc->nb, sc->key, n, true,
                                        sc->buf, sc->placed, sc->trial);
        keep_smaller(sc, n, z, total);
        for (size_t i = 0; i < n; i++) {
            const size_t end = sc->trial[i] + sc->rq[i].size;
            if (end > live_peak)
                prio[i] +=
                    (size_t)((double)n * 1024.0 * (double)(end - live_peak) /
                             (double)(z - live_peak));
        }
    }
}

/* The greedy orders' scratch and overlaps; false when out of memory. */
static bool greedy_prepare(arena_scratch *sc, size_t n, size_t pairs) {
    const size_t c = n ? n : 1;
    sc->nb.back_start = malloc((n + 1) * sizeof *sc->nb.back_start);
    sc->nb.back = malloc((pairs ? pairs : 1) * sizeof *sc->nb.back);
    sc->nb.fwd_end = malloc(c * sizeof *sc->nb.fwd_end);
    sc->key = malloc(c * sizeof *sc->key);
    sc->trial = malloc(c * sizeof *sc->trial);
    sc->live = malloc(c * sizeof *sc->live);
    sc->buf = malloc(c * sizeof *sc->buf);
    int32_t *act = malloc(c * sizeof *act), *pos = malloc(c * sizeof *pos);
    const bool ok = sc->nb.back_start && sc->nb.back && sc->nb.fwd_end &&
                    sc->key && sc->trial && sc->live && sc->buf && act && pos;
    if (ok) nbrs_build(sc->rq, n, sc->by_died, &sc->nb, act, pos);
    free(act);
    free(pos);
    return ok;
}

/* Lay out the n requests of sc: writes sc->off, *size and *live_peak (the
 * most bytes of the requests live at once). The sweep runs on every plan;
 * with greedy, where it leaves the arena above the live peak and one
 * greedy pass fits MG_ARENA_GREEDY_WORK, the greedy orders and then the
 * squeaky-wheel rounds run too, until one reaches the live peak or the
 * work is spent. false when out of memory. */
static bool lay_out_orders(arena_scratch *sc, size_t n, size_t *size,
                           const size_t *live_peak) {
    size_t total = *size;
    /* one greedy pass visits each overlapping pair twice and sorts what it
     * finds placed, or tests every pair placed so far (n^2 / 2 tests,
     * about 4 to a visit); ordering by breadth visits the pairs once more */
    const size_t pairs =
        count_overlaps(sc->rq, n, sc->by_died, MG_ARENA_GREEDY_WORK);
    const size_t visit = n + 2 * pairs, scan = n / 8 * n + n;
    const size_t pass = scan < visit ? scan : visit;
    if (pass > MG_ARENA_GREEDY_WORK || pairs > MG_ARENA_GREEDY_WORK)
        return true;
    if (!greedy_prepare(sc, n, pairs)) return false;
    if (scan < visit && !(sc->placed = malloc(n * sizeof *sc->placed)))
        return false;
    int (*const orders[])(const void *, const void *) = {by_size, by_size_life,
                                                         by_area, by_life};
    const size_t n_orders = sizeof orders / sizeof *orders;
    size_t spent = 0;
    for (size_t t = 0; t < 2 * n_orders && total > *live_peak &&
                       spent + pass <= MG_ARENA_GREEDY_WORK;
         t++, spent += pass) {
        for (size_t i = 0; i < n; i++)
            sc->key[i] = (lay_key){sc->rq[i].size, sc->rq[i].born,
                                   sc->rq[i].died - sc->rq[i].born, i};
        qsort(sc->key, n, sizeof *sc->key, orders[t / 2]);
        keep_smaller(sc, n,
                     lay_out_greedy(sc->rq, &sc->nb, sc->key, n, t % 2 == 1,
                                    sc->buf, sc->placed, sc->trial),
                     &total);
    }
    /* by breadth (TensorFlow Lite's other greedy): the busiest moments
     * first */
    for (size_t o = 0; o < n_orders && total > *live_peak &&
                       spent + visit + 2 * pass <= MG_ARENA_GREEDY_WORK;
         o++, spent += visit + 2 * pass) {
        breadth_order(sc, n, orders[o]);
        for (int first_fit = 0; first_fit < 2; first_fit++)
            keep_smaller(sc, n,
                         lay_out_greedy(sc->rq, &sc->nb, sc->key, n, first_fit,
                                        sc->buf, sc->placed, sc->trial),
                         &total);
    }
    lay_out_squeaky(sc, n, *live_peak, pass, &spent, &total);
    *size = total;
    return true;
}

static bool lay_out_best(arena_scratch *sc, size_t n, bool greedy, size_t *size,
                         size_t *live_peak) {
    *size = lay_out_sweep(sc->rq, n, sc->by_died, &sc->g, sc->off, live_peak);
    if (!greedy || *size == *live_peak) return true; /* no layout is smaller */
    return lay_out_orders(sc, n, size, live_peak);
}

/* Lay out p's buffers by the sweep alone, straight from its steps and
 * release lists, writing p->out_off and p->work_off: no request arrays,
 * which were 40 bytes a step to page in (issue 32). The same order of
 * takes and gives as lay_out_sweep over plan_requests' list, so the same
 * offsets. last: per tensor, scratch. Returns the arena's size; *live_peak
 * gets the most bytes live at once. g: gaps, room for 2 * n_steps. */
static size_t lay_out_stream(mg_plan *p, int32_t *last, gap_list *g,
                             size_t *live_peak) {
    /* -2: released by some step, so a request (unless kept) */
    for (int32_t t = 0; t < p->n_tensors; t++) last[t] = -1;
    for (int32_t r = 0; r < p->release_start[p->n_steps]; r++)
        last[p->release[r]] = -2;
    g->n = g->top = g->high = 0;
    size_t live = 0, peak = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const mg_tensor t = p->steps[s];
        p->out_off[s] = p->work_off[s] = SIZE_MAX;
        if (!(p->role[t] & MG_ROLE_KEPT) && last[t] == -2) {
            const size_t size = mg_pool_size_class(mg_plan_nbytes(p, t));
            p->out_off[s] = gaps_take(g, size);
            last[t] = s;
            live += size;
            if (live > peak) peak = live;
        }
        /* its workspace: born at 2s+1, dead at 2s+2, before what the step
         * releases */
        if (p->step[s].work_units) {
            const size_t size =
                mg_pool_size_class(mg_plan_step_work(&p->step[s]));
            p->work_off[s] = gaps_take(g, size);
            if (live + size > peak) peak = live + size;
            gaps_give(g, p->work_off[s], size);
        }
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1];
             r++) {
            const mg_tensor u = p->release[r];
            if (last[u] < 0) continue; /* not laid out here: a saved leaf */
            const size_t size = mg_pool_size_class(mg_plan_nbytes(p, u));
            gaps_give(g, p->out_off[last[u]], size);
            live -= size;
        }
    }
    *live_peak = peak;
    return g->high;
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
    if (!p->out_off || !p->work_off) return nomem(p);
    /* First the sweep straight from the steps. Where it reaches the live
     * peak, no layout is smaller and that is all; only where it does not
     * are the requests listed for the greedy orders, which start from the
     * same sweep. */
    gap_list g = {.off = malloc(cap * sizeof *g.off),
                  .len = malloc(cap * sizeof *g.len)};
    if (!g.off || !g.len) {
        free(g.off);
        free(g.len);
        return nomem(p);
    }
    size_t live_peak;
    const size_t size = lay_out_stream(p, last, &g, &live_peak);
    free(g.off);
    free(g.len);
    if (size == live_peak) {
        p->arena_bytes = size;
        p->arena_live_peak = live_peak;
        return MG_OK;
    }
    arena_scratch sc = {0};
    sc.rq = malloc(cap * sizeof *sc.rq);
    sc.by_died = malloc(cap * sizeof *sc.by_died);
    mg_status s = MG_OK;
    if (!sc.rq || !sc.by_died) s = nomem(p);
    size_t n = 0;
    if (s == MG_OK) {
        n = plan_requests(p, &sc, last);
        const size_t c = n ? n : 1;
        sc.off = malloc(c * sizeof *sc.off);
        /* gaps: at most one per request freed so far, so n */
        sc.g.off = malloc(c * sizeof *sc.g.off);
        sc.g.len = malloc(c * sizeof *sc.g.len);
        if (!sc.off || !sc.g.off || !sc.g.len) s = nomem(p);
    }
    if (s == MG_OK) {
        p->arena_live_peak = p->arena_bytes = 0;
        if (n &&
            !lay_out_best(&sc, n, true, &p->arena_bytes, &p->arena_live_peak))
            s = nomem(p);
    }
    if (s == MG_OK) {
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

static int by_died_then_index(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->born != b->born) return a->born < b->born ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

size_t mgi_arena_lay_out(const size_t *size, const int64_t *born,
                         const int64_t *died, size_t n, bool greedy,
                         size_t *off, size_t *live_peak) {
    *live_peak = 0;
    if (n == 0) return 0;
    if (n > INT32_MAX) return SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (born[i] >= died[i] || (i > 0 && born[i] < born[i - 1]) ||
            born[i] < INT32_MIN || died[i] > INT32_MAX)
            return SIZE_MAX;
    arena_scratch sc = {0};
    sc.rq = malloc(n * sizeof *sc.rq);
    sc.by_died = malloc(n * sizeof *sc.by_died);
    sc.key = malloc(n * sizeof *sc.key);
    sc.off = malloc(n * sizeof *sc.off);
    sc.g.off = malloc(n * sizeof *sc.g.off);
    sc.g.len = malloc(n * sizeof *sc.g.len);
    size_t total = SIZE_MAX;
    if (sc.rq && sc.by_died && sc.key && sc.off && sc.g.off && sc.g.len) {
        for (size_t i = 0; i < n; i++) {
            sc.rq[i] = (arena_req){size[i], (int32_t)born[i], (int32_t)died[i]};
            sc.key[i] = (lay_key){size[i], died[i], 0, i};
        }
        qsort(sc.key, n, sizeof *sc.key, by_died_then_index);
        for (size_t i = 0; i < n; i++) sc.by_died[i] = (int32_t)sc.key[i].i;
        free(sc.key);
        sc.key = NULL;
        if (lay_out_best(&sc, n, greedy, &total, live_peak))
            memcpy(off, sc.off, n * sizeof *off);
        else total = SIZE_MAX;
    }
    scratch_free(&sc);
    return total;
}

mg_status mg_plan_arena_info(const mg_plan *p, const mg_binding *binds,
                             int n_binds, mg_plan_arena *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_arena_info: %s is NULL",
                            p ? "out" : "plan");
    mg_status st =
        mgi_plan_binds_check(p, binds, n_binds, "mg_plan_arena_info");
    if (st != MG_OK) return st;
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
        if (!bound) a.reserved += mg_pool_size_class(mg_plan_nbytes(p, t));
    }
    *out = a;
    return MG_OK;
}
