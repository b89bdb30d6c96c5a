// Workspace::load (workspace.hpp): which files a workspace holds, whether their generations chain (a missing
// or stray part is named), then the snapshot and the logs replayed and the log opened for appending.
#include "workspace.hpp"

#include "workspace_frames.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

namespace flowline::vector_index {

namespace fs = std::filesystem;
using namespace frames;

namespace {

// One of the workspace's files as found at start.
struct Part {
  fs::path path;
  bool present = false;
  std::optional<Header> header;  // none: absent, or it ends inside its first record
  std::uint64_t size = 0;

  bool format1() const { return header && header->format == kLegacyFormat; }
  bool format2() const { return header && header->format == kFormat; }
  std::uint64_t generation() const { return header ? header->generation : 0; }
};

Part look(const fs::path& path) {
  Part part{path};
  std::error_code ec;
  if (!fs::exists(fs::status(path, ec))) return part;  // a link to nothing is nothing
  part.present = true;
  part.header = first_header(path);  // a FIFO or a device is refused here, never waited on
  part.size = fs::file_size(path, ec);
  return part;
}

void cut_file(const fs::path& path, std::uint64_t good) {
  const int fd = open_regular(path, O_WRONLY);
  const bool cut = ::ftruncate(fd, static_cast<off_t>(good)) == 0 && ::fdatasync(fd) == 0;
  const std::string what = cut ? std::string() : system_error("cannot cut the torn tail off", path);
  ::close(fd);
  if (!cut) throw Error(what);
}

constexpr const char* kRestore = ". Restore it from a copy, or move the workspace away and index again";

// The generations do not chain: the first log replayed (`first`) is not the one that follows the snapshot.
[[noreturn]] void chain_broken(const fs::path& folder, const Part& snapshot, const Part& first) {
  const std::uint64_t s = snapshot.present ? snapshot.generation() : 1, f = first.generation();
  if (!snapshot.present) {
    throw CorruptWorkspace(
        fmt::format("{}: index.snapshot is missing: {} is log {} of this workspace, and every log after the first "
                    "follows a snapshot, which held the documents indexed before it{}",
                    folder.string(), first.path.string(), f, kRestore));
  }
  if (f > s) {
    throw CorruptWorkspace(
        fmt::format("{}: index.wal.old is missing: index.snapshot holds the logs before log {} and {} is log {}, so "
                    "the changes of log {} would be lost{}",
                    folder.string(), s, first.path.string(), f, s, kRestore));
  }
  throw CorruptWorkspace(
      fmt::format("{}: index.wal is missing: {} is log {}, older than index.snapshot, which holds the logs before "
                  "log {}; the changes of log {} would be lost{}",
                  folder.string(), first.path.string(), f, s, s, kRestore));
}

[[noreturn]] void log_missing(const fs::path& folder, const Part& snapshot, const Part& old) {
  if (old.present) {
    throw CorruptWorkspace(
        fmt::format("{}: index.wal is missing: index.wal.old is log {}, and the changes of log {} "
                    "after it would be lost{}",
                    folder.string(), old.generation(), old.generation() + 1, kRestore));
  }
  const std::uint64_t covered = snapshot.header ? snapshot.header->covered : 0;
  throw CorruptWorkspace(fmt::format(
      "{}: index.wal is missing: it was log {}, which holds the changes after index.snapshot{}, and they would be "
      "lost{}",
      folder.string(), snapshot.generation(),
      covered ? fmt::format(" (the snapshot holds its first {} bytes)", covered) : std::string(), kRestore));
}

// Every format-2 file is of one workspace.
void check_ids(std::uint64_t id, std::initializer_list<const Part*> parts) {
  const Part* first = nullptr;
  for (const Part* p : parts) {
    if (!p->format2()) continue;
    if (!first) first = p;
    if (p->header->workspace != id) {
      throw CorruptWorkspace(fmt::format("{} belongs to another workspace (id {:016x}; {} has {:016x})",
                                         p->path.string(), p->header->workspace, first->path.string(), id));
    }
  }
}

// Format 1: replayed as before (no generations to check).
void replay_format1(Replayer& replayer, const Part& snapshot, const Part& old, const Part& log) {
  if (snapshot.present && !replayer.file(snapshot.path, false, 0, *snapshot.header).ended) {
    throw CorruptWorkspace(fmt::format("{}: the snapshot is cut short (no end mark)", snapshot.path.string()));
  }
  if (old.header) replayer.file(old.path, true, 0, *old.header);
  if (log.header) replayer.file(log.path, true, 0, *log.header);
}

// Format-1 logs beside a format-2 snapshot: an upgrade wrote its snapshot, which holds them, and stopped.
// They are set aside (as absent) and returned, to be deleted.
std::vector<fs::path> format1_logs(const Part& snapshot, Part& old, Part& log) {
  std::vector<fs::path> stale;
  for (Part* p : {&old, &log}) {
    if (!p->present || p->format2()) continue;
    if (!snapshot.format2() || !p->format1()) {
      throw CorruptWorkspace(fmt::format("{}: {} beside format-{} files", p->path.string(),
                                         p->header ? "a format-1 log" : "a log whose header is cut short", kFormat));
    }
    stale.push_back(p->path);
    *p = Part{p->path};
  }
  return stale;
}

}  // namespace

void Workspace::start_log(const fs::path& path) {
  const fs::path next = folder_ / "index.wal.next";
  std::uint64_t bytes = 0;
  const int fd = create_log(next, Header{kFormat, dim_, metric_, generation_, id_, 0}, bytes);
  if (::rename(next.c_str(), path.c_str()) != 0) {
    const std::string what = system_error("cannot rename", next);
    ::close(fd);
    throw Error(what);
  }
  sync_folder(folder_);
  log_fd_ = fd;
  log_path_ = path;
  log_bytes_ = bytes;
}

void Workspace::open_log(const fs::path& path, std::uint64_t good, std::uint64_t size) {
  log_fd_ = open_regular(path, O_WRONLY | O_APPEND);
  log_path_ = path;
  log_bytes_ = good;
  if (good < size) cut_back();  // the torn tail read_frames warned of
}

void Workspace::load(Replay& replay, std::size_t dim, Metric metric) {
  metric_ = metric;
  remove_file(folder_ / "index.snapshot.tmp");  // a snapshot that was never renamed into place
  Part snapshot = look(folder_ / "index.snapshot"), old = look(folder_ / "index.wal.old");
  Part log = look(folder_ / "index.wal"), next = look(folder_ / "index.wal.next");
  if (snapshot.present && !snapshot.header) {
    throw CorruptWorkspace(fmt::format("{}: a record cut short at byte 0", snapshot.path.string()));
  }
  Replayer replayer(replay, dim, metric);
  const bool format2 = snapshot.format2() || old.format2() || log.format2();
  if (!format2 && (snapshot.present || old.present || log.present)) {
    replay_format1(replayer, snapshot, old, log);  // then rewritten by upgrade()
    dim_ = replayer.dim();
    legacy_ = true;
    return;
  }
  std::vector<fs::path> stale = format1_logs(snapshot, old, log);
  if (snapshot.format1()) {
    throw CorruptWorkspace(
        fmt::format("{}: a format-1 snapshot beside format-{} logs", snapshot.path.string(), kFormat));
  }
  id_ = snapshot.format2() ? snapshot.header->workspace
        : log.format2()    ? log.header->workspace
        : old.format2()    ? old.header->workspace
        : next.format2()   ? next.header->workspace
                           : new_workspace_id();
  check_ids(id_, {&snapshot, &old, &log, &next});
  const std::uint64_t s = snapshot.present ? snapshot.generation() : 1;
  const std::uint64_t covered = snapshot.present ? snapshot.header->covered : 0;
  const bool adopt = !log.present && next.format2() && next.generation() == (old.present ? old.generation() + 1 : s);
  if (next.present && !adopt) {
    // A new log that never became index.wal holds its header only: dropped.
    if (next.header && next.size > frame(header_body(*next.header)).size()) {
      throw CorruptWorkspace(
          fmt::format("{} holds changes, but does not follow the logs beside it", next.path.string()));
    }
    stale.push_back(next.path);
  }
  if (adopt) {
    // A new log was written and synced, and the process stopped before it was renamed index.wal.
    if (::rename(next.path.c_str(), log.path.c_str()) != 0) throw Error(system_error("cannot rename", next.path));
    sync_folder(folder_);
    log = look(log.path);
  } else if (!log.present && !old.present && (!snapshot.present || !stale.empty())) {
    // A new workspace (log 1), or the upgrade's log after its snapshot: started empty.
    generation_ = s;
    dim_ = snapshot.header ? snapshot.header->dim : 0;
    start_log(log.path);
    log = look(log.path);
  } else if (!log.present) {
    log_missing(folder_, snapshot, old);
  }
  if (!log.format2()) {
    throw CorruptWorkspace(fmt::format("{}: the log's header is cut short ({} bytes)", log.path.string(), log.size));
  }
  const std::uint64_t w = log.generation();
  bool replay_old = false;
  if (old.present) {
    if (old.generation() + 1 != w) {
      throw CorruptWorkspace(
          fmt::format("{}: index.wal.old is log {} and index.wal log {}: the logs between are missing",
                      folder_.string(), old.generation(), w));
    }
    if (old.generation() == s) {
      replay_old = true;  // a snapshot was being written (or failed): it holds none of index.wal.old
    } else if (old.generation() + 1 == s) {
      stale.push_back(old.path);  // the snapshot written holds it; the process stopped before deleting it
    } else {
      chain_broken(folder_, snapshot, old);
    }
  } else if (w != s) {
    chain_broken(folder_, snapshot, log);
  }
  if (snapshot.present && !replayer.file(snapshot.path, false, 0, *snapshot.header).ended) {
    throw CorruptWorkspace(fmt::format("{}: the snapshot is cut short (no end mark)", snapshot.path.string()));
  }
  if (replay_old) {
    const FileEnd end = replayer.file(old.path, true, covered, *old.header);
    if (end.good < end.size) cut_file(old.path, end.good);
    old_log_ = true;
  }
  std::uint64_t changes = 0;
  const FileEnd end = replayer.file(log.path, true, replay_old ? 0 : covered, *log.header, &changes);
  dim_ = replayer.dim();
  generation_ = w;
  changes_ = changes;
  if (log_fd_ < 0) {
    open_log(log.path, end.good, end.size);
  } else if (end.good < end.size) {
    log_bytes_ = end.good;
    cut_back();
  }
  for (const fs::path& path : stale) remove_file(path);
  if (!stale.empty()) sync_folder(folder_);
}

}  // namespace flowline::vector_index
