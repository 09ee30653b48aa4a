/*
 * milp_args.h - what the two MILP tools of bench/milp (mg-checkmate and
 * mg-milp-ref) both read from their command lines: a list of budget
 * fractions. Header-only: each tool is one source file.
 */
#ifndef MG_BENCH_MILP_ARGS_H
#define MG_BENCH_MILP_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "0.1,0.5,1.0" (split in place) -> up to cap positive fractions into fr;
 * their count, or -1 after "<prog>: bad fraction '...'" on stderr. */
static int milp_fractions_parse(char *s, double *fr, int cap,
                                const char *prog) {
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok && n < cap;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        fr[n] = strtod(tok, &end);
        if (*end || !(fr[n] > 0)) {
            fprintf(stderr, "%s: bad fraction '%s'\n", prog, tok);
            return -1;
        }
        n++;
    }
    return n;
}

#endif
