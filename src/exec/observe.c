/*
 * observe.c - observers on the executor (memgrad_observe.h): attaching and
 * detaching them, and calling them from the step loop in exec.c. A
 * callback's error becomes the run's status with a message that says which
 * observer stopped the run and where.
 */
#include "observe.h"

#include "../rewrite/step_info.h"

#include <stdlib.h>
#include <string.h>

void mgi_observers_free(mgi_observers *o) {
    free(o->list);
    free(o->ids);
    memset(o, 0, sizeof *o);
}

mg_status mg_exec_observer_attach(mg_exec *ex, const mg_observer *obs,
                                  int *id) {
    if (!ex || !obs)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_observer_attach: %s is NULL",
                            ex ? "observer" : "executor");
    mgi_observers *o = mgi_exec_observers(ex);
    if (o->running)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_observer_attach: called from an "
                            "observer during a run");
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 4;
        mg_observer *list = realloc(o->list, (size_t)cap * sizeof *list);
        if (!list) goto nomem;
        o->list = list;
        int *ids = realloc(o->ids, (size_t)cap * sizeof *ids);
        if (!ids) goto nomem;
        o->ids = ids;
        o->cap = cap;
    }
    o->list[o->n] = *obs;
    o->ids[o->n] = o->next_id++;
    if (id) *id = o->ids[o->n];
    o->n++;
    return MG_OK;
nomem:
    return mg_set_error(MG_ERR_NOMEM, "mg_exec_observer_attach: out of memory");
}

mg_status mg_exec_observer_detach(mg_exec *ex, int id) {
    if (!ex)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_observer_detach: executor is NULL");
    mgi_observers *o = mgi_exec_observers(ex);
    if (o->running)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_observer_detach: called from an "
                            "observer during a run");
    for (int i = 0; i < o->n; i++)
        if (o->ids[i] == id) {
            memmove(&o->list[i], &o->list[i + 1],
                    (size_t)(o->n - i - 1) * sizeof *o->list);
            memmove(&o->ids[i], &o->ids[i + 1],
                    (size_t)(o->n - i - 1) * sizeof *o->ids);
            o->n--;
            return MG_OK;
        }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_exec_observer_detach: no observer %d is attached",
                        id);
}

bool mgi_observe_wanted(const mgi_observers *o, const mg_plan *p) {
    return o->n > 0 || mgi_hooks_any(p->g);
}

/* Observer i returned s (not MG_OK) at `where`: keep its own message if it
 * set one, and say who stopped the run. */
static mg_status stopped(const mgi_observers *o, int i, mg_status s,
                         const char *where) {
    char why[256];
    if (mg_last_status() == s && mg_last_error()[0])
        snprintf(why, sizeof why, "%s", mg_last_error());
    else snprintf(why, sizeof why, "%s", mg_status_str(s));
    return mg_set_error(s, "mg_exec_run: observer %d stopped the run %s: %s",
                        o->ids[i], where, why);
}

mg_status mgi_observe_run_start(mgi_observers *o, const mg_plan *p) {
    o->running = true;
    for (int i = 0; i < o->n; i++) {
        if (!o->list[i].run_start) continue;
        mg_clear_error();
        mg_status s = o->list[i].run_start(o->list[i].user, p);
        if (s != MG_OK) return stopped(o, i, s, "at its start");
    }
    return MG_OK;
}

static mg_status call_step(mgi_observers *o, const mg_step_info *info,
                           bool after) {
    for (int i = 0; i < o->n; i++) {
        mg_status (*fn)(void *, const mg_step_info *) =
            after ? o->list[i].after_op : o->list[i].before_op;
        if (!fn) continue;
        mg_clear_error();
        mg_status s = fn(o->list[i].user, info);
        if (s != MG_OK) {
            char where[224], label[160];
            snprintf(where, sizeof where, "%s step %d, %s",
                     after ? "after" : "before", info->step,
                     mgi_graph_tensor_label(info->plan->g, info->tensor, label,
                                            sizeof label));
            return stopped(o, i, s, where);
        }
    }
    return MG_OK;
}

mg_status mgi_observe_before(mgi_observers *o, const mg_plan *p, int32_t step,
                             const mg_pool *pool, size_t *before) {
    *before = pool->stats.bytes_in_use;
    if (o->n == 0) return MG_OK;
    mg_step_info info;
    mgi_plan_step_info(p, step, &info);
    info.bytes_before = *before;
    return call_step(o, &info, false);
}

mg_status mgi_observe_after(mgi_observers *o, const mg_plan *p, int32_t step,
                            size_t before, const mg_pool *pool, void *data) {
    /* Tensor hooks first: observers then see the step as it stands. A
     * hook reads the value, so a device must have finished computing it. */
    mg_status s = MG_OK;
    if (mgi_hooks_on(p->g, p->steps[step])) {
        /* A gradient hook may write into its tensor: into a view, that
         * would write into the block of another (plan_views in
         * src/rewrite/schedule.c makes no view of a hooked tensor). */
        const mg_tensor t = p->steps[step];
        if (p->step[step].view && (p->g->nodes[t].flags & MG_NODE_BACKWARD)) {
            char lt[160], lb[160];
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_exec_run: %s has a hook added after the plan was "
                "compiled, which made it a view of the memory of %s; a "
                "gradient hook may write into it, so compile the plan again",
                mgi_graph_tensor_label(p->g, t, lt, sizeof lt),
                mgi_graph_tensor_label(p->g, p->step[step].in[0], lb,
                                       sizeof lb));
        }
        s = pool->backend->synchronize(pool->backend->ctx);
        if (s == MG_OK) s = mgi_hooks_call(p->g, p->steps[step], data);
    }
    if (s != MG_OK || o->n == 0) return s;
    mg_step_info info;
    mgi_plan_step_info(p, step, &info);
    info.bytes_before = before;
    info.bytes_after = pool->stats.bytes_in_use;
    return call_step(o, &info, true);
}

mg_status mgi_observe_run_end(mgi_observers *o, const mg_plan *p, mg_status s) {
    for (int i = 0; i < o->n; i++) {
        if (!o->list[i].run_end) continue;
        if (s == MG_OK) {
            mg_clear_error();
            mg_status r = o->list[i].run_end(o->list[i].user, p, s);
            if (r != MG_OK) s = stopped(o, i, r, "at its end");
            continue;
        }
        /* The run had failed already: its message stands. */
        char keep[512];
        snprintf(keep, sizeof keep, "%s", mg_last_error());
        o->list[i].run_end(o->list[i].user, p, s);
        mg_set_error(s, "%s", keep);
    }
    o->running = false;
    return s;
}
