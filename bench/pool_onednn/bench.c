/*
 * bench/pool_onednn/bench.c - pooling through oneDNN against memgrad's
 * loops (issue 14): for each shape, the forward op alone and the backward
 * helper alone (max_pool2d_grad(gy, x), avg_pool2d_grad(gy)), each as a
 * one-op plan run many times on one executor, in f32, with MG_POOL=onednn
 * and MG_POOL=loops in alternating rounds so that load from other
 * processes falls on both alike. Prints the median milliseconds per run.
 * Public API only; run.sh compiles it against a build's libmemgrad.a.
 *
 *   usage: pool-bench [ROUNDS] [REPS]
 */
#include <memgrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;
    int64_t n, c, h, w;
    int max, k, s, p;
} shape;

/* The ResNet's pooling (ImageNet stem max pool; the CIFAR bench model has
 * only a global mean), the UNet's 2x2 max pools and average pools of
 * the same sizes. */
static const shape shapes[] = {
    {"resnet stem max 3x3/2 p1 [8,64,112,112]", 8, 64, 112, 112, 1, 3, 2, 1},
    {"unet max 2x2/2 [8,32,64,64]", 8, 32, 64, 64, 1, 2, 2, 0},
    {"unet max 2x2/2 [8,128,16,16]", 8, 128, 16, 16, 1, 2, 2, 0},
    {"avg 3x3/2 p1 [8,64,112,112]", 8, 64, 112, 112, 0, 3, 2, 1},
    {"avg 2x2/2 [8,64,56,56]", 8, 64, 56, 56, 0, 2, 2, 0},
    {"avg 3x3/1 p1 [8,64,28,28]", 8, 64, 28, 28, 0, 3, 1, 1},
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Milliseconds per run of out's plan (median of reps), bound to bufs. */
static double time_plan(mg_graph *g, mg_tensor out, const mg_binding *in,
                        int n_in, void *obuf, int reps) {
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    mg_binding b[4];
    memcpy(b, in, (size_t)n_in * sizeof *b);
    b[n_in] = (mg_binding){out, obuf};
    if (mg_plan_compile(g, &out, 1, NULL, &p) != MG_OK ||
        mg_exec_new(NULL, &ex) != MG_OK) {
        fprintf(stderr, "pool-bench: %s\n", mg_last_error());
        exit(1);
    }
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) exit(1);
    for (int r = -2; r < reps; r++) { /* two warm-up runs */
        double t0 = now_ms();
        if (mg_exec_run(ex, p, b, n_in + 1, 0) != MG_OK) {
            fprintf(stderr, "pool-bench: %s\n", mg_last_error());
            exit(1);
        }
        if (r >= 0) t[r] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double med = t[reps / 2];
    free(t);
    mg_exec_free(ex);
    mg_plan_free(p);
    return med;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    const char *paths[2] = {"onednn", "loops"};
    printf("%-42s %10s %10s %10s %10s\n", "shape (f32)", "fwd onednn",
           "fwd loops", "bwd onednn", "bwd loops");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *q = &shapes[i];
        mg_graph *g = mg_graph_new();
        const int64_t xs[4] = {q->n, q->c, q->h, q->w};
        mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
        mg_tensor y =
            q->max ? mg_max_pool2d(g, x, q->k, q->k, q->s, q->s, q->p, q->p)
                   : mg_avg_pool2d(g, x, q->k, q->k, q->s, q->s, q->p, q->p);
        int64_t ys[MG_MAX_DIMS];
        int nd;
        mg_tensor_shape(g, y, &nd, ys);
        mg_tensor gy = mg_input(g, "gy", MG_F32, 4, ys);
        mg_tensor gx;
        if (mg_gradients(g, &y, 1, &gy, &x, 1, NULL, &gx) != MG_OK) {
            fprintf(stderr, "pool-bench: %s\n", mg_last_error());
            return 1;
        }
        size_t nx = (size_t)(q->n * q->c * q->h * q->w);
        size_t ny = (size_t)(ys[0] * ys[1] * ys[2] * ys[3]);
        float *xv = malloc(nx * sizeof *xv), *gxv = malloc(nx * sizeof *gxv);
        float *yv = malloc(ny * sizeof *yv), *gyv = malloc(ny * sizeof *gyv);
        if (!xv || !gxv || !yv || !gyv) return 1;
        srand(1);
        /* after a relu: half zeros, ties included */
        for (size_t j = 0; j < nx; j++) {
            float v = (float)rand() / RAND_MAX - 0.5f;
            xv[j] = v > 0 ? v : 0;
        }
        for (size_t j = 0; j < ny; j++) gyv[j] = (float)rand() / RAND_MAX;
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
        for (int r = 0; r < rounds; r++)
            for (int p = 0; p < 2; p++) {
                setenv("MG_POOL", paths[p], 1);
                const mg_binding fin[1] = {{x, xv}};
                const mg_binding bin[2] = {{gy, gyv}, {x, xv}};
                double f = time_plan(g, y, fin, 1, yv, reps);
                double b = time_plan(g, gx, bin, 2, gxv, reps);
                if (f < best[p][0]) best[p][0] = f;
                if (b < best[p][1]) best[p][1] = b;
            }
        printf("%-42s %10.3f %10.3f %10.3f %10.3f\n", q->name, best[0][0],
               best[1][0], best[0][1], best[1][1]);
        free(xv), free(gxv), free(yv), free(gyv);
        mg_graph_free(g);
    }
    return 0;
}
