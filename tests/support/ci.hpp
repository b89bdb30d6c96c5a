// Whether the tests run under CI, where a missing prerequisite (a client venv, Python's `tokenizers`) fails
// its test instead of skipping it. LibTorch-free and header-only, so that test programs that do not link
// flowline_test_main (test_tokenizers) read the same rule as those that do.
#pragma once

#include <cstdlib>
#include <string_view>

namespace flowline::testing {

// True when the environment variable CI is "true" or "1" (as CI services set it); false when it is unset or
// anything else. Reads the environment on every call; callable from any thread that does not change it.
inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string_view(ci) == "true" || std::string_view(ci) == "1");
}

}  // namespace flowline::testing
