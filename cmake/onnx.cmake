# onnx.cmake - ONNX import (issue 12): the memgrad_onnx library (src/onnx/*.c,
# include/memgrad_onnx.h), its protobuf-c code generated at build time from
# Debian libonnx-dev's onnx.proto, the memgrad-onnx tool, test_onnx,
# test_onnx_hostile and the fuzz harnesses. Included at the end of
# CMakeLists.txt. Without protobuf-c or onnx.proto none of it is built.

pkg_check_modules(PROTOBUFC IMPORTED_TARGET libprotobuf-c)
find_program(MG_PROTOC_C protoc-c)
# Debian's libonnx-dev installs onnx.proto (proto2, which protoc-c takes).
find_file(MG_ONNX_PROTO onnx/onnx.proto PATHS /usr/include /usr/local/include)
if(NOT PROTOBUFC_FOUND OR NOT MG_PROTOC_C OR NOT MG_ONNX_PROTO)
  message(STATUS "memgrad: protobuf-c, protoc-c or onnx.proto not found: "
                 "ONNX import not built (Debian: libprotobuf-c-dev "
                 "protobuf-c-compiler libonnx-dev)")
  foreach(_mg_t test_onnx test_onnx_hostile)
    if(TARGET ${_mg_t})
      set_target_properties(${_mg_t} PROPERTIES EXCLUDE_FROM_ALL ON)
      set_tests_properties(${_mg_t} PROPERTIES DISABLED ON)
    endif()
  endforeach()
  return()
endif()
message(STATUS "memgrad: ONNX import from ${MG_ONNX_PROTO}")

get_filename_component(_mg_proto_dir "${MG_ONNX_PROTO}" DIRECTORY)
set(MG_ONNX_GEN_DIR "${PROJECT_BINARY_DIR}/onnx-gen")
add_custom_command(
  OUTPUT "${MG_ONNX_GEN_DIR}/onnx.pb-c.c" "${MG_ONNX_GEN_DIR}/onnx.pb-c.h"
  COMMAND "${CMAKE_COMMAND}" -E make_directory "${MG_ONNX_GEN_DIR}"
  COMMAND "${MG_PROTOC_C}" "--c_out=${MG_ONNX_GEN_DIR}"
          "--proto_path=${_mg_proto_dir}" "${MG_ONNX_PROTO}"
  DEPENDS "${MG_ONNX_PROTO}"
  COMMENT "protoc-c: generating the ONNX protobuf parser from ${MG_ONNX_PROTO}"
  VERBATIM)
unset(_mg_proto_dir)

# The generated code is not ours: no -Werror on it, and its symbols stay
# hidden in the library.
add_library(memgrad_onnx_proto OBJECT "${MG_ONNX_GEN_DIR}/onnx.pb-c.c")
target_include_directories(memgrad_onnx_proto PUBLIC "${MG_ONNX_GEN_DIR}")
target_link_libraries(memgrad_onnx_proto PUBLIC PkgConfig::PROTOBUFC)
set_target_properties(memgrad_onnx_proto PROPERTIES
  C_VISIBILITY_PRESET hidden
  POSITION_INDEPENDENT_CODE ON)

file(GLOB MG_ONNX_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/onnx/*.c")
add_library(memgrad_onnx ${MG_ONNX_SOURCES}
            $<TARGET_OBJECTS:memgrad_onnx_proto>)
add_library(memgrad::onnx ALIAS memgrad_onnx)
mg_target_settings(memgrad_onnx)
target_include_directories(memgrad_onnx
  PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE
    ${PROJECT_SOURCE_DIR}/src
    "${MG_ONNX_GEN_DIR}")
target_link_libraries(memgrad_onnx PUBLIC memgrad::memgrad
                      PRIVATE PkgConfig::PROTOBUFC m)
set_target_properties(memgrad_onnx PROPERTIES
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME onnx
  C_VISIBILITY_PRESET hidden
  POSITION_INDEPENDENT_CODE ON)

install(TARGETS memgrad_onnx
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The Python wheel carries it beside libmemgrad (memgrad.onnx_import, and
# memgrad.torch's capture of what torch.fx cannot trace), finding
# libmemgrad next to itself.
if(MG_PYTHON_WHEEL)
  set_target_properties(memgrad_onnx PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS memgrad_onnx LIBRARY DESTINATION lib
          COMPONENT memgrad_python)
endif()
if(EXISTS "${PROJECT_SOURCE_DIR}/tools/memgrad_onnx.c")
  add_executable(memgrad-onnx "${PROJECT_SOURCE_DIR}/tools/memgrad_onnx.c")
  mg_target_settings(memgrad-onnx)
  target_link_libraries(memgrad-onnx PRIVATE memgrad_onnx m)
  install(TARGETS memgrad-onnx RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES "${PROJECT_SOURCE_DIR}/include/memgrad_onnx.h"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

if(MG_BUILD_TESTS AND TARGET test_onnx)
  target_link_libraries(test_onnx PRIVATE memgrad_onnx)
  target_compile_definitions(test_onnx PRIVATE
    MG_ONNX_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    MG_ONNX_FUZZ_DIR="${PROJECT_SOURCE_DIR}/tests/fuzz/regressions"
    MG_ONNX_SEED_DIR="${PROJECT_SOURCE_DIR}/tests/fuzz/seeds")
endif()
# test_onnx_hostile builds its hostile models with the generated protobuf-c
# code (the objects of memgrad_onnx_proto, and their header).
if(MG_BUILD_TESTS AND TARGET test_onnx_hostile)
  target_link_libraries(test_onnx_hostile PRIVATE memgrad_onnx
                        memgrad_onnx_proto)
endif()

# As libmemgrad: a shared memgrad_onnx exports what memgrad_onnx.h marks
# MG_API and nothing else.
if(MG_BUILD_TESTS AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
  if(BUILD_SHARED_LIBS)
    set(MG_ONNX_SHARED_TARGET memgrad_onnx)
  else()
    add_library(memgrad_onnx_shared_check SHARED
                $<TARGET_OBJECTS:memgrad_onnx>
                $<TARGET_OBJECTS:memgrad_onnx_proto>)
    target_link_libraries(memgrad_onnx_shared_check PRIVATE
                          memgrad_shared_check PkgConfig::PROTOBUFC m)
    set(MG_ONNX_SHARED_TARGET memgrad_onnx_shared_check)
  endif()
  add_test(NAME exported_symbols_onnx
    COMMAND bash "${PROJECT_SOURCE_DIR}/tests/exported_symbols/run.sh"
            "$<TARGET_FILE:${MG_ONNX_SHARED_TARGET}>"
            "${PROJECT_SOURCE_DIR}/include/memgrad_onnx.h")
  set_tests_properties(exported_symbols_onnx PROPERTIES
    ENVIRONMENT "MG_CC=${CMAKE_C_COMPILER};MG_NM=${CMAKE_NM};MG_ARCHIVE=$<TARGET_FILE:memgrad_onnx>")
endif()

if(MG_BUILD_TESTS AND TARGET memgrad-onnx)
  add_test(NAME onnx_tool
    COMMAND bash "${PROJECT_SOURCE_DIR}/tests/onnx_tool/run.sh"
            "$<TARGET_FILE:memgrad-onnx>" "${PROJECT_SOURCE_DIR}/tests/data")
  # memgrad-onnx step's RSS held to its pool (issue 28); skips (77) under
  # AddressSanitizer and without /proc/self/clear_refs
  add_test(NAME onnx_rss
    COMMAND bash "${PROJECT_SOURCE_DIR}/tests/onnx_rss/run.sh"
            "$<TARGET_FILE:memgrad-onnx>" "${PROJECT_SOURCE_DIR}/tests/data")
  set_tests_properties(onnx_rss PROPERTIES SKIP_RETURN_CODE 77)
endif()

# The libFuzzer harnesses (tests/fuzz/fuzz_onnx*.c): clang only, with
# -DMG_BUILD_FUZZ=ON, best with -DMG_SANITIZE=ON. scripts/fuzz-onnx.sh
# builds and runs them for a bounded time.
option(MG_BUILD_FUZZ "Build the libFuzzer harness of the ONNX importer (clang)" OFF)
if(MG_BUILD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MG_BUILD_FUZZ needs clang (CC=clang)")
  endif()
  # Coverage feedback from the importer and the parser it drives.
  target_compile_options(memgrad_onnx PRIVATE -fsanitize=fuzzer-no-link)
  target_compile_options(memgrad_onnx_proto PRIVATE -fsanitize=fuzzer-no-link)
  # fuzz_onnx: any bytes; fuzz_onnx_extdata: with a real external-data
  # directory (links, a FIFO, a secret outside it) for the reader and the
  # folding of what it reads.
  foreach(_mg_f fuzz_onnx fuzz_onnx_extdata)
    add_executable(${_mg_f} "${PROJECT_SOURCE_DIR}/tests/fuzz/${_mg_f}.c")
    mg_target_settings(${_mg_f})
    target_compile_options(${_mg_f} PRIVATE -fsanitize=fuzzer)
    target_link_options(${_mg_f} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${_mg_f} PRIVATE memgrad_onnx)
  endforeach()
endif()

# Models exported by torch.onnx.export against PyTorch autograd (Debian's
# python3-torch, python3-torchvision, python3-onnx). Prints "skipped" and
# passes where they are not installed; ctest shows it as skipped then.
# Not in the sanitizer build: it is numerics, a minute of convolutions that
# ASan would make several; onnx_tool runs the same memgrad-onnx paths there.
if(MG_BUILD_TESTS AND TARGET memgrad-onnx AND EXISTS /usr/bin/python3
   AND NOT MG_SANITIZE)
  add_test(NAME onnx_torch_crosscheck
    COMMAND /usr/bin/python3 "${PROJECT_SOURCE_DIR}/tests/onnx_torch_crosscheck.py"
            --tool "$<TARGET_FILE:memgrad-onnx>")
  set_tests_properties(onnx_torch_crosscheck PROPERTIES
    TIMEOUT 600
    SKIP_REGULAR_EXPRESSION "skipped: PyTorch not installed")
endif()
