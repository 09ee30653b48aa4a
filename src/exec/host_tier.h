/*
 * host_tier.h - the executor's host tier (issue 51): host memory outside
 * the pool's arena where a plan's offloaded tensors wait between the
 * forward and the backward pass, and the worker thread their copies run
 * on. It follows the copies p->offload lists (src/rewrite/offload.h) step
 * by step and decides nothing.
 *
 * A plan run in two calls (mg_exec_forward, mg_exec_backward) runs its
 * phases with the plan's copies (mg_plan.phase_offload, numbered from
 * phase_base): the forward phase's copies out land in host memory that
 * its saved state holds (lent by the tier) until the backward phase has
 * copied them back, so several forward phases may be outstanding.
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
    char *mem;       /* the tier's own host memory, laid out by the plan */
    size_t mem_size; /* its bytes; stats.bytes_reserved adds lent blocks */
    mg_host_stats stats;
    /* During a run with offload (between begin and end): */
    bool running;
    char *use;           /* the host memory of this run: mem, or lent */
    size_t in_use_begin; /* stats.bytes_in_use when the run began */
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

/* The copies a run of p follows: its own, or in a phase its plan's; and
 * the number in them of p's first step (*base). NULL when none. */
const mg_offload_plan *mgi_host_tier_copies(const mg_plan *p, int32_t *base);

/* Start a run of p (mgi_host_tier_copies(p) non-NULL: o, base) on an
 * executor of device dev, with the host memory mem (a forward phase's
 * lent block, held by its saved state), or NULL: the tier's own. */
mg_status mgi_host_tier_begin(mgi_host_tier *h, const mg_offload_plan *o,
                              mg_device dev, char *mem);
/* Before step s of p (s + base in o's numbering): prefetch blocks and
 * copies in, and waits on them. buf: the executor's per tensor buffers. */
mg_status mgi_host_tier_before(mgi_host_tier *h, const mg_offload_plan *o,
                               int32_t base, const mg_plan *p, int32_t s,
                               void **buf, mg_pool *pool);
/* After step s and its releases: copies out, and waits on them. */
mg_status mgi_host_tier_after(mgi_host_tier *h, const mg_offload_plan *o,
                              int32_t base, const mg_plan *p, int32_t s,
                              void **buf, mg_pool *pool);
/* End the run: waits for every queued copy, stops the worker, and gives
 * back the prefetch blocks not handed over (after a failure). ok: the run
 * succeeded; else the host bytes in use go back to what they were when
 * it began (a forward phase's copies are dropped with its saved state, a
 * backward phase's host blocks stay with its saved state). */
void mgi_host_tier_end(mgi_host_tier *h, const mg_offload_plan *o,
                       const mg_plan *p, mg_pool *pool, bool ok);
/* Host memory of at least bytes for a forward phase's saved state: the
 * tier's own block when it is large enough and not lent, else a new one
 * (counted in stats.bytes_reserved while it lives); its size in *size.
 * NULL when out of memory. */
char *mgi_host_tier_lend(mgi_host_tier *h, size_t bytes, size_t *size);
/* A lent block comes back (the saved state is done with it), with
 * in_use of its bytes still counted in use (offloaded tensors no
 * backward phase copied back): the tier keeps it as its own when it has
 * none as large, else it is freed. */
void mgi_host_tier_give_back(mgi_host_tier *h, char *mem, size_t size,
                             size_t in_use);
void mgi_host_tier_destroy(mgi_host_tier *h);

#endif
