// main() of every test program: adds the test executors (Delay, FailIf, LateSink, SetTags) to the global registry,
// loads CUDA up front on a machine with an NVIDIA driver, then runs Catch2 (v2 on Debian, v3 on the GPU
// machine).
//
// LibTorch looks for its CUDA backend once per process: a CPU test that touches it before a GPU test has
// loaded CUDA would leave CUDA off for the rest of the program. Loading first keeps test order free.
#include "testing_executors.hpp"

#include "flowline/device.hpp"

#include <filesystem>

#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) {
  flowline::testing::register_testing_executors(flowline::Registry::global());
  if (std::filesystem::exists("/dev/nvidiactl")) flowline::load_cuda();
  return Catch::Session().run(argc, argv);
}
