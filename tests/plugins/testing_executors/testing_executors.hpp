// The test and benchmark executors Delay, FailIf, LateSink and SetTags. Tests that run flows in their own process
// call register_testing_executors() (tests/support does it for Registry::global()); the launcher and the
// benchmarks load the same code as the plugin libflowline_testing_executors.so through a flow's `plugins:`.
#pragma once

#include "flowline/registry.hpp"

#include <string>

namespace flowline::testing {

// Adds Delay, FailIf, LateSink and SetTags to `registry`, with `origin` as their origin. Not thread-safe against a
// concurrent add of the same names (Registry::add throws on a duplicate).
void register_testing_executors(Registry& registry, const std::string& origin = "tests");

}  // namespace flowline::testing
