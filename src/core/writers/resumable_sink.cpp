// Resumable sinks (flowline/resumable_sink.hpp): the params, the held-point board the run reads, the
// position count and sync cadence of one sink, and a file sink's PATH.resume.json.
#include "flowline/resumable_sink.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/output_file.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <unistd.h>

namespace flowline {
namespace {

constexpr std::uint64_t kMaxRecordBytes = 16 << 20;  // the longest last record jsonl_id_ending_at reads back

std::mutex g_board_mutex;
std::map<std::string, std::map<std::string, SinkPoint>> g_board;        // run key -> executor -> held point
std::map<std::string, std::map<std::string, std::size_t>> g_published;  // run key -> executor -> held() calls

// The position board: run key -> id -> the position of the document in flight under it, and how many are.
struct InFlight {
  std::uint64_t position = 0;
  std::uint32_t count = 0;  // more than 1: the id is ambiguous until all are retired
};
std::mutex g_positions_mutex;
std::map<std::string, std::unordered_map<std::string, InFlight>> g_positions;

}  // namespace

std::vector<ParamSpec> resumable_sink_params() {
  return {ParamSpec::optional("resume", ParamType::Bool, false,
                              "continue what an earlier run of the same input and flow left (flowline run --resume "
                              "sets it)"),
          ParamSpec::optional("run_key", ParamType::String, "",
                              "the run this sink's progress belongs to (flowline run sets it for a file or folder "
                              "input; empty: no progress is kept)"),
          ParamSpec::optional("sync_every", ParamType::Int, 0,
                              "make what was written durable every N documents (0: not by count; left at 0, "
                              "flowline run's --sync-every sets it)")
              .min(0),
          ParamSpec::optional("sync_seconds", ParamType::Double, 10.0,
                              "... and every S seconds (0: not by time; left at 10, flowline run's --sync-seconds "
                              "sets it)")
              .min(0)};
}

bool is_resumable_sink(const ExecutorSpec& spec) {
  const auto has = [&](std::string_view name) {
    return std::any_of(spec.params.begin(), spec.params.end(), [&](const ParamSpec& p) { return p.name == name; });
  };
  return has("resume") && has("run_key") && has("sync_every") && has("sync_seconds");
}

std::map<std::string, SinkPoint> held_sink_points(const std::string& run_key) {
  std::lock_guard lock(g_board_mutex);
  const auto it = g_board.find(run_key);
  return it == g_board.end() ? std::map<std::string, SinkPoint>{} : it->second;
}

std::map<std::string, std::size_t> held_sink_publications(const std::string& run_key) {
  std::lock_guard lock(g_board_mutex);
  const auto it = g_published.find(run_key);
  return it == g_published.end() ? std::map<std::string, std::size_t>{} : it->second;
}

void post_input_positions(const std::string& run_key, std::span<const Document> docs, std::uint64_t first) {
  std::lock_guard lock(g_positions_mutex);
  auto& board = g_positions[run_key];
  for (std::size_t i = 0; i < docs.size(); ++i) {
    InFlight& slot = board[docs[i].id];
    if (slot.count++ == 0) slot.position = first + i;
  }
}

void retire_input_positions(const std::string& run_key, const DocumentArray& docs) {
  std::lock_guard lock(g_positions_mutex);
  const auto run = g_positions.find(run_key);
  if (run == g_positions.end()) return;
  for (const Document& doc : docs) {
    const auto it = run->second.find(doc.id);
    if (it != run->second.end() && --it->second.count == 0) run->second.erase(it);
  }
}

std::optional<std::uint64_t> input_position(const std::string& run_key, const std::string& id) {
  std::lock_guard lock(g_positions_mutex);
  const auto run = g_positions.find(run_key);
  if (run == g_positions.end()) return std::nullopt;
  const auto it = run->second.find(id);
  if (it == run->second.end() || it->second.count != 1) return std::nullopt;
  return it->second.position;
}

SinkProgress::SinkProgress(const Params& params, std::string executor)
    : executor_(std::move(executor)),
      run_key_(params.get<std::string>("run_key")),
      resume_(params.get<bool>("resume")),
      sync_every_(static_cast<std::uint64_t>(params.get<std::int64_t>("sync_every"))),
      sync_seconds_(params.get<double>("sync_seconds")) {}

void SinkProgress::held(SinkPoint point) {
  held_ = std::move(point);
  if (!enabled()) return;
  std::lock_guard lock(g_board_mutex);
  auto& slot = g_board[run_key_];
  const auto it = slot.find(executor_);
  if (it == slot.end() || held_.documents < it->second.documents) slot[executor_] = held_;
  ++g_published[run_key_][executor_];
}

void SinkProgress::start(const RequestInfo& request) {
  if (started_) return;
  started_ = true;
  if (const auto* from = request.parameters.if_contains(kResumeFromParam); from && from->is_number())
    position_ = from->to_number<std::uint64_t>();
  if (const auto* hash = request.parameters.if_contains(kPositionalIdsParam); hash && hash->is_string() && enabled())
    positional_ = std::string(hash->get_string());
  if (const auto* key = request.parameters.if_contains(kInputPositionsParam); key && key->is_string() && enabled())
    by_board_ = key->get_string() == run_key_;
  next_ = synced_position_ = position_;
  if (position_ > held_.documents) {
    throw Error(
        fmt::format("executor '{}': the run starts at input document {}, but this sink holds only the "
                    "first {}: the documents between would be missing",
                    executor_, position_, held_.documents));
  }
}

bool SinkProgress::orders(const RequestInfo& request) {
  start(request);
  return !positional_.empty() || by_board_;
}

std::string positional_id(std::string_view input_hash, std::uint64_t position) {
  return fmt::format("{}{:016x}", input_hash, position);
}

std::optional<PositionalId> read_positional_id(std::string_view id) {
  constexpr std::size_t kHex = 16;
  if (id.size() != 2 * kHex) return std::nullopt;
  std::uint64_t position = 0;
  for (std::size_t i = 0; i < id.size(); ++i) {
    const char c = id[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    if (i >= kHex) position = position << 4 | static_cast<std::uint64_t>(digit);
  }
  return PositionalId{id.substr(0, kHex), position};
}

std::optional<std::uint64_t> SinkProgress::position_of(const Document& doc) const {
  if (by_board_) return input_position(run_key_, doc.id);
  const auto id = read_positional_id(doc.id);
  if (id && id->input_hash == positional_) return id->position;
  return std::nullopt;
}

DocumentArray SinkProgress::order(const DocumentArray& docs) {
  for (const Document& doc : docs) {
    const std::optional<std::uint64_t> position = position_of(doc);
    const bool positional = position.has_value();
    const std::uint64_t at = position.value_or(0);
    if (!positional || at < next_ || held_back_.size() >= kMaxHeldBack) {
      // Documents the flow made (a splitter's chunks) are its shape, said at info; order given up is worth a warning.
      spdlog::log(positional || by_board_ ? spdlog::level::warn : spdlog::level::info,
                  "executor '{}': document '{}' {}: documents are written as they come from here on, and no more "
                  "progress is kept (a --resume of this run is refused)",
                  executor_, doc.id,
                  positional  ? "came after too many others were held back for order"
                  : by_board_ ? "has no input position (no input document in flight has this id, or two have)"
                              : "is no input position");
      positional_.clear();
      by_board_ = false;
      gave_up_ = true;
      DocumentArray all = release_held_back();
      for (const Document& d : docs) all.push_back(d);
      return all;
    }
    held_back_.emplace(at, doc);
  }
  DocumentArray ready;
  for (auto it = held_back_.begin(); it != held_back_.end() && it->first == next_; it = held_back_.erase(it), ++next_)
    ready.push_back(std::move(it->second));
  return ready;
}

DocumentArray SinkProgress::release_held_back() {
  DocumentArray out;
  for (auto& [at, doc] : held_back_) out.push_back(std::move(doc));
  held_back_.clear();
  return out;
}

std::size_t SinkProgress::skip(const DocumentArray& docs) {
  if (position_ >= held_.documents) return 0;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(docs.size(), held_.documents - position_));
  if (position_ + n == held_.documents && n > 0 && docs[n - 1].id != held_.last_id) {
    throw Error(
        fmt::format("executor '{}': input document {} has id '{}', the last one this sink holds '{}': not "
                    "this run's documents, or not in input order (refused, nothing appended)",
                    executor_, held_.documents, docs[n - 1].id, held_.last_id));
  }
  return n;
}

void SinkProgress::wrote(const DocumentArray& docs) {
  if (docs.empty()) return;
  position_ += docs.size();
  last_id_ = docs[docs.size() - 1].id;
}

bool SinkProgress::sync_due() const {
  if (!enabled() || !unsynced()) return false;
  if (sync_every_ > 0 && position_ - synced_position_ >= sync_every_) return true;
  return sync_seconds_ > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_sync_).count() >= sync_seconds_;
}

void SinkProgress::synced() {
  synced_position_ = position_;
  last_sync_ = std::chrono::steady_clock::now();
}

std::filesystem::path sink_manifest_path(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  p += ".resume.json";
  return p;
}

void write_sink_manifest(const std::filesystem::path& path, const std::string& run_key, const SinkPoint& point) {
  const boost::json::object m = {
      {"flowline_sink_resume", 1},
      {"run_key", run_key},
      {"synced", {{"documents", point.documents}, {"bytes", point.bytes}, {"last_id", point.last_id}}}};
  const std::string text = boost::json::serialize(m) + "\n";
  const std::filesystem::path manifest = sink_manifest_path(path);
  std::filesystem::path tmp = manifest;
  tmp += ".tmp";
  // Written aside, synced, then renamed over the old one: a crash leaves the old manifest or the new one.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), manifest.c_str()) != 0)
    throw Error(fmt::format("cannot write the resume manifest '{}'", manifest.string()));
}

std::optional<SinkPoint> read_sink_progress(const std::filesystem::path& path, const std::string& run_key) {
  const std::filesystem::path manifest = sink_manifest_path(path);
  std::error_code ec;
  if (!std::filesystem::exists(manifest, ec)) return std::nullopt;
  std::ifstream in(manifest, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SinkPoint point;
  std::string key;
  try {
    const boost::json::object m = boost::json::parse(text).as_object();
    key = std::string(m.at("run_key").as_string());
    const boost::json::object& s = m.at("synced").as_object();
    point.documents = s.at("documents").to_number<std::uint64_t>();
    point.bytes = s.at("bytes").to_number<std::uint64_t>();
    point.last_id = std::string(s.at("last_id").as_string());
  } catch (const std::exception& e) {
    throw Error(fmt::format("'{}' is not a sink's resume manifest: {}", manifest.string(), e.what()));
  }
  if (key != run_key) {
    throw Error(
        fmt::format("'{}' was left by another run (a changed input, flow file, --set, endpoint or request "
                    "size): refused, nothing appended. Run without --resume (and --overwrite) to start anew",
                    manifest.string()));
  }
  return point;
}

std::optional<SinkPoint> read_sink_manifest(const std::filesystem::path& path, const std::string& run_key) {
  const std::filesystem::path partial = partial_path_for(path);
  std::error_code ec;
  const bool has_partial = std::filesystem::exists(partial, ec);
  if (!std::filesystem::exists(sink_manifest_path(path), ec)) {
    if (!has_partial) return std::nullopt;
    throw Error(
        fmt::format("'{}' has no '{}' beside it: not the partial of a run that can be resumed (refused, "
                    "nothing appended)",
                    partial.string(), sink_manifest_path(path).string()));
  }
  std::optional<SinkPoint> point = read_sink_progress(path, run_key);
  if (point->documents == 0 && !has_partial) return point;
  const auto size = std::filesystem::file_size(partial, ec);
  if (ec || size < point->bytes) {
    throw Error(
        fmt::format("'{}' holds {} bytes, fewer than the {} its run synced: not this run's partial (refused, "
                    "nothing appended)",
                    partial.string(), ec ? 0 : size, point->bytes));
  }
  return point;
}

void remove_sink_manifest(const std::filesystem::path& path) noexcept {
  std::error_code ec;
  std::filesystem::remove(sink_manifest_path(path), ec);
}

std::string jsonl_id_ending_at(const std::filesystem::path& file, std::uint64_t end) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read '{}'", file.string()));
  const std::uint64_t begin = end > kMaxRecordBytes ? end - kMaxRecordBytes : 0;
  std::string tail(end - begin, '\0');
  in.seekg(static_cast<std::streamoff>(begin));
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  if (static_cast<std::uint64_t>(in.gcount()) != tail.size() || tail.empty() || tail.back() != '\n') {
    throw Error(fmt::format("'{}' does not end a whole record at byte {}, where its run synced", file.string(), end));
  }
  const std::size_t start = tail.find_last_of('\n', tail.size() - 2);
  if (start == std::string::npos && begin > 0)
    throw Error(fmt::format("'{}': its last record is too long", file.string()));
  const std::string line = tail.substr(start == std::string::npos ? 0 : start + 1, std::string::npos);
  try {
    const boost::json::value v = boost::json::parse(line);
    return std::string(v.at("id").as_string());
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("'{}': the record before byte {} is not a document with an id: {}", file.string(), end, e.what()));
  }
}

}  // namespace flowline
