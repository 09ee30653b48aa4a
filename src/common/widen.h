/*
 * widen.h - how a backend without 16-bit kernels (the CPU's, today) runs an
 * op on bfloat16 or float16 tensors: each 16-bit input is widened to
 * float32, the float32 kernel runs, and its output is rounded once to the
 * 16-bit storage type (src/exec/cpu/cpu_widen.c). The float32 copies live
 * in the step's workspace, which the planner counts (src/graph/ops_widen.c
 * adds them to the op's workspace rule), so the predicted peak stays the
 * measured one with 16-bit bytes counted exactly.
 *
 * Elementwise ops need no copies: they run a block of elements at a time
 * through stack buffers (the same value per element, whatever the block),
 * so that mg_exec_accumulate's add borrows nothing outside the plan.
 *
 * The planner and the backend both size the copies with these functions,
 * so that the two agree to the byte.
 */
#ifndef MG_WIDEN_H
#define MG_WIDEN_H

#include "ir.h"

/* Alignment of each float32 copy inside the workspace (a cache line). */
#define MGI_WIDEN_ALIGN ((size_t)64)

/* True when an input or the output of the op is bf16 or f16, and the op
 * is not cast (which converts itself, needing no copies) nor one that
 * moves bytes whatever the dtype (reshape, slice, pad, concat, embedding:
 * they run on the 16-bit data as it is). */
bool mgi_widen_needed(mg_op op, int n_in, const mg_tdesc *in,
                      const mg_tdesc *out);
/* True for an elementwise op whose inputs all have the output's shape: it
 * runs block by block without copies. */
bool mgi_widen_blockwise(mg_op op, int n_in, const mg_tdesc *in,
                         const mg_tdesc *out);
/* Bytes of float32 copies (each rounded up to MGI_WIDEN_ALIGN) that the
 * widened op needs ahead of its float32 kernel's own workspace: one per
 * 16-bit input, one for a 16-bit output. 0 when none is needed. */
size_t mgi_widen_bytes(mg_op op, int n_in, const mg_tdesc *in,
                       const mg_tdesc *out);
/* d with a 16-bit dtype replaced by f32. */
mg_tdesc mgi_widen_desc(const mg_tdesc *d);

#endif
