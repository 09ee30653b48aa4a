/*
 * bench_device.c - mg-bench's device memory for --device cuda (issue 5):
 * which device a command runs on, caller buffers in device memory (alloc,
 * upload, download, free), the device's memory and name, and a CUDA-event
 * timer on the legacy default stream.
 *
 * Only this file talks to the CUDA runtime, and only when mg-bench is built
 * with MG_HAVE_CUDA (CMakeLists.txt adds it with CUDA::cudart when the
 * library has the CUDA backend). Without it every function still links:
 * bench_device_check(MG_DEVICE_CUDA) says the build has no CUDA and the
 * rest fail. The CPU path never calls anything here but bench_device_check,
 * bench_device_parse and bench_device_str.
 *
 * The memgrad CUDA backend runs on its own blocking stream, which
 * synchronises with the legacy default stream that cudaMemcpy and the
 * events here use, and mg_exec_run synchronises before it returns. So
 * uploads are complete before a run starts, a download after a run sees
 * its results, and an event pair around mg_exec_run brackets the whole
 * step on the GPU's clock.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef MG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int bench_device_parse(const char *s, mg_device *out) {
    if (!strcmp(s, "cpu")) *out = MG_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *out = MG_DEVICE_CUDA;
    else return 0;
    return 1;
}

const char *bench_device_str(mg_device d) {
    return d == MG_DEVICE_CUDA ? "cuda" : "cpu";
}

int bench_device_check(mg_device d) {
    if (d == MG_DEVICE_CPU) return 0;
#ifndef MG_HAVE_CUDA
    fprintf(stderr, "mg-bench: --device cuda: this mg-bench was built "
                    "without CUDA support (configure with nvcc available and "
                    "-DMG_WITH_CUDA=ON)\n");
    return 2;
#else
    /* The library decides: no device, no driver, or a library without the
     * CUDA backend all give MG_ERR_UNSUPPORTED and a message. */
    mg_exec_options eo = {.device = MG_DEVICE_CUDA};
    mg_exec *ex = NULL;
    mg_status s = mg_exec_new(&eo, &ex);
    mg_exec_free(ex);
    if (s != MG_OK) {
        fprintf(stderr, "mg-bench: --device cuda: %s: %s\n", mg_status_str(s),
                mg_last_error());
        return 2;
    }
    return 0;
#endif
}

#ifdef MG_HAVE_CUDA
static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "mg-bench: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}
#endif

void *bench_device_alloc(size_t n) {
#ifdef MG_HAVE_CUDA
    void *p = NULL;
    if (!cuda_ok(cudaMalloc(&p, n ? n : 1), "cudaMalloc")) return NULL;
    return p;
#else
    (void)n;
    fprintf(stderr, "mg-bench: no CUDA support in this build\n");
    return NULL;
#endif
}

int bench_device_upload(void *dst, const void *src, size_t n) {
#ifdef MG_HAVE_CUDA
    return cuda_ok(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice),
                   "cudaMemcpy to the device");
#else
    (void)dst, (void)src, (void)n;
    return 0;
#endif
}

int bench_device_download(void *dst, const void *src, size_t n) {
#ifdef MG_HAVE_CUDA
    return cuda_ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost),
                   "cudaMemcpy from the device");
#else
    (void)dst, (void)src, (void)n;
    return 0;
#endif
}

void bench_device_free(void *p) {
#ifdef MG_HAVE_CUDA
    if (p) cudaFree(p);
#else
    (void)p;
#endif
}

size_t bench_device_memory(void) {
#ifdef MG_HAVE_CUDA
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
    return total;
#else
    return 0;
#endif
}

size_t bench_default_max_bytes(mg_device d) {
    size_t total = d == MG_DEVICE_CPU ? 0 : bench_device_memory();
    return (total ? total : bench_physical_memory()) / 2;
}

void bench_device_info(char *buf, size_t len) {
    snprintf(buf, len, "no CUDA device");
#ifdef MG_HAVE_CUDA
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(buf, len, "%s, sm_%d%d, %.1f GiB", prop.name, prop.major,
                 prop.minor, (double)prop.totalGlobalMem / (1 << 30));
#endif
}

#ifdef MG_HAVE_CUDA
static cudaEvent_t ev_start, ev_stop;
static int ev_ready;
#endif

int bench_device_timer_start(void) {
#ifdef MG_HAVE_CUDA
    if (!ev_ready) {
        if (!cuda_ok(cudaEventCreate(&ev_start), "cudaEventCreate")) return 0;
        if (!cuda_ok(cudaEventCreate(&ev_stop), "cudaEventCreate")) {
            cudaEventDestroy(ev_start);
            return 0;
        }
        ev_ready = 1;
    }
    return cuda_ok(cudaEventRecord(ev_start, 0), "cudaEventRecord");
#else
    return 0;
#endif
}

double bench_device_timer_stop(void) {
#ifdef MG_HAVE_CUDA
    float ms = 0;
    if (!ev_ready || !cuda_ok(cudaEventRecord(ev_stop, 0), "cudaEventRecord") ||
        !cuda_ok(cudaEventSynchronize(ev_stop), "cudaEventSynchronize") ||
        !cuda_ok(cudaEventElapsedTime(&ms, ev_start, ev_stop),
                 "cudaEventElapsedTime"))
        return NAN;
    return ms;
#else
    return NAN;
#endif
}

void bench_device_timer_free(void) {
#ifdef MG_HAVE_CUDA
    if (ev_ready) {
        cudaEventDestroy(ev_start);
        cudaEventDestroy(ev_stop);
        ev_ready = 0;
    }
#endif
}
