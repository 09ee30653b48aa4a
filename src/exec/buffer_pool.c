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
 * reserves stays within its peak in use: bytes_reserved never exceeds
 * max(peak_bytes_in_use, bytes_in_use + the request).
 */
#include "buffer_pool.h"

#include <stdlib.h>
#include <string.h>

void mgi_pool_init(mg_pool *p, const mg_backend *backend, size_t max_bytes) {
    memset(p, 0, sizeof *p);
    p->backend = backend;
    p->max_bytes = max_bytes;
}

void mgi_pool_trim(mg_pool *p) {
    for (size_t b = 0; b < p->n_bins; b++) {
        mg_pool_bin *bin = &p->bins[b];
        for (size_t i = 0; i < bin->n; i++) {
            p->backend->free(p->backend->ctx, bin->free[i]);
            p->stats.bytes_reserved -= bin->size;
        }
        bin->n = 0;
    }
}

void mgi_pool_destroy(mg_pool *p) {
    mgi_pool_trim(p);
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
    if (p->max_bytes && (size > p->max_bytes ||
                         p->stats.bytes_in_use > p->max_bytes - size))
        return NULL;
    size_t pos;
    mg_pool_bin *bin = bin_find(p, size, &pos);
    void *ptr = NULL;
    if (bin && bin->n > 0) {
        ptr = bin->free[--bin->n];
        p->stats.cache_hits++;
    } else {
        size_t limit = p->stats.bytes_in_use + size;
        if (p->stats.peak_bytes_in_use > limit)
            limit = p->stats.peak_bytes_in_use;
        while (p->stats.bytes_reserved + size > limit && evict_largest(p)) {
        }
        ptr = p->backend->alloc(p->backend->ctx, size);
        if (!ptr) {
            /* Cached blocks of other sizes may be what is missing. */
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
