// Names the calling thread, so that `top -H`, perf and gdb tell flowline's threads apart: "io" for the
// gateway's and executor server's I/O threads, "EXECUTOR/R" for replica R of an executor. Linux keeps the
// first 15 bytes; elsewhere this does nothing. Private to flowline: in src/common, a PRIVATE include folder
// of flowline_core and flowline_gateway (the TCP server's I/O threads use it).
#pragma once

#include <algorithm>
#include <cstring>
#include <string_view>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace flowline::runtime {

inline void name_this_thread(std::string_view name) noexcept {
#if defined(__linux__)
  char buffer[16];
  const std::size_t n = std::min(name.size(), sizeof buffer - 1);
  std::memcpy(buffer, name.data(), n);
  buffer[n] = '\0';
  pthread_setname_np(pthread_self(), buffer);
#else
  (void)name;
#endif
}

}  // namespace flowline::runtime
