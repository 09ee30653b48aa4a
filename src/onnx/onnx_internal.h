/*
 * onnx_internal.h - what the ONNX importer's files share: the values a
 * node's inputs and outputs name (a graph tensor, a constant known at import
 * time, or both), the import context, and the op converters' table.
 *
 * The importer is a consumer of memgrad.h: it builds the graph with public
 * builder calls only, so a model imports exactly as if written by hand.
 */
#ifndef MG_ONNX_INTERNAL_H
#define MG_ONNX_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "memgrad.h"
#include "memgrad_onnx.h"
#include "onnx.pb-c.h"

/* Folded constants larger than this many elements are refused: a hostile
 * ConstantOfShape or Range must not make the importer allocate gigabytes. */
#define MGI_ONNX_MAX_CONST_ELEMS ((int64_t)1 << 24)
/* A float initializer of more elements is a weight: no op reads it as a
 * constant (shapes, axes, bounds and scales are smaller), so only its f32
 * binding is kept (onnx_import.c). */
#define MGI_ONNX_KEEP_INIT ((int64_t)4096)

/* A constant known at import time: integers (and bools) in i, floating
 * point in f (exactly one of them is set). ndim 0 is a scalar. */
typedef struct mgi_oconst {
    int32_t onnx_type; /* Onnx__TensorProto__DataType */
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t n;
    double *f;
    int64_t *i;
} mgi_oconst;

/* A named value: a tensor of the graph, a constant, or a constant that has
 * also been given a tensor because a tensor op reads it. */
typedef struct mgi_oval {
    const char *name; /* borrowed from the ModelProto */
    mg_tensor t;      /* MG_NO_TENSOR if none */
    mgi_oconst *c;    /* NULL if not a constant */
    /* A parameter's initial data: never folded (it is trained), but read
     * where an op wants a constant in an attribute-like slot (Clip bounds,
     * a Pow exponent, a Dropout ratio), as exporters put those there. */
    const mgi_oconst *init;
} mgi_oval;

/* One read name: see mgi_octx.reads. */
typedef struct mgi_oread {
    const char *name;
    int32_t readers;  /* node inputs and graph outputs naming it */
    int32_t producer; /* index of the node whose output 0 it is, or -1 */
} mgi_oread;

typedef struct mgi_octx {
    mg_graph *g;
    mg_onnx_options opts;
    int64_t opset;
    mg_onnx_model *model;
    /* values by name: open addressing over vals */
    mgi_oval *vals;
    int n_vals, cap_vals;
    int32_t *slots;
    int n_slots;
    /* constants, freed at the end of the import */
    mgi_oconst **consts;
    int n_consts, cap_consts;
    uint64_t next_seed;
    const Onnx__NodeProto *node; /* the node being converted, for messages */
    /* the graph being imported: the attention matcher walks producers */
    const Onnx__GraphProto *gp;
    /* the node's first attribute of the wrong type or out of range, found
     * by the attribute readers of onnx_ops_common.c ("" if none) */
    char attr_err[256];
    /* every name a node or a graph output reads, with how many times it
     * is read and the node whose output 0 it is: open addressing, built
     * once so that no converter scans the graph per node */
    struct mgi_oread *reads;
    int n_reads;
    const char *domain_of_node;
    /* as_float's casts, by the integer tensor's id (MG_NO_TENSOR: none
     * yet), so a mask read by several nodes is cast once */
    mg_tensor *f32_of;
    int32_t cap_f32_of;
} mgi_octx;

/* The model handle (memgrad_onnx.h). */
struct mg_onnx_model {
    int64_t opset;
    mg_tensor *inputs, *outputs, *params;
    int n_inputs, n_outputs, n_params;
    mg_binding *binds;
    void **bind_data; /* owned */
    int n_binds, cap_binds;
    char **names; /* sorted, owned, with name_tensors beside them */
    mg_tensor *name_tensors;
    int n_names;
};

/* onnx_import.c */
mgi_oval *mgi_onnx_lookup(mgi_octx *c, const char *name);
mg_status mgi_onnx_define(mgi_octx *c, const char *name, mg_tensor t,
                          mgi_oconst *k);
mgi_oconst *mgi_onnx_const_new(mgi_octx *c, int32_t onnx_type, bool is_float,
                               int ndim, const int64_t *shape);
mg_status mgi_onnx_decode_tensor(mgi_octx *c, const Onnx__TensorProto *tp,
                                 mgi_oconst **out);
/* The tensor for v: a constant gets one now (a fill, or an input bound to
 * model-owned data); want is the dtype a float constant takes. */
mg_tensor mgi_onnx_tensor(mgi_octx *c, mgi_oval *v);
/* Record an error about the current node: its name, op_type, domain and
 * opset lead the message. */
mg_status mgi_onnx_node_error(mgi_octx *c, mg_status s, const char *fmt, ...)
    MG_PRINTF(3, 4);

/* True if some node or graph output reads value `name`: an optional output
 * nobody reads (Dropout's mask, BatchNormalization's running statistics)
 * is then left undefined instead of refused. */
bool mgi_onnx_is_read(const mgi_octx *c, const char *name);
/* The node whose output 0 is `name`, if `name` is read exactly once (by one
 * node input, or by one graph output), else NULL. */
const Onnx__NodeProto *mgi_onnx_sole_producer(const mgi_octx *c,
                                              const char *name);

/* onnx_extdata.c: the `len` bytes at `offset` of external-data location
 * `loc` of tensor `tname`, opened beneath options.external_data_dir (no
 * symbolic links, no '..', a regular file) into a new buffer. */
mg_status mgi_onnx_read_external(mgi_octx *c, const char *tname,
                                 const char *loc, int64_t offset, int64_t len,
                                 uint8_t **out);

/* onnx_wire.c: MG_ERR_INVALID_ARG if the ModelProto in data[0..size)
 * nests messages deeper than protobuf-c's recursion may safely go. */
mg_status mgi_onnx_check_nesting(const void *data, size_t size);

/* onnx_ops.c: node n converted by its op family (onnx_ops_*.c). */
mg_status mgi_onnx_convert_node(mgi_octx *c, const Onnx__NodeProto *node);

#endif
