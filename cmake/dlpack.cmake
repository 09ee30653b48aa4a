# DLPack (Debian libdlpack-dev): the header memgrad_dlpack.h and
# src/exec/dlpack.c include. Header-only; found through its CMake config.
find_package(dlpack CONFIG REQUIRED)
get_target_property(MG_DLPACK_INCLUDE dlpack::dlpack
                    INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(memgrad PRIVATE ${MG_DLPACK_INCLUDE})
install(FILES "${PROJECT_SOURCE_DIR}/include/memgrad_dlpack.h"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# A Python wheel (python/pyproject.toml) installs only the shared library,
# into the package directory, as component memgrad_python.
if(MG_PYTHON_WHEEL)
  install(TARGETS memgrad LIBRARY DESTINATION lib COMPONENT memgrad_python)
endif()
