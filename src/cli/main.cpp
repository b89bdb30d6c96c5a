// flowline: run, validate and inspect YAML flows. See `flowline --help`.
#include "launcher.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#ifdef FLOWLINE_JEMALLOC
// jemalloc's settings (src/CMakeLists.txt says why jemalloc), read when it starts; MALLOC_CONF in the
// environment overrides them. oversize_threshold:0 keeps large blocks (activation tensors of several MiB)
// in the ordinary arenas, whose freed pages are reused until they decay (10 s), instead of a dedicated
// arena that returns them at once, so that every batch faults them in again; background_thread:true
// returns decayed pages from jemalloc's own thread (every signal blocked there, so SIGINT and SIGTERM still
// reach the launcher's sigwait()). CPU encoder, 2 cores: 172 docs/s with both, 130 with jemalloc's
// defaults, 150-163 with glibc's malloc (bench/cpu_allocator.py). `flowline serve` shortens the decay to
// 1 s at its start (serve.cpp: freed request bodies kept 10 s passed the gateway's memory bounds).
extern "C" const char* malloc_conf = "oversize_threshold:0,background_thread:true";
#endif

int main(int argc, char** argv) {
  const int code = flowline::cli::run(argc, argv);
  spdlog::debug("ending the process (exit code {})", code);
  // By now every flow is closed and every output file written and closed. Ending the process here skips
  // the destructors of static objects, above all LibTorch's operator registry, which unregisters thousands
  // of kernels one by one (about 0.13 s on a 2-core machine) only to free memory the kernel takes back.
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(code);
}
