/*
 * mg_bench.c - mg-bench: memory and time of memgrad training steps against
 * depth, per checkpoint policy (issue 6), and the cost of differentiating,
 * rewriting and planning very large graphs.
 *
 *   mg-bench depth   --model M --depths 8,16,... --policy none,memory,...
 *   mg-bench rewrite --ops N[,N...] --shape chain,residual
 *   mg-bench step    one model, one policy, weights from a file, gradients
 *                    and measurements out (the memgrad side of
 *                    bench/compare_torch.py)
 *   mg-bench budget  policy budget at fractions of policy none's peak
 *   mg-bench live    what is live at a plan's predicted peak, and why
 *   mg-bench lce     a language model's head and loss, fused and chunked
 *                    (mg_linear_cross_entropy) against matmul + cross-entropy
 *
 * `mg-bench --help` gives every option with its default. Tables go to
 * stdout, progress to stderr; a bad argument prints the usage and exits 2.
 *
 * What a "training step" is here: one mg_exec_run of a plan whose outputs
 * are the loss and the gradient of every parameter, with the inputs, the
 * parameters, the gradient buffers and the loss bound as caller memory. No
 * optimizer update runs, so every step (and every policy) sees the same
 * weights. The pool's peak therefore counts activations, recomputed values
 * and temporaries only.
 *
 * This file holds main() and the dispatch to the commands; bench.h says
 * which file holds what.
 */
#include "bench.h"

#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) return bench_usage_error("no command given");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        bench_usage_print(stdout);
        return 0;
    }
    if (!strcmp(cmd, "depth")) return bench_cmd_depth(argc - 2, argv + 2);
    if (!strcmp(cmd, "rewrite")) return bench_cmd_rewrite(argc - 2, argv + 2);
    if (!strcmp(cmd, "step")) return bench_cmd_step(argc - 2, argv + 2);
    if (!strcmp(cmd, "observe")) return bench_cmd_observe(argc - 2, argv + 2);
    if (!strcmp(cmd, "budget")) return bench_cmd_budget(argc - 2, argv + 2);
    if (!strcmp(cmd, "attention"))
        return bench_cmd_attention(argc - 2, argv + 2);
    if (!strcmp(cmd, "live")) return bench_cmd_live(argc - 2, argv + 2);
    if (!strcmp(cmd, "lce")) return bench_cmd_lce(argc - 2, argv + 2);
    return bench_usage_error("unknown command '%s' (depth, rewrite, step, "
                             "observe, budget, attention, live, lce)",
                             cmd);
}
