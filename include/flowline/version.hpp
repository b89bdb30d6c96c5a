// flowline/version.hpp — compile-time and run-time version of flowline.
//
// FLOWLINE_VERSION_* are the version of the headers a program was compiled against; flowline::version()
// returns the version of the library it runs with. Plugins compare the two through the plugin API version
// (flowline/plugin.hpp), not through these numbers.
#pragma once

#include <string_view>

#define FLOWLINE_VERSION_MAJOR 0
#define FLOWLINE_VERSION_MINOR 1
#define FLOWLINE_VERSION_PATCH 0
#define FLOWLINE_VERSION_STRING "0.1.0"
// One number for comparisons: 10000 * major + 100 * minor + patch.
#define FLOWLINE_VERSION (FLOWLINE_VERSION_MAJOR * 10000 + FLOWLINE_VERSION_MINOR * 100 + FLOWLINE_VERSION_PATCH)

namespace flowline {

// The version of the flowline library loaded at run time, e.g. "0.1.0". Thread-safe.
std::string_view version() noexcept;

}  // namespace flowline
