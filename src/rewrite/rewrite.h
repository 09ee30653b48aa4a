/*
 * rewrite.h - internal interface of the rewriter: autodiff and the
 * checkpoint policies that decide what the forward pass keeps.
 */
#ifndef MG_REWRITE_H
#define MG_REWRITE_H

#include "../graph/graph.h"

/* Validate the checkpoints argument of mg_gradients. NULL and
 * MG_CKPT_NONE mean plain backprop. */
mg_status mg_checkpoints_check(const mg_graph *g, const mg_checkpoints *c);

#endif
