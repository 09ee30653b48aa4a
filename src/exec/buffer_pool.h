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

/* One request a run will make: its size class and the event times (pool
 * calls counted from the start of the run) at which it is handed out and
 * given back; died < 0 for a block still in use when the run ends. */
typedef struct mg_pool_rec {
    size_t size;
    int64_t born, died;
} mg_pool_rec;

/* A block in use, for the replay's overlap check. */
typedef struct mg_pool_live {
    char *ptr;
    size_t size;
    bool in_arena;
} mg_pool_live;

typedef struct mg_pool {
    const mg_backend *backend;
    size_t max_bytes;  /* 0: unbounded */
    mg_pool_bin *bins; /* sorted by size */
    size_t n_bins, cap_bins;
    mg_pool_stats stats;

    /* Replay (buffer_pool.c): one arena laid out for a run's requests. */
    bool in_run, diverged;
    mg_pool_live *live;
    size_t n_live, cap_live;
    char *arena;
    size_t arena_size, arena_live;
    size_t *lay_size, *lay_off; /* the requests the arena was made for */
    size_t n_lay, cursor;
    uint64_t lay_sig;
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
/* Bracket one run: recs are the n requests it will make, in order
 * (pool_replay.c derives them from the plan). The pool lays them out in
 * one arena, or keeps the arena it has for the same requests, and serves
 * the run from it. Out of memory here is no error: the run then takes its
 * blocks from the cache, which reports a real shortage itself. */
void mgi_pool_run_begin(mg_pool *p, const mg_pool_rec *recs, size_t n);
void mgi_pool_run_end(mg_pool *p);

/* mgi_pool_run_begin with the requests of a run of plan p whose caller
 * memory is in buf (per tensor id, NULL where the pool provides it). */
void mgi_pool_replay_begin(mg_pool *pool, const mg_plan *p, void *const *buf);

#endif
