/*
 * nccl_internal.h - private to src/dist/nccl/: the NCCL side of a
 * communicator handle, the waits that turn a missing rank into a timeout
 * instead of a hang, and the averaging kernel's launcher (average.cu).
 * Included by C (comm_nccl.c, buckets_nccl.c) and CUDA C++ (average.cu).
 */
#ifndef MG_DIST_NCCL_INTERNAL_H
#define MG_DIST_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* average.cu: out[e] = (sum over r = 0, 1, ..., nranks-1, in that order,
 * of recv[r * chunk + e]) / nranks for e < chunk, f32 values added in
 * double and rounded once to f32, f64 in f64: the same arithmetic as the
 * MPI path's chunk_average (buckets.c), so the same bits. f64: nonzero
 * for double data. Queued on stream; returns the launch's status. */
cudaError_t mgi_nccl_average(cudaStream_t stream, int f64, const void *recv,
                             void *out, size_t chunk, int nranks);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__ /* the C side only: NCCL and memgrad's internals */

#include <nccl.h>

#include "../dist.h"

struct mgi_nccl {
    ncclComm_t comm; /* non-blocking (ncclConfig_t.blocking = 0); NULL
                        once aborted */
    int device;
    /* Our own stream, created non-blocking, so that an NCCL kernel waiting
     * for a peer never stalls the executor's (blocking) stream or the
     * legacy default stream. */
    cudaStream_t stream;
    /* Recorded on the legacy default stream before a pack, and waited on
     * by `stream`: see mgi_nccl_after_device_work. */
    cudaEvent_t ready;
};

/* Make c's device current (the calls may come from a thread, or after
 * code, that selected another). MG_OK or a break. */
mg_status mgi_nccl_enter(mg_dist_comm *c, const char *who);
/* Order the comm's stream after all the work queued so far on the
 * device's blocking streams (the executor's is one, cuda_backend.cu) and
 * the legacy default stream: the gradients an executor step has only
 * queued are then final when the pack copies them. */
mg_status mgi_nccl_after_device_work(mg_dist_comm *c, const char *who);
/* A non-blocking communicator may answer ncclInProgress while it enqueues
 * (and, the first time, connects to the peer); NCCL asks that nothing else
 * be called on it until ncclCommGetAsyncError says ncclSuccess. Polls that
 * against the deadline. r is what the call returned. */
mg_status mgi_nccl_enqueued(mg_dist_comm *c, const char *who, const char *call,
                            ncclResult_t r);
/* Wait until everything queued on the comm's stream has run, watching
 * for NCCL errors and the deadline. */
mg_status mgi_nccl_wait_stream(mg_dist_comm *c, const char *who);
/* Abort the NCCL communicator, break c, MG_ERR_COMM naming the call. */
/* NCCL's asynchronous state of c into *state (ncclSuccess, ncclInProgress
 * or the error of an operation already issued); fails, breaking c, if the
 * query itself fails or the state is an error, naming `call`. */
mg_status mgi_nccl_async_state(mg_dist_comm *c, const char *who,
                               const char *call, ncclResult_t *state);
mg_status mgi_nccl_fail(mg_dist_comm *c, const char *who, const char *call,
                        ncclResult_t r);
mg_status mgi_nccl_cuda_fail(mg_dist_comm *c, const char *who, const char *call,
                             cudaError_t e);
ncclDataType_t mgi_nccl_dtype(mg_dtype dt);

#endif /* !__CUDACC__ */

#endif
