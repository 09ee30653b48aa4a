/*
 * memgrad_onnx.h - import an ONNX model into a memgrad graph (libmemgrad_onnx).
 *
 * The importer reads a ModelProto (parsed by protobuf-c from Debian's
 * onnx.proto) and builds its forward graph with memgrad's builder calls into
 * a graph the caller owns. Nodes whose inputs are all constants or static
 * shapes (the Shape/Gather/Concat/Reshape arithmetic exporters emit) are
 * evaluated at import, so the graph holds only real tensor work. What comes
 * back is a model handle that says which tensors are the model's inputs,
 * parameters (its float initializers) and outputs, and holds the
 * parameters' data as ready-made bindings for mg_exec_run.
 *
 * Errors follow memgrad.h: an mg_status and a message (mg_last_error()).
 * An op the importer does not know is MG_ERR_UNSUPPORTED with the node's
 * name, op_type, domain and opset in the message; a truncated or corrupt
 * file is MG_ERR_INVALID_ARG; shapes that do not fit an op are the
 * builder's own MG_ERR_SHAPE. On failure the graph may hold tensors the
 * import added before it failed: free it, as it is of no further use.
 */
#ifndef MEMGRAD_ONNX_H
#define MEMGRAD_ONNX_H

#include "memgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A static size for a dynamic dimension, by its dim_param name. */
typedef struct mg_onnx_dim {
    const char *name;
    int64_t size;
} mg_onnx_dim;

typedef struct mg_onnx_options {
    /* Size of a dynamic first dimension of a graph input (the batch), when
     * no entry of dims names it; 0: none given. */
    int64_t batch_size;
    /* Sizes of dynamic dimensions by name (the dim_param of the input). */
    const mg_onnx_dim *dims;
    int n_dims;
    /* Training mode (mg_onnx_options_init sets it): BatchNormalization
     * normalises with batch statistics and Dropout is mg_dropout with the
     * node's ratio. Off: BatchNormalization is the affine op of its running
     * statistics and Dropout the identity. */
    int training;
    /* Seed of the first Dropout node; each further one takes the next. */
    uint64_t dropout_seed;
    /* Directory that external-data locations are relative to. NULL: the
     * directory of the model file, or for a buffer the current directory.
     * A model file is untrusted, so a location must lie inside this
     * directory: a relative path with no '..' and no symbolic link on the
     * way (each component is opened with O_NOFOLLOW), naming a regular
     * file (not a FIFO or a device). Anything else is MG_ERR_INVALID_ARG
     * naming the tensor. */
    const char *external_data_dir;
    /* A second directory, trusted by the caller, that symbolic links under
     * external_data_dir may lead into (a hub cache whose snapshot links
     * point into its blobs directory, say): a location that passes through
     * a link is accepted if it resolves to a regular file inside this
     * directory. NULL (the default): no link is followed. */
    const char *external_data_allowed_dir;
} mg_onnx_options;

/* Defaults: training on, no dynamic sizes, seed 0. */
MG_API
void mg_onnx_options_init(mg_onnx_options *opts);

typedef struct mg_onnx_model mg_onnx_model;

/* Import the model in file `path` (or in `size` bytes at `data`) into g.
 * opts may be NULL for the defaults. On success *out is a handle to free
 * with mg_onnx_model_free; on failure *out is NULL. */
MG_API
mg_status mg_onnx_import_file(const char *path, const mg_onnx_options *opts,
                              mg_graph *g, mg_onnx_model **out);
MG_API
mg_status mg_onnx_import_buffer(const void *data, size_t size,
                                const mg_onnx_options *opts, mg_graph *g,
                                mg_onnx_model **out);
MG_API
void mg_onnx_model_free(mg_onnx_model *m); /* NULL is accepted */

/* The ONNX op types of the default domain the importer converts, ending
 * with NULL: the MG_ONNX_OP rows of src/frontends/op_map.def, in its
 * order. Static storage; not to be freed. */
MG_API
const char *const *mg_onnx_op_types(void);

/* The graph inputs (those that are not initializers), in the model's order,
 * as mg_input tensors: float inputs are MG_F32 (FLOAT16 and BFLOAT16 ones
 * MG_F16 and MG_BF16), integer ones (token ids) MG_I32. Out of range: MG_NO_TENSOR. */
MG_API
int mg_onnx_num_inputs(const mg_onnx_model *m);
MG_API
mg_tensor mg_onnx_input(const mg_onnx_model *m, int i);
/* The graph outputs, in the model's order. */
MG_API
int mg_onnx_num_outputs(const mg_onnx_model *m);
MG_API
mg_tensor mg_onnx_output(const mg_onnx_model *m, int i);
/* The float initializers as mg_param tensors, in the order of the model's
 * initializer list (the order `memgrad-onnx step --save-grads` writes). */
MG_API
int mg_onnx_num_params(const mg_onnx_model *m);
MG_API
mg_tensor mg_onnx_param(const mg_onnx_model *m, int i);
/* Bindings for every parameter, followed by those for the constant tensors
 * the graph reads as inputs: their data, in the tensor's dtype (f32, or
 * 2-byte f16/bf16 for 16-bit initializers), owned by the model and
 * valid until mg_onnx_model_free. Add bindings for the model's inputs and
 * pass them all to mg_exec_run. */
MG_API
const mg_binding *mg_onnx_bindings(const mg_onnx_model *m, int *n_bindings);
/* The tensor an ONNX value name became, or MG_NO_TENSOR (unknown name, or a
 * value folded into a constant that no tensor op reads). */
MG_API
mg_tensor mg_onnx_find(const mg_onnx_model *m, const char *name);
/* The opset version of the default ("" / "ai.onnx") domain. */
MG_API
int64_t mg_onnx_opset(const mg_onnx_model *m);

#ifdef __cplusplus
}
#endif
#endif
