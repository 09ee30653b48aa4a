/*
 * backend_cuda.h - the CUDA backend's entry points, callable from C.
 *
 * Built only when CMake finds a CUDA compiler (MG_HAVE_CUDA). A CUDA
 * executor's bindings, and the pointers mg_exec_tensor_data returns, are
 * device pointers; the pool allocates with cudaMalloc.
 */
#ifndef MG_BACKEND_CUDA_H
#define MG_BACKEND_CUDA_H

#include "backend/backend.h"

/* Number of usable CUDA devices; 0 when there is no device or driver. */
int mgi_cuda_device_count(void);
/* The CUDA backend on the current device: one stream, one cuBLAS handle
 * (TF32 off). MG_ERR_UNSUPPORTED "no CUDA device" without a device. */
mg_status mgi_backend_cuda_init(mg_backend *out);
/* 1 if the CUDA kernel table has a kernel for op (leaves need none and
 * count as covered); works without a device. */
int mgi_cuda_has_kernel(mg_op op);
/* Bytes of workspace the CUDA kernel for a->op needs (the backend's
 * workspace query); works without a device. */
size_t mgi_cuda_workspace(const mg_kargs *a);

#endif
