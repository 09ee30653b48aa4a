/*
 * buffer_pool.h - the caching buffer pool the executor allocates every
 * intermediate from, over a backend's alloc/free.
 */
#ifndef MG_BUFFER_POOL_H
#define MG_BUFFER_POOL_H

#include "backend.h"

typedef struct mg_pool_bin {
    size_t size;  /* size class */
    void **free;  /* cached blocks of exactly this class */
    size_t n, cap;
} mg_pool_bin;

typedef struct mg_pool {
    const mg_backend *backend;
    size_t max_bytes; /* 0: unbounded */
    mg_pool_bin *bins; /* sorted by size */
    size_t n_bins, cap_bins;
    mg_pool_stats stats;
} mg_pool;

void mgi_pool_init(mg_pool *p, const mg_backend *backend, size_t max_bytes);
/* Frees cached blocks; blocks still in use belong to the caller. */
void mgi_pool_destroy(mg_pool *p);
/* A block of mg_pool_size_class(nbytes) bytes, or NULL (MG_ERR_NOMEM set by
 * the caller, who knows which tensor it was for). */
void *mgi_pool_alloc(mg_pool *p, size_t nbytes);
/* Return a block; nbytes as given to mgi_pool_alloc. */
void mgi_pool_free(mg_pool *p, void *ptr, size_t nbytes);
void mgi_pool_trim(mg_pool *p);

#endif
