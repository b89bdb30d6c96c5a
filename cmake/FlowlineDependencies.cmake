# Finds flowline's dependencies. Used by the build and by the installed package config, so a consumer
# of flowline::core gets the same LibTorch, Boost, yaml-cpp, fmt and spdlog the library was built with.
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)

# LibTorch comes from the PyPI torch wheel. Where, in this order: FLOWLINE_TORCH_DIR (the wheel's torch
# folder), Torch_DIR (its share/cmake/Torch folder, as for find_package(Torch)), the share/cmake folder on
# CMAKE_PREFIX_PATH (scripts/setup.sh passes it), and, for the installed package, the LibTorch flowline was
# built against (FLOWLINE_BUILT_TORCH_DIR, set by flowlineConfig.cmake).
#
# flowline_torch_cpu is LibTorch without CUDA: c10 and torch_cpu. flowline::core, the launcher and the
# executors' CPU parts link only this, so a process maps no CUDA library until a flow names a GPU.
# Found here rather than through TorchConfig.cmake, which needs a CUDA toolkit for the CUDA wheel.
if(NOT TARGET flowline_torch_cpu)
  if(NOT FLOWLINE_TORCH_DIR AND Torch_DIR AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
    get_filename_component(_torch_dir "${Torch_DIR}/../../.." ABSOLUTE)
    set(FLOWLINE_TORCH_DIR "${_torch_dir}" CACHE PATH "The torch folder of the PyPI wheel (LibTorch)" FORCE)
  endif()
  if(NOT FLOWLINE_TORCH_DIR)
    foreach(_prefix IN LISTS CMAKE_PREFIX_PATH)
      if(EXISTS "${_prefix}/Torch/TorchConfig.cmake")
        get_filename_component(_torch_dir "${_prefix}/../.." ABSOLUTE)
        set(FLOWLINE_TORCH_DIR "${_torch_dir}" CACHE PATH "The torch folder of the PyPI wheel (LibTorch)" FORCE)
        break()
      endif()
    endforeach()
  endif()
  if(NOT FLOWLINE_TORCH_DIR AND FLOWLINE_BUILT_TORCH_DIR AND EXISTS "${FLOWLINE_BUILT_TORCH_DIR}/lib")
    set(FLOWLINE_TORCH_DIR "${FLOWLINE_BUILT_TORCH_DIR}" CACHE PATH "The torch folder of the PyPI wheel (LibTorch)"
      FORCE)
  endif()
  if(FLOWLINE_TORCH_DIR)
    find_library(FLOWLINE_TORCH_CPU_LIBRARY torch_cpu PATHS "${FLOWLINE_TORCH_DIR}/lib" NO_DEFAULT_PATH)
    find_library(FLOWLINE_C10_LIBRARY c10 PATHS "${FLOWLINE_TORCH_DIR}/lib" NO_DEFAULT_PATH)
  endif()
  if(NOT FLOWLINE_TORCH_CPU_LIBRARY OR NOT FLOWLINE_C10_LIBRARY)
    string(CONCAT _torch_how "Point CMake at the torch wheel of a Python environment: -DTorch_DIR=<venv>/lib/python3.X/"
      "site-packages/torch/share/cmake/Torch, or add <venv>/lib/python3.X/site-packages/torch/share/cmake to "
      "CMAKE_PREFIX_PATH (`python -c 'import torch; print(torch.utils.cmake_prefix_path)'` prints it; "
      "scripts/setup.sh passes it).")
    if(FLOWLINE_TORCH_DIR)
      set(_torch_what "'${FLOWLINE_TORCH_DIR}/lib' holds no libtorch_cpu.so and libc10.so.")
    elseif(FLOWLINE_BUILT_TORCH_DIR)
      set(_torch_what "flowline was built against LibTorch in '${FLOWLINE_BUILT_TORCH_DIR}', which is no longer there.")
    else()
      set(_torch_what "Neither Torch_DIR nor CMAKE_PREFIX_PATH names one.")
    endif()
    message(FATAL_ERROR "LibTorch not found. ${_torch_what} ${_torch_how}")
  endif()
  add_library(flowline_torch_cpu INTERFACE IMPORTED GLOBAL)
  set_target_properties(flowline_torch_cpu PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${FLOWLINE_TORCH_DIR}/include;${FLOWLINE_TORCH_DIR}/include/torch/csrc/api/include"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${FLOWLINE_TORCH_DIR}/include;${FLOWLINE_TORCH_DIR}/include/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${FLOWLINE_TORCH_CPU_LIBRARY};${FLOWLINE_C10_LIBRARY}")
  set(TORCH_INSTALL_PREFIX "${FLOWLINE_TORCH_DIR}")
endif()

# FLOWLINE_CUDA: whether to build flowline's CUDA parts (libflowline_cuda.so and the executors' GPU code),
# which link LibTorch's CUDA library and are loaded only when a flow names a GPU. AUTO builds them where a
# CUDA toolkit is found. They need TorchConfig.cmake's `torch` target (torch_cpu, torch_cuda, c10_cuda).
set(FLOWLINE_CUDA AUTO CACHE STRING "Build flowline's CUDA parts: AUTO (where a CUDA toolkit is found), ON, OFF")
set_property(CACHE FLOWLINE_CUDA PROPERTY STRINGS AUTO ON OFF)
if(NOT DEFINED FLOWLINE_WITH_CUDA)
  set(FLOWLINE_WITH_CUDA OFF)
  if(FLOWLINE_CUDA STREQUAL "AUTO")
    find_package(CUDAToolkit QUIET)
    # nvcc too: flowline's own kernels (src/models/cuda/kernels.cu) are compiled with it.
    if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${FLOWLINE_TORCH_DIR}/lib/libtorch_cuda.so")
      set(FLOWLINE_WITH_CUDA ON)
    endif()
  elseif(FLOWLINE_CUDA)
    set(FLOWLINE_WITH_CUDA ON)
  endif()
endif()
if(NOT FLOWLINE_DEPENDENCIES_REPORTED)
  set(FLOWLINE_DEPENDENCIES_REPORTED ON)
  message(STATUS "flowline: LibTorch in ${FLOWLINE_TORCH_DIR}; CUDA parts (FLOWLINE_CUDA=${FLOWLINE_CUDA}): ${FLOWLINE_WITH_CUDA}")
endif()
if(FLOWLINE_WITH_CUDA AND NOT TARGET torch)
  # Torch's CMake warns about kineto and CUDA architectures: harmless.
  find_package(Torch 2.11 REQUIRED)
endif()
# Boost.JSON: the compiled library where installed (Debian's libboost-json-dev), else its header-only form,
# compiled once into flowline::core (src/core/boost_json.cpp), as on the GPU machine.
find_package(Boost 1.81 CONFIG QUIET COMPONENTS json)
if(TARGET Boost::json)
  set(FLOWLINE_BOOST_JSON_TARGET Boost::json)
  set(FLOWLINE_BOOST_JSON_HEADER_ONLY OFF)
else()
  find_package(Boost 1.81 CONFIG REQUIRED)
  set(FLOWLINE_BOOST_JSON_TARGET Boost::headers)
  set(FLOWLINE_BOOST_JSON_HEADER_ONLY ON)
endif()
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(Threads REQUIRED)
find_package(CLI11 REQUIRED)

if(TARGET yaml-cpp::yaml-cpp)
  set(FLOWLINE_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(FLOWLINE_YAML_TARGET yaml-cpp)
endif()

# flowline_find_unpacked(TARGET PREFIX HEADER LIBRARY_NAMES PACKAGE): an imported target for a library that
# is either a Debian package or a folder unpacked from its .deb files (${PREFIX}_ROOT, as CMake variable or
# environment variable), as on the GPU machine which lacks the packages. Sets ${PREFIX}_INCLUDE and
# ${PREFIX}_LIBRARY; a library found in neither place stops the configure naming the package.
function(flowline_find_unpacked target prefix header library_names package)
  if(TARGET ${target})
    return()
  endif()
  find_path(${prefix}_INCLUDE ${header} HINTS ${${prefix}_ROOT}/usr/include $ENV{${prefix}_ROOT}/usr/include)
  find_library(${prefix}_LIBRARY NAMES ${library_names}
    HINTS ${${prefix}_ROOT}/usr/lib/x86_64-linux-gnu $ENV{${prefix}_ROOT}/usr/lib/x86_64-linux-gnu)
  if(NOT ${prefix}_INCLUDE OR NOT ${prefix}_LIBRARY)
    message(FATAL_ERROR "${header} or its library not found: install ${package} or set ${prefix}_ROOT")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${${prefix}_INCLUDE}
    INTERFACE_LINK_LIBRARIES ${${prefix}_LIBRARY})
endfunction()

flowline_find_unpacked(flowline_utf8proc FLOWLINE_UTF8PROC utf8proc.h utf8proc libutf8proc-dev)
# PCRE2 (its 32-bit library, matching the tokenizers' UTF-32 text in place; UTF, Unicode properties, JIT):
# the regular expressions of tokenizer.json (ByteLevel's and Split's patterns, Replace with a Regex); only
# flowline::tokenizers uses it.
flowline_find_unpacked(flowline_pcre2 FLOWLINE_PCRE2 pcre2.h pcre2-32 libpcre2-dev)
# prometheus-cpp's core only (the metrics and their text format, not its HTTP exposer); only
# flowline::gateway uses it.
flowline_find_unpacked(flowline_prometheus FLOWLINE_PROMETHEUS prometheus/registry.h
  "prometheus-cpp-core;libprometheus-cpp-core.so.1.0" prometheus-cpp-dev)

# Dragonbox (Debian's libdragonbox-dev; its to_chars is a small static, position-independent library): the
# shortest round-trip text of a float in ~19 ns against std::to_chars' ~32 (this machine), for the rows of
# floats that JSON answers and JSONL files carry (src/core/json_document.cpp). Optional: without it those
# rows are written by std::to_chars, the same values in another spelling. FLOWLINE_DRAGONBOX_ROOT: a folder
# unpacked from its .deb (the GPU machine).
if(NOT TARGET flowline_dragonbox)
  find_path(FLOWLINE_DRAGONBOX_INCLUDE dragonbox/dragonbox_to_chars.h
    HINTS ${FLOWLINE_DRAGONBOX_ROOT}/usr/include $ENV{FLOWLINE_DRAGONBOX_ROOT}/usr/include
    PATH_SUFFIXES dragonbox-1.1.3 dragonbox-1.1.2 dragonbox-1.1.1 dragonbox-1.1.0)
  find_library(FLOWLINE_DRAGONBOX_LIBRARY NAMES dragonbox_to_chars
    HINTS ${FLOWLINE_DRAGONBOX_ROOT}/usr/lib/x86_64-linux-gnu $ENV{FLOWLINE_DRAGONBOX_ROOT}/usr/lib/x86_64-linux-gnu)
  if(FLOWLINE_DRAGONBOX_INCLUDE AND FLOWLINE_DRAGONBOX_LIBRARY)
    add_library(flowline_dragonbox INTERFACE IMPORTED GLOBAL)
    set_target_properties(flowline_dragonbox PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES ${FLOWLINE_DRAGONBOX_INCLUDE}
      INTERFACE_LINK_LIBRARIES ${FLOWLINE_DRAGONBOX_LIBRARY})
    message(STATUS "flowline: floats written by Dragonbox (${FLOWLINE_DRAGONBOX_LIBRARY})")
  else()
    message(STATUS "flowline: floats written by std::to_chars (libdragonbox-dev not found)")
  endif()
endif()

# Under add_subdirectory the targets found here must be visible to the parent project too, since
# flowline::core's interface names them (flowline_torch_cpu, fmt::fmt, Boost, ...).
get_property(_flowline_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
foreach(_target IN LISTS _flowline_imported)
  get_target_property(_global ${_target} IMPORTED_GLOBAL)
  if(NOT _global)
    set_target_properties(${_target} PROPERTIES IMPORTED_GLOBAL TRUE)
  endif()
endforeach()

# The torch wheel ships fmt 12 headers in its include folder, which would shadow the system fmt that
# spdlog is built for. A folder holding only a link to the system fmt headers goes first on the include
# path of everything that uses flowline. (Core ATen headers do not include fmt.)
if(NOT TARGET flowline_fmt_first)
  get_target_property(_flowline_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _flowline_fmt_dirs)
    set(_flowline_fmt_dirs /usr/include)
  endif()
  find_path(FLOWLINE_FMT_INCLUDE fmt/format.h PATHS ${_flowline_fmt_dirs} /usr/include NO_DEFAULT_PATH)
  set(_flowline_fmt_shadow ${CMAKE_BINARY_DIR}/flowline-fmt-first)
  file(MAKE_DIRECTORY ${_flowline_fmt_shadow})
  if(NOT EXISTS ${_flowline_fmt_shadow}/fmt)
    file(CREATE_LINK ${FLOWLINE_FMT_INCLUDE}/fmt ${_flowline_fmt_shadow}/fmt SYMBOLIC)
  endif()
  add_library(flowline_fmt_first INTERFACE IMPORTED GLOBAL)
  set_target_properties(flowline_fmt_first PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${_flowline_fmt_shadow})
endif()
