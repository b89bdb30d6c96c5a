// run.hpp — `flowline run`: post the documents of an input file through a flow, with --output, progress,
// --stats and --stats-json. Called by the launcher (launcher.cpp) on the main thread; command_run() owns
// the Flow it starts and everything it opens, and returns once the flow is closed and the output complete.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace flowline::cli {

struct RunOptions {
  std::string flow;
  std::string input;
  std::string input_format;  // empty: jsonl for a .jsonl / .ndjson file, else lines
  std::string output;
  std::string endpoint;  // empty: the flow's with.endpoint
  std::size_t request_size = 0;
  std::string progress = "auto";
  bool stats = false;
  std::string stats_json;
  std::vector<std::string> sets;
  bool overwrite = false;        // --overwrite: replace outputs that exist (outputs.hpp)
  bool resume = false;           // --resume: continue --output's NAME.partial (resume.hpp)
  std::uint64_t sync_every = 0;  // --sync-every: make --output durable every N documents (0: not by count)
  double sync_seconds = 10;      // --sync-seconds: ... and every S seconds (0: not by time)
  bool sync_given = false;       // either was given: it applies to the resumable sinks too
};

// Adds the `run` subcommand and its options to `app`, filling `o` when parsed. `format_names`: the input
// formats --input-format accepts.
CLI::App* add_run_command(CLI::App& app, RunOptions& o, const std::vector<std::string>& format_names);

// Runs the flow over the input; returns a launcher exit code (launcher.hpp; 128 + signal when interrupted)
// and prints errors to stderr.
int command_run(const RunOptions& o);

}  // namespace flowline::cli
