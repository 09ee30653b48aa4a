/*
 * test_observe.c - observers on the executor (memgrad_observe.h): callbacks
 * come in order and in the right number, steps are labelled with the right
 * phase (recompute appears only under a checkpoint policy), bytes in use
 * agree with the pool and the plan's prediction, detaching works, and an
 * observer's error stops the run with nothing leaked.
 */
#include "helpers.h"
#include "memgrad_observe.h"

#define MAX_EV 4096

typedef struct ev {
    char kind; /* 's' run start, 'b' before, 'a' after, 'e' run end */
    mg_step_info info;
    mg_status status;
} ev;

typedef struct rec {
    ev ev[MAX_EV];
    int n;
    /* stop with fail_status at this event kind and step (-1: never) */
    char fail_kind;
    int fail_step;
    mg_status fail_status;
} rec;

static mg_status push(rec *r, char kind, const mg_step_info *info,
                      mg_status st) {
    ck_assert_int_lt(r->n, MAX_EV);
    ev *e = &r->ev[r->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    if (info) e->info = *info;
    e->status = st;
    if (r->fail_kind == kind && (!info || info->step == r->fail_step))
        return mg_set_error(r->fail_status, "test observer says no");
    return MG_OK;
}

static mg_status on_start(void *u, const mg_plan *p) {
    (void)p;
    return push(u, 's', NULL, MG_OK);
}
static mg_status on_end(void *u, const mg_plan *p, mg_status s) {
    (void)p;
    return push(u, 'e', NULL, s);
}
static mg_status on_before(void *u, const mg_step_info *i) {
    return push(u, 'b', i, MG_OK);
}
static mg_status on_after(void *u, const mg_step_info *i) {
    return push(u, 'a', i, MG_OK);
}

static mg_observer observer_of(rec *r) {
    memset(r, 0, sizeof *r);
    r->fail_step = -1;
    return (mg_observer){.user = r,
                         .run_start = on_start,
                         .run_end = on_end,
                         .before_op = on_before,
                         .after_op = on_after};
}

typedef struct fixture {
    tm_mlp m;
    tm_mlp_data d;
    mg_plan *p;
    mg_exec *ex;
} fixture;

static void setup(fixture *f, int depth, const mg_checkpoints *ck) {
    ck_assert(tm_mlp_build(&f->m, MG_F32, depth, 12, 24, 4, 6, 1, 0.0, ck) ==
              MG_OK);
    tm_mlp_data_init(&f->d, &f->m, 3, 0);
    ck_assert(mg_plan_compile(f->m.g, f->d.outs, f->d.n_outs, NULL, &f->p) ==
              MG_OK);
    ck_assert(mg_exec_new(NULL, &f->ex) == MG_OK);
}

static void teardown(fixture *f) {
    mg_exec_free(f->ex);
    mg_plan_free(f->p);
    tm_mlp_data_free(&f->d, &f->m);
    mg_graph_free(f->m.g);
}

/* One run start, a before and an after per step in plan order, one run
 * end; each step described as the graph describes its tensor; bytes agree
 * with the pool and the prediction. */
START_TEST(test_order_and_counts) {
    fixture f;
    setup(&f, 4, NULL);
    static rec r;
    mg_observer o = observer_of(&r);
    int id = -1;
    ck_assert(mg_exec_observer_attach(f.ex, &o, &id) == MG_OK);
    for (int run = 0; run < 2; run++) {
        r.n = 0;
        ck_assert_msg(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) ==
                          MG_OK,
                      "%s", mg_last_error());
        int n = mg_plan_num_steps(f.p);
        ck_assert_int_eq(r.n, 2 * n + 2);
        ck_assert_int_eq(r.ev[0].kind, 's');
        ck_assert_int_eq(r.ev[r.n - 1].kind, 'e');
        ck_assert_int_eq(r.ev[r.n - 1].status, MG_OK);
        size_t peak = 0, prev_after = 0;
        for (int s = 0; s < n; s++) {
            const ev *b = &r.ev[1 + 2 * s], *a = &r.ev[2 + 2 * s];
            ck_assert_int_eq(b->kind, 'b');
            ck_assert_int_eq(a->kind, 'a');
            ck_assert_int_eq(b->info.step, s);
            ck_assert_int_eq(a->info.step, s);
            ck_assert_int_eq(a->info.n_steps, n);
            ck_assert_int_eq(b->info.tensor, a->info.tensor);
            ck_assert_str_eq(a->info.op,
                             mg_tensor_op_name(f.m.g, a->info.tensor));
            const char *name = mg_tensor_name(f.m.g, a->info.tensor);
            ck_assert(name == a->info.tensor_name ||
                      (name && a->info.tensor_name &&
                       !strcmp(name, a->info.tensor_name)));
            ck_assert_uint_eq(b->info.bytes_before, a->info.bytes_before);
            ck_assert_uint_eq(b->info.bytes_after, 0);
            /* the output is allocated (outputs bound here: only the loss) */
            size_t out =
                mg_pool_size_class(mg_tensor_nbytes(f.m.g, a->info.tensor));
            if (a->info.tensor != f.m.loss)
                ck_assert_uint_eq(a->info.bytes_after,
                                  a->info.bytes_before + out);
            /* releases after step s - 1 show before step s */
            ck_assert_uint_le(a->info.bytes_before, s ? prev_after : (size_t)0);
            prev_after = a->info.bytes_after;
            if (a->info.bytes_after + a->info.workspace_bytes > peak)
                peak = a->info.bytes_after + a->info.workspace_bytes;
        }
        /* outputs stay in the pool after the run; the last step's
         * releases come after its callback */
        ck_assert_uint_ge(prev_after, th_pool_stats(f.ex).bytes_in_use);
        ck_assert_uint_gt(th_pool_stats(f.ex).bytes_in_use, 0);
        ck_assert_uint_eq(peak,
                          mg_plan_predicted_peak(f.p, f.d.binds, f.d.n_binds));
    }
    /* an observer with no callbacks at all is fine */
    mg_observer none = {0};
    ck_assert(mg_exec_observer_attach(f.ex, &none, NULL) == MG_OK);
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    teardown(&f);
}
END_TEST

/* Phases follow the graph: forward ops, recomputed copies, backward ops,
 * counted as mg_plan_summarize counts them; plain backprop recomputes
 * nothing, the memory policy does. */
START_TEST(test_phases) {
    for (int policy = 0; policy < 2; policy++) {
        mg_checkpoints ck = {.policy = policy ? MG_CKPT_MEMORY : MG_CKPT_NONE};
        fixture f;
        setup(&f, 16, &ck);
        static rec r;
        mg_observer o = observer_of(&r);
        ck_assert(mg_exec_observer_attach(f.ex, &o, NULL) == MG_OK);
        ck_assert_msg(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) ==
                          MG_OK,
                      "%s", mg_last_error());
        int count[3] = {0}, ckpts = 0;
        bool seen_backward = false;
        for (int i = 0; i < r.n; i++) {
            if (r.ev[i].kind != 'a') continue;
            const mg_step_info *s = &r.ev[i].info;
            mg_tensor t = s->tensor;
            switch (s->phase) {
            case MG_PHASE_FORWARD:
                ck_assert(!mg_tensor_is_backward(f.m.g, t));
                ck_assert(!seen_backward); /* no forward op after backward */
                break;
            case MG_PHASE_RECOMPUTE:
                ck_assert(mg_tensor_is_recompute(f.m.g, t));
                ck_assert(seen_backward); /* just before the ops needing it */
                break;
            case MG_PHASE_BACKWARD:
                ck_assert(mg_tensor_is_backward(f.m.g, t));
                ck_assert(!mg_tensor_is_recompute(f.m.g, t));
                seen_backward = true;
                break;
            default: ck_abort_msg("phase %d", (int)s->phase);
            }
            ck_assert_int_eq(s->is_checkpoint,
                             mg_tensor_is_checkpoint(f.m.g, t) != 0);
            ckpts += s->is_checkpoint;
            count[s->phase]++;
        }
        mg_plan_summary sum;
        ck_assert(mg_plan_summarize(f.p, f.d.binds, f.d.n_binds, &sum) ==
                  MG_OK);
        ck_assert_int_eq(count[MG_PHASE_FORWARD], sum.n_forward);
        ck_assert_int_eq(count[MG_PHASE_RECOMPUTE], sum.n_recompute);
        ck_assert_int_eq(count[MG_PHASE_BACKWARD], sum.n_backward);
        ck_assert_int_eq(ckpts, sum.n_checkpoints);
        if (policy) {
            ck_assert_int_gt(count[MG_PHASE_RECOMPUTE], 0);
            ck_assert_int_gt(ckpts, 0);
        } else {
            ck_assert_int_eq(count[MG_PHASE_RECOMPUTE], 0);
        }
        ck_assert_str_eq(mg_phase_name(MG_PHASE_RECOMPUTE), "recompute");
        teardown(&f);
    }
}
END_TEST

/* From inside a callback, attaching or detaching on the same executor is
 * refused (the run's list must not change under it). */
static mg_status meddle(void *user, const mg_plan *p) {
    (void)p;
    mg_exec *ex = user;
    mg_observer o = {0};
    ck_assert(mg_exec_observer_attach(ex, &o, NULL) == MG_ERR_INVALID_ARG);
    ck_assert(mg_exec_observer_detach(ex, 0) == MG_ERR_INVALID_ARG);
    return MG_OK;
}

/* Two observers are called in the order attached; a detached one is no
 * longer called; a handle detaches once. */
START_TEST(test_detach) {
    fixture f;
    setup(&f, 2, NULL);
    static rec r1, r2;
    mg_observer o1 = observer_of(&r1), o2 = observer_of(&r2);
    int id1 = -1, id2 = -1;
    ck_assert(mg_exec_observer_attach(f.ex, &o1, &id1) == MG_OK);
    ck_assert(mg_exec_observer_attach(f.ex, &o2, &id2) == MG_OK);
    ck_assert_int_ne(id1, id2);
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    int n = 2 * mg_plan_num_steps(f.p) + 2;
    ck_assert_int_eq(r1.n, n);
    ck_assert_int_eq(r2.n, n);
    ck_assert(mg_exec_observer_detach(f.ex, id1) == MG_OK);
    ck_assert(mg_exec_observer_detach(f.ex, id1) == MG_ERR_UNKNOWN_ID);
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    ck_assert_int_eq(r1.n, n);
    ck_assert_int_eq(r2.n, 2 * n);
    ck_assert(mg_exec_observer_detach(f.ex, id2) == MG_OK);
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    ck_assert_int_eq(r2.n, 2 * n);
    ck_assert(mg_exec_observer_attach(NULL, &o1, NULL) == MG_ERR_INVALID_ARG);
    ck_assert(mg_exec_observer_attach(f.ex, NULL, NULL) == MG_ERR_INVALID_ARG);
    ck_assert(mg_exec_observer_detach(NULL, 0) == MG_ERR_INVALID_ARG);
    mg_observer m = {.user = f.ex, .run_start = meddle, .run_end = NULL};
    int idm;
    ck_assert(mg_exec_observer_attach(f.ex, &m, &idm) == MG_OK);
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    /* and allowed again once the run is over */
    ck_assert(mg_exec_observer_detach(f.ex, idm) == MG_OK);
    teardown(&f);
}
END_TEST

/* An error from any callback stops the run with that status and a message
 * naming the place; no pool block stays in use, a bound output is untouched
 * or final, later observers of that event are not called, run_end hears of
 * the failure, and the executor runs again. */
START_TEST(test_error_stops_run) {
    fixture f;
    setup(&f, 3, NULL);
    int n = mg_plan_num_steps(f.p);
    const float sentinel = -12345.0f;
    float final_loss;
    ck_assert(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) == MG_OK);
    memcpy(&final_loss, &f.d.loss, sizeof final_loss);
    const struct {
        char kind;
        int step;
    } cases[] = {{'s', -1}, {'b', 0},     {'a', 0},
                 {'b', 4},  {'a', n - 1}, {'e', -1}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        static rec r, later;
        mg_observer o = observer_of(&r), o2 = observer_of(&later);
        r.fail_kind = cases[c].kind;
        r.fail_step = cases[c].step;
        r.fail_status = MG_ERR_INVALID_ARG;
        int id = -1, id2 = -1;
        ck_assert(mg_exec_observer_attach(f.ex, &o, &id) == MG_OK);
        ck_assert(mg_exec_observer_attach(f.ex, &o2, &id2) == MG_OK);
        memcpy(&f.d.loss, &sentinel, sizeof sentinel);
        mg_status s = mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1);
        ck_assert_int_eq(s, MG_ERR_INVALID_ARG);
        ck_assert_msg(strstr(mg_last_error(), "observer") &&
                          strstr(mg_last_error(), "test observer says no"),
                      "%s", mg_last_error());
        ck_assert_uint_eq(th_pool_stats(f.ex).bytes_in_use, 0);
        /* the loss (bound, float) is its sentinel or its final value */
        float loss_now;
        memcpy(&loss_now, &f.d.loss, sizeof loss_now);
        ck_assert(loss_now == sentinel || loss_now == final_loss);
        /* run_end heard of it, with the status */
        ck_assert_int_eq(r.ev[r.n - 1].kind, 'e');
        ck_assert_int_eq(later.ev[later.n - 1].kind, 'e');
        ck_assert_int_eq(later.ev[later.n - 1].status, MG_ERR_INVALID_ARG);
        if (cases[c].kind != 'e') {
            ck_assert_int_eq(r.ev[r.n - 1].status, MG_ERR_INVALID_ARG);
            /* the second observer missed the failing event: one fewer */
            ck_assert_int_eq(later.n, r.n - 1);
        }
        if (cases[c].kind == 's' || cases[c].kind == 'b')
            ck_assert_int_eq(r.n,
                             cases[c].kind == 's' ? 2 : 2 * cases[c].step + 3);
        /* nothing kept from a failed run */
        const void *data;
        ck_assert(mg_exec_tensor_data(f.ex, f.m.gw[0], &data) ==
                  MG_ERR_UNKNOWN_ID);
        ck_assert(mg_exec_observer_detach(f.ex, id) == MG_OK);
        ck_assert(mg_exec_observer_detach(f.ex, id2) == MG_OK);
        ck_assert_msg(mg_exec_run(f.ex, f.p, f.d.binds, f.d.n_binds, 1) ==
                          MG_OK,
                      "%s", mg_last_error());
        ck_assert(mg_exec_tensor_data(f.ex, f.m.gw[0], &data) == MG_OK);
    }
    teardown(&f);
}
END_TEST

TH_MAIN("observe", "observers", 120, test_order_and_counts, test_phases,
        test_detach, test_error_stops_run)
