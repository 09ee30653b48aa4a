/*
 * proc_status.h - the process's resident set as Linux reports it, for the
 * tests and benchmarks that hold RSS to the plan (issue 28): a field of
 * /proc/self/status in bytes, and the reset of its peak (VmHWM) through
 * /proc/self/clear_refs. Header-only, so that tests/ and bench/ (which
 * uses the public API only) share one reader without it entering the
 * library.
 */
#ifndef MG_PROC_STATUS_H
#define MG_PROC_STATUS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A "Key:   N kB" field of /proc/self/status (VmRSS, VmHWM) in bytes, or
 * 0 where it cannot be read. */
static inline size_t mgi_proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') {
            kib = (size_t)strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kib * 1024;
}

/* Reset VmHWM to the current RSS (Linux 4.0 and later); false where that
 * cannot be done. */
static inline bool mgi_proc_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

#endif
