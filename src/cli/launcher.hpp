// The `flowline` launcher's commands, kept in a library so main() stays one line and tests can call them.
#pragma once

namespace flowline {
class ConfigError;
}

namespace flowline::cli {

// Exit codes of the launcher.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // something failed while running
inline constexpr int kExitUsage = 2;    // bad command line, bad flow file, input that cannot be opened

// Parses argv and runs the command. Never throws; prints errors to stderr.
int run(int argc, char** argv);

// Prints a flow configuration's diagnostics (file:line:column: message) and their count to stderr.
void print_config_error(const ConfigError& e);

}  // namespace flowline::cli
