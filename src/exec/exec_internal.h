/*
 * exec_internal.h - what phase.c (the two-call forward/backward run) needs
 * from the executor's private state, without seeing its struct.
 */
#ifndef MG_EXEC_INTERNAL_H
#define MG_EXEC_INTERNAL_H

#include "memgrad.h"

#include <stdbool.h>

/* Move the kept outputs of the last run out of ex into the arrays (room for
 * the plan's n_kept each): the caller now owns their pooled blocks and
 * gives them back with mgi_exec_pool_free. Returns how many. */
int32_t mgi_exec_take_kept(mg_exec *ex, mg_tensor *t, void **data,
                           size_t *nbytes, bool *pooled);
/* The buffer of t as the last run left it: NULL once released. */
void *mgi_exec_buf(const mg_exec *ex, mg_tensor t);
void mgi_exec_pool_free(mg_exec *ex, void *data, size_t nbytes);

#endif
