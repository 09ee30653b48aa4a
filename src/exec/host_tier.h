/*
 * host_tier.h - the executor's host tier (issue 51): host memory outside
 * the pool's arena where a plan's offloaded tensors wait between the
 * forward and the backward pass, and the worker thread their copies run
 * on. It follows the copies p->offload lists (src/rewrite/offload.h) step
 * by step and decides nothing.
 */
#ifndef MG_HOST_TIER_H
#define MG_HOST_TIER_H

#include "../rewrite/offload.h"
#include "buffer_pool.h"

#include <pthread.h>

typedef struct mgi_host_job {
    void *dst;
    const void *src;
    size_t n;
    int32_t event;
} mgi_host_job;

typedef struct mgi_host_tier {
    char *mem; /* bytes_reserved of host memory, laid out by the plan */
    mg_host_stats stats;
    /* During a run with offload (between begin and end): */
    bool running;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mgi_host_job *jobs;   /* queued in plan order; the worker runs them in
                             that order */
    int32_t n_jobs, next; /* queued; the worker's next */
    bool stop;
    uint8_t *done;   /* per event: set by the worker */
    void **prefetch; /* per copy: its prefetch block, until handed over */
    int32_t cap;     /* copies the arrays hold */
} mgi_host_tier;

/* Start a run of p (p->offload non-NULL) on an executor of device dev. */
mg_status mgi_host_tier_begin(mgi_host_tier *h, const mg_plan *p,
                              mg_device dev);
/* Before step s: prefetch blocks and copies in, and waits on them. buf:
 * the executor's per tensor buffers. */
mg_status mgi_host_tier_before(mgi_host_tier *h, const mg_plan *p, int32_t s,
                               void **buf, mg_pool *pool);
/* After step s and its releases: copies out, and waits on them. */
mg_status mgi_host_tier_after(mgi_host_tier *h, const mg_plan *p, int32_t s,
                              void **buf, mg_pool *pool);
/* End the run: waits for every queued copy, stops the worker, and gives
 * back the prefetch blocks not handed over (after a failure). */
void mgi_host_tier_end(mgi_host_tier *h, const mg_plan *p, mg_pool *pool);
void mgi_host_tier_destroy(mgi_host_tier *h);

#endif
