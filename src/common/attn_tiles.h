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
 * the bytes do not depend on the thread count.
 *
 * The CUDA kernels take whole score matrices by cuBLAS: for a chunk of
 * batch entries at a time, s = q k^T into the workspace, a row kernel for
 * the softmax, then o = p v (forward), or dp = do v^T beside s and then
 * dv, dq and dk by GEMM (backward, after D = rowsum(do * o) - glse for
 * every row). The chunk is as many batch entries as fit in the CPU's
 * MG_ATTN_SLOTS tiles (twice that for the backward's two matrices, less
 * D), so that the shared rule rarely lends more than the CPU asks. Where
 * one batch entry's scores alone exceed that, the CUDA kernels fall back
 * to a block per query (and key) row, which keeps D only.
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

/* Elements of the CPU's tiles that the CUDA chunk may fill. */
#define MG_ATTN_CUDA_ELEMS ((int64_t)MG_ATTN_SLOTS * MG_ATTN_BQ * MG_ATTN_BK)

/* Elements the CUDA backward gives D: batch * lq, rounded up to whole
 * 128-byte lines of f32 so that the score matrices after it stay aligned. */
static inline int64_t mg_attn_cuda_d_elems(int64_t batch, int64_t lq) {
    return (batch * lq + 31) / 32 * 32;
}

/* Batch entries per CUDA GEMM round of the forward (grad 0) or backward
 * (grad 1); 0: one entry's score matrices exceed the cap, so the CUDA
 * kernels go by rows. */
static inline int64_t mg_attn_cuda_chunk(int64_t batch, int64_t lq, int64_t lk,
                                         int grad) {
    const int64_t mats = grad ? 2 : 1, cap = mats * MG_ATTN_CUDA_ELEMS;
    if (batch <= 0 || lq <= 0 || lk <= 0 || lq > cap / lk / mats) return 0;
    const int64_t per = mats * lq * lk;
    const int64_t d = grad ? mg_attn_cuda_d_elems(batch, lq) : 0;
    const int64_t c = cap - d >= per ? (cap - d) / per : 1;
    return c < batch ? c : batch;
}

/* Elements of the CUDA kernels' workspace: D (backward) and the chunk's
 * score matrices, or D alone when they go by rows. */
static inline int64_t mg_attn_cuda_elems(int64_t batch, int64_t lq, int64_t lk,
                                         int grad) {
    const int64_t c = mg_attn_cuda_chunk(batch, lq, lk, grad);
    if (c == 0) return grad ? batch * lq : 0;
    return (grad ? mg_attn_cuda_d_elems(batch, lq) : 0) +
           c * (grad ? 2 : 1) * lq * lk;
}

/* Workspace bytes of the attention op (grad 0) or attention_grad (grad 1)
 * on any backend: the CPU's slots or the CUDA kernels', the larger. */
static inline size_t mg_attn_workspace(int64_t batch, int64_t lq, int64_t lk,
                                       int grad, size_t elem) {
    const int64_t cpu = mg_attn_slots(mg_attn_tasks(batch, lq, grad)) *
                        mg_attn_slot_elems(lq, grad);
    const int64_t cuda = mg_attn_cuda_elems(batch, lq, lk, grad);
    return (size_t)(cpu > cuda ? cpu : cuda) * elem;
}

#endif
