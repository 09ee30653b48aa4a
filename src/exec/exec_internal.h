/*
 * exec_internal.h - what phase.c (the two-call forward/backward run) needs
 * from the executor's private state, without seeing its struct.
 */
#ifndef MG_EXEC_INTERNAL_H
#define MG_EXEC_INTERNAL_H

#include "../common/ir.h"

#include <stdbool.h>

/* Move the kept outputs of the last run out of ex into the arrays (room for
 * the plan's n_kept each): the caller now owns their pooled blocks and
 * gives them back with mgi_exec_pool_free. Returns how many. */
int32_t mgi_exec_take_kept(mg_exec *ex, mg_tensor *t, void **data,
                           size_t *nbytes, bool *pooled);
/* The buffer of t as the last run left it: NULL once released. */
void *mgi_exec_buf(const mg_exec *ex, mg_tensor t);
void mgi_exec_pool_free(mg_exec *ex, void *data, size_t nbytes);

/* The most threads a run may use: the larger of the calling thread's
 * OpenMP count and the processors; what plans size oneDNN's scratchpad for. */
int mgi_threads_cap(void);
/* Set the calling thread's OpenMP thread count to n (> 0, at most
 * mgi_threads_cap(); 0 keeps it) for one run and return the count to
 * restore with mgi_threads_leave (threads.c). */
int mgi_threads_enter(int n);
void mgi_threads_leave(int n, int prev);

/* A pool block shared between the executor's kept list and exported
 * DLPack tensors: it goes back to the pool when refs reaches 0. */
typedef struct mgi_block_ref {
    mg_exec *ex;
    void *data;
    size_t nbytes;
    int32_t refs;
    mg_tdesc d;
} mgi_block_ref;

/* A new reference on the block of kept tensor t of the last run (the
 * executor keeps its own until mg_exec_release). */
mg_status mgi_exec_share(mg_exec *ex, mg_tensor t, mgi_block_ref **out);
/* A reference, held by the caller, on a pool block of ex that the caller
 * owns now (a forward output in an mg_saved): counted as exported. */
mgi_block_ref *mgi_block_ref_new(mg_exec *ex, void *data, size_t nbytes,
                                 const mg_tdesc *d);
void mgi_block_ref_drop(mgi_block_ref *r);
/* A DLManagedTensor holding a new reference on r (dlpack.c). */
struct DLManagedTensor;
mg_status mgi_dlpack_export_ref(mg_exec *ex, mgi_block_ref *r,
                                struct DLManagedTensor **out,
                                const char *what);
/* The executor's device. */
mg_device mgi_exec_device(const mg_exec *ex);

#endif
