/*
 * size_class.c - the unit every byte count of a plan is measured in: the
 * buffer pool rounds each request up to its size class, and the planner
 * predicts peaks in the same classes, so the two agree to the byte. It
 * lives here, below both, so that the planner (src/rewrite) does not call
 * into the executor (src/exec).
 */
#include "ir.h"

#include <stdint.h>

/* Every request rounds up to a multiple of this many bytes. */
#define MG_SIZE_CLASS_ALIGN 256

size_t mg_pool_size_class(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    if (nbytes > SIZE_MAX - MG_SIZE_CLASS_ALIGN) return SIZE_MAX;
    return (nbytes + MG_SIZE_CLASS_ALIGN - 1) / MG_SIZE_CLASS_ALIGN *
           MG_SIZE_CLASS_ALIGN;
}
