/*
 * average.cu - step 3 of the NCCL bucket exchange (buckets_nccl.c): a
 * rank's chunk of a bucket, received from every rank, averaged in rank
 * order. One thread per element adds the N contributions r = 0, 1, ...,
 * N-1 in that order, in double, and divides once: no atomics and no tree,
 * so the result does not depend on the launch shape, and it is the same
 * arithmetic as chunk_average on the MPI path (buckets.c), hence the same
 * bits for the same inputs.
 */
#include "nccl_internal.h"

#include <stdint.h>

namespace {

/* __dadd_rn / __ddiv_rn: IEEE round-to-nearest, never contracted or
 * approximated whatever the compiler flags, as the host code's + and /. */
template <typename T>
__global__ void average_chunk(const T *__restrict__ recv, T *__restrict__ out,
                              size_t chunk, int nranks) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < chunk;
         e += (size_t)blockDim.x * gridDim.x) {
        double acc = 0;
        for (int r = 0; r < nranks; r++)
            acc = __dadd_rn(acc, (double)recv[(size_t)r * chunk + e]);
        out[e] = (T)__ddiv_rn(acc, (double)nranks);
    }
}

} // namespace

extern "C" cudaError_t mgi_nccl_average(cudaStream_t stream, int f64,
                                        const void *recv, void *out,
                                        size_t chunk, int nranks) {
    const unsigned threads = 256;
    size_t blocks = (chunk + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 65535 * 8) blocks = 65535 * 8; /* grid-stride beyond */
    if (f64)
        average_chunk<double><<<(unsigned)blocks, threads, 0, stream>>>(
            (const double *)recv, (double *)out, chunk, nranks);
    else
        average_chunk<float><<<(unsigned)blocks, threads, 0, stream>>>(
            (const float *)recv, (float *)out, chunk, nranks);
    return cudaGetLastError();
}
