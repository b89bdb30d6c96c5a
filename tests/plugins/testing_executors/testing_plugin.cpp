// Entry point of the plugin libflowline_testing_executors.so: Delay, FailIf, LateSink and SetTags for flows run by
// the launcher in tests and benchmarks (`plugins: [testing_executors]`).
#include "testing_executors.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::testing::register_testing_executors(registry, "testing_executors plugin"); }
