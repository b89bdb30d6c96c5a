// A VectorIndex's workspace folder: what makes an index durable. Private to the VectorIndex.
//
//   WORKSPACE/LOCK            held (flock) by the one process that writes the workspace; holds its pid
//   WORKSPACE/index.snapshot  the whole index at some point: a header, the documents in chunks, an end mark
//   WORKSPACE/index.wal       every change since that snapshot, one record per request
//
// Both files are sequences of frames: [u32 length][u32 CRC-32 of the body][u32 CRC-32 of those 8 bytes]
// [body of `length` bytes], little-endian. A change is appended to the log and fdatasync'ed before log_*()
// returns, so a request answered after it survives kill -9 and power loss. snapshot() writes the whole index
// to index.snapshot.tmp, syncs it, renames it over index.snapshot and then empties the log; replaying a log
// over a snapshot that already holds its changes gives the same index (every change is by id, and the
// last one wins), so a crash between the rename and the truncation loses and doubles nothing.
//
// load() replays the snapshot and then the log. A frame cut short or a body whose checksum fails at the
// very end of the log is a write that never finished (its request was never answered): it is cut off with a
// warning naming the offset. Anything else — a bad frame in the middle of the log, any damage to the
// snapshot, a snapshot without its end mark — throws CorruptWorkspace naming the file and the byte offset:
// the index does not start smaller than it was.
//
// One thread uses a Workspace at a time (the index replica's).
#pragma once

#include "backend.hpp"

#include "flowline/error.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <filesystem>
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

  // Writes the index as `chunks` yields it (it calls `emit` once per chunk of documents and their rows),
  // atomically replaces index.snapshot with it, and empties the log.
  using Emit = std::function<void(const std::vector<const Entry*>&, const at::Tensor&)>;
  void snapshot(std::size_t dim, Metric metric, const std::function<void(const Emit&)>& chunks);

 private:
  void append(const std::string& body);
  void start_log(std::size_t dim, Metric metric);

  std::filesystem::path folder_;
  int lock_fd_ = -1;
  int log_fd_ = -1;
  std::uint64_t log_bytes_ = 0;
  std::size_t dim_ = 0;
  Metric metric_ = Metric::cosine;
};

}  // namespace flowline::vector_index
