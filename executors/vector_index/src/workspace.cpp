// The workspace's lock, log and snapshots (workspace.hpp): fdatasync before an answer, a failed write cut
// back off the log, new logs started and snapshots replaced atomically, failures retried. load() is in
// workspace_load.cpp, the bytes of the files in workspace_frames.cpp.
#include "workspace.hpp"

#include "workspace_frames.hpp"

#include <fmt/format.h>
#include <fmt/chrono.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace flowline::vector_index {

namespace fs = std::filesystem;
using namespace frames;

namespace {

constexpr std::size_t kSnapshotChunk = 4096;
constexpr std::chrono::seconds kFirstPause{1}, kLongestPause{60};

}  // namespace

Workspace::Workspace(fs::path folder) : folder_(std::move(folder)) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) throw Error(fmt::format("workspace {}: cannot create the folder: {}", folder_.string(), ec.message()));
  const fs::path lock = folder_ / "LOCK";
  lock_fd_ = open_regular(lock, O_RDWR | O_CREAT);
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
  if (::ftruncate(lock_fd_, 0) == 0) {
    try {
      write_all(lock_fd_, pid, lock);
    } catch (const Error& e) {
      spdlog::warn("workspace {}: {} (the lock is held all the same)", folder_.string(), e.what());
    }
  }
}

Workspace::~Workspace() {
  if (writer_.joinable()) writer_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void Workspace::remove_file(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) throw Error(fmt::format("cannot remove {}: {}", path.string(), ec.message()));
}

// ---- the log ----

void Workspace::cut_back() {
  if (::ftruncate(log_fd_, static_cast<off_t>(log_bytes_)) != 0) {
    throw Error(system_error("cannot cut a failed write off", log_path_));
  }
  sync(log_fd_, log_path_);
  log_dirty_ = false;
}

void Workspace::append(const std::vector<std::string>& bodies) {
  if (log_fd_ < 0) throw Error(fmt::format("workspace {}: its log is not open", folder_.string()));
  if (log_dirty_) {
    try {
      cut_back();
    } catch (const Error& e) {
      throw Error(
          fmt::format("{}: no change is taken until the log is cut back to its last answered change", e.what()));
    }
  }
  std::string bytes;
  for (const std::string& body : bodies) bytes += frame(body);
  try {
    write_all(log_fd_, bytes, log_path_);
    sync(log_fd_, log_path_);
  } catch (const Error& e) {
    // Whatever part of the record reached the file is cut off again, so the log ends with its last answered
    // change and the next one follows it; failing that, the next change tries first.
    log_dirty_ = true;
    std::string after = "the log is as it was";
    try {
      cut_back();
    } catch (const Error& cut) {
      after = fmt::format("{}; the next change tries again first", cut.what());
    }
    throw Error(fmt::format("{}: this change was not made ({})", e.what(), after));
  }
  log_bytes_ += bytes.size();
}

void Workspace::log_upsert(const std::vector<const Entry*>& entries, const at::Tensor& rows) {
  if (entries.empty()) return;
  const auto dim = static_cast<std::size_t>(rows.size(1));
  std::vector<std::string> bodies;
  if (!dim_) {
    // The first rows settle the dimension: a header saying so goes first, in the same write.
    bodies.push_back(header_body(Header{kFormat, dim, metric_, generation_, id_, 0}));
  }
  bodies.push_back(upsert_body(entries, rows));
  append(bodies);
  dim_ = dim;
  ++changes_;
}

void Workspace::log_remove(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  append({remove_body(ids)});
  ++changes_;
}

void Workspace::log_clear() {
  append({std::string(1, static_cast<char>(Kind::clear))});
  ++changes_;
}

// Log G becomes index.wal.old and a new log G+1, written and synced as index.wal.next first, becomes
// index.wal. Every step that fails is undone, leaving the current log in use; false when it failed.
bool Workspace::rotate() {
  const fs::path log = folder_ / "index.wal", old = folder_ / "index.wal.old", next = folder_ / "index.wal.next";
  if (log_dirty_) {
    try {
      cut_back();
    } catch (const Error& e) {
      snapshot_failed(e.what());
      return false;
    }
  }
  if (log_path_ != log) {
    // An earlier start of a new log could neither finish nor undo its renames: the log is named back first.
    if (::rename(log_path_.c_str(), log.c_str()) != 0) {
      snapshot_failed(system_error(fmt::format("cannot rename {} to", log_path_.string()), log));
      return false;
    }
    log_path_ = log;
    sync_folder(folder_);
  }
  std::uint64_t bytes = 0;
  int fd = -1;
  try {
    fd = create_log(next, Header{kFormat, dim_, metric_, generation_ + 1, id_, 0}, bytes);
  } catch (const std::exception& e) {
    snapshot_failed(e.what());
    return false;
  }
  if (::rename(log.c_str(), old.c_str()) != 0) {
    const std::string what = system_error("cannot rename", log) + " to index.wal.old";
    ::close(fd);
    ::unlink(next.c_str());
    snapshot_failed(what);
    return false;
  }
  if (::rename(next.c_str(), log.c_str()) != 0) {
    const std::string what = system_error("cannot rename", next) + " to index.wal";
    ::close(fd);
    if (::rename(old.c_str(), log.c_str()) == 0) {
      ::unlink(next.c_str());
    } else {
      // Neither: the log goes on as index.wal.old, followed by the empty index.wal.next, which is how load()
      // reads them; the next start of a new log names it back first.
      log_path_ = old;
    }
    snapshot_failed(what);
    return false;
  }
  sync_folder(folder_);
  ::close(log_fd_);
  log_fd_ = fd;
  log_path_ = log;
  log_bytes_ = bytes;
  ++generation_;
  changes_ = 0;
  old_log_ = true;
  return true;
}

// ---- snapshots ----

void Workspace::write_snapshot(const State& state, const Snapshot& what) {
  const fs::path tmp = folder_ / "index.snapshot.tmp", snapshot = folder_ / "index.snapshot";
  int fd = open_regular(tmp, O_WRONLY | O_CREAT | O_TRUNC);
  try {
    write_all(fd, frame(header_body(Header{kFormat, state.dim, state.metric, what.generation, id_, what.covered})),
              tmp);
    std::vector<const Entry*> part;
    for (std::size_t first = 0; first < state.entries.size(); first += kSnapshotChunk) {
      const std::size_t n = std::min(kSnapshotChunk, state.entries.size() - first);
      part.clear();
      for (std::size_t i = first; i < first + n; ++i) part.push_back(state.entries[i].get());
      const at::Tensor rows = state.rows.narrow(0, static_cast<std::int64_t>(first), static_cast<std::int64_t>(n));
      write_all(fd, frame(upsert_body(part, rows)), tmp);
    }
    write_all(fd, frame(end_body(state.entries.size())), tmp);
    sync(fd, tmp);
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) throw Error(system_error("cannot write", tmp));
    if (::rename(tmp.c_str(), snapshot.c_str()) != 0) throw Error(system_error("cannot rename", tmp));
  } catch (...) {
    // A failed snapshot leaves no .tmp behind to hold the disk's space.
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_folder(folder_);
}

void Workspace::snapshot_failed(const std::string& what) {
  pause_ = pause_.count() ? std::min(pause_ * 2, kLongestPause) : kFirstPause;
  retry_at_ = std::chrono::steady_clock::now() + pause_;
  spdlog::error(
      "workspace {}: a snapshot failed: {}; every change is kept in the log (and answered as before), and a "
      "snapshot is tried again in {}",
      folder_.string(), what, pause_);
}

bool Workspace::snapshot_wanted(std::uint64_t log_limit) {
  if (writer_.joinable()) {
    if (!writer_done_) return false;
    finish_snapshot_quietly();
  }
  if (log_fd_ < 0 || legacy_) return false;
  if (pause_.count() && std::chrono::steady_clock::now() < retry_at_) return false;
  return (log_bytes_ >= log_limit && has_changes()) || (pause_.count() && has_changes());
}

bool Workspace::begin_snapshot(State state, bool rotate_log, bool now) {
  if (writer_.joinable()) {
    if (!writer_done_) return false;  // still writing the previous one
    finish_snapshot_quietly();
  }
  if (log_fd_ < 0 || legacy_) return false;
  if (!now && pause_.count() && std::chrono::steady_clock::now() < retry_at_) return false;
  Snapshot what;
  if (rotate_log && !old_log_) {
    if (!rotate()) return false;
    what = Snapshot{generation_, 0, 0, true};  // every log before the new one
  } else {
    // Without a new log (a clean close, or a failed snapshot's index.wal.old still there): the snapshot holds
    // the current log up to here, and whatever follows is replayed after it.
    what = Snapshot{generation_, log_bytes_, changes_, old_log_};
  }
  writing_ = what;
  writer_done_ = false;
  writer_error_ = nullptr;
  writer_ = std::thread([this, state = std::move(state)] {
    try {
      const auto started = std::chrono::steady_clock::now();
      write_snapshot(state, writing_);
      if (writing_.remove_old) {
        remove_file(folder_ / "index.wal.old");
        sync_folder(folder_);
      }
      spdlog::info("workspace {}: snapshot of {} documents written in {:.2f} s", folder_.string(), state.entries.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    } catch (...) {
      writer_error_ = std::current_exception();
    }
    writer_done_ = true;
  });
  return true;
}

void Workspace::snapshot_done() {
  changes_ -= std::min(changes_, writing_.changes);
  if (writing_.remove_old) old_log_ = false;
  if (pause_.count()) spdlog::info("workspace {}: snapshots are written again", folder_.string());
  pause_ = std::chrono::seconds(0);
}

// Joins a finished writer; a failure is logged and leaves index.wal.old in place (old_log_ stays true): the
// next snapshot, after a pause, holds it and the current log.
void Workspace::finish_snapshot_quietly() {
  writer_.join();
  if (!writer_error_) return snapshot_done();
  try {
    std::rethrow_exception(std::exchange(writer_error_, nullptr));
  } catch (const std::exception& e) {
    snapshot_failed(e.what());
  }
}

void Workspace::finish_snapshot() {
  if (!writer_.joinable()) return;
  writer_.join();
  if (!writer_error_) return snapshot_done();
  const std::exception_ptr error = std::exchange(writer_error_, nullptr);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    snapshot_failed(e.what());
  }
  std::rethrow_exception(error);
}

// ---- format 1 ----

void Workspace::upgrade(const State& state) {
  if (!legacy_) return;
  try {
    rewrite_format1(state);
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("workspace {} is in format {}, which this flowline reads and rewrites in format {} at "
                    "its first start; the rewrite failed (the format-{} files are kept): {}",
                    folder_.string(), kLegacyFormat, kFormat, kLegacyFormat, e.what()));
  }
  spdlog::info("workspace {}: rewritten in format {} (from format {}): {} documents", folder_.string(), kFormat,
               kLegacyFormat, state.entries.size());
}

void Workspace::rewrite_format1(const State& state) {
  const fs::path log = folder_ / "index.wal", old = folder_ / "index.wal.old", next = folder_ / "index.wal.next";
  id_ = new_workspace_id();
  constexpr std::uint64_t kGeneration = 2;  // a log 1 without a snapshot would look like a new workspace's
  // The snapshot first: once it is in place, format-1 logs beside it are ones it holds (load() drops them).
  write_snapshot(state, Snapshot{kGeneration, 0, 0, false});
  std::uint64_t bytes = 0;
  const int fd = create_log(next, Header{kFormat, state.dim, state.metric, kGeneration, id_, 0}, bytes);
  if (::rename(next.c_str(), log.c_str()) != 0) {
    const std::string what = system_error("cannot rename", next);
    ::close(fd);
    throw Error(what);
  }
  sync_folder(folder_);
  log_fd_ = fd;
  log_path_ = log;
  log_bytes_ = bytes;
  generation_ = kGeneration;
  dim_ = state.dim;
  changes_ = 0;
  old_log_ = false;
  legacy_ = false;
  remove_file(old);
  sync_folder(folder_);
}

}  // namespace flowline::vector_index
