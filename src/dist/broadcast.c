/*
 * broadcast.c - mg_dist_broadcast: the ranks check their lists and agree
 * before any byte moves, then rank `root`'s tensors go to every rank (the
 * data phase over NCCL for a handle from mg_dist_comm_from_nccl).
 *
 * The agreement compares a fingerprint of each rank's list: the count, the
 * root, and each tensor's dtype and shape (not only its byte count: f64 [3]
 * and f32 [6] are both 24 bytes, and the bytes would be reinterpreted).
 * Where fingerprints differ, every rank takes part in a second exchange
 * that finds the first difference, so that all fail alike and each one's
 * message says what differs. A peer's words are checked before use: what
 * another rank sends is input, not a promise.
 */
#include "dist.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the ranks compare of one tensor. int64 words only, so that MPI
 * moves it as MPI_INT64_T. */
typedef struct bcast_desc {
    int64_t dtype, ndim, shape[MG_MAX_DIMS];
} bcast_desc;
#define DESC_WORDS ((int)(sizeof(bcast_desc) / sizeof(int64_t)))

/* t's descriptor; t is known to be in g (unused dims stay 0). */
static void desc_of(const mg_graph *g, mg_tensor t, bcast_desc *d) {
    mg_dtype dt = MG_F32;
    int nd = 0;
    int64_t sh[MG_MAX_DIMS] = {0};
    memset(d, 0, sizeof *d);
    mg_tensor_dtype(g, t, &dt);
    mg_tensor_shape(g, t, &nd, sh);
    d->dtype = dt;
    d->ndim = nd;
    for (int k = 0; k < nd && k < MG_MAX_DIMS; k++) d->shape[k] = sh[k];
}

static uint64_t desc_hash(uint64_t h, const bcast_desc *d) {
    const int64_t *w = (const int64_t *)d;
    for (int k = 0; k < DESC_WORDS; k++) h = mgi_dist_hash(h, (uint64_t)w[k]);
    return h;
}

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
        bcast_desc d;
        desc_of(g, binds[i].tensor, &d);
        h = desc_hash(h, &d);
    }
    *fingerprint = h;
    return MG_OK;
}

/* ---------------------------------------------- when the lists differ */

/* The first way one rank's list differs from rank 0's; every rank sends
 * its own to every other. */
enum { DIFF_NONE, DIFF_ROOT, DIFF_TENSOR, DIFF_COUNT };
typedef struct bcast_diff {
    int64_t kind;
    int64_t index;         /* DIFF_TENSOR: the binding */
    int64_t n_binds, root; /* this rank's */
    bcast_desc d;          /* DIFF_TENSOR: this rank's binding `index` */
} bcast_diff;
#define DIFF_WORDS ((int)(sizeof(bcast_diff) / sizeof(int64_t)))

/* Wait, with the deadline, for a collective just started (rc is what
 * starting it returned). */
static mg_status waited(mg_dist_comm *c, const char *call, int rc,
                        MPI_Request *req) {
    if (rc != MPI_SUCCESS)
        return mgi_dist_mpi_fail(c, "mg_dist_broadcast", call, rc);
    return mgi_dist_wait(c, "mg_dist_broadcast", req, 1);
}

/* Rank 0's count and root into hdr, and its descriptors into *table
 * (malloc'd; NULL where rank 0's count is beyond an MPI count, which
 * every rank sees alike). A failure breaks c: the others are in the same
 * exchange and time out. */
static mg_status rank0_list(mg_dist_comm *c, const mg_graph *g,
                            const mg_binding *binds, int n_binds, int root,
                            int64_t hdr[2], bcast_desc **table) {
    *table = NULL;
    hdr[0] = n_binds; /* only rank 0's count */
    hdr[1] = root;
    MPI_Request req;
    mg_status s =
        waited(c, "MPI_Ibcast",
               MPI_Ibcast(hdr, 2, MPI_INT64_T, 0, c->comm, &req), &req);
    if (s != MG_OK || hdr[0] < 0 || hdr[0] > INT_MAX / DESC_WORDS) return s;
    size_t n0 = (size_t)hdr[0];
    bcast_desc *t = malloc((n0 ? n0 : 1) * sizeof *t);
    if (!t) {
        mgi_dist_break(c, "out of memory in mg_dist_broadcast");
        return mg_set_error(MG_ERR_NOMEM, "mg_dist_broadcast: out of memory");
    }
    for (size_t i = 0; c->rank == 0 && i < n0; i++)
        desc_of(g, binds[i].tensor, &t[i]);
    s = waited(
        c, "MPI_Ibcast",
        MPI_Ibcast(t, (int)n0 * DESC_WORDS, MPI_INT64_T, 0, c->comm, &req),
        &req);
    if (s != MG_OK) {
        free(t); /* broken: MPI will not write into it again */
        return s;
    }
    *table = t;
    return MG_OK;
}

/* How this rank's (checked) list differs from rank 0's, first the root,
 * then the first tensor of the common prefix, then the count. */
static void my_diff(const mg_graph *g, const mg_binding *binds, int n_binds,
                    int root, const int64_t hdr[2], const bcast_desc *table,
                    bcast_diff *out) {
    memset(out, 0, sizeof *out);
    out->n_binds = n_binds;
    out->root = root;
    if (root != hdr[1]) {
        out->kind = DIFF_ROOT;
        return;
    }
    int64_t common = n_binds < hdr[0] ? n_binds : hdr[0];
    for (int64_t i = 0; i < common; i++) {
        bcast_desc d;
        desc_of(g, binds[i].tensor, &d);
        if (memcmp(&d, &table[i], sizeof d) != 0) {
            out->kind = DIFF_TENSOR;
            out->index = i;
            out->d = d;
            return;
        }
    }
    if (n_binds != hdr[0]) out->kind = DIFF_COUNT;
}

/* "f32 [2, 3]". A peer's words may be anything: what cannot be a dtype or
 * a rank prints as such, and no index goes past the shape. */
static void desc_str(const bcast_desc *d, char *buf, size_t cap) {
    const char *dt = d->dtype >= 0 && d->dtype <= INT_MAX
                         ? mg_dtype_name((mg_dtype)(int)d->dtype)
                         : "?";
    if (d->ndim < 0 || d->ndim > MG_MAX_DIMS) {
        snprintf(buf, cap, "%s with %lld dims", dt, (long long)d->ndim);
        return;
    }
    size_t len = (size_t)snprintf(buf, cap, "%s [", dt);
    for (int64_t k = 0; k < d->ndim && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", k ? ", " : "",
                                (long long)d->shape[k]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* The status and message of rank r's difference, the same on every rank
 * but for the "rank %d:" of the one that prints it. */
static mg_status report_diff(const mg_dist_comm *c, const mg_graph *g,
                             const mg_binding *binds, int n_binds,
                             const int64_t hdr[2], const bcast_desc *table,
                             const bcast_diff *dr, int r) {
    const char *who = "mg_dist_broadcast";
    if (dr->kind == DIFF_ROOT)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d names root %lld, rank 0 "
                            "root %lld",
                            who, c->rank, r, (long long)dr->root,
                            (long long)hdr[1]);
    if (dr->kind == DIFF_COUNT) {
        int64_t common = dr->n_binds < hdr[0] ? dr->n_binds : hdr[0];
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d gives %lld tensors, rank 0 "
                            "gives %lld (the first %lld agree)",
                            who, c->rank, r, (long long)dr->n_binds,
                            (long long)hdr[0], (long long)common);
    }
    if (dr->kind != DIFF_TENSOR || dr->index < 0 || dr->index >= hdr[0])
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d was given other tensors "
                            "than rank 0 (and sent a difference that makes "
                            "no sense)",
                            who, c->rank, r);
    char theirs[160], ours[160], name[96];
    desc_str(&dr->d, theirs, sizeof theirs);
    desc_str(&table[dr->index], ours, sizeof ours);
    /* This rank's name for the binding, where it has one (the ranks run
     * the same program, so it is the tensor the others mean). */
    const char *nm =
        dr->index < n_binds ? mg_tensor_name(g, binds[dr->index].tensor) : NULL;
    if (nm) snprintf(name, sizeof name, " ('%s')", nm);
    else name[0] = '\0';
    return mg_set_error(
        dr->d.dtype != table[dr->index].dtype ? MG_ERR_DTYPE : MG_ERR_SHAPE,
        "%s: rank %d: binding %lld%s differs between ranks: "
        "rank %d has %s, rank 0 has %s",
        who, c->rank, (long long)dr->index, name, r, theirs, ours);
}

/* The ranks' fingerprints differ (rank `differs` first): find out how, on
 * every rank alike. Collective: rank 0's list goes to all, each compares
 * its own, and all gather the results and report the first rank's. */
static mg_status bcast_explain(mg_dist_comm *c, const mg_graph *g,
                               const mg_binding *binds, int n_binds, int root,
                               int differs) {
    const char *who = "mg_dist_broadcast";
    int64_t hdr[2];
    bcast_desc *table = NULL;
    mg_status s = rank0_list(c, g, binds, n_binds, root, hdr, &table);
    if (s != MG_OK) return s;
    if (!table) /* rank 0's count is out of reach: no detail */
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: rank %d: rank %d was given other tensors "
                            "than rank 0",
                            who, c->rank, differs);
    bcast_diff mine, *all = malloc((size_t)c->size * sizeof *all);
    if (!all) {
        free(table);
        mgi_dist_break(c, "out of memory in %s", who);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    my_diff(g, binds, n_binds, root, hdr, table, &mine);
    MPI_Request req;
    s = waited(c, "MPI_Iallgather",
               MPI_Iallgather(&mine, DIFF_WORDS, MPI_INT64_T, all, DIFF_WORDS,
                              MPI_INT64_T, c->comm, &req),
               &req);
    for (int r = 1; s == MG_OK && r < c->size; r++)
        if (all[r].kind != DIFF_NONE) {
            s = report_diff(c, g, binds, n_binds, hdr, table, &all[r], r);
            break;
        }
    if (s == MG_OK) /* the fingerprints said otherwise: a hash collision */
        s = mg_set_error(MG_ERR_INVALID_ARG,
                         "%s: rank %d: rank %d was given other tensors than "
                         "rank 0",
                         who, c->rank, differs);
    free(all);
    free(table);
    return s;
}

/* ------------------------------------------------------------- the call */

mg_status mg_dist_broadcast(mg_dist_comm *c, const mg_graph *g,
                            const mg_binding *binds, int n_binds, int root) {
    const char *who = "mg_dist_broadcast";
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    /* Every rank checks its list, then all agree before any byte moves:
     * a bad list on one rank fails every rank instead of leaving the
     * others waiting in a broadcast it never joins. */
    uint64_t fp = 0;
    int differs = -1;
    mg_status local = bcast_check(c, g, binds, n_binds, root, &fp);
    s = mgi_dist_agree_which(c, who, local, fp,
                             local != MG_OK ? local : MG_ERR_COMM, &differs);
    if (s != MG_OK) return s;
    if (differs >= 0) return bcast_explain(c, g, binds, n_binds, root, differs);
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
        int rc =
            MPI_Ibcast(binds[i].data, (int)mg_tensor_nbytes(g, binds[i].tensor),
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
