// The `flowline` launcher's commands: the command line and validate here; run, profile, serve, export, and
// the references (executors, schema) in files of their own. Each is parsed with CLI11 and carried out in
// named steps.
#include "launcher.hpp"
#include "profile.hpp"
#include "reference.hpp"
#include "run.hpp"
#include "export.hpp"
#include "serve.hpp"

#include "flowline/flowline.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <limits>

namespace flowline::cli {
namespace {

int command_validate(const std::string& file, const std::vector<std::string>& sets) {
  try {
    const FlowConfig config = load_flow_with_sets(file, sets);
    fmt::print("{}: OK ({} executor{})\n", file, config.executors.size(), config.executors.size() == 1 ? "" : "s");
    for (const auto& e : config.executors) {
      std::string needs = "client";
      if (e.needs && !e.needs->empty())
        needs = fmt::format("{}", fmt::join(*e.needs, ", "));
      else if (!e.needs && &e != &config.executors.front())
        needs = (&e - 1)->name;
      if (e.is_remote()) {
        const bool dns = e.remote.discovery == RemoteOptions::Discovery::Dns;
        fmt::print("  {} ({}) remote, {} in flight on each {}{}{} <- {}\n", e.name, e.uses.empty() ? "?" : e.uses,
                   e.remote.in_flight, dns ? "server of (DNS, at most " : "of ",
                   dns ? fmt::format("{} each) ", e.remote.max_servers) : "", fmt::join(e.hosts, ", "),
                   e.remote.local_replicas > 0 ? fmt::format(" + {} here", e.remote.local_replicas) : "", needs);
        continue;
      }
      fmt::print("  {} ({}) x{} on {} <- {}\n", e.name, e.uses, e.replicas,
                 fmt::format("{}", fmt::join(replica_devices(e), ", ")), needs);
    }
    return kExitOk;
  } catch (const ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  }
}

}  // namespace

FlowConfig load_flow_with_sets(const std::string& file, const std::vector<std::string>& sets) {
  return load_flow_config(file, sets);
}

int start_flow(Flow& flow) {
  try {
    flow.start();
  } catch (const ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitFailure;
  }
  return kExitOk;
}

void print_config_error(const ConfigError& e) {
  for (const auto& d : e.diagnostics()) fmt::print(stderr, "{}\n", d.to_string());
  fmt::print(stderr, "{} error{} in the flow configuration\n", e.diagnostics().size(),
             e.diagnostics().size() == 1 ? "" : "s");
}

void print_load_error(const Error& e) {
  if (const auto* config = dynamic_cast<const ConfigError*>(&e))
    print_config_error(*config);
  else
    fmt::print(stderr, "error: {}\n", e.what());
}

// The launcher's own options. Any flow file is read within bounds (flowline/flow_file_limits.hpp); the size
// limit can be raised, before or after the command (subcommands fall through to these options).
void add_global_options(CLI::App& app, std::string& log_level, FlowFileLimits& limits) {
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(version()));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_option("--max-flow-bytes", limits.max_bytes,
                 "the largest flow file read (bytes; default 2 MiB); also FLOWLINE_MAX_FLOW_BYTES")
      ->envname("FLOWLINE_MAX_FLOW_BYTES")
      ->check(CLI::PositiveNumber);
}

// Adds the `profile` subcommand and its options to `app`, filling `o` when parsed.
CLI::App* add_profile_command(CLI::App& app, ProfileOptions& o, const std::vector<std::string>& format_names) {
  auto* cmd = app.add_subcommand(
      "profile", "Run a flow at several batch sizes and report time and memory, with the largest batch that fits");
  cmd->add_option("flow", o.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--input,-i", o.input, "input file")->required();
  cmd->add_option(
         "--input-format", o.input_format,
         fmt::format("{} (default: jsonl for a .jsonl or .ndjson input, else lines)", fmt::join(format_names, ", ")))
      ->check(CLI::IsMember(format_names));
  cmd->add_option("--batch-sizes", o.batch_sizes, "comma-separated batch sizes, e.g. 50,300")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->required();
  cmd->add_option("--executor", o.executor,
                  "the executor whose batch_size varies (default: the only one that has one)");
  cmd->add_option("--endpoint,-e", o.endpoint, "endpoint to post to")->capture_default_str();
  cmd->add_option("--memory-fraction", o.memory_fraction,
                  "memory budget: this share of the memory free at start, in (0, 1]")
      ->check(CLI::Range(std::numeric_limits<double>::min(), 1.0))
      ->capture_default_str();
  cmd->add_option("--json", o.json, "write the report as JSON here")->capture_default_str();
  cmd->add_option("--plot", o.plot, "write the PNG plot here (empty: none)")->capture_default_str();
  cmd->add_option("--set", o.sets, "override an executor parameter in every run; repeatable");
  return cmd;
}

int run(int argc, char** argv) {
  CLI::App app{"flowline: run executor pipelines defined in YAML"};
  std::string log_level = "warn";
  FlowFileLimits flow_limits;
  add_global_options(app, log_level, flow_limits);

  std::vector<std::string> format_names;
  for (const auto& [name, format] : input_formats()) format_names.push_back(name);

  RunOptions run_options;
  auto* run_cmd = add_run_command(app, run_options, format_names);

  ProfileOptions profile_options;
  auto* profile_cmd = add_profile_command(app, profile_options, format_names);

  std::string validate_file;
  std::vector<std::string> validate_sets;
  auto* validate_cmd = app.add_subcommand("validate", "Check a flow file and print its executors");
  validate_cmd->add_option("flow", validate_file, "flow file (YAML)")->required();
  validate_cmd->add_option("--set", validate_sets,
                           "override an executor parameter, EXECUTOR.PARAM=VALUE, as run and serve do; repeatable");

  auto* executors_cmd = app.add_subcommand("executors", "List the executor types, their parameters and endpoints");
  auto* schema_cmd =
      app.add_subcommand("schema", "Print the YAML reference (flow keys and executor parameters) as Markdown");
  ServeOptions serve_options;
  auto* serve_cmd = add_serve_command(app, serve_options);
  ExportCommand export_command;
  auto* export_cmd = add_export_command(app, export_command);

  for (auto* command : app.get_subcommands([](CLI::App*) { return true; })) command->fallthrough();  // see above
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  // The log goes to standard error, as every message does: standard output is the command's product (a
  // report, a listing, `run --output -`'s documents), never mixed with warnings.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::from_str(log_level));
  set_flow_file_limits(flow_limits);
  try {
    if (*run_cmd) return command_run(run_options);
    if (*profile_cmd) {
      profile_options.log_level = log_level;
      return command_profile(profile_options);
    }
    if (*validate_cmd) return command_validate(validate_file, validate_sets);
    if (*executors_cmd) return command_executors();
    if (*schema_cmd) return command_schema();
    if (*serve_cmd) return command_serve(std::move(serve_options));
    if (*export_cmd) return command_export(std::move(export_command));
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace flowline::cli
