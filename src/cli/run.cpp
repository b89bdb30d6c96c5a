// `flowline run` (run.hpp): options, preparing the input and output, posting with progress and interrupts,
// and the end-of-run report (--stats as a table here, --stats-json through stats_json.hpp).
#include "run.hpp"

#include "launcher.hpp"
#include "outputs.hpp"
#include "progress.hpp"
#include "resume.hpp"
#include "run_output.hpp"
#include "stats_json.hpp"
#include "stats_table.hpp"

#include "flowline/flowline.hpp"
#include "flowline/resumable_sink.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <thread>
#include <unistd.h>

namespace flowline::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --input-format, or when not given the input's own (io.hpp's default_input_format: by its extension).
std::string input_format_for(const std::string& given, const std::string& input) {
  return given.empty() ? default_input_format(input) : given;
}

// What `run` needs before the flow starts: the validated config (with --request-size and --set), the
// input and the --output writer, and for a run from a file whose file --output or resumable sinks
// (flowline/resumable_sink.hpp) keep progress the run's identity, where --output resumes, and (once the
// flow started and the sinks said what they hold) where the input starts and the source that skips to it.
struct RunSetup {
  FlowConfig config;
  std::unique_ptr<DocumentSource> source;
  std::optional<RunOutput> output;
  std::optional<RunIdentity> identity;
  std::string format_name;                           // the input's format (input_format_for)
  std::vector<std::string> sinks;                    // the executors that are resumable sinks (run here, not on hosts)
  std::map<std::string, std::size_t> sink_replicas;  // how many replicas of each sink publish a held point
  ResumePoint start;                                 // --output's sync point
  RunStart run_start;                                // the smallest point of --output and the sinks
  std::unique_ptr<ResumeSource> resume_source;
  std::uint64_t left = 0;  // a resumed run: the input's documents after those skipped
  // What finding them took (--stats-json's "resume").
  double skip_seconds = 0, count_seconds = 0;
};

// The executors of the flow that are resumable sinks, run in this process.
std::vector<std::string> resumable_sinks(const FlowConfig& config) {
  std::vector<std::string> sinks;
  for (const ExecutorConfig& e : config.executors) {
    const Registry::Entry* entry = e.uses.empty() ? nullptr : Registry::global().find(e.uses);
    if (entry && !e.is_remote() && is_resumable_sink(entry->spec)) sinks.push_back(e.name);
  }
  return sinks;
}

// Gives each resumable sink the run's key, --resume, and --sync-every / --sync-seconds when given where the
// flow leaves the sink's own at its default (0 documents, 10 s).
void mark_sinks(const RunOptions& o, RunSetup& setup) {
  const std::string key = run_key_of(*setup.identity);
  for (ExecutorConfig& e : setup.config.executors) {
    if (std::find(setup.sinks.begin(), setup.sinks.end(), e.name) == setup.sinks.end()) continue;
    e.with["run_key"] = key;
    e.with["resume"] = o.resume;
    if (!o.sync_given) continue;
    const auto at_default = [&](const char* name, double fallback) {
      const auto* v = e.with.if_contains(name);
      return !v || (v->is_number() && v->to_number<double>() == fallback);
    };
    if (at_default("sync_every", 0)) e.with["sync_every"] = static_cast<std::int64_t>(o.sync_every);
    if (at_default("sync_seconds", 10)) e.with["sync_seconds"] = o.sync_seconds;
  }
}

// Whether the input can be read again as it was (a FIFO or standard input cannot: identifying the run
// would consume it).
bool rereadable(const std::string& input) {
  std::error_code ec;
  return input != "-" && (std::filesystem::is_regular_file(input, ec) || std::filesystem::is_directory(input, ec));
}

// Whether --output names a format (else opening it says which are known, under --output).
bool has_known_extension(const std::string& output) {
  try {
    output_format_for(output);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// --resume of a flow whose executors write: each must be a resumable sink of one replica (or a replicated sink,
// ExecutorSpec::replicated_sink, of several in this process). Replicas before a sink are fine: the sinks put
// documents back in input order themselves (SinkProgress::order, by positional ids or, for a jsonl input, by the
// position board). Returns false after saying why.
bool sinks_can_resume(const RunSetup& setup) {
  const auto is_sink = [&](const std::string& name) {
    return std::find(setup.sinks.begin(), setup.sinks.end(), name) != setup.sinks.end();
  };
  bool ok = true;
  for (const FlowOutput& w : flow_outputs(setup.config)) {
    if (is_sink(w.executor)) continue;
    const std::string where = w.location.to_string();
    fmt::print(stderr,
               "error: {}executor '{}' writes '{}' ({}) and is no resumable sink: --resume continues --output and "
               "resumable sinks only (it would start its file anew); run without --resume, or without that "
               "executor\n",
               where.empty() ? "" : where + ": ", w.executor, w.path.string(), w.parameter);
    ok = false;
  }
  if (setup.sinks.empty()) return ok;
  for (const ExecutorConfig& e : setup.config.executors) {
    if ((e.replicas * e.shards <= 1 && !e.is_remote()) || !is_sink(e.name)) continue;
    const Registry::Entry* entry = Registry::global().find(e.uses);
    if (entry && entry->spec.replicated_sink && e.shards <= 1 && !e.is_remote()) continue;  // one progress
    fmt::print(stderr,
               "error: sink '{}' runs {} replicas{}: each would count only its own share of the input (refused); "
               "give it replicas: 1 to resume\n",
               e.name, e.replicas * e.shards, e.is_remote() ? " on other hosts" : "");
    ok = false;
  }
  return ok;
}

// Whether every file this run writes (--output and the sinks') is complete already: nothing to resume.
bool outputs_complete(const RunOptions& o, const RunSetup& setup) {
  std::vector<std::filesystem::path> files;
  if (!o.output.empty() && o.output != "-") files.emplace_back(o.output);
  for (const FlowOutput& w : flow_outputs(setup.config)) files.push_back(w.path);
  if (files.empty() || files.size() < setup.sinks.size() + (o.output.empty() || o.output == "-" ? 0 : 1))
    return false;  // a sink without a file (a table, an index) cannot be seen complete from here
  std::error_code ec;
  return std::all_of(files.begin(), files.end(), [&](const auto& f) {
    return std::filesystem::exists(f, ec) && !std::filesystem::exists(partial_path_for(f), ec);
  });
}

// --resume: finds where the output's partial ends and checks the sinks' files. Returns -1 to go on, else
// the exit code (0: the outputs are complete already; 2: refused, said why).
int find_start(const RunOptions& o, RunSetup& setup) {
  if (!o.resume) return -1;
  const bool file_output = !o.output.empty() && o.output != "-";
  if (file_output && !has_known_extension(o.output)) return -1;  // said when opened
  if ((!file_output && setup.sinks.empty()) || !rereadable(o.input)) {
    fmt::print(stderr,
               "error: --resume needs a file --output or a flow with resumable sinks (JsonlWriter, TsvWriter, "
               "VectorIndex, PgVectorWriter), and a file or folder --input (one that can be read again: not "
               "standard input or a pipe)\n");
    return kExitUsage;
  }
  if (!sinks_can_resume(setup)) return kExitUsage;
  if (outputs_complete(o, setup)) {
    try {
      if (const auto problem = setup.identity ? complete_of_another_input(*setup.identity, o.input, setup.format_name,
                                                                          o.output, setup.config)
                                              : std::nullopt) {
        fmt::print(stderr, "error: --resume: {}\n", *problem);
        return kExitUsage;
      }
    } catch (const Error& e) {
      fmt::print(stderr, "error: --resume: {}\n", e.what());
      return kExitUsage;
    }
    if (file_output) {
      fmt::print(stderr, "'{}' is complete: nothing to resume\n", o.output);
    } else {
      fmt::print(stderr, "every file the flow writes is complete: nothing to resume\n");
    }
    return kExitOk;
  }
  try {
    // A sink's own file is checked here too (its constructor checks again): a refusal before anything starts.
    const std::string key = run_key_of(*setup.identity);
    for (const FlowOutput& w : flow_outputs(setup.config)) read_sink_manifest(w.path, key);
    std::error_code ec;
    if (file_output && std::filesystem::exists(o.output, ec) &&
        !std::filesystem::exists(partial_path_for(o.output), ec))
      throw Error(fmt::format("'{}' is complete while the flow's sinks are not", o.output));
    if (!file_output) return -1;
    if (auto point = find_resume_point(o.output, *setup.identity)) {
      setup.start = *point;
    } else {
      fmt::print(stderr, "resume: nothing of '{}' was synced: starting from the first document\n", o.output);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: --resume: {}\n", e.what());
    return kExitUsage;
  }
  return -1;
}

// Returns -1 when the run may start, else the exit code (errors printed).
int prepare_run(const RunOptions& o, RunSetup& setup) {
  const std::string format_name = input_format_for(o.input_format, o.input);
  setup.format_name = format_name;
  // The input's hash (the run's identity reads it whole: 0.16 s for the corpus x50) goes on beside loading
  // and validating the flow, which says whether the run keeps progress at all; one that keeps none stops it.
  std::atomic<bool> stop_hashing{false};
  std::future<RunIdentity> input_identity;
  double hash_seconds = 0;  // written by the hashing thread before its result is ready
  if (rereadable(o.input)) {
    input_identity = std::async(std::launch::async, [&o, &stop_hashing, &hash_seconds, format_name] {
      const auto began = std::chrono::steady_clock::now();
      RunIdentity identity = identify_input(o.input, format_name, &stop_hashing);
      hash_seconds = seconds_since(began);
      return identity;
    });
  }
  struct StopHashing {
    std::atomic<bool>& stop;
    std::future<RunIdentity>& hash;
    ~StopHashing() {
      stop = true;
      if (hash.valid()) hash.wait();
    }
  } stop_on_return{stop_hashing, input_identity};
  try {
    setup.config = load_flow_with_sets(o.flow, o.sets);
    if (o.request_size > 0) setup.config.options.request_size = o.request_size;
    setup.config.options.local_input_files = true;  // the documents are the user's, named on this command line
  } catch (const ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  }
  setup.sinks = resumable_sinks(setup.config);
  for (const ExecutorConfig& e : setup.config.executors) {
    if (std::find(setup.sinks.begin(), setup.sinks.end(), e.name) != setup.sinks.end())
      setup.sink_replicas[e.name] = static_cast<std::size_t>(std::max(1, e.replicas) * std::max(1, e.shards));
  }
  const bool file_output = !o.output.empty() && o.output != "-" && has_known_extension(o.output);
  try {
    if (input_identity.valid() && (file_output || !setup.sinks.empty())) {
      const std::string endpoint = o.endpoint.empty() ? setup.config.options.endpoint : o.endpoint;
      const auto waiting = std::chrono::steady_clock::now();
      setup.identity = input_identity.get();
      spdlog::debug(
          "run: the input identified ({} bytes hashed in {:.3f} s beside the flow's loading, {:.3f} s waited)",
          setup.identity->input_bytes, hash_seconds, seconds_since(waiting));
      identify_flow(*setup.identity, o.flow, o.sets, endpoint, setup.config.options.request_size,
                    file_output ? o.output : std::string());
      mark_sinks(o, setup);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitUsage;
  }
  if (const int code = find_start(o, setup); code >= 0) return code;
  if (!outputs_are_free(setup.config, o.output, o.overwrite)) return kExitUsage;
  try {
    const InputFormat format = parse_input_format(format_name);
    setup.source = o.input == "-" ? open_stdin_source(format) : open_file_source(o.input, format);
  } catch (const Error& e) {
    fmt::print(stderr, "error: input: {}\n", e.what());
    return kExitUsage;
  }
  if (!o.output.empty()) {
    try {
      WriterOptions options;
      if (setup.start.at.documents > 0) options.resume_from = setup.start.at;
      setup.output.emplace(o.output, options);
    } catch (const Error& e) {
      fmt::print(stderr, "error: --output: {}\n", e.what());
      return kExitUsage;
    }
  }
  return -1;
}

// Once the flow started (and its sinks said what they hold): where the input starts, the source that skips
// to it, and what is left. Returns -1 to go on, else the exit code (errors printed).
int begin_input(const RunOptions& o, RunSetup& setup) {
  if (!setup.identity) return -1;
  try {
    std::optional<ResumePoint> output_point;
    if (setup.output && !setup.identity->output_format.empty()) output_point = setup.start;
    if (o.resume) setup.run_start = choose_run_start(output_point, setup.sinks, run_key_of(*setup.identity));
    // An input whose documents carry their own ids (jsonl, an array's sidecar) keeps them: the sinks learn
    // positions from the board (resumable_sink.hpp).
    const bool positional = !setup.source->carries_ids();
    setup.resume_source = std::make_unique<ResumeSource>(
        *setup.source, positional, setup.identity->input_hash, setup.run_start.documents, setup.run_start.last_id,
        !positional && !setup.sinks.empty() ? run_key_of(*setup.identity) : std::string());
    // Both by the documents' boundaries alone (DocumentSource::skip, count_left): nothing is built.
    const auto started = std::chrono::steady_clock::now();
    setup.resume_source->skip();
    setup.skip_seconds = seconds_since(started);
    if (o.resume) {
      const auto skipped = std::chrono::steady_clock::now();
      setup.left = setup.resume_source->count_left().value_or(0);
      setup.count_seconds = seconds_since(skipped);
      spdlog::debug("resume: skipped {} documents in {:.3f} s, counted {} left in {:.3f} s", setup.run_start.documents,
                    setup.skip_seconds, setup.left, setup.count_seconds);
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: --resume: {}\n", e.what());
    return kExitUsage;
  }
  return -1;
}

// Starts the flow and finds where the input starts (begin_input). Under --resume the two go side by side:
// Flow::start() on a thread, and begin_input() here as soon as every replica of every resumable sink
// published what it holds (held_sink_publications), which they do as they are constructed, long before an
// encoder finished loading and warming up: skipping what the sinks hold and counting what is left no longer
// add to the start (0.17 s of a resume of the corpus x50 on an H200). Should a sink publish after that (more
// replicas than the config said), the input is opened again and begun from the points as they are at the
// end of the start. `input_code`: begin_input's (-1: go on). Returns start_flow's exit code.
int start_with_input(const RunOptions& o, RunSetup& setup, Flow& flow, int& input_code) {
  const auto starting = std::chrono::steady_clock::now();
  const auto log_start = [&](int code) {
    spdlog::debug("run: the flow {} in {:.3f} s", code == kExitOk ? "started" : "failed to start",
                  seconds_since(starting));
  };
  if (!o.resume || !setup.identity) {  // nothing to skip: the input starts at its first document
    const int code = start_flow(flow);
    log_start(code);
    if (code == kExitOk) input_code = begin_input(o, setup);
    return code;
  }
  const std::string key = run_key_of(*setup.identity);
  const auto all_published = [&] {
    const std::map<std::string, std::size_t> published = held_sink_publications(key);
    return std::all_of(setup.sink_replicas.begin(), setup.sink_replicas.end(), [&](const auto& sink) {
      const auto it = published.find(sink.first);
      return it != published.end() && it->second >= sink.second;
    });
  };
  std::atomic<bool> started{false};
  int code = kExitFailure;
  std::thread starter([&] {
    code = start_flow(flow);
    started = true;
  });
  struct JoinOnExit {  // whatever leaves here, the start has ended first
    std::thread& thread;
    ~JoinOnExit() {
      if (thread.joinable()) thread.join();
    }
  } join_on_exit{starter};
  while (!started && !all_published()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const bool beside = !started;
  const std::map<std::string, SinkPoint> read = held_sink_points(key);
  input_code = begin_input(o, setup);
  if (beside) spdlog::debug("resume: the input begun while the flow started");
  starter.join();
  log_start(code);
  if (code != kExitOk || input_code >= 0 || !beside || held_sink_points(key) == read) return code;
  spdlog::warn("resume: a sink said what it holds after the input was begun: reading the input again from its start");
  try {
    setup.resume_source.reset();
    setup.source = open_file_source(o.input, parse_input_format(setup.format_name));
  } catch (const Error& e) {
    fmt::print(stderr, "error: input: {}\n", e.what());
    input_code = kExitUsage;
    return code;
  }
  input_code = begin_input(o, setup);
  return code;
}

// The end of a run that was not interrupted: the progress summary, --stats and --stats-json.
// `after_post_seconds`: from the end of post() until every executor closed and the output was complete.
void report_run(const RunOptions& o, const Flow& flow, const PostSummary& summary,
                const std::optional<RunOutput>& output, const std::string& written,
                std::chrono::system_clock::time_point post_ended, double after_post_seconds,
                const boost::json::object& resume) {
  if (o.stats && output) {
    const WriterStats w = output->stats();
    fmt::print(stderr, "output: {}; formatting {:.3f} s (thread time), writing {:.3f} s\n", written, w.format_seconds,
               w.write_seconds);
  }
  if (!o.stats && o.stats_json.empty()) return;
  const FlowStats stats = flow.stats();
  if (o.stats) print_stats_table(stats, summary);
  if (!o.stats_json.empty()) {
    std::optional<WriterStats> writer;
    if (output) writer = output->stats();
    write_stats_json(o.stats_json, stats, summary, post_ended, after_post_seconds, writer, resume);
  }
}

// Ends --output after post(): a run stopped by a signal first syncs what it wrote (so --resume continues
// exactly there); a complete output loses its resume manifest, as does one that no document reached.
// Returns what is on disk; sets `status` when the output failed.
std::string end_output(std::optional<RunOutput>& output, ResumeLog* log, bool complete, int signal,
                       const std::string& post_error, int& status) {
  if (!output) return {};
  std::string written;
  try {
    if (log && signal != 0) log->sync_now();
    written = output->finish(complete);
  } catch (const std::exception& e) {
    // A writer's failure surfaces in the response callback and again when it finishes: say it once.
    if (post_error != e.what()) fmt::print(stderr, "error: {}\n", e.what());
    written = output->left_after_failure();
    status = kExitFailure;
  }
  std::error_code ec;
  if (log && (status == kExitOk && complete || !std::filesystem::exists(partial_path_for(output->path()), ec)))
    log->completed();
  return written;
}

// --stats-json's "resume": what a resumed run skipped and had left, and the output's syncs.
// "held": what --output and each resumable sink held when the run started (the run skips the smallest).
boost::json::object resume_json(const RunSetup& setup, const ResumeLog* log) {
  if (!setup.identity || (!log && setup.sinks.empty())) return {};
  boost::json::object held;
  for (const auto& [name, documents] : setup.run_start.held) held[name] = documents;
  return {{"skipped_documents", setup.run_start.documents},
          {"left_documents", setup.left},
          {"skip_seconds", setup.skip_seconds},
          {"count_seconds", setup.count_seconds},
          {"held", std::move(held)},
          {"syncs", log ? log->syncs() : 0},
          {"sync_seconds", log ? log->sync_seconds() : 0.0}};
}

}  // namespace

constexpr const char* kOutputHelp =
    "write the resulting documents here; the extension picks the format: .jsonl, .npy or .safetensors (the last "
    "two: the embeddings, with ids, texts and tags in NAME.docs.jsonl beside them); - writes JSONL to standard "
    "output (everything else then goes to standard error). Written as NAME.partial, renamed to NAME when the run "
    "completes";

CLI::App* add_run_command(CLI::App& app, RunOptions& o, const std::vector<std::string>& format_names) {
  auto* cmd = app.add_subcommand("run", "Post the documents of an input file through a flow");
  cmd->add_option("flow", o.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--input,-i", o.input, "input file or folder; - reads standard input")->required();
  cmd->add_option("--input-format", o.input_format,
                  "lines: a document per line; paragraphs: per blank-line separated paragraph; jsonl: a JSON "
                  "document per line; text: the whole file (default: jsonl for a .jsonl or .ndjson input, else lines)")
      ->check(CLI::IsMember(format_names));
  cmd->add_option("--output,-o", o.output, kOutputHelp);
  cmd->add_option("--endpoint,-e", o.endpoint,
                  "endpoint to post to (default: the flow's with.endpoint, which defaults to /)");
  cmd->add_option("--request-size", o.request_size, "documents per request (default: the flow's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--progress", o.progress, "auto (on a terminal), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->add_flag("--stats", o.stats,
                "print per-replica accounting at the end: documents, batches, errors, batch time, GPU memory");
  cmd->add_option("--stats-json", o.stats_json, "write the same accounting as JSON to this file");
  cmd->add_option("--set", o.sets,
                  "override an executor parameter, EXECUTOR.PARAM=VALUE (VALUE as in YAML); repeatable");
  cmd->add_flag("--overwrite", o.overwrite,
                "replace the files the flow's writers and --output write when they exist (else the run refuses "
                "to start)");
  cmd->add_flag("--resume", o.resume,
                "continue the --output and the flow's resumable sinks (JsonlWriter, TsvWriter) that an earlier run of "
                "the same input and flow left as NAME.partial: the documents they hold durably are skipped (the "
                "input is re-read, not re-encoded)");
  cmd->add_option("--sync-every", o.sync_every,
                  "make --output durable (fdatasync, and its NAME.resume.json) every N documents (0: not by count); "
                  "given, it also sets the resumable sinks' sync_every where the flow leaves it at 0")
      ->each([&o](const std::string&) { o.sync_given = true; })
      ->capture_default_str();
  cmd->add_option("--sync-seconds", o.sync_seconds,
                  "... and every S seconds (0: not by time; both 0: only when the run stops on a signal); given, it "
                  "also sets the sinks' sync_seconds where the flow leaves it at 10")
      ->each([&o](const std::string&) { o.sync_given = true; })
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return cmd;
}

int command_run(const RunOptions& o) {
  RunSetup setup;
  if (const int code = prepare_run(o, setup); code >= 0) return code;
  std::optional<RunOutput>& output = setup.output;
  const std::string endpoint = o.endpoint.empty() ? setup.config.options.endpoint : o.endpoint;
  Flow flow(std::move(setup.config));
  int input_code = -1;
  if (const int failed = start_with_input(o, setup, flow, input_code); failed != kExitOk) {
    if (output) output->finish(false);  // no document reached it: nothing is left (a resumed partial stays)
    return failed;
  }
  if (const int code = input_code; code >= 0) {
    flow.close(RunOutcome::Incomplete);  // nothing was posted: the sinks leave their files as they were
    if (output) output->finish(false);
    return code;
  }
  HeldDocuments output_held(setup.start.at.documents - std::min(setup.start.at.documents, setup.run_start.documents),
                            setup.start.last_id);
  PostOptions post_options;
  // The sinks count input positions from here (resumable_sink.hpp).
  if (setup.run_start.documents > 0) post_options.parameters[kResumeFromParam] = setup.run_start.documents;
  if (setup.identity && !setup.sinks.empty() && !setup.source->carries_ids())
    post_options.parameters[kPositionalIdsParam] = setup.identity->input_hash;
  const std::string board = setup.resume_source ? setup.resume_source->positions_key() : std::string();
  if (!board.empty()) post_options.parameters[kInputPositionsParam] = board;
  std::unique_ptr<ResumeLog> log;
  if (output && setup.identity && !setup.identity->output_format.empty()) {
    try {
      log = std::make_unique<ResumeLog>(o.output, *setup.identity, SyncPolicy{o.sync_every, o.sync_seconds},
                                        setup.start, [&] { return output->sync(); });
    } catch (const Error& e) {
      fmt::print(stderr, "error: {}\n", e.what());
      flow.close(RunOutcome::Incomplete);
      output->finish(false);
      return kExitFailure;
    }
  }

  const bool interactive = o.progress == "always" || (o.progress == "auto" && isatty(STDERR_FILENO));
  const char* clear_line = interactive ? "\r\x1b[2K" : "";
  ProgressLine progress(fmt::format("[{}]", endpoint), interactive);
  if (o.resume) progress.set_resumed(setup.run_start.documents, setup.left);
  post_options.on_progress = [&](const Progress& p) { progress.update(p); };
  std::uint64_t reported_failures = 0;
  PostSummary summary;
  int status = kExitOk;
  std::string post_error;
  InterruptGuard interrupt([&] { return output ? output->give_up() : std::string("no output file"); });
  StoppableSource stoppable(setup.resume_source ? *setup.resume_source : *setup.source, interrupt.stop());
  try {
    summary = flow.post(
        endpoint, stoppable,
        [&](Response&& r) {
          if (!board.empty()) retire_input_positions(board, r.docs);  // no executor holds them any more
          if (!r.ok()) {
            if (log) log->failed();
            if (reported_failures++ < 20) {
              fmt::print(stderr, "{}request {} ({} documents) failed in executor '{}': {}\n", clear_line, r.index,
                         r.docs.size(), r.error_executor, r.error);
            }
            return;
          }
          if (!output) return;
          output_held.drop(r.docs);
          if (log) log->handed(r.docs);
          output->write(std::move(r.docs));
          if (log) log->maybe_sync();
        },
        post_options);
  } catch (const std::exception& e) {
    post_error = e.what();
    fmt::print(stderr, "{}error: {}\n", clear_line, post_error);
    status = kExitFailure;
  }
  const auto post_ended = std::chrono::system_clock::now();
  spdlog::debug("run: posting ended ({} documents in, {:.3f} s)", summary.input_documents, summary.seconds);
  const int signal = interrupt.signal();
  // The run ended well only when every document was read and answered: executors that write files (and
  // --output) complete them only then, and otherwise leave them marked partial.
  const bool complete = signal == 0 && status == kExitOk && summary.failed_requests == 0;
  flow.close(complete ? RunOutcome::Complete : RunOutcome::Incomplete);
  const std::string written = end_output(output, log.get(), complete, signal, post_error, status);
  const double after_post = std::chrono::duration<double>(std::chrono::system_clock::now() - post_ended).count();
  spdlog::debug("run: executors closed and outputs ended in {:.3f} s", after_post);
  interrupt.finished();
  if (signal != 0) {
    fmt::print(stderr, "{}interrupted by {}: stopped reading input after {} documents; {}\n", clear_line,
               signal_name(signal), summary.input_documents, written.empty() ? "no output file" : written);
    return 128 + signal;
  }
  if (status == kExitOk) progress.finish(summary);
  // Whatever cut the run short (a failed request, the input, the output), say what is on disk.
  if (!complete && !written.empty()) fmt::print(stderr, "output: {}\n", written);
  report_run(o, flow, summary, output, written, post_ended, after_post, resume_json(setup, log.get()));
  if (reported_failures > 20) fmt::print(stderr, "... and {} more failed requests\n", reported_failures - 20);
  if (summary.failed_requests > 0) status = kExitFailure;
  return status;
}

}  // namespace flowline::cli
