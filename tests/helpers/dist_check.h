/*
 * dist_check.h - the checks both MPI test programs (test_dist on MPI,
 * test_dist_nccl on NCCL, both from test_dist.c) make of an allreduce's
 * result: that every rank holds the same bits, and that an average is
 * within float tolerance of the whole batch's gradient. Include after check.h
 * and memgrad_dist.h (which brings mpi.h).
 */
#ifndef MG_TESTS_HELPERS_DIST_CHECK_H
#define MG_TESTS_HELPERS_DIST_CHECK_H

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every rank holds the same bytes in buf: rank 0's, broadcast, compared. */
static void check_same_on_all_ranks(const char *what, const void *buf,
                                    size_t n) {
    unsigned char *root = malloc(n);
    memcpy(root, buf, n);
    ck_assert(MPI_Bcast(root, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD) ==
              MPI_SUCCESS);
    int same = memcmp(root, buf, n) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    free(root);
    ck_assert_msg(all, "%s: ranks hold different bits", what);
}

/* got within 2e-5 (f32) or 1e-12 (f64), relative plus absolute, of exp. */
static void check_close(const char *what, mg_dtype dt, const void *got,
                        const void *exp, int64_t n) {
    double tol = dt == MG_F32 ? 2e-5 : 1e-12;
    for (int64_t i = 0; i < n; i++) {
        double a =
            dt == MG_F32 ? ((const float *)got)[i] : ((const double *)got)[i];
        double e =
            dt == MG_F32 ? ((const float *)exp)[i] : ((const double *)exp)[i];
        ck_assert_msg(fabs(a - e) <= tol + tol * fabs(e),
                      "%s element %lld: averaged %.9g, whole batch %.9g", what,
                      (long long)i, a, e);
    }
}

/* A watchdog for the calls that have no deadline of their own (a rank
 * left in MPI_Comm_dup waits for ever): past `seconds` the process says so
 * and exits, and mpirun then ends the job, so the test fails instead of
 * hanging until ctest's timeout. Only async-signal-safe calls in the
 * handler. */
static void dist_watchdog_fire(int sig) {
    (void)sig;
    static const char msg[] = "dist test: watchdog: a call still blocked "
                              "past its time (a hang); exiting\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

static void dist_watchdog_arm(unsigned seconds) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = dist_watchdog_fire;
    sigemptyset(&sa.sa_mask);
    ck_assert(sigaction(SIGALRM, &sa, NULL) == 0);
    alarm(seconds);
}

static void dist_watchdog_disarm(void) { alarm(0); }

#endif
