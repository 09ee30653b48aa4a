/*
 * comm_nccl.c - mg_dist_comm_from_nccl and the NCCL side of a handle: the
 * communicator made the standard way (ncclGetUniqueId on rank 0, the id
 * broadcast over MPI, ncclCommInitRank on every rank), the handle's own
 * CUDA stream, the waits that poll with the handle's deadline, failures
 * turned into MG_ERR_COMM with the communicator aborted, and the data phase
 * of mg_dist_broadcast.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): a
 * blocking one can hang the host inside ncclCommInitRank or ncclGroupEnd
 * (connection setup waits for the peer), where no deadline can be checked;
 * a non-blocking one returns at once and we poll ncclCommGetAsyncError.
 * ncclCommAbort is the only way to stop NCCL work that waits for a rank
 * that will never come, so every timeout and every NCCL or CUDA failure
 * aborts the communicator and breaks the handle, as an MPI error does.
 */
#include "nccl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Spin a little, then sleep between polls, as mgi_dist_wait does: a peer
 * on the same node answers in microseconds, and a rank still computing
 * should get the core. */
static void poll_pause(long polls) {
    if (polls > 2000) {
        struct timespec ts = {0, 50 * 1000}; /* 50 us */
        nanosleep(&ts, NULL);
    }
}

static double deadline_of(const mg_dist_comm *c) {
    return c->timeout_s < 0 ? -1 : mgi_dist_now() + c->timeout_s;
}

static bool past(double deadline) {
    return deadline >= 0 && mgi_dist_now() > deadline;
}

static void nccl_abort(mgi_nccl *n) {
    if (n && n->comm) {
        ncclCommAbort(n->comm);
        n->comm = NULL;
    }
}

mg_status mgi_nccl_fail(mg_dist_comm *c, const char *who, const char *call,
                        ncclResult_t r) {
    /* ncclGetLastError has the detail (which peer, which resource); read
     * it before the abort frees the communicator. */
    char detail[200] = "";
    const char *last =
        c->nccl && c->nccl->comm ? ncclGetLastError(c->nccl->comm) : NULL;
    if (last && last[0]) snprintf(detail, sizeof detail, " (%s)", last);
    nccl_abort(c->nccl);
    mgi_dist_break(c, "%s failed: %s%s", call, ncclGetErrorString(r), detail);
    return mg_set_error(MG_ERR_COMM, "%s: rank %d: %s failed: %s%s", who,
                        c->rank, call, ncclGetErrorString(r), detail);
}

mg_status mgi_nccl_cuda_fail(mg_dist_comm *c, const char *who, const char *call,
                             cudaError_t e) {
    cudaGetLastError(); /* clear it unless sticky */
    nccl_abort(c->nccl);
    mgi_dist_break(c, "%s failed: %s", call, cudaGetErrorString(e));
    return mg_set_error(MG_ERR_COMM, "%s: rank %d: %s failed: %s (%s)", who,
                        c->rank, call, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

static mg_status timed_out(mg_dist_comm *c, const char *who) {
    /* The NCCL kernels on our stream wait for a rank that is not coming:
     * only an abort ends them. */
    nccl_abort(c->nccl);
    mgi_dist_break(c, "timed out after %g s waiting for other ranks (NCCL)",
                   c->timeout_s);
    return mg_set_error(MG_ERR_COMM,
                        "%s: rank %d: timed out after %g s waiting for other "
                        "ranks over NCCL (one failed or stopped calling in)",
                        who, c->rank, c->timeout_s);
}

ncclDataType_t mgi_nccl_dtype(mg_dtype dt) {
    return dt == MG_F64 ? ncclFloat64 : ncclFloat32;
}

mg_status mgi_nccl_enter(mg_dist_comm *c, const char *who) {
    cudaError_t e = cudaSetDevice(c->nccl->device);
    if (e != cudaSuccess) return mgi_nccl_cuda_fail(c, who, "cudaSetDevice", e);
    return MG_OK;
}

mg_status mgi_nccl_after_device_work(mg_dist_comm *c, const char *who) {
    /* cudaStreamLegacy, not 0: the legacy stream even in a program built
     * with per-thread default streams. Work on it starts only after all
     * earlier work on the blocking streams, so the event completes after
     * every kernel queued so far by the executor. */
    mgi_nccl *n = c->nccl;
    cudaError_t e = cudaEventRecord(n->ready, cudaStreamLegacy);
    if (e != cudaSuccess)
        return mgi_nccl_cuda_fail(c, who, "cudaEventRecord", e);
    e = cudaStreamWaitEvent(n->stream, n->ready, 0);
    if (e != cudaSuccess)
        return mgi_nccl_cuda_fail(c, who, "cudaStreamWaitEvent", e);
    return MG_OK;
}

mg_status mgi_nccl_async_state(mg_dist_comm *c, const char *who,
                               const char *call, ncclResult_t *state) {
    *state = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(c->nccl->comm, state);
    if (q != ncclSuccess)
        return mgi_nccl_fail(c, who, "ncclCommGetAsyncError", q);
    if (*state != ncclSuccess && *state != ncclInProgress)
        return mgi_nccl_fail(c, who, call, *state);
    return MG_OK;
}

mg_status mgi_nccl_enqueued(mg_dist_comm *c, const char *who, const char *call,
                            ncclResult_t r) {
    if (r != ncclSuccess && r != ncclInProgress)
        return mgi_nccl_fail(c, who, call, r);
    double deadline = deadline_of(c);
    for (long polls = 0;; polls++) {
        ncclResult_t state;
        mg_status s = mgi_nccl_async_state(c, who, call, &state);
        if (s != MG_OK) return s;
        if (state == ncclSuccess) return MG_OK;
        if (past(deadline)) return timed_out(c, who);
        poll_pause(polls);
    }
}

mg_status mgi_nccl_wait_stream(mg_dist_comm *c, const char *who) {
    double deadline = deadline_of(c);
    for (long polls = 0;; polls++) {
        /* An NCCL failure (a peer's connection lost, say) shows here while
         * its kernel may never finish: check it before the stream. */
        ncclResult_t state;
        mg_status s = mgi_nccl_async_state(c, who, "an NCCL operation", &state);
        if (s != MG_OK) return s;
        cudaError_t e = cudaStreamQuery(c->nccl->stream);
        if (e == cudaSuccess) return MG_OK;
        if (e != cudaErrorNotReady)
            return mgi_nccl_cuda_fail(c, who, "cudaStreamQuery", e);
        if (past(deadline)) return timed_out(c, who);
        poll_pause(polls);
    }
}

mg_status mgi_nccl_check_ptr(const mg_dist_comm *c, const void *p,
                             const char *who, const char *what, int i,
                             const char *name) {
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %s %d (%s): cudaPointerGetAttributes "
                            "failed: %s",
                            who, what, i, name, cudaGetErrorString(e));
    }
    bool on_device =
        a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
    if (!on_device || a.device != c->nccl->device)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %s %d (%s) is not device memory of CUDA "
                            "device %d (an NCCL handle moves device buffers: "
                            "bind them on an MG_DEVICE_CUDA executor)",
                            who, what, i, name, c->nccl->device);
    return MG_OK;
}

/* This rank's part, before any other rank is involved: the device, the
 * stream, the event and (rank 0) the NCCL id. */
static mg_status local_setup(mg_dist_comm *c, mgi_nccl *n, int cuda_device,
                             ncclUniqueId *id) {
    const char *who = "mg_dist_comm_from_nccl";
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "%s: rank %d: no CUDA device (%s)", who, c->rank,
                            e != cudaSuccess ? cudaGetErrorString(e)
                                             : "device count is 0");
    }
    if (cuda_device < 0 || cuda_device >= count)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: CUDA device %d does not exist "
                            "(%d device(s))",
                            who, c->rank, cuda_device, count);
    n->device = cuda_device;
    const char *step = "cudaSetDevice";
    e = cudaSetDevice(cuda_device);
    if (e == cudaSuccess) {
        step = "cudaStreamCreateWithFlags";
        e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    }
    if (e == cudaSuccess) {
        step = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return mg_set_error(e == cudaErrorMemoryAllocation ? MG_ERR_NOMEM
                                                           : MG_ERR_INTERNAL,
                            "%s: rank %d: %s failed: %s", who, c->rank, step,
                            cudaGetErrorString(e));
    }
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            return mg_set_error(MG_ERR_INTERNAL,
                                "%s: rank 0: ncclGetUniqueId failed: %s", who,
                                ncclGetErrorString(r));
    }
    return MG_OK;
}

/* ncclCommInitRankConfig, polled against the deadline. A failure or a
 * timeout is local: it aborts what NCCL made and returns MG_ERR_COMM, but
 * leaves c usable for the agreement that tells the other ranks. */
static mg_status nccl_init(mg_dist_comm *c, mgi_nccl *n, ncclUniqueId id) {
    const char *who = "mg_dist_comm_from_nccl";
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r =
        ncclCommInitRankConfig(&n->comm, c->size, id, c->rank, &cfg);
    double deadline = deadline_of(c);
    for (long polls = 0; r == ncclInProgress && n->comm; polls++) {
        if (past(deadline)) {
            nccl_abort(n);
            return mg_set_error(MG_ERR_COMM,
                                "%s: rank %d: timed out after %g s in "
                                "ncclCommInitRank (a rank did not join)",
                                who, c->rank, c->timeout_s);
        }
        poll_pause(polls);
        if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess)
            r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        char detail[200] = "";
        const char *last = n->comm ? ncclGetLastError(n->comm) : NULL;
        if (last && last[0]) snprintf(detail, sizeof detail, " (%s)", last);
        nccl_abort(n);
        return mg_set_error(MG_ERR_COMM,
                            "%s: rank %d: ncclCommInitRank failed: %s%s", who,
                            c->rank, ncclGetErrorString(r), detail);
    }
    return MG_OK;
}

/* What local_setup made, for a handle that never got its communicator. */
static void local_free(mgi_nccl *n) {
    if (n->ready) cudaEventDestroy(n->ready);
    if (n->stream) cudaStreamDestroy(n->stream);
    cudaGetLastError();
    free(n);
}

mg_status mg_dist_comm_from_nccl(MPI_Comm comm, int cuda_device,
                                 const mg_dist_options *opts,
                                 mg_dist_comm **out) {
    const char *who = "mg_dist_comm_from_nccl";
    if (out) *out = NULL;
    mg_dist_comm *c = NULL;
    /* A NULL out (or bad options) fails in there, on every rank once the
     * ranks agree: returning before it would leave the others waiting in
     * its MPI_Comm_dup. */
    mg_status s = mgi_dist_comm_open(comm, opts, out ? &c : NULL, who);
    if (s != MG_OK) return s;
    mgi_nccl *n = calloc(1, sizeof *n);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    mg_status local = n ? local_setup(c, n, cuda_device, &id)
                        : mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    /* Every rank has its device, or none goes on: a rank that cannot join
     * would leave the others waiting in ncclCommInitRank. */
    s = mgi_dist_agree(c, who, local, 0, local != MG_OK ? local : MG_ERR_COMM);
    if (s == MG_OK) {
        MPI_Request req;
        int rc = MPI_Ibcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm, &req);
        s = rc == MPI_SUCCESS ? mgi_dist_wait(c, who, &req, 1)
                              : mgi_dist_mpi_fail(c, who, "MPI_Ibcast", rc);
    }
    if (s != MG_OK || !n) { /* !n: this rank failed, so s is not MG_OK */
        if (n) local_free(n);
        mg_dist_comm_free(c);
        return s != MG_OK ? s : MG_ERR_NOMEM;
    }
    /* From here the handle owns n: mg_dist_comm_free tears it down. */
    c->nccl = n;
    local = nccl_init(c, n, id);
    s = mgi_dist_agree(c, who, local, 0, local != MG_OK ? local : MG_ERR_COMM);
    if (s != MG_OK) {
        /* Some rank has no communicator: finalizing ours would wait for it
         * forever. The MPI duplicate is healthy (unless the agreement
         * broke it) and freed as on the MPI path's failures. */
        nccl_abort(n);
        mg_dist_comm_free(c);
        return s;
    }
    *out = c;
    return MG_OK;
}

void mgi_nccl_comm_free(mg_dist_comm *c) {
    mgi_nccl *n = c->nccl;
    if (!n) return;
    cudaSetDevice(n->device);
    if (n->comm && c->broken) {
        nccl_abort(n);
    } else if (n->comm) {
        /* Finalize flushes what is in flight and is collective: poll it
         * against the deadline, and abort if it does not end well. */
        ncclResult_t r = ncclCommFinalize(n->comm);
        double deadline = deadline_of(c);
        for (long polls = 0; r == ncclInProgress && !past(deadline); polls++) {
            if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess)
                r = ncclInternalError;
            poll_pause(polls);
        }
        if (r == ncclSuccess) ncclCommDestroy(n->comm);
        else ncclCommAbort(n->comm);
        n->comm = NULL;
    }
    c->nccl = NULL;
    local_free(n);
}

mg_status mgi_nccl_broadcast(mg_dist_comm *c, const mg_graph *g,
                             const mg_binding *binds, int n_binds, int root) {
    const char *who = "mg_dist_broadcast";
    mgi_nccl *n = c->nccl;
    mg_status s = mgi_nccl_enter(c, who);
    if (s == MG_OK) s = mgi_nccl_after_device_work(c, who);
    if (s != MG_OK) return s;
    /* One group: the tensors go out as one NCCL launch, in list order on
     * every rank (the agreement checked the lists match). */
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return mgi_nccl_fail(c, who, "ncclGroupStart", r);
    for (int i = 0; i < n_binds && r == ncclSuccess; i++)
        r = ncclBroadcast(binds[i].data, binds[i].data,
                          mg_tensor_nbytes(g, binds[i].tensor), ncclUint8, root,
                          n->comm, n->stream);
    ncclResult_t end = ncclGroupEnd();
    if (r != ncclSuccess) {
        /* The group is abandoned; the abort in mgi_nccl_fail ends it. */
        return mgi_nccl_fail(c, who, "ncclBroadcast", r);
    }
    s = mgi_nccl_enqueued(c, who, "ncclGroupEnd", end);
    if (s == MG_OK) s = mgi_nccl_wait_stream(c, who);
    return s;
}
