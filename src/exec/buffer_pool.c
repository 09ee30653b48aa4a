/*
 * buffer_pool.c - the caching allocator the executor takes every
 * intermediate and workspace from: freed blocks are kept per size class and
 * handed out again for the next request of the same class.
 *
 * Bytes in use are counted in size classes, the same unit the planner
 * predicts with (mg_pool_size_class, src/common/size_class.c), so a plan's
 * predicted peak and the measured peak can be compared exactly. Only
 * exact class matches are reused: a bigger cached block would make "in use"
 * depend on what the cache happened to hold, and the prediction would stop
 * being exact.
 *
 * Exact reuse alone lets the cache fill with classes the next phase of a
 * schedule never asks for again (a recompute segment's sizes differ from
 * the backward's), and a process would hold twice what it uses. So before
 * the pool grows, it gives back cached blocks, largest first, until what it
 * reserves stays within its peak in use: what it reserves outside the
 * arena below never exceeds max(peak_bytes_in_use, bytes_in_use + the
 * request).
 *
 * That rule still churns: with exact classes, keeping every block a run
 * will want again costs the sum of each class's own peak, more than the
 * peak of their total, so each run evicts blocks that it then allocates
 * again (issue 11: about 20 system allocations per ResNet step). But a
 * plan is static: with the same bindings it makes the same requests in the
 * same order every run, and the executor can list them before the run
 * (pool_replay.c). The pool lays them out at offsets of one arena, each
 * in a gap that is free for its whole lifetime, in a few greedy orders
 * (largest first, as TensorFlow Lite's "greedy by size" arena planner, or
 * largest bytes x lifetime first; best or first fit), keeps the smallest
 * layout, and serves the run from it. The next run with the same list reuses
 * the arena: no system allocation at all. Each request is checked against the
 * layout (same class, slot not held by a block in use), and the first one
 * that differs sends the rest of the run to the cache, so a wrong list
 * costs speed, never correctness. In use is still counted in classes, so
 * the measured peak equals the prediction; reserved is the arena, which
 * the layout keeps close to that peak (tests/test_pool_steady.c states
 * the bound).
 */
#include "buffer_pool.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define MG_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_POOL_ASAN 1
#endif
#endif
#ifdef MG_POOL_ASAN
#include <sanitizer/asan_interface.h>
#endif

void mgi_pool_init(mg_pool *p, const mg_backend *backend, size_t max_bytes) {
    memset(p, 0, sizeof *p);
    p->backend = backend;
    p->max_bytes = max_bytes;
}

/* Requests of one run above this count are not laid out: the layout is
 * quadratic in them. Such runs keep the cache alone. */
#define MG_POOL_LAYOUT_MAX 20000

static bool arena_has(const mg_pool *p, const void *ptr) {
    return p->arena && (const char *)ptr >= p->arena &&
           (const char *)ptr < p->arena + p->arena_size;
}

/* One arena holds every block of a run, so AddressSanitizer would no
 * longer see a kernel write past its own block into a neighbour's. In an
 * ASan build the slots of host memory not handed out are poisoned, and a
 * slot is unpoisoned for exactly the bytes requested. */
static void arena_poison(const mg_pool *p, void *ptr, size_t n, bool on) {
#ifdef MG_POOL_ASAN
    if (!p->backend->name || strcmp(p->backend->name, "cpu") != 0) return;
    if (on) ASAN_POISON_MEMORY_REGION(ptr, n);
    else ASAN_UNPOISON_MEMORY_REGION(ptr, n);
#else
    (void)p, (void)ptr, (void)n, (void)on;
#endif
}

static void arena_drop(mg_pool *p) {
    if (p->arena) {
        arena_poison(p, p->arena, p->arena_size, false);
        p->backend->free(p->backend->ctx, p->arena);
        p->stats.bytes_reserved -= p->arena_size;
    }
    free(p->lay_size);
    free(p->lay_off);
    p->arena = NULL;
    p->arena_size = 0;
    p->lay_size = p->lay_off = NULL;
    p->n_lay = p->cursor = 0;
}

static void trim_cache(mg_pool *p) {
    for (size_t b = 0; b < p->n_bins; b++) {
        mg_pool_bin *bin = &p->bins[b];
        for (size_t i = 0; i < bin->n; i++) {
            p->backend->free(p->backend->ctx, bin->free[i]);
            p->stats.bytes_reserved -= bin->size;
        }
        bin->n = 0;
    }
}

void mgi_pool_trim(mg_pool *p) {
    trim_cache(p);
    if (p->arena_live == 0) {
        arena_drop(p);
        p->lay_sig = 0;
    }
}

void mgi_pool_destroy(mg_pool *p) {
    trim_cache(p);
    arena_drop(p);
    for (size_t b = 0; b < p->n_bins; b++) free(p->bins[b].free);
    free(p->bins);
    free(p->live);
    p->bins = NULL;
    p->live = NULL;
    p->n_bins = p->cap_bins = 0;
}

/* Binary search for the bin of `size`; *pos is where it is or would go. */
static mg_pool_bin *bin_find(mg_pool *p, size_t size, size_t *pos) {
    size_t lo = 0, hi = p->n_bins;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->bins[mid].size < size) lo = mid + 1;
        else hi = mid;
    }
    *pos = lo;
    return (lo < p->n_bins && p->bins[lo].size == size) ? &p->bins[lo] : NULL;
}

/* Give one cached block back to the system, from the largest class that
 * has one. False if the cache is empty. */
static bool evict_largest(mg_pool *p) {
    for (size_t b = p->n_bins; b-- > 0;) {
        mg_pool_bin *bin = &p->bins[b];
        if (bin->n == 0) continue;
        p->backend->free(p->backend->ctx, bin->free[--bin->n]);
        p->stats.bytes_reserved -= bin->size;
        return true;
    }
    return false;
}

/* Latest first: a schedule mostly frees what it made last. */
static bool live_remove(mg_pool *p, const void *ptr) {
    for (size_t i = p->n_live; i-- > 0;)
        if (p->live[i].ptr == ptr) {
            p->live[i] = p->live[--p->n_live];
            return true;
        }
    return false;
}

/* The next request of the run from the arena, if it is the one the layout
 * expects and no block in use overlaps its slot; else the replay ends for
 * this run. Room in the live list was reserved at the run's start. */
static void *replay_serve(mg_pool *p, size_t size, size_t nbytes) {
    if (!p->in_run || p->diverged || !p->arena) return NULL;
    if (p->cursor >= p->n_lay || p->lay_size[p->cursor] != size ||
        p->n_live == p->cap_live) {
        p->diverged = true;
        return NULL;
    }
    const size_t off = p->lay_off[p->cursor];
    for (size_t i = 0; i < p->n_live; i++) {
        const mg_pool_live *l = &p->live[i];
        if (!l->in_arena) continue;
        const size_t lo = (size_t)(l->ptr - p->arena);
        if (lo < off + size && off < lo + l->size) {
            p->diverged = true;
            return NULL;
        }
    }
    p->cursor++;
    char *ptr = p->arena + off;
    p->live[p->n_live++] = (mg_pool_live){ptr, size, true};
    p->arena_live++;
    arena_poison(p, ptr, nbytes ? nbytes : 1, false);
    return ptr;
}

void *mgi_pool_alloc(mg_pool *p, size_t nbytes) {
    size_t size = mg_pool_size_class(nbytes);
    p->stats.alloc_calls++;
    if (size == SIZE_MAX) return NULL;
    if (p->max_bytes &&
        (size > p->max_bytes || p->stats.bytes_in_use > p->max_bytes - size))
        return NULL;
    void *ptr = replay_serve(p, size, nbytes);
    if (ptr) {
        p->stats.cache_hits++;
        goto handed_out;
    }
    size_t pos;
    mg_pool_bin *bin = bin_find(p, size, &pos);
    if (bin && bin->n > 0) {
        ptr = bin->free[--bin->n];
        p->stats.cache_hits++;
    } else {
        size_t limit = p->stats.bytes_in_use + size;
        if (p->stats.peak_bytes_in_use > limit)
            limit = p->stats.peak_bytes_in_use;
        /* The arena is left out: it is not the cache this rule trims. */
        while (p->stats.bytes_reserved - p->arena_size + size > limit &&
               evict_largest(p)) {
        }
        ptr = p->backend->alloc(p->backend->ctx, size);
        if (!ptr) {
            /* Cached blocks of other sizes may be what is missing, or an
             * arena this run does not use. */
            mgi_pool_trim(p);
            ptr = p->backend->alloc(p->backend->ctx, size);
        }
        if (!ptr) return NULL;
        p->stats.system_allocs++;
        p->stats.bytes_reserved += size;
    }
handed_out:
    p->stats.bytes_in_use += size;
    if (p->stats.bytes_in_use > p->stats.peak_bytes_in_use)
        p->stats.peak_bytes_in_use = p->stats.bytes_in_use;
    return ptr;
}

void mgi_pool_free(mg_pool *p, void *ptr, size_t nbytes) {
    if (!ptr) return;
    size_t size = mg_pool_size_class(nbytes);
    p->stats.bytes_in_use -= size;
    if (arena_has(p, ptr)) {
        live_remove(p, ptr);
        p->arena_live--;
        arena_poison(p, ptr, size, true);
        return;
    }
    if (p->arena && !p->diverged) {
        /* Replaying: the arena serves the run, a cached block would only
         * add to what is reserved. */
        p->backend->free(p->backend->ctx, ptr);
        p->stats.bytes_reserved -= size;
        return;
    }
    size_t pos;
    mg_pool_bin *bin = bin_find(p, size, &pos);
    if (!bin) {
        if (p->n_bins == p->cap_bins) {
            size_t cap = p->cap_bins ? 2 * p->cap_bins : 16;
            mg_pool_bin *bins = realloc(p->bins, cap * sizeof *bins);
            if (!bins) goto give_back;
            p->bins = bins;
            p->cap_bins = cap;
        }
        memmove(&p->bins[pos + 1], &p->bins[pos],
                (p->n_bins - pos) * sizeof *p->bins);
        p->bins[pos] = (mg_pool_bin){.size = size};
        p->n_bins++;
        bin = &p->bins[pos];
    }
    if (bin->n == bin->cap) {
        size_t cap = bin->cap ? 2 * bin->cap : 4;
        void **list = realloc(bin->free, cap * sizeof *list);
        if (!list) goto give_back;
        bin->free = list;
        bin->cap = cap;
    }
    bin->free[bin->n++] = ptr;
    return;
give_back:
    /* No room to cache it: hand it back to the system instead. */
    p->backend->free(p->backend->ctx, ptr);
    p->stats.bytes_reserved -= size;
}

/* ---- replay -------------------------------------------------------------- */

/* FNV-1a over the requests: the same list gets the same layout. */
static uint64_t signature(const mg_pool_rec *rec, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        const uint64_t v[3] = {rec[i].size, (uint64_t)rec[i].born,
                               (uint64_t)rec[i].died};
        for (int k = 0; k < 3; k++) {
            h ^= v[k];
            h *= 1099511628211ull;
        }
    }
    return h ^ n;
}

static bool conflict(const mg_pool_rec *a, const mg_pool_rec *b) {
    const int64_t ad = a->died < 0 ? INT64_MAX : a->died;
    const int64_t bd = b->died < 0 ? INT64_MAX : b->died;
    return a->born < bd && b->born < ad;
}

/* qsort has no context argument in C11: sort keys carry what they sort
 * by and the request's index. */
typedef struct lay_key {
    size_t size;
    int64_t born, life;
    size_t i;
} lay_key;

/* Largest first, then earliest. */
static int by_size(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    return (a->born > b->born) - (a->born < b->born);
}

/* Largest first, then longest lived. */
static int by_size_life(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    if (a->life != b->life) return a->life < b->life ? 1 : -1;
    return by_size(x, y);
}

/* Largest area (bytes times lifetime) first. */
static int by_area(const void *x, const void *y) {
    const lay_key *a = x, *b = y;
    const double u = (double)a->size * (double)a->life;
    const double v = (double)b->size * (double)b->life;
    if (u != v) return u < v ? 1 : -1;
    return by_size(x, y);
}

/* Offsets for the requests in the order of key, each in the smallest gap
 * (best fit) or the lowest (first fit) among the blocks whose lifetimes it
 * overlaps, or above them all. placed: scratch of n. The arena size. */
static size_t lay_out_in(const mg_pool_rec *rec, const lay_key *key, size_t n,
                         bool best_fit, size_t *placed, size_t *off) {
    size_t n_placed = 0, total = 0;
    for (size_t k = 0; k < n; k++) {
        const size_t i = key[k].i;
        const mg_pool_rec *r = &rec[i];
        size_t end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
        for (size_t j = 0; j < n_placed; j++) {
            const size_t q = placed[j];
            if (!conflict(r, &rec[q])) continue;
            if (off[q] > end) {
                const size_t gap = off[q] - end;
                if (gap >= r->size && gap < best_gap) {
                    best_gap = gap;
                    best = end;
                    if (!best_fit) break;
                }
            }
            if (off[q] + rec[q].size > end) end = off[q] + rec[q].size;
        }
        off[i] = best != SIZE_MAX ? best : end;
        if (off[i] + r->size > total) total = off[i] + r->size;
        size_t at = n_placed;
        while (at > 0 && off[placed[at - 1]] > off[i]) {
            placed[at] = placed[at - 1];
            at--;
        }
        placed[at] = i;
        n_placed++;
    }
    return total;
}

/* Requests up to this many get every ordering tried; more get one. */
#define MG_POOL_LAYOUT_TRIES_MAX 4000

/* The smallest of a few greedy layouts (no one ordering wins on every
 * schedule). Writes off[n]; returns the arena size, 0 when out of
 * memory. */
static size_t lay_out(const mg_pool_rec *rec, size_t n, size_t *off) {
    lay_key *key = malloc(n * sizeof *key);
    size_t *placed = malloc(n * sizeof *placed); /* by offset */
    size_t *trial = malloc(n * sizeof *trial);
    size_t total = 0;
    if (key && placed && trial) {
        int (*const orders[3])(const void *,
                               const void *) = {by_size, by_size_life, by_area};
        const int tries = n <= MG_POOL_LAYOUT_TRIES_MAX ? 6 : 1;
        for (int t = 0; t < tries; t++) {
            for (size_t i = 0; i < n; i++) {
                const int64_t died =
                    rec[i].died < 0 ? INT64_MAX / 2 : rec[i].died;
                key[i] =
                    (lay_key){rec[i].size, rec[i].born, died - rec[i].born, i};
            }
            qsort(key, n, sizeof *key, orders[t / 2]);
            size_t sz = lay_out_in(rec, key, n, t % 2 == 0, placed, trial);
            if (total == 0 || sz < total) {
                total = sz;
                memcpy(off, trial, n * sizeof *off);
            }
        }
    }
    free(key);
    free(placed);
    free(trial);
    return total;
}

/* A new arena for the requests; false (and the cache serves) if there is
 * no memory for it or it would pass max_bytes. */
static bool arena_build(mg_pool *p, const mg_pool_rec *recs, size_t n,
                        uint64_t sig) {
    size_t *lay_size = malloc(n * sizeof *lay_size);
    size_t *lay_off = malloc(n * sizeof *lay_off);
    size_t total = lay_size && lay_off ? lay_out(recs, n, lay_off) : 0;
    if (total == 0 || (p->max_bytes && total > p->max_bytes)) {
        free(lay_size);
        free(lay_off);
        return false;
    }
    for (size_t i = 0; i < n; i++) lay_size[i] = recs[i].size;
    /* The arena takes over from the cache and from the old arena. */
    arena_drop(p);
    trim_cache(p);
    p->arena = p->backend->alloc(p->backend->ctx, total);
    if (!p->arena) {
        free(lay_size);
        free(lay_off);
        return false;
    }
    p->stats.system_allocs++;
    p->stats.bytes_reserved += total;
    arena_poison(p, p->arena, total, true);
    p->arena_size = total;
    p->lay_size = lay_size;
    p->lay_off = lay_off;
    p->n_lay = n;
    p->lay_sig = sig;
    return true;
}

void mgi_pool_run_begin(mg_pool *p, const mg_pool_rec *recs, size_t n) {
    p->in_run = true;
    p->cursor = 0;
    p->diverged = true; /* until an arena is ready for this run */
    if (!recs || n == 0 || n > MG_POOL_LAYOUT_MAX) return;
    if (p->cap_live < p->n_live + n) {
        mg_pool_live *l = realloc(p->live, (p->n_live + n) * sizeof *l);
        if (!l) return;
        p->live = l;
        p->cap_live = p->n_live + n;
    }
    const uint64_t sig = signature(recs, n);
    if (p->arena && sig == p->lay_sig && p->n_lay == n) {
        p->diverged = false;
        return;
    }
    /* A block of the old arena still in use pins it. */
    if (p->arena_live > 0) return;
    p->diverged = !arena_build(p, recs, n, sig);
}

void mgi_pool_run_end(mg_pool *p) { p->in_run = false; }
