// `flowline run --resume` (resume.hpp): the run's identity, NAME.resume.json, the sync cadence and the
// source that skips what the output already holds.
#include "resume.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/resumable_sink.hpp"
#include "flowline/writers.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <fcntl.h>
#include <fstream>
#include <unistd.h>

namespace flowline::cli {
namespace {

constexpr std::uint64_t kFnvOffset = 14695981039346656037ULL;
constexpr std::uint64_t kFnvPrime = 1099511628211ULL;

void fnv(std::uint64_t& h, std::string_view bytes) {
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * kFnvPrime;
}

// Hashes a file's bytes into `h`; returns its size. Stops between blocks once `*stop` is set.
std::uint64_t hash_file(std::uint64_t& h, const std::filesystem::path& path, const std::atomic<bool>* stop = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read '{}' to identify the run", path.string()));
  std::string buffer(1 << 20, '\0');
  std::uint64_t size = 0;
  while (in && !(stop && stop->load(std::memory_order_relaxed))) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    fnv(h, std::string_view(buffer.data(), n));
    size += n;
  }
  return size;
}

std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

std::string format_name(const std::filesystem::path& output) {
  if (output.empty() || output == "-") return "";
  switch (output_format_for(output)) {
    case OutputFormat::Npy:
      return "npy";
    case OutputFormat::Safetensors:
      return "safetensors";
    default:
      return "jsonl";
  }
}

boost::json::object identity_json(const RunIdentity& r) {
  return {{"input", r.input},
          {"input_format", r.input_format},
          {"input_bytes", r.input_bytes},
          {"input_hash", r.input_hash},
          {"flow", r.flow},
          {"flow_hash", r.flow_hash},
          {"output_format", r.output_format}};
}

void check_same(const boost::json::object& had, const RunIdentity& now, const std::filesystem::path& manifest) {
  const boost::json::object want = identity_json(now);
  static const std::pair<const char*, const char*> kWhat[] = {
      {"input", "another input"},         {"input_format", "another input format"},
      {"input_bytes", "a changed input"}, {"input_hash", "a changed input"},
      {"flow", "another flow file"},      {"flow_hash", "a changed flow (its file, --set, endpoint or request size)"},
      {"output_format", "another format"}};
  for (const auto& [key, what] : kWhat) {
    const auto* was = had.if_contains(key);
    if (!was || *was != want.at(key)) {
      throw Error(
          fmt::format("'{}' was left by a run of {} ({}: {} then, {} now): refused, nothing appended. Run "
                      "without --resume (and --overwrite) to start anew",
                      manifest.string(), what, key, was ? boost::json::serialize(*was) : "missing",
                      boost::json::serialize(want.at(key))));
    }
  }
}

}  // namespace

RunIdentity identify_input(const std::string& input, const std::string& input_format, const std::atomic<bool>* stop) {
  RunIdentity r;
  r.input = input;
  r.input_format = input_format;
  std::uint64_t h = kFnvOffset;
  if (std::filesystem::is_directory(input)) {
    // The files the input's source reads, and more (hidden ones too): a folder's own files; for images its
    // whole tree, as the images source walks its subfolders (each file named by its path below the input, which
    // is its name for a file of the folder itself). A resume skips by position, so this is what tells it that
    // the documents before the sync point are the ones the output holds.
    std::vector<std::filesystem::path> files;
    if (input_format == "images") {
      for (const auto& e : std::filesystem::recursive_directory_iterator(
               input, std::filesystem::directory_options::skip_permission_denied)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      for (const auto& e : std::filesystem::directory_iterator(input)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      fnv(h, f.lexically_relative(input).string());
      r.input_bytes += hash_file(h, f, stop);
    }
  } else {
    r.input_bytes = hash_file(h, input, stop);
    // An array's rows take their ids, texts and tags from its sidecar, line for line: a changed sidecar is a
    // changed input.
    const std::filesystem::path sidecar = sidecar_path_for(input);
    std::error_code ec;
    if ((input_format == "npy" || input_format == "safetensors") && std::filesystem::exists(sidecar, ec)) {
      fnv(h, "\nsidecar\n");
      r.input_bytes += hash_file(h, sidecar, stop);
    }
  }
  r.input_hash = hex(h);
  return r;
}

void identify_flow(RunIdentity& r, const std::string& flow, const std::vector<std::string>& sets,
                   const std::string& endpoint, std::size_t request_size, const std::filesystem::path& output) {
  r.flow = flow;
  std::uint64_t f = kFnvOffset;
  hash_file(f, flow);
  for (const auto& s : sets) fnv(f, "\n--set " + s);
  fnv(f, fmt::format("\n--endpoint {}\n--request-size {}", endpoint, request_size));
  r.flow_hash = hex(f);
  r.output_format = format_name(output);
}

RunIdentity identify_run(const std::string& input, const std::string& input_format, const std::string& flow,
                         const std::vector<std::string>& sets, const std::string& endpoint, std::size_t request_size,
                         const std::filesystem::path& output) {
  RunIdentity r = identify_input(input, input_format);
  identify_flow(r, flow, sets, endpoint, request_size, output);
  return r;
}

std::string run_key_of(const RunIdentity& r) {
  std::uint64_t h = kFnvOffset;
  for (const std::string& part :
       {r.input, r.input_format, std::to_string(r.input_bytes), r.input_hash, r.flow, r.flow_hash})
    fnv(h, part + '\n');
  return hex(h);
}

RunStart choose_run_start(const std::optional<ResumePoint>& output, const std::vector<std::string>& sinks,
                          const std::string& run_key) {
  std::vector<std::pair<std::string, SinkPoint>> points;
  if (output) points.emplace_back("--output", SinkPoint{output->at.documents, output->last_id, 0});
  const std::map<std::string, SinkPoint> held = held_sink_points(run_key);
  for (const std::string& name : sinks) {
    const auto it = held.find(name);
    points.emplace_back(name, it == held.end() ? SinkPoint{} : it->second);
  }
  RunStart start;
  if (points.empty()) return start;
  start.documents = std::min_element(points.begin(), points.end(), [](const auto& a, const auto& b) {
                      return a.second.documents < b.second.documents;
                    })->second.documents;
  std::string first;
  for (const auto& [name, point] : points) {
    start.held[name] = point.documents;
    if (point.documents != start.documents || start.documents == 0) continue;
    if (first.empty()) {
      first = name;
      start.last_id = point.last_id;
    } else if (point.last_id != start.last_id) {
      throw Error(
          fmt::format("'{}' and '{}' both hold {} documents, but their last ids differ ('{}', '{}'): they "
                      "are not of one run (refused, nothing appended)",
                      first, name, start.documents, start.last_id, point.last_id));
    }
  }
  return start;
}

void HeldDocuments::drop(DocumentArray& docs) {
  if (left_ == 0 || docs.empty()) return;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, docs.size()));
  left_ -= n;
  const DocumentArray held = docs.take(0, n);
  if (left_ == 0 && held[n - 1].id != last_id_) {
    throw Error(
        fmt::format("--output's last synced document is '{}', the input's document there '{}': not this "
                    "run's output (refused, nothing appended)",
                    last_id_, held[n - 1].id));
  }
}

std::filesystem::path manifest_path_for(const std::filesystem::path& output) {
  std::filesystem::path p = output;
  p += ".resume.json";
  return p;
}

std::optional<ResumePoint> find_resume_point(const std::filesystem::path& output, const RunIdentity& identity) {
  const std::filesystem::path manifest = manifest_path_for(output), partial = partial_path_for(output);
  std::error_code ec;
  const bool has_partial = std::filesystem::exists(partial, ec);
  if (!std::filesystem::exists(manifest, ec)) {
    if (!has_partial) return std::nullopt;
    throw Error(
        fmt::format("'{}' has no '{}' beside it: it is not the partial of a run that can be resumed "
                    "(refused, nothing appended)",
                    partial.string(), manifest.string()));
  }
  std::ifstream in(manifest, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  boost::json::object m;
  try {
    m = boost::json::parse(text).as_object();
  } catch (const std::exception& e) {
    throw Error(fmt::format("'{}' is not a resume manifest: {}", manifest.string(), e.what()));
  }
  check_same(m["run"].is_object() ? m["run"].as_object() : boost::json::object{}, identity, manifest);
  ResumePoint point;
  try {
    const boost::json::object& s = m.at("synced").as_object();
    point.at.documents = s.at("documents").to_number<std::uint64_t>();
    point.at.bytes = s.at("bytes").to_number<std::uint64_t>();
    point.at.sidecar_bytes = s.at("sidecar_bytes").to_number<std::uint64_t>();
    point.last_id = std::string(s.at("last_id").as_string());
  } catch (const std::exception& e) {
    throw Error(fmt::format("'{}': its 'synced' point is not readable: {}", manifest.string(), e.what()));
  }
  if (point.at.documents == 0) return std::nullopt;
  if (!has_partial) {
    throw Error(fmt::format("'{}' says {} documents were synced to '{}', which is missing: refused", manifest.string(),
                            point.at.documents, partial.string()));
  }
  const bool binary = identity.output_format != "jsonl";
  const std::filesystem::path records = binary ? partial_path_for(sidecar_path_for(output)) : partial;
  const std::uint64_t end = binary ? point.at.sidecar_bytes : point.at.bytes;
  for (const auto& p : {partial, records}) {
    const auto size = std::filesystem::file_size(p, ec);
    const std::uint64_t want = p == partial ? point.at.bytes : end;
    if (ec || size < want) {
      throw Error(
          fmt::format("'{}' holds {} bytes, fewer than the {} its run synced: not this run's partial "
                      "(refused, nothing appended)",
                      p.string(), ec ? 0 : size, want));
    }
  }
  const std::string id = jsonl_id_ending_at(records, end);
  if (id != point.last_id) {
    throw Error(
        fmt::format("'{}': the document at the sync point is '{}', its manifest says '{}': not this run's "
                    "partial (refused, nothing appended)",
                    records.string(), id, point.last_id));
  }
  return point;
}

std::optional<std::string> complete_of_another_input(const RunIdentity& identity, const std::string& input,
                                                     const std::string& input_format, const std::string& output,
                                                     const FlowConfig& config) {
  if (open_file_source(input, parse_input_format(input_format))->carries_ids()) return std::nullopt;
  std::vector<std::pair<std::string, std::filesystem::path>> records;  // (the output as the user knows it, its ids)
  if (!output.empty() && output != "-" && !identity.output_format.empty()) {
    if (identity.output_format == "jsonl") {
      records.emplace_back(fmt::format("'{}'", output), output);
    } else {
      const auto sidecar = sidecar_path_for(output);
      records.emplace_back(fmt::format("'{}' (by '{}')", output, sidecar.string()), sidecar);
    }
  }
  for (const FlowOutput& w : flow_outputs(config)) {
    const auto e = std::find_if(config.executors.begin(), config.executors.end(),
                                [&](const ExecutorConfig& c) { return c.name == w.executor; });
    if (e != config.executors.end() && e->uses == "JsonlWriter")
      records.emplace_back(fmt::format("'{}' (executor '{}')", w.path.string(), w.executor), w.path);
  }
  const std::string& hash = identity.input_hash;
  for (const auto& [name, file] : records) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (ec || size == 0) continue;
    const std::string id = jsonl_id_ending_at(file, size);
    if (const auto last = read_positional_id(id); last && last->input_hash != hash) {
      return fmt::format(
          "{} is complete, but of another input: its documents' ids name input {}, this input is {} (a changed "
          "or grown input). --resume continues an interrupted run of the same input; write elsewhere, or run "
          "without --resume and with --overwrite to replace it",
          name, last->input_hash, hash);
    }
  }
  return std::nullopt;
}

ResumeLog::ResumeLog(std::filesystem::path output, RunIdentity identity, SyncPolicy policy, ResumePoint start,
                     std::function<SyncPoint()> sync)
    : output_(std::move(output)),
      identity_(std::move(identity)),
      policy_(policy),
      sync_(std::move(sync)),
      last_id_(start.last_id),
      handed_(start.at.documents),
      synced_(start.at.documents),
      last_sync_(std::chrono::steady_clock::now()) {
  write_manifest(start);
}

void ResumeLog::handed(const DocumentArray& docs) {
  if (docs.empty()) return;
  handed_ += docs.size();
  last_id_ = docs[docs.size() - 1].id;
}

void ResumeLog::maybe_sync() {
  if (failed_ || handed_ == synced_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool by_count = policy_.documents > 0 && handed_ - synced_ >= policy_.documents;
  const bool by_time =
      policy_.seconds > 0 && std::chrono::duration<double>(now - last_sync_).count() >= policy_.seconds;
  if (by_count || by_time) sync_now();
}

void ResumeLog::sync_now() {
  if (failed_ || handed_ == synced_) return;
  const auto start = std::chrono::steady_clock::now();
  const SyncPoint at = sync_();
  if (at.documents != handed_) {
    throw Error(
        fmt::format("'{}': synced {} documents of the {} handed over", output_.string(), at.documents, handed_));
  }
  write_manifest(ResumePoint{at, last_id_});
  synced_ = handed_;
  ++syncs_;
  last_sync_ = std::chrono::steady_clock::now();
  sync_seconds_ += std::chrono::duration<double>(last_sync_ - start).count();
}

void ResumeLog::completed() noexcept {
  std::error_code ec;
  std::filesystem::remove(manifest_path_for(output_), ec);
}

void ResumeLog::write_manifest(const ResumePoint& point) const {
  const boost::json::object m = {{"flowline_resume", 1},
                                 {"run", identity_json(identity_)},
                                 {"synced",
                                  {{"documents", point.at.documents},
                                   {"bytes", point.at.bytes},
                                   {"sidecar_bytes", point.at.sidecar_bytes},
                                   {"last_id", point.last_id}}}};
  const std::string text = boost::json::serialize(m) + "\n";
  const std::filesystem::path path = manifest_path_for(output_);
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  // Written aside, synced, then renamed over the old one: a crash leaves the old manifest or the new one.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error(fmt::format("cannot write the resume manifest '{}'", path.string()));
  }
}

ResumeSource::ResumeSource(DocumentSource& inner, bool positional_ids, std::string input_hash, std::uint64_t skip,
                           std::string last_id, std::string positions_key)
    : inner_(inner),
      positional_ids_(positional_ids),
      input_hash_(std::move(input_hash)),
      skip_(skip),
      last_id_(std::move(last_id)),
      positions_key_(std::move(positions_key)) {}

void ResumeSource::skip() {
  if (skipped_ >= skip_) return;
  // The input's boundaries only: its hash was checked against the manifest's (find_resume_point), so the
  // documents passed over are the bytes the run that wrote them read and accepted.
  const Skipped passed = inner_.skip(skip_ - skipped_);
  skipped_ += passed.documents;
  position_ += passed.documents;
  if (skipped_ < skip_) {
    throw InputError(SourceLocation{}, fmt::format("the input ended after {} documents, but the output to resume "
                                                   "holds {}: not this input's output",
                                                   skipped_, skip_));
  }
  const std::string id = positional_ids_ ? positional_id(input_hash_, position_ - 1) : passed.last_id;
  if (id != last_id_) {
    throw InputError(SourceLocation{},
                     fmt::format("input document {} has id '{}', the output's last synced document '{}': the "
                                 "flow does not write one document per input document in order, or the input "
                                 "changed (refused, nothing appended)",
                                 skip_, id, last_id_));
  }
}

Skipped ResumeSource::skip(std::uint64_t n) {
  if (skipped_ < skip_) skip();
  Skipped passed = inner_.skip(n);
  position_ += passed.documents;
  if (positional_ids_ && passed.documents == n && n > 0) passed.last_id = positional_id(input_hash_, position_ - 1);
  return passed;
}

std::optional<std::uint64_t> ResumeSource::count_left() {
  if (skipped_ < skip_) skip();
  return inner_.count_left();
}

std::size_t ResumeSource::read(DocumentArray& out, std::size_t max) {
  if (skipped_ < skip_) skip();
  const std::size_t before = out.size();
  const std::size_t n = inner_.read(out, max);
  if (positional_ids_) {
    for (std::size_t i = before; i < out.size(); ++i) out[i].id = positional_id(input_hash_, position_ + i - before);
  }
  if (!positions_key_.empty() && n > 0) {
    // Posted before the documents leave this thread (the sinks may look them up as soon as they are posted).
    post_input_positions(positions_key_, std::span<const Document>(out.docs()).subspan(before), position_);
  }
  position_ += n;
  return n;
}

}  // namespace flowline::cli
