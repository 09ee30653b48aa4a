/*
 * buffer_pool.h - the caching buffer pool the executor allocates every
 * intermediate from, over a backend's alloc/free.
 */
#ifndef MG_BUFFER_POOL_H
#define MG_BUFFER_POOL_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mg_pool_bin {
    size_t size; /* size class */
    void **free; /* cached blocks of exactly this class */
    size_t n, cap;
} mg_pool_bin;

typedef struct mg_pool {
    const mg_backend *backend;
    size_t max_bytes;  /* 0: unbounded */
    mg_pool_bin *bins; /* sorted by size */
    size_t n_bins, cap_bins;
    mg_pool_stats stats;

    /* The arena the plans' layouts index (src/rewrite/arena.c): as large
     * as the largest layout run so far. */
    char *arena;
    size_t arena_size;
    size_t arena_live; /* blocks of it handed out now */
    bool arena_on;     /* the current run is served from it */
    /* Who holds the arena blocks still in use between runs (a forward
     * phase's saved state, whose backward phase may then run in it), or
     * NULL when none is. */
    const void *arena_owner;

    /* The accumulation slot (mg_exec_accumulate): one block, as large as
     * the largest output accumulated so far, that such an output's value
     * is computed into before it is added into the caller's memory. */
    char *slot;
    size_t slot_size;
    bool slot_busy;
} mg_pool;

void mgi_pool_init(mg_pool *p, const mg_backend *backend, size_t max_bytes);
/* Frees cached blocks and the arena; blocks still in use belong to the
 * caller. */
void mgi_pool_destroy(mg_pool *p);
/* A block of mg_pool_size_class(nbytes) bytes, or NULL (MG_ERR_NOMEM set by
 * the caller, who knows which tensor it was for). */
void *mgi_pool_alloc(mg_pool *p, size_t nbytes);
/* Return a block; nbytes as given to mgi_pool_alloc. */
void mgi_pool_free(mg_pool *p, void *ptr, size_t nbytes);
/* Gives cached blocks back, and the arena when no block of it is in use. */
void mgi_pool_trim(mg_pool *p);
/* Before a run whose layout needs `need` bytes of arena, on behalf of
 * owner (a forward phase's saved state, or NULL): true if the run is
 * served from the arena (grown to need if it was smaller). False, and the
 * run takes its blocks from the cache as before, when arena blocks are
 * held by someone other than owner (or any are held and the arena would
 * have to grow), the arena would pass max_bytes, or the system refuses it:
 * out of memory here is no error, the cache reports a real shortage
 * itself. */
bool mgi_pool_arena_begin(mg_pool *p, size_t need, const void *owner);
/* After the run: arena blocks still in use are owner's (the saved
 * tensors of a forward phase). */
void mgi_pool_arena_end(mg_pool *p, const void *owner);
/* The arena block at off for nbytes, counted in use in its size class as
 * mgi_pool_alloc counts it; NULL past max_bytes. mgi_pool_free returns it. */
void *mgi_pool_arena_take(mg_pool *p, size_t off, size_t nbytes);

/* The accumulation slot for a value of nbytes, counted in use in its size
 * class as mgi_pool_alloc counts a block (grown, one system allocation,
 * when it is smaller); NULL past max_bytes or out of memory. One value
 * at a time: mgi_pool_slot_give before the next take. */
void *mgi_pool_slot_take(mg_pool *p, size_t nbytes);
void mgi_pool_slot_give(mg_pool *p, size_t nbytes);

#endif
