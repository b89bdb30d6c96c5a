// The `flowline` launcher's commands, kept in a library so main() stays one line and tests can call them.
#pragma once

#include "flowline/error.hpp"
#include "flowline/flow.hpp"

#include <string>
#include <vector>

namespace flowline::cli {

// Exit codes of the launcher.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // something failed while running
inline constexpr int kExitUsage = 2;    // bad command line, bad flow file, input that cannot be opened

// Parses argv and runs the command. Never throws; prints errors to stderr.
int run(int argc, char** argv);

// Prints a flow configuration's diagnostics (file:line:column: message) and their count to stderr.
void print_config_error(const ConfigError& e);
// Prints what went wrong loading a flow or reading a command's options: a ConfigError as
// print_config_error() does, any other flowline::Error as "error: MESSAGE".
void print_load_error(const Error& e);
// Loads a flow file and applies --set overrides (EXECUTOR.PARAM=VALUE), validating again when there are
// any. Throws ConfigError.
FlowConfig load_flow_with_sets(const std::string& file, const std::vector<std::string>& sets);
// Starts the flow. Returns kExitOk, or prints what went wrong and returns the exit code: kExitUsage for
// a bad config, kExitFailure when an executor could not be constructed.
int start_flow(Flow& flow);

}  // namespace flowline::cli
