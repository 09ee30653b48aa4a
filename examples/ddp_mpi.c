/*
 * ddp_mpi.c - data-parallel training with memgrad_dist.h: every MPI rank
 * trains the same model (ResNet or MLP from memgrad_models.h) under the
 * memory checkpoint policy on its own shard of each batch, and the
 * gradients are averaged across ranks after every backward pass.
 *
 *   mpirun -np 2 memgrad-ddp_mpi [resnet|mlp] [steps] [batch per rank]
 *   (as root add --allow-run-as-root; on 2 cores add --oversubscribe)
 *
 * Each rank draws its shards from a fixed set of two per rank, so the
 * loss goes down as the model learns them. Rank 0 broadcasts the initial
 * weights (they are equal anyway: mg_model_init_params is a pure function
 * of the seed). The ResNet's batchnorm uses each rank's local batch
 * statistics, like PyTorch DDP without SyncBatchNorm (docs/distributed.md).
 */
#include <memgrad_dist.h>
#include <memgrad_models.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void die(const char *what, mg_status s) {
    fprintf(stderr, "memgrad-ddp_mpi: rank %d: %s: %s: %s\n", rank, what,
            mg_status_str(s), mg_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* FNV-1a over the weights: equal on every rank after each step. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *kind = argc > 1 ? argv[1] : "resnet";
    int steps = argc > 2 ? atoi(argv[2]) : 8;
    int batch = argc > 3 ? atoi(argv[3]) : 8;
    if (steps < 1 || batch < 1 ||
        (strcmp(kind, "resnet") != 0 && strcmp(kind, "mlp") != 0)) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpirun -np N memgrad-ddp_mpi "
                    "[resnet|mlp] [steps >= 1] [batch per rank >= 1]\n");
        MPI_Finalize();
        return 2;
    }
    mg_model *m = strcmp(kind, "mlp") == 0
                      ? mg_model_mlp(4, 64, batch, 32, 10, 0.0, MG_F32, 1)
                      : mg_model_resnet(3, 8, batch, 16, 10, MG_F32, 1);
    if (!m) die("building the model", mg_last_status());
    mg_checkpoints ckpt = {.policy = MG_CKPT_MEMORY};
    mg_status s = mg_model_gradients(m, &ckpt);
    if (s != MG_OK) die("mg_model_gradients", s);

    /* Caller memory: parameters, gradients, a batch, the loss. */
    int n = m->n_params;
    void **w = calloc((size_t)n, sizeof *w),
         **gw = calloc((size_t)n, sizeof *gw);
    mg_binding *binds = calloc((size_t)(2 * n + 3), sizeof *binds);
    mg_binding *params = calloc((size_t)n, sizeof *params);
    mg_binding *grads = calloc((size_t)n, sizeof *grads);
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    if (!w || !gw || !binds || !params || !grads || !outs)
        die("allocating", MG_ERR_NOMEM);
    int nb = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = mg_tensor_nbytes(m->g, m->params[i]);
        w[i] = malloc(bytes);
        gw[i] = malloc(bytes);
        if (!w[i] || !gw[i]) die("allocating", MG_ERR_NOMEM);
        binds[nb++] = (mg_binding){m->params[i], w[i]};
        binds[nb++] = (mg_binding){m->grads[i], gw[i]};
        params[i] = (mg_binding){m->params[i], w[i]};
        /* Backward finishes the last layer's gradients first. */
        grads[n - 1 - i] = (mg_binding){m->grads[i], gw[i]};
        outs[i + 1] = m->grads[i];
    }
    void *x = malloc(mg_tensor_nbytes(m->g, m->input));
    void *y = malloc(mg_tensor_nbytes(m->g, m->target));
    float loss = 0;
    if (!x || !y) die("allocating", MG_ERR_NOMEM);
    binds[nb++] = (mg_binding){m->input, x};
    binds[nb++] = (mg_binding){m->target, y};
    binds[nb++] = (mg_binding){m->loss, &loss};
    outs[0] = m->loss;
    if ((s = mg_model_init_params(m, 7, w)) != MG_OK) die("init", s);

    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    if ((s = mg_plan_compile(m->g, outs, n + 1, NULL, &plan)) != MG_OK)
        die("mg_plan_compile", s);
    if ((s = mg_exec_new(NULL, &ex)) != MG_OK) die("mg_exec_new", s);

    mg_dist_comm *comm = NULL;
    mg_dist_buckets *buckets = NULL;
    if ((s = mg_dist_comm_from_mpi(MPI_COMM_WORLD, NULL, &comm)) != MG_OK)
        die("mg_dist_comm_from_mpi", s);
    if ((s = mg_dist_broadcast(comm, m->g, params, n, 0)) != MG_OK)
        die("mg_dist_broadcast", s);
    if ((s = mg_dist_buckets_new(comm, m->g, grads, n, 0, &buckets)) != MG_OK)
        die("mg_dist_buckets_new", s);
    if (rank == 0)
        printf("%s, %d params, %d ranks x batch %d, memory policy, "
               "%d gradient buckets; predicted pool peak per rank %.2f MB\n",
               mg_model_kind_name(m->kind), n, size, batch,
               mg_dist_buckets_count(buckets),
               mg_plan_predicted_peak(plan, binds, nb) / 1e6);

    const float lr = strcmp(kind, "mlp") == 0 ? 0.05f : 0.1f;
    for (int step = 0; step < steps; step++) {
        /* Two shards per rank, distinct across ranks, visited in turn. */
        uint64_t data_seed = 100 + (uint64_t)rank + (uint64_t)size * (step % 2);
        if ((s = mg_model_init_data(m, data_seed, x, y)) != MG_OK)
            die("mg_model_init_data", s);
        double t0 = MPI_Wtime();
        s = mg_exec_run(ex, plan, binds, nb, (uint64_t)step);
        double t1 = MPI_Wtime();
        /* Every rank calls in, with its own status: a failed run fails
         * every rank here instead of leaving the others waiting. */
        s = mg_dist_allreduce(buckets, s);
        double t2 = MPI_Wtime();
        if (s != MG_OK) die("training step", s);
        for (int i = 0; i < n; i++) {
            float *p = w[i];
            const float *gp = gw[i];
            int64_t ne = mg_tensor_numel(m->g, m->params[i]);
            for (int64_t j = 0; j < ne; j++) p[j] -= lr * gp[j];
        }
        float mean_loss = 0;
        MPI_Reduce(&loss, &mean_loss, 1, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("step %2d  loss %.4f (mean over ranks)  run %.1f ms  "
                   "allreduce %.1f ms\n",
                   step, mean_loss / size, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
    }

    /* Same averaged gradients, same update: the weights must agree. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++)
        h = hash_bytes(h, w[i], mg_tensor_nbytes(m->g, m->params[i]));
    uint64_t h0 = h;
    MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int same = h == h0, all_same = 0;
    MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    mg_pool_stats ps;
    mg_exec_pool_stats(ex, &ps);
    mg_dist_stats ds;
    mg_dist_buckets_stats(buckets, &ds);
    if (rank == 0)
        printf("weights identical on all ranks: %s; pool peak %.2f MB per "
               "rank; %.2f MB sent per rank per step\n",
               all_same ? "yes" : "NO", ps.peak_bytes_in_use / 1e6,
               (double)ds.bytes_sent / (double)steps / 1e6);

    mg_dist_buckets_free(buckets);
    mg_dist_comm_free(comm);
    mg_exec_free(ex);
    mg_plan_free(plan);
    for (int i = 0; i < n; i++) {
        free(w[i]);
        free(gw[i]);
    }
    free(w);
    free(gw);
    free(binds);
    free(params);
    free(grads);
    free(outs);
    free(x);
    free(y);
    mg_model_free(m);
    MPI_Finalize();
    return all_same ? 0 : 1;
}
