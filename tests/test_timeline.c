/*
 * test_timeline.c - the memory timeline (memgrad_observe.h): the measured
 * series of pool bytes in use, step by step, equals the predicted one for
 * an MLP and a ResNet under checkpoint policies, with gradients in the pool
 * or bound; its peak is mg_plan_predicted_peak; the CSV holds both series.
 */
#include "helpers.h"
#include "memgrad_models.h"
#include "memgrad_observe.h"

typedef struct measured {
    mg_step_info *info;
    int n, cap;
} measured;

static mg_status record(void *user, const mg_step_info *info) {
    measured *m = user;
    ck_assert_int_lt(m->n, m->cap);
    m->info[m->n++] = *info;
    return MG_OK;
}

/* Run p once with an observer; compare both series and write the CSV. */
static void check_plan(const mg_plan *p, const mg_binding *binds, int n_binds,
                       const char *what) {
    int n = mg_plan_num_steps(p);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(mg_plan_timeline(p, binds, n_binds, NULL, 0), n);
    mg_step_info *pred = calloc((size_t)n, sizeof *pred);
    measured m = {calloc((size_t)n, sizeof *m.info), 0, n};
    ck_assert_int_eq(mg_plan_timeline(p, binds, n_binds, pred, n), n);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_observer o = {.user = &m, .after_op = record};
    ck_assert(mg_exec_observer_attach(ex, &o, NULL) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, binds, n_binds, 1) == MG_OK, "%s: %s",
                  what, mg_last_error());
    ck_assert_int_eq(m.n, n);
    size_t peak = 0;
    int phases[3] = {0};
    for (int s = 0; s < n; s++) {
        ck_assert_int_eq(pred[s].step, s);
        ck_assert_int_eq(pred[s].tensor, m.info[s].tensor);
        ck_assert_int_eq(pred[s].phase, m.info[s].phase);
        ck_assert_msg(pred[s].bytes_before == m.info[s].bytes_before &&
                          pred[s].bytes_after == m.info[s].bytes_after,
                      "%s step %d: predicted %zu -> %zu, measured %zu -> %zu",
                      what, s, pred[s].bytes_before, pred[s].bytes_after,
                      m.info[s].bytes_before, m.info[s].bytes_after);
        if (pred[s].bytes_after + pred[s].workspace_bytes > peak)
            peak = pred[s].bytes_after + pred[s].workspace_bytes;
        phases[pred[s].phase]++;
    }
    ck_assert_uint_eq(peak, mg_plan_predicted_peak(p, binds, n_binds));
    ck_assert_int_gt(phases[MG_PHASE_RECOMPUTE], 0);

    /* CSV: header, one row per step, measured columns equal predicted */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(mg_plan_write_timeline(p, binds, n_binds, m.info, f) == MG_OK);
    fclose(f);
    int rows = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (rows++ == 0) {
            ck_assert(!strncmp(line, "step,phase,op,tensor,", 21));
            continue;
        }
        /* the last four fields */
        size_t v[4];
        char *end = line + strlen(line);
        for (int k = 3; k >= 0; k--) {
            char *comma = end;
            while (comma > line && comma[-1] != ',') comma--;
            v[k] = strtoull(comma, NULL, 10);
            end = comma - 1;
        }
        ck_assert_uint_eq(v[0], v[2]);
        ck_assert_uint_eq(v[1], v[3]);
        ck_assert_uint_eq(v[1], pred[rows - 2].bytes_after);
    }
    ck_assert_int_eq(rows, n + 1);
    free(buf);
    mg_exec_free(ex);
    free(pred);
    free(m.info);
}

START_TEST(test_mlp_measured_equals_predicted) {
    for (int bind_grads = 0; bind_grads <= 1; bind_grads++) {
        tm_mlp m;
        mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
        ck_assert(tm_mlp_build(&m, MG_F32, 12, 8, 24, 4, 6, 1, 0.1, &ck) ==
                  MG_OK);
        tm_mlp_data d;
        tm_mlp_data_init(&d, &m, 2, bind_grads);
        mg_plan *p = NULL;
        ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
        check_plan(p, d.binds, d.n_binds, bind_grads ? "mlp bound" : "mlp");
        /* without measurements the measured columns are empty */
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert(mg_plan_write_timeline(p, d.binds, d.n_binds, NULL, f) ==
                  MG_OK);
        fclose(f);
        ck_assert(strstr(buf, ",,\n"));
        free(buf);
        ck_assert_int_eq(mg_plan_timeline(NULL, NULL, 0, NULL, 0), -1);
        ck_assert_int_eq(mg_plan_timeline(p, NULL, -1, NULL, 0), -1);
        ck_assert_int_eq(mg_last_status(), MG_ERR_INVALID_ARG);
        mg_plan_free(p);
        tm_mlp_data_free(&d, &m);
        mg_graph_free(m.g);
    }
}
END_TEST

/* Convolutions borrow workspace; skip connections make the memory
 * policy cut the graph. */
START_TEST(test_resnet_measured_equals_predicted) {
    mg_model *mm = mg_model_resnet(2, 4, 2, 8, 3, MG_F32, 1);
    ck_assert(mm);
    mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
    ck_assert(mg_model_gradients(mm, &ck) == MG_OK);
    int n = mm->n_params;
    void **pd = calloc((size_t)n, sizeof *pd);
    mg_binding *b = calloc((size_t)n + 2, sizeof *b);
    for (int i = 0; i < n; i++) {
        pd[i] = malloc(mg_tensor_nbytes(mm->g, mm->params[i]));
        b[i] = (mg_binding){mm->params[i], pd[i]};
    }
    void *in = malloc(mg_tensor_nbytes(mm->g, mm->input));
    void *tg = malloc(mg_tensor_nbytes(mm->g, mm->target));
    ck_assert(mg_model_init_params(mm, 1, pd) == MG_OK);
    ck_assert(mg_model_init_data(mm, 1, in, tg) == MG_OK);
    b[n] = (mg_binding){mm->input, in};
    b[n + 1] = (mg_binding){mm->target, tg};
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    memcpy(outs, mm->grads, (size_t)n * sizeof *outs);
    outs[n] = mm->loss;
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(mm->g, outs, n + 1, NULL, &p) == MG_OK);
    check_plan(p, b, n + 2, "resnet");
    mg_plan_free(p);
    for (int i = 0; i < n; i++) free(pd[i]);
    free(pd);
    free(b);
    free(in);
    free(tg);
    free(outs);
    mg_model_free(mm);
}
END_TEST

TH_MAIN("timeline", "timeline", 120, test_mlp_measured_equals_predicted,
        test_resnet_measured_equals_predicted)
