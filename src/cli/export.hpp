// `flowline export compose|kubernetes FLOW.yml -o DIR`: writes what runs the flow as containers — the
// gateway and one service per executor (docs/deploy.md). The decisions are src/deploy's; this file parses
// the command line, loads the flow and writes the files.
#pragma once

#include "../deploy/plan.hpp"

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace flowline::cli {

struct ExportCommand {
  deploy::Target target = deploy::Target::Compose;
  std::string flow;
  std::string out_dir;
  std::vector<std::string> scale, gpus, hpa;  // EXECUTOR=VALUE, parsed by command_export()
  deploy::ExportOptions options;
};

// Adds `export` with its two subcommands (compose, kubernetes) to `app`, filling `command` when parsed.
CLI::App* add_export_command(CLI::App& app, ExportCommand& command);
int command_export(ExportCommand command);

}  // namespace flowline::cli
