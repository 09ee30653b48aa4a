/*
 * exec_internal.h - what phase.c (the two-call forward/backward run) needs
 * from the executor's private state, without seeing its struct.
 */
#ifndef MG_EXEC_INTERNAL_H
#define MG_EXEC_INTERNAL_H

#include "../common/ir.h"
#include "../common/threads.h"

#include <stdbool.h>

/* mg_exec_run on behalf of owner (a forward phase's saved state, or
 * NULL): arena blocks the run leaves in use are owner's, and a run for
 * the same owner may use the arena round them (buffer_pool.h). host: for
 * a phase of a plan that offloads, the host memory its copies use (lent
 * to owner, mgi_exec_host_lend); else NULL. */
mg_status mgi_exec_run_for(mg_exec *ex, const mg_plan *p,
                           const mg_binding *binds, int n_binds, uint64_t seed,
                           const void *owner, char *host);
/* The host tier's mgi_host_tier_lend and mgi_host_tier_give_back
 * (host_tier.h), for a forward phase's saved state. */
char *mgi_exec_host_lend(mg_exec *ex, size_t bytes, size_t *size);
void mgi_exec_host_give_back(mg_exec *ex, char *mem, size_t size,
                             size_t in_use);
/* Move the kept outputs of the last run out of ex into the arrays (room for
 * the plan's n_kept each): the caller now owns their pooled blocks and
 * gives them back with mgi_exec_pool_free. Returns how many. */
int32_t mgi_exec_take_kept(mg_exec *ex, mg_tensor *t, void **data,
                           size_t *nbytes, bool *pooled);
/* The buffer of t as the last run left it: NULL once released. */
void *mgi_exec_buf(const mg_exec *ex, mg_tensor t);
void mgi_exec_pool_free(mg_exec *ex, void *data, size_t nbytes);

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
/* A holder of ex other than a block reference (an mg_saved): ex outlives
 * mg_exec_free until every holder is let go; the last unhold after
 * mg_exec_free destroys it. */
void mgi_exec_hold(mg_exec *ex);
void mgi_exec_unhold(mg_exec *ex);
/* A DLManagedTensor holding a new reference on r (dlpack.c). */
struct DLManagedTensor;
mg_status mgi_dlpack_export_ref(mg_exec *ex, mgi_block_ref *r,
                                struct DLManagedTensor **out, const char *what);
/* The executor's device, and its backend's row. */
mg_device mgi_exec_device(const mg_exec *ex);
/* n bytes of device memory src into host memory dst, by ex's backend. */
mg_status mgi_exec_copy_to_host(mg_exec *ex, void *dst, const void *src,
                                size_t n);
struct mg_backend_reg;
const struct mg_backend_reg *mgi_exec_reg(const mg_exec *ex);

#endif
