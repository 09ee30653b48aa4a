/*
 * cpu_vmath.h - private to the CPU backend: y[i] = expf(x[i]), tanhf(x[i])
 * and erff(x[i]) over arrays, vectorised (cpu_vmath.c). y may equal x. The
 * bits of y[i] depend on x[i] alone, not on n or on where the array starts.
 */
#ifndef MG_CPU_VMATH_H
#define MG_CPU_VMATH_H

#include <stdint.h>

void mgi_cpu_vexpf(float *y, const float *x, int64_t n);
void mgi_cpu_vtanhf(float *y, const float *x, int64_t n);
void mgi_cpu_verff(float *y, const float *x, int64_t n);

/* Block length for kernels that stage a formula's argument on the stack
 * before one of these calls. */
#define MG_VMATH_BLOCK 256

#endif
