/*
 * profiler.c - the profiler (memgrad_observe.h), built only from the
 * observer callbacks: it times each step between before_op and after_op,
 * keeps one record per step, and turns the records into a table by op kind
 * and phase or into a Chrome trace with a pool-bytes counter track.
 */
#include "memgrad_observe.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct prof_event {
    int run, step;
    const char *op; /* the op table's static name */
    mg_tensor tensor;
    char *name; /* a copy: the graph may be gone when printing */
    mg_phase phase;
    int checkpoint;
    double ts_us, dur_us;
    size_t bytes_before, bytes_after;
    double flops, bytes_moved;
} prof_event;

struct mg_profiler {
    prof_event *ev;
    int n, cap;
    int runs;
    bool have_origin;
    double origin_us; /* the first run's start */
    double step_start_us;
};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

mg_status mg_profiler_new(mg_profiler **out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_profiler_new: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return mg_set_error(MG_ERR_NOMEM, "mg_profiler_new: out of memory");
    return MG_OK;
}

void mg_profiler_reset(mg_profiler *prof) {
    if (!prof) return;
    for (int i = 0; i < prof->n; i++) free(prof->ev[i].name);
    prof->n = 0;
    prof->runs = 0;
    prof->have_origin = false;
}

void mg_profiler_free(mg_profiler *prof) {
    if (!prof) return;
    mg_profiler_reset(prof);
    free(prof->ev);
    free(prof);
}

int mg_profiler_num_events(const mg_profiler *prof) {
    return prof ? prof->n : 0;
}

static mg_status on_run_start(void *user, const mg_plan *plan) {
    (void)plan;
    mg_profiler *prof = user;
    /* The other callbacks run only after this one succeeded. */
    if (!prof)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "profiler observer: the profiler is NULL "
                            "(mg_profiler_observer was given NULL)");
    if (!prof->have_origin) {
        prof->origin_us = now_us();
        prof->have_origin = true;
    }
    prof->runs++;
    return MG_OK;
}

static mg_status on_before(void *user, const mg_step_info *info) {
    (void)info;
    mg_profiler *prof = user;
    prof->step_start_us = now_us();
    return MG_OK;
}

static mg_status on_after(void *user, const mg_step_info *info) {
    mg_profiler *prof = user;
    double end = now_us();
    if (prof->n == prof->cap) {
        int cap = prof->cap ? 2 * prof->cap : 256;
        prof_event *ev = realloc(prof->ev, (size_t)cap * sizeof *ev);
        if (!ev)
            return mg_set_error(MG_ERR_NOMEM,
                                "profiler: out of memory recording step %d",
                                info->step);
        prof->ev = ev;
        prof->cap = cap;
    }
    char *name = NULL;
    if (info->tensor_name) {
        size_t len = strlen(info->tensor_name);
        if (!(name = malloc(len + 1)))
            return mg_set_error(MG_ERR_NOMEM,
                                "profiler: out of memory recording step %d",
                                info->step);
        memcpy(name, info->tensor_name, len + 1);
    }
    prof->ev[prof->n++] = (prof_event){
        .run = prof->runs - 1,
        .step = info->step,
        .op = info->op,
        .tensor = info->tensor,
        .name = name,
        .phase = info->phase,
        .checkpoint = info->is_checkpoint,
        .ts_us = prof->step_start_us - prof->origin_us,
        .dur_us = end - prof->step_start_us,
        .bytes_before = info->bytes_before,
        .bytes_after = info->bytes_after,
        .flops = info->flops,
        .bytes_moved = info->bytes_moved,
    };
    return MG_OK;
}

mg_observer mg_profiler_observer(mg_profiler *prof) {
    return (mg_observer){.user = prof,
                         .run_start = on_run_start,
                         .before_op = on_before,
                         .after_op = on_after};
}

/* ------------------------------------------------------------------ table */

typedef struct prof_row {
    const char *op;
    mg_phase phase;
    int count;
    double us, flops, bytes;
} prof_row;

static int compare_rows(const void *a, const void *b) {
    const prof_row *x = a, *y = b;
    if (x->phase != y->phase) return (int)x->phase - (int)y->phase;
    return (x->us < y->us) - (x->us > y->us); /* slowest first */
}

static void print_row(FILE *out, const char *op, const char *phase, int count,
                      double us, double total_us, double flops, double bytes) {
    fprintf(out, "%-20s %-10s %7d %12.3f %6.1f%% %12.4f %12.4f %9.2f %9.2f\n",
            op, phase, count, us / 1e3,
            total_us > 0 ? 100.0 * us / total_us : 0, flops / 1e9, bytes / 1e9,
            us > 0 ? flops / us / 1e3 : 0, us > 0 ? bytes / us / 1e3 : 0);
}

mg_status mg_profiler_print(const mg_profiler *prof, FILE *out) {
    if (!prof || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_profiler_print: %s is NULL",
                            prof ? "out" : "profiler");
    prof_row *rows = malloc((size_t)(prof->n ? prof->n : 1) * sizeof *rows);
    if (!rows)
        return mg_set_error(MG_ERR_NOMEM, "mg_profiler_print: out of memory");
    int n_rows = 0;
    double total_us = 0;
    for (int i = 0; i < prof->n; i++) {
        const prof_event *e = &prof->ev[i];
        int r = 0;
        while (r < n_rows &&
               !(rows[r].phase == e->phase && !strcmp(rows[r].op, e->op)))
            r++;
        if (r == n_rows)
            rows[n_rows++] = (prof_row){.op = e->op, .phase = e->phase};
        rows[r].count++;
        rows[r].us += e->dur_us;
        rows[r].flops += e->flops;
        rows[r].bytes += e->bytes_moved;
        total_us += e->dur_us;
    }
    qsort(rows, (size_t)n_rows, sizeof *rows, compare_rows);
    fprintf(out, "profile: %d steps over %d runs, %.3f ms in ops\n", prof->n,
            prof->runs, total_us / 1e3);
    fprintf(out, "%-20s %-10s %7s %12s %7s %12s %12s %9s %9s\n", "op", "phase",
            "count", "time ms", "share", "GFLOP", "GB moved", "GFLOP/s",
            "GB/s");
    for (int r = 0; r < n_rows; r++)
        print_row(out, rows[r].op, mg_phase_name(rows[r].phase), rows[r].count,
                  rows[r].us, total_us, rows[r].flops, rows[r].bytes);
    for (int ph = MG_PHASE_FORWARD; ph <= MG_PHASE_BACKWARD; ph++) {
        prof_row t = {0};
        for (int r = 0; r < n_rows; r++)
            if ((int)rows[r].phase == ph) {
                t.count += rows[r].count;
                t.us += rows[r].us;
                t.flops += rows[r].flops;
                t.bytes += rows[r].bytes;
            }
        print_row(out, "(all)", mg_phase_name((mg_phase)ph), t.count, t.us,
                  total_us, t.flops, t.bytes);
    }
    free(rows);
    return ferror(out)
               ? mg_set_error(MG_ERR_INTERNAL, "mg_profiler_print: write error")
               : MG_OK;
}

/* ------------------------------------------------------------------ trace */

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

mg_status mg_profiler_write_trace(const mg_profiler *prof, FILE *out) {
    if (!prof || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_profiler_write_trace: %s is NULL",
                            prof ? "out" : "profiler");
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", out);
    fputs("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, "
          "\"args\": {\"name\": \"memgrad\"}}",
          out);
    for (int ph = MG_PHASE_FORWARD; ph <= MG_PHASE_BACKWARD; ph++)
        fprintf(out,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, "
                "\"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                ph + 1, mg_phase_name((mg_phase)ph));
    for (int i = 0; i < prof->n; i++) {
        const prof_event *e = &prof->ev[i];
        fprintf(out,
                ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", "
                "\"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                "\"args\": {\"run\": %d, \"step\": %d, \"tensor\": %d, "
                "\"name\": ",
                e->op, mg_phase_name(e->phase), (int)e->phase + 1, e->ts_us,
                e->dur_us, e->run, e->step, (int)e->tensor);
        if (e->name) json_string(out, e->name);
        else fputs("null", out);
        fprintf(out,
                ", \"checkpoint\": %s, \"flops\": %.17g, "
                "\"bytes_moved\": %.17g, \"bytes_before\": %zu, "
                "\"bytes_after\": %zu}}",
                e->checkpoint ? "true" : "false", e->flops, e->bytes_moved,
                e->bytes_before, e->bytes_after);
        fprintf(out,
                ",\n{\"name\": \"pool bytes in use\", \"ph\": \"C\", "
                "\"pid\": 1, \"ts\": %.3f, \"args\": {\"bytes\": %zu}}",
                e->ts_us, e->bytes_before);
        fprintf(out,
                ",\n{\"name\": \"pool bytes in use\", \"ph\": \"C\", "
                "\"pid\": 1, \"ts\": %.3f, \"args\": {\"bytes\": %zu}}",
                e->ts_us + e->dur_us, e->bytes_after);
    }
    fputs("\n]}\n", out);
    return ferror(out) ? mg_set_error(MG_ERR_INTERNAL,
                                      "mg_profiler_write_trace: write error")
                       : MG_OK;
}
