/*
 * test_chain_dp.c - the dynamic program of Revolve and Rotor
 * (src/rewrite/chain_dp.c): on homogeneous chains its count of forward
 * steps equals Revolve's closed form t = r*l - beta(s+1, r-1) for s
 * snapshots (state 0's included), through both the homogeneous and the
 * general table; on short heterogeneous chains no schedule found by
 * exhaustive search over Revolve's actions does better; the rewriter's
 * schedules stay within their slots and cost what replaying them costs,
 * with per-step tapes too (each step's reversal then fits beside the
 * snapshots held), and tapes of 0 change nothing.
 */
#include "helpers.h"

#include "rewrite/rewrite.h"

/* beta(s, r) = C(s + r, s); 0 for r < 0. Doubles: the values compared
 * stay far below 2^53. */
static double beta(int s, int r) {
    if (r < 0) return 0;
    double b = 1;
    for (int i = 1; i <= s; i++) b = b * (r + i) / i;
    return b;
}

static double revolve_closed(int l, int s) {
    int r = 0;
    while (beta(s, r) < l) r++;
    return (double)r * l - beta(s + 1, r - 1);
}

static double dp_steps(int l, int s, bool general) {
    double *f = malloc((size_t)l * sizeof *f);
    int32_t *w = malloc((size_t)(l + 1) * sizeof *w);
    for (int i = 0; i < l; i++) f[i] = 1;
    for (int i = 0; i <= l; i++) w[i] = 1;
    mg_chain_dp c = {l, f, w, s - 1, NULL, NULL};
    double steps = -1;
    ck_assert_msg(mgi_chain_revolve(&c, general, &steps) == MG_OK, "%s",
                  mg_last_error());
    free(f);
    free(w);
    return steps;
}

START_TEST(test_revolve_table) {
    static const int ss[] = {1, 2, 3, 5, 10};
    for (size_t k = 0; k < sizeof ss / sizeof *ss; k++) {
        const int s = ss[k];
        for (int l = 1; l <= 1000; l += (l < 64 ? 1 : l < 200 ? 7 : 37)) {
            double want = revolve_closed(l, s), got = dp_steps(l, s, false);
            ck_assert_msg(got == want, "l %d s %d: DP %.0f, Revolve %.0f", l, s,
                          got, want);
        }
        ck_assert(dp_steps(1000, s, false) == revolve_closed(1000, s));
    }
}
END_TEST

/* The general (heterogeneous) table agrees on homogeneous chains. */
START_TEST(test_revolve_general_table) {
    static const int ss[] = {1, 2, 3, 5, 10};
    for (size_t k = 0; k < sizeof ss / sizeof *ss; k++)
        for (int l = 1; l <= 48; l++) {
            double want = revolve_closed(l, ss[k]),
                   got = dp_steps(l, ss[k], true);
            ck_assert_msg(got == want, "l %d s %d: DP %.0f, Revolve %.0f", l,
                          ss[k], got, want);
        }
}
END_TEST

/* Replay a schedule as the rewriter runs it: steps reversed last first;
 * snapshots not valid for the previous step are recomputed from the
 * nearest valid state before them, then the step itself from the top of
 * its stack (or the nearest kept state). Returns the cost; fails when the
 * slots in use (kept states before the step, and its snapshots) exceed
 * c->slots. */
static double replay(const mg_chain_dp *c, const mg_chain_sched *q) {
    const int l = c->l;
    double *P = malloc((size_t)(l + 1) * sizeof *P);
    P[0] = 0;
    for (int i = 0; i < l; i++) P[i + 1] = P[i] + c->f[i];
    ck_assert(q->kept[0]);
    bool *valid = calloc((size_t)(l + 1), 1);
    double cost = 0;
    for (int i = l; i >= 1; i--) {
        const int32_t *sn = q->snap + q->snap_start[i - 1];
        int n = q->snap_start[i] - q->snap_start[i - 1];
        bool *now = calloc((size_t)(l + 1), 1);
        int used = 0; /* kept states still read: those before step i */
        for (int k = 1; k < i; k++)
            if (q->kept[k]) used += c->w[k];
        int base = 0; /* nearest kept or snapshot state so far */
        for (int k = 0; k < n; k++) {
            ck_assert(sn[k] > 0 && sn[k] < i);
            if (k) ck_assert(sn[k] > sn[k - 1]);
            int from = 0;
            for (int a = sn[k] - 1; a >= 0 && !from; a--)
                if (q->kept[a] || now[a]) from = a;
            if (!valid[sn[k]]) cost += P[sn[k]] - P[from];
            now[sn[k]] = true;
            used += c->w[sn[k]];
            base = sn[k];
        }
        for (int a = i - 1; a > base; a--)
            if (q->kept[a]) {
                base = a;
                break;
            }
        const int tape = c->tape ? c->tape[i - 1] : 0;
        ck_assert_msg(used + tape <= c->slots,
                      "step %d: %d slots and a tape of %d, of %d", i, used,
                      tape, c->slots);
        cost += P[i] - P[base];
        free(valid);
        valid = now;
    }
    free(valid);
    free(P);
    return cost;
}

/* Heterogeneous chains: the schedule's stated cost is what replaying it
 * costs, within the slots, and more slots never cost more. */
START_TEST(test_schedule_replay) {
    th_rng r;
    th_rng_init(&r, 5);
    for (int trial = 0; trial < 40; trial++) {
        int l = 2 + (int)(th_rng_next(&r) % 40);
        double *f = malloc((size_t)l * sizeof *f);
        int32_t *w = malloc((size_t)(l + 1) * sizeof *w);
        for (int i = 0; i < l; i++) f[i] = 1 + (double)(th_rng_next(&r) % 9);
        for (int i = 0; i <= l; i++) w[i] = 1 + (int32_t)(th_rng_next(&r) % 3);
        int32_t *tape = malloc((size_t)l * sizeof *tape);
        int32_t *zero = calloc((size_t)l, sizeof *zero);
        int32_t max_tape = 0;
        for (int i = 0; i < l; i++) {
            tape[i] = (int32_t)(th_rng_next(&r) % 5);
            if (tape[i] > max_tape) max_tape = tape[i];
        }
        double prev = INFINITY, prev_t = INFINITY;
        for (int slots = 0; slots <= 12; slots++) {
            mg_chain_dp c = {l, f, w, slots, NULL, NULL};
            mg_chain_sched q;
            ck_assert(mgi_chain_schedule(&c, &q) == MG_OK);
            double got = replay(&c, &q);
            ck_assert_msg(got == q.cost, "l %d slots %d: replay %.0f, DP %.0f",
                          l, slots, got, q.cost);
            ck_assert(q.cost <= prev);
            prev = q.cost;
            /* tapes of 0 are no tapes */
            mg_chain_dp z = {l, f, w, slots, zero, NULL};
            mg_chain_sched qz;
            ck_assert(mgi_chain_schedule(&z, &qz) == MG_OK);
            ck_assert(qz.cost == q.cost);
            ck_assert(
                !memcmp(qz.kept, q.kept, (size_t)(l + 1) * sizeof *q.kept));
            mgi_chain_sched_free(&qz);
            mgi_chain_sched_free(&q);
            if (slots < max_tape) {
                mg_chain_dp bad = {l, f, w, slots, tape, NULL};
                ck_assert_int_eq(mgi_chain_schedule(&bad, &q),
                                 MG_ERR_INVALID_ARG);
                continue;
            }
            /* tapes: within the slots, as replayed; never cheaper than
             * without them; more slots never cost more */
            mg_chain_dp t = {l, f, w, slots, tape, NULL};
            ck_assert(mgi_chain_schedule(&t, &q) == MG_OK);
            got = replay(&t, &q);
            ck_assert_msg(got == q.cost,
                          "l %d slots %d tapes: replay %.0f, DP %.0f", l, slots,
                          got, q.cost);
            ck_assert(q.cost >= prev);
            ck_assert(q.cost <= prev_t);
            prev_t = q.cost;
            mgi_chain_sched_free(&q);
        }
        free(f);
        free(w);
        free(tape);
        free(zero);
    }
}
END_TEST

/* Every schedule of Revolve's action model on a short heterogeneous chain,
 * by shortest path: the working state p, the stored snapshots (a bit per
 * state 1..l-1; state 0 is always stored, outside the slots) and the next
 * step to reverse r. Actions: advance p to p + 1 (costs f[p]); store p
 * (if its slots fit); free a snapshot; restore p from a stored state (no
 * cost); reverse step r when p = r - 1 (the working state is then spent).
 * The cheapest way to reverse every step is Revolve's count. */
#define BF_L 6
static double brute_force(const mg_chain_dp *c) {
    const int l = c->l, nsnap = 1 << (l - 1);
    const int V = (l + 2) * nsnap * (l + 1);
    double *dist = malloc((size_t)V * sizeof *dist);
    bool *done = calloc((size_t)V, 1);
    /* p == l + 1: no working state (after a reversal) */
#define BF_IX(p, m, r) ((((p)*nsnap) + (m)) * (l + 1) + (r))
    for (int i = 0; i < V; i++) dist[i] = INFINITY;
    dist[BF_IX(0, 0, l)] = 0;
    double answer = INFINITY;
    for (;;) {
        int u = -1;
        for (int i = 0; i < V; i++)
            if (!done[i] && isfinite(dist[i]) && (u < 0 || dist[i] < dist[u]))
                u = i;
        if (u < 0) break;
        done[u] = true;
        const double d = dist[u];
        const int r = u % (l + 1), m = (u / (l + 1)) % nsnap,
                  p = u / (l + 1) / nsnap;
        if (r == 0) {
            answer = d;
            break;
        }
        int used = 0;
        for (int q = 1; q < l; q++)
            if (m & (1 << (q - 1))) used += c->w[q];
#define BF_RELAX(p2, m2, r2, cost)                                             \
    do {                                                                       \
        int v_ = BF_IX(p2, m2, r2);                                            \
        if (d + (cost) < dist[v_]) dist[v_] = d + (cost);                      \
    } while (0)
        if (p <= l) {
            if (p + 1 <= r - 1) BF_RELAX(p + 1, m, r, c->f[p]);
            if (p >= 1 && p < l && !(m & (1 << (p - 1))) &&
                used + c->w[p] <= c->slots)
                BF_RELAX(p, m | (1 << (p - 1)), r, 0);
            if (p == r - 1) BF_RELAX(l + 1, m, r - 1, 0);
        }
        for (int q = 1; q < l; q++)
            if (m & (1 << (q - 1))) {
                BF_RELAX(p, m & ~(1 << (q - 1)), r, 0);
                if (q < r) BF_RELAX(q, m, r, 0);
            }
        BF_RELAX(0, m, r, 0);
#undef BF_RELAX
    }
#undef BF_IX
    free(dist);
    free(done);
    return answer;
}

/* On random heterogeneous chains of up to BF_L steps, no schedule of the
 * action model reverses the chain with fewer forward steps than the DP. */
START_TEST(test_dp_vs_brute_force) {
    th_rng r;
    th_rng_init(&r, 17);
    for (int trial = 0; trial < 24; trial++) {
        int l = 2 + (int)(th_rng_next(&r) % (BF_L - 1));
        double f[BF_L];
        int32_t w[BF_L + 1];
        for (int i = 0; i < l; i++) f[i] = 1 + (double)(th_rng_next(&r) % 9);
        for (int i = 0; i <= l; i++) w[i] = 1 + (int32_t)(th_rng_next(&r) % 3);
        for (int slots = 0; slots <= 5; slots++) {
            mg_chain_dp c = {l, f, w, slots, NULL, NULL};
            double dp = -1;
            ck_assert(mgi_chain_revolve(&c, true, &dp) == MG_OK);
            double bf = brute_force(&c);
            ck_assert_msg(dp == bf,
                          "trial %d, l %d, slots %d: DP %.0f, exhaustive %.0f",
                          trial, l, slots, dp, bf);
        }
    }
}
END_TEST

START_TEST(test_bad_chain) {
    mg_chain_dp c = {0, NULL, NULL, 1, NULL, NULL};
    double st;
    ck_assert_int_eq(mgi_chain_revolve(&c, false, &st), MG_ERR_INVALID_ARG);
    double f[3] = {1, 1, 1};
    int32_t w[4] = {1, 0, 1, 1};
    mg_chain_dp d = {3, f, w, 2, NULL, NULL};
    mg_chain_sched q;
    ck_assert_int_eq(mgi_chain_schedule(&d, &q), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "state 1"));
}
END_TEST

TH_MAIN("chain_dp", "chain_dp", 300, test_revolve_table,
        test_revolve_general_table, test_schedule_replay,
        test_dp_vs_brute_force, test_bad_chain)
