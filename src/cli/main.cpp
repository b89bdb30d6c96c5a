// flowline: run, validate and inspect YAML flows. See `flowline --help`.
#include "launcher.hpp"

#include <spdlog/spdlog.h>

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// glibc raises its mmap threshold every time a large block it mmapped is freed (up to 32 MiB), so a CPU
// encoder's activation tensors of a few MiB move into the heap one size at a time and the heap keeps what
// fragmentation leaves: RSS climbed in steps for five minutes (656 -> 975 MiB) before levelling off.
// Fixing the threshold at that ceiling from the start gives the same steady state at once, and was as fast
// or faster (bench/cpu_allocator.py; docs/benchmarks.md). A user's own malloc tunables win: with
// GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072 RSS stays near 250 MiB at about 30% less speed.
void settle_malloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      (tunables != nullptr && std::strstr(tunables, "mmap_threshold") != nullptr))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
}

}  // namespace

int main(int argc, char** argv) {
  settle_malloc();
  const int code = flowline::cli::run(argc, argv);
  // By now every flow is closed and every output file written and closed. Ending the process here skips
  // the destructors of static objects, above all LibTorch's operator registry, which unregisters thousands
  // of kernels one by one (about 0.13 s on a 2-core machine) only to free memory the kernel takes back.
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(code);
}
