/*
 * test_pipeline_agree.c - mg_pipe_new's agreement under `mpirun -np 2`,
 * `-np 3` and `-np 4` (issue 49): the last rank is given a graph, cuts or
 * options that differ from the other ranks' in one way at a time, and
 * every rank must refuse with MG_ERR_INVALID_ARG naming that rank and what
 * differs, the communicator still usable. Before, a relu on one rank where
 * the others had a tanh of the same shape trained with MG_OK and
 * gradients of another graph, and a microbatch count or a policy that
 * differed was reported as "other tensors (count, sizes, dtypes or
 * order)".
 *
 * Check runs in CK_NOFORK mode: forking an MPI process is not allowed.
 */
#include <memgrad_pipeline.h>

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/mpi_main.h"

static int rank, size;

enum { B = 4, IN = 6, H = 8, OUT = 3, MAX_CUTS = 8 };

/* How the last rank's arguments differ from the others'. */
typedef enum diff {
    SAME,
    OP_KIND,   /* tanh where the others have relu, same shapes */
    ATTRIBUTE, /* a square matmul with trans_b set */
    DTYPE,     /* the graph in float64 */
    SHAPE,     /* a hidden width of H + 1 */
    EDGE,      /* a matmul reading the other of two equal parameters */
    EXTRA,     /* one more tensor (unread) */
    CUTS,      /* another cut tensor */
    N_MICRO,   /* 3 microbatches, not 2 */
    SCHEDULE,  /* GPipe, not 1F1B */
    POLICY,    /* speed, not memory */
    BUDGET,    /* under policy budget: 2 MiB, not 1 MiB */
    CKPT_OPTS, /* compact */
    CKPT_TAG,  /* a checkpoint tag on a tensor of g */
    N_DIFFS
} diff;

/* What the refusal must say for each, beside the rank. */
static const char *const want[N_DIFFS] = {
    [OP_KIND] = "the graph's op kinds",
    [ATTRIBUTE] = "the graph's op attributes",
    [DTYPE] = "the graph's dtypes",
    [SHAPE] = "the graph's shapes",
    [EDGE] = "the graph's edges",
    [EXTRA] = "the graph's tensor count",
    [CUTS] = "the cut tensors",
    [N_MICRO] = "the microbatch count (n_micro) (2 on rank 0, 3 on rank",
    [SCHEDULE] = "the schedule (1f1b on rank 0, gpipe on rank",
    [POLICY] = "the checkpoint policy (memory on rank 0, speed on rank",
    [BUDGET] = "budget_bytes) (1048576 on rank 0, 2097152 on rank",
    [CKPT_OPTS] = "the checkpoint options",
    [CKPT_TAG] = "the checkpoint options"};

/* Parts that must not be named: a difference in one part only. The graph
 * variants keep every other part equal by construction (EXTRA adds a
 * tensor, which changes the per-tensor parts too). */
static const char *const parts[] = {"op kinds",
                                    "op attributes",
                                    "dtypes",
                                    "shapes",
                                    "edges",
                                    "tensor count",
                                    "cut tensors",
                                    "microbatch count",
                                    "the schedule",
                                    "policy (",
                                    "budget_bytes",
                                    "max_bytes",
                                    "checkpoint options"};

typedef struct net {
    mg_graph *g;
    mg_tensor loss;
    mg_tensor a[4]; /* the hidden activations: cut candidates */
} net;

/* x [B, IN] -> 4 x (matmul, activation) -> sum. d changes this rank's
 * graph in one way. */
static void net_make(net *n, diff d) {
    const int64_t h = d == SHAPE ? H + 1 : H;
    const mg_dtype dt = d == DTYPE ? MG_F64 : MG_F32;
    mg_graph *g = mg_graph_new();
    ck_assert_ptr_nonnull(g);
    mg_tensor x = mg_input(g, "x", dt, 2, (int64_t[]){B, IN});
    mg_tensor w0 = mg_param(g, "w0", dt, 2, (int64_t[]){IN, h});
    mg_tensor w1 = mg_param(g, "w1", dt, 2, (int64_t[]){h, h});
    mg_tensor w1b = mg_param(g, "w1b", dt, 2, (int64_t[]){h, h});
    mg_tensor w2 = mg_param(g, "w2", dt, 2, (int64_t[]){h, h});
    mg_tensor w3 = mg_param(g, "w3", dt, 2, (int64_t[]){h, OUT});
    mg_tensor cur = mg_relu(g, mg_matmul(g, x, w0, 0, 0));
    n->a[0] = cur;
    cur = mg_matmul(g, cur, d == EDGE ? w1b : w1, 0, d == ATTRIBUTE);
    cur = d == OP_KIND ? mg_tanh(g, cur) : mg_relu(g, cur);
    n->a[1] = cur;
    /* w1b is read on every rank, so that only the edge above differs */
    cur = mg_add(g, cur, mg_matmul(g, cur, d == EDGE ? w1 : w1b, 0, 0));
    cur = mg_relu(g, mg_matmul(g, cur, w2, 0, 0));
    n->a[2] = cur;
    cur = mg_relu(g, mg_matmul(g, cur, w3, 0, 0));
    n->a[3] = cur;
    n->loss = mg_sum(g, cur, 0, NULL, 0);
    if (d == EXTRA) ck_assert(mg_relu(g, x) != MG_NO_TENSOR);
    if (d == CKPT_TAG)
        ck_assert(mg_tensor_set_checkpoint(g, n->a[2], 1) == MG_OK);
    ck_assert_msg(n->loss != MG_NO_TENSOR, "%s", mg_last_error());
    n->g = g;
}

static mg_dist_comm *comm_world(void) {
    mg_dist_comm *c = NULL;
    mg_dist_options o = {.timeout_s = 60};
    ck_assert_msg(mg_dist_comm_from_mpi(MPI_COMM_WORLD, &o, &c) == MG_OK, "%s",
                  mg_last_error());
    return c;
}

/* mg_pipe_new with the last rank's arguments differing by d; returns its
 * status, the message in msg. */
static mg_status pipe_with(mg_dist_comm *c, diff d, char *msg, size_t len) {
    const diff mine = rank == size - 1 ? d : SAME;
    net n;
    net_make(&n, mine);
    const bool budget = d == BUDGET;
    mg_pipe_options o = {
        .schedule = mine == SCHEDULE ? MG_PIPE_GPIPE : MG_PIPE_1F1B,
        .n_micro = mine == N_MICRO ? 3 : 2,
        .checkpoints = {.policy = budget           ? MG_CKPT_BUDGET
                                  : mine == POLICY ? MG_CKPT_SPEED
                                                   : MG_CKPT_MEMORY,
                        .budget_bytes = !budget          ? 0
                                        : mine == BUDGET ? 2 << 20
                                                         : 1 << 20,
                        .compact = mine == CKPT_OPTS},
        /* a rank's own pool bound is no difference, not even under SAME:
         * stages differ in size, and ranks may in memory (test_pipeline
         * bounds each by its own peak) */
        .max_bytes = rank == size - 1 ? (size_t)1 << 30 : 0};
    /* stages: one per rank, cut at the activations in order; CUTS moves
     * the last cut one activation later (a[3] is there at 4 ranks too) */
    mg_tensor cuts[MAX_CUTS];
    for (int k = 0; k < size - 1; k++) cuts[k] = n.a[k];
    if (mine == CUTS) cuts[size - 2] = n.a[size - 1];
    mg_pipe *p = (mg_pipe *)&p;
    mg_status s = mg_pipe_new(c, n.g, n.loss, cuts, size - 1, &o, &p);
    snprintf(msg, len, "%s", s == MG_OK ? "" : mg_last_error());
    if (s == MG_OK) ck_assert_ptr_nonnull(p);
    else ck_assert_ptr_null(p);
    mg_pipe_free(p);
    mg_graph_free(n.g);
    return s;
}

/* The same arguments everywhere (the last rank's pool bound apart): a
 * pipeline. */
START_TEST(test_same_agrees) {
    mg_dist_comm *c = comm_world();
    char msg[1024];
    ck_assert_msg(pipe_with(c, SAME, msg, sizeof msg) == MG_OK, "rank %d: %s",
                  rank, msg);
    mg_dist_comm_free(c);
}
END_TEST

/* Each difference alone: refused on every rank, naming the last rank and
 * what differs, and nothing else; the communicator usable after. */
START_TEST(test_each_difference_named) {
    mg_dist_comm *c = comm_world();
    char msg[1024], who[64];
    snprintf(who, sizeof who, "rank %d was given other arguments", size - 1);
    for (int d = SAME + 1; d < N_DIFFS; d++) {
        mg_status s = pipe_with(c, (diff)d, msg, sizeof msg);
        ck_assert_msg(s == MG_ERR_INVALID_ARG,
                      "rank %d, diff %d: status %d: %s", rank, d, (int)s, msg);
        ck_assert_msg(strstr(msg, who) && strstr(msg, want[d]),
                      "rank %d, diff %d: '%s' lacks '%s' or '%s'", rank, d, msg,
                      who, want[d]);
        ck_assert_msg(!strstr(msg, "other tensors"), "rank %d: %s", rank, msg);
        if (d != EXTRA && d != CKPT_TAG) /* one part differs, one is named */
            for (size_t k = 0; k < sizeof parts / sizeof *parts; k++)
                ck_assert_msg(strstr(want[d], parts[k]) ||
                                  !strstr(msg, parts[k]),
                              "rank %d, diff %d names '%s' too: %s", rank, d,
                              parts[k], msg);
        ck_assert(!mg_dist_comm_broken(c));
    }
    /* and the communicator still makes a pipeline */
    ck_assert_msg(pipe_with(c, SAME, msg, sizeof msg) == MG_OK, "%s", msg);
    mg_dist_comm_free(c);
}
END_TEST

/* Two ranks that differ (at 3 or more ranks): the first is named, the
 * other counted. */
START_TEST(test_two_ranks_differ) {
    if (size < 3) return;
    mg_dist_comm *c = comm_world();
    net n;
    net_make(&n, rank == 0 ? SAME : OP_KIND);
    mg_tensor cuts[MAX_CUTS];
    for (int k = 0; k < size - 1; k++) cuts[k] = n.a[k];
    mg_pipe_options o = {.schedule = MG_PIPE_1F1B, .n_micro = 2};
    mg_pipe *p = NULL;
    ck_assert_int_eq(mg_pipe_new(c, n.g, n.loss, cuts, size - 1, &o, &p),
                     MG_ERR_INVALID_ARG);
    char more[64];
    snprintf(more, sizeof more, "rank 1 (and %d more rank", size - 2);
    ck_assert_msg(strstr(mg_last_error(), more) &&
                      strstr(mg_last_error(), "op kinds"),
                  "%s", mg_last_error());
    mg_graph_free(n.g);
    mg_dist_comm_free(c);
}
END_TEST

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Suite *su = suite_create("pipeline_agree");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_same_agrees);
    tcase_add_test(tc, test_each_difference_named);
    tcase_add_test(tc, test_two_ranks_differ);
    suite_add_tcase(su, tc);
    const int failed = mpi_run_suite(su, size, 2, 4,
                                     "test_pipeline_agree: needs 2 to 4 ranks");
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
