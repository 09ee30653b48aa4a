/*
 * helpers/mpi_main.h - the end of the MPI test programs' main() (test_dist,
 * test_pipeline, test_pipeline_agree): run the suite on every rank without
 * forking (MPI does not survive fork()), but only where the job has as
 * many ranks as the program needs; then MPI_Finalize. Include after
 * check.h and mpi.h.
 */
#ifndef MG_TESTS_HELPERS_MPI_MAIN_H
#define MG_TESTS_HELPERS_MPI_MAIN_H

#include <stdio.h>

/* The number of failed tests (1 when size is outside lo .. hi, said on
 * stderr with usage, the program's name and rank range); frees su. */
static inline int mpi_run_suite(Suite *su, int size, int lo, int hi,
                                const char *usage) {
    SRunner *sr = srunner_create(su);
    srunner_set_fork_status(sr, CK_NOFORK);
    int failed = 0;
    if (size < lo || size > hi) {
        fprintf(stderr, "%s\n", usage);
        failed = 1;
    } else {
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
    }
    srunner_free(sr);
    MPI_Finalize();
    return failed;
}

#endif
