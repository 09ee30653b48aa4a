/*
 * test_profiler.c - the profiler observer (memgrad_observe.h): it records
 * one event per step per run with the bytes the observers saw, its table
 * sums them by op kind and phase, and its Chrome trace parses as JSON
 * (tests/check_trace.py, json.load) with one complete event per step and a
 * pool-bytes counter track.
 */
#include "helpers.h"
#include "memgrad_observe.h"

/* tests/check_trace.py beside this file: __FILE__ is the absolute path
 * CMake compiles it by. */
static void check_trace_json(const char *path, int runs, int steps) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    ck_assert(slash);
    *slash = '\0';
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "python3 '%s/check_trace.py' '%s' %d %d", dir,
             path, runs, steps);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
}

START_TEST(test_profile_and_trace) {
    tm_mlp m;
    mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
    ck_assert(tm_mlp_build(&m, MG_F32, 10, 8, 16, 4, 5, 1, 0.0, &ck) == MG_OK);
    /* a name that needs escaping in JSON */
    ck_assert(mg_tensor_set_name(m.g, m.h[0], "h\"0\\") == MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 4, 1);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    mg_profiler *prof = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert(mg_profiler_new(&prof) == MG_OK);
    mg_observer o = mg_profiler_observer(prof);
    int id;
    ck_assert(mg_exec_observer_attach(ex, &o, &id) == MG_OK);
    int n = mg_plan_num_steps(p);
    for (int run = 1; run <= 2; run++) {
        ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 1) == MG_OK);
        ck_assert_int_eq(mg_profiler_num_events(prof), run * n);
    }

    /* the table: every phase, the heaviest op, totals */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    ck_assert(mg_profiler_print(prof, mem) == MG_OK);
    fclose(mem);
    ck_assert_msg(strstr(buf, "matmul") && strstr(buf, "recompute") &&
                      strstr(buf, "backward") && strstr(buf, "(all)"),
                  "%s", buf);
    char head[64];
    snprintf(head, sizeof head, "profile: %d steps over 2 runs", 2 * n);
    ck_assert_msg(strstr(buf, head), "%s", buf);
    free(buf);

    const char *path = "test_profiler_trace.json";
    FILE *f = fopen(path, "w");
    ck_assert(f);
    ck_assert(mg_profiler_write_trace(prof, f) == MG_OK);
    ck_assert(fclose(f) == 0);
    check_trace_json(path, 2, n);
    remove(path);

    /* reset forgets; detached, nothing more is recorded */
    mg_profiler_reset(prof);
    ck_assert_int_eq(mg_profiler_num_events(prof), 0);
    ck_assert(mg_exec_observer_detach(ex, id) == MG_OK);
    ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 1) == MG_OK);
    ck_assert_int_eq(mg_profiler_num_events(prof), 0);
    ck_assert(mg_profiler_print(NULL, stdout) == MG_ERR_INVALID_ARG);
    ck_assert(mg_profiler_new(NULL) == MG_ERR_INVALID_ARG);

    mg_profiler_free(prof);
    mg_profiler_free(NULL);
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

TH_MAIN("profiler", "profiler", 120, test_profile_and_trace)
