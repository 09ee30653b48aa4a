/*
 * offload.c - host offload as a plan choice (issue 51). A saved tensor
 * the caller names (mg_plan_options.offload) leaves the device arena
 * between the forward and the backward pass: its producer's step is
 * followed by a copy out to the host tier, its arena block is freed once
 * that copy is done and its last forward reader has run, and a prefetch
 * block in the arena receives the copy back before its first backward
 * reader. Everything is decided here, at compile time: the step each copy
 * is queued after, the step whose end waits for its event, the prefetch
 * block's offset and the host block's; the executor's host tier only
 * follows (src/exec/host_tier.c). So the arena, the device peak
 * (prefetch blocks included) and the host tier's bytes are predicted as
 * exactly as the rest of the plan.
 *
 * Where a copy waits: with mg_plan_options.host_bandwidth and
 * compute_rate, a copy out is waited for after enough steps to hide it
 * (but not before the tensor's last forward reader, nor after its first
 * backward reader) and a copy back is queued early enough to hide it
 * (but not before the copy out's wait, so the two blocks never coexist);
 * without them, one step each side.
 */
#include "offload.h"

#include <stdlib.h>
#include <string.h>

void mgi_offload_free(mg_offload_plan *o) {
    if (!o) return;
    free(o->copy);
    free(o);
}

static bool is_bwd_step(const mg_plan *p, int32_t s) {
    return (p->g->nodes[p->steps[s]].flags &
            (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE)) != 0;
}

static double step_flops(const mg_plan *p, int32_t s) {
    double f = 0;
    mgi_graph_op_cost(p->g, p->steps[s], &f, NULL);
    return f;
}

static int by_out_issue(const void *x, const void *y) {
    const mg_offload_copy *a = x, *b = y;
    if (a->out_issue != b->out_issue)
        return a->out_issue < b->out_issue ? -1 : 1;
    return (a->t > b->t) - (a->t < b->t);
}

/* Check opts' list and mark each tensor's copy index in idx (-1 else). */
static mg_status check_targets(const mg_plan *p, const mg_plan_options *opts,
                               int32_t *idx) {
    char label[160];
    if (opts->n_offload < 0 || (opts->n_offload > 0 && !opts->offload))
        return mg_set_error(
            MG_ERR_INVALID_ARG, "mg_plan_compile: %d offloaded tensors%s",
            opts->n_offload, opts->n_offload < 0 ? "" : " with a NULL list");
    if (!(opts->host_bandwidth >= 0) || !(opts->compute_rate >= 0))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: host_bandwidth %g and "
                            "compute_rate %g must be >= 0",
                            opts->host_bandwidth, opts->compute_rate);
    for (int32_t t = 0; t < p->n_tensors; t++) idx[t] = -1;
    for (int i = 0; i < opts->n_offload; i++) {
        const mg_tensor t = opts->offload[i];
        mg_status s = mgi_graph_check_id(p->g, t, "mg_plan_compile: offload");
        if (s == MG_OK && t >= p->n_tensors)
            s = mg_set_error(MG_ERR_UNKNOWN_ID,
                             "mg_plan_compile: offload names tensor %d, made "
                             "after the plan's graph",
                             (int)t);
        if (s != MG_OK) return s;
        mgi_graph_tensor_label(p->g, t, label, sizeof label);
        const uint8_t role = p->role[t];
        if (!(role & MG_ROLE_COMPUTED) || (role & MG_ROLE_KEPT))
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_plan_compile: cannot offload %s: it is %s; only tensors "
                "the plan computes and releases are offloaded",
                label,
                (role & MG_ROLE_KEPT) ? "an output or retained tensor"
                : role                ? "caller memory"
                                      : "not in the plan");
        if (idx[t] >= 0)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_plan_compile: %s is offloaded twice",
                                label);
        idx[t] = i;
    }
    return MG_OK;
}

/* The first step s in (from, to] whose steps from + 1 .. s hide secs of
 * copy at rate, or to when none does (or there is no rate). */
static int32_t hide_after(const mg_plan *p, int32_t from, int32_t to,
                          double secs, double rate) {
    if (!(rate > 0)) return from + 1 < to ? from + 1 : to;
    double t = 0;
    for (int32_t s = from + 1; s <= to; s++) {
        t += step_flops(p, s) / rate;
        if (t >= secs) return s;
    }
    return to;
}

/* The last step s in [from, to) whose steps s .. to - 1 hide secs. */
static int32_t hide_before(const mg_plan *p, int32_t from, int32_t to,
                           double secs, double rate) {
    if (!(rate > 0)) return to - 1 >= from ? to - 1 : from;
    double t = 0;
    for (int32_t s = to - 1; s >= from; s--) {
        t += step_flops(p, s) / rate;
        if (t >= secs) return s;
    }
    return from;
}

void mgi_offload_readers(const mg_plan *p, const int32_t *idx, int32_t n,
                         int32_t *prod, int32_t *f_last, int32_t *b_first,
                         int32_t *rel) {
    for (int32_t k = 0; k < n; k++)
        prod[k] = f_last[k] = b_first[k] = rel[k] = -1;
    for (int32_t st = 0; st < p->n_steps; st++) {
        if (idx[p->steps[st]] >= 0) prod[idx[p->steps[st]]] = st;
        const bool bwd = is_bwd_step(p, st);
        for (int k = 0; k < p->step[st].n_in; k++) {
            const int32_t c = idx[p->step[st].in[k]];
            if (c < 0) continue;
            if (!bwd) f_last[c] = st;
            else if (b_first[c] < 0) b_first[c] = st;
        }
        for (int32_t r = p->release_start[st]; r < p->release_start[st + 1];
             r++)
            if (idx[p->release[r]] >= 0) rel[idx[p->release[r]]] = st;
    }
}

int32_t mgi_offload_boundary(const mg_plan *p) {
    for (int32_t s = 0; s < p->n_steps; s++)
        if (is_bwd_step(p, s)) return s;
    return p->n_steps;
}

void mgi_offload_place(const mg_plan *p, mg_tensor t, int32_t prod,
                       int32_t f_last, int32_t b_first, int32_t rel, double bw,
                       double rate, int32_t bnd, mg_offload_copy *c) {
    const double secs = bw > 0 ? (double)mg_plan_nbytes(p, t) / bw : 0;
    if (!(bw > 0)) rate = 0;
    *c = (mg_offload_copy){.t = t,
                           .bytes = mg_pool_size_class(mg_plan_nbytes(p, t)),
                           .out_issue = prod,
                           .in_wait = b_first,
                           .release = rel,
                           .in_off = SIZE_MAX,
                           .host_off = SIZE_MAX};
    /* neither copy crosses the boundary between the forward and the
     * backward steps: the forward phase ends with every copy out done and
     * the backward phase starts every copy back (mg_exec_forward) */
    const int32_t out_last = bnd - 1 < b_first - 1 ? bnd - 1 : b_first - 1;
    int32_t out_free =
        hide_after(p, prod, out_last > prod ? out_last : prod, secs, rate);
    if (out_free < f_last) out_free = f_last;
    if (out_free < prod) out_free = prod;
    c->out_free = out_free;
    const int32_t in_first = out_free + 1 > bnd ? out_free + 1 : bnd;
    c->in_issue = hide_before(p, in_first, b_first, secs, rate);
}

double mgi_offload_exposed(const mg_plan *p, const mg_offload_copy *c,
                           double bw, double rate) {
    if (!(bw > 0) || !(rate > 0)) return 0;
    double f_out = 0, f_in = 0;
    for (int32_t s = c->out_issue + 1; s <= c->out_free; s++)
        f_out += step_flops(p, s);
    for (int32_t s = c->in_issue; s < c->in_wait; s++) f_in += step_flops(p, s);
    const double secs = (double)mg_plan_nbytes(p, c->t) / bw;
    return (secs > f_out / rate ? secs - f_out / rate : 0) +
           (secs > f_in / rate ? secs - f_in / rate : 0);
}

/* Count the overlap of copy c into info. */
static void count_overlap(const mg_plan *p, const mg_offload_copy *c, double bw,
                          double rate, mg_plan_offload *info) {
    double f_out = 0, f_in = 0;
    for (int32_t s = c->out_issue + 1; s <= c->out_free; s++)
        f_out += step_flops(p, s);
    for (int32_t s = c->in_issue; s < c->in_wait; s++) f_in += step_flops(p, s);
    info->overlap_steps +=
        (c->out_free - c->out_issue) + (c->in_wait - c->in_issue);
    info->overlap_flops += f_out + f_in;
    if (bw > 0 && rate > 0) {
        const double secs = (double)mg_plan_nbytes(p, c->t) / bw;
        info->copy_seconds += 2 * secs;
        info->hidden_seconds += (f_out / rate < secs ? f_out / rate : secs) +
                                (f_in / rate < secs ? f_in / rate : secs);
    }
}

mg_status mgi_offload_plan(mg_plan *p, const mg_plan_options *opts,
                           int32_t *idx) {
    if (!opts || opts->n_offload == 0) return MG_OK;
    mg_status s = check_targets(p, opts, idx);
    if (s != MG_OK) return s;
    const int32_t n = opts->n_offload;
    mg_offload_plan *o = calloc(1, sizeof *o);
    if (o) o->copy = malloc((size_t)n * sizeof *o->copy);
    if (!o || !o->copy) {
        mgi_offload_free(o);
        return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
    }
    o->n = n;
    /* producer, last forward reader, first backward reader, release */
    int32_t *f_last = malloc((size_t)n * 4 * sizeof *f_last);
    if (!f_last) {
        mgi_offload_free(o);
        return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
    }
    int32_t *prod = f_last + n, *b_first = prod + n, *rel = b_first + n;
    mgi_offload_readers(p, idx, n, prod, f_last, b_first, rel);
    const int32_t bnd = mgi_offload_boundary(p);
    const double bw = opts->host_bandwidth, rate = opts->compute_rate;
    char label[160], lb[160];
    for (int32_t k = 0; k < n && s == MG_OK; k++) {
        const mg_tensor t = opts->offload[k];
        mgi_graph_tensor_label(p->g, t, label, sizeof label);
        if (b_first[k] < 0) {
            s = mg_set_error(MG_ERR_INVALID_ARG,
                             "mg_plan_compile: cannot offload %s: no backward "
                             "step reads it, so it is not saved",
                             label);
            break;
        }
        if (f_last[k] > b_first[k]) {
            s = mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_plan_compile: cannot offload %s: forward step %s reads it "
                "after its first backward reader",
                label,
                mgi_graph_tensor_label(p->g, p->steps[f_last[k]], lb,
                                       sizeof lb));
            break;
        }
        mgi_offload_place(p, t, prod[k], f_last[k], b_first[k], rel[k], bw,
                          rate, bnd, &o->copy[k]);
    }
    free(f_last);
    if (s != MG_OK) {
        mgi_offload_free(o);
        return s;
    }
    qsort(o->copy, (size_t)n, sizeof *o->copy, by_out_issue);
    for (int32_t k = 0; k < n; k++) {
        mg_offload_copy *c = &o->copy[k];
        c->event_out = 2 * k;
        c->event_in = 2 * k + 1;
        o->info.n_offloaded++;
        o->info.offloaded_bytes += c->bytes;
        count_overlap(p, c, bw, rate, &o->info);
    }
    p->offload = o;
    return MG_OK;
}

static mg_status nomem(void) {
    return mg_set_error(MG_ERR_NOMEM,
                        "mg_plan_compile: out of memory laying out offload");
}

/* The host tier: a host block per copy from its copy out's queueing
 * (after step out_issue) to its copy in's wait (before step in_wait). */
static mg_status lay_out_host(mg_offload_plan *o) {
    const size_t n = (size_t)o->n;
    size_t *size = calloc(n, sizeof *size), *off = calloc(n, sizeof *off);
    int64_t *born = calloc(n, sizeof *born), *died = calloc(n, sizeof *died);
    mg_status s = MG_OK;
    if (!size || !off || !born || !died) s = nomem();
    for (size_t k = 0; s == MG_OK && k < n; k++) {
        size[k] = o->copy[k].bytes;
        born[k] = 2 * (int64_t)o->copy[k].out_issue + 2;
        died[k] = 2 * (int64_t)o->copy[k].in_wait + 1;
    }
    if (s == MG_OK) {
        o->host_bytes =
            mgi_arena_lay_out(size, born, died, n, true, off, &o->host_peak);
        if (o->host_bytes == SIZE_MAX) s = nomem();
        for (size_t k = 0; s == MG_OK && k < n; k++)
            o->copy[k].host_off = off[k];
        o->info.host_bytes = o->host_bytes;
        o->info.host_peak = o->host_peak;
    }
    free(size);
    free(off);
    free(born);
    free(died);
    return s;
}

/* One arena request of the device layout, and where its offset goes. */
typedef struct dev_req {
    size_t size;
    int64_t born, died;
    size_t *dest;
} dev_req;

mg_status mgi_offload_lay_out(mg_plan *p) {
    mg_offload_plan *o = p->offload;
    mg_status s = lay_out_host(o);
    if (s != MG_OK) return s;
    const int32_t n_t = p->n_tensors ? p->n_tensors : 1;
    /* per tensor: the step after which it is released (-1: never), or,
     * for an offloaded one, after which its forward block goes */
    int32_t *died = malloc((size_t)n_t * sizeof *died);
    /* copies by in_issue: a counting sort over the steps */
    int32_t *in_at = calloc((size_t)p->n_steps + 1, sizeof *in_at);
    int32_t *in_ord = malloc(((size_t)o->n + 1) * sizeof *in_ord);
    const size_t cap = 2 * (size_t)p->n_steps + (size_t)o->n + 1;
    dev_req *rq = malloc(cap * sizeof *rq);
    size_t *size = calloc(cap, sizeof *size), *off = calloc(cap, sizeof *off);
    int64_t *born = calloc(cap, sizeof *born),
            *dead = calloc(cap, sizeof *dead);
    if (!died || !in_at || !in_ord || !rq || !size || !off || !born || !dead)
        s = nomem();
    size_t n = 0;
    if (s == MG_OK) {
        for (int32_t t = 0; t < p->n_tensors; t++) died[t] = -1;
        for (int32_t st = 0; st < p->n_steps; st++)
            for (int32_t r = p->release_start[st]; r < p->release_start[st + 1];
                 r++)
                died[p->release[r]] = st;
        for (int32_t k = 0; k < o->n; k++) {
            died[o->copy[k].t] = o->copy[k].out_free;
            in_at[o->copy[k].in_issue + 1]++;
        }
        for (int32_t st = 0; st < p->n_steps; st++) in_at[st + 1] += in_at[st];
        int32_t *fill = malloc(((size_t)p->n_steps + 1) * sizeof *fill);
        if (!fill) s = nomem();
        else {
            memcpy(fill, in_at, ((size_t)p->n_steps + 1) * sizeof *fill);
            for (int32_t k = 0; k < o->n; k++)
                in_ord[fill[o->copy[k].in_issue]++] = k;
            free(fill);
        }
    }
    for (int32_t st = 0; s == MG_OK && st < p->n_steps; st++) {
        const int64_t tick = 2 * (int64_t)st;
        /* the prefetch blocks taken before step st */
        for (int32_t j = in_at[st]; j < in_at[st + 1]; j++) {
            mg_offload_copy *c = &o->copy[in_ord[j]];
            rq[n++] = (dev_req){c->bytes, tick, 2 * (int64_t)c->release + 2,
                                &c->in_off};
        }
        const mg_tensor t = p->steps[st];
        p->out_off[st] = p->work_off[st] = SIZE_MAX;
        if (!(p->role[t] & MG_ROLE_KEPT) && died[t] >= 0)
            rq[n++] = (dev_req){mg_pool_size_class(mg_plan_nbytes(p, t)), tick,
                                2 * (int64_t)died[t] + 2, &p->out_off[st]};
        if (p->step[st].work_units)
            rq[n++] =
                (dev_req){mg_pool_size_class(mg_plan_step_work(&p->step[st])),
                          tick + 1, tick + 2, &p->work_off[st]};
    }
    if (s == MG_OK) {
        for (size_t i = 0; i < n; i++) {
            size[i] = rq[i].size;
            born[i] = rq[i].born;
            dead[i] = rq[i].died;
        }
        size_t live = 0;
        const size_t bytes =
            n ? mgi_arena_lay_out(size, born, dead, n, true, off, &live) : 0;
        if (bytes == SIZE_MAX) s = nomem();
        else {
            for (size_t i = 0; i < n; i++) *rq[i].dest = off[i];
            p->arena_bytes = bytes;
            p->arena_live_peak = live;
        }
    }
    free(died);
    free(in_at);
    free(in_ord);
    free(rq);
    free(size);
    free(off);
    free(born);
    free(dead);
    return s;
}

size_t mgi_offload_peak(const mg_plan *p, const bool *bound) {
    const mg_offload_plan *o = p->offload;
    size_t in_use = 0, peak = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        for (int32_t k = 0; k < o->n; k++)
            if (o->copy[k].in_issue == s) in_use += o->copy[k].bytes;
        const mg_tensor t = p->steps[s];
        if (!bound[t]) in_use += mg_pool_size_class(mg_plan_nbytes(p, t));
        const size_t w = mg_plan_step_work(&p->step[s]);
        const size_t work = w ? mg_pool_size_class(w) : 0;
        if (in_use + work > peak) peak = in_use + work;
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            in_use -= mg_pool_size_class(mg_plan_nbytes(p, p->release[r]));
        for (int32_t k = 0; k < o->n; k++)
            if (o->copy[k].out_free == s) in_use -= o->copy[k].bytes;
    }
    return peak;
}

void mgi_offload_dump(const mg_plan *p, FILE *out) {
    const mg_offload_plan *o = p->offload;
    if (!o) return;
    char label[160];
    fprintf(out,
            "offload: %d tensors, %zu bytes; host tier %zu bytes (peak %zu); "
            "copies on thread %d, steps on thread 0\n",
            (int)o->n, o->info.offloaded_bytes, o->host_bytes, o->host_peak,
            MG_OFFLOAD_COPY_THREAD);
    for (int32_t k = 0; k < o->n; k++) {
        const mg_offload_copy *c = &o->copy[k];
        fprintf(out,
                "  %s %zu bytes: out after step %d -> host+%zu, event %d, "
                "waited after step %d (block freed); in before step %d -> "
                "arena+%zu, event %d, waited before step %d\n",
                mgi_graph_tensor_label(p->g, c->t, label, sizeof label),
                c->bytes, (int)c->out_issue, c->host_off, (int)c->event_out,
                (int)c->out_free, (int)c->in_issue, c->in_off, (int)c->event_in,
                (int)c->in_wait);
    }
}

void mgi_offload_report(const mg_plan *p, FILE *out) {
    const mg_offload_plan *o = p->offload;
    if (!o) return;
    const double mib = 1024.0 * 1024.0;
    const mg_plan_offload *i = &o->info;
    fprintf(out,
            "offloaded: %d tensors, %.3f MiB; host tier %.3f MiB\n"
            "  copies beside %d steps of compute (%.3g flops)",
            i->n_offloaded, (double)i->offloaded_bytes / mib,
            (double)i->host_bytes / mib, i->overlap_steps, i->overlap_flops);
    if (i->copy_seconds > 0)
        fprintf(out, "; %.3g s of copies, %.3g s hidden (%.0f%%)",
                i->copy_seconds, i->hidden_seconds,
                100.0 * i->hidden_seconds / i->copy_seconds);
    fputc('\n', out);
    const int shown_max = 16;
    char label[160];
    for (int32_t k = 0; k < o->n && k < shown_max; k++)
        fprintf(out, "  %s %zu bytes: out at step %d, back at step %d\n",
                mgi_graph_tensor_label(p->g, o->copy[k].t, label, sizeof label),
                o->copy[k].bytes, (int)o->copy[k].out_issue,
                (int)o->copy[k].in_issue);
    if (o->n > shown_max) fprintf(out, "  ... and %d more\n", o->n - shown_max);
}

mg_status mg_plan_offload_info(const mg_plan *p, mg_plan_offload *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_offload_info: %s is NULL",
                            p ? "out" : "plan");
    *out = p->offload ? p->offload->info : (mg_plan_offload){0};
    return MG_OK;
}
