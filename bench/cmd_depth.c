/*
 * cmd_depth.c - mg-bench depth: for each depth and checkpoint policy, the
 * pool peak and the median time of a training step, as a table on stdout
 * and optionally CSV rows (`mg-bench --help` has the options). With
 * --plan-only yes it only plans, and prints each case's predicted peak and
 * recomputed flops (the deterministic figures scripts/check-figures.sh
 * compares with committed results) as CSV rows, without running a step.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct depth_row {
    mg_ckpt_policy policy;
    int depth, refused;
    size_t peak, predicted, param_bytes, act_one_layer;
    double recompute_ratio, time_ms;
} depth_row;

static int plan_only; /* --plan-only yes */

static const char *csv_header =
    "model,policy,depth,batch,width,peak_bytes,predicted_peak_bytes,"
    "param_bytes,activation_bytes_one_layer,recompute_flops_ratio,"
    "time_ms_median,time_ratio_vs_none\n";

static void print_depth_rows(const common_opts *o, const depth_row *rows, int n,
                             FILE *csv) {
    const depth_row *none = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].policy == MG_CKPT_NONE && !rows[i].refused) none = &rows[i];
    for (int i = 0; i < n; i++) {
        const depth_row *r = &rows[i];
        if (r->refused) {
            printf("%-11s %-10s %6d  refused: predicted peak plus parameters, "
                   "gradients and inputs exceed --max-bytes %.0f MiB\n",
                   o->spec->name, mg_ckpt_policy_name(r->policy), r->depth,
                   bench_mib(o->max_bytes));
            continue;
        }
        double tr = none ? r->time_ms / none->time_ms : NAN;
        double pr = none ? (double)r->peak / (double)none->peak : NAN;
        printf("%-11s %-10s %6d %11.2f %11.2f %8.3f %9.3f %11.1f %8.3f %9.2f\n",
               o->spec->name, mg_ckpt_policy_name(r->policy), r->depth,
               bench_mib(r->peak), bench_mib(r->predicted), pr,
               r->recompute_ratio, r->time_ms, tr,
               (double)r->peak / (double)r->act_one_layer);
        if (csv) {
            fprintf(csv, "%s,%s,%d,%ld,%ld,%zu,%zu,%zu,%zu,%.6f,%.3f,",
                    o->spec->name, mg_ckpt_policy_name(r->policy), r->depth,
                    o->batch, o->width, r->peak, r->predicted, r->param_bytes,
                    r->act_one_layer, r->recompute_ratio, r->time_ms);
            if (none) fprintf(csv, "%.4f\n", tr);
            else fprintf(csv, "\n");
        }
    }
    fflush(stdout);
    if (csv) fflush(csv);
}

/* Every policy at one depth. The policies' steps are interleaved (step k
 * of each policy, then step k+1 of each), so that load from other
 * processes on a shared machine falls on all of them alike and the time
 * ratios stay meaningful; the cases then hold their pools at the same time.
 * If together they would pass --max-bytes, they run one after another. */
static int depth_one(const common_opts *o, int depth, const mg_ckpt_policy *pol,
                     int n_pol, FILE *csv) {
    bench_model_cfg cfg = bench_case_cfg(o, depth);
    bench_case cases[8];
    step_result res[8];
    depth_row rows[8];
    memset(cases, 0, sizeof cases);
    memset(res, 0, sizeof res);
    bench_memory mem = {0};
    int rc = 0, have_mem = 0, n_run = 0;
    size_t together = 0;
    char label[128];
    for (int p = 0; p < n_pol; p++) {
        bench_case *c = &cases[p];
        snprintf(label, sizeof label, "%s depth %d policy %s", o->spec->name,
                 depth, mg_ckpt_policy_name(pol[p]));
        fprintf(stderr, "[%s] building, differentiating, planning\n", label);
        const mg_checkpoints ck = {
            .policy = pol[p], .compact = o->compact, .store16 = o->store16};
        mg_status s = bench_case_prepare_ckpt(o->spec, &cfg, &ck, c);
        if (s != MG_OK) {
            rc = bench_fail(label, s);
            goto done;
        }
        rows[p] = (depth_row){.policy = pol[p],
                              .depth = depth,
                              .predicted = c->sum.predicted_peak,
                              .param_bytes = c->param_bytes,
                              .act_one_layer = c->act_one_layer,
                              .recompute_ratio = c->sum.forward_flops > 0
                                                     ? c->sum.recompute_flops /
                                                           c->sum.forward_flops
                                                     : 0};
        if (plan_only) {
            printf("%s,%s,%d,%ld,%ld,%zu,%.6f\n", o->spec->name,
                   mg_ckpt_policy_name(pol[p]), depth, o->batch, o->width,
                   rows[p].predicted, rows[p].recompute_ratio);
            bench_case_free(c);
            continue;
        }
        if (bench_case_need(c) > o->max_bytes) {
            char prefix[sizeof label + 2];
            snprintf(prefix, sizeof prefix, "[%s]", label);
            bench_case_refusal_print(prefix, c, o->max_bytes);
            rows[p].refused = 1;
            bench_case_free(c);
            continue;
        }
        if (!have_mem) {
            if (!bench_memory_alloc(c, &mem, NULL) ||
                !bench_memory_to_device(c, &mem, o->device)) {
                fprintf(stderr,
                        "mg-bench: %s: out of memory for the "
                        "parameters\n",
                        label);
                rc = 1;
                goto done;
            }
            have_mem = 1;
            together = 2 * c->param_bytes + c->input_bytes;
        }
        together += c->sum.predicted_peak;
        n_run++;
    }
    if (plan_only) goto done;
    int interleave = together <= o->max_bytes;
    if (!interleave && n_run > 1)
        fprintf(stderr,
                "[depth %d] the policies' pools together would pass "
                "--max-bytes; running them one after another\n",
                depth);
    /* Interleaved: one round of warm-ups, then rounds of timed steps.
     * Otherwise each case runs all its steps and frees its pool. */
    int n_groups = interleave ? 1 : n_pol;
    for (int grp = 0; grp < n_groups; grp++) {
        int lo = interleave ? 0 : grp, hi = interleave ? n_pol : grp + 1;
        for (int k = -1; k < (int)o->repeat; k++)
            for (int p = lo; p < hi; p++) {
                bench_case *c = &cases[p];
                if (rows[p].refused) continue;
                snprintf(label, sizeof label, "%s depth %d policy %s",
                         o->spec->name, depth, mg_ckpt_policy_name(pol[p]));
                mg_status s;
                if (k < 0) {
                    fprintf(stderr, "[%s] warm-up step\n", label);
                    s = bench_case_warm_up(c, &mem, (int)o->repeat, &res[p]);
                } else {
                    fprintf(stderr, "[%s] step %d/%ld\n", label, k + 1,
                            o->repeat);
                    s = bench_case_timed_step(c, k, &res[p]);
                }
                if (s != MG_OK) {
                    rc = bench_fail(label, s);
                    goto done;
                }
            }
        for (int p = lo; p < hi; p++) {
            bench_case *c = &cases[p];
            if (rows[p].refused) continue;
            step_result *r = &res[p];
            snprintf(label, sizeof label, "%s depth %d policy %s",
                     o->spec->name, depth, mg_ckpt_policy_name(pol[p]));
            r->time_ms_median = bench_median(r->times, (int)o->repeat);
            rows[p].peak = r->peak_bytes;
            rows[p].time_ms = r->time_ms_median;
            if (r->peak_bytes != c->sum.predicted_peak)
                fprintf(stderr,
                        "[%s] measured peak %zu bytes != predicted "
                        "%zu\n",
                        label, r->peak_bytes, c->sum.predicted_peak);
            if (!isfinite(r->loss))
                fprintf(stderr, "[%s] loss is %g\n", label, (double)r->loss);
            fprintf(stderr, "[%s] median %.1f ms, peak %.2f MiB, loss %.4f\n",
                    label, r->time_ms_median, bench_mib(r->peak_bytes),
                    (double)r->loss);
            if (r->event_times)
                fprintf(stderr, "[%s] median by CUDA events %.2f ms\n", label,
                        bench_median(r->event_times, (int)o->repeat));
            mg_exec_free(c->ex); /* its pool goes back now */
            c->ex = NULL;
        }
    }
    print_depth_rows(o, rows, n_pol, csv);
done:
    for (int p = 0; p < n_pol; p++) {
        bench_case_free(&cases[p]);
        free(res[p].times);
        free(res[p].event_times);
    }
    bench_memory_free(&mem);
    return rc;
}

int bench_cmd_depth(int argc, char **argv) {
    const char *depths_s = "8,16,32,64,128,256,512,1024",
               *policy_s = "none,memory,speed";
    common_opts o = {.batch = 0, .width = 0, .repeat = 5, .model = "mlp"};
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, &o, &a, &v);
        if (r == BENCH_OPT_DONE) continue;
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--depths")) depths_s = v;
        else if (!strcmp(a, "--policy")) policy_s = v;
        else if (!strcmp(a, "--csv")) o.csv = v;
        else if (!strcmp(a, "--plan-only")) {
            if (bench_yes_no_parse(a, v, &plan_only)) return 2;
        } else return bench_usage_error("unknown option '%s' for depth", a);
    }
    int rc = bench_case_setup(o.model, &o);
    if (rc) return rc;
    long depths[BENCH_MAX_LIST];
    mg_ckpt_policy pol[8];
    int n_depths =
        bench_int_list_parse(depths_s, 1, 1L << 20, depths, BENCH_MAX_LIST);
    if (n_depths < 1) return bench_usage_error("bad --depths '%s'", depths_s);
    int n_pol = bench_policy_list_parse(policy_s, pol, 8);
    if (n_pol < 1)
        return bench_usage_error("bad --policy '%s' (none, memory, speed, "
                                 "collection)",
                                 policy_s);

    if (plan_only) {
        printf("model,policy,depth,batch,width,predicted_peak_bytes,"
               "recompute_flops_ratio\n");
        for (int d = 0; d < n_depths && !rc; d++)
            rc = depth_one(&o, (int)depths[d], pol, n_pol, NULL);
        return rc;
    }
    FILE *csv = NULL;
    if (o.csv) {
        if (!(csv = fopen(o.csv, "w"))) {
            fprintf(stderr, "mg-bench: cannot write %s: %s\n", o.csv,
                    strerror(errno));
            return 1;
        }
        fputs(csv_header, csv);
    }
    fprintf(stderr,
            "mg-bench depth: model %s, batch %ld, width %ld, %ld "
            "timed steps per case, device %s, --max-bytes %.0f MiB\n",
            o.spec->name, o.batch, o.width, o.repeat,
            bench_device_str(o.device), bench_mib(o.max_bytes));
    char blas[128];
    bench_blas_info(blas, sizeof blas);
    printf("# %s\n", blas);
    if (o.device != MG_DEVICE_CPU) {
        char gpu[256];
        bench_device_info(gpu, sizeof gpu);
        printf("# device %s: %s (TF32 off)\n", bench_device_str(o.device), gpu);
    }
    printf("# model %s, batch %ld, width %ld, f32, device %s; peak = pool "
           "peak in one training step (parameters and gradients are caller "
           "memory)\n",
           o.spec->name, o.batch, o.width, bench_device_str(o.device));
    printf("%-11s %-10s %6s %11s %11s %8s %9s %11s %8s %9s\n", "model",
           "policy", "depth", "peak_MiB", "pred_MiB", "peak/no", "recompute",
           "time_ms", "time/no", "peak/layer");
    for (int d = 0; d < n_depths && !rc; d++)
        rc = depth_one(&o, (int)depths[d], pol, n_pol, csv);
    bench_device_timer_free();
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "mg-bench: error writing %s\n", o.csv);
        rc = 1;
    }
    return rc;
}
