# glpk.cmake - mg-milp-ref (bench/milp/milp_ref.c, issue 17): a MILP
# reference for MG_CKPT_BUDGET solved with GLPK (Debian libglpk-dev, which
# ships no pkg-config file or CMake config: found by header and library).
# Optional: without GLPK the tool and its test are not built, and CMake
# says so.
find_path(GLPK_INCLUDE_DIR glpk.h)
find_library(GLPK_LIBRARY glpk)
if(GLPK_INCLUDE_DIR AND GLPK_LIBRARY AND MG_BUILD_BENCH)
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
  message(STATUS "GLPK not found: mg-milp-ref (issue 17's MILP reference) "
                 "is not built")
endif()
