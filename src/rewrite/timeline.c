/*
 * timeline.c - a plan's memory timeline (memgrad_observe.h): the pool
 * bytes in use before and after each step, predicted from the schedule by
 * the same alloc-run-release simulation as mgi_plan_peak, and written as CSV
 * beside a run's measured series for bench tools and memgrad-plan to draw.
 */
#include "step_info.h"

#include <stdlib.h>
#include <string.h>

/* Name fields are written as they are unless they hold a comma or quote;
 * then CSV quoting (RFC 4180). */
static void csv_field(FILE *out, const char *s) {
    if (!s) return;
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"') fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

int mg_plan_timeline(const mg_plan *p, const mg_binding *binds, int n_binds,
                     mg_step_info *out, int cap) {
    if (!p || cap < 0 || (cap > 0 && !out)) {
        mg_set_error(MG_ERR_INVALID_ARG, "mg_plan_timeline: %s",
                     !p ? "plan is NULL" : "bad output array");
        return -1;
    }
    bool *bound;
    if (mgi_plan_bound(p, binds, n_binds, "mg_plan_timeline", &bound) != MG_OK)
        return -1;
    size_t in_use = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        mg_tensor t = p->steps[s];
        size_t before = in_use;
        if (!bound[t] && !p->step[s].view)
            in_use += mg_pool_size_class(mg_plan_nbytes(p, t));
        if (s < cap) {
            mgi_plan_step_info(p, s, &out[s]);
            out[s].bytes_before = before;
            out[s].bytes_after = in_use;
        }
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            in_use -= mg_pool_size_class(mg_plan_nbytes(p, p->release[r]));
    }
    free(bound);
    return (int)p->n_steps;
}

mg_status mg_plan_write_timeline(const mg_plan *p, const mg_binding *binds,
                                 int n_binds, const mg_step_info *measured,
                                 FILE *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_write_timeline: %s is NULL",
                            p ? "out" : "plan");
    mg_step_info *pred =
        malloc((size_t)(p->n_steps ? p->n_steps : 1) * sizeof *pred);
    if (!pred)
        return mg_set_error(MG_ERR_NOMEM,
                            "mg_plan_write_timeline: out of memory");
    if (mg_plan_timeline(p, binds, n_binds, pred, (int)p->n_steps) < 0) {
        free(pred);
        return mg_last_status();
    }
    fputs("step,phase,op,tensor,name,checkpoint,workspace_bytes,"
          "predicted_bytes_before,predicted_bytes_after,"
          "measured_bytes_before,measured_bytes_after\n",
          out);
    for (int32_t s = 0; s < p->n_steps; s++) {
        const mg_step_info *e = &pred[s];
        fprintf(out, "%d,%s,%s,%d,", (int)s, mg_phase_name(e->phase), e->op,
                (int)e->tensor);
        csv_field(out, e->tensor_name);
        fprintf(out, ",%d,%zu,%zu,%zu,", e->is_checkpoint, e->workspace_bytes,
                e->bytes_before, e->bytes_after);
        if (measured)
            fprintf(out, "%zu,%zu", measured[s].bytes_before,
                    measured[s].bytes_after);
        else fputc(',', out);
        fputc('\n', out);
    }
    free(pred);
    return ferror(out) ? mg_set_error(MG_ERR_INTERNAL,
                                      "mg_plan_write_timeline: write error")
                       : MG_OK;
}
