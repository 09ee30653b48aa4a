/*
 * cli_policy.h - the --policy argument of the command-line tools
 * (memgrad-plan, memgrad-onnx): a comma-separated list of the policies
 * they run (none, memory, speed, budget). One parser for both, so that a
 * string one refuses the other refuses too: memgrad-onnx split with
 * strtok, which skips empty entries, and ran "memory," and "none,,memory"
 * as if the empty names were not there (issue 49), where memgrad-plan
 * refused them.
 *
 * Header-only (static functions): the tools are single files built from
 * different directories and link nothing of each other.
 */
#ifndef MG_TOOLS_CLI_POLICY_H
#define MG_TOOLS_CLI_POLICY_H

#include <memgrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse text into up to cap policies (*n gets the count). Every entry
 * must be one of the names the tools run; an empty entry (a leading,
 * trailing or doubled comma, or an empty text) and more than cap entries
 * are refused. Returns 0, or -1 with why (why_len bytes) saying what is
 * wrong, quoting the entry. */
static inline int mg_cli_policy_list(const char *text, mg_ckpt_policy *out,
                                     int cap, int *n, char *why,
                                     size_t why_len) {
    *n = 0;
    if (!text) {
        snprintf(why, why_len, "no policy given");
        return -1;
    }
    /* indices bounded by strlen: walking a pointer past each comma made
     * GCC's -Warray-bounds see text + 7 beyond the default "memory" */
    const size_t n_text = strlen(text);
    size_t start = 0;
    for (int k = 0;; k++) {
        size_t end = start;
        while (end < n_text && text[end] != ',') end++;
        const size_t len = end - start;
        const char *p = text + start;
        if (len == 0) {
            snprintf(why, why_len,
                     "'%s': entry %d is empty (a leading, trailing or "
                     "doubled comma)",
                     text, k + 1);
            return -1;
        }
        if (k == cap) {
            if (cap == 1) snprintf(why, why_len, "'%s': one policy only", text);
            else
                snprintf(why, why_len, "'%s' names more than %d policies", text,
                         cap);
            return -1;
        }
        /* the longest name is "collection"; anything longer is no name */
        char name[16];
        mg_ckpt_policy q = MG_CKPT_NONE;
        int ok = len < sizeof name;
        if (ok) {
            memcpy(name, p, len);
            name[len] = '\0';
            ok = mg_ckpt_policy_parse(name, &q) == MG_OK &&
                 (q == MG_CKPT_NONE || q == MG_CKPT_MEMORY ||
                  q == MG_CKPT_SPEED || q == MG_CKPT_BUDGET);
        }
        if (!ok) {
            snprintf(why, why_len,
                     "bad policy '%.*s' (none, memory, speed, budget)",
                     len > 64 ? 64 : (int)len, p);
            return -1;
        }
        out[k] = q;
        *n = k + 1;
        if (end == n_text) return 0;
        start = end + 1;
    }
}

/* The --offload argument (issue 51, docs/offload.md): "BW,RATE", the
 * host copy bandwidth in bytes/s and the compute rate in flops/s that the
 * budget policy prices offload with (mg_checkpoints.host_bandwidth and
 * compute_rate), both finite and > 0 ("12e9,5e11"). Returns 0 with both
 * set, or -1 with why saying what is wrong, quoting the text. */
static inline int mg_cli_offload_rates(const char *text, double *bandwidth,
                                       double *rate, char *why,
                                       size_t why_len) {
    char *end = NULL;
    const double bw = text ? strtod(text, &end) : 0;
    const int bw_ok = text && end != text && *end == ',' && isfinite(bw) &&
                      bw > 0;
    const char *second = bw_ok ? end + 1 : NULL;
    const double r = second ? strtod(second, &end) : 0;
    if (!bw_ok || end == second || *end != '\0' || !isfinite(r) || !(r > 0)) {
        snprintf(why, why_len,
                 "'%.64s' is no pair of rates: give BANDWIDTH,RATE, host "
                 "copy bytes/s and compute flops/s, both > 0 (e.g. 12e9,5e11)",
                 text ? text : "");
        return -1;
    }
    *bandwidth = bw;
    *rate = r;
    return 0;
}

/* The tensors the last budget mg_gradients call with offload chose
 * (mg_graph_offloads) into *out (malloc'd, the caller frees it; NULL when
 * none) and their count into *n. Returns 0, or -1 when out of memory. */
static inline int mg_cli_offloads(const mg_graph *g, mg_tensor **out, int *n) {
    *out = NULL;
    *n = mg_graph_offloads(g, NULL, 0);
    if (*n <= 0) {
        *n = 0;
        return 0;
    }
    *out = malloc(sizeof **out * (size_t)*n);
    if (!*out) return -1;
    mg_graph_offloads(g, *out, *n);
    return 0;
}

#endif
