/*
 * threads.h - the calling thread's OpenMP thread count, which both the
 * executor (mg_exec_options.num_threads, around each run) and the CPU
 * backend's kernels (oneDNN's scratchpad is sized for the most threads a
 * run may use) read: process-level, below both.
 */
#ifndef MG_THREADS_H
#define MG_THREADS_H

/* The most threads a run may use: the larger of the calling thread's
 * OpenMP count and the processors; what plans size oneDNN's scratchpad for. */
int mgi_threads_cap(void);
/* Set the calling thread's OpenMP thread count to n (> 0, at most
 * mgi_threads_cap(); 0 keeps it) for one run and return the count to
 * restore with mgi_threads_leave. */
int mgi_threads_enter(int n);
void mgi_threads_leave(int n, int prev);

#endif
