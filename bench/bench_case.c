/*
 * bench_case.c - one mg-bench test case: a model built, differentiated
 * under one checkpoint policy and planned (bench_case_prepare); caller
 * memory for its inputs, parameters and gradients (bench_memory_alloc,
 * bench_case_bind); an untimed warm-up step that also measures the pool
 * peak and the process RSS (bench_case_warm_up); and timed steps
 * (bench_case_timed_step).
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_case_free(bench_case *c) {
    mg_exec_free(c->ex);
    mg_plan_free(c->plan);
    mg_model_free(c->mm);
    free(c->binds);
    memset(c, 0, sizeof *c);
}

int bench_case_setup(const char *model, common_opts *o) {
    int rc = bench_model_check(model, &o->spec);
    if (rc) return rc;
    if (o->dropout > 0 && !o->spec->has_dropout)
        return bench_usage_error("--dropout: the %s model has no dropout",
                                 o->spec->name);
    if (o->seq && strcmp(o->spec->name, "gpt"))
        return bench_usage_error("--seq: only the gpt model takes it");
    if (!o->batch) o->batch = o->spec->default_batch;
    if (!o->width) o->width = o->spec->default_width;
    if ((rc = bench_device_check(o->device))) return rc;
    if (!o->max_bytes) o->max_bytes = bench_default_max_bytes(o->device);
    return 0;
}

bench_model_cfg bench_case_cfg(const common_opts *o, long depth) {
    return (bench_model_cfg){(int)depth, (int)o->batch, (int)o->width,
                             o->dropout, o->device,     o->no_fusion,
                             (int)o->seq};
}

void bench_case_refusal_print(const char *prefix, const bench_case *c,
                              size_t max_bytes) {
    fprintf(stderr,
            "%s refused: predicted peak %.1f MiB plus %.1f MiB of "
            "parameters, gradients and inputs exceeds --max-bytes %.1f MiB\n",
            prefix, bench_mib(c->sum.predicted_peak),
            bench_mib(2 * c->param_bytes + c->input_bytes),
            bench_mib(max_bytes));
}

int bench_case_open(const common_opts *o, const bench_model_cfg *cfg,
                    mg_ckpt_policy policy, const char *load, size_t max_bytes,
                    bench_case *c, bench_memory *mem) {
    memset(mem, 0, sizeof *mem);
    const mg_checkpoints ck = {
        .policy = policy, .compact = o->compact, .store16 = o->store16};
    mg_status s = bench_case_prepare_ckpt(o->spec, cfg, &ck, c);
    if (s != MG_OK) {
        bench_case_free(c);
        return bench_fail("building the model", s);
    }
    if (max_bytes && bench_case_need(c) > max_bytes) {
        bench_case_refusal_print("mg-bench:", c, max_bytes);
        bench_case_free(c);
        return 1;
    }
    if (!bench_memory_alloc(c, mem, load) ||
        !bench_memory_to_device(c, mem, o->device)) {
        bench_memory_free(mem);
        bench_case_free(c);
        return 1;
    }
    return 0;
}

/* Bytes a case needs while it runs: its predicted pool peak plus the
 * caller memory (parameters, their gradients, inputs). */
size_t bench_case_need(const bench_case *c) {
    return c->sum.predicted_peak + 2 * c->param_bytes + c->input_bytes;
}

void bench_memory_free(bench_memory *mem) {
    void (*release)(void *) =
        mem->device == MG_DEVICE_CPU ? free : bench_device_free;
    for (int i = 0; i < 2; i++) release(mem->inputs[i]);
    for (int i = 0; mem->params && i < mem->n_params; i++) {
        release(mem->params[i]);
        release(mem->grads[i]);
    }
    if (mem->loss_dev) bench_device_free(mem->loss_dev);
    free(mem->params);
    free(mem->grads);
    memset(mem, 0, sizeof *mem);
}

/* Moves to the device in two phases: every device buffer is allocated and
 * filled first, and only then are the host buffers freed and replaced, so a
 * failure leaves mem on the host, whole, for bench_memory_free. The device
 * copies are kept in one array: inputs, then (param, grad) pairs, then the
 * loss. */
int bench_memory_to_device(const bench_case *c, bench_memory *mem,
                           mg_device d) {
    if (d == MG_DEVICE_CPU || mem->device == d) return 1;
    const mg_model *m = c->mm;
    int n = 2 + 2 * m->n_params + 1;
    void **dev = calloc((size_t)n, sizeof *dev);
    if (!dev) return 0;
    int ok = 1;
    for (int k = 0; ok && k < n; k++) {
        void *host;
        size_t nbytes;
        if (k < 2) {
            host = mem->inputs[k];
            nbytes = mg_tensor_nbytes(m->g, c->inputs[k]);
        } else if (k < n - 1) {
            int i = (k - 2) / 2, is_grad = (k - 2) % 2;
            host = is_grad ? mem->grads[i] : mem->params[i];
            nbytes = mg_tensor_nbytes(m->g, m->params[i]);
            if (is_grad) memset(host, 0, nbytes); /* zeroed, as .grad */
        } else {
            host = NULL; /* the loss: written by each run */
            nbytes = sizeof mem->loss;
        }
        ok = (dev[k] = bench_device_alloc(nbytes)) != NULL &&
             (!host || bench_device_upload(dev[k], host, nbytes));
    }
    if (!ok) {
        for (int k = 0; k < n; k++) bench_device_free(dev[k]);
        free(dev);
        fprintf(stderr,
                "mg-bench: could not copy the inputs, parameters "
                "and gradients to the %s device\n",
                bench_device_str(d));
        return 0;
    }
    for (int k = 0; k < 2; k++) {
        free(mem->inputs[k]);
        mem->inputs[k] = dev[k];
    }
    for (int i = 0; i < m->n_params; i++) {
        free(mem->params[i]);
        free(mem->grads[i]);
        mem->params[i] = dev[2 + 2 * i];
        mem->grads[i] = dev[3 + 2 * i];
    }
    mem->loss_dev = dev[n - 1];
    mem->device = d;
    free(dev);
    return 1;
}

int bench_memory_grad_to_host(const bench_case *c, const bench_memory *mem,
                              int i, void *dst) {
    size_t n = mg_tensor_nbytes(c->mm->g, c->mm->params[i]);
    if (mem->device == MG_DEVICE_CPU) {
        memcpy(dst, mem->grads[i], n);
        return 1;
    }
    return bench_device_download(dst, mem->grads[i], n);
}

/* Point the bindings at mem for this case's tensor ids. With mem NULL, a
 * placeholder address: enough for predicting the peak (nothing runs). */
mg_status bench_case_bind(const bench_case *c, bench_memory *mem,
                          mg_binding **binds_out, int *n_out) {
    static char placeholder[1];
    const mg_model *m = c->mm;
    int n = 2 + 2 * m->n_params + 1;
    mg_binding *b = malloc((size_t)n * sizeof *b);
    if (!b) return MG_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < 2; i++)
        b[k++] = (mg_binding){c->inputs[i], mem ? mem->inputs[i] : placeholder};
    for (int i = 0; i < m->n_params; i++) {
        b[k++] = (mg_binding){m->params[i], mem ? mem->params[i] : placeholder};
        b[k++] = (mg_binding){m->grads[i], mem ? mem->grads[i] : placeholder};
    }
    void *loss = !mem            ? placeholder
                 : mem->loss_dev ? mem->loss_dev
                                 : (void *)&mem->loss;
    b[k++] = (mg_binding){m->loss, loss};
    *binds_out = b;
    *n_out = n;
    return MG_OK;
}

/* Build, differentiate under `policy`, compile and summarize. Policy
 * collection keeps every round(sqrt(n))-th of the model's blocks (layer or
 * block outputs): sqrt(n) checkpoints placed by hand, as
 * torch.utils.checkpoint.checkpoint_sequential places them. */
mg_status bench_case_prepare(const bench_model_spec *spec,
                             const bench_model_cfg *cfg, mg_ckpt_policy policy,
                             bench_case *c) {
    mg_checkpoints ck = {.policy = policy};
    return bench_case_prepare_ckpt(spec, cfg, &ck, c);
}

mg_status bench_case_prepare_ckpt(const bench_model_spec *spec,
                                  const bench_model_cfg *cfg,
                                  const mg_checkpoints *ckpt, bench_case *c) {
    const mg_ckpt_policy policy = ckpt->policy;
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->mm = spec->build(cfg, &c->act_one_layer);
    if (!c->mm) return bench_builder_status();
    mg_model *m = c->mm;
    mg_graph *g = m->g;
    c->inputs[0] = m->input;
    c->inputs[1] = m->target;
    mg_status s = MG_OK;
    if (policy == MG_CKPT_COLLECTION && m->n_blocks > 1) {
        int every = (int)lround(sqrt((double)m->n_blocks));
        for (int i = every - 1; s == MG_OK && i < m->n_blocks - 1; i += every)
            s = mg_tensor_set_checkpoint(g, m->blocks[i], 1);
        if (s != MG_OK) return s;
    }
    if ((s = mg_model_gradients(m, ckpt)) != MG_OK) return s;
    mg_tensor *outs = malloc((size_t)(m->n_params + 1) * sizeof *outs);
    if (!outs) return MG_ERR_NOMEM;
    outs[0] = m->loss;
    memcpy(outs + 1, m->grads, (size_t)m->n_params * sizeof *outs);
    const mg_plan_options po = {.device = cfg->device,
                                .no_fusion = cfg->no_fusion};
    s = mg_plan_compile(g, outs, m->n_params + 1, &po, &c->plan);
    free(outs);
    if (s != MG_OK) return s;
    for (int i = 0; i < m->n_params; i++)
        c->param_bytes += mg_tensor_nbytes(g, m->params[i]);
    for (int i = 0; i < 2; i++)
        c->input_bytes += mg_tensor_nbytes(g, c->inputs[i]);
    mg_binding *b;
    int nb;
    if ((s = bench_case_bind(c, NULL, &b, &nb)) != MG_OK) return s;
    s = mg_plan_summarize(c->plan, b, nb, &c->sum);
    free(b);
    return s;
}

/* Allocate inputs, parameters and gradient buffers for the tensors of c
 * (any case of the same model shape can then bind them with
 * bench_case_bind) and fill inputs and parameters: from `load` when given
 * (input, target, then the parameters in order, raw, back to back), else
 * with the model's own seeded initialisation (mg_model_init_params /
 * mg_model_init_data). */
int bench_memory_alloc(const bench_case *c, bench_memory *mem,
                       const char *load) {
    const mg_model *m = c->mm;
    memset(mem, 0, sizeof *mem);
    mem->n_params = m->n_params;
    mem->params = calloc((size_t)m->n_params, sizeof *mem->params);
    mem->grads = calloc((size_t)m->n_params, sizeof *mem->grads);
    if (!mem->params || !mem->grads) return 0;
    for (int i = 0; i < 2 + m->n_params; i++) {
        int is_input = i < 2;
        int j = is_input ? i : i - 2;
        size_t nbytes =
            mg_tensor_nbytes(m->g, is_input ? c->inputs[j] : m->params[j]);
        void *p = malloc(nbytes);
        if (!p) return 0;
        if (is_input) mem->inputs[j] = p;
        else mem->params[j] = p;
        if (!is_input && !(mem->grads[j] = malloc(nbytes))) return 0;
    }
    if (!load) {
        mg_status s = mg_model_init_params(m, m->seed, mem->params);
        if (s == MG_OK)
            s = mg_model_init_data(m, m->seed, mem->inputs[0], mem->inputs[1]);
        if (s != MG_OK) {
            bench_fail("initialising the model", s);
            return 0;
        }
        return 1;
    }
    FILE *f = fopen(load, "rb");
    if (!f) {
        fprintf(stderr, "mg-bench: cannot open %s: %s\n", load,
                strerror(errno));
        return 0;
    }
    int ok = 1;
    for (int i = 0; ok && i < 2 + m->n_params; i++) {
        int is_input = i < 2;
        int j = is_input ? i : i - 2;
        mg_tensor t = is_input ? c->inputs[j] : m->params[j];
        size_t nbytes = mg_tensor_nbytes(m->g, t);
        if (fread(is_input ? mem->inputs[j] : mem->params[j], 1, nbytes, f) !=
            nbytes) {
            fprintf(stderr, "mg-bench: %s is too short for %s\n", load,
                    is_input ? "the inputs" : "the parameters");
            ok = 0;
        }
    }
    if (ok && fgetc(f) != EOF) {
        fprintf(stderr,
                "mg-bench: %s is longer than the inputs and "
                "parameters of this model\n",
                load);
        ok = 0;
    }
    fclose(f);
    return ok;
}

/* Bind c to mem, make its executor and run one untimed warm-up step, which
 * also gives the pool peak and the process RSS around a first step. */
mg_status bench_case_warm_up(bench_case *c, bench_memory *mem, int repeat,
                             step_result *r) {
    memset(r, 0, sizeof *r);
    r->times = calloc((size_t)repeat, sizeof *r->times);
    if (!r->times) return MG_ERR_NOMEM;
    c->device = mem->device;
    if (c->device != MG_DEVICE_CPU) {
        r->event_times = calloc((size_t)repeat, sizeof *r->event_times);
        if (!r->event_times) return MG_ERR_NOMEM;
    }
    mg_status s = bench_case_bind(c, mem, &c->binds, &c->n_binds);
    mg_exec_options eo = {.device = c->device};
    if (s == MG_OK) s = mg_exec_new(&eo, &c->ex);
    if (s != MG_OK) return s;
    r->rss_before = bench_proc_status_bytes("VmRSS");
    int have_hwm = bench_rss_peak_reset();
    mg_exec_pool_reset_peak(c->ex);
    s = mg_exec_run(c->ex, c->plan, c->binds, c->n_binds, 0);
    r->rss_peak = have_hwm ? bench_proc_status_bytes("VmHWM") : 0;
    mg_pool_stats st;
    mg_exec_pool_stats(c->ex, &st);
    r->peak_bytes = st.peak_bytes_in_use;
    r->reserved_bytes = st.bytes_reserved;
    /* On a device: the run has synchronised; copy the loss back. */
    if (s == MG_OK && mem->loss_dev &&
        !bench_device_download(&mem->loss, mem->loss_dev, sizeof mem->loss))
        s = MG_ERR_INTERNAL;
    r->loss = mem->loss;
    return s;
}

/* Timed step k of c (after bench_case_warm_up). */
mg_status bench_case_timed_step(bench_case *c, int k, step_result *r) {
    mg_exec_pool_reset_peak(c->ex);
    /* Wall clock is the step on any device: the CUDA backend synchronises
     * before mg_exec_run returns. On a device CUDA events on the default
     * stream time it again on the GPU's clock. */
    int ev = r->event_times && bench_device_timer_start();
    double t0 = bench_now_ms(), c0 = bench_process_cpu_ms();
    mg_status s = mg_exec_run(c->ex, c->plan, c->binds, c->n_binds, 0);
    r->times[k] = bench_now_ms() - t0;
    r->cpu_ms_total += bench_process_cpu_ms() - c0;
    if (r->event_times)
        r->event_times[k] = ev ? bench_device_timer_stop() : NAN;
    mg_pool_stats st;
    mg_exec_pool_stats(c->ex, &st);
    if (st.peak_bytes_in_use > r->peak_bytes)
        r->peak_bytes = st.peak_bytes_in_use;
    return s;
}
