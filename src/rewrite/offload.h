/*
 * offload.h - host offload as a plan choice (issue 51): which saved
 * tensors a plan copies out of the device arena after their producer and
 * back before their first backward reader, at which steps, on which
 * thread, waiting for which event. offload.c decides all of it when the
 * plan is compiled; the executor's host tier (src/exec/host_tier.c) only
 * follows it.
 */
#ifndef MG_OFFLOAD_H
#define MG_OFFLOAD_H

#include "schedule.h"

/* The thread every copy runs on: the copy worker (a CUDA copy stream on
 * a GPU); the steps run on the calling thread, 0. */
#define MG_OFFLOAD_COPY_THREAD 1

/* One offloaded tensor's two copies. Around step s the executor does, in
 * this order: take the prefetch blocks of copies whose in_issue is s and
 * queue their copies in; wait the events of copies whose in_wait is s
 * (the tensor's buffer is the prefetch block from then on); run step s;
 * release what s releases; queue the copies out whose out_issue is s;
 * wait the events of copies whose out_free is s and free their forward
 * blocks. The host block is taken when the copy out is queued and given
 * back when the copy in is waited for. */
typedef struct mg_offload_copy {
    mg_tensor t;
    size_t bytes;      /* its size class, in the arena and on the host */
    int32_t out_issue; /* its producer's step */
    int32_t out_free;  /* >= out_issue and >= its last forward reader */
    int32_t in_issue;  /* > out_free */
    int32_t in_wait;   /* its first backward reader, >= in_issue */
    int32_t release;   /* the step after which its prefetch block goes */
    int32_t event_out; /* 2k: set by the worker when the copy out is done */
    int32_t event_in;  /* 2k + 1: the same for the copy in */
    size_t in_off;     /* the prefetch block's arena offset */
    size_t host_off;   /* its block in the host tier */
} mg_offload_copy;

typedef struct mg_offload_plan {
    int32_t n;
    mg_offload_copy *copy; /* by out_issue */
    size_t host_bytes;     /* the host tier's layout size */
    size_t host_peak;      /* the most host bytes live at once */
    mg_plan_offload info;  /* what mg_plan_offload_info reports */
} mg_offload_plan;

/* Build p->offload for the tensors opts names (after plan_build, before
 * the layout); nothing when it names none. Errors name the tensor. last:
 * scratch of p->n_tensors entries. */
mg_status mgi_offload_plan(mg_plan *p, const mg_plan_options *opts,
                           int32_t *last);
void mgi_offload_free(mg_offload_plan *o);

/* For the n tensors t with idx[t] = k >= 0 (idx: per tensor, else -1):
 * the step of its producer, its last forward reader, its first backward
 * (or recompute) reader and the step after which p releases it, each -1
 * for none. */
void mgi_offload_readers(const mg_plan *p, const int32_t *idx, int32_t n,
                         int32_t *prod, int32_t *f_last, int32_t *b_first,
                         int32_t *rel);
/* The first backward (or recompute) step of p, p->n_steps for none: no
 * copy crosses it (mgi_offload_place), so that a plan run in two calls
 * (mg_exec_forward, mg_exec_backward) makes the same copies at the same
 * steps as in one. */
int32_t mgi_offload_boundary(const mg_plan *p);
/* The steps of t's copies (c's but its events and offsets), from those,
 * for host bandwidth bw and compute rate (0: one step each side);
 * f_last < b_first. bnd: mgi_offload_boundary(p). The copy out is waited
 * for before bnd where its last forward reader allows, and the copy back
 * is queued at bnd or later. */
void mgi_offload_place(const mg_plan *p, mg_tensor t, int32_t prod,
                       int32_t f_last, int32_t b_first, int32_t rel, double bw,
                       double rate, int32_t bnd, mg_offload_copy *c);
/* The seconds of c's two copies that the steps beside them do not hide
 * (0 without both rates). */
double mgi_offload_exposed(const mg_plan *p, const mg_offload_copy *c,
                           double bw, double rate);

/* The budget policy's offload stage (offload_price.c), on the graph built
 * keeping every forward tensor: the plan of outs (all bound to caller
 * memory, the budget's measure) offloading a prefix of its saved tensors
 * (ids below n_before) in a fixed order, least exposed copy time first,
 * the shortest prefix whose exact predicted peak fits budget. *fits says
 * whether one does; then *chosen (per tensor id below n_before, malloc'd,
 * the caller frees it) marks it, *peak is its peak and *exposed the
 * seconds its copies add to the step. *min_peak: the peak with every
 * saved tensor offloaded, the least this stage reaches. */
typedef struct mg_offload_price {
    bool fits;
    bool *chosen;
    size_t peak, min_peak;
    double exposed;
} mg_offload_price;
mg_status mgi_offload_price(const mg_graph *g, const mg_tensor *outs,
                            int n_outs, int32_t n_before, size_t budget,
                            double bw, double rate, mg_offload_price *out);

/* Lay out p's arena with the prefetch blocks, in place of arena.c's
 * layout of p (its phases keep theirs: they do not offload), and the host
 * tier. */
mg_status mgi_offload_lay_out(mg_plan *p);

/* mgi_plan_peak for a plan with offload: bound as mgi_plan_bound's. */
size_t mgi_offload_peak(const mg_plan *p, const bool *bound);

/* The copies, for mg_plan_dump and mg_plan_report. */
void mgi_offload_dump(const mg_plan *p, FILE *out);
void mgi_offload_report(const mg_plan *p, FILE *out);

#endif
