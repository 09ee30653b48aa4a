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
 * plan is static, and the planner gives every buffer that lives and dies
 * within a run an offset into one arena (src/rewrite/arena.c). The pool
 * holds that arena, as large as the largest layout it has served, and a
 * run takes those buffers from it at their offsets: one system
 * allocation for the first run, none after, and what is reserved is the
 * layout's size, known before the run (issue 28). In use is still counted
 * in classes, so the measured peak equals the prediction. The cache below
 * serves what outlives a run (outputs, saved state), so that a block the
 * caller holds never pins the arena, and serves whole runs when the arena
 * cannot be had (max_bytes below its size, or the system refuses).
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
    p->arena = NULL;
    p->arena_size = 0;
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

static void slot_drop(mg_pool *p) {
    if (p->slot) {
        p->backend->free(p->backend->ctx, p->slot);
        p->stats.bytes_reserved -= p->slot_size;
    }
    p->slot = NULL;
    p->slot_size = 0;
}

void mgi_pool_trim(mg_pool *p) {
    trim_cache(p);
    if (!p->slot_busy) slot_drop(p);
    if (p->arena_live == 0) arena_drop(p);
}

void mgi_pool_destroy(mg_pool *p) {
    trim_cache(p);
    slot_drop(p);
    arena_drop(p);
    for (size_t b = 0; b < p->n_bins; b++) free(p->bins[b].free);
    free(p->bins);
    p->bins = NULL;
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

void *mgi_pool_alloc(mg_pool *p, size_t nbytes) {
    size_t size = mg_pool_size_class(nbytes);
    p->stats.alloc_calls++;
    if (size == SIZE_MAX) return NULL;
    if (p->max_bytes &&
        (size > p->max_bytes || p->stats.bytes_in_use > p->max_bytes - size))
        return NULL;
    void *ptr;
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
        if (--p->arena_live == 0) p->arena_owner = NULL;
        arena_poison(p, ptr, size, true);
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

/* ---- the arena ---------------------------------------------------------- */

bool mgi_pool_arena_begin(mg_pool *p, size_t need, const void *owner) {
    p->arena_on = false;
    if (need == 0) return false;
    if (p->arena_live > 0)
        /* held blocks stay where they are: only their owner's run (the
         * backward phase of the saved state that holds them) fits round
         * them, in the layout that placed them */
        return p->arena_on =
                   owner && owner == p->arena_owner && need <= p->arena_size;
    if (need <= p->arena_size) return p->arena_on = true;
    if (p->max_bytes && need > p->max_bytes) return false;
    /* The arena takes over from the cache and from the smaller arena. */
    arena_drop(p);
    trim_cache(p);
    p->arena = p->backend->alloc(p->backend->ctx, need);
    if (!p->arena) return false;
    p->stats.system_allocs++;
    p->stats.bytes_reserved += need;
    p->arena_size = need;
    arena_poison(p, p->arena, need, true);
    return p->arena_on = true;
}

void mgi_pool_arena_end(mg_pool *p, const void *owner) {
    if (p->arena_on) p->arena_owner = p->arena_live > 0 ? owner : NULL;
    p->arena_on = false;
}

void *mgi_pool_arena_take(mg_pool *p, size_t off, size_t nbytes) {
    const size_t size = mg_pool_size_class(nbytes);
    p->stats.alloc_calls++;
    if (p->max_bytes &&
        (size > p->max_bytes || p->stats.bytes_in_use > p->max_bytes - size))
        return NULL;
    char *ptr = p->arena + off;
    p->stats.cache_hits++;
    p->arena_live++;
    arena_poison(p, ptr, nbytes ? nbytes : 1, false);
    p->stats.bytes_in_use += size;
    if (p->stats.bytes_in_use > p->stats.peak_bytes_in_use)
        p->stats.peak_bytes_in_use = p->stats.bytes_in_use;
    return ptr;
}

/* ---- the accumulation slot ---------------------------------------------- */

void *mgi_pool_slot_take(mg_pool *p, size_t nbytes) {
    const size_t size = mg_pool_size_class(nbytes);
    p->stats.alloc_calls++;
    if (size == SIZE_MAX) return NULL;
    if (p->max_bytes &&
        (size > p->max_bytes || p->stats.bytes_in_use > p->max_bytes - size))
        return NULL;
    if (size > p->slot_size) {
        slot_drop(p);
        p->slot = p->backend->alloc(p->backend->ctx, size);
        if (!p->slot) {
            trim_cache(p);
            p->slot = p->backend->alloc(p->backend->ctx, size);
        }
        if (!p->slot) return NULL;
        p->slot_size = size;
        p->stats.system_allocs++;
        p->stats.bytes_reserved += size;
    } else {
        p->stats.cache_hits++;
    }
    p->slot_busy = true;
    p->stats.bytes_in_use += size;
    if (p->stats.bytes_in_use > p->stats.peak_bytes_in_use)
        p->stats.peak_bytes_in_use = p->stats.bytes_in_use;
    return p->slot;
}

void mgi_pool_slot_give(mg_pool *p, size_t nbytes) {
    p->slot_busy = false;
    p->stats.bytes_in_use -= mg_pool_size_class(nbytes);
}
