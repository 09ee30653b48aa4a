/*
 * host_tier.c - the executor's host tier (issue 51): where offloaded
 * tensors wait between their copies, and the worker thread that copies
 * them while the steps run on the calling thread. On the CPU the "device"
 * arena is host memory too, so this tier is for testing plans without a
 * GPU: the order of copies and waits, the device and host peaks and the
 * bits come out as they would beside a CUDA copy stream (docs/offload.md).
 *
 * Copies run one at a time in the order they were queued, which is the
 * plan's order, so a copy back never overtakes its copy out. The worker
 * lives for one run: started by begin, drained and joined by end, so no
 * copy touches a block after the run has given it back.
 */
#include "host_tier.h"

#include <stdlib.h>
#include <string.h>

static void *worker_main(void *arg) {
    mgi_host_tier *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (h->next == h->n_jobs && !h->stop)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->next == h->n_jobs) break; /* stopped and drained */
        const mgi_host_job j = h->jobs[h->next];
        pthread_mutex_unlock(&h->mu);
        memcpy(j.dst, j.src, j.n);
        pthread_mutex_lock(&h->mu);
        h->done[j.event] = 1;
        h->next++;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void queue(mgi_host_tier *h, void *dst, const void *src, size_t n,
                  int32_t event) {
    pthread_mutex_lock(&h->mu);
    h->jobs[h->n_jobs++] = (mgi_host_job){dst, src, n, event};
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void wait_event(mgi_host_tier *h, int32_t event) {
    pthread_mutex_lock(&h->mu);
    while (!h->done[event]) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static mg_status nomem(const char *what) {
    return mg_set_error(MG_ERR_NOMEM, "mg_exec_run: out of memory for %s",
                        what);
}

const mg_offload_plan *mgi_host_tier_copies(const mg_plan *p, int32_t *base) {
    *base = p->offload ? 0 : p->phase_base;
    return p->offload ? p->offload : p->phase_offload;
}

mg_status mgi_host_tier_begin(mgi_host_tier *h, const mg_offload_plan *o,
                              mg_device dev, char *mem_lent) {
    if (dev != MG_DEVICE_CPU)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "mg_exec_run: the plan offloads saved tensors, "
                            "and this build offloads on the CPU host tier "
                            "only (a CUDA copy stream is not written yet)");
    if (!mem_lent && o->host_bytes > h->mem_size) {
        char *mem = malloc(o->host_bytes);
        if (!mem) return nomem("the host tier");
        free(h->mem);
        h->stats.bytes_reserved -= h->mem_size;
        h->mem = mem;
        h->mem_size = o->host_bytes;
        h->stats.bytes_reserved += o->host_bytes;
    }
    h->use = mem_lent ? mem_lent : h->mem;
    h->in_use_begin = h->stats.bytes_in_use;
    if (o->n > h->cap) {
        mgi_host_job *jobs = malloc(2 * (size_t)o->n * sizeof *jobs);
        uint8_t *done = malloc(2 * (size_t)o->n);
        void **pre = malloc((size_t)o->n * sizeof *pre);
        if (!jobs || !done || !pre) {
            free(jobs);
            free(done);
            free(pre);
            return nomem("the host tier's copies");
        }
        free(h->jobs);
        free(h->done);
        free(h->prefetch);
        h->jobs = jobs;
        h->done = done;
        h->prefetch = pre;
        h->cap = o->n;
    }
    memset(h->done, 0, 2 * (size_t)o->n);
    memset(h->prefetch, 0, (size_t)o->n * sizeof *h->prefetch);
    h->n_jobs = h->next = 0;
    h->stop = false;
    if (pthread_mutex_init(&h->mu, NULL) != 0)
        return mg_set_error(MG_ERR_INTERNAL,
                            "mg_exec_run: cannot make the host tier's mutex");
    if (pthread_cond_init(&h->cv, NULL) != 0) {
        pthread_mutex_destroy(&h->mu);
        return mg_set_error(MG_ERR_INTERNAL, "mg_exec_run: cannot make the "
                                             "host tier's condition variable");
    }
    if (pthread_create(&h->worker, NULL, worker_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        return mg_set_error(MG_ERR_INTERNAL,
                            "mg_exec_run: cannot start the host tier's copy "
                            "thread");
    }
    h->running = true;
    return MG_OK;
}

/* A block of nbytes at the arena offset off, as exec.c's step_block. */
static void *take_block(mg_pool *pool, size_t off, size_t nbytes) {
    if (pool->arena_on && off != SIZE_MAX)
        return mgi_pool_arena_take(pool, off, nbytes);
    return mgi_pool_alloc(pool, nbytes);
}

mg_status mgi_host_tier_before(mgi_host_tier *h, const mg_offload_plan *o,
                               int32_t base, const mg_plan *p, int32_t s,
                               void **buf, mg_pool *pool) {
    char label[160];
    s += base;
    for (int32_t k = 0; k < o->n; k++) {
        const mg_offload_copy *c = &o->copy[k];
        if (c->in_issue != s) continue;
        const size_t nbytes = mg_plan_nbytes(p, c->t);
        if (!(h->prefetch[k] = take_block(pool, c->in_off, nbytes)))
            return mg_set_error(
                MG_ERR_NOMEM,
                "mg_exec_run: out of memory allocating %zu bytes to copy %s "
                "back (%zu in use, limit %zu)",
                nbytes, mgi_graph_tensor_label(p->g, c->t, label, sizeof label),
                pool->stats.bytes_in_use, pool->max_bytes);
        queue(h, h->prefetch[k], h->use + c->host_off, nbytes, c->event_in);
    }
    for (int32_t k = 0; k < o->n; k++) {
        const mg_offload_copy *c = &o->copy[k];
        if (c->in_wait != s) continue;
        wait_event(h, c->event_in);
        buf[c->t] = h->prefetch[k];
        h->prefetch[k] = NULL;
        h->stats.bytes_in_use -= c->bytes;
        h->stats.copies_in++;
    }
    return MG_OK;
}

mg_status mgi_host_tier_after(mgi_host_tier *h, const mg_offload_plan *o,
                              int32_t base, const mg_plan *p, int32_t s,
                              void **buf, mg_pool *pool) {
    s += base;
    for (int32_t k = 0; k < o->n; k++) {
        const mg_offload_copy *c = &o->copy[k];
        if (c->out_issue != s) continue;
        queue(h, h->use + c->host_off, buf[c->t], mg_plan_nbytes(p, c->t),
              c->event_out);
        h->stats.bytes_in_use += c->bytes;
        if (h->stats.bytes_in_use > h->stats.peak_bytes_in_use)
            h->stats.peak_bytes_in_use = h->stats.bytes_in_use;
    }
    for (int32_t k = 0; k < o->n; k++) {
        const mg_offload_copy *c = &o->copy[k];
        if (c->out_free != s) continue;
        wait_event(h, c->event_out);
        h->stats.copies_out++;
        mgi_pool_free(pool, buf[c->t], mg_plan_nbytes(p, c->t));
        buf[c->t] = NULL;
    }
    return MG_OK;
}

void mgi_host_tier_end(mgi_host_tier *h, const mg_offload_plan *o,
                       const mg_plan *p, mg_pool *pool, bool ok) {
    if (!h->running) return;
    pthread_mutex_lock(&h->mu);
    h->stop = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->worker, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    h->running = false;
    h->use = NULL;
    /* after a failure: blocks and host bytes the run did not hand back */
    for (int32_t k = 0; k < o->n; k++)
        if (h->prefetch[k]) {
            mgi_pool_free(pool, h->prefetch[k],
                          mg_plan_nbytes(p, o->copy[k].t));
            h->prefetch[k] = NULL;
        }
    if (!ok) h->stats.bytes_in_use = h->in_use_begin;
}

char *mgi_host_tier_lend(mgi_host_tier *h, size_t bytes, size_t *size) {
    if (h->mem && h->mem_size >= bytes) {
        char *m = h->mem;
        *size = h->mem_size;
        h->mem = NULL;
        h->mem_size = 0;
        return m;
    }
    char *m = malloc(bytes ? bytes : 1);
    if (!m) return NULL;
    *size = bytes;
    h->stats.bytes_reserved += bytes;
    return m;
}

void mgi_host_tier_give_back(mgi_host_tier *h, char *mem, size_t size,
                             size_t in_use) {
    h->stats.bytes_in_use -= in_use;
    if (!mem) return;
    if (!h->running && size > h->mem_size) { /* the larger one stays */
        char *old = h->mem;
        const size_t old_size = h->mem_size;
        h->mem = mem;
        h->mem_size = size;
        mem = old;
        size = old_size;
    }
    free(mem);
    h->stats.bytes_reserved -= size;
}

void mgi_host_tier_destroy(mgi_host_tier *h) {
    free(h->mem);
    free(h->jobs);
    free(h->done);
    free(h->prefetch);
    memset(h, 0, sizeof *h);
}
