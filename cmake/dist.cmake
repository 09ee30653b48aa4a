# dist.cmake - data-parallel training over MPI (issue 16): the memgrad_dist
# library (src/dist/*.c, include/memgrad_dist.h), examples/ddp_mpi.c, the
# MPI tests (tests/test_dist*.c, run under mpirun -np 2) and bench/ddp;
# nccl.cmake adds the NCCL transport where CUDA and NCCL are found.
# Included at the end of CMakeLists.txt (after the install section). MPI is
# found the standard way (FindMPI); without it none of this is built.

find_package(MPI COMPONENTS C)
set(MG_HAVE_MPI OFF)
if(NOT MPI_C_FOUND)
  message(STATUS "memgrad: MPI not found: memgrad_dist, its example, tests "
                 "and bench are not built (Debian: libopenmpi-dev)")
  return()
endif()
set(MG_HAVE_MPI ON)
message(STATUS "memgrad: MPI ${MPI_C_VERSION} (memgrad_dist)")

file(GLOB MG_DIST_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/dist/*.c")
add_library(memgrad_dist ${MG_DIST_SOURCES})
add_library(memgrad::dist ALIAS memgrad_dist)
mg_target_settings(memgrad_dist)
target_include_directories(memgrad_dist
  PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE
    ${PROJECT_SOURCE_DIR}/src)
# PUBLIC: memgrad_dist.h includes mpi.h.
target_link_libraries(memgrad_dist PUBLIC memgrad::memgrad MPI::MPI_C)
set_target_properties(memgrad_dist PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME dist)
# As libmemgrad: a shared memgrad_dist exports what memgrad_dist.h marks
# MG_API and nothing else (the exported_symbols_dist test below).
set_target_properties(memgrad_dist PROPERTIES
  C_VISIBILITY_PRESET hidden
  POSITION_INDEPENDENT_CODE ON)

# Installed as memgrad::dist beside memgrad::memgrad, in an export set of
# its own that memgradConfig.cmake loads only where it finds MPI.
install(TARGETS memgrad_dist
  EXPORT memgradDistTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_SOURCE_DIR}/include/memgrad_dist.h"
              "${PROJECT_SOURCE_DIR}/include/memgrad_pipeline.h"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT memgradDistTargets
  NAMESPACE memgrad::
  FILE memgradDistTargets.cmake
  DESTINATION ${MG_CMAKE_INSTALL_DIR})

# mpirun as the tests and the bench call it: two ranks on this machine,
# allowed as root (CI runs as root), more ranks than cores allowed.
set(MG_MPIRUN "${MPIEXEC_EXECUTABLE}" --allow-run-as-root --oversubscribe
    ${MPIEXEC_NUMPROC_FLAG} 2)

# The NCCL transport (src/dist/nccl/) and memgrad_dist_config.h, which
# memgrad_dist.h includes: written with or without NCCL.
include("${PROJECT_SOURCE_DIR}/cmake/nccl.cmake")

if(MG_BUILD_EXAMPLES AND EXISTS "${PROJECT_SOURCE_DIR}/examples/ddp_mpi.c")
  add_executable(memgrad-ddp_mpi "${PROJECT_SOURCE_DIR}/examples/ddp_mpi.c")
  mg_target_settings(memgrad-ddp_mpi)
  target_link_libraries(memgrad-ddp_mpi PRIVATE memgrad::dist m)
endif()

if(MG_BUILD_BENCH AND EXISTS "${PROJECT_SOURCE_DIR}/bench/ddp/bench_ddp.c")
  add_executable(mg-bench-ddp "${PROJECT_SOURCE_DIR}/bench/ddp/bench_ddp.c")
  mg_target_settings(mg-bench-ddp)
  target_link_libraries(mg-bench-ddp PRIVATE memgrad::dist m)
endif()

if(MG_BUILD_BENCH AND EXISTS "${PROJECT_SOURCE_DIR}/bench/pipeline/bench_pipeline.c")
  add_executable(mg-bench-pipeline "${PROJECT_SOURCE_DIR}/bench/pipeline/bench_pipeline.c")
  mg_target_settings(mg-bench-pipeline)
  target_link_libraries(mg-bench-pipeline PRIVATE memgrad::dist m)
endif()

if(MG_BUILD_TESTS AND TARGET memgrad-ddp_mpi)
  # The example trains 3 steps at 2 ranks and exits non-zero unless the
  # weights end bit-identical on both.
  add_test(NAME ddp_mpi_example
    COMMAND ${MG_MPIRUN} $<TARGET_FILE:memgrad-ddp_mpi> resnet 3 4)
  set_tests_properties(ddp_mpi_example PROPERTIES
    TIMEOUT 300
    ENVIRONMENT "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-openmpi.supp:print_suppressions=0")
  if(MG_SANITIZE)
    set_tests_properties(ddp_mpi_example PROPERTIES ENVIRONMENT_MODIFICATION
      "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
  endif()
endif()

if(MG_BUILD_TESTS)
  # test_dist.c on the MPI transport; nccl.cmake builds it a second time,
  # as test_dist_nccl, on the NCCL transport where NCCL is found.
  file(GLOB MG_DIST_TESTS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_dist*.c")
  foreach(src IN LISTS MG_DIST_TESTS)
    get_filename_component(stem "${src}" NAME_WE)
    add_executable(${stem} "${src}")
    mg_target_settings(${stem})
    target_link_libraries(${stem} PRIVATE memgrad::dist PkgConfig::CHECK m)
    add_test(NAME ${stem}
      COMMAND ${MG_MPIRUN} $<TARGET_FILE:${stem}>)
    # Three ranks too: chunks of unequal size, two ranks timing out.
    add_test(NAME ${stem}_np3
      COMMAND "${MPIEXEC_EXECUTABLE}" --allow-run-as-root --oversubscribe
              ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:${stem}>)
    # A hang is a failure: the tests' own timeouts are seconds. Open MPI's
    # internals leak at exit by design; the suppressions name only its
    # libraries. mpirun passes its environment on to the local ranks.
    set_tests_properties(${stem} ${stem}_np3 PROPERTIES
      TIMEOUT 300
      ENVIRONMENT "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-openmpi.supp:print_suppressions=0")
    if(MG_SANITIZE)
      # Open MPI's libraries have no frame pointers, so the fast unwinder
      # stops at the malloc caller, before any frame the suppressions could
      # name: unwind the slow way, for this test only.
      set_tests_properties(${stem} ${stem}_np3 PROPERTIES ENVIRONMENT_MODIFICATION
        "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
    endif()
  endforeach()
endif()

# Pipeline parallelism (memgrad_pipeline.h, src/dist/pipeline*.c): its
# example and its tests at 2 and 4 ranks (oversubscribed).
if(MG_BUILD_EXAMPLES AND EXISTS "${PROJECT_SOURCE_DIR}/examples/pipeline_mpi.c")
  add_executable(memgrad-pipeline_mpi "${PROJECT_SOURCE_DIR}/examples/pipeline_mpi.c")
  mg_target_settings(memgrad-pipeline_mpi)
  target_link_libraries(memgrad-pipeline_mpi PRIVATE memgrad::dist m)
endif()
if(MG_BUILD_TESTS AND TARGET memgrad-pipeline_mpi)
  # 3 steps of 4 microbatches at 2 ranks; non-zero unless every step
  # succeeds and each rank's measured peak equals its prediction.
  add_test(NAME pipeline_mpi_example
    COMMAND ${MG_MPIRUN} $<TARGET_FILE:memgrad-pipeline_mpi> mlp 3 4)
  set_tests_properties(pipeline_mpi_example PROPERTIES
    TIMEOUT 300
    ENVIRONMENT "OMP_NUM_THREADS=1;LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-openmpi.supp:print_suppressions=0")
  if(MG_SANITIZE) # as for the dist tests: Open MPI needs the slow unwinder
    set_tests_properties(pipeline_mpi_example PROPERTIES ENVIRONMENT_MODIFICATION
      "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
  endif()
endif()
if(MG_BUILD_TESTS)
  file(GLOB MG_PIPELINE_TESTS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_pipeline*.c")
  foreach(src IN LISTS MG_PIPELINE_TESTS)
    get_filename_component(stem "${src}" NAME_WE)
    add_executable(${stem} "${src}")
    mg_target_settings(${stem})
    target_link_libraries(${stem} PRIVATE memgrad::dist memgrad::memgrad PkgConfig::CHECK m)
    set(nps 2 4)
    if(stem STREQUAL "test_pipeline_agree")
      # the agreement names the rank that differs among 2, 3 and 4 ranks
      set(nps 2 3 4)
    endif()
    foreach(np IN LISTS nps)
      add_test(NAME ${stem}_np${np}
        COMMAND "${MPIEXEC_EXECUTABLE}" --allow-run-as-root --oversubscribe
                ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:${stem}>)
      set_tests_properties(${stem}_np${np} PROPERTIES
        TIMEOUT 300
        ENVIRONMENT "OMP_NUM_THREADS=1;LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-openmpi.supp:print_suppressions=0")
      if(MG_SANITIZE)
        set_tests_properties(${stem}_np${np} PROPERTIES ENVIRONMENT_MODIFICATION
          "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
      endif()
    endforeach()
  endforeach()
endif()

# The exported-symbol test of libmemgrad (CMakeLists.txt) for memgrad_dist,
# whose header needs mpi.h.
if(MG_BUILD_TESTS AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  if(BUILD_SHARED_LIBS)
    set(MG_DIST_SHARED_TARGET memgrad_dist)
  else()
    add_library(memgrad_dist_shared_check SHARED
                $<TARGET_OBJECTS:memgrad_dist>)
    target_link_libraries(memgrad_dist_shared_check PRIVATE
                          memgrad_shared_check MPI::MPI_C ${MG_NCCL_LINK_LIBS})
    set(MG_DIST_SHARED_TARGET memgrad_dist_shared_check)
  endif()
  # mpi.h, and memgrad_dist_config.h (generated, in the build tree).
  list(TRANSFORM MPI_C_INCLUDE_DIRS PREPEND "-I" OUTPUT_VARIABLE _mg_mpi_flags)
  list(APPEND _mg_mpi_flags "-I${MG_DIST_CONFIG_DIR}")
  list(JOIN _mg_mpi_flags " " _mg_mpi_flags)
  add_test(NAME exported_symbols_dist
    COMMAND bash "${PROJECT_SOURCE_DIR}/tests/exported_symbols/run.sh"
            "$<TARGET_FILE:${MG_DIST_SHARED_TARGET}>"
            "${PROJECT_SOURCE_DIR}/include/memgrad_dist.h"
            "${PROJECT_SOURCE_DIR}/include/memgrad_pipeline.h")
  set_tests_properties(exported_symbols_dist PROPERTIES
    ENVIRONMENT "MG_CC=${CMAKE_C_COMPILER};MG_NM=${CMAKE_NM};MG_CFLAGS=${_mg_mpi_flags};MG_ARCHIVE=$<TARGET_FILE:memgrad_dist>")
  unset(_mg_mpi_flags)
endif()
