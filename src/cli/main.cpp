// flowline: run, validate and inspect YAML flows. See `flowline --help`.
#include "launcher.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int code = flowline::cli::run(argc, argv);
  // By now every flow is closed and every output file written and closed. Ending the process here skips
  // the destructors of static objects, above all LibTorch's operator registry, which unregisters thousands
  // of kernels one by one (about 0.13 s on a 2-core machine) only to free memory the kernel takes back.
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(code);
}
