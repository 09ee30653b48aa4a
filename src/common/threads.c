/*
 * threads.c - mg_exec_options.num_threads: the CPU thread count one
 * executor's runs use. OpenMP keeps the count (nthreads-var) per calling
 * thread, and both memgrad's kernels and oneDNN's OpenMP build read it
 * from there at each region, so setting it around a run and restoring it
 * afterwards affects that run alone: two executors with different counts
 * can run on two threads at once, and the caller's own setting survives.
 */
#include "threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

int mgi_threads_cap(void) {
#ifdef _OPENMP
    const int cur = omp_get_max_threads(), procs = omp_get_num_procs();
    return cur > procs ? cur : procs;
#else
    return 1;
#endif
}

int mgi_threads_enter(int n) {
#ifdef _OPENMP
    const int prev = omp_get_max_threads();
    /* plans size oneDNN's scratchpad for at most this many (cpu_onednn.c) */
    const int cap = mgi_threads_cap();
    if (n > cap) n = cap;
    if (n > 0 && n != prev) omp_set_num_threads(n);
    return prev;
#else
    (void)n;
    return 1;
#endif
}

void mgi_threads_leave(int n, int prev) {
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(prev);
#else
    (void)n;
    (void)prev;
#endif
}
