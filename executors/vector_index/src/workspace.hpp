// A VectorIndex's workspace folder: what makes an index durable. Private to the VectorIndex.
//
//   WORKSPACE/LOCK               held (flock) by the one process that writes the workspace; holds its pid
//   WORKSPACE/index.snapshot     the whole index at some point: a header, the documents in chunks, an end mark
//   WORKSPACE/index.wal.old      the changes a snapshot being written holds (only while one is written)
//   WORKSPACE/index.wal          every later change, one record per request
//
// Both kinds of file are sequences of frames: [u32 length][u32 CRC-32 of the body][u32 CRC-32 of those 8
// bytes][body of `length` bytes], little-endian. A change is appended to index.wal and fdatasync'ed before
// log_*() returns, so a request answered after it survives kill -9 and power loss.
//
// Snapshots: begin_snapshot() renames index.wal to index.wal.old, starts a new index.wal, and writes the
// state it was given (a copy: the index goes on changing) to index.snapshot.tmp on a thread of its own; then
// syncs it, renames it over index.snapshot and deletes index.wal.old. Requests go on meanwhile, into the new
// log. A crash at any point leaves the previous snapshot and both logs, or the new snapshot and possibly
// index.wal.old again; replaying a log over a snapshot that already holds its changes gives the same index
// (every change is by id, and the last one wins), so nothing is lost or doubled.
//
// load() replays the snapshot, index.wal.old, then index.wal. A frame cut short or a body whose checksum
// fails at the very end of a log is a write that never finished (its request was never answered): it is
// cut off with a warning naming the offset. Anything else — a bad frame in the middle of a log, any damage
// to the snapshot, a snapshot without its end mark — throws CorruptWorkspace naming the file and the byte
// offset: the index does not start smaller than it was.
//
// One thread uses a Workspace (the index replica's); the snapshot writer is the Workspace's own thread.
#pragma once

#include "backend.hpp"

#include "flowline/error.hpp"

#include <boost/json/object.hpp>

#include <atomic>
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

  // Replays index.snapshot, then index.wal, into `replay`; then opens the log for appending. Call once,
  // before any log_*(). Throws CorruptWorkspace.
  void load(Replay& replay, std::size_t dim, Metric metric);

  // Appends one change and syncs it to disk. `entries[i]` goes with row i of `rows` (float32 [n, dim]).
  void log_upsert(const std::vector<const Entry*>& entries, const at::Tensor& rows);
  void log_remove(const std::vector<std::string>& ids);
  void log_clear();
  std::uint64_t log_bytes() const noexcept { return log_bytes_; }

  // What a snapshot holds: every stored document and its row (float32 [n, dim], CPU), taken by the index.
  struct State {
    std::size_t dim = 0;
    Metric metric = Metric::cosine;
    std::vector<std::shared_ptr<const Entry>> entries;
    at::Tensor rows;
  };
  // Starts writing `state` as the next snapshot on the workspace's thread and returns. When a snapshot is
  // still being written, returns false and does nothing (the log grows until the next call). When the
  // previous one failed, writes this one before returning (it holds everything the failed one missed).
  bool begin_snapshot(State state);
  // Waits for the snapshot being written, if any. Throws its error.
  void finish_snapshot();
  bool snapshot_running() const noexcept { return writer_.joinable() && !writer_done_; }
  // Whether the logs hold changes the snapshot on disk lacks (false: a snapshot now would rewrite it as is).
  bool has_changes() const noexcept { return changes_ > 0 || old_log_; }

 private:
  void append(const std::string& body);
  void start_log(std::size_t dim, Metric metric);
  void write_snapshot(const State& state);  // index.snapshot.tmp, synced, renamed into place
  void finish_snapshot_quietly();

  std::filesystem::path folder_;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  std::uint64_t log_bytes_ = 0;
  std::size_t dim_ = 0;
  Metric metric_ = Metric::cosine;
  std::thread writer_;                    // the snapshot being written
  std::atomic<bool> writer_done_{false};  // set by writer_ as it ends
  std::exception_ptr writer_error_;       // what it failed with (read after join)
  bool old_log_ = false;                  // index.wal.old exists (a snapshot is written, or one failed)
  std::uint64_t changes_ = 0;             // change records in index.wal
};

}  // namespace flowline::vector_index
