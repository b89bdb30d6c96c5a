# Sanitizer and fuzzing builds (issue 16). Included by the top-level CMakeLists.txt before any target, so
# the flags reach every target alike (libraries, plugins, tests and their precompiled headers).
#
#   FLOWLINE_SANITIZE   "" (default), "address,undefined" or "thread": compiles and links everything with
#                       -fsanitize=<that>. UBSan stops at the first report (-fno-sanitize-recover), so a
#                       test with undefined behaviour fails. LibTorch, yaml-cpp and Boost's compiled parts
#                       are not instrumented (they come prebuilt): ASan still sees their heap through its
#                       malloc, TSan does not see their internal synchronisation (docs/testing.md says what
#                       that excludes).
#   FLOWLINE_FUZZ       ON: libFuzzer targets in tests/fuzz (Clang only). Implies FLOWLINE_SANITIZE
#                       "address,undefined" unless set otherwise, and instruments everything for coverage.
option(FLOWLINE_FUZZ "Build the libFuzzer targets in tests/fuzz (Clang)" OFF)
set(FLOWLINE_SANITIZE "" CACHE STRING "Sanitizers for every target: address,undefined | thread | empty")
set_property(CACHE FLOWLINE_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

if(FLOWLINE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FLOWLINE_FUZZ needs Clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(FLOWLINE_SANITIZE STREQUAL "")
    set(FLOWLINE_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(NOT FLOWLINE_SANITIZE STREQUAL "")
  if(NOT FLOWLINE_SANITIZE MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "FLOWLINE_SANITIZE='${FLOWLINE_SANITIZE}': expected address,undefined or thread")
  endif()
  set(_flowline_san -fsanitize=${FLOWLINE_SANITIZE} -fno-omit-frame-pointer)
  if(FLOWLINE_SANITIZE MATCHES "undefined")
    list(APPEND _flowline_san -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_flowline_san})
  add_link_options(${_flowline_san})
  add_compile_definitions(FLOWLINE_SANITIZED)
  message(STATUS "flowline: sanitizers ${FLOWLINE_SANITIZE}")
endif()
