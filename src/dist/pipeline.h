/*
 * pipeline.h - internals shared by the files of memgrad_pipeline.h:
 * splitting a forward graph into stages (pipeline_split.c) and running
 * them over MPI (pipeline.c). Built on memgrad.h's public calls only, as
 * the rest of src/dist, so that memgrad_dist links against a shared
 * libmemgrad.
 */
#ifndef MG_DIST_PIPELINE_H
#define MG_DIST_PIPELINE_H

#include "dist.h"

#include <memgrad_pipeline.h>

/* Where every tensor of g that the loss needs goes. */
typedef struct mgi_pipe_split {
    int n_stages;
    int32_t n;        /* tensors of g */
    int *stage;       /* per tensor: the stage of a needed op, -1 for a
                         leaf or a tensor the loss does not need */
    mg_tensor *order; /* the needed tensors, leaves too, inputs first */
    int32_t n_order;
    bool *is_leaf; /* per tensor: an input or a parameter */
    bool *is_param;
} mgi_pipe_split;

/* Check cuts against g and loss and place every op; on failure a status
 * with a message (prefixed by who) naming the tensor at fault. */
mg_status mgi_pipe_split_make(const mg_graph *g, mg_tensor loss,
                              const mg_tensor *cuts, int n_cuts,
                              const char *who, mgi_pipe_split *out);
void mgi_pipe_split_free(mgi_pipe_split *sp);

/* Stage s as a graph of its own. */
typedef struct mgi_pipe_stage_graph {
    mg_graph *g;
    mg_tensor act_in; /* the incoming cut (an input), or MG_NO_TENSOR */
    mg_tensor y;      /* the outgoing cut, or the loss on the last stage */
    int n_params;     /* g's parameters the stage reads, in id order */
    mg_tensor *p_src, *p_st;
    int n_inputs; /* g's inputs the stage reads, in id order */
    mg_tensor *in_src, *in_st;
    mg_tensor *map; /* g's id -> the stage's, MG_NO_TENSOR if not in it */
    int n_ops;      /* computed tensors copied */
    double flops;   /* their forward flops */
} mgi_pipe_stage_graph;

mg_status mgi_pipe_stage_build(const mg_graph *g, const mgi_pipe_split *sp,
                               mg_tensor loss, const mg_tensor *cuts, int s,
                               const char *who, mgi_pipe_stage_graph *out);
void mgi_pipe_stage_free(mgi_pipe_stage_graph *st);

#endif
