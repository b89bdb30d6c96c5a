// Catch2 v2 (Debian) and v3 (the GPU machine) behind one include.
#pragma once
// c10 defines glog-style CHECK macros; include them first and drop CHECK so Catch's CHECK is the one used.
#include <c10/util/Logging.h>
#undef CHECK
#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <string>

// Skips the rest of a test case (GPU tests on a machine without a GPU). Catch2 v3 reports it as skipped;
// v2 has no skip, so the test passes with a warning naming the reason.
#if defined(CATCH_VERSION_MAJOR) && CATCH_VERSION_MAJOR >= 3
#define FLOWLINE_SKIP(reason) SKIP(reason)
#else
#define FLOWLINE_SKIP(reason) \
  do {                        \
    WARN(reason);             \
    return;                   \
  } while (false)
#endif

namespace flowline::testing {
// String matchers under the same names in Catch2 v2 and v3.
#if defined(CATCH_VERSION_MAJOR) && CATCH_VERSION_MAJOR >= 3
inline auto contains(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
#else
inline auto contains(const std::string& s) { return Catch::Matchers::Contains(s); }
#endif
inline auto starts_with(const std::string& s) { return Catch::Matchers::StartsWith(s); }
inline auto ends_with(const std::string& s) { return Catch::Matchers::EndsWith(s); }
}  // namespace flowline::testing
