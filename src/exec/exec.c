/*
 * exec.c - the executor: walks a compiled plan on a backend, taking each
 * computed tensor and each step's workspace from the pool (at the offset
 * the plan gave it in the pool's arena, or from the cache for what
 * outlives the run) and returning them after their last reader, exactly
 * as the plan says. It
 * reads the plan's step records and descriptors, never graph nodes, and
 * finds its backend in the backend table by device.
 *
 * Ownership: memory in bindings belongs to the caller. Leaves are only
 * read; a bound output is the only caller memory ever written. Pool blocks
 * belong to the executor; outputs left in the pool are kept until
 * mg_exec_release or the next run.
 */
#include "../rewrite/schedule.h"
#include "buffer_pool.h"
#include "exec_internal.h"
#include "host_tier.h"
#include "observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mg_kept {
    mg_tensor t;
    void *data;
    size_t nbytes;
    bool pooled;        /* false: caller memory (a bound output or a leaf) */
    mgi_block_ref *ref; /* set once exported: the block is shared */
    mg_tdesc d;
} mg_kept;

struct mg_exec {
    mg_backend backend;
    mg_pool pool;
    void **buf;   /* per tensor id during a run */
    bool *pooled; /* per tensor id: buf came from the pool this run */
    int32_t buf_cap;
    mg_kept *kept;
    int32_t n_kept;
    mgi_observers obs; /* observe.c */
    /* holders that keep it alive: shared blocks still held (dlpack.c)
     * and saved states not yet freed (phase.c) */
    int32_t n_refs;
    bool dying; /* mg_exec_free waits for the last of them */
    mg_device device;
    const mg_backend_reg *reg; /* its row of backend/registry.c */
    int num_threads;           /* mg_exec_options.num_threads (threads.c) */
    /* mg_exec_accumulate's list, and per tensor id during a run: the
     * output is bound and accumulated into */
    mg_tensor *acc;
    int n_acc;
    bool *acc_on;
    mgi_host_tier host; /* offloaded tensors' tier (host_tier.c) */
};

mgi_observers *mgi_exec_observers(mg_exec *ex) { return &ex->obs; }

/* A device this build has no row for: a known enum value whose backend
 * was not built, or no device at all. */
static mg_status unknown_device(mg_device dev) {
    char have[128] = "";
    for (int i = 0; i < mgi_backend_table_size; i++) {
        size_t at = strlen(have);
        snprintf(have + at, sizeof have - at, "%s%s (%d)", i ? ", " : "",
                 mgi_backend_table[i]->name, (int)mgi_backend_table[i]->device);
    }
    if (dev == MG_DEVICE_CUDA)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "mg_exec_new: no CUDA device: memgrad was built "
                            "without CUDA (it has %s)",
                            have);
    return mg_set_error(MG_ERR_INVALID_ARG,
                        "mg_exec_new: unknown device %d (this build has %s)",
                        (int)dev, have);
}

mg_status mg_exec_new(const mg_exec_options *opts, mg_exec **out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_exec_new: out is NULL");
    *out = NULL;
    mg_device dev = opts ? opts->device : MG_DEVICE_CPU;
    const mg_backend_reg *reg = mgi_backend_find(dev);
    if (!reg) return unknown_device(dev);
    if (opts && opts->num_threads < 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_new: num_threads %d is negative",
                            opts->num_threads);
    /* Without a device, a backend's init refuses and says why (a CUDA
     * module row: no driver, or the driver sees no device). */
    mg_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return mg_set_error(MG_ERR_NOMEM, "mg_exec_new: out of memory");
    mg_status s = reg->init(&ex->backend);
    if (s != MG_OK) {
        free(ex);
        return s;
    }
    mgi_pool_init(&ex->pool, &ex->backend, opts ? opts->max_bytes : 0);
    ex->num_threads = opts ? opts->num_threads : 0;
    ex->device = dev;
    ex->reg = reg;
    *out = ex;
    return MG_OK;
}

void mg_exec_release(mg_exec *ex) {
    if (!ex) return;
    for (int32_t i = 0; i < ex->n_kept; i++)
        if (ex->kept[i].ref) mgi_block_ref_drop(ex->kept[i].ref);
        else if (ex->kept[i].pooled)
            mgi_pool_free(&ex->pool, ex->kept[i].data, ex->kept[i].nbytes);
    free(ex->kept);
    ex->kept = NULL;
    ex->n_kept = 0;
}

static void exec_destroy(mg_exec *ex) {
    mgi_pool_destroy(&ex->pool);
    mgi_host_tier_destroy(&ex->host);
    if (ex->backend.destroy) ex->backend.destroy(ex->backend.ctx);
    free(ex->buf);
    free(ex->pooled);
    free(ex->acc);
    free(ex->acc_on);
    mgi_observers_free(&ex->obs);
    free(ex);
}

/* An exported block, or a saved state of a forward phase, keeps its
 * executor's pool and backend alive: the executor goes when the last
 * holder lets go. */
void mg_exec_free(mg_exec *ex) {
    if (!ex) return;
    mg_exec_release(ex);
    if (ex->n_refs > 0) ex->dying = true;
    else exec_destroy(ex);
}

typedef struct bound_range {
    uintptr_t lo, hi; /* [lo, hi) */
    int bind;         /* index into the bindings */
} bound_range;

static int compare_ranges(const void *a, const void *b) {
    uintptr_t x = ((const bound_range *)a)->lo,
              y = ((const bound_range *)b)->lo;
    return (x > y) - (x < y);
}

/* A binding of a leaf the plan does not read is ignored: neither read
 * nor checked, so one binding list serves a forward and a training plan
 * alike (memgrad.h, mg_exec_run). */
static bool binding_ignored(const mg_plan *p, mg_tensor t) {
    return p->role[t] == MG_ROLE_NONE && mg_plan_leaf(p, t);
}

/* A bound output must not overlap any other binding: it would overwrite an
 * input mid-run, or another output. Sorting by address finds any overlap
 * between neighbours in O(b log b). */
static mg_status check_overlaps(const mg_plan *p, const mg_binding *binds,
                                int n_binds) {
    if (n_binds <= 0) return MG_OK; /* the list was checked in bind() */
    bound_range *r = malloc((size_t)n_binds * sizeof *r);
    if (!r) return mg_set_error(MG_ERR_NOMEM, "mg_exec_run: out of memory");
    int n = 0;
    for (int i = 0; i < n_binds; i++) {
        if (binding_ignored(p, binds[i].tensor)) continue;
        uintptr_t lo = (uintptr_t)binds[i].data;
        r[n++] = (bound_range){lo, lo + mg_plan_nbytes(p, binds[i].tensor), i};
    }
    qsort(r, (size_t)n, sizeof *r, compare_ranges);
    mg_status s = MG_OK;
    uintptr_t reach = 0;
    int reach_bind = -1;
    for (int i = 0; i < n && s == MG_OK; i++) {
        if (reach_bind >= 0 && r[i].lo < reach) {
            mg_tensor a = binds[reach_bind].tensor, b = binds[r[i].bind].tensor;
            bool a_out = (p->role[a] & MG_ROLE_COMPUTED) != 0;
            bool b_out = (p->role[b] & MG_ROLE_COMPUTED) != 0;
            if (a_out || b_out) {
                char la[160], lb[160];
                s = mg_set_error(
                    MG_ERR_INVALID_ARG,
                    "mg_exec_run: output %s overlaps the memory bound to %s",
                    mgi_graph_tensor_label(p->g, a_out ? a : b, la, sizeof la),
                    mgi_graph_tensor_label(p->g, a_out ? b : a, lb, sizeof lb));
            }
        }
        if (r[i].hi > reach || reach_bind < 0) {
            reach = r[i].hi;
            reach_bind = r[i].bind;
        }
    }
    free(r);
    return s;
}

/* Check bindings and write caller pointers into ex->buf. */
static mg_status bind(mg_exec *ex, const mg_plan *p, const mg_binding *binds,
                      int n_binds) {
    const mg_graph *g = p->g;
    char label[160];
    /* the list and its ids as the plan's predictions check them */
    mg_status st = mgi_plan_binds_check(p, binds, n_binds, "mg_exec_run");
    if (st != MG_OK) return st;
    for (int i = 0; i < n_binds; i++) {
        mg_tensor t = binds[i].tensor;
        if (binding_ignored(p, t)) continue;
        mgi_graph_tensor_label(g, t, label, sizeof label);
        if (!binds[i].data)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_exec_run: binding for %s has NULL data",
                                label);
        /* Kernels read and write whole elements through typed pointers: a
         * misaligned one is undefined behaviour (and slow or a fault on
         * some machines), so refuse it rather than copy behind the
         * caller's back. */
        const mg_dtype dt = mg_plan_desc(p, t)->dtype;
        if ((uintptr_t)binds[i].data % mg_dtype_size(dt) != 0)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_exec_run: binding for %s at %p is not "
                                "aligned to its dtype (%s needs %zu-byte "
                                "alignment)",
                                label, binds[i].data, mg_dtype_name(dt),
                                mg_dtype_size(dt));
        uint8_t role = p->role[t];
        /* A leaf the plan does not read may be bound and is ignored, so
         * one binding list serves a forward and a training plan alike. */
        if (!mg_plan_leaf(p, t) && !(role & (MG_ROLE_LEAF | MG_ROLE_KEPT)))
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_exec_run: %s is %s; only inputs, parameters, outputs and "
                "retained tensors take caller memory",
                label,
                role ? "an intermediate of the plan" : "not in the plan");
        if (ex->buf[t])
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_exec_run: %s is bound twice", label);
        ex->buf[t] = binds[i].data;
    }
    mg_status s = check_overlaps(p, binds, n_binds);
    if (s != MG_OK) return s;
    for (int32_t i = 0; i < p->n_leaves; i++)
        if (!ex->buf[p->leaves[i]])
            return mg_set_error(
                MG_ERR_UNBOUND, "mg_exec_run: %s has no memory bound",
                mgi_graph_tensor_label(g, p->leaves[i], label, sizeof label));
    return MG_OK;
}

/* ex->acc_on for this run: the outputs of mg_exec_accumulate's list that
 * p computes and the caller bound. One that a later step reads is
 * refused: that step would read the sum instead of the value. */
static mg_status mark_accumulated(mg_exec *ex, const mg_plan *p) {
    int n_on = 0;
    for (int i = 0; i < ex->n_acc; i++) {
        const mg_tensor t = ex->acc[i];
        if (t >= p->n_tensors || !(p->role[t] & MG_ROLE_COMPUTED) ||
            !(p->role[t] & MG_ROLE_KEPT) || !ex->buf[t])
            continue;
        ex->acc_on[t] = true;
        n_on++;
    }
    for (int32_t st = 0; n_on && st < p->n_steps; st++)
        for (int k = 0; k < p->step[st].n_in; k++) {
            const mg_tensor in = p->step[st].in[k];
            if (!ex->acc_on[in]) continue;
            char la[160], lb[160];
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_exec_run: output %s is to be accumulated into "
                "(mg_exec_accumulate), but %s reads it, and would read the "
                "sum; bind it without accumulating",
                mgi_graph_tensor_label(p->g, in, la, sizeof la),
                mgi_graph_tensor_label(p->g, p->steps[st], lb, sizeof lb));
        }
    return MG_OK;
}

mg_status mg_exec_accumulate(mg_exec *ex, const mg_tensor *ts, int n) {
    if (!ex)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_accumulate: executor is NULL");
    if (n < 0 || (n > 0 && !ts))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_accumulate: %d tensors%s", n,
                            n < 0 ? "" : " with a NULL list");
    for (int i = 0; i < n; i++)
        if (ts[i] < 0)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "mg_exec_accumulate: tensor %d (entry %d) "
                                "is no tensor id",
                                (int)ts[i], i);
    mg_tensor *acc = NULL;
    if (n > 0 && !(acc = malloc((size_t)n * sizeof *acc)))
        return mg_set_error(MG_ERR_NOMEM, "mg_exec_accumulate: out of memory");
    if (n > 0) memcpy(acc, ts, (size_t)n * sizeof *acc);
    free(ex->acc);
    ex->acc = acc;
    ex->n_acc = n;
    return MG_OK;
}

/* A block for step s's output (out) or workspace: at its offset in the
 * arena when the run is served from it and the plan placed the buffer
 * there, else from the cache. */
static void *step_block(mg_exec *ex, const mg_plan *p, int32_t s, bool out,
                        size_t nbytes) {
    const size_t off = out ? p->out_off[s] : p->work_off[s];
    if (ex->pool.arena_on && off != SIZE_MAX)
        return mgi_pool_arena_take(&ex->pool, off, nbytes);
    return mgi_pool_alloc(&ex->pool, nbytes);
}

/* Add the value at v into the caller's memory at into (both of
 * descriptor d), by the backend's add kernel: one addition per element,
 * into + v, as PyTorch adds a gradient into .grad. */
static mg_status accumulate_into(mg_exec *ex, const mg_plan *p, mg_tensor t,
                                 void *into, void *v) {
    static const mg_attrs no_attrs;
    const mg_tdesc d = *mg_plan_desc(p, t);
    char why[256] = "", label[160];
    mg_kargs a = {.op = MG_OP_ADD,
                  .attrs = &no_attrs,
                  .n_in = 2,
                  .in = {{into, d}, {v, d}},
                  .out = {into, d},
                  .why = why,
                  .why_len = sizeof why};
    const size_t need = ex->backend.workspace(ex->backend.ctx, &a);
    if (need && !(a.work = mgi_pool_alloc(&ex->pool, need)))
        return mg_set_error(
            MG_ERR_NOMEM,
            "mg_exec_run: out of memory allocating %zu bytes of workspace to "
            "accumulate into %s",
            need, mgi_graph_tensor_label(p->g, t, label, sizeof label));
    a.work_bytes = need;
    mg_status s = ex->backend.run_op(ex->backend.ctx, &a);
    if (a.work) mgi_pool_free(&ex->pool, a.work, need);
    if (s != MG_OK)
        return mg_set_error(
            s, "mg_exec_run: accumulating into %s failed: %s",
            mgi_graph_tensor_label(p->g, t, label, sizeof label),
            why[0] ? why : mg_last_error());
    return MG_OK;
}

static mg_status run_step(mg_exec *ex, const mg_plan *p, int32_t si,
                          uint64_t seed) {
    const mg_plan_step *st = &p->step[si];
    const mg_tensor t = p->steps[si];
    const size_t work = mg_plan_step_work(st);
    char label[160];
    size_t nbytes = mg_plan_nbytes(p, t);
    if (st->view) { /* no buffer, no kernel: in[0]'s block (plan_views) */
        ex->buf[t] = ex->buf[st->in[0]];
        return MG_OK;
    }
    /* a fused chain of element-wise ops (src/rewrite/fuse.c) */
    const mg_fused_instr *chain = NULL;
    int n_chain = 0;
    if (st->op == MG_STEP_FUSED) {
        if (!mgi_fusion_find(p, t, &chain, NULL, &n_chain))
            return mg_set_error(
                MG_ERR_INTERNAL, "mg_exec_run: %s: the plan lost its chain",
                mgi_graph_tensor_label(p->g, t, label, sizeof label));
        if (!ex->backend.run_fused)
            return mg_set_error(
                MG_ERR_UNSUPPORTED,
                "mg_exec_run: %s failed: the plan runs it as a fused chain "
                "of %d element-wise ops, and the %s backend has no fused "
                "kernel; compile the plan for this device "
                "(mg_plan_options.device) or with no_fusion",
                mgi_graph_tensor_label(p->g, t, label, sizeof label), n_chain,
                ex->backend.name);
    } else if (!ex->backend.supports_op(ex->backend.ctx, st->op))
        return mg_set_error(
            MG_ERR_UNSUPPORTED,
            "mg_exec_run: %s failed: %s backend: no "
            "kernel for op %s",
            mgi_graph_tensor_label(p->g, t, label, sizeof label),
            ex->backend.name, mgi_op_str(st->op));
    if (!ex->buf[t]) {
        ex->buf[t] = step_block(ex, p, si, true, nbytes);
        if (!ex->buf[t])
            return mg_set_error(
                MG_ERR_NOMEM,
                "mg_exec_run: out of memory allocating %zu bytes for %s "
                "(%zu in use, limit %zu)",
                nbytes, mgi_graph_tensor_label(p->g, t, label, sizeof label),
                ex->pool.stats.bytes_in_use, ex->pool.max_bytes);
        ex->pooled[t] = true;
    }
    /* an accumulated output: its value goes to the slot first */
    void *out = ex->buf[t];
    const bool acc = ex->acc_on[t];
    if (acc && !(out = mgi_pool_slot_take(&ex->pool, nbytes)))
        return mg_set_error(
            MG_ERR_NOMEM,
            "mg_exec_run: out of memory allocating %zu bytes to accumulate "
            "into %s (%zu in use, limit %zu)",
            nbytes, mgi_graph_tensor_label(p->g, t, label, sizeof label),
            ex->pool.stats.bytes_in_use, ex->pool.max_bytes);
    char why[256] = "";
    mg_kargs a = {.op = st->op,
                  .attrs = p->g->nodes[t].attrs,
                  .n_in = st->n_in,
                  .out = {out, *mg_plan_desc(p, t)},
                  .run_seed = seed,
                  .work_bytes = work,
                  .why = why,
                  .why_len = sizeof why,
                  .fused = chain,
                  .n_fused = n_chain};
    for (int i = 0; i < st->n_in; i++)
        a.in[i] = (mg_kbuf){ex->buf[st->in[i]], *mg_plan_desc(p, st->in[i])};
    /* Scratch only ever comes from the pool, as much as the plan counted
     * (a fused chain's tiles are on the stack). */
    size_t need = chain ? 0 : ex->backend.workspace(ex->backend.ctx, &a);
    if (need > work) {
        if (acc) mgi_pool_slot_give(&ex->pool, nbytes);
        return mg_set_error(
            MG_ERR_INTERNAL,
            "mg_exec_run: %s failed: the %s backend needs %zu bytes of "
            "workspace, the plan has %zu",
            mgi_graph_tensor_label(p->g, t, label, sizeof label),
            ex->backend.name, need, work);
    }
    if (work && !(a.work = step_block(ex, p, si, false, work))) {
        if (acc) mgi_pool_slot_give(&ex->pool, nbytes);
        return mg_set_error(
            MG_ERR_NOMEM,
            "mg_exec_run: out of memory allocating %zu bytes of workspace for "
            "%s (%zu in use, limit %zu)",
            work, mgi_graph_tensor_label(p->g, t, label, sizeof label),
            ex->pool.stats.bytes_in_use, ex->pool.max_bytes);
    }
    mg_status s = chain ? ex->backend.run_fused(ex->backend.ctx, &a)
                        : ex->backend.run_op(ex->backend.ctx, &a);
    if (a.work) mgi_pool_free(&ex->pool, a.work, work);
    if (acc && s == MG_OK) {
        s = accumulate_into(ex, p, t, ex->buf[t], out);
        mgi_pool_slot_give(&ex->pool, nbytes);
        if (s != MG_OK) return s;
    } else if (acc) {
        mgi_pool_slot_give(&ex->pool, nbytes);
    }
    if (s != MG_OK)
        return mg_set_error(
            s, "mg_exec_run: %s failed: %s",
            mgi_graph_tensor_label(p->g, t, label, sizeof label),
            why[0] ? why : mg_last_error());
    return MG_OK;
}

/* After a failure: give back every pool block this run still holds. */
static void unwind(mg_exec *ex, const mg_plan *p) {
    for (int32_t st = 0; st < p->n_steps; st++) {
        mg_tensor t = p->steps[st];
        if (ex->pooled[t] && ex->buf[t])
            mgi_pool_free(&ex->pool, ex->buf[t], mg_plan_nbytes(p, t));
    }
}

static mg_status keep_outputs(mg_exec *ex, const mg_plan *p) {
    ex->kept = malloc((size_t)(p->n_kept ? p->n_kept : 1) * sizeof *ex->kept);
    if (!ex->kept)
        return mg_set_error(MG_ERR_NOMEM, "mg_exec_run: out of memory");
    for (int32_t k = 0; k < p->n_kept; k++) {
        mg_tensor t = p->kept[k];
        ex->kept[ex->n_kept++] = (mg_kept){
            t,    ex->buf[t],         mg_plan_nbytes(p, t), ex->pooled[t],
            NULL, *mg_plan_desc(p, t)};
    }
    return MG_OK;
}

static mg_status run_plan(mg_exec *ex, const mg_plan *p, uint64_t seed,
                          const void *owner, char *host) {
    const bool watch = mgi_observe_wanted(&ex->obs, p);
    mg_status s = watch ? mgi_observe_run_start(&ex->obs, p) : MG_OK;
    mgi_pool_arena_begin(&ex->pool, p->arena_bytes, owner);
    int32_t base = 0;
    const mg_offload_plan *off = mgi_host_tier_copies(p, &base);
    bool off_on = false;
    if (s == MG_OK && off) {
        s = mgi_host_tier_begin(&ex->host, off, ex->device, host);
        off_on = s == MG_OK;
    }
    for (int32_t st = 0; st < p->n_steps && s == MG_OK; st++) {
        size_t before = 0;
        if (off && (s = mgi_host_tier_before(&ex->host, off, base, p, st,
                                              ex->buf, &ex->pool)))
            break;
        if (watch && (s = mgi_observe_before(&ex->obs, p, st, &ex->pool,
                                             &before)) != MG_OK)
            break;
        s = run_step(ex, p, st, seed);
        if (watch && s == MG_OK)
            s = mgi_observe_after(&ex->obs, p, st, before, &ex->pool,
                                  ex->buf[p->steps[st]]);
        if (s != MG_OK) break;
        for (int32_t r = p->release_start[st]; r < p->release_start[st + 1];
             r++) {
            mg_tensor dead = p->release[r];
            mgi_pool_free(&ex->pool, ex->buf[dead], mg_plan_nbytes(p, dead));
            ex->buf[dead] = NULL;
        }
        if (off)
            s = mgi_host_tier_after(&ex->host, off, base, p, st, ex->buf,
                                    &ex->pool);
    }
    /* no copy may touch a block once the run gives it back */
    if (off_on) mgi_host_tier_end(&ex->host, off, p, &ex->pool, s == MG_OK);
    if (s == MG_OK) s = ex->backend.synchronize(ex->backend.ctx);
    if (watch) s = mgi_observe_run_end(&ex->obs, p, s);
    if (s == MG_OK) s = keep_outputs(ex, p);
    if (s != MG_OK) unwind(ex, p);
    mgi_pool_arena_end(&ex->pool, owner);
    return s;
}

mg_status mg_exec_run(mg_exec *ex, const mg_plan *p, const mg_binding *binds,
                      int n_binds, uint64_t seed) {
    if (p && !p->offload && p->phase_offload)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_run: the plan is a phase of a plan "
                            "that offloads; run that plan");
    return mgi_exec_run_for(ex, p, binds, n_binds, seed, NULL, NULL);
}

mg_status mgi_exec_run_for(mg_exec *ex, const mg_plan *p,
                           const mg_binding *binds, int n_binds, uint64_t seed,
                           const void *owner, char *host) {
    if (!ex || !p)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_exec_run: %s is NULL",
                            ex ? "plan" : "executor");
    mg_exec_release(ex);
    if (p->n_tensors > ex->buf_cap) {
        void **buf = realloc(ex->buf, (size_t)p->n_tensors * sizeof *buf);
        if (buf) ex->buf = buf;
        bool *pooled = realloc(ex->pooled, (size_t)p->n_tensors);
        if (pooled) ex->pooled = pooled;
        bool *acc_on = realloc(ex->acc_on, (size_t)p->n_tensors);
        if (acc_on) ex->acc_on = acc_on;
        if (!buf || !pooled || !acc_on)
            return mg_set_error(MG_ERR_NOMEM, "mg_exec_run: out of memory");
        ex->buf_cap = p->n_tensors;
    }
    memset(ex->buf, 0, (size_t)p->n_tensors * sizeof *ex->buf);
    memset(ex->pooled, 0, (size_t)p->n_tensors);
    memset(ex->acc_on, 0, (size_t)p->n_tensors);
    mg_status s = bind(ex, p, binds, n_binds);
    if (s == MG_OK) s = mark_accumulated(ex, p);
    if (s != MG_OK) return s;
    const int prev = mgi_threads_enter(ex->num_threads);
    s = run_plan(ex, p, seed, owner, host);
    mgi_threads_leave(ex->num_threads, prev);
    return s;
}

mg_status mg_exec_tensor_data(mg_exec *ex, mg_tensor t, const void **data) {
    if (!ex || !data)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_tensor_data: %s is NULL",
                            ex ? "data" : "executor");
    for (int32_t i = 0; i < ex->n_kept; i++)
        if (ex->kept[i].t == t) {
            *data = ex->kept[i].data;
            return MG_OK;
        }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_exec_tensor_data: tensor %d is not an output or "
                        "retained tensor of the last run",
                        (int)t);
}

mg_status mg_exec_pool_stats(const mg_exec *ex, mg_pool_stats *out) {
    if (!ex || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_pool_stats: %s is NULL",
                            ex ? "out" : "executor");
    *out = ex->pool.stats;
    return MG_OK;
}

void mg_exec_pool_reset_peak(mg_exec *ex) {
    if (!ex) return;
    ex->pool.stats.peak_bytes_in_use = ex->pool.stats.bytes_in_use;
    ex->host.stats.peak_bytes_in_use = ex->host.stats.bytes_in_use;
}

char *mgi_exec_host_lend(mg_exec *ex, size_t bytes, size_t *size) {
    return mgi_host_tier_lend(&ex->host, bytes, size);
}

void mgi_exec_host_give_back(mg_exec *ex, char *mem, size_t size,
                             size_t in_use) {
    mgi_host_tier_give_back(&ex->host, mem, size, in_use);
}

mg_status mg_exec_host_stats(const mg_exec *ex, mg_host_stats *out) {
    if (!ex || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_exec_host_stats: %s is NULL",
                            ex ? "out" : "executor");
    *out = ex->host.stats;
    return MG_OK;
}

void mg_exec_pool_trim(mg_exec *ex) {
    if (ex) mgi_pool_trim(&ex->pool);
}

int32_t mgi_exec_take_kept(mg_exec *ex, mg_tensor *t, void **data,
                           size_t *nbytes, bool *pooled) {
    int32_t n = ex->n_kept;
    for (int32_t i = 0; i < n; i++) {
        t[i] = ex->kept[i].t;
        data[i] = ex->kept[i].data;
        nbytes[i] = ex->kept[i].nbytes;
        pooled[i] = ex->kept[i].pooled;
    }
    ex->n_kept = 0;
    return n;
}

void *mgi_exec_buf(const mg_exec *ex, mg_tensor t) {
    return t >= 0 && t < ex->buf_cap ? ex->buf[t] : NULL;
}

void mgi_exec_pool_free(mg_exec *ex, void *data, size_t nbytes) {
    mgi_pool_free(&ex->pool, data, nbytes);
}

mg_status mgi_exec_share(mg_exec *ex, mg_tensor t, mgi_block_ref **out) {
    for (int32_t i = 0; i < ex->n_kept; i++) {
        mg_kept *k = &ex->kept[i];
        if (k->t != t) continue;
        if (!k->pooled)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_exec_export: tensor %d is in memory the "
                                "caller bound; only outputs left in the pool "
                                "are exported",
                                (int)t);
        if (!k->ref &&
            !(k->ref = mgi_block_ref_new(ex, k->data, k->nbytes, &k->d)))
            return mg_set_error(MG_ERR_NOMEM, "mg_exec_export: out of memory");
        k->ref->refs++;
        *out = k->ref;
        return MG_OK;
    }
    return mg_set_error(MG_ERR_UNKNOWN_ID,
                        "mg_exec_export: tensor %d is not an output or "
                        "retained tensor of the last run",
                        (int)t);
}

mgi_block_ref *mgi_block_ref_new(mg_exec *ex, void *data, size_t nbytes,
                                 const mg_tdesc *d) {
    mgi_block_ref *r = malloc(sizeof *r);
    if (!r) return NULL;
    *r = (mgi_block_ref){ex, data, nbytes, 1, *d};
    ex->n_refs++;
    ex->pool.stats.exported_blocks++;
    ex->pool.stats.exported_bytes += mg_pool_size_class(nbytes);
    return r;
}

void mgi_block_ref_drop(mgi_block_ref *r) {
    if (--r->refs > 0) return;
    mg_exec *ex = r->ex;
    mgi_pool_free(&ex->pool, r->data, r->nbytes);
    ex->pool.stats.exported_blocks--;
    ex->pool.stats.exported_bytes -= mg_pool_size_class(r->nbytes);
    free(r);
    mgi_exec_unhold(ex);
}

void mgi_exec_hold(mg_exec *ex) { ex->n_refs++; }

void mgi_exec_unhold(mg_exec *ex) {
    if (--ex->n_refs == 0 && ex->dying) exec_destroy(ex);
}

mg_device mgi_exec_device(const mg_exec *ex) { return ex->device; }
mg_status mgi_exec_copy_to_host(mg_exec *ex, void *dst, const void *src,
                                size_t n) {
    return ex->backend.copy_to_host(ex->backend.ctx, dst, src, n);
}
const mg_backend_reg *mgi_exec_reg(const mg_exec *ex) { return ex->reg; }
