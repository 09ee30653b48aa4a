/*
 * attn_tiles.h - the tiling of the fused attention kernels, shared by the
 * op's workspace rule (src/graph/ops_attention.c) and the kernels that
 * borrow that workspace (src/exec/cpu/cpu_attention.c,
 * cuda/cuda_attention.cu), so that the plan lends exactly what they use.
 *
 * The CPU forward runs one task per (batch entry, block of MG_ATTN_BQ query
 * rows), each with a scores tile of MG_ATTN_BQ x MG_ATTN_BK and the row
 * maxima and sums; the CPU backward one task per batch entry, with two
 * tiles (weights and their gradient) and a row of D = rowsum(do * o). A
 * task's scratch is one of at most MG_ATTN_SLOTS slots, one per thread, so
 * the bytes do not depend on the thread count. The CUDA backward keeps D
 * for every row of every batch entry.
 */
#ifndef MG_ATTN_TILES_H
#define MG_ATTN_TILES_H

#include <stddef.h>
#include <stdint.h>

#define MG_ATTN_BQ 64
#define MG_ATTN_BK 128
#define MG_ATTN_SLOTS 64

/* Elements of one slot of the CPU forward (grad 0) or backward (grad 1). */
static inline int64_t mg_attn_slot_elems(int64_t lq, int grad) {
    const int64_t tile = (int64_t)MG_ATTN_BQ * MG_ATTN_BK;
    return grad ? 2 * tile + lq : tile + 2 * MG_ATTN_BQ;
}

/* Slots the CPU kernel uses for `tasks` tasks. */
static inline int64_t mg_attn_slots(int64_t tasks) {
    return tasks < MG_ATTN_SLOTS ? tasks : MG_ATTN_SLOTS;
}

static inline int64_t mg_attn_tasks(int64_t batch, int64_t lq, int grad) {
    return grad ? batch : batch * ((lq + MG_ATTN_BQ - 1) / MG_ATTN_BQ);
}

/* Workspace bytes of the attention op (grad 0) or attention_grad (grad 1)
 * on any backend: the CPU's slots or the CUDA backward's D, the larger. */
static inline size_t mg_attn_workspace(int64_t batch, int64_t lq, int grad,
                                       size_t elem) {
    const int64_t cpu = mg_attn_slots(mg_attn_tasks(batch, lq, grad)) *
                        mg_attn_slot_elems(lq, grad);
    const int64_t cuda = grad ? batch * lq : 0;
    return (size_t)(cpu > cuda ? cpu : cuda) * elem;
}

#endif
