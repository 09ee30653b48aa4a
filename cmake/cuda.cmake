# cmake/cuda.cmake - the CUDA backend (cuda/), included from CMakeLists.txt
# once a CUDA compiler is enabled.
#
# By default (MG_CUDA_MODULE=ON) it is the module libmemgrad-cuda.so, which
# libmemgrad loads the first time a CUDA executor is asked for
# (src/backend/module.c): libmemgrad itself then links nothing from CUDA, a
# program that never asks for the GPU maps no cuBLAS, and a consumer links
# libmemgrad as a plain C library. MG_CUDA_MODULE=OFF links the backend
# into libmemgrad instead, registered at link time.

option(MG_CUDA_MODULE
  "Build the CUDA backend as a module loaded on first use (else linked in)" ON)

# One runtime, the shared one, linked explicitly as CUDA::cudart below.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(MG_HAVE_CUDA ON)
file(GLOB MG_CUDA_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/cuda/*.cu")

# cuDNN runs the convolutions where it is installed (cuda/cuda_cudnn.cu);
# without it they stay on the backend's own im2col + cuBLAS kernels.
option(MG_WITH_CUDNN "Use cuDNN for the CUDA convolutions when found" ON)
find_path(MG_CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(MG_CUDNN_LIBRARY cudnn
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
set(MG_HAVE_CUDNN OFF)
if(MG_WITH_CUDNN AND MG_CUDNN_INCLUDE_DIR AND MG_CUDNN_LIBRARY)
  set(MG_HAVE_CUDNN ON)
  message(STATUS "memgrad: cuDNN convolutions ON (${MG_CUDNN_LIBRARY})")
else()
  message(STATUS "memgrad: cuDNN convolutions OFF (cudnn.h: "
                 "${MG_CUDNN_INCLUDE_DIR}, libcudnn: ${MG_CUDNN_LIBRARY})")
endif()

# The CUDA sources' settings on whichever target holds them.
function(mg_cuda_backend_settings target)
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/cuda ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE MG_HAVE_CUDA=1)
  set_target_properties(${target} PROPERTIES
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_EXTENSIONS OFF
    CUDA_RUNTIME_LIBRARY Shared
    CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
    C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  # The C warning flags and the sanitizers are for host C code only: nvcc
  # takes neither -Wall nor -fsanitize (ASan is not for device code).
  get_target_property(_opts ${target} COMPILE_OPTIONS)
  if(_opts)
    set(_c_opts "")
    foreach(_o IN LISTS _opts)
      list(APPEND _c_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>")
    endforeach()
    set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${_c_opts}")
  endif()
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-fno-exceptions>")
  if(MG_HAVE_CUDNN)
    target_include_directories(${target} PRIVATE ${MG_CUDNN_INCLUDE_DIR})
    target_compile_definitions(${target} PRIVATE MG_HAVE_CUDNN=1)
  endif()
endfunction()

if(MG_CUDA_MODULE)
  # The module: the backend, the module entry, and the pure pieces of
  # src/common it calls (dtype names and sizes, descriptor sizes, op
  # names), its own copies, since it cannot reach libmemgrad's.
  add_library(memgrad_cuda MODULE ${MG_CUDA_SOURCES}
    "${PROJECT_SOURCE_DIR}/cuda/cuda_module.c"
    "${PROJECT_SOURCE_DIR}/src/common/tdesc.c"
    "${PROJECT_SOURCE_DIR}/src/common/op_names.c")
  mg_target_settings(memgrad_cuda)
  mg_cuda_backend_settings(memgrad_cuda)
  set_target_properties(memgrad_cuda PROPERTIES
    OUTPUT_NAME memgrad-cuda
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}")
  # Nothing but its entry leaves the module: its copies of public
  # functions (mg_set_error, mg_dtype_name) must not stand in for the
  # library's, nor the library's for them.
  target_compile_definitions(memgrad_cuda PRIVATE "MG_API=")
  target_link_libraries(memgrad_cuda PRIVATE CUDA::cudart CUDA::cublas m)
  if(MG_HAVE_CUDNN)
    target_link_libraries(memgrad_cuda PRIVATE ${MG_CUDNN_LIBRARY})
  endif()
  # libmemgrad finds it beside itself (or beside the program a static
  # libmemgrad is in), in $MEMGRAD_BACKEND_DIR, or where it was installed.
  target_compile_definitions(memgrad PRIVATE MG_HAVE_CUDA=1 MG_CUDA_MODULE=1
    MG_MODULE_INSTALL_DIR="${CMAKE_INSTALL_FULL_LIBDIR}")
  find_package(Threads REQUIRED)
  target_link_libraries(memgrad PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
  add_dependencies(memgrad memgrad_cuda)
  install(TARGETS memgrad_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  if(MG_PYTHON_WHEEL)
    install(TARGETS memgrad_cuda LIBRARY DESTINATION lib
            COMPONENT memgrad_python)
  endif()
  set(MG_PC_LIBS_CUDA "-ldl -lpthread")
  set(MG_CUDA_MODULE_BUILT ON)
  message(STATUS "memgrad: CUDA backend as the module libmemgrad-cuda.so")
else()
  target_sources(memgrad PRIVATE ${MG_CUDA_SOURCES})
  mg_cuda_backend_settings(memgrad)
  # In this build tree, the imported targets; in the installed package,
  # the libraries' absolute paths, so memgradConfig.cmake needs no
  # find_dependency(CUDAToolkit) for consumers to link them.
  foreach(_lib IN ITEMS cudart cublas)
    target_link_libraries(memgrad PRIVATE
      "$<BUILD_INTERFACE:CUDA::${_lib}>"
      "$<INSTALL_INTERFACE:${CUDA_${_lib}_LIBRARY}>")
  endforeach()
  # nvcc's objects call the C++ runtime (static-local guards): a C
  # consumer of a static libmemgrad links it too.
  target_link_libraries(memgrad PRIVATE stdc++)
  set(MG_PC_LIBS_CUDA "-L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart -lstdc++")
  if(MG_HAVE_CUDNN)
    target_link_libraries(memgrad PRIVATE ${MG_CUDNN_LIBRARY})
    get_filename_component(_mg_dnn_dir "${MG_CUDNN_LIBRARY}" DIRECTORY)
    string(APPEND MG_PC_LIBS_CUDA " -L${_mg_dnn_dir} -lcudnn")
  endif()
  message(STATUS "memgrad: CUDA backend linked into libmemgrad")
endif()

# At the end of this directory, once the targets and memgrad.pc exist:
# test_cuda allocates device memory for its bindings, and memgrad.pc
# (configured in the install section) gains what the backend needs.
function(mg_cuda_finish)
  if(TARGET test_cuda)
    target_compile_definitions(test_cuda PRIVATE MG_HAVE_CUDA=1)
    target_link_libraries(test_cuda PRIVATE CUDA::cudart)
    set_tests_properties(test_cuda PROPERTIES TIMEOUT 1200 SKIP_RETURN_CODE 77)
  endif()
  # test_module checks that nothing from CUDA is mapped until asked for.
  if(TARGET test_module AND MG_CUDA_MODULE)
    target_compile_definitions(test_module PRIVATE MG_CUDA_MODULE=1)
  endif()
  # test_backend_table also checks the CUDA kernels' workspace queries.
  if(TARGET test_backend_table)
    target_compile_definitions(test_backend_table PRIVATE MG_HAVE_CUDA=1)
  endif()
  string(APPEND MG_PC_LIBS_EXTRA " ${MG_PC_LIBS_CUDA}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/memgrad.pc.in"
                 "${PROJECT_BINARY_DIR}/memgrad.pc" @ONLY)
endfunction()
cmake_language(DEFER CALL mg_cuda_finish)
