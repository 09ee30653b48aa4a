/*
 * buckets_nccl.c - the data path of the gradient buckets (buckets.c) for
 * a handle from mg_dist_comm_from_nccl: the same reduce-scatter without
 * the reduce, sum in rank order, all-gather as over MPI, with NCCL moving
 * device bytes and a CUDA kernel adding them.
 *
 * Per bucket, on the handle's own stream:
 *   1. pack: cudaMemcpyAsync of each gradient into the device staging
 *      buffer `dev_flat`, after the executor's queued work
 *      (mgi_nccl_after_device_work);
 *   2. all-to-all: ncclSend of chunk r to rank r and ncclRecv of every
 *      rank's copy of our chunk, in one ncclGroupStart/ncclGroupEnd;
 *   3. average: mgi_nccl_average sums the N copies in rank order 0..N-1
 *      (f32 in double), divides by N, into our chunk of dev_flat;
 *   4. ncclAllGather of the chunks, in place;
 *   5. after the ranks agree on their statuses (MPI), unpack by
 *      cudaMemcpyAsync into the gradients.
 * NCCL never adds (not ncclAllReduce, whose order of addition follows its
 * ring or tree and the algorithm it picks), so every element is averaged
 * once, by one rank, in a fixed order: the same bits on every rank, and
 * the same as the MPI path's, whatever the timing.
 */
#include "nccl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of one bucket's chunk. */
static size_t chunk_bytes(const bucket *k) { return k->chunk * k->esize; }

mg_status mgi_nccl_buckets_alloc(mg_dist_buckets *b) {
    const char *who = "mg_dist_buckets_new";
    mg_dist_comm *c = b->c;
    mgi_nccl *n = c->nccl;
    /* Local until the agreement: a failure here is this rank's status,
     * not a broken handle. */
    cudaError_t e = cudaSetDevice(n->device);
    for (int i = 0; e == cudaSuccess && i < b->n_buckets; i++) {
        bucket *k = &b->b[i];
        /* ceil(numel / size) elements per rank; ncclAllGather needs equal
         * chunks, so the last rank's may end in padding. */
        k->chunk = (size_t)((k->numel + c->size - 1) / c->size);
        if (k->chunk == 0) k->chunk = 1;
        size_t bytes = k->chunk * (size_t)c->size * k->esize;
        e = cudaMalloc(&k->dev_flat, bytes);
        if (e == cudaSuccess) e = cudaMalloc(&k->dev_recv, bytes);
        /* The padding is sent and averaged like the rest: make it zeros,
         * not whatever the allocation held. Packing never writes it. */
        if (e == cudaSuccess)
            e = cudaMemsetAsync(k->dev_flat, 0, bytes, n->stream);
        if (e == cudaSuccess) b->stats.buffer_bytes += 2 * bytes;
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(n->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mg_set_error(
            e == cudaErrorMemoryAllocation ? MG_ERR_NOMEM : MG_ERR_INTERNAL,
            "%s: rank %d: device staging for the buckets "
            "(%zu bytes so far): %s",
            who, c->rank, b->stats.buffer_bytes, cudaGetErrorString(e));
    }
    return MG_OK;
}

void mgi_nccl_buckets_free(mg_dist_buckets *b) {
    mgi_nccl *n = b->c->nccl;
    cudaSetDevice(n->device);
    /* Nothing of ours may still run on these buffers: every call that
     * queues work waits for it, or aborts the communicator on failure.
     * A broken handle's stream is drained too (the abort ended its NCCL
     * kernels) before cudaFree. */
    cudaStreamSynchronize(n->stream);
    for (int i = 0; i < b->n_buckets; i++) {
        if (b->b[i].dev_flat) cudaFree(b->b[i].dev_flat);
        if (b->b[i].dev_recv) cudaFree(b->b[i].dev_recv);
        b->b[i].dev_flat = b->b[i].dev_recv = NULL;
    }
    cudaGetLastError();
}

mg_status mgi_nccl_bucket_start(mg_dist_buckets *b, int i, const char *who) {
    mg_dist_comm *c = b->c;
    mgi_nccl *n = c->nccl;
    bucket *k = &b->b[i];
    mg_status s = mgi_nccl_enter(c, who);
    if (s == MG_OK) s = mgi_nccl_after_device_work(c, who);
    if (s != MG_OK) return s;
    char *flat = k->dev_flat, *recv = k->dev_recv;
    for (int j = k->first; j < k->first + k->n; j++) {
        const grad_slot *sl = &b->slots[j];
        cudaError_t e = cudaMemcpyAsync(flat + (size_t)sl->offset * k->esize,
                                        sl->data, (size_t)sl->numel * k->esize,
                                        cudaMemcpyDeviceToDevice, n->stream);
        if (e != cudaSuccess)
            return mgi_nccl_cuda_fail(c, who, "cudaMemcpyAsync (pack)", e);
    }
    /* Our own chunk does not travel. */
    size_t cb = chunk_bytes(k);
    int me = c->rank;
    cudaError_t e =
        cudaMemcpyAsync(recv + (size_t)me * cb, flat + (size_t)me * cb, cb,
                        cudaMemcpyDeviceToDevice, n->stream);
    if (e != cudaSuccess)
        return mgi_nccl_cuda_fail(c, who, "cudaMemcpyAsync (own chunk)", e);
    ncclDataType_t dt = mgi_nccl_dtype(k->dtype);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return mgi_nccl_fail(c, who, "ncclGroupStart", r);
    for (int peer = 0; peer < c->size && r == ncclSuccess; peer++) {
        if (peer == me) continue;
        r = ncclSend(flat + (size_t)peer * cb, k->chunk, dt, peer, n->comm,
                     n->stream);
        if (r == ncclSuccess)
            r = ncclRecv(recv + (size_t)peer * cb, k->chunk, dt, peer, n->comm,
                         n->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess) return mgi_nccl_fail(c, who, "ncclSend/ncclRecv", r);
    s = mgi_nccl_enqueued(c, who, "ncclGroupEnd (all-to-all)", end);
    if (s != MG_OK) return s;
    k->state = BUCKET_SCATTER;
    b->stats.collectives++;
    b->stats.bytes_sent += (uint64_t)(c->size - 1) * (uint64_t)cb;
    return MG_OK;
}

mg_status mgi_nccl_progress(mg_dist_buckets *b, const char *who) {
    /* NCCL progresses on the GPU and its own threads, not inside our
     * calls: all there is to do is notice a failure early. */
    ncclResult_t state;
    return mgi_nccl_async_state(b->c, who, "an NCCL operation", &state);
}

mg_status mgi_nccl_finish(mg_dist_buckets *b, const char *who) {
    mg_dist_comm *c = b->c;
    mgi_nccl *n = c->nccl;
    mg_status s = mgi_nccl_enter(c, who);
    if (s != MG_OK) return s;
    /* Stream order does the waiting: bucket i's kernel runs after its
     * all-to-all, its all-gather after the kernel, and the next bucket's
     * work (already queued, if it started early) is not held up. */
    for (int i = 0; i < b->n_buckets; i++) {
        bucket *k = &b->b[i];
        size_t cb = chunk_bytes(k);
        char *mine = (char *)k->dev_flat + (size_t)c->rank * cb;
        cudaError_t e = mgi_nccl_average(n->stream, k->dtype == MG_F64,
                                         k->dev_recv, mine, k->chunk, c->size);
        if (e != cudaSuccess)
            return mgi_nccl_cuda_fail(c, who, "the averaging kernel", e);
        ncclResult_t r =
            ncclAllGather(mine, k->dev_flat, k->chunk, mgi_nccl_dtype(k->dtype),
                          n->comm, n->stream);
        s = mgi_nccl_enqueued(c, who, "ncclAllGather", r);
        if (s != MG_OK) return s;
        k->state = BUCKET_GATHER;
        b->stats.collectives++;
        b->stats.bytes_sent += (uint64_t)(c->size - 1) * (uint64_t)cb;
    }
    return mgi_nccl_wait_stream(c, who);
}

mg_status mgi_nccl_unpack(mg_dist_buckets *b, const char *who) {
    mg_dist_comm *c = b->c;
    mgi_nccl *n = c->nccl;
    mg_status s = mgi_nccl_enter(c, who);
    if (s != MG_OK) return s;
    for (int j = 0; j < b->n_slots; j++) {
        const grad_slot *sl = &b->slots[j];
        const bucket *k = &b->b[sl->bucket];
        cudaError_t e = cudaMemcpyAsync(
            sl->data, (const char *)k->dev_flat + (size_t)sl->offset * k->esize,
            (size_t)sl->numel * k->esize, cudaMemcpyDeviceToDevice, n->stream);
        if (e != cudaSuccess)
            return mgi_nccl_cuda_fail(c, who, "cudaMemcpyAsync (unpack)", e);
    }
    /* The caller reads (or updates from) the gradients next, on other
     * streams: they must be final when we return. */
    return mgi_nccl_wait_stream(c, who);
}
