/*
 * dist.h - internals shared by the files of src/dist: the communicator
 * handle and the one way to wait on MPI requests (with a deadline).
 */
#ifndef MG_DIST_INTERNAL_H
#define MG_DIST_INTERNAL_H

#include "../common/ir.h"

#include <memgrad_dist.h>

struct mg_dist_comm {
    MPI_Comm comm; /* our duplicate, errors returned */
    int rank, size;
    double timeout_s; /* < 0: forever */
    bool broken;
    char why[256]; /* what broke it, repeated by later calls */
};

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

#endif
