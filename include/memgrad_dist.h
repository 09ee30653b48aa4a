/*
 * memgrad_dist.h - data-parallel training over MPI: every process (rank)
 * runs the same plan on its own shard of the batch, and the gradients are
 * averaged across ranks before the update.
 *
 *   mg_dist_comm *c;
 *   mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &c);
 *   mg_dist_broadcast(c, g, params, n_params, 0);   // same start everywhere
 *   mg_dist_buckets *b;
 *   mg_dist_buckets_new(c, g, grads, n_grads, 0, &b); // grads: bound outputs
 *   for (each step) {
 *       mg_status s = mg_exec_run(ex, plan, binds, n_binds, seed);
 *       s = mg_dist_allreduce(b, s); // every rank passes its own status
 *       if (s != MG_OK) MPI_Abort(MPI_COMM_WORLD, 1); // same s on all ranks
 *       ... update the parameters with the averaged gradients ...
 *   }
 *   mg_dist_buckets_free(b);
 *   mg_dist_comm_free(c);
 *
 * The gradients travel in buckets: consecutive gradients of one dtype are
 * packed into one buffer of up to bucket_bytes, so that a model of many
 * small tensors is averaged in few messages. Give the gradients in the
 * order the backward pass finishes them (reverse parameter order), so that
 * an "after op" observer on the executor (mg_dist_buckets_observer) can
 * start a bucket as soon as its last gradient is final. Without it,
 * mg_dist_allreduce after mg_exec_run starts every bucket not yet started;
 * either way it finishes them all.
 *
 * The average is deterministic and the same on every rank: MPI only moves
 * bytes, it never adds. Each bucket is split into one chunk per rank; an
 * all-to-all sends chunk r of every rank to rank r, which sums the values
 * in rank order 0, 1, ..., N-1 (f32 values in double), divides by N and
 * (for f32) rounds back, and an all-gather sends the averaged chunks to
 * everyone.
 * That is a reduce-scatter plus an all-gather, the same 2 (N-1)/N bytes per
 * byte of gradient as a ring allreduce (docs/distributed.md).
 *
 * Failure: a rank whose step failed still calls mg_dist_allreduce with its
 * error status; then every rank returns MG_ERR_COMM, with a message naming
 * the ranks that failed, and no gradient buffer is written. A rank that
 * never arrives makes the others return MG_ERR_COMM once they have waited
 * opts->timeout_s; MPI errors are returned, not fatal (MPI_ERRORS_RETURN
 * on memgrad's own copy of the communicator). After a timeout or an MPI
 * error the handle is broken: every later call on it fails, and the caller
 * should end the job (MPI_Abort), since ranks may be mid-collective.
 *
 * Threads: the caller initialises MPI. A communicator handle, and the
 * buckets made on it, are used by one thread at a time.
 *
 * GPUs: where memgrad_dist was built with NCCL (memgrad_dist_config.h
 * then defines MG_HAVE_NCCL), mg_dist_comm_from_nccl makes a handle whose
 * buckets and broadcasts move device buffers over NCCL; every other call
 * below is the same, and so are the determinism and failure rules.
 * That code compiles and its no-device checks pass, but it has not yet
 * run on a GPU (docs/distributed.md).
 */
#ifndef MEMGRAD_DIST_H
#define MEMGRAD_DIST_H

#include "memgrad.h"
#include "memgrad_dist_config.h" /* MG_HAVE_NCCL, where built with NCCL */
#include "memgrad_observe.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_dist_comm mg_dist_comm;

typedef struct mg_dist_options {
    /* Seconds any one wait for other ranks may take before the call fails
     * with MG_ERR_COMM. 0 means the default, 600 s (a slow rank's whole
     * backward pass may be in it); negative means wait forever. NaN is
     * refused (MG_ERR_INVALID_ARG). */
    double timeout_s;
} mg_dist_options;

/* A handle on a duplicate of `comm` (MPI_Comm_dup: memgrad's messages
 * never match the caller's). Collective over comm. opts may be NULL.
 * Every rank checks its own arguments (out not NULL, timeout_s not NaN),
 * still joins the duplicate, and then the ranks agree: if any rank's are
 * bad, every rank fails and none gets a handle, that rank with its own
 * status and message, the others with MG_ERR_COMM naming it. Only MPI not
 * initialised and comm == MPI_COMM_NULL fail on one rank alone (there is
 * no one to agree with); the caller must not let one rank do that. */
MG_API
mg_status mg_dist_comm_from_mpi(MPI_Comm comm, const mg_dist_options *opts,
                                mg_dist_comm **out);
#ifdef MG_HAVE_NCCL
/*
 * A handle whose data moves over NCCL between CUDA devices, one device per
 * rank: gradients (mg_dist_buckets_new) and broadcast tensors are then
 * device pointers on `cuda_device` (the buffers bound on an MG_DEVICE_CUDA
 * executor), checked as such. MPI (a duplicate of comm, as in
 * mg_dist_comm_from_mpi) still carries the small host-side agreements:
 * statuses, fingerprints, and the NCCL id that rank 0 makes
 * (ncclGetUniqueId) and broadcasts before every rank joins
 * (ncclCommInitRank, non-blocking, so that a missing rank is a timeout).
 * The handle owns a CUDA stream of its own, on which the exchange runs
 * beside the executor's work.
 *
 * Makes cuda_device the calling thread's current device (cudaSetDevice),
 * as the later calls on the handle do: create the executor after it.
 * Each device may serve one rank only (NCCL refuses two ranks on one
 * GPU). Collective over comm; a rank whose device is missing or wrong
 * fails with its own status (MG_ERR_UNSUPPORTED without any CUDA device,
 * MG_ERR_INVALID_ARG for a bad index) and the others with MG_ERR_COMM.
 * Bad arguments (out, opts) on one rank fail every rank alike, as in
 * mg_dist_comm_from_mpi, before any device is touched.
 */
MG_API
mg_status mg_dist_comm_from_nccl(MPI_Comm comm, int cuda_device,
                                 const mg_dist_options *opts,
                                 mg_dist_comm **out);
#endif
/* Collective unless the handle is broken. NULL is accepted. */
MG_API
void mg_dist_comm_free(mg_dist_comm *c);
MG_API
int mg_dist_comm_rank(const mg_dist_comm *c); /* -1 if c is NULL */
MG_API
int mg_dist_comm_size(const mg_dist_comm *c); /* -1 if c is NULL */
/* True once a timeout or an MPI error has made c unusable. */
MG_API
int mg_dist_comm_broken(const mg_dist_comm *c);

/* Copy the data bound to each tensor (parameters, usually) from rank
 * `root` to every rank, so that all ranks start from the same weights.
 * Collective; every rank gives the same root and the same tensors in the
 * same order, checked before anything moves: a bad list on one rank fails
 * every rank (that rank with its own status, the others MG_ERR_COMM), and
 * lists that differ fail every rank alike, naming the first binding that
 * differs and what each side has: MG_ERR_DTYPE or MG_ERR_SHAPE where a
 * tensor's dtype or shape differs (even at the same byte count: f64 [3]
 * is not f32 [6]), MG_ERR_INVALID_ARG for another count or root. No
 * caller memory is written then, and the handle stays usable. */
MG_API
mg_status mg_dist_broadcast(mg_dist_comm *c, const mg_graph *g,
                            const mg_binding *binds, int n_binds, int root);

/* ------------------------------------------------------------------ buckets */

typedef struct mg_dist_buckets mg_dist_buckets;

/* Lay out n_grads gradient bindings (float tensors of g, distinct, with
 * caller memory that stays valid while b is in use) into buckets of at
 * most bucket_bytes (0: 25 MiB, PyTorch DDP's default; a gradient larger
 * than that gets a bucket of its own) and of one dtype. Collective: the
 * ranks compare their statuses and a fingerprint of their lists (count,
 * sizes, dtypes, order, cap), so a bad list on one rank (a NULL out
 * included), or lists that differ, fail on every rank instead of leaving
 * some waiting. */
MG_API
mg_status mg_dist_buckets_new(mg_dist_comm *c, const mg_graph *g,
                              const mg_binding *grads, int n_grads,
                              size_t bucket_bytes, mg_dist_buckets **out);
MG_API
void mg_dist_buckets_free(mg_dist_buckets *b); /* NULL is accepted */
MG_API
int mg_dist_buckets_count(const mg_dist_buckets *b); /* -1 if b is NULL */
/* The bucket holding gradient t, or -1. */
MG_API
int mg_dist_buckets_index(const mg_dist_buckets *b, mg_tensor t);

/* Gradient t is final for this step. When every gradient of a bucket is,
 * the bucket's exchange starts, in bucket order (a bucket never starts
 * before the ones below it, so all ranks issue the same collectives in the
 * same order). Meant for an executor's "after op" callback. */
MG_API
mg_status mg_dist_grad_ready(mg_dist_buckets *b, mg_tensor t);
/* Start bucket k's exchange now (and every bucket below it). */
MG_API
mg_status mg_dist_bucket_start(mg_dist_buckets *b, int k);
/* Let MPI move the started buckets' data (MPI progresses nonblocking
 * collectives only inside MPI calls): call it now and then while the
 * backward pass runs, e.g. from the same "after op" callback. Never
 * blocks and never issues a collective, so it may be called any number
 * of times on any rank. On an NCCL handle (which progresses on its own)
 * it only checks for an asynchronous NCCL error. */
MG_API
mg_status mg_dist_progress(mg_dist_buckets *b);

/* Fill *out with an observer that overlaps the exchange with the backward
 * pass: attach it to the executor (mg_exec_observer_attach) and each
 * bucket starts as soon as the step computing its last gradient is done,
 * while the rest of the backward pass runs; it also lets MPI progress the
 * started buckets after every step. Then call mg_dist_allreduce after the
 * run as before: it finishes the started buckets (and starts any the run
 * did not complete, e.g. after a failed run). b must outlive the
 * attachment. The averages are the same bits as without the observer. */
MG_API
mg_status mg_dist_buckets_observer(mg_dist_buckets *b, mg_observer *out);

/*
 * Finish the step: start the buckets not yet started, complete them, and
 * agree on `local`, this rank's status for the step (MG_OK, or the error
 * its run returned). If every rank passed MG_OK, each gradient buffer now
 * holds the average over ranks, the same bits on every rank, and MG_OK is
 * returned. Otherwise every rank returns MG_ERR_COMM naming the ranks that
 * failed and leaves its gradient buffers as they were. Collective.
 */
MG_API
mg_status mg_dist_allreduce(mg_dist_buckets *b, mg_status local);

/* Counters since the buckets were made. */
typedef struct mg_dist_stats {
    uint64_t steps;       /* mg_dist_allreduce calls that returned MG_OK */
    uint64_t collectives; /* nonblocking collectives issued */
    uint64_t bytes_sent;  /* payload bytes this rank sent to other ranks */
    double wait_seconds;  /* time spent in mg_dist_allreduce */
    size_t buffer_bytes;  /* staging memory the buckets hold: about twice
                             the gradients' bytes (packed + received);
                             device memory on an NCCL handle */
} mg_dist_stats;

MG_API
mg_status mg_dist_buckets_stats(const mg_dist_buckets *b, mg_dist_stats *out);

#ifdef __cplusplus
}
#endif
#endif
