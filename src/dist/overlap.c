/*
 * overlap.c - the observer that overlaps the gradient exchange with the
 * backward pass: after each step of a run it tells the buckets which
 * gradient just became final (mg_dist_grad_ready), so a bucket's
 * exchange starts as soon as its last gradient is computed instead of
 * after the whole run, and it lets MPI progress the started ones.
 *
 * A gradient bound to caller memory is written there by the step that
 * computes it and by no later step (the graph is single-assignment), and
 * tensor hooks run inside that step, before observers are told: so the
 * bytes a bucket packs are final.
 */
#include "dist.h"

#include "memgrad_observe.h"

static mg_status overlap_after_op(void *user, const mg_step_info *info) {
    mg_dist_buckets *b = user;
    if (mg_dist_buckets_index(b, info->tensor) >= 0) {
        mg_status s = mg_dist_grad_ready(b, info->tensor);
        if (s != MG_OK) return s;
    }
    /* MPI moves nonblocking collectives only inside MPI calls. */
    return mg_dist_progress(b);
}

mg_status mg_dist_buckets_observer(mg_dist_buckets *b, mg_observer *out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dist_buckets_observer: out is NULL");
    *out = (mg_observer){0};
    if (!b)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dist_buckets_observer: buckets is NULL");
    out->user = b;
    out->after_op = overlap_after_op;
    return MG_OK;
}
