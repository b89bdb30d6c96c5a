// main() of every test program: adds the test executors (Delay, FailIf, SetTags) to the global registry,
// then runs Catch2 (v2 on Debian, v3 on the GPU machine).
#include "testing_executors.hpp"

#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
int main(int argc, char** argv) {
  flowline::testing::register_testing_executors(flowline::Registry::global());
  return Catch::Session().run(argc, argv);
}
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
int main(int argc, char** argv) {
  flowline::testing::register_testing_executors(flowline::Registry::global());
  return Catch::Session().run(argc, argv);
}
#endif
