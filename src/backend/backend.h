/*
 * backend.h - the floor every device stands on: what the executor and the
 * planner need from a backend (memory, kernels, workspace, properties),
 * and nothing else. src/rewrite and src/exec include it downward; a
 * backend depends on it (and kernel_shared.h, common/) alone.
 *
 * A backend is a struct of function pointers (as in ggml-backend). The CPU
 * backend lives in src/exec/cpu/, the CUDA one in cuda/, built as a module
 * that module.c (beside this file) loads on first use (or linked in, with
 * MG_CUDA_MODULE=OFF). Each is one row of registry.c (beside this file),
 * where the executor finds it by device and the planner asks for its
 * workspace rules; docs/adding-a-backend.md says how to add one.
 * Kernels get descriptors and pointers, never the graph.
 */
#ifndef MG_BACKEND_H
#define MG_BACKEND_H

#include "../common/ir.h"

typedef struct mg_kbuf {
    void *data;
    mg_tdesc d;
} mg_kbuf;

typedef struct mg_kargs {
    mg_op op;
    const mg_attrs *attrs;
    int n_in;
    mg_kbuf in[MG_MAX_INPUTS];
    mg_kbuf out;
    uint64_t run_seed;
    /* Scratch lent from the pool for this op, as the op table's workspace
     * rule asked (NULL and 0 when it asks for none). */
    void *work;
    size_t work_bytes;
    /* A kernel that fails (a label out of range, say) writes why here. */
    char *why;
    size_t why_len;
    /* A fused step (MG_STEP_FUSED): its chain, in evaluation order, the
     * last instruction making out; in[] are its external inputs. NULL and
     * 0 for every other step. */
    const struct mg_fused_instr *fused;
    int n_fused;
} mg_kargs;

typedef mg_status (*mg_kernel_fn)(const mg_kargs *a);

typedef struct mg_backend {
    const char *name;
    /* Device memory. alloc returns NULL on failure. */
    void *(*alloc)(void *ctx, size_t nbytes);
    void (*free)(void *ctx, void *ptr);
    mg_status (*copy_to_host)(void *ctx, void *dst, const void *src, size_t n);
    mg_status (*copy_from_host)(void *ctx, void *dst, const void *src,
                                size_t n);
    /* Run one op; a backend dispatches through its own kernel table. */
    mg_status (*run_op)(void *ctx, const mg_kargs *a);
    mg_status (*synchronize)(void *ctx);
    void (*destroy)(void *ctx);
    /* True if run_op has a kernel for op; leaves need none and count as
     * supported. */
    bool (*supports_op)(void *ctx, mg_op op);
    /* Bytes of scratch the kernel for a->op needs with a's descriptors and
     * attributes (a->work and a->work_bytes are not read). Scratch comes
     * only from the pool, as the plan's workspace for the step, so the
     * prediction counts it: the op table's workspace rule covers every
     * backend's need, and the executor refuses a step whose need exceeds
     * it rather than allocate behind the pool's back. */
    size_t (*workspace)(void *ctx, const mg_kargs *a);
    void *ctx;
    /* Run a fused chain of element-wise ops (a->fused, mg_fused_instr
     * below) as one kernel, or NULL: the backend has none, and plans for
     * its device are not fused (mg_backend_reg.runs_fused). */
    mg_status (*run_fused)(void *ctx, const mg_kargs *a);
} mg_backend;

/* One row of the backend table: a device kind the executor can open. */
typedef struct mg_backend_reg {
    mg_device device;
    const char *name; /* as messages spell the device: "CPU", "CUDA" */
    /* Where its memory lives, for DLPack: the DLDeviceType (kDLCPU 1,
     * kDLCUDA 2, ...), kept as an int so that this floor needs no dlpack.h. */
    int dlpack_device;
    /* Usable devices of this kind; 0 when there is no device or driver. */
    int (*device_count)(void);
    mg_status (*init)(mg_backend *out);
    /* The backend's workspace query without a device or an instance (as
     * mg_backend.workspace), for a plan to count; NULL where the op
     * table's workspace rule covers every kernel of the backend. */
    size_t (*plan_workspace)(const mg_kargs *a);
    /* Without a device: whether the kernel table covers op (leaves count
     * as covered), and the scratch its kernel asks for (NULL: none), which
     * tests hold to the op table's rule. */
    bool (*has_kernel)(mg_op op);
    size_t (*kernel_workspace)(const mg_kargs *a);
    /* Whether plan_workspace may ask anything for op: a plan builds the
     * query's arguments (a tensor descriptor per input) only for those,
     * which was 9% of compiling a 10^5-op plan (issue 32). NULL: every op
     * may. */
    bool (*plan_workspace_op)(mg_op op);
    /* Scratch a plan compiled for this device (mg_plan_options.device)
     * lends a step beyond what its kernel needs, for the kernel to use if
     * it is there: cuBLAS's room to split K (gemm_split.h). It
     * follows the step's own workspace, rounded up to 256 bytes. NULL:
     * none. */
    size_t (*plan_extra)(const mg_kargs *a);
    /* Nonzero when its backend has run_fused: a plan compiled for this
     * device fuses chains of element-wise ops (mg_plan_options.no_fusion). */
    int runs_fused;
} mg_backend_reg;

/* Where plan_extra's bytes start in a step's workspace: after the `own`
 * bytes its kernel needs, rounded up to 256 (cublasSetWorkspace's
 * alignment; the pool's blocks are aligned to it). */
#define MGI_PLAN_EXTRA_ALIGN 256

/* ---- fused element-wise chains (src/rewrite/fuse.c) ---------------------- */

/* The step code of a fused chain: one past the op codes, so no op table or
 * kernel table has an entry for it; the executor hands such a step to the
 * backend's run_fused. */
#define MG_STEP_FUSED MG_OP_COUNT

/* Most ops in one fused chain. */
#define MG_FUSE_MAX 16

/* One op of a fused chain: an op flagged MG_OPF_ELEMENTWISE in the op
 * table (its per-element body is one line of MG_UNARY_OPS or
 * MG_BINARY_OPS, kernel_shared.h) with its attributes; operand k is the
 * result of instruction src[k] when src[k] >= 0, else external input
 * -1 - src[k] (mg_kargs.in). Every instruction's result has the chain
 * output's dtype and shape; an external input has the same dtype and
 * broadcasts to that shape. */
typedef struct mg_fused_instr {
    uint16_t op;
    uint8_t n_in;
    int8_t src[2];
    const mg_attrs *attrs;
} mg_fused_instr;
static inline size_t mgi_plan_extra_offset(size_t own) {
    return (own + MGI_PLAN_EXTRA_ALIGN - 1) / MGI_PLAN_EXTRA_ALIGN *
           MGI_PLAN_EXTRA_ALIGN;
}

/* ---- backends built as modules (module.c) -------------------------------- */

/* What the library lends a module: its error setter, since a module (a
 * shared object of its own, dlopen'ed with RTLD_LOCAL, perhaps beside a
 * static libmemgrad) cannot reach the library's symbols. */
typedef struct mg_backend_core {
    int abi; /* MG_BACKEND_ABI */
    mg_status (*set_error)(mg_status s, const char *message);
} mg_backend_core;

#define MG_BACKEND_ABI 1

/* A module exports one function of this type, named in its registry row;
 * it returns the module's row, or NULL when the module was built for
 * another ABI. */
typedef const mg_backend_reg *(*mg_backend_module_fn)(
    const mg_backend_core *core);

/* The backends this library was built with (registry.c): the
 * CPU, then CUDA when built with it. */
extern const mg_backend_reg *const mgi_backend_table[];
extern const int mgi_backend_table_size;
/* The row for dev, or NULL when this build has no such backend. */
const mg_backend_reg *mgi_backend_find(mg_device dev);
/* The most workspace any backend of this build asks for a (0 where none
 * has a plan_workspace query). A plan lends the larger of this and the op
 * table's rule, so whichever backend runs it finds its scratch counted:
 * oneDNN's scratchpad size, say, is known only to oneDNN. */
size_t mgi_backends_plan_workspace(const mg_kargs *a);
/* False when no backend's plan_workspace asks anything for op: then
 * mgi_backends_plan_workspace is 0 for every step of op. */
bool mgi_backends_plan_workspace_op(mg_op op);

#endif
