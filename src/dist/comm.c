/*
 * comm.c - the communicator handle of memgrad_dist.h: our own duplicate of
 * the caller's MPI communicator, MPI errors turned into statuses, waits
 * with a deadline, and the agreement every collective entry point starts
 * with (the broadcast is in broadcast.c).
 */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MG_DIST_DEFAULT_TIMEOUT_S 600.0

double mgi_dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mg_status mgi_dist_check_usable(const mg_dist_comm *c, const char *who) {
    if (!c) return mg_set_error(MG_ERR_INVALID_ARG, "%s: comm is NULL", who);
    if (c->broken)
        return mg_set_error(MG_ERR_COMM,
                            "%s: rank %d: the communicator is broken since "
                            "an earlier failure (%s)",
                            who, c->rank, c->why);
    return MG_OK;
}

void mgi_dist_break(mg_dist_comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    c->broken = true;
}

mg_status mgi_dist_mpi_fail(mg_dist_comm *c, const char *who,
                            const char *mpi_call, int code) {
    char msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", code);
    mgi_dist_break(c, "%s failed: %s", mpi_call, msg);
    return mg_set_error(MG_ERR_COMM, "%s: rank %d: %s failed: %s", who, c->rank,
                        mpi_call, msg);
}

mg_status mgi_dist_wait(mg_dist_comm *c, const char *who, MPI_Request *reqs,
                        int n) {
    double deadline = c->timeout_s < 0 ? -1 : mgi_dist_now() + c->timeout_s;
    /* MPI_Waitall would block forever on a rank that never arrives, so
     * poll: spin a little (a message on the same machine arrives in
     * microseconds), then sleep between tests to leave the core to the
     * ranks still computing. */
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return mgi_dist_mpi_fail(c, who, "MPI_Testall", rc);
        if (done) return MG_OK;
        if (deadline >= 0 && mgi_dist_now() > deadline) {
            mgi_dist_break(c, "timed out after %g s waiting for other ranks",
                           c->timeout_s);
            return mg_set_error(MG_ERR_COMM,
                                "%s: rank %d: timed out after %g s waiting "
                                "for other ranks (one failed or stopped "
                                "calling in)",
                                who, c->rank, c->timeout_s);
        }
        if (polls > 2000) {
            struct timespec ts = {0, 50 * 1000}; /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
}

/* FNV-1a over 64-bit words: a fingerprint of what a rank is about to do,
 * compared across ranks before any data moves. */
uint64_t mgi_dist_hash(uint64_t h, uint64_t word) {
    for (int i = 0; i < 8; i++) {
        h ^= (word >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

mg_status mgi_dist_agree_which(mg_dist_comm *c, const char *who,
                               mg_status local, uint64_t fingerprint,
                               mg_status on_failure, int *differs) {
    *differs = -1;
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    /* Keep this rank's own message: the exchange below may overwrite it. */
    char own[512] = "";
    if (local != MG_OK) snprintf(own, sizeof own, "%s", mg_last_error());
    uint64_t mine[2] = {(uint64_t)local, fingerprint};
    uint64_t *all = malloc(2 * (size_t)c->size * sizeof *all);
    if (!all) {
        /* Other ranks are waiting on this exchange; failing locally makes
         * them time out, and this handle must not be used again. */
        mgi_dist_break(c, "out of memory in %s", who);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    MPI_Request req;
    int rc = MPI_Iallgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T,
                            c->comm, &req);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mgi_dist_mpi_fail(c, who, "MPI_Iallgather", rc);
    }
    s = mgi_dist_wait(c, who, &req, 1);
    if (s != MG_OK) {
        free(all); /* broken: MPI will not write into it again */
        return s;
    }
    /* Name up to a few failed ranks with their statuses. */
    char list[256] = "";
    size_t len = 0;
    int n_failed = 0, first_mismatch = -1;
    for (int r = 0; r < c->size; r++) {
        mg_status rs = (mg_status)all[2 * r];
        if (rs != MG_OK) {
            if (n_failed < 8 && len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len,
                                        "%srank %d (%s)", n_failed ? ", " : "",
                                        r, mg_status_str(rs));
            n_failed++;
        } else if (first_mismatch < 0 && all[2 * r + 1] != all[1]) {
            first_mismatch = r;
        }
    }
    free(all);
    if (n_failed) {
        if (local != MG_OK)
            return mg_set_error(on_failure,
                                "%s: rank %d: %d rank(s) failed: "
                                "%s; this rank's error: %s",
                                who, c->rank, n_failed, list, own);
        return mg_set_error(on_failure, "%s: rank %d: %d rank(s) failed: %s",
                            who, c->rank, n_failed, list);
    }
    *differs = first_mismatch;
    return MG_OK;
}

mg_status mgi_dist_agree(mg_dist_comm *c, const char *who, mg_status local,
                         uint64_t fingerprint, mg_status on_failure) {
    int differs;
    mg_status s =
        mgi_dist_agree_which(c, who, local, fingerprint, on_failure, &differs);
    if (s == MG_OK && differs >= 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d was given other tensors "
                            "(count, sizes, dtypes or order) than rank 0",
                            who, c->rank, differs);
    return s;
}

/* This rank's own arguments, checked without returning early (see
 * mg_dist_comm_from_mpi); *timeout_s gets the deadline to use. */
static mg_status comm_args(const mg_dist_options *opts, mg_dist_comm **out,
                           double *timeout_s, const char *who) {
    if (!out) return mg_set_error(MG_ERR_INVALID_ARG, "%s: out is NULL", who);
    double t = opts ? opts->timeout_s : 0;
    if (t != t) /* NaN: every comparison with a deadline would be false */
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: timeout_s is NaN", who);
    *timeout_s = t == 0 ? MG_DIST_DEFAULT_TIMEOUT_S : t;
    return MG_OK;
}

/* Duplicate comm into c->comm with errors returned, and read rank and
 * size. The caller's communicator may still have the default handler,
 * which aborts the job: that is its business. Errors of the duplicate are
 * returned to us, so that a failure becomes a status. */
static mg_status comm_dup(mg_dist_comm *c, MPI_Comm comm, const char *who) {
    c->comm = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(comm, &c->comm);
    if (rc != MPI_SUCCESS) return mgi_dist_mpi_fail(c, who, "MPI_Comm_dup", rc);
    rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        mg_status s = mgi_dist_mpi_fail(c, who, "setting up the duplicate", rc);
        MPI_Comm_free(&c->comm);
        return s;
    }
    return MG_OK;
}

mg_status mgi_dist_comm_open(MPI_Comm comm, const mg_dist_options *opts,
                             mg_dist_comm **out, const char *who) {
    if (out) *out = NULL;
    /* Without MPI, or without a communicator, there is no one to agree
     * with: these fail on this rank alone. */
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: MPI is not initialised (call MPI_Init first)",
                            who);
    if (comm == MPI_COMM_NULL)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: comm is MPI_COMM_NULL",
                            who);
    /* A rank whose own arguments are bad (or that is out of memory) still
     * joins the duplicate and the agreement, as mg_dist_buckets_new does:
     * returning here would leave the others in MPI_Comm_dup for ever. Until
     * the ranks agree the handle lives on the stack, with the default
     * deadline where this rank's own is bad. */
    mg_dist_comm tmp = {.timeout_s = MG_DIST_DEFAULT_TIMEOUT_S};
    mg_status local = comm_args(opts, out, &tmp.timeout_s, who);
    mg_dist_comm *c = local == MG_OK ? malloc(sizeof *c) : NULL;
    if (local == MG_OK && !c)
        local = mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    /* An MPI error here is this rank's alone; the others then time out in
     * the agreement, which is the most MPI lets us do. */
    mg_status s = comm_dup(&tmp, comm, who);
    if (s == MG_OK)
        s = mgi_dist_agree(&tmp, who, local, 0,
                           local != MG_OK ? local : MG_ERR_COMM);
    if (s != MG_OK) {
        /* A broken duplicate may have the agreement in flight: left to
         * MPI_Finalize, as in mg_dist_comm_free. */
        if (tmp.comm != MPI_COMM_NULL && !tmp.broken) MPI_Comm_free(&tmp.comm);
        free(c);
        return s;
    }
    *c = tmp;
    *out = c;
    return MG_OK;
}

mg_status mg_dist_comm_from_mpi(MPI_Comm comm, const mg_dist_options *opts,
                                mg_dist_comm **out) {
    return mgi_dist_comm_open(comm, opts, out, "mg_dist_comm_from_mpi");
}

void mg_dist_comm_free(mg_dist_comm *c) {
    if (!c) return;
        /* A broken handle may have collectives in flight that will never
         * complete; freeing the communicator under them is erroneous in MPI,
         * so it is left for MPI_Finalize / MPI_Abort. After MPI_Finalize
         * there is nothing left to free. */
#ifdef MG_HAVE_NCCL
    /* NCCL first: its teardown may still talk to the other ranks. */
    if (c->nccl) mgi_nccl_comm_free(c);
#endif
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!c->broken && !finalized && c->comm != MPI_COMM_NULL)
        MPI_Comm_free(&c->comm);
    free(c);
}

int mg_dist_comm_rank(const mg_dist_comm *c) { return c ? c->rank : -1; }
int mg_dist_comm_size(const mg_dist_comm *c) { return c ? c->size : -1; }
int mg_dist_comm_broken(const mg_dist_comm *c) { return c ? c->broken : 0; }
