# cmake/onednn.cmake - oneDNN for the CPU convolutions and pooling (issue
# 14), and the OpenMP runtime oneDNN's Debian build already uses, so that
# memgrad's own threaded kernels share its thread pool instead of spinning
# against it.
#
# Found through oneDNN's CMake config (Debian's libdnnl-dev installs it).
# MG_WITH_ONEDNN defaults to ON when it is found; without it the CPU
# backend convolves by im2col + OpenBLAS GEMM, as it always can (and does
# for f64, which oneDNN's CPU convolutions do not take).
find_package(dnnl CONFIG QUIET)
if(TARGET DNNL::dnnl)
  set(MG_ONEDNN_FOUND ON)
else()
  set(MG_ONEDNN_FOUND OFF)
endif()
option(MG_WITH_ONEDNN "Run CPU convolutions and pooling through oneDNN (default: ON when found)"
       ${MG_ONEDNN_FOUND})
set(MG_HAVE_ONEDNN OFF)
if(MG_WITH_ONEDNN AND NOT MG_ONEDNN_FOUND)
  message(WARNING "MG_WITH_ONEDNN is ON but oneDNN's CMake config (package "
                  "libdnnl-dev) was not found: convolutions use im2col")
elseif(MG_WITH_ONEDNN)
  set(MG_HAVE_ONEDNN ON)
  target_compile_definitions(memgrad PRIVATE MG_HAVE_ONEDNN=1)
  # In the installed package, the library's absolute path, so that
  # memgradConfig.cmake needs no find_dependency(dnnl) (whose config also
  # wants OpenCL) for a consumer of the static libmemgrad to link it.
  get_target_property(_mg_dnnl_cfgs DNNL::dnnl IMPORTED_CONFIGURATIONS)
  list(GET _mg_dnnl_cfgs 0 _mg_dnnl_cfg)
  get_target_property(MG_DNNL_LIBRARY DNNL::dnnl IMPORTED_LOCATION_${_mg_dnnl_cfg})
  target_link_libraries(memgrad PRIVATE
    "$<BUILD_INTERFACE:DNNL::dnnl>"
    "$<INSTALL_INTERFACE:${MG_DNNL_LIBRARY}>")
  get_filename_component(MG_DNNL_LIBDIR "${MG_DNNL_LIBRARY}" DIRECTORY)
  # memgrad.pc names it too. The install section, further down, sets
  # MG_PC_LIBS_EXTRA and writes memgrad.pc: append and rewrite at the end
  # of the directory (deferred calls run in its scope, in order, before the
  # CUDA section's own deferred rewrite, which keeps what is here).
  cmake_language(DEFER CALL string APPEND MG_PC_LIBS_EXTRA
                 " -L${MG_DNNL_LIBDIR} -ldnnl")
  cmake_language(DEFER CALL configure_file
                 "${PROJECT_SOURCE_DIR}/cmake/memgrad.pc.in"
                 "${PROJECT_BINARY_DIR}/memgrad.pc" @ONLY)
  unset(_mg_dnnl_cfgs)
  unset(_mg_dnnl_cfg)
endif()
message(STATUS "memgrad: oneDNN convolutions ${MG_HAVE_ONEDNN}")

# OpenMP for memgrad's own CPU kernels (elementwise, norms, ...): the same
# runtime (libgomp) that Debian's oneDNN runs its threads on, so both share
# one thread pool; OMP_NUM_THREADS sets the count for both. OpenBLAS
# (Debian's pthreads build) keeps its own pool: it and the OpenMP regions
# run one after another, never at once. Without OpenMP the kernels run on
# one thread (the pragmas are behind _OPENMP, cpu_kernels.h).
find_package(OpenMP COMPONENTS C)
if(OpenMP_C_FOUND)
  target_link_libraries(memgrad PRIVATE
    "$<BUILD_INTERFACE:OpenMP::OpenMP_C>"
    "$<INSTALL_INTERFACE:${OpenMP_C_LIBRARIES}>")
  set_property(TARGET memgrad APPEND PROPERTY INTERFACE_LINK_OPTIONS
               "$<BUILD_INTERFACE:${OpenMP_C_FLAGS}>")
  cmake_language(DEFER CALL string APPEND MG_PC_LIBS_EXTRA " ${OpenMP_C_FLAGS}")
  cmake_language(DEFER CALL configure_file
                 "${PROJECT_SOURCE_DIR}/cmake/memgrad.pc.in"
                 "${PROJECT_BINARY_DIR}/memgrad.pc" @ONLY)
endif()
message(STATUS "memgrad: OpenMP kernels ${OpenMP_C_FOUND}")

# The tests run both convolution and both pooling paths: the suites that
# convolve or pool run once more with MG_CONV=im2col and MG_POOL=loops
# (the plain runs take oneDNN where it is built in; test_onednn compares
# the paths directly). At the end of the
# directory, once the test targets exist.
function(mg_onednn_tests)
  # test_threads sets the thread count as OMP_NUM_THREADS would
  if(TARGET test_threads AND OpenMP_C_FOUND)
    target_link_libraries(test_threads PRIVATE OpenMP::OpenMP_C)
  endif()
  if(NOT MG_HAVE_ONEDNN OR NOT MG_BUILD_TESTS)
    return()
  endif()
  foreach(_t IN ITEMS test_ops test_gradcheck test_models test_checkpoint
                      test_backend_table)
    if(TARGET ${_t})
      add_test(NAME ${_t}_im2col COMMAND ${_t})
      set_tests_properties(${_t}_im2col PROPERTIES
        ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;MG_CONV=im2col;MG_POOL=loops")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL mg_onednn_tests)
