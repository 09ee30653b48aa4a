/*
 * buckets.c - the gradient allreduce of memgrad_dist.h: gradients packed
 * into buckets, each averaged by a reduce-scatter (MPI_Ialltoallv plus a
 * sum in rank order on the chunk's owner) and an all-gather
 * (MPI_Iallgatherv). MPI moves bytes and never adds, so the average does
 * not depend on the MPI library's reduction order or on timing, and every
 * rank ends with the same bits.
 *
 * The layout, the start order, the status agreement and the step state
 * are the same for an NCCL handle; only the data movement (alloc, start,
 * progress, finish, unpack) goes to src/dist/nccl/ there.
 */
#include "dist.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MG_DIST_DEFAULT_BUCKET_BYTES ((size_t)25 << 20)

static void bucket_free_bufs(bucket *k) {
    free(k->flat);
    free(k->recv);
    free(k->counts);
    free(k->displs);
    free(k->rcounts);
    free(k->rdispls);
}

void mg_dist_buckets_free(mg_dist_buckets *b) {
    if (!b) return;
#ifdef MG_HAVE_NCCL
    if (b->c && b->c->nccl) mgi_nccl_buckets_free(b);
#endif
    for (int i = 0; i < b->n_buckets; i++) bucket_free_bufs(&b->b[i]);
    free(b->b);
    free(b->slots);
    free(b);
}

int mg_dist_buckets_count(const mg_dist_buckets *b) {
    return b ? b->n_buckets : -1;
}

static int slot_find(const mg_dist_buckets *b, mg_tensor t) {
    for (int i = 0; i < b->n_slots; i++)
        if (b->slots[i].t == t) return i;
    return -1;
}

int mg_dist_buckets_index(const mg_dist_buckets *b, mg_tensor t) {
    if (!b) return -1;
    int i = slot_find(b, t);
    return i < 0 ? -1 : b->slots[i].bucket;
}

mg_status mg_dist_buckets_stats(const mg_dist_buckets *b, mg_dist_stats *out) {
    if (!b || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_dist_buckets_stats: %s is NULL",
                            b ? "out" : "buckets");
    *out = b->stats;
    return MG_OK;
}

/* Check the gradient list and lay it out; fills b->slots and b->b (counts
 * and sizes only). MG_OK or a status with a message. */
static mg_status layout(mg_dist_buckets *b, const mg_graph *g,
                        const mg_binding *grads, int n_grads,
                        size_t bucket_bytes, uint64_t *fingerprint) {
    const char *who = "mg_dist_buckets_new";
    if (!g) return mg_set_error(MG_ERR_INVALID_ARG, "%s: graph is NULL", who);
    if (n_grads < 1 || !grads)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: %d gradients with a %s list (need >= 1)", who,
                            n_grads, grads ? "non-NULL" : "NULL");
    b->slots = calloc((size_t)n_grads, sizeof *b->slots);
    b->b = calloc((size_t)n_grads, sizeof *b->b); /* at most one each */
    if (!b->slots || !b->b)
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    uint64_t h = mgi_dist_hash(0xcbf29ce484222325ULL, (uint64_t)n_grads);
    h = mgi_dist_hash(h, (uint64_t)bucket_bytes);
    bucket *cur = NULL;
    size_t cur_bytes = 0;
    for (int i = 0; i < n_grads; i++) {
        mg_tensor t = grads[i].tensor;
        mg_dtype dt;
        if (mg_tensor_dtype(g, t, &dt) != MG_OK)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "%s: gradient %d names tensor id %d, not in "
                                "the graph",
                                who, i, (int)t);
        const char *name = mg_tensor_name(g, t) ? mg_tensor_name(g, t)
                                                : mg_tensor_op_name(g, t);
        if (dt != MG_F32 && dt != MG_F64)
            return mg_set_error(MG_ERR_DTYPE,
                                "%s: gradient %d (%s, tensor %d) is %s; only "
                                "f32 and f64 are averaged",
                                who, i, name, (int)t, mg_dtype_name(dt));
        if (!grads[i].data)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "%s: gradient %d (%s, tensor %d) has NULL "
                                "data",
                                who, i, name, (int)t);
#ifdef MG_HAVE_NCCL
        if (b->c->nccl) {
            mg_status s = mgi_nccl_check_ptr(b->c, grads[i].data, who,
                                             "gradient", i, name);
            if (s != MG_OK) return s;
        }
#endif
        for (int j = 0; j < i; j++)
            if (grads[j].tensor == t)
                return mg_set_error(MG_ERR_INVALID_ARG,
                                    "%s: tensor %d (%s) is listed twice "
                                    "(gradients %d and %d)",
                                    who, (int)t, name, j, i);
        int64_t numel = mg_tensor_numel(g, t);
        size_t nbytes = mg_tensor_nbytes(g, t);
        /* A new bucket on a dtype change or when this one would overflow
         * (a gradient larger than the cap still goes alone). MPI counts
         * are ints: no bucket may pass INT_MAX elements. */
        if (!cur || cur->dtype != dt ||
            (cur_bytes > 0 && cur_bytes + nbytes > bucket_bytes) ||
            cur->numel + numel > INT_MAX) {
            if (numel > INT_MAX)
                return mg_set_error(MG_ERR_UNSUPPORTED,
                                    "%s: gradient %s has %lld elements, more "
                                    "than an MPI count holds",
                                    who, name, (long long)numel);
            cur = &b->b[b->n_buckets++];
            cur->dtype = dt;
            cur->esize = mg_dtype_size(dt);
            cur->mtype = dt == MG_F32 ? MPI_FLOAT : MPI_DOUBLE;
            cur->first = i;
            cur_bytes = 0;
        }
        b->slots[i] = (grad_slot){.t = t,
                                  .data = grads[i].data,
                                  .numel = numel,
                                  .bucket = b->n_buckets - 1,
                                  .offset = cur->numel};
        cur->n++;
        cur->numel += numel;
        cur_bytes += nbytes;
        h = mgi_dist_hash(h, (uint64_t)numel);
        h = mgi_dist_hash(h, (uint64_t)dt);
    }
    b->n_slots = n_grads;
    *fingerprint = h;
    return MG_OK;
}

/* Buffers and chunk tables of every bucket, once the layout is agreed. */
static mg_status alloc_buckets(mg_dist_buckets *b) {
#ifdef MG_HAVE_NCCL
    if (b->c->nccl) return mgi_nccl_buckets_alloc(b);
#endif
    int size = b->c->size, me = b->c->rank;
    for (int i = 0; i < b->n_buckets; i++) {
        bucket *k = &b->b[i];
        k->counts = malloc((size_t)size * sizeof(int));
        k->displs = malloc((size_t)size * sizeof(int));
        k->rcounts = malloc((size_t)size * sizeof(int));
        k->rdispls = malloc((size_t)size * sizeof(int));
        k->flat = malloc((size_t)k->numel * k->esize);
        if (!k->counts || !k->displs || !k->rcounts || !k->rdispls || !k->flat)
            return mg_set_error(MG_ERR_NOMEM,
                                "mg_dist_buckets_new: out of memory");
        /* Chunks as even as integers allow; the first numel % size ranks
         * take one element more. */
        int64_t base = k->numel / size, extra = k->numel % size, off = 0;
        for (int r = 0; r < size; r++) {
            k->counts[r] = (int)(base + (r < extra));
            k->displs[r] = (int)off;
            off += k->counts[r];
        }
        int mine = k->counts[me];
        for (int r = 0; r < size; r++) {
            k->rcounts[r] = mine;
            k->rdispls[r] = r * mine;
        }
        /* size * mine <= numel + size - 1: may pass INT_MAX only by a
         * little, and then the displacement would overflow. */
        if ((int64_t)size * mine > INT_MAX)
            return mg_set_error(MG_ERR_UNSUPPORTED,
                                "mg_dist_buckets_new: bucket %d is too large "
                                "for MPI int displacements",
                                i);
        size_t recv_bytes =
            (size_t)(size * (int64_t)(mine ? mine : 1)) * k->esize;
        k->recv = malloc(recv_bytes);
        b->stats.buffer_bytes += (size_t)k->numel * k->esize + recv_bytes;
        if (!k->recv)
            return mg_set_error(MG_ERR_NOMEM,
                                "mg_dist_buckets_new: out of memory");
    }
    return MG_OK;
}

mg_status mg_dist_buckets_new(mg_dist_comm *c, const mg_graph *g,
                              const mg_binding *grads, int n_grads,
                              size_t bucket_bytes, mg_dist_buckets **out) {
    const char *who = "mg_dist_buckets_new";
    if (out) *out = NULL;
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    if (bucket_bytes == 0) bucket_bytes = MG_DIST_DEFAULT_BUCKET_BYTES;
    /* A NULL out or no memory still joins the agreement, so the other
     * ranks fail too instead of waiting for this one until they time out. */
    if (!out) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: out is NULL", who);
        return mgi_dist_agree(c, who, MG_ERR_INVALID_ARG, 0,
                              MG_ERR_INVALID_ARG);
    }
    mg_dist_buckets *b = calloc(1, sizeof *b);
    if (!b) {
        mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
        return mgi_dist_agree(c, who, MG_ERR_NOMEM, 0, MG_ERR_NOMEM);
    }
    b->c = c;
    uint64_t fp = 0;
    mg_status local = layout(b, g, grads, n_grads, bucket_bytes, &fp);
    if (local == MG_OK) local = alloc_buckets(b);
    s = mgi_dist_agree(c, who, local, fp, local != MG_OK ? local : MG_ERR_COMM);
    if (s != MG_OK) {
        mg_dist_buckets_free(b);
        return s;
    }
    *out = b;
    return MG_OK;
}

/* Pack bucket k's gradients and issue its reduce-scatter. */
static mg_status bucket_start(mg_dist_buckets *b, int i, const char *who) {
#ifdef MG_HAVE_NCCL
    if (b->c->nccl) return mgi_nccl_bucket_start(b, i, who);
#endif
    bucket *k = &b->b[i];
    mg_dist_comm *c = b->c;
    for (int j = k->first; j < k->first + k->n; j++) {
        const grad_slot *sl = &b->slots[j];
        memcpy((char *)k->flat + (size_t)sl->offset * k->esize, sl->data,
               (size_t)sl->numel * k->esize);
    }
    int rc = MPI_Ialltoallv(k->flat, k->counts, k->displs, k->mtype, k->recv,
                            k->rcounts, k->rdispls, k->mtype, c->comm, &k->req);
    if (rc != MPI_SUCCESS)
        return mgi_dist_mpi_fail(c, who, "MPI_Ialltoallv", rc);
    k->state = BUCKET_SCATTER;
    b->stats.collectives++;
    b->stats.bytes_sent +=
        (uint64_t)(k->numel - k->counts[c->rank]) * (uint64_t)k->esize;
    return MG_OK;
}

/* Start buckets next_start..upto, in order. */
static mg_status start_upto(mg_dist_buckets *b, int upto, const char *who) {
    while (b->next_start <= upto) {
        mg_status s = bucket_start(b, b->next_start, who);
        if (s != MG_OK) return s;
        b->next_start++;
    }
    return MG_OK;
}

mg_status mg_dist_bucket_start(mg_dist_buckets *b, int k) {
    const char *who = "mg_dist_bucket_start";
    if (!b) return mg_set_error(MG_ERR_INVALID_ARG, "%s: buckets is NULL", who);
    mg_status s = mgi_dist_check_usable(b->c, who);
    if (s != MG_OK) return s;
    if (k < 0 || k >= b->n_buckets)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: bucket %d out of range (%d buckets)", who, k,
                            b->n_buckets);
    return start_upto(b, k, who);
}

mg_status mg_dist_grad_ready(mg_dist_buckets *b, mg_tensor t) {
    const char *who = "mg_dist_grad_ready";
    if (!b) return mg_set_error(MG_ERR_INVALID_ARG, "%s: buckets is NULL", who);
    mg_status s = mgi_dist_check_usable(b->c, who);
    if (s != MG_OK) return s;
    int i = slot_find(b, t);
    if (i < 0)
        return mg_set_error(MG_ERR_UNKNOWN_ID,
                            "%s: tensor %d is not one of the bucketed "
                            "gradients",
                            who, (int)t);
    grad_slot *sl = &b->slots[i];
    if (sl->ready) return MG_OK; /* idempotent within a step */
    sl->ready = true;
    bucket *k = &b->b[sl->bucket];
    k->n_ready++;
    /* Start every complete bucket that is next in line: a bucket that
     * completes early waits for the ones below it. */
    while (b->next_start < b->n_buckets &&
           b->b[b->next_start].n_ready == b->b[b->next_start].n) {
        s = bucket_start(b, b->next_start, who);
        if (s != MG_OK) return s;
        b->next_start++;
    }
    return MG_OK;
}

mg_status mg_dist_progress(mg_dist_buckets *b) {
    const char *who = "mg_dist_progress";
    if (!b) return mg_set_error(MG_ERR_INVALID_ARG, "%s: buckets is NULL", who);
    mg_status s = mgi_dist_check_usable(b->c, who);
    if (s != MG_OK) return s;
#ifdef MG_HAVE_NCCL
    if (b->c->nccl) return mgi_nccl_progress(b, who);
#endif
    /* Test only. Issuing the all-gather of a bucket whose scatter is
     * found complete here would depend on timing, and MPI requires every
     * rank to issue its collectives in the same order: the gathers are
     * issued by mg_dist_allreduce, in bucket order, on every rank. */
    for (int i = 0; i < b->next_start; i++) {
        int done = 0;
        int rc = MPI_Test(&b->b[i].req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mgi_dist_mpi_fail(b->c, who, "MPI_Test", rc);
    }
    return MG_OK;
}

/* Average this rank's chunk of bucket k: sum the contributions in rank
 * order, f32 in double, and divide once. Written into flat in place. */
static void chunk_average(const mg_dist_buckets *b, bucket *k) {
    int size = b->c->size, me = b->c->rank;
    int mine = k->counts[me];
    if (k->dtype == MG_F32) {
        const float *in = k->recv;
        float *out = (float *)k->flat + k->displs[me];
        for (int e = 0; e < mine; e++) {
            double acc = 0;
            for (int r = 0; r < size; r++)
                acc += (double)in[(size_t)r * (size_t)mine + (size_t)e];
            /* The double sum of N f32 values is exact unless their
             * exponents spread over more than 29 - log2(N) bits; the
             * division and the cast to f32 round. */
            out[e] = (float)(acc / size);
        }
    } else {
        const double *in = k->recv;
        double *out = (double *)k->flat + k->displs[me];
        for (int e = 0; e < mine; e++) {
            double acc = 0;
            for (int r = 0; r < size; r++)
                acc += in[(size_t)r * (size_t)mine + (size_t)e];
            out[e] = acc / size;
        }
    }
}

/* Reset per-step state; called when the step ends, well or not. */
static void step_reset(mg_dist_buckets *b) {
    for (int i = 0; i < b->n_slots; i++) b->slots[i].ready = false;
    for (int i = 0; i < b->n_buckets; i++) {
        b->b[i].n_ready = 0;
        b->b[i].state = BUCKET_IDLE;
    }
    b->next_start = 0;
}

/* Complete every started bucket: wait for its scatter, average this
 * rank's chunk, issue its gather, and wait for all the gathers. */
static mg_status finish(mg_dist_buckets *b, const char *who) {
    mg_dist_comm *c = b->c;
#ifdef MG_HAVE_NCCL
    if (c->nccl) return mgi_nccl_finish(b, who);
#endif
    MPI_Request *reqs = malloc((size_t)b->n_buckets * sizeof *reqs);
    if (!reqs) {
        mgi_dist_break(c, "out of memory in %s", who);
        return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", who);
    }
    mg_status s = MG_OK;
    /* Buckets finish their scatter in issue order; each is averaged and
     * its gather issued while later scatters are still moving. */
    for (int i = 0; s == MG_OK && i < b->n_buckets; i++) {
        bucket *k = &b->b[i];
        s = mgi_dist_wait(c, who, &k->req, 1);
        if (s != MG_OK) break;
        chunk_average(b, k);
        int rc =
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, k->flat,
                            k->counts, k->displs, k->mtype, c->comm, &k->req);
        if (rc != MPI_SUCCESS) {
            s = mgi_dist_mpi_fail(c, who, "MPI_Iallgatherv", rc);
            break;
        }
        k->state = BUCKET_GATHER;
        b->stats.collectives++;
        b->stats.bytes_sent += (uint64_t)k->counts[c->rank] *
                               (uint64_t)(c->size - 1) * (uint64_t)k->esize;
    }
    if (s == MG_OK) {
        for (int i = 0; i < b->n_buckets; i++) reqs[i] = b->b[i].req;
        s = mgi_dist_wait(c, who, reqs, b->n_buckets);
    }
    free(reqs);
    return s;
}

/* Copy the averaged buckets into the caller's gradient buffers. */
static mg_status unpack(mg_dist_buckets *b, const char *who) {
#ifdef MG_HAVE_NCCL
    if (b->c->nccl) return mgi_nccl_unpack(b, who);
#else
    (void)who;
#endif
    for (int j = 0; j < b->n_slots; j++) {
        const grad_slot *sl = &b->slots[j];
        const bucket *k = &b->b[sl->bucket];
        memcpy(sl->data, (const char *)k->flat + (size_t)sl->offset * k->esize,
               (size_t)sl->numel * k->esize);
    }
    return MG_OK;
}

mg_status mg_dist_allreduce(mg_dist_buckets *b, mg_status local) {
    const char *who = "mg_dist_allreduce";
    if (!b) return mg_set_error(MG_ERR_INVALID_ARG, "%s: buckets is NULL", who);
    mg_dist_comm *c = b->c;
    mg_status s = mgi_dist_check_usable(c, who);
    if (s != MG_OK) return s;
    double t0 = mgi_dist_now();
    /* Keep the failing rank's own message through the collectives. */
    char own[512] = "";
    if (local != MG_OK) snprintf(own, sizeof own, "%s", mg_last_error());
    /* A failed rank still runs every collective (on whatever its buffers
     * hold): the ranks must issue the same collectives in the same order,
     * and the statuses are compared at the end, before anything is
     * written back. */
    s = start_upto(b, b->n_buckets - 1, who);
    if (s == MG_OK) s = finish(b, who);
    if (s != MG_OK) { /* the handle is broken: MPI said so, or time ran out */
        step_reset(b);
        b->stats.wait_seconds += mgi_dist_now() - t0;
        return s;
    }
    if (local != MG_OK) mg_set_error(local, "%s", own);
    s = mgi_dist_agree(c, who, local, 0, MG_ERR_COMM);
    if (s == MG_OK) s = unpack(b, who);
    if (s == MG_OK) b->stats.steps++;
    step_reset(b);
    b->stats.wait_seconds += mgi_dist_now() - t0;
    return s;
}
