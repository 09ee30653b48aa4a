/*
 * observe.h - what the executor's step loop calls when someone is watching
 * the run (memgrad_observe.h): the observers attached to an executor and,
 * from the graph, its tensor hooks. The loop tests one flag per step, set
 * once per run by mgi_observe_wanted, so an unwatched run pays nothing more.
 */
#ifndef MG_OBSERVE_H
#define MG_OBSERVE_H

#include "../rewrite/schedule.h"
#include "buffer_pool.h"
#include "memgrad_observe.h"

typedef struct mgi_observers {
    mg_observer *list;
    int *ids;
    int n, cap, next_id;
    bool running; /* attach and detach are refused from a callback */
} mgi_observers;

/* The executor's observers (exec.c owns the struct). */
mgi_observers *mgi_exec_observers(mg_exec *ex);
void mgi_observers_free(mgi_observers *o);

/* True if this run must call the functions below. */
bool mgi_observe_wanted(const mgi_observers *o, const mg_plan *p);
mg_status mgi_observe_run_start(mgi_observers *o, const mg_plan *p);
/* *before receives the bytes in use as the step starts, for _after. */
mg_status mgi_observe_before(mgi_observers *o, const mg_plan *p, int32_t step,
                             const mg_pool *pool, size_t *before);
/* data: the step's output buffer (tensor hooks read or replace it). */
mg_status mgi_observe_after(mgi_observers *o, const mg_plan *p, int32_t step,
                            size_t before, const mg_pool *pool, void *data);
/* Tells the observers how the run ended; returns the run's status. */
mg_status mgi_observe_run_end(mgi_observers *o, const mg_plan *p, mg_status s);

#endif
