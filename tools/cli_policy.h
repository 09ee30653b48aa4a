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

#include <stdio.h>
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

#endif
