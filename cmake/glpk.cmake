# glpk.cmake - the MILP references for MG_CKPT_BUDGET (issue 17), solved
# with GLPK (Debian libglpk-dev, which ships no pkg-config file or CMake
# config: found by header and library): the test oracle
# tests/oracle/checkmate_milp.c (Checkmate's exact MILP), compiled once into
# a static library that tests/test_checkmate.c and the bench tool
# mg-checkmate (bench/milp/checkmate.c) share, and mg-milp-ref
# (bench/milp/milp_ref.c, a knapsack with planner feedback). Optional:
# without GLPK the tools are not built, CMake says so, and ctest lists their
# tests as skipped (mg_add_skipped_test).
find_path(GLPK_INCLUDE_DIR glpk.h)
find_library(GLPK_LIBRARY glpk)
if(GLPK_INCLUDE_DIR AND GLPK_LIBRARY AND (MG_BUILD_BENCH OR MG_BUILD_TESTS))
  add_library(mg_checkmate_milp STATIC
              "${PROJECT_SOURCE_DIR}/tests/oracle/checkmate_milp.c")
  mg_target_settings(mg_checkmate_milp)
  target_include_directories(mg_checkmate_milp
    PUBLIC "${PROJECT_SOURCE_DIR}/tests/oracle" PRIVATE "${GLPK_INCLUDE_DIR}")
  target_link_libraries(mg_checkmate_milp PUBLIC memgrad::memgrad
                        "${GLPK_LIBRARY}" m)
  # COIN-OR CBC (Debian coinor-libcbc-dev, pkg-config cbc), optional: a
  # second solver for the same MILP (mg-checkmate --solver cbc), which
  # settles the branching DAGs GLPK leaves open after an hour.
  pkg_check_modules(CBC IMPORTED_TARGET cbc)
  if(CBC_FOUND)
    target_compile_definitions(mg_checkmate_milp PUBLIC MG_HAVE_CBC=1)
    target_link_libraries(mg_checkmate_milp PRIVATE PkgConfig::CBC)
  else()
    message(STATUS "CBC not found (coinor-libcbc-dev): mg-checkmate solves "
                   "with GLPK only")
  endif()
endif()
if(GLPK_INCLUDE_DIR AND GLPK_LIBRARY AND MG_BUILD_TESTS)
  # Checkmate's MILP against the budget policy on a tiny chain and DAG.
  add_executable(test_checkmate "${PROJECT_SOURCE_DIR}/tests/test_checkmate.c")
  mg_target_settings(test_checkmate)
  target_include_directories(test_checkmate PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(test_checkmate PRIVATE mg_checkmate_milp
                        mg_test_support ${MG_TEST_LIB} PkgConfig::CHECK m)
  # The GLPK cases, and the CBC ones as a test of their own: without CBC
  # that one is listed as skipped, not folded into a pass.
  add_test(NAME test_checkmate COMMAND test_checkmate glpk)
  set_tests_properties(test_checkmate PROPERTIES
                       ENVIRONMENT "CK_DEFAULT_TIMEOUT=600")
  if(CBC_FOUND)
    add_test(NAME test_checkmate_cbc COMMAND test_checkmate cbc)
    set_tests_properties(test_checkmate_cbc PROPERTIES
                         ENVIRONMENT "CK_DEFAULT_TIMEOUT=600")
  else()
    mg_add_skipped_test(test_checkmate_cbc
      "CBC not found (coinor-libcbc-dev): test_checkmate's CBC cases")
  endif()
elseif(MG_BUILD_TESTS)
  mg_add_skipped_test(test_checkmate
    "GLPK not found (libglpk-dev): Checkmate's MILP against the budget policy")
  mg_add_skipped_test(test_checkmate_cbc
    "GLPK not found (libglpk-dev): test_checkmate's CBC cases")
endif()
if(GLPK_INCLUDE_DIR AND GLPK_LIBRARY AND MG_BUILD_BENCH)
  add_executable(mg-checkmate "${PROJECT_SOURCE_DIR}/bench/milp/checkmate.c")
  mg_target_settings(mg-checkmate)
  target_link_libraries(mg-checkmate PRIVATE mg_checkmate_milp m)
  add_executable(mg-milp-ref "${PROJECT_SOURCE_DIR}/bench/milp/milp_ref.c")
  mg_target_settings(mg-milp-ref)
  target_include_directories(mg-milp-ref PRIVATE "${GLPK_INCLUDE_DIR}")
  target_link_libraries(mg-milp-ref PRIVATE memgrad::memgrad
                        "${GLPK_LIBRARY}" m)
  if(MG_BUILD_TESTS)
    # The budget policy never recomputes more than the MILP's plan that
    # fits, on the tool's four small graphs.
    add_test(NAME milp_ref
             COMMAND mg-milp-ref --fractions 0.6,0.7,0.8,0.9,1.0 --check)
  endif()
else()
  if(MG_BUILD_TESTS AND MG_BUILD_BENCH)
    mg_add_skipped_test(milp_ref "GLPK not found (libglpk-dev): mg-milp-ref")
  endif()
  message(STATUS "GLPK not found: mg-milp-ref and mg-checkmate (issue 17's "
                 "MILP references) and test_checkmate are not built")
endif()
