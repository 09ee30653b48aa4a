/*
 * group_reduce.h - how a reduction over groups of many elements is split
 * into chunks, so that a GPU kernel can give a batchnorm channel (all
 * N * H * W of its elements) or a bias gradient's sum to many blocks
 * instead of one. The op table's workspace rules (src/graph) and the CUDA
 * kernels (cuda/) both read it, so the plan lends exactly the partial sums
 * the kernels write.
 *
 * The split depends only on the shape: a recomputed op and its original
 * add the same chunks in the same order, so the results are bit-equal run
 * to run and checkpointed gradients equal plain ones.
 */
#ifndef MG_GROUP_REDUCE_H
#define MG_GROUP_REDUCE_H

#include "ir.h"

#include <stddef.h>
#include <stdint.h>

/* About this many blocks in all (a few per multiprocessor of an H100),
 * and at least this many elements per chunk, so that the partial sums stay
 * a small fraction of the reads. */
enum { MG_GROUP_BLOCKS = 512, MG_GROUP_CHUNK_MIN = 4096 };

/* Chunks per group for `groups` groups of `count` elements each: 1 (one
 * block per group, no workspace) where there are already enough groups or
 * the groups are small. */
static inline int64_t mg_group_chunks(int64_t groups, int64_t count) {
    if (groups <= 0 || groups >= MG_GROUP_BLOCKS / 2 ||
        count < 2 * (int64_t)MG_GROUP_CHUNK_MIN)
        return 1;
    const int64_t want = (MG_GROUP_BLOCKS + groups - 1) / groups;
    const int64_t most = count / MG_GROUP_CHUNK_MIN;
    return want < most ? want : most;
}

/* Bytes of `parts` partial sums (doubles) per chunk, or 0 when the groups
 * are not split. */
static inline size_t mg_group_workspace(int64_t groups, int64_t count,
                                        int parts) {
    const int64_t p = mg_group_chunks(groups, count);
    return p > 1 ? (size_t)parts * (size_t)groups * (size_t)p * sizeof(double)
                 : 0;
}

/* The axes of x that a sum or mean into ny elements reduces, in
 * reduced[]: attrs->axes, or every axis when there are none and y is
 * smaller than x (naxes 0 is "every axis" in the API, and the graph may
 * pass it through). Returns the place in attrs->axes of the first axis
 * outside x, or -1. The CPU and CUDA kernels and the workspace rule below
 * read the attributes alike. */
static inline int mg_reduce_axes(const mg_tdesc *x, const mg_attrs *at,
                                 int64_t ny, bool reduced[MG_MAX_DIMS]) {
    int64_t nx = 1;
    for (int i = 0; i < x->ndim; i++) nx *= x->shape[i];
    for (int i = 0; i < MG_MAX_DIMS; i++)
        reduced[i] = i < x->ndim && at->naxes == 0 && nx != ny;
    for (int j = 0; j < at->naxes; j++) {
        if (at->axes[j] < 0 || at->axes[j] >= x->ndim) return j;
        reduced[at->axes[j]] = true;
    }
    return -1;
}

/* sum and mean of x into y (ny elements) as the [A, B, C] view of x that
 * keeps B: true when the kept axes (size-1 axes ignored) are one run, so
 * that y[b] adds x[(i * B + b) * C + j] over i < A, j < C. With no kept
 * axis, B = 1. */
static inline bool mg_reduce_abc(const mg_tdesc *x, const mg_attrs *at,
                                 int64_t ny, int64_t abc[3]) {
    bool reduced[MG_MAX_DIMS];
    if (mg_reduce_axes(x, at, ny, reduced) >= 0) return false;
    /* phase 0: reduced axes before the kept run (A); 1: the run (B);
     * 2: reduced axes after it (C) */
    int64_t v[3] = {1, 1, 1};
    int phase = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i] == 1) continue;
        if (!reduced[i]) {
            if (phase == 2) return false;
            phase = 1;
        } else if (phase == 1) {
            phase = 2;
        }
        v[phase] *= x->shape[i];
    }
    if (v[1] != ny) return false;
    abc[0] = v[0], abc[1] = v[1], abc[2] = v[2];
    return true;
}

/* The partial sums a sum or mean over x takes on the GPU (one per chunk). */
static inline size_t mg_reduce_workspace(const mg_tdesc *x, const mg_attrs *at,
                                         int64_t ny) {
    int64_t abc[3];
    if (!mg_reduce_abc(x, at, ny, abc)) return 0;
    return mg_group_workspace(abc[1], abc[0] * abc[2], 1);
}

/* Batchnorm's groups are x's channels (axis 1) of N * H * W elements; its
 * forward keeps 2 partial sums per chunk (of x and x^2), its gradients 4
 * (those, and of the gradient and the gradient times x). */
static inline size_t mg_batchnorm_workspace(const mg_tdesc *x, int parts) {
    if (x->ndim < 2 || x->shape[1] <= 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < x->ndim; i++) n *= x->shape[i];
    return mg_group_workspace(x->shape[1], n / x->shape[1], parts);
}

/* Layernorm's gamma gradient adds gy * xhat down each of its C columns
 * over all R rows: one thread per column leaves a GPU nearly idle (C = 256
 * is one block), so the rows are split into chunks of at least
 * MG_COLUMN_ROWS_MIN, for about MG_COLUMN_THREADS threads in all, each
 * summing its chunk of one column. Returns the chunks, 1 where that split
 * would not help. */
enum { MG_COLUMN_THREADS = 32768, MG_COLUMN_ROWS_MIN = 16 };
static inline int64_t mg_column_chunks(int64_t rows, int64_t cols) {
    if (cols <= 0 || rows < 2 * (int64_t)MG_COLUMN_ROWS_MIN ||
        cols >= MG_COLUMN_THREADS / 2)
        return 1;
    const int64_t want = (MG_COLUMN_THREADS + cols - 1) / cols;
    const int64_t most = rows / MG_COLUMN_ROWS_MIN;
    return want < most ? want : most;
}

/* layernorm_grad_gamma's workspace on the GPU: each row's mean, mean_lo
 * and rstd (elem bytes each), rounded up to 8 bytes, then a double per
 * chunk and column when the rows are split. */
static inline size_t mg_layernorm_gamma_stats_bytes(int64_t rows, size_t elem) {
    return (3 * (size_t)rows * elem + 7) & ~(size_t)7;
}
static inline size_t mg_layernorm_gamma_workspace(int64_t rows, int64_t cols,
                                                  size_t elem) {
    const int64_t p = mg_column_chunks(rows, cols);
    return mg_layernorm_gamma_stats_bytes(rows, elem) +
           (p > 1 ? (size_t)p * (size_t)cols * sizeof(double) : 0);
}

#endif
