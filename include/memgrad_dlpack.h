/*
 * memgrad_dlpack.h - zero-copy tensor exchange with other frameworks
 * through DLPack (dlpack.h, Debian libdlpack-dev).
 *
 * A DLTensor or DLManagedTensor becomes an mg_binding for an input,
 * parameter, output or seed gradient: its memory is borrowed, as every
 * binding's is, and a DLManagedTensor's deleter is never called by memgrad.
 * A kept output of the last run leaves as a DLManagedTensor that shares the
 * executor's pool block: the block goes back to the pool only when both the
 * consumer (through the deleter) and the executor (mg_exec_release or its
 * next run) have let go; until then no run hands it out again. The
 * reference counts are not atomic: call the deleter on the thread that
 * drives the executor.
 */
#ifndef MEMGRAD_DLPACK_H
#define MEMGRAD_DLPACK_H

#include "memgrad.h"

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A binding for tensor t of plan p from dl, for running p on ex. dl must
 * match t's dtype (float32/float64/int32, one lane) and shape exactly, be
 * compact and row-major (strides NULL, or those of a contiguous array;
 * dims of size 1 may have any stride), lie on ex's device (kDLCPU for a CPU
 * executor, kDLCUDA for CUDA), and with byte_offset added be aligned to its
 * dtype. Anything else is an error naming t and what differs. */
MG_API
mg_status mg_dlpack_bind(const mg_exec *ex, const mg_plan *p, mg_tensor t,
                         const DLTensor *dl, mg_binding *out);
/* The same for a DLManagedTensor; it stays the caller's to delete. */
MG_API
mg_status mg_dlpack_bind_managed(const mg_exec *ex, const mg_plan *p,
                                 mg_tensor t, const DLManagedTensor *m,
                                 mg_binding *out);
/* Export kept tensor t of the last run (an output or retained tensor left
 * in the pool, not one in caller memory) as a new DLManagedTensor (compact,
 * byte_offset 0). Call its deleter exactly once; the executor may be freed
 * before that, and then goes when the deleter runs. */
MG_API
mg_status mg_exec_export(mg_exec *ex, mg_tensor t, DLManagedTensor **out);

/* Export forward output t held by saved (mg_exec_forward) as a new
 * DLManagedTensor sharing its pool block, as mg_exec_export does for a
 * run's outputs: the block goes back to the pool when both the consumer's
 * deleter and mg_saved_free have run, in either order. If the backward
 * phase reads t (tanh's output, say), the export fingerprints its bytes,
 * and mg_exec_backward fails with MG_ERR_INVALID_ARG, naming t and leaving
 * saved usable, when they changed: write into a copy, never into the
 * exported block, between the two phases. */
MG_API
mg_status mg_saved_export(mg_saved *saved, mg_tensor t, DLManagedTensor **out);

#ifdef __cplusplus
}
#endif
#endif
