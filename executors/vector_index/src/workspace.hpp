// A VectorIndex's workspace folder: what makes an index durable. Private to the VectorIndex.
//
//   WORKSPACE/LOCK               held (flock) by the one process that writes the workspace; holds its pid
//   WORKSPACE/index.snapshot     the whole index at some point: a header, the documents in chunks, an end mark
//   WORKSPACE/index.wal.old      the changes a snapshot being written holds (only while one is written, or
//                                after one failed)
//   WORKSPACE/index.wal          every later change, one record per request
//   WORKSPACE/index.wal.next     a log being started (a moment while a snapshot begins)
//
// The files are sequences of frames (workspace_frames.hpp): [u32 length][u32 CRC-32 of the body][u32 CRC-32
// of those 8 bytes][body of `length` bytes], little-endian. A change is appended to index.wal in one write
// and fdatasync'ed before log_*() returns, so a request answered after it survives kill -9 and power loss.
// A write that fails (a full disk, an I/O error) is cut back off the log before log_*() throws: the log is
// as it was, and the next change follows the last answered one. Only regular files are opened: a FIFO or a
// device in a file's place is refused, naming it, never waited on.
//
// What the workspace consists of (format 2). Every file's header carries the workspace's id and a
// generation. Logs are numbered 1, 2, ... (index.wal.old one less than index.wal); index.snapshot holds
// every log before its generation G plus the first B bytes of log G (both in its header). So at start:
//   - index.wal must be log G (or G + 1 when index.wal.old is log G), and index.wal.old log G or G - 1
//     (one a finished snapshot holds: deleted); a log after the first without a snapshot before it, a log
//     older than the snapshot, a missing log or a file of another workspace stop the start with a
//     CorruptWorkspace that names the missing or stray file. Deleting every data file is the one change that
//     cannot be told from a new workspace. The first B bytes of log G are read for their checksums only.
//   - Format 1 workspaces (no generations) are read as before, then rewritten as format 2 at once (a
//     snapshot, then a new log), so their parts are checked from then on; flowline before format 2 refuses
//     format 2 files ("format 2 (this flowline reads 1)").
//
// Snapshots. When the log passes its bound, begin_snapshot() starts a new log, log G+1 (written and synced
// as index.wal.next, then renamed index.wal after the current one is renamed index.wal.old), and writes
// the state it was given (a copy: the index goes on changing) to index.snapshot.tmp on a thread of its own;
// then syncs it, renames it over index.snapshot and deletes index.wal.old. A clean close writes a snapshot
// of log G's whole length without starting a new log. A crash at any point leaves files that chain; a
// snapshot that fails (a full disk) deletes its .tmp, keeps index.wal.old and is tried again after a pause
// (1 s, doubling to 60 s): meanwhile every change goes on into the log, answered. A new log that cannot be
// started (a folder made read-only) leaves the current one in use, as it was.
//
// Torn writes and damage (load()). flowline relies on the file system writing a file's new size no earlier
// than its data (ext4's default data=ordered, XFS, btrfs, tmpfs), as fdatasync's contract gives for the
// answered records. So a record whose write a crash or power loss cut short leaves the log ending inside that
// record — its 12-byte frame header incomplete, or its length running past the end of the file — and such a
// tail is cut off with a warning naming the offset (its request was not answered, or the file was truncated
// since). A record that is complete — its length fits the file — and fails its checksum was written whole:
// it is damage, at the end of the log as anywhere else, and the start stops with a CorruptWorkspace naming
// the file and byte offset, leaving the file as it is (the error gives the `truncate -s` that drops that
// record by hand). Zeros from a record's start to the end of the log (a file system without that ordering,
// ext4 data=writeback, can leave them after power loss) are refused the same way, saying so. Any damage to
// the snapshot, or a snapshot without its end mark, is refused: the index never starts smaller than it was.
//
// One thread uses a Workspace (the index replica's); the snapshot writer is the Workspace's own thread.
#pragma once

#include "backend.hpp"

#include "flowline/error.hpp"

#include <boost/json/object.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <thread>
#include <functional>
#include <string>
#include <vector>

namespace flowline::vector_index {

// One stored document: what the index returns as a match besides its vector.
struct Entry {
  std::string id;
  std::string text;
  std::string uri;
  boost::json::object tags;
};

class CorruptWorkspace : public Error {
 public:
  using Error::Error;
};

// What load() finds, change by change (rows: float32 [n, dim], CPU).
class Replay {
 public:
  virtual ~Replay() = default;
  virtual void header(std::size_t dim, Metric metric) = 0;
  virtual void upsert(std::vector<Entry> entries, const at::Tensor& rows) = 0;
  virtual void remove(const std::vector<std::string>& ids) = 0;
  virtual void clear() = 0;
};

class Workspace {
 public:
  // Creates `folder` if needed and takes its lock; throws flowline::Error when another process holds it.
  explicit Workspace(std::filesystem::path folder);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const std::filesystem::path& folder() const noexcept { return folder_; }

  // Replays index.snapshot, then index.wal.old and index.wal, into `replay`; then opens the log for
  // appending. Call once, before any log_*(). Throws CorruptWorkspace.
  void load(Replay& replay, std::size_t dim, Metric metric);

  // What a snapshot holds: every stored document and its row (float32 [n, dim], CPU), taken by the index.
  struct State {
    std::size_t dim = 0;
    Metric metric = Metric::cosine;
    std::vector<std::shared_ptr<const Entry>> entries;
    at::Tensor rows;
  };

  // A format-1 workspace was loaded: upgrade() must rewrite it (with the state load() replayed) before any
  // log_*(). Throws flowline::Error; the format-1 files are kept until the rewrite is done.
  bool needs_upgrade() const noexcept { return legacy_; }
  void upgrade(const State& state);

  // Appends one change and syncs it to disk. `entries[i]` goes with row i of `rows` (float32 [n, dim]).
  // Throws flowline::Error when it cannot, with the log as it was (the change was not made).
  void log_upsert(const std::vector<const Entry*>& entries, const at::Tensor& rows);
  void log_remove(const std::vector<std::string>& ids);
  void log_clear();
  std::uint64_t log_bytes() const noexcept { return log_bytes_; }

  // Whether a snapshot should start now: the log holds `log_limit` bytes or more, or a failed snapshot's
  // pause is over; none is being written.
  bool snapshot_wanted(std::uint64_t log_limit);
  // Starts writing `state` as the next snapshot on the workspace's thread and returns true. `rotate`: the
  // snapshot starts a new log first (how the log is kept short); without, it holds the current log's length
  // (a clean close). Returns false, doing nothing, while one is being written or during a failed one's pause
  // (unless `now`), or when the new log cannot be started (logged; the current log goes on). Never throws.
  bool begin_snapshot(State state, bool rotate, bool now = false);
  // Waits for the snapshot being written, if any. Throws its error.
  void finish_snapshot();
  bool snapshot_running() const noexcept { return writer_.joinable() && !writer_done_; }
  // Whether the logs hold changes the snapshot on disk lacks (false: a snapshot now would rewrite it as is).
  bool has_changes() const noexcept { return changes_ > 0 || old_log_; }

 private:
  struct Snapshot {                // the one the writer thread writes
    std::uint64_t generation = 0;  // it holds every log before this one,
    std::uint64_t covered = 0;     // and this many bytes of this one
    std::uint64_t changes = 0;     // change records of the current log it holds
    bool remove_old = false;       // index.wal.old is deleted once it is in place
  };

  void open_log(const std::filesystem::path& path, std::uint64_t good, std::uint64_t size);
  void start_log(const std::filesystem::path& path);
  void snapshot_done();
  void rewrite_format1(const State& state);
  void append(const std::vector<std::string>& bodies);
  void cut_back();
  bool rotate();
  void write_snapshot(const State& state, const Snapshot& what);  // index.snapshot.tmp, synced, renamed
  void snapshot_failed(const std::string& what);
  void finish_snapshot_quietly();
  void remove_file(const std::filesystem::path& path);

  std::filesystem::path folder_;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  std::filesystem::path log_path_;  // the file log_fd_ appends to: index.wal (or index.wal.next)
  std::uint64_t log_bytes_ = 0;     // the log's length up to its last whole change
  bool log_dirty_ = false;          // a failed write may have left bytes after log_bytes_
  std::uint64_t generation_ = 0;    // the log's
  std::uint64_t id_ = 0;            // the workspace's
  std::size_t dim_ = 0;
  Metric metric_ = Metric::cosine;
  bool legacy_ = false;                               // format 1 loaded: upgrade() first
  Replay* replay_ = nullptr;                          // during load()
  std::thread writer_;                                // the snapshot being written
  std::atomic<bool> writer_done_{false};              // set by writer_ as it ends
  std::exception_ptr writer_error_;                   // what it failed with (read after join)
  Snapshot writing_;                                  // what writer_ writes
  bool old_log_ = false;                              // index.wal.old exists (a snapshot is written, or one failed)
  std::uint64_t changes_ = 0;                         // change records in index.wal that index.snapshot lacks
  std::chrono::steady_clock::time_point retry_at_{};  // a failed snapshot's pause ends
  std::chrono::seconds pause_{0};                     // the next pause (0: none failed)
};

}  // namespace flowline::vector_index
