/*
 * helpers/record.c - the record of which ops the finite-difference gradient
 * checks differentiated (see helpers/gradcheck.h). Compiled once into the
 * test support library: the record must be one object for all the parts
 * of a test program, which static data in a header cannot be.
 */
#include <sys/mman.h>

#include "../helpers.h"

#define GC_OP_NAME(e, s) s,
static const char *const op_names[GC_N_OPS] = {MG_OP_LIST(GC_OP_NAME)};
#undef GC_OP_NAME

/* [which * GC_N_OPS + op], shared with the forked test processes */
static int *counts;

void gc_record_open(void) {
    void *p = mmap(NULL, sizeof(int) * 2 * GC_N_OPS, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    counts = p == MAP_FAILED ? NULL : (int *)p;
}

void gc_record_close(void) {
    if (counts) munmap(counts, sizeof(int) * 2 * GC_N_OPS);
    counts = NULL;
}

int gc_record_is_open(void) { return counts != NULL; }

const char *gc_op_name(int k) {
    return k >= 0 && k < GC_N_OPS ? op_names[k] : NULL;
}

/* Check runs one test process at a time, so plain increments suffice. */
void gc_record_op(const char *name, int which) {
    for (int k = 0; counts && name && k < GC_N_OPS; k++)
        if (strcmp(name, op_names[k]) == 0) counts[which * GC_N_OPS + k]++;
}

int gc_record_count(int k, int which) {
    return counts && k >= 0 && k < GC_N_OPS ? counts[which * GC_N_OPS + k] : 0;
}
