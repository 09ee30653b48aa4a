/*
 * dist.h - internals shared by the files of src/dist: the communicator
 * handle, the bucket layout, the one way to wait on MPI requests (with a
 * deadline), and the entry points of the NCCL transport (src/dist/nccl/,
 * built only where MG_HAVE_NCCL is defined).
 */
#ifndef MG_DIST_INTERNAL_H
#define MG_DIST_INTERNAL_H

#include "../common/ir.h"

#include <memgrad_dist.h>

typedef struct mgi_nccl mgi_nccl; /* src/dist/nccl/nccl_internal.h */

struct mg_dist_comm {
    MPI_Comm comm; /* our duplicate, errors returned */
    int rank, size;
    double timeout_s; /* < 0: forever */
    bool broken;
    char why[256]; /* what broke it, repeated by later calls */
    /* Non-NULL for a handle from mg_dist_comm_from_nccl: bucket and
     * broadcast data then move over NCCL, the agreements still over MPI. */
    mgi_nccl *nccl;
};

/* The bucket layout (buckets.c), shared with the NCCL transport. */
typedef enum bucket_state {
    BUCKET_IDLE = 0, /* waiting for its gradients */
    BUCKET_SCATTER,  /* the all-to-all is in flight */
    BUCKET_GATHER    /* the all-gather is in flight */
} bucket_state;

typedef struct grad_slot {
    mg_tensor t;
    void *data; /* caller memory (device memory for NCCL) */
    int64_t numel;
    int bucket;
    int64_t offset; /* in elements, within the bucket */
    bool ready;     /* mg_dist_grad_ready this step */
} grad_slot;

typedef struct bucket {
    mg_dtype dtype;
    size_t esize;
    MPI_Datatype mtype;
    int first, n; /* slots [first, first + n) */
    int64_t numel;
    int n_ready;
    bucket_state state;
    MPI_Request req;
    /* MPI. flat: the packed local gradients, then (after the all-gather)
     * the averaged bucket. recv: the size contributions to this rank's
     * chunk, rank s's at s * counts[rank]. */
    void *flat, *recv;
    int *counts, *displs;   /* chunk of each rank, in elements */
    int *rcounts, *rdispls; /* what this rank receives in the scatter */
    /* NCCL: the same two buffers in device memory, cut into size chunks
     * of `chunk` elements each (the last ones padded with zeros), since
     * ncclAllGather takes one count for every rank. */
    void *dev_flat, *dev_recv;
    size_t chunk;
} bucket;

struct mg_dist_buckets {
    mg_dist_comm *c;
    grad_slot *slots;
    int n_slots;
    bucket *b;
    int n_buckets;
    int next_start; /* buckets below it have started this step */
    mg_dist_stats stats;
};

/* mg_dist_comm_from_mpi, with `who` naming the public call in messages
 * (mg_dist_comm_from_nccl starts with it). Collective even where this
 * rank's arguments are bad: every rank joins the duplicate and an
 * agreement, and all fail together. */
mg_status mgi_dist_comm_open(MPI_Comm comm, const mg_dist_options *opts,
                             mg_dist_comm **out, const char *who);

/* Mark c broken, saying why (later calls repeat it). */
void mgi_dist_break(mg_dist_comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Fail with MG_ERR_COMM if c is broken (the message says why). */
mg_status mgi_dist_check_usable(const mg_dist_comm *c, const char *who);
/* Turn an MPI error code into MG_ERR_COMM, break c, and say which call. */
mg_status mgi_dist_mpi_fail(mg_dist_comm *c, const char *who,
                            const char *mpi_call, int code);
/* Wait for n requests, polling so that a missing rank turns into a
 * timeout (break c, MG_ERR_COMM) instead of a hang. */
mg_status mgi_dist_wait(mg_dist_comm *c, const char *who, MPI_Request *reqs,
                        int n);
double mgi_dist_now(void); /* monotonic seconds */

/* Fold a 64-bit word into an FNV-1a hash (start from 0xcbf29ce484222325). */
uint64_t mgi_dist_hash(uint64_t h, uint64_t word);
/* Collective: every rank gives its local status and a fingerprint of its
 * arguments. MG_OK when all statuses are MG_OK and all fingerprints equal
 * rank 0's; otherwise every rank fails: with on_failure (naming the ranks
 * that failed, and this rank's own message if it is one of them), or with
 * MG_ERR_INVALID_ARG when the fingerprints differ. */
mg_status mgi_dist_agree(mg_dist_comm *c, const char *who, mg_status local,
                         uint64_t fingerprint, mg_status on_failure);
/* As mgi_dist_agree, but fingerprints that differ are not an error here:
 * MG_OK with *differs the first rank whose fingerprint is not rank 0's
 * (the same on every rank), or -1, for a caller that then finds out what
 * differs (mg_dist_broadcast). */
mg_status mgi_dist_agree_which(mg_dist_comm *c, const char *who,
                               mg_status local, uint64_t fingerprint,
                               mg_status on_failure, int *differs);

#ifdef MG_HAVE_NCCL
/* The NCCL transport (src/dist/nccl/). Every function but the check and
 * the frees breaks c on an NCCL or CUDA failure or a timeout, and aborts
 * the NCCL communicator, as an MPI error does on the MPI path. */
/* MG_OK if p is device (or managed) memory on c's device, else
 * MG_ERR_INVALID_ARG naming item i (what, name). Breaks nothing. */
mg_status mgi_nccl_check_ptr(const mg_dist_comm *c, const void *p,
                             const char *who, const char *what, int i,
                             const char *name);
void mgi_nccl_comm_free(mg_dist_comm *c); /* collective unless broken */
/* The data phase of mg_dist_broadcast, once the ranks have agreed. */
mg_status mgi_nccl_broadcast(mg_dist_comm *c, const mg_graph *g,
                             const mg_binding *binds, int n_binds, int root);
/* Device staging of every bucket (a local step: cudaMalloc failures are
 * MG_ERR_NOMEM and break nothing); freed by mgi_nccl_buckets_free. */
mg_status mgi_nccl_buckets_alloc(mg_dist_buckets *b);
void mgi_nccl_buckets_free(mg_dist_buckets *b);
/* Pack bucket i on the comm's stream and issue its all-to-all. */
mg_status mgi_nccl_bucket_start(mg_dist_buckets *b, int i, const char *who);
/* Check for an asynchronous NCCL error; never blocks. */
mg_status mgi_nccl_progress(mg_dist_buckets *b, const char *who);
/* Average every started bucket's chunk, all-gather, and wait for it all. */
mg_status mgi_nccl_finish(mg_dist_buckets *b, const char *who);
/* Copy the averaged buckets into the gradient buffers, and wait. */
mg_status mgi_nccl_unpack(mg_dist_buckets *b, const char *who);
#endif

#endif
