/*
 * linear_ce.h - the sizes of linear_cross_entropy (issue 46 item 3) that
 * the graph and every backend must agree on: the default chunk of logits
 * rows and the workspace a chunk takes. The op table's workspace rule
 * (src/graph/ops_loss.c) and the CUDA backend's query (cuda/cuda_loss.cu)
 * call the same function, so the plan lends exactly what the kernels use
 * and the predicted peak counts it.
 */
#ifndef MG_LINEAR_CE_H
#define MG_LINEAR_CE_H

#include <stddef.h>
#include <stdint.h>

/* Logit elements a default chunk holds (8 MiB of float32): the chunk is
 * the op's whole activation memory, so it is kept small beside the
 * [N, V] logits it replaces, yet a chunk is still tens of rows at GPT-2's
 * 50257 words (41), enough for the GEMMs to run near full speed. */
#define MG_LCE_DEFAULT_CHUNK_ELEMS ((int64_t)1 << 21)

/* The rows per chunk that chunk_rows asks for over `rows` rows of `vocab`
 * logits: 0 means MG_LCE_DEFAULT_CHUNK_ELEMS / vocab (at least 1); any
 * request is cut to the row count, since a chunk past the last row would
 * only lend workspace nobody uses. Negative values are returned as they
 * are, for the shape rule to refuse. */
static inline int64_t mg_lce_chunk_rows(int64_t chunk_rows, int64_t rows,
                                        int64_t vocab) {
    if (chunk_rows < 0) return chunk_rows;
    if (chunk_rows == 0) {
        chunk_rows = vocab > 0 ? MG_LCE_DEFAULT_CHUNK_ELEMS / vocab : 1;
        if (chunk_rows < 1) chunk_rows = 1;
    }
    return chunk_rows < rows ? chunk_rows : rows;
}

/* Workspace bytes for chunks of `chunk` rows of `vocab` logits of `elt`
 * bytes: the logits chunk, and for the forward op one loss per row after
 * it (`rows` more elements), which are summed in a fixed order so that
 * the loss does not depend on the thread count; with an ignore_index
 * (`ignore`), one element more after those, where the CUDA kernels count
 * the rows that are not ignored (the mean's divisor, which lives on the
 * device with the labels). SIZE_MAX (an allocation that must fail) if it
 * does not fit; the shape rule refuses those. */
static inline size_t mg_lce_workspace(int64_t rows, int64_t vocab,
                                      int64_t chunk, size_t elt, int forward,
                                      int ignore) {
    if (rows < 1 || vocab < 1 || chunk < 1) return 0;
    const uint64_t max_elems = (uint64_t)PTRDIFF_MAX / elt;
    if ((uint64_t)chunk > max_elems / (uint64_t)vocab) return SIZE_MAX;
    uint64_t n = (uint64_t)chunk * (uint64_t)vocab;
    if (forward) {
        if ((uint64_t)rows > max_elems - n) return SIZE_MAX;
        n += (uint64_t)rows;
    }
    if (ignore) {
        if (n >= max_elems) return SIZE_MAX;
        n += 1;
    }
    return (size_t)(n * elt);
}

/* The op's workspace: mg_lce_workspace, but for a forward op given its
 * logits (a fourth input: the matmul the caller keeps anyway), which
 * makes no chunk, only the row losses (and the kept count). */
static inline size_t mg_lce_op_workspace(int64_t rows, int64_t vocab,
                                         int64_t chunk, size_t elt,
                                         int forward, int ignore,
                                         int logits_given) {
    if (!(forward && logits_given))
        return mg_lce_workspace(rows, vocab, chunk, elt, forward, ignore);
    if (rows < 1) return 0;
    if ((uint64_t)rows >= (uint64_t)PTRDIFF_MAX / elt) return SIZE_MAX;
    return (size_t)((uint64_t)(rows + (ignore ? 1 : 0)) * elt);
}

#endif
