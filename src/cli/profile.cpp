// `flowline profile`: one child run per batch size, the memory fits, a recommendation, a report, JSON and a plot.
#include "profile.hpp"

#include "launcher.hpp"
#include "outputs.hpp"
#include "plot.hpp"
#include "stats_json.hpp"

#include "flowline/flowline.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace flowline::cli {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// What one child run reported, for one batch size.
struct RunFigures {
  std::size_t batch_size = 0;
  bool ok = false;
  std::string error;  // the child's last lines of stderr when it failed
  double seconds = 0, documents = 0, docs_per_second = 0;
  double batch_ms_mean = 0, batch_ms_p50 = 0, batch_ms_p99 = 0;
  double host_peak_rss_mib = 0;
  double max_forward_sequences = 0, max_forward_tokens = 0;
  std::string device;
  bool gpu = false, nvml = false;
  double total_mib = 0, used_at_start_mib = 0, outside_allocator_mib = 0, load_mib = 0;
  double peak_batch_mib = 0;  // allocator: peak allocated minus the weights
  double peak_allocated_mib = 0, peak_reserved_mib = 0;
  double total_peak_mib = 0;  // accounted: before + outside the allocator + peak reserved
  double nvml_peak_mib = 0;   // NVML's highest reading during the run
};

struct LinearFit {
  bool ok = false;
  double slope = 0, intercept = 0;
};

LinearFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  LinearFit f;
  const auto n = static_cast<double>(x.size());
  if (x.size() < 2) return f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double denominator = n * sxx - sx * sx;
  if (std::abs(denominator) < 1e-12) return f;
  f.slope = (n * sxy - sx * sy) / denominator;
  f.intercept = (sy - f.slope * sx) / n;
  f.ok = true;
  return f;
}

std::string tail_of(const std::string& text, std::size_t lines) {
  std::vector<std::string> all;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const std::size_t first = all.size() > lines ? all.size() - lines : 0;
  std::string out;
  for (std::size_t i = first; i < all.size(); ++i) out += (out.empty() ? "" : "\n") + all[i];
  return out;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `argv` with stdout discarded and stderr captured into `log`; returns the exit status.
int spawn_and_wait(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(fmt::format("waiting for '{}' failed: {}", argv[0], std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

double number(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_number() ? v->to_number<double>() : 0.0;
}

// The figures of one run from its --stats-json file.
RunFigures read_run(const boost::json::value& root, const std::string& executor, std::size_t batch_size) {
  RunFigures r;
  r.batch_size = batch_size;
  r.ok = true;
  const auto& o = root.as_object();
  r.seconds = number(o, "seconds");
  r.documents = number(o, "documents");
  r.docs_per_second = r.seconds > 0 ? r.documents / r.seconds : 0;
  r.host_peak_rss_mib = number(o, "host_peak_rss_mb");
  double batches = 0, weighted_mean = 0;
  for (const auto& value : o.at("replicas").as_array()) {
    const auto& rep = value.as_object();
    if (rep.at("executor").as_string() != executor) continue;
    const double b = number(rep, "batches");
    batches += b;
    weighted_mean += b * number(rep, "batch_ms_mean");
    r.device = std::string(rep.at("device").as_string());
    r.load_mib += number(rep, "gpu_load_bytes") / kMiB;
    if (const auto* metrics = rep.if_contains("metrics"); metrics && metrics->is_object()) {
      r.max_forward_sequences =
          std::max(r.max_forward_sequences, number(metrics->as_object(), "max_forward_sequences"));
      r.max_forward_tokens = std::max(r.max_forward_tokens, number(metrics->as_object(), "max_forward_tokens"));
    }
  }
  r.batch_ms_mean = batches > 0 ? weighted_mean / batches : 0;
  // The percentiles of all the executor's batches, its replicas together (--stats-json's "executors").
  if (const auto* executors = o.if_contains("executors"); executors && executors->is_array()) {
    for (const auto& value : executors->get_array()) {
      const auto& e = value.as_object();
      if (e.at("executor").as_string() != executor) continue;
      r.batch_ms_mean = number(e, "batch_ms_mean");
      r.batch_ms_p50 = number(e, "batch_ms_p50");
      r.batch_ms_p99 = number(e, "batch_ms_p99");
    }
  }
  if (r.max_forward_sequences == 0) r.max_forward_sequences = static_cast<double>(batch_size);
  if (const auto* devices = o.if_contains("devices"); devices && devices->is_array()) {
    for (const auto& value : devices->as_array()) {
      const auto& d = value.as_object();
      if (d.at("device").as_string() != r.device) continue;
      r.gpu = true;
      r.peak_allocated_mib = number(d, "peak_allocated_bytes") / kMiB;
      r.peak_reserved_mib = number(d, "peak_reserved_bytes") / kMiB;
      r.peak_batch_mib = r.peak_allocated_mib - number(d, "load_bytes") / kMiB;
      r.nvml = d.contains("nvml_total_bytes");
      if (r.nvml) {
        r.total_mib = number(d, "nvml_total_bytes") / kMiB;
        r.used_at_start_mib = number(d, "nvml_used_at_start_bytes") / kMiB;
        r.outside_allocator_mib = number(d, "outside_allocator_bytes") / kMiB;
        r.total_peak_mib = number(d, "accounted_peak_bytes") / kMiB;
        r.nvml_peak_mib = number(d, "nvml_peak_used_bytes") / kMiB;
      }
    }
  }
  return r;
}

// The executor whose batch size is profiled: the one named, or the only one with a batch_size parameter.
std::string choose_executor(const FlowConfig& config, const std::string& requested) {
  std::vector<std::string> candidates;
  for (const auto& e : config.executors) {
    const auto& spec = Registry::global().get(e.uses).spec;
    const bool has_batch_size =
        std::any_of(spec.params.begin(), spec.params.end(), [](const ParamSpec& p) { return p.name == "batch_size"; });
    if (!requested.empty() && e.name == requested) {
      if (!has_batch_size) throw Error(fmt::format("--executor {}: {} has no batch_size parameter", requested, e.uses));
      return e.name;
    }
    if (has_batch_size) candidates.push_back(e.name);
  }
  if (!requested.empty()) throw Error(fmt::format("--executor {}: the flow has no such executor", requested));
  if (candidates.size() == 1) return candidates.front();
  if (candidates.empty()) throw Error("no executor of this flow has a batch_size parameter to profile");
  throw Error(fmt::format("several executors have a batch_size parameter ({}); choose one with --executor",
                          fmt::join(candidates, ", ")));
}

double host_available_mib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib / 1024.0;
  }
  return 0;
}

std::string mib_or_na(bool available, double mib) { return available ? fmt::format("{:.1f}", mib) : "n/a"; }

// Checks the options and the flow, and picks the executor to profile. Prints what is wrong (config errors
// with file:line:col) and returns false when the user must change something (exit 2).
bool check_options(const ProfileOptions& o, std::string& executor, FlowConfig& config) {
  if (o.batch_sizes.empty()) {
    fmt::print(stderr, "error: --batch-sizes: give at least one batch size, e.g. 50,300\n");
    return false;
  }
  if (!(o.memory_fraction > 0 && o.memory_fraction <= 1)) {
    fmt::print(stderr, "error: --memory-fraction: {} is outside (0, 1]\n", o.memory_fraction);
    return false;
  }
  try {
    config = load_flow_with_sets(o.flow, o.sets);
    executor = choose_executor(config, o.executor);
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) fmt::print(stderr, "{}\n", d.to_string());
    return false;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return false;
  }
  if (!std::filesystem::exists(o.input)) {
    fmt::print(stderr, "error: input: cannot open '{}'\n", o.input);
    return false;
  }
  return true;
}

// One child `flowline run` per batch size, each in a fresh process. Returns nullopt when a child said the
// flow or input is wrong (exit 2: wrong for every batch size).
// The files the flow's writers would write go to `scratch` (profile writes nowhere the flow names), each
// run replacing the last one's (--overwrite).
std::optional<std::vector<RunFigures>> run_batch_sizes(const ProfileOptions& o, const std::string& executor,
                                                       const FlowConfig& config, const std::filesystem::path& scratch) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<RunFigures> runs;
  for (const std::size_t b : o.batch_sizes) {
    const auto stats = scratch / fmt::format("stats-{}.json", b);
    const auto log = scratch / fmt::format("run-{}.log", b);
    std::vector<std::string> argv{self,
                                  "--log-level",
                                  o.log_level,
                                  "run",
                                  o.flow,
                                  "--input",
                                  o.input,
                                  "--endpoint",
                                  o.endpoint,
                                  "--request-size",
                                  std::to_string(b),
                                  "--progress",
                                  "never",
                                  "--stats-json",
                                  stats.string(),
                                  "--set",
                                  fmt::format("{}.batch_size={}", executor, b)};
    if (!o.input_format.empty()) argv.insert(argv.end(), {"--input-format", o.input_format});
    for (const auto& s : o.sets) argv.insert(argv.end(), {"--set", s});
    for (const auto& s : redirect_outputs(config, scratch)) argv.insert(argv.end(), {"--set", s});
    argv.push_back("--overwrite");
    fmt::print(stderr, "profile: batch size {} ...\n", b);
    const int status = spawn_and_wait(argv, log);
    RunFigures r;
    r.batch_size = b;
    if (status != 0 || !std::filesystem::exists(stats)) {
      r.error = tail_of(read_text(log), 6);
      fmt::print(stderr, "profile: batch size {} failed (exit {}):\n{}\n", b, status, r.error);
      if (status == kExitUsage) return std::nullopt;
    } else {
      try {
        r = read_run(boost::json::parse(read_text(stats)), executor, b);
      } catch (const std::exception& e) {
        r.error = fmt::format("unreadable statistics '{}': {}", stats.string(), e.what());
      }
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

// File by file: the std::filesystem::remove_all that the PyPI LibTorch exports can crash (see
// src/CMakeLists.txt). The runs make files only (statistics, logs, the writers' outputs), no folders.
void remove_scratch(const std::filesystem::path& scratch) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(scratch, ec)) files.push_back(entry.path());
  for (const auto& f : files) ::unlink(f.c_str());
  ::rmdir(scratch.c_str());
}

// What the successful runs say together: peak batch memory fitted against the largest pass in sequences and
// in tokens (GPU), or the process's peak RSS against sequences (CPU), and the recommendation.
struct Analysis {
  std::vector<const RunFigures*> good;
  bool gpu = false, nvml = false;
  LinearFit per_doc, per_token;
  boost::json::object recommendation;
  std::string recommendation_line;
};

void recommend(const ProfileOptions& o, double host_available_at_start, Analysis& a) {
  const RunFigures& largest = **std::max_element(a.good.begin(), a.good.end(), [](auto* x, auto* y) {
    return x->max_forward_sequences < y->max_forward_sequences;
  });
  double budget = 0, fixed = 0, fragmentation = 1;
  std::string what;
  if (a.gpu) {
    const double free_at_start = a.nvml ? largest.total_mib - largest.used_at_start_mib : 0;
    budget = o.memory_fraction * free_at_start;
    fixed = largest.outside_allocator_mib + largest.load_mib;
    // The allocator reserves more than it hands out; scale batch memory by what the largest run saw.
    if (largest.peak_batch_mib > 0) {
      fragmentation = std::max(1.0, (largest.peak_reserved_mib - largest.load_mib) / largest.peak_batch_mib);
    }
    what = fmt::format("{:.0f}% of the {:.0f} MiB of GPU memory free at start", o.memory_fraction * 100, free_at_start);
  } else {
    budget = o.memory_fraction * host_available_at_start;
    what = fmt::format("{:.0f}% of the {:.0f} MiB of host memory available at start", o.memory_fraction * 100,
                       host_available_at_start);
  }
  a.recommendation["budget_mib"] = budget;
  a.recommendation["budget"] = what;
  if (a.gpu && !a.nvml) {
    a.recommendation_line = "no recommendation: NVML is not available, so the memory free at start is unknown";
    return;
  }
  if (!a.per_doc.ok || a.per_doc.slope <= 0) {
    a.recommendation_line = "no recommendation: needs two batch sizes whose peak memory grows with the batch";
    return;
  }
  const double room = budget / fragmentation - (a.gpu ? fixed / fragmentation : 0) - a.per_doc.intercept;
  const double best = std::floor(room / a.per_doc.slope);
  a.recommendation["batch_size"] = static_cast<std::uint64_t>(std::max(0.0, best));
  a.recommendation["fragmentation_factor"] = fragmentation;
  const bool tokens = a.per_token.ok && a.per_token.slope > 0;
  if (tokens) {
    a.recommendation["max_batch_tokens"] =
        static_cast<std::uint64_t>(std::max(0.0, std::floor(room / a.per_token.slope)));
  }
  a.recommendation_line =
      best >= 1
          ? fmt::format("largest batch size that fits {}: {:.0f} ({:.2f} MiB per document{})", what, best,
                        a.per_doc.slope,
                        tokens ? fmt::format(", max_batch_tokens {:.0f}", std::floor(room / a.per_token.slope)) : "")
          : fmt::format("not even one document fits {}", what);
}

Analysis analyse(const ProfileOptions& o, const std::vector<RunFigures>& runs, double host_available_at_start) {
  Analysis a;
  for (const auto& r : runs) {
    if (r.ok) a.good.push_back(&r);
  }
  a.gpu = !a.good.empty() && a.good.front()->gpu;
  a.nvml = a.gpu && a.good.front()->nvml;
  std::vector<double> xs, xt, ym;
  for (const auto* r : a.good) {
    xs.push_back(r->max_forward_sequences);
    xt.push_back(r->max_forward_tokens);
    ym.push_back(a.gpu ? r->peak_batch_mib : r->host_peak_rss_mib);
  }
  a.per_doc = fit_line(xs, ym);
  a.per_token = fit_line(xt, ym);
  if (!a.good.empty()) recommend(o, host_available_at_start, a);
  return a;
}

void print_report(const ProfileOptions& o, const std::string& executor, const std::vector<RunFigures>& runs,
                  const Analysis& a) {
  fmt::print("flowline profile: {} on {} (executor '{}', {})\n", o.flow, o.input, executor,
             a.good.empty() ? "no successful run" : a.good.front()->device);
  if (a.gpu && a.nvml) {
    fmt::print("total GPU memory {:.0f} MiB; in use before start {:.1f} MiB\n", a.good.front()->total_mib,
               a.good.front()->used_at_start_mib);
  }
  if (!a.gpu) fmt::print("GPU figures not available: the executor runs on the CPU\n");
  fmt::print("{:>6} {:>7} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}\n", "batch", "docs",
             "total s", "docs/s", "batch ms", "context", "model", "peak batch", "total peak", "NVML peak", "NVML diff",
             "RAM MiB", "tokens");
  for (const auto& r : runs) {
    if (!r.ok) {
      fmt::print("{:>6} failed: {}\n", r.batch_size, r.error.substr(0, r.error.find('\n')));
      continue;
    }
    const double diff =
        r.nvml && r.nvml_peak_mib > 0 ? (r.total_peak_mib - r.nvml_peak_mib) / r.nvml_peak_mib * 100 : 0;
    fmt::print("{:>6} {:>7.0f} {:>9.3f} {:>9.0f} {:>9.2f} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9.1f} {:>9.0f}\n",
               r.batch_size, r.documents, r.seconds, r.docs_per_second, r.batch_ms_mean,
               mib_or_na(r.nvml, r.outside_allocator_mib), mib_or_na(r.gpu, r.load_mib),
               mib_or_na(r.gpu, r.peak_batch_mib), mib_or_na(r.nvml, r.total_peak_mib),
               mib_or_na(r.nvml, r.nvml_peak_mib), r.nvml ? fmt::format("{:+.2f}%", diff) : "n/a", r.host_peak_rss_mib,
               r.max_forward_tokens);
  }
  fmt::print(
      "(MiB; context: GPU memory outside the caching allocator; model: weights; peak batch: allocator peak "
      "minus the weights; total peak: in use before start + context + allocator peak reserved; tokens: "
      "the largest forward pass)\n");
  if (a.per_doc.ok) {
    fmt::print("fit: {} = {:.2f} MiB + {:.4f} MiB x documents per pass", a.gpu ? "peak batch" : "peak RAM",
               a.per_doc.intercept, a.per_doc.slope);
    if (a.per_token.ok) {
      fmt::print("; = {:.2f} MiB + {:.2f} KiB x tokens per pass", a.per_token.intercept, a.per_token.slope * 1024);
    }
    fmt::print("\n");
  }
  if (!a.recommendation_line.empty()) fmt::print("{}\n", a.recommendation_line);
}

boost::json::object run_json(const RunFigures& r) {
  boost::json::object j{{"batch_size", r.batch_size}, {"ok", r.ok}};
  if (!r.ok) {
    j["error"] = r.error;
    return j;
  }
  j.insert({{"documents", static_cast<std::uint64_t>(r.documents)},
            {"total_seconds", r.seconds},
            {"docs_per_second", r.docs_per_second},
            {"batch_ms_mean", r.batch_ms_mean},
            {"batch_ms_p50", r.batch_ms_p50},
            {"batch_ms_p99", r.batch_ms_p99},
            {"host_peak_rss_mib", r.host_peak_rss_mib},
            {"max_forward_sequences", static_cast<std::uint64_t>(r.max_forward_sequences)},
            {"max_forward_tokens", static_cast<std::uint64_t>(r.max_forward_tokens)},
            {"device", r.device}});
  if (r.gpu) {
    j.insert({{"model_load_mib", r.load_mib},
              {"peak_batch_mib", r.peak_batch_mib},
              {"peak_allocated_mib", r.peak_allocated_mib},
              {"peak_reserved_mib", r.peak_reserved_mib}});
  } else {
    j["gpu"] = "not available";
  }
  if (r.nvml) {
    j.insert({{"gpu_total_mib", r.total_mib},
              {"gpu_in_use_before_start_mib", r.used_at_start_mib},
              {"context_mib", r.outside_allocator_mib},
              {"total_peak_mib", r.total_peak_mib},
              {"nvml_peak_mib", r.nvml_peak_mib}});
  }
  return j;
}

void write_json(const ProfileOptions& o, const std::string& executor, const std::vector<RunFigures>& runs, Analysis a) {
  boost::json::array json_runs;
  for (const auto& r : runs) json_runs.push_back(run_json(r));
  boost::json::object root{{"flow", o.flow},
                           {"input", o.input},
                           {"executor", executor},
                           {"gpu", a.gpu},
                           {"runs", std::move(json_runs)},
                           {"recommendation", std::move(a.recommendation)}};
  if (a.per_doc.ok) {
    root["fit_per_document"] =
        boost::json::object{{"intercept_mib", a.per_doc.intercept}, {"mib_per_document", a.per_doc.slope}};
  }
  if (a.per_token.ok) {
    root["fit_per_token"] =
        boost::json::object{{"intercept_mib", a.per_token.intercept}, {"mib_per_token", a.per_token.slope}};
  }
  write_json_file(o.json, std::move(root));
}

// The plot: memory and throughput against batch size.
void write_plot(const ProfileOptions& o, const Analysis& a) {
  PlotPanel memory{a.gpu ? "GPU memory" : "Host memory", "batch size", "MiB", {}};
  PlotPanel speed{"Throughput", "batch size", "docs/s", {}};
  PlotSeries batch{"peak batch (allocator)", {}, {}, 0x1f77b4}, total{"total peak (accounted)", {}, {}, 0xd62728},
      nvml_peak{"NVML peak", {}, {}, 0x2ca02c, true}, rss{"peak RSS", {}, {}, 0x9467bd},
      rate{"docs/s", {}, {}, 0xff7f0e};
  for (const auto* r : a.good) {
    const auto b = static_cast<double>(r->batch_size);
    batch.x.push_back(b), batch.y.push_back(r->peak_batch_mib);
    total.x.push_back(b), total.y.push_back(r->total_peak_mib);
    nvml_peak.x.push_back(b), nvml_peak.y.push_back(r->nvml_peak_mib);
    rss.x.push_back(b), rss.y.push_back(r->host_peak_rss_mib);
    rate.x.push_back(b), rate.y.push_back(r->docs_per_second);
  }
  if (a.gpu) {
    memory.series.push_back(batch);
    if (a.nvml) memory.series.insert(memory.series.end(), {total, nvml_peak});
  } else {
    memory.series.push_back(rss);
  }
  speed.series.push_back(rate);
  write_line_chart(o.plot,
                   fmt::format("flowline profile: {} ({})", std::filesystem::path(o.flow).filename().string(),
                               a.good.front()->device),
                   {memory, speed});
}

}  // namespace

int command_profile(const ProfileOptions& o) {
  std::string executor;
  FlowConfig config;
  if (!check_options(o, executor, config)) return kExitUsage;
  std::string scratch_template = (std::filesystem::temp_directory_path() / "flowline-profile-XXXXXX").string();
  if (!mkdtemp(scratch_template.data())) {
    fmt::print(stderr, "error: cannot create a scratch folder: {}\n", std::strerror(errno));
    return kExitFailure;
  }
  const std::filesystem::path scratch = scratch_template;
  const double host_available_at_start = host_available_mib();
  const auto runs = run_batch_sizes(o, executor, config, scratch);
  remove_scratch(scratch);
  if (!runs) return kExitUsage;

  const Analysis analysis = analyse(o, *runs, host_available_at_start);
  print_report(o, executor, *runs, analysis);
  try {
    write_json(o, executor, *runs, analysis);
    if (!o.plot.empty() && !analysis.good.empty()) write_plot(o, analysis);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitFailure;
  }
  fmt::print("wrote {}{}\n", o.json, o.plot.empty() || analysis.good.empty() ? "" : " and " + o.plot);
  return analysis.good.size() == runs->size() ? kExitOk : kExitFailure;
}

}  // namespace flowline::cli
