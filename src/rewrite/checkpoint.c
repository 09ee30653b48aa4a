/*
 * checkpoint.c - the checkpoints argument of mg_gradients.
 *
 * Plain backprop (NULL or MG_CKPT_NONE) is what this build does. The
 * collection, memory and speed policies choose which forward tensors to
 * keep and have the rewriter recompute the rest; until that rewriter lands
 * they are refused with MG_ERR_UNSUPPORTED rather than silently ignored, so
 * a caller never gets plain-backprop memory while asking for less.
 */
#include "rewrite.h"

static const char *policy_name(mg_ckpt_policy p) {
    switch (p) {
    case MG_CKPT_NONE: return "none";
    case MG_CKPT_COLLECTION: return "collection";
    case MG_CKPT_MEMORY: return "memory";
    case MG_CKPT_SPEED: return "speed";
    }
    return "?";
}

mg_status mg_checkpoints_check(const mg_graph *g, const mg_checkpoints *c) {
    if (!c || c->policy == MG_CKPT_NONE) return MG_OK;
    switch (c->policy) {
    case MG_CKPT_COLLECTION:
        if (c->n_tensors < 0 || (c->n_tensors > 0 && !c->tensors))
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_gradients: collection of %d checkpoints "
                                "with tensors %s",
                                c->n_tensors, c->tensors ? "set" : "NULL");
        for (int i = 0; i < c->n_tensors; i++) {
            mg_status s = mg_graph_check_id(g, c->tensors[i],
                                            "mg_gradients (checkpoint)");
            if (s != MG_OK) return s;
        }
        /* fall through */
    case MG_CKPT_MEMORY:
    case MG_CKPT_SPEED:
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "mg_gradients: checkpoint policy '%s' is not "
                            "implemented yet; use NULL or MG_CKPT_NONE",
                            policy_name(c->policy));
    default:
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: unknown checkpoint policy %d",
                            (int)c->policy);
    }
}
