// The `flowline` launcher's commands: run and validate here; profile, serve, export, and the references
// (executors, schema) in files of their own. Each is parsed with CLI11 and carried out in named steps.
#include "launcher.hpp"
#include "outputs.hpp"
#include "profile.hpp"
#include "progress.hpp"
#include "reference.hpp"
#include "run_output.hpp"
#include "export.hpp"
#include "serve.hpp"

#include "flowline/flowline.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <algorithm>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <unistd.h>

namespace flowline::cli {
namespace {

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
  bool overwrite = false;  // --overwrite: replace outputs that exist (outputs.hpp)
};

std::string megabytes(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

// The per-replica table printed by `run --stats`.
void print_stats(const FlowStats& stats, const PostSummary& summary) {
  fmt::print(stderr, "\n{:<14} {:>3} {:<8} {:>9} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}\n", "executor",
             "rep", "device", "docs", "batches", "errors", "mean ms", "p50 ms", "p99 ms", "load MiB", "peak alloc",
             "peak resv");
  for (const auto& r : stats.replicas) {
    fmt::print(stderr, "{:<14} {:>3} {:<8} {:>9} {:>8} {:>6} {:>9.2f} {:>9.2f} {:>9.2f} {:>9} {:>10} {:>10}\n",
               r.executor, r.replica, r.device, r.documents, r.batches, r.errors, r.batch_ms_mean, r.batch_ms_p50,
               r.batch_ms_p99, r.has_gpu_memory ? megabytes(r.gpu_load_bytes) : "n/a",
               r.has_gpu_memory ? megabytes(r.gpu_peak_allocated_bytes) : "n/a",
               r.has_gpu_memory ? megabytes(r.gpu_peak_reserved_bytes) : "n/a");
  }
  for (const auto& h : stats.remote_hosts) {
    fmt::print(stderr, "{} host {}: {}, {} requests answered, lost {}x, back {}x, {} batches re-queued{}\n", h.executor,
               h.address, h.connected ? "connected" : "down", h.requests, h.lost, h.reconnects, h.requeued_batches,
               h.last_error.empty() ? "" : fmt::format(" (last error: {})", h.last_error));
  }
  for (const auto& d : stats.devices) {
    fmt::print(stderr, "{}: allocator load {} MiB, peak allocated {} MiB, peak reserved {} MiB", d.device,
               megabytes(d.load_bytes), megabytes(d.peak_allocated_bytes), megabytes(d.peak_reserved_bytes));
    if (d.has_nvml) {
      const double diff = d.nvml_peak_used_bytes > 0
                              ? 100.0 * static_cast<double>(d.accounted_peak_bytes() - d.nvml_peak_used_bytes) /
                                    static_cast<double>(d.nvml_peak_used_bytes)
                              : 0.0;
      fmt::print(
          stderr,
          "; NVML: total {} MiB, in use at start {} MiB, context {} MiB, peak {} MiB (accounted {} MiB, {:+.2f}%)",
          megabytes(d.nvml_total_bytes), megabytes(d.nvml_used_at_start_bytes), megabytes(d.outside_allocator_bytes()),
          megabytes(d.nvml_peak_used_bytes), megabytes(d.accounted_peak_bytes()), diff);
    } else {
      fmt::print(stderr, "; NVML not available");
    }
    fmt::print(stderr, "\n");
  }
  const bool any_gpu =
      std::any_of(stats.replicas.begin(), stats.replicas.end(), [](const auto& r) { return r.has_gpu_memory; });
  fmt::print(stderr, "host peak RSS {:.1f} MiB; total {:.3f} s for {} docs{}\n", stats.host_peak_rss_mb,
             summary.seconds, summary.documents,
             any_gpu ? "" : "; GPU figures not available (no executor runs on a GPU)");
  fmt::print(
      stderr,
      "posting thread: {:.3f} s reading the input, {:.3f} s delivering responses, the rest waiting for the flow\n",
      summary.source_seconds, summary.deliver_seconds);
}

// `post_ended` is when post() returned (wall clock); with summary.seconds it places the processing in time,
// so outside samplers (NVML in the GPU benchmark) can keep only their samples from that window.
// `after_post_seconds` is how long closing the executors and completing --output took after that; `writer`
// what the --output writer did, when there is one.
void write_stats_json(const std::string& path, const FlowStats& stats, const PostSummary& summary,
                      std::chrono::system_clock::time_point post_ended, double after_post_seconds,
                      const std::optional<WriterStats>& writer) {
  boost::json::array replicas;
  for (const auto& r : stats.replicas) {
    boost::json::object o{{"executor", r.executor},
                          {"type", r.type},
                          {"replica", r.replica},
                          {"device", r.device},
                          {"documents", r.documents},
                          {"batches", r.batches},
                          {"errors", r.errors},
                          {"batch_ms_mean", r.batch_ms_mean},
                          {"batch_ms_p50", r.batch_ms_p50},
                          {"batch_ms_p99", r.batch_ms_p99}};
    if (r.has_gpu_memory) {
      o["gpu_load_bytes"] = r.gpu_load_bytes;
      o["gpu_peak_allocated_bytes"] = r.gpu_peak_allocated_bytes;
      o["gpu_peak_reserved_bytes"] = r.gpu_peak_reserved_bytes;
    } else {
      o["gpu"] = "not available";
    }
    boost::json::object metrics;
    for (const auto& [name, value] : r.metrics) metrics[name] = value;
    o["metrics"] = std::move(metrics);
    replicas.push_back(std::move(o));
  }
  boost::json::array devices;
  for (const auto& d : stats.devices) {
    boost::json::object o{{"device", d.device},
                          {"load_bytes", d.load_bytes},
                          {"peak_allocated_bytes", d.peak_allocated_bytes},
                          {"peak_reserved_bytes", d.peak_reserved_bytes},
                          {"reserved_after_load_bytes", d.reserved_after_load_bytes},
                          {"startup_peak_allocated_bytes", d.startup_peak_allocated_bytes}};
    if (d.has_nvml) {
      o.insert({{"nvml_total_bytes", d.nvml_total_bytes},
                {"nvml_used_at_start_bytes", d.nvml_used_at_start_bytes},
                {"nvml_used_after_load_bytes", d.nvml_used_after_load_bytes},
                {"nvml_peak_used_bytes", d.nvml_peak_used_bytes},
                {"outside_allocator_bytes", d.outside_allocator_bytes()},
                {"accounted_peak_bytes", d.accounted_peak_bytes()}});
    } else {
      o["nvml"] = "not available";
    }
    devices.push_back(std::move(o));
  }
  boost::json::array hosts;
  for (const auto& h : stats.remote_hosts) {
    hosts.push_back(boost::json::object{{"executor", h.executor},
                                        {"address", h.address},
                                        {"connected", h.connected},
                                        {"requests", h.requests},
                                        {"lost", h.lost},
                                        {"reconnects", h.reconnects},
                                        {"requeued_batches", h.requeued_batches},
                                        {"last_error", h.last_error}});
  }
  boost::json::array executors;
  for (const auto& e : stats.executors) {
    executors.push_back(boost::json::object{{"executor", e.executor},
                                            {"batches", e.batches},
                                            {"batch_ms_mean", e.batch_ms_mean},
                                            {"batch_ms_p50", e.batch_ms_p50},
                                            {"batch_ms_p99", e.batch_ms_p99}});
  }
  boost::json::object root{{"replicas", std::move(replicas)},
                           {"executors", std::move(executors)},
                           {"remote_hosts", std::move(hosts)},
                           {"devices", std::move(devices)},
                           {"host_peak_rss_mb", stats.host_peak_rss_mb},
                           {"documents", summary.documents},
                           {"requests", summary.requests},
                           {"failed_requests", summary.failed_requests},
                           {"seconds", summary.seconds},
                           {"source_seconds", summary.source_seconds},
                           {"deliver_seconds", summary.deliver_seconds},
                           {"post_ended_unix", std::chrono::duration<double>(post_ended.time_since_epoch()).count()},
                           {"after_post_seconds", after_post_seconds}};
  if (writer) {
    root["output"] = boost::json::object{{"documents", writer->documents},
                                         {"bytes", writer->bytes},
                                         {"format_seconds", writer->format_seconds},
                                         {"write_seconds", writer->write_seconds}};
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << boost::json::serialize(root) << "\n";
  if (!out) throw Error(fmt::format("cannot write '{}'", path));
}

// --input-format, or when not given the input's own: jsonl for a .jsonl or .ndjson file, else lines.
std::string input_format_for(const std::string& given, const std::string& input) {
  if (!given.empty()) return given;
  const std::string extension = std::filesystem::path(input).extension().string();
  return extension == ".jsonl" || extension == ".ndjson" ? "jsonl" : "lines";
}

// What `run` needs before the flow starts: the validated config (with --request-size and --set), the
// input and the --output writer. Prints what is wrong and returns false (exit 2).
struct RunSetup {
  FlowConfig config;
  std::unique_ptr<DocumentSource> source;
  std::optional<RunOutput> output;
};

bool prepare_run(const RunOptions& o, RunSetup& setup) {
  try {
    setup.config = load_flow_with_sets(o.flow, o.sets);
    if (o.request_size > 0) setup.config.options.request_size = o.request_size;
  } catch (const ConfigError& e) {
    print_config_error(e);
    return false;
  }
  if (!outputs_are_free(setup.config, o.output, o.overwrite)) return false;
  try {
    const InputFormat format = parse_input_format(input_format_for(o.input_format, o.input));
    setup.source = o.input == "-" ? open_stdin_source(format) : open_file_source(o.input, format);
  } catch (const Error& e) {
    fmt::print(stderr, "error: input: {}\n", e.what());
    return false;
  }
  if (!o.output.empty()) {
    try {
      setup.output.emplace(o.output);
    } catch (const Error& e) {
      fmt::print(stderr, "error: --output: {}\n", e.what());
      return false;
    }
  }
  return true;
}

// The end of a run that was not interrupted: the progress summary, --stats and --stats-json.
// `after_post_seconds`: from the end of post() until every executor closed and the output was complete.
void report_run(const RunOptions& o, const Flow& flow, const PostSummary& summary,
                const std::optional<RunOutput>& output, const std::string& written,
                std::chrono::system_clock::time_point post_ended, double after_post_seconds) {
  if (o.stats && output) {
    const WriterStats w = output->stats();
    fmt::print(stderr, "output: {}; formatting {:.3f} s (thread time), writing {:.3f} s\n", written, w.format_seconds,
               w.write_seconds);
  }
  if (!o.stats && o.stats_json.empty()) return;
  const FlowStats stats = flow.stats();
  if (o.stats) print_stats(stats, summary);
  if (!o.stats_json.empty()) {
    std::optional<WriterStats> writer;
    if (output) writer = output->stats();
    write_stats_json(o.stats_json, stats, summary, post_ended, after_post_seconds, writer);
  }
}

// The documents go to standard output with `--output -`: everything else the run says (the log included)
// goes to standard error then.
void keep_standard_output_for(const std::optional<RunOutput>& output) {
  if (!output || !output->to_standard_output()) return;
  auto logger = spdlog::stderr_color_mt("flowline-stderr");
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(std::move(logger));
}

int command_run(const RunOptions& o) {
  RunSetup setup;
  if (!prepare_run(o, setup)) return kExitUsage;
  std::optional<RunOutput>& output = setup.output;
  keep_standard_output_for(output);
  const std::string endpoint = o.endpoint.empty() ? setup.config.options.endpoint : o.endpoint;
  Flow flow(std::move(setup.config));
  if (const int failed = start_flow(flow); failed != kExitOk) {
    if (output) output->finish(false);  // no document reached it: nothing is left
    return failed;
  }

  const bool interactive = o.progress == "always" || (o.progress == "auto" && isatty(STDERR_FILENO));
  const char* clear_line = interactive ? "\r\x1b[2K" : "";
  ProgressLine progress(fmt::format("[{}]", endpoint), interactive);
  PostOptions post_options;
  post_options.on_progress = [&](const Progress& p) { progress.update(p); };
  std::uint64_t reported_failures = 0;
  PostSummary summary;
  int status = kExitOk;
  std::string post_error;
  InterruptGuard interrupt([&] { return output ? output->give_up() : std::string("no output file"); });
  StoppableSource stoppable(*setup.source, interrupt.stop());
  try {
    summary = flow.post(
        endpoint, stoppable,
        [&](Response&& r) {
          if (!r.ok()) {
            if (reported_failures++ < 20) {
              fmt::print(stderr, "{}request {} ({} documents) failed in executor '{}': {}\n", clear_line, r.index,
                         r.docs.size(), r.error_executor, r.error);
            }
            return;
          }
          if (output) output->write(std::move(r.docs));
        },
        post_options);
  } catch (const std::exception& e) {
    post_error = e.what();
    fmt::print(stderr, "{}error: {}\n", clear_line, post_error);
    status = kExitFailure;
  }
  const auto post_ended = std::chrono::system_clock::now();
  const int signal = interrupt.signal();
  // The run ended well only when every document was read and answered: executors that write files (and
  // --output) complete them only then, and otherwise leave them marked partial.
  const bool complete = signal == 0 && status == kExitOk && summary.failed_requests == 0;
  flow.close(complete ? RunOutcome::Complete : RunOutcome::Incomplete);
  std::string written;
  try {
    if (output) written = output->finish(complete);
  } catch (const std::exception& e) {
    // A writer's failure surfaces in the response callback and again when it finishes: say it once.
    if (post_error != e.what()) fmt::print(stderr, "error: {}\n", e.what());
    written = output->left_after_failure();
    status = kExitFailure;
  }
  const double after_post = std::chrono::duration<double>(std::chrono::system_clock::now() - post_ended).count();
  interrupt.finished();
  if (signal != 0) {
    fmt::print(stderr, "{}interrupted by {}: stopped reading input after {} documents; {}\n", clear_line,
               signal_name(signal), summary.input_documents, written.empty() ? "no output file" : written);
    return 128 + signal;
  }
  if (status == kExitOk) progress.finish(summary);
  // Whatever cut the run short (a failed request, the input, the output), say what is on disk.
  if (!complete && !written.empty()) fmt::print(stderr, "output: {}\n", written);
  report_run(o, flow, summary, output, written, post_ended, after_post);
  if (reported_failures > 20) fmt::print(stderr, "... and {} more failed requests\n", reported_failures - 20);
  if (summary.failed_requests > 0) status = kExitFailure;
  return status;
}

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
  FlowConfig config = load_flow_config(file);
  for (const auto& s : sets) set_executor_parameter(config, s);
  if (!sets.empty()) validate_flow_config(config);
  return config;
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

constexpr const char* kOutputHelp =
    "write the resulting documents here; the extension picks the format: .jsonl, .npy or .safetensors (the last "
    "two: the embeddings, with ids, texts and tags in NAME.docs.jsonl beside them); - writes JSONL to standard "
    "output (everything else then goes to standard error). Written as NAME.partial, renamed to NAME when the run "
    "completes";

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
  auto* run_cmd = app.add_subcommand("run", "Post the documents of an input file through a flow");
  run_cmd->add_option("flow", run_options.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  run_cmd->add_option("--input,-i", run_options.input, "input file or folder; - reads standard input")->required();
  run_cmd
      ->add_option("--input-format", run_options.input_format,
                   "lines: a document per line; paragraphs: per blank-line separated paragraph; jsonl: a JSON "
                   "document per line; text: the whole file (default: jsonl for a .jsonl or .ndjson input, else lines)")
      ->check(CLI::IsMember(format_names));
  run_cmd->add_option("--output,-o", run_options.output, kOutputHelp);
  run_cmd->add_option("--endpoint,-e", run_options.endpoint,
                      "endpoint to post to (default: the flow's with.endpoint, which defaults to /)");
  run_cmd->add_option("--request-size", run_options.request_size, "documents per request (default: the flow's)")
      ->check(CLI::PositiveNumber);
  run_cmd->add_option("--progress", run_options.progress, "auto (on a terminal), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  run_cmd->add_flag("--stats", run_options.stats,
                    "print per-replica accounting at the end: documents, batches, errors, batch time, GPU memory");
  run_cmd->add_option("--stats-json", run_options.stats_json, "write the same accounting as JSON to this file");
  run_cmd->add_option("--set", run_options.sets,
                      "override an executor parameter, EXECUTOR.PARAM=VALUE (VALUE as in YAML); repeatable");
  run_cmd->add_flag("--overwrite", run_options.overwrite,
                    "replace the files the flow's writers and --output write when they exist (else the run refuses "
                    "to start)");

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
