// The workspace's lock, log and snapshots (workspace.hpp): frames with checksums, fdatasync before an
// answer, atomic snapshot replacement.
#include "workspace.hpp"

#include <ATen/ATen.h>
#include <boost/crc.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace flowline::vector_index {

namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kMagic = 0x49564c46;  // "FLVI"
constexpr std::uint16_t kFormat = 1;
constexpr std::size_t kFrameHeader = 12;
constexpr std::uint32_t kMaxFrame = 1u << 30;
constexpr std::size_t kSnapshotChunk = 4096;

enum class Kind : std::uint8_t { header = 1, upsert = 2, remove = 3, clear = 4, end = 5 };

std::uint32_t crc32(const void* data, std::size_t size) {
  boost::crc_32_type crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

std::string system_error(std::string_view what, const fs::path& path) {
  return fmt::format("{} {}: {}", what, path.string(), std::strerror(errno));
}

// ---- encoding ----

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_string(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

std::string header_body(std::size_t dim, Metric metric) {
  std::string body(1, static_cast<char>(Kind::header));
  put_u32(body, kMagic);
  body += static_cast<char>(kFormat & 0xff);
  body += static_cast<char>(kFormat >> 8);
  put_u32(body, static_cast<std::uint32_t>(dim));
  body += static_cast<char>(metric);
  return body;
}

std::string upsert_body(const std::vector<const Entry*>& entries, const at::Tensor& rows) {
  const at::Tensor r = rows.to(at::kCPU, at::kFloat).contiguous();
  std::string body(1, static_cast<char>(Kind::upsert));
  put_u32(body, static_cast<std::uint32_t>(entries.size()));
  put_u32(body, static_cast<std::uint32_t>(r.size(1)));
  for (const Entry* e : entries) {
    put_string(body, e->id);
    put_string(body, e->text);
    put_string(body, e->uri);
    put_string(body, e->tags.empty() ? std::string() : boost::json::serialize(e->tags));
  }
  body.append(reinterpret_cast<const char*>(r.data_ptr<float>()), static_cast<std::size_t>(r.numel()) * 4);
  return body;
}

std::string frame(const std::string& body) {
  std::string out;
  out.reserve(kFrameHeader + body.size());
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  put_u32(out, crc32(body.data(), body.size()));
  put_u32(out, crc32(out.data(), 8));
  out += body;  // into the reserved space: the body is copied once
  return out;
}

void write_all(int fd, const std::string& bytes, const fs::path& path) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(system_error("cannot write", path));
    done += static_cast<std::size_t>(n);
  }
}

void sync(int fd, const fs::path& path) {
  if (::fdatasync(fd) != 0) throw Error(system_error("cannot sync", path));
}

void sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw Error(system_error("cannot open", folder));
  ::fsync(fd);
  ::close(fd);
}

// ---- decoding ----

// A frame's body being read; errors name the file and the byte offset.
class Cursor {
 public:
  Cursor(std::string_view body, const fs::path& file, std::uint64_t offset) : body_(body), file_(file), base_(offset) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw CorruptWorkspace(fmt::format("{}: {} at byte {}", file_.string(), what, base_ + pos_));
  }
  const char* take(std::size_t n, std::string_view what) {
    if (n > body_.size() - pos_) fail(fmt::format("{} runs past the end of its record", what));
    const char* p = body_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(*take(1, what)); }
  std::uint32_t u32(std::string_view what) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(4, what));
    return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  }
  std::uint64_t u64(std::string_view what) {
    const std::uint64_t low = u32(what);
    return low | (static_cast<std::uint64_t>(u32(what)) << 32);
  }
  std::string str(std::string_view what) {
    const std::uint32_t n = u32(what);
    return std::string(take(n, what), n);
  }
  void done() const {
    if (pos_ != body_.size()) fail("unexpected bytes after the end of a record");
  }

 private:
  std::string_view body_;
  const fs::path& file_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
};

// Reads one file's frames and hands each body to `visit` (its kind and a cursor after the kind byte).
// Returns the offset of the end of the last good frame. `tolerate_tail`: a damaged last frame is a torn
// write (the log) rather than corruption (the snapshot).
std::uint64_t read_frames(const fs::path& path, bool tolerate_tail, const std::function<void(Kind, Cursor&)>& visit) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw Error(system_error("cannot open", path));
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(file, &std::fclose);
  const std::uint64_t size = fs::file_size(path);
  std::uint64_t offset = 0;
  std::string body;
  const auto torn = [&](std::string_view what) -> std::uint64_t {
    if (!tolerate_tail) throw CorruptWorkspace(fmt::format("{}: {} at byte {}", path.string(), what, offset));
    spdlog::warn(
        "{}: {} at byte {} (of {}): a write that never finished, whose request was never answered; "
        "the log is cut there",
        path.string(), what, offset, size);
    return offset;
  };
  while (offset < size) {
    unsigned char head[kFrameHeader];
    if (size - offset < kFrameHeader) return torn("a record cut short");
    if (std::fread(head, 1, kFrameHeader, file) != kFrameHeader) throw Error(system_error("cannot read", path));
    Cursor h(std::string_view(reinterpret_cast<const char*>(head), kFrameHeader), path, offset);
    const std::uint32_t length = h.u32("length"), body_crc = h.u32("checksum"), head_crc = h.u32("checksum");
    if (crc32(head, 8) != head_crc) {
      // Zeros to the end are a file extended by a write whose data never reached the disk.
      bool zeros = true;
      for (int c; zeros && (c = std::fgetc(file)) != EOF;) zeros = c == 0;
      for (unsigned char b : head) zeros = zeros && b == 0;
      if (zeros) return torn("zeros instead of a record");
      throw CorruptWorkspace(fmt::format("{}: a record header fails its checksum at byte {}", path.string(), offset));
    }
    if (length == 0 || length > kMaxFrame) {
      throw CorruptWorkspace(fmt::format("{}: a record of {} bytes at byte {}", path.string(), length, offset));
    }
    if (length > size - offset - kFrameHeader) return torn("a record cut short");
    body.resize(length);
    if (std::fread(body.data(), 1, length, file) != length) throw Error(system_error("cannot read", path));
    if (crc32(body.data(), length) != body_crc) {
      if (offset + kFrameHeader + length == size) return torn("the last record fails its checksum");
      throw CorruptWorkspace(fmt::format("{}: a record fails its checksum at byte {}", path.string(), offset));
    }
    Cursor c(body, path, offset + kFrameHeader);
    const auto kind = static_cast<Kind>(c.u8("record kind"));
    visit(kind, c);
    offset += kFrameHeader + length;
  }
  return offset;
}

void read_header(Cursor& c, std::size_t& dim, Metric& metric) {
  if (c.u32("magic") != kMagic) c.fail("not a flowline index file (bad magic)");
  const std::uint32_t low = c.u8("format"), high = c.u8("format");
  if ((low | (high << 8)) != kFormat)
    c.fail(fmt::format("format {} (this flowline reads {})", low | (high << 8), kFormat));
  dim = c.u32("dimension");
  const std::uint8_t m = c.u8("metric");
  if (m > static_cast<std::uint8_t>(Metric::l2)) c.fail(fmt::format("unknown metric {}", m));
  metric = static_cast<Metric>(m);
  c.done();
}

void read_upsert(Cursor& c, Replay& replay, std::size_t dim) {
  const std::uint32_t n = c.u32("count"), d = c.u32("dimension");
  if (d != dim) c.fail(fmt::format("rows of {} dimensions in an index of {}", d, dim));
  std::vector<Entry> entries(n);
  for (Entry& e : entries) {
    e.id = c.str("id");
    e.text = c.str("text");
    e.uri = c.str("uri");
    const std::string tags = c.str("tags");
    if (!tags.empty()) {
      boost::system::error_code ec;
      const boost::json::value v = boost::json::parse(tags, ec);
      if (ec || !v.is_object()) c.fail("tags that are not a JSON object");
      e.tags = v.get_object();
    }
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * d * 4;
  at::Tensor rows = at::empty({n, d}, at::kFloat);
  std::memcpy(rows.data_ptr<float>(), c.take(bytes, "rows"), bytes);
  c.done();
  replay.upsert(std::move(entries), rows);
}

void read_remove(Cursor& c, Replay& replay) {
  std::vector<std::string> ids(c.u32("count"));
  for (auto& id : ids) id = c.str("id");
  c.done();
  replay.remove(ids);
}

}  // namespace

Workspace::Workspace(fs::path folder) : folder_(std::move(folder)) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) throw Error(fmt::format("workspace {}: cannot create the folder: {}", folder_.string(), ec.message()));
  const fs::path lock = folder_ / "LOCK";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw Error(system_error("workspace: cannot open", lock));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(lock_fd_, pid, sizeof pid - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error(
        fmt::format("workspace {} is in use by another index (process {}, in {}): two processes or replicas "
                    "cannot write one workspace; give each its own",
                    folder_.string(), n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "?", lock.string()));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(lock_fd_, 0) == 0) write_all(lock_fd_, pid, lock);
}

Workspace::~Workspace() {
  if (writer_.joinable()) writer_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void Workspace::load(Replay& replay, std::size_t dim, Metric metric) {
  const fs::path snapshot = folder_ / "index.snapshot", log = folder_ / "index.wal";
  fs::remove(folder_ / "index.snapshot.tmp");  // a snapshot that was never renamed into place
  const auto check_header = [&](Cursor& c) {
    std::size_t stored_dim = 0;
    Metric stored_metric = Metric::cosine;
    read_header(c, stored_dim, stored_metric);
    if (stored_metric != metric) {
      throw Error(
          fmt::format("workspace {} holds an index with metric {}; the flow asks for {} (use that metric "
                      "or another workspace)",
                      folder_.string(), metric_name(stored_metric), metric_name(metric)));
    }
    if (stored_dim && dim_ && stored_dim != dim_) c.fail(fmt::format("dimension {} after {}", stored_dim, dim_));
    if (stored_dim && dim && stored_dim != dim) {
      throw Error(fmt::format("workspace {} holds vectors of {} dimensions; the flow's 'dim' is {}", folder_.string(),
                              stored_dim, dim));
    }
    if (stored_dim && !dim_) {
      dim_ = stored_dim;
      replay.header(dim_, metric);
    }
  };
  const auto visit = [&](Kind kind, Cursor& c, bool& seen_header, bool* ended) {
    if (!seen_header && kind != Kind::header) c.fail("a file that does not start with its header");
    switch (kind) {
      case Kind::header:  // the first, and another when the first rows settle the dimension
        seen_header = true;
        check_header(c);
        return;
      case Kind::upsert:
        if (!dim_) c.fail("rows before the index's dimension is known");
        read_upsert(c, replay, dim_);
        return;
      case Kind::remove:
        read_remove(c, replay);
        return;
      case Kind::clear:
        c.done();
        replay.clear();
        return;
      case Kind::end:
        if (!ended) c.fail("an end mark in the log");
        c.u64("count");
        *ended = true;
        return;
    }
    c.fail(fmt::format("unknown record kind {}", static_cast<int>(kind)));
  };
  metric_ = metric;
  if (fs::exists(snapshot)) {
    bool header = false, ended = false;
    const std::uint64_t end = read_frames(snapshot, false, [&](Kind kind, Cursor& c) {
      if (ended) c.fail("records after the end mark");
      visit(kind, c, header, &ended);
    });
    if (!ended) {
      throw CorruptWorkspace(
          fmt::format("{}: the snapshot is cut short at byte {} (no end mark)", snapshot.string(), end));
    }
  }
  // A log, replayed with its torn tail cut off: {the bytes kept, its change records}.
  const auto replay_log = [&](const fs::path& path) {
    bool header = false;
    std::uint64_t changes = 0;
    const std::uint64_t good = read_frames(path, true, [&](Kind kind, Cursor& c) {
      visit(kind, c, header, nullptr);
      changes += kind == Kind::header ? 0 : 1;
    });
    if (good < fs::file_size(path)) fs::resize_file(path, good);
    return std::pair{good, changes};
  };
  const fs::path old = folder_ / "index.wal.old";
  if (fs::exists(old)) {
    // A snapshot was being written (or failed): its changes are replayed, and kept until the next snapshot.
    replay_log(old);
    old_log_ = true;
  }
  std::uint64_t good = 0;
  if (fs::exists(log)) std::tie(good, changes_) = replay_log(log);
  log_fd_ = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) throw Error(system_error("cannot open", log));
  log_bytes_ = good;
  if (good == 0) start_log(dim_, metric);
}

void Workspace::start_log(std::size_t dim, Metric metric) { append(header_body(dim, metric)); }

void Workspace::append(const std::string& body) {
  const std::string bytes = frame(body);
  write_all(log_fd_, bytes, folder_ / "index.wal");
  sync(log_fd_, folder_ / "index.wal");
  log_bytes_ += bytes.size();
}

void Workspace::log_upsert(const std::vector<const Entry*>& entries, const at::Tensor& rows) {
  if (entries.empty()) return;
  const auto dim = static_cast<std::size_t>(rows.size(1));
  if (!dim_) {
    // The first rows settle the dimension: a header saying so goes first.
    dim_ = dim;
    append(header_body(dim_, metric_));
  }
  append(upsert_body(entries, rows));
  ++changes_;
}

void Workspace::log_remove(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  std::string body(1, static_cast<char>(Kind::remove));
  put_u32(body, static_cast<std::uint32_t>(ids.size()));
  for (const auto& id : ids) put_string(body, id);
  append(body);
  ++changes_;
}

void Workspace::log_clear() {
  append(std::string(1, static_cast<char>(Kind::clear)));
  ++changes_;
}

void Workspace::write_snapshot(const State& state) {
  const fs::path tmp = folder_ / "index.snapshot.tmp", snapshot = folder_ / "index.snapshot";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(system_error("cannot create", tmp));
  try {
    write_all(fd, frame(header_body(state.dim, state.metric)), tmp);
    std::vector<const Entry*> part;
    for (std::size_t first = 0; first < state.entries.size(); first += kSnapshotChunk) {
      const std::size_t n = std::min(kSnapshotChunk, state.entries.size() - first);
      part.clear();
      for (std::size_t i = first; i < first + n; ++i) part.push_back(state.entries[i].get());
      const at::Tensor rows = state.rows.narrow(0, static_cast<std::int64_t>(first), static_cast<std::int64_t>(n));
      write_all(fd, frame(upsert_body(part, rows)), tmp);
    }
    std::string end(1, static_cast<char>(Kind::end));
    put_u64(end, state.entries.size());
    write_all(fd, frame(end), tmp);
    sync(fd, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  fs::rename(tmp, snapshot);
  sync_folder(folder_);
}

bool Workspace::begin_snapshot(State state) {
  if (writer_.joinable()) {
    if (!writer_done_) return false;  // still writing the previous one
    finish_snapshot_quietly();
  }
  const fs::path log = folder_ / "index.wal", old = folder_ / "index.wal.old";
  if (old_log_) {
    // The previous snapshot failed: index.wal.old and index.wal both hold changes the snapshot on disk
    // lacks. `state` holds them all, so write it here, then drop both logs.
    write_snapshot(state);
    fs::remove(old);
    old_log_ = false;
    if (::ftruncate(log_fd_, 0) != 0) throw Error(system_error("cannot truncate", log));
    log_bytes_ = 0;
    start_log(state.dim, state.metric);
    return true;
  }
  // The current log becomes index.wal.old (what the snapshot will hold); new changes go to a new log.
  sync(log_fd_, log);
  ::close(log_fd_);
  log_fd_ = -1;
  fs::rename(log, old);
  old_log_ = true;
  log_fd_ = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) throw Error(system_error("cannot open", log));
  log_bytes_ = 0;
  start_log(state.dim, state.metric);
  sync_folder(folder_);
  writer_done_ = false;
  writer_error_ = nullptr;
  writer_ = std::thread([this, state = std::move(state), old] {
    try {
      const auto started = std::chrono::steady_clock::now();
      write_snapshot(state);
      fs::remove(old);
      sync_folder(folder_);
      spdlog::info("workspace {}: snapshot of {} documents written in {:.2f} s", folder_.string(), state.entries.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    } catch (...) {
      writer_error_ = std::current_exception();
    }
    writer_done_ = true;
  });
  return true;
}

// Joins a finished writer; a failure is logged and leaves index.wal.old in place (old_log_ stays true), so
// the next snapshot is written before begin_snapshot returns.
void Workspace::finish_snapshot_quietly() {
  writer_.join();
  if (!writer_error_) {
    old_log_ = false;
    return;
  }
  try {
    std::rethrow_exception(writer_error_);
  } catch (const std::exception& e) {
    spdlog::error(
        "workspace {}: a snapshot failed: {}; the logs keep every change, and the next snapshot is "
        "written before the request that starts it is answered",
        folder_.string(), e.what());
  }
}

void Workspace::finish_snapshot() {
  if (!writer_.joinable()) return;
  writer_.join();
  if (writer_error_) std::rethrow_exception(std::exchange(writer_error_, nullptr));
  old_log_ = false;
}

}  // namespace flowline::vector_index
