# nccl.cmake - the NCCL transport of memgrad_dist (issue 16): gradients on
# CUDA devices averaged over NCCL behind the same memgrad_dist.h calls
# (src/dist/nccl/, mg_dist_comm_from_nccl), and its GPU test. Included by
# dist.cmake once memgrad_dist exists (so MPI was found). Built only where
# both the CUDA backend (MG_HAVE_CUDA) and NCCL are found; otherwise
# memgrad_dist is the MPI-only library it always was.
#
# Either way it writes memgrad_dist_config.h, which memgrad_dist.h includes
# and which defines MG_HAVE_NCCL where the NCCL code is built in, so that a
# caller's code can tell (#ifdef MG_HAVE_NCCL), and memgradDistFeatures.cmake,
# which sets memgrad_HAVE_NCCL for find_package(memgrad) callers.

set(MG_HAVE_NCCL OFF)
set(MG_NCCL_LINK_LIBS "") # what links the NCCL objects (dist.cmake's shared check)
if(MG_HAVE_CUDA)
  # NCCL ships with the CUDA toolkit here (/usr/local/cuda); elsewhere it is
  # a package of its own (libnccl-dev, NCCL_HOME, a pkg-config file).
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(PC_NCCL QUIET nccl)
  endif()
  find_path(MG_NCCL_INCLUDE_DIR nccl.h
    HINTS ${PC_NCCL_INCLUDE_DIRS} ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(MG_NCCL_LIBRARY nccl
    HINTS ${PC_NCCL_LIBRARY_DIRS} ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(MG_NCCL_INCLUDE_DIR AND MG_NCCL_LIBRARY)
    set(MG_NCCL_FOUND ON)
  else()
    set(MG_NCCL_FOUND OFF)
  endif()
  option(MG_WITH_NCCL "Build the NCCL transport of memgrad_dist (default: ON when NCCL is found)"
         ${MG_NCCL_FOUND})
  if(MG_WITH_NCCL AND NOT MG_NCCL_FOUND)
    message(WARNING "MG_WITH_NCCL is ON but nccl.h / libnccl were not found "
                    "(set NCCL_HOME): memgrad_dist is built without NCCL")
  elseif(MG_WITH_NCCL)
    set(MG_HAVE_NCCL ON)
  endif()
endif()

set(MG_DIST_CONFIG_DIR "${PROJECT_BINARY_DIR}/include")
configure_file("${PROJECT_SOURCE_DIR}/cmake/memgrad_dist_config.h.in"
               "${MG_DIST_CONFIG_DIR}/memgrad_dist_config.h")
target_include_directories(memgrad_dist PUBLIC
  $<BUILD_INTERFACE:${MG_DIST_CONFIG_DIR}>)
install(FILES "${MG_DIST_CONFIG_DIR}/memgrad_dist_config.h"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
file(CONFIGURE OUTPUT "${PROJECT_BINARY_DIR}/memgradDistFeatures.cmake"
  CONTENT "# memgradDistFeatures.cmake - what memgrad::dist was built with (cmake/nccl.cmake)\nset(memgrad_HAVE_NCCL @MG_HAVE_NCCL@)\n"
  @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/memgradDistFeatures.cmake"
  DESTINATION ${MG_CMAKE_INSTALL_DIR})

if(NOT MG_HAVE_NCCL)
  message(STATUS "memgrad: NCCL transport OFF (needs the CUDA backend and "
                 "nccl.h / libnccl)")
  return()
endif()
message(STATUS "memgrad: NCCL transport ON (${MG_NCCL_LIBRARY})")

# The NCCL files sit in a directory of their own, which the MPI-only glob
# (src/dist/*.c) never sees.
file(GLOB MG_NCCL_SOURCES CONFIGURE_DEPENDS
     "${PROJECT_SOURCE_DIR}/src/dist/nccl/*.c"
     "${PROJECT_SOURCE_DIR}/src/dist/nccl/*.cu")
target_sources(memgrad_dist PRIVATE ${MG_NCCL_SOURCES})
target_include_directories(memgrad_dist PRIVATE ${MG_NCCL_INCLUDE_DIR})
set_target_properties(memgrad_dist PROPERTIES
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_EXTENSIONS OFF
  CUDA_RUNTIME_LIBRARY Shared
  CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
  CUDA_VISIBILITY_PRESET hidden)
# mg_target_settings gave the target C warning flags; nvcc takes none of
# them: keep them for C only, and warn through the host compiler.
get_target_property(_mg_opts memgrad_dist COMPILE_OPTIONS)
if(_mg_opts)
  set(_mg_c_opts "")
  foreach(_o IN LISTS _mg_opts)
    list(APPEND _mg_c_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>")
  endforeach()
  set_target_properties(memgrad_dist PROPERTIES COMPILE_OPTIONS "${_mg_c_opts}")
endif()
target_compile_options(memgrad_dist PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-fno-exceptions>")
unset(_mg_opts)
unset(_mg_c_opts)
# Absolute paths in the installed package, as for libmemgrad's CUDA
# libraries, so that memgradConfig.cmake needs no find_dependency.
target_link_libraries(memgrad_dist PRIVATE
  "$<BUILD_INTERFACE:CUDA::cudart>"
  "$<INSTALL_INTERFACE:${CUDA_cudart_LIBRARY}>"
  "${MG_NCCL_LIBRARY}")
set(MG_NCCL_LINK_LIBS CUDA::cudart "${MG_NCCL_LIBRARY}")

# The GPU test: 2 ranks, one GPU each; test_dist.c compiled a second time
# for the NCCL transport (MG_TEST_DIST_NCCL). Without a CUDA device (or with
# fewer devices than ranks) it checks that mg_dist_comm_from_nccl refuses
# cleanly on every rank, prints "skipped: no CUDA device" and exits 77, which
# ctest lists as skipped, as it does test_cuda: its GPU cases did not run.
if(MG_BUILD_TESTS)
  set(_mg_src "${PROJECT_SOURCE_DIR}/tests/test_dist.c")
  add_executable(test_dist_nccl "${_mg_src}")
  mg_target_settings(test_dist_nccl)
  target_compile_definitions(test_dist_nccl PRIVATE MG_TEST_DIST_NCCL=1)
  target_include_directories(test_dist_nccl PRIVATE ${MG_NCCL_INCLUDE_DIR})
  target_link_libraries(test_dist_nccl PRIVATE memgrad::dist CUDA::cudart
                        PkgConfig::CHECK m)
  add_test(NAME test_dist_nccl COMMAND ${MG_MPIRUN} $<TARGET_FILE:test_dist_nccl>)
  set_tests_properties(test_dist_nccl PROPERTIES
    TIMEOUT 300
    SKIP_RETURN_CODE 77
    ENVIRONMENT "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-openmpi.supp:print_suppressions=0")
  if(MG_SANITIZE)
    # As for test_dist (dist.cmake): Open MPI has no frame pointers.
    set_tests_properties(test_dist_nccl PROPERTIES ENVIRONMENT_MODIFICATION
      "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
  endif()
  unset(_mg_src)
endif()
