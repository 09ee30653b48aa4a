/*
 * phase.c - a training plan run in two calls (memgrad.h, "phases"): the
 * forward phase now, the backward phase later, with the state in between
 * held by an mg_saved rather than the executor, so that several forward
 * phases can be outstanding at once. Both phases are plans of their own
 * (src/rewrite/split.c) run by mg_exec_run; this file moves the saved
 * blocks between them and keeps their ownership straight: every pooled
 * block goes back to the pool exactly once, by the backward phase's
 * release lists or by mg_saved_free, or, for a forward output exported
 * with mg_saved_export, by whichever of saved and its consumers lets go
 * last. An exported forward output that the backward phase reads is
 * fingerprinted when first exported and checked by mg_exec_backward, so
 * that a caller's write into it between the phases is an error rather
 * than wrong gradients (saved_guard_*). Where the forward phase is a
 * prefix of the training plan's steps (split.c), both phases use the
 * plan's arena layout (arena.c): the saved tensors stay at their offsets
 * between the calls, owned by saved (buffer_pool.h), and the backward
 * phase runs round them, so the pair reserves what one mg_exec_run does.
 *
 * A plan that offloads (issue 51) runs its phases with its copies
 * (split.c): the forward phase copies each offloaded tensor out into host
 * memory that the saved state holds (lent by the executor's host tier),
 * and the backward phase copies it back from there, at the steps the
 * plan fixed, so the pair makes the one-call run's copies and reaches its
 * device peak. The host memory goes back to the tier when the backward
 * phase has consumed the saved state, or with mg_saved_free.
 */
#include "../graph/graph.h"
#include "../rewrite/offload.h"
#include "../rewrite/schedule.h"
#include "exec_internal.h"
#include "memgrad_dlpack.h"

#include <stdlib.h>
#include <string.h>

struct mg_saved {
    mg_exec *ex;
    const mg_plan *p;
    uint64_t seed;
    bool consumed; /* a backward phase released the saved tensors */
    int32_t n;
    mg_tensor *t;
    void **data; /* NULL once given back */
    size_t *nbytes;
    bool *pooled;
    /* per entry: NULL, or the reference saved holds on a block it exported
     * (the block then goes back when the last holder lets go) */
    mgi_block_ref **ref;
    /* per entry, allocated at the first export: whether the block is
     * exported and read by the backward phase, and then its fingerprint */
    bool *guarded;
    uint64_t *sum;
    /* A plan that offloads: the host memory its offloaded tensors wait in
     * (lent by the host tier, host_size bytes), and how many of its bytes
     * are counted in use in mg_host_stats (0 once copied back). */
    char *host;
    size_t host_size, host_in_use;
};

/* ------------------------------------------------ guarding saved exports
 * An exported block is caller-writable memory (DLPack has no read-only
 * flag that torch or numpy honour), and the backward phase reads some
 * forward outputs (tanh's, say) from the very block it exported. PyTorch
 * answers a write into a tensor that backward needs with an error from
 * its version counters; memory handed out through DLPack has no counter,
 * so memgrad keeps a fingerprint of the bytes instead: taken once, when
 * the block is first exported (it cannot have changed before then), and
 * compared when mg_exec_backward starts. The cost is one read of each
 * such output per phase pair, nothing for outputs backward does not read
 * or that are never exported. The hash is a chain of bijections per
 * 8-byte word, so a write that changes a single word is always caught. */
static uint64_t saved_guard_mix(uint64_t h, uint64_t w) {
    h ^= w;
    h *= 0x9e3779b97f4a7c15u;
    return h ^ (h >> 29);
}

static uint64_t saved_guard_hash(uint64_t h, const unsigned char *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = saved_guard_mix(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = saved_guard_mix(h, w);
    }
    return h;
}

/* The fingerprint of n bytes at data in ex's memory (through the host in
 * chunks where the device is not the CPU). */
static mg_status saved_guard_sum(mg_exec *ex, const void *data, size_t n,
                                 uint64_t *out) {
    uint64_t h = saved_guard_mix(0x6d656d6772616421u, (uint64_t)n);
    if (mgi_exec_device(ex) == MG_DEVICE_CPU) {
        *out = saved_guard_hash(h, data, n);
        return MG_OK;
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(n < CHUNK ? (n ? n : 1) : CHUNK);
    if (!buf) return mg_set_error(MG_ERR_NOMEM, "mg_saved: out of memory");
    mg_status s = MG_OK;
    for (size_t at = 0; at < n && s == MG_OK; at += CHUNK) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        s = mgi_exec_copy_to_host(ex, buf, (const char *)data + at, k);
        if (s == MG_OK) h = saved_guard_hash(h, buf, k);
    }
    free(buf);
    *out = h;
    return s;
}

/* Entry i is being exported: fingerprint it if the backward phase reads
 * it and it has none yet. */
static mg_status saved_guard_take(mg_saved *sv, int32_t i) {
    mg_tensor t = sv->t[i];
    if (!(sv->p->phase[1]->role[t] & MG_ROLE_LEAF)) return MG_OK;
    if (!sv->guarded) {
        sv->guarded = calloc((size_t)sv->n, sizeof *sv->guarded);
        sv->sum = calloc((size_t)sv->n, sizeof *sv->sum);
        if (!sv->guarded || !sv->sum) {
            free(sv->guarded);
            free(sv->sum);
            sv->guarded = NULL;
            sv->sum = NULL;
            return mg_set_error(MG_ERR_NOMEM, "mg_saved_export: out of memory");
        }
    }
    if (sv->guarded[i]) return MG_OK;
    mg_status s =
        saved_guard_sum(sv->ex, sv->data[i], sv->nbytes[i], &sv->sum[i]);
    if (s == MG_OK) sv->guarded[i] = true;
    return s;
}

/* Before a backward phase: every fingerprinted export still holds the
 * bytes the forward phase left, else MG_ERR_INVALID_ARG naming it. */
static mg_status saved_guard_check(const mg_saved *sv) {
    for (int32_t i = 0; sv->guarded && i < sv->n; i++) {
        if (!sv->guarded[i] || !sv->data[i]) continue;
        uint64_t h;
        mg_status s = saved_guard_sum(sv->ex, sv->data[i], sv->nbytes[i], &h);
        if (s != MG_OK) return s;
        if (h == sv->sum[i]) continue;
        char label[160];
        mgi_graph_tensor_label(sv->p->g, sv->t[i], label, sizeof label);
        return mg_set_error(
            MG_ERR_INVALID_ARG,
            "mg_exec_backward: forward output %s, exported with "
            "mg_saved_export, was written after the forward phase, and the "
            "backward phase reads it, so its gradients would be wrong; copy "
            "an exported output before writing into it (saved is unchanged "
            "and may be tried again once the values are restored)",
            label);
    }
    return MG_OK;
}

/* The bindings one phase q of p sees: the saved state's tensors first (so
 * none of them can be missed when a caller binding is refused), then the
 * caller's, less those that belong only to the other phase and those the
 * saved state already supplies. */
static mg_status phase_bindings(const mg_plan *p, const mg_plan *q,
                                const mg_saved *sv, const mg_binding *binds,
                                int n_binds, const char *what, mg_binding **out,
                                int *n_out) {
    *out = NULL;
    *n_out = 0;
    /* the caller's list as given (an index in a message is theirs, not
     * that of the merged list below) */
    mg_status st = mgi_plan_binds_check(p, binds, n_binds, what);
    if (st != MG_OK) return st;
    int cap = n_binds + (sv ? sv->n : 0);
    mg_binding *b = malloc((size_t)(cap ? cap : 1) * sizeof *b);
    if (!b) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    int n = 0;
    for (int32_t i = 0; sv && i < sv->n; i++)
        if (q->role[sv->t[i]] & MG_ROLE_LEAF)
            b[n++] = (mg_binding){sv->t[i], sv->data[i]};
    for (int i = 0; i < n_binds; i++) {
        mg_tensor t = binds[i].tensor;
        bool other_phase = q->role[t] == MG_ROLE_NONE &&
                           (mg_plan_leaf(p, t) || (p->role[t] & MG_ROLE_KEPT));
        bool from_saved =
            sv && (q->role[t] & MG_ROLE_LEAF) && !mg_plan_leaf(p, t);
        if (other_phase || from_saved) continue;
        b[n++] = binds[i];
    }
    *out = b;
    *n_out = n;
    return MG_OK;
}

static mg_status check_phased(const mg_exec *ex, const mg_plan *p,
                              const char *what) {
    if (!ex || !p)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: %s is NULL", what,
                            ex ? "plan" : "executor");
    if (!p->phase[0])
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "%s: the plan has no gradient steps; run it with "
                            "mg_exec_run",
                            what);
    if (p->offload && !p->phase[0]->phase_offload)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "%s: the plan offloads saved tensors "
                            "(mg_plan_options.offload) and runs forward "
                            "steps after backward ones, so its copies have "
                            "no phase boundary; run it in one call: "
                            "mg_exec_run",
                            what);
    return MG_OK;
}

mg_status mg_exec_forward(mg_exec *ex, const mg_plan *p,
                          const mg_binding *binds, int n_binds, uint64_t seed,
                          mg_saved **saved) {
    if (!saved)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_forward: saved is NULL");
    *saved = NULL;
    mg_status s = check_phased(ex, p, "mg_exec_forward");
    if (s != MG_OK) return s;
    const mg_plan *f = p->phase[0];
    size_t cap = (size_t)(f->n_kept ? f->n_kept : 1);
    mg_saved *sv = calloc(1, sizeof *sv);
    if (sv) {
        sv->t = malloc(cap * sizeof *sv->t);
        sv->data = malloc(cap * sizeof *sv->data);
        sv->nbytes = malloc(cap * sizeof *sv->nbytes);
        sv->pooled = malloc(cap * sizeof *sv->pooled);
        sv->ref = calloc(cap, sizeof *sv->ref);
    }
    mg_binding *b = NULL;
    int nb = 0;
    if (!sv || !sv->t || !sv->data || !sv->nbytes || !sv->pooled || !sv->ref)
        s = mg_set_error(MG_ERR_NOMEM, "mg_exec_forward: out of memory");
    if (s == MG_OK && p->offload &&
        !(sv->host =
              mgi_exec_host_lend(ex, p->offload->host_bytes, &sv->host_size)))
        s = mg_set_error(MG_ERR_NOMEM,
                         "mg_exec_forward: out of memory for the host tier");
    if (s == MG_OK)
        s = phase_bindings(p, f, NULL, binds, n_binds, "mg_exec_forward", &b,
                           &nb);
    if (s == MG_OK) s = mgi_exec_run_for(ex, f, b, nb, seed, sv, sv->host);
    free(b);
    if (s != MG_OK) {
        if (sv && sv->host) /* sv->ex is not set yet: give it back here */
            mgi_exec_host_give_back(ex, sv->host, sv->host_size, 0);
        if (sv) sv->host = NULL;
        mg_saved_free(sv);
        return s;
    }
    if (p->offload) sv->host_in_use = p->offload->info.offloaded_bytes;
    sv->ex = ex;
    /* saved gives blocks back to ex's pool in mg_saved_free, which may
     * come after mg_exec_free: hold ex until then, as an export does (a
     * use-after-free of the pool before, issue 49) */
    mgi_exec_hold(ex);
    sv->p = p;
    sv->seed = seed;
    sv->n = mgi_exec_take_kept(ex, sv->t, sv->data, sv->nbytes, sv->pooled);
    *saved = sv;
    return MG_OK;
}

mg_status mg_exec_backward(mg_exec *ex, const mg_plan *p, mg_saved *sv,
                           const mg_binding *binds, int n_binds) {
    mg_status s = check_phased(ex, p, "mg_exec_backward");
    if (s != MG_OK) return s;
    if (!sv)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_backward: saved is NULL");
    if (sv->ex != ex)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_backward: the saved state comes from "
                            "another executor");
    if (sv->p != p)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_backward: the saved state comes from "
                            "another plan's forward phase");
    if (sv->consumed)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_backward: this saved state was already "
                            "used by a backward phase; run mg_exec_forward "
                            "again");
    s = saved_guard_check(sv);
    if (s != MG_OK) return s;
    const mg_plan *bw = p->phase[1];
    mg_binding *b = NULL;
    int nb = 0;
    s = phase_bindings(p, bw, sv, binds, n_binds, "mg_exec_backward", &b, &nb);
    if (s != MG_OK) return s;
    s = mgi_exec_run_for(ex, bw, b, nb, sv->seed, sv, sv->host);
    free(b);
    if (s == MG_OK) sv->host_in_use = 0; /* every copy came back */
    /* after a failure: prefetch blocks handed to tensors the phase did
     * not release yet (the host copies stay with saved) */
    for (int32_t k = 0; s != MG_OK && p->offload && k < p->offload->n; k++) {
        const mg_tensor t = p->offload->copy[k].t;
        void *blk = mgi_exec_buf(ex, t);
        if (blk) mgi_exec_pool_free(ex, blk, mg_plan_nbytes(p, t));
    }
    /* The backward phase releases the saved tensors the training plan does
     * not keep. If it failed before releasing any, saved stays whole. */
    bool released = false;
    for (int32_t i = 0; i < sv->n; i++)
        if (!(p->role[sv->t[i]] & MG_ROLE_KEPT) && !mgi_exec_buf(ex, sv->t[i]))
            released = true;
    if (s == MG_OK || released) {
        for (int32_t i = 0; i < sv->n; i++) {
            if (p->role[sv->t[i]] & MG_ROLE_KEPT) continue;
            if (mgi_exec_buf(ex, sv->t[i]) && sv->pooled[i])
                mgi_exec_pool_free(ex, sv->data[i], sv->nbytes[i]);
            sv->data[i] = NULL;
        }
        sv->consumed = true;
        if (sv->host) {
            mgi_exec_host_give_back(ex, sv->host, sv->host_size,
                                    sv->host_in_use);
            sv->host = NULL;
            sv->host_in_use = 0;
        }
    }
    return s;
}

mg_status mg_saved_tensor_data(const mg_saved *sv, mg_tensor t,
                               const void **data) {
    if (!sv || !data)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_saved_tensor_data: %s is NULL",
                            sv ? "data" : "saved");
    for (int32_t i = 0; i < sv->n; i++)
        if (sv->t[i] == t && (sv->p->role[t] & MG_ROLE_KEPT)) {
            *data = sv->data[i];
            return MG_OK;
        }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_saved_tensor_data: tensor %d is not an output of "
                        "the forward phase",
                        (int)t);
}

size_t mg_saved_bytes(const mg_saved *sv) {
    size_t n = 0;
    for (int32_t i = 0; sv && i < sv->n; i++)
        if (sv->data[i] && sv->pooled[i])
            n += mg_pool_size_class(sv->nbytes[i]);
    return n;
}

mg_status mg_saved_export(mg_saved *sv, mg_tensor t, DLManagedTensor **out) {
    if (!sv || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_saved_export: %s is NULL",
                            sv ? "out" : "saved");
    *out = NULL;
    for (int32_t i = 0; i < sv->n; i++) {
        if (sv->t[i] != t || !(sv->p->role[t] & MG_ROLE_KEPT)) continue;
        if (!sv->pooled[i])
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_saved_export: tensor %d is in memory the "
                                "caller bound; only outputs left in the pool "
                                "are exported",
                                (int)t);
        if (!sv->ref[i]) {
            const mg_tdesc *d = mg_plan_desc(sv->p, t);
            sv->ref[i] =
                mgi_block_ref_new(sv->ex, sv->data[i], sv->nbytes[i], d);
            if (!sv->ref[i])
                return mg_set_error(MG_ERR_NOMEM,
                                    "mg_saved_export: out of memory");
        }
        mg_status s = saved_guard_take(sv, i);
        if (s != MG_OK) return s;
        return mgi_dlpack_export_ref(sv->ex, sv->ref[i], out,
                                     "mg_saved_export");
    }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_saved_export: tensor %d is not an output of the "
                        "forward phase",
                        (int)t);
}

void mg_saved_free(mg_saved *sv) {
    if (!sv) return;
    for (int32_t i = 0; i < sv->n; i++) {
        if (sv->ref && sv->ref[i]) mgi_block_ref_drop(sv->ref[i]);
        else if (sv->data[i] && sv->pooled[i])
            mgi_exec_pool_free(sv->ex, sv->data[i], sv->nbytes[i]);
    }
    free(sv->ref);
    free(sv->guarded);
    free(sv->sum);
    free(sv->t);
    free(sv->data);
    free(sv->nbytes);
    free(sv->pooled);
    if (sv->host && sv->ex)
        mgi_exec_host_give_back(sv->ex, sv->host, sv->host_size,
                                sv->host_in_use);
    /* last: with mg_exec_free done, this lets the executor go */
    if (sv->ex) mgi_exec_unhold(sv->ex);
    free(sv);
}
