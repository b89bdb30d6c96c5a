// outputs.hpp — what `flowline run`, `serve` and `profile` may write, checked before a flow starts.
//
// The files a flow's executors write (parameters declared ParamSpec::output_file(), found by
// flow_outputs()) and run's --output are replaced when a run completes. So that no command silently
// replaces a complete output — serving flows/encode.yml once renamed its traffic over the main job's
// result — run and serve refuse to start while one of them exists, unless the user says --overwrite.
// profile sends them to its scratch folder instead (redirect_outputs). Called on the main thread.
#pragma once

#include "flowline/flow_config.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::cli {

// Whether the command may go on: true when none of the files exists or `overwrite`; else prints one
// line per existing file to stderr, saying how to go on, and returns false (the command exits 2).
// `output`: run's --output ("" and "-": none).
bool outputs_are_free(const FlowConfig& config, const std::string& output, bool overwrite);

// --set assignments that send every file the flow's executors write into `folder`, as
// EXECUTOR-NAME (profile's child runs: profile writes nowhere the flow names).
std::vector<std::string> redirect_outputs(const FlowConfig& config, const std::filesystem::path& folder);

}  // namespace flowline::cli
