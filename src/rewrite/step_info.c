/*
 * step_info.c - what a plan's step is, in the words memgrad_observe.h uses:
 * its op, tensor, phase (forward, recompute or backward), whether it is a
 * checkpoint, its workspace and cost. The plan side answers this so that
 * the executor and its observers never read graph nodes themselves.
 */
#include "step_info.h"

mg_phase mgi_plan_step_phase(const mg_plan *p, int32_t step) {
    unsigned f = p->g->nodes[p->steps[step]].flags;
    if (f & MG_NODE_RECOMPUTE) return MG_PHASE_RECOMPUTE;
    if (f & MG_NODE_BACKWARD) return MG_PHASE_BACKWARD;
    return MG_PHASE_FORWARD;
}

void mgi_plan_step_info(const mg_plan *p, int32_t step, mg_step_info *info) {
    mg_tensor t = p->steps[step];
    const mg_node *n = &p->g->nodes[t];
    *info = (mg_step_info){
        .plan = p,
        .step = (int)step,
        .n_steps = (int)p->n_steps,
        /* a fused step's: its tensor's, the chain's last op (its flops
         * and bytes are the chain's) */
        .op = mgi_op_str((mg_op)n->op),
        .tensor = t,
        .tensor_name = mgi_graph_name(p->g, t),
        .phase = mgi_plan_step_phase(p, step),
        .is_checkpoint =
            (n->flags & (MG_NODE_CHOSEN | MG_NODE_CHECKPOINT)) != 0,
        .workspace_bytes =
            p->step[step].work_units
                ? mg_pool_size_class(mg_plan_step_work(&p->step[step]))
                : 0,
    };
    mgi_plan_step_cost(p, step, &info->flops, &info->bytes_moved);
}

const char *mg_phase_name(mg_phase phase) {
    switch (phase) {
    case MG_PHASE_FORWARD: return "forward";
    case MG_PHASE_RECOMPUTE: return "recompute";
    case MG_PHASE_BACKWARD: return "backward";
    }
    return "?";
}
