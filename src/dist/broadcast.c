/*
 * broadcast.c - mg_dist_broadcast: the ranks check their lists and agree
 * before any byte moves, then rank `root`'s tensors go to every rank (the
 * data phase over NCCL for a handle from mg_dist_comm_from_nccl).
 */
#include "dist.h"

#include <stdint.h>
#include <stdlib.h>

/* Check one rank's broadcast list; MG_OK or a status with a message. */
static mg_status bcast_check(const mg_dist_comm *c, const mg_graph *g,
                             const mg_binding *binds, int n_binds, int root,
                             uint64_t *fingerprint) {
    const char *who = "mg_dist_broadcast";
    if (!g) return mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", who);
    if (n_binds < 0 || (n_binds > 0 && !binds))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %d bindings with a %s list", who, n_binds,
                            binds ? "non-NULL" : "NULL");
    if (root < 0 || root >= c->size)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: root %d is not a rank of a communicator of "
                            "%d",
                            who, root, c->size);
    uint64_t h = mgi_dist_hash(0xcbf29ce484222325ULL, (uint64_t)n_binds);
    h = mgi_dist_hash(h, (uint64_t)root);
    for (int i = 0; i < n_binds; i++) {
        size_t nbytes = mg_tensor_nbytes(g, binds[i].tensor);
        const char *name = mg_tensor_name(g, binds[i].tensor);
        if (nbytes == 0)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "%s: binding %d names tensor id %d, not in "
                                "the graph",
                                who, i, (int)binds[i].tensor);
        if (!binds[i].data)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: binding %d (%s) has NULL data", who, i,
                                name ? name : "unnamed");
#ifdef MG_HAVE_NCCL
        if (c->nccl) {
            mg_status s = mgi_nccl_check_ptr(c, binds[i].data, who, "binding",
                                             i, name ? name : "unnamed");
            if (s != MG_OK) return s;
        }
#endif
        if (nbytes > (size_t)INT32_MAX)
            return mg_set_error(MG_ERR_UNSUPPORTED,
                                "%s: %s has %zu bytes, more than one MPI "
                                "message of int count holds",
                                who, name ? name : "unnamed", nbytes);
        h = mgi_dist_hash(h, (uint64_t)nbytes);
    }
    *fingerprint = h;
    return MG_OK;
}

mg_status mg_dist_broadcast(mg_dist_comm *c, const mg_graph *g,
                            const mg_binding *binds, int n_binds, int root) {
    const char *who = "mg_dist_broadcast";
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    /* Every rank checks its list, then all agree before any byte moves:
     * a bad list on one rank fails every rank instead of leaving the
     * others waiting in a broadcast it never joins. */
    uint64_t fp = 0;
    mg_status local = bcast_check(c, g, binds, n_binds, root, &fp);
    s = mgi_dist_agree(c, who, local, fp, local != MG_OK ? local : MG_ERR_COMM);
    if (s != MG_OK) return s;
#ifdef MG_HAVE_NCCL
    if (c->nccl) return mgi_nccl_broadcast(c, g, binds, n_binds, root);
#endif
    MPI_Request *reqs = malloc((size_t)(n_binds ? n_binds : 1) * sizeof *reqs);
    if (!reqs) {
        mgi_dist_break(c, "out of memory in %s", who);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    /* One nonblocking broadcast per tensor, waited on together, so that a
     * rank that never arrives is a timeout rather than a hang. */
    int issued = 0;
    for (int i = 0; i < n_binds; i++) {
        int rc = MPI_Ibcast(binds[i].data,
                            (int)mg_tensor_nbytes(g, binds[i].tensor),
                            MPI_BYTE, root, c->comm, &reqs[issued]);
        if (rc != MPI_SUCCESS) {
            s = mgi_dist_mpi_fail(c, who, "MPI_Ibcast", rc);
            free(reqs);
            return s;
        }
        issued++;
    }
    s = mgi_dist_wait(c, who, reqs, issued);
    free(reqs);
    return s;
}
