// replicated_progress.hpp — what the replicas of one PgVectorWriter have committed between them, for
// `flowline run --resume` with `replicas: N` (issue 55): input ranges, and the record each part's transaction
// writes into flowline_progress (table_progress.hpp says how --resume reads them back).
//
// Why ranges. One replica sees its requests in input order (SinkProgress::order), so one input prefix says what
// it holds. Several replicas take requests from one queue and commit them at once, in any order: while replica 0
// commits documents 512..767, replica 1 may still be writing 256..511. What is durable is then a set of input
// positions: a prefix [0, P) and a few ranges past it (the requests in flight committed before the ones before
// them). Each request's part transactions record that whole set as it will be if they commit — what every replica
// had committed when the request started, plus the request itself — so the rows together name exactly what
// committed, whichever was killed when; --resume starts the input at the prefix and the replicas skip the
// documents of the ranges past it.
//
// Threads: InputRanges is a value, used by one thread at a time. A ReplicatedProgress is shared by the writer's
// replicas (ReplicaGroup) and thread-safe.
#pragma once

#include "flowline/resumable_sink.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace flowline::pgvector_writer {

// A set of input positions: disjoint, non-adjacent ranges [begin, end), each with the id of its last document
// (position end - 1).
class InputRanges {
 public:
  struct Range {
    std::uint64_t end = 0;
    std::string last_id;
  };
  // Adds [begin, end) (end > begin), merging it with ranges it overlaps or touches; `last_id`: the id of
  // document end - 1.
  void add(std::uint64_t begin, std::uint64_t end, const std::string& last_id);
  void add(const InputRanges& other);
  bool contains(std::uint64_t position) const;
  // The end of the range starting at 0 (every position before it is in the set); 0 when none starts there.
  std::uint64_t prefix() const;
  // The id of document prefix() - 1 (empty for prefix 0).
  std::string prefix_last_id() const;
  // The positions at or after `position`.
  InputRanges from(std::uint64_t position) const;
  // The positions in both.
  InputRanges intersect(const InputRanges& other) const;
  bool operator==(const InputRanges& other) const;
  bool empty() const noexcept { return ranges_.empty(); }
  // begin -> (end, last id), in order.
  const std::map<std::uint64_t, Range>& ranges() const noexcept { return ranges_; }

 private:
  std::map<std::uint64_t, Range> ranges_;
};

// What one part's transaction records in its row of flowline_progress: the input prefix its writer holds
// (documents, last id) and, for a writer of several replicas, the committed ranges past it.
struct ProgressRecord {
  SinkPoint point;
  InputRanges beyond;
  // The record of a committed set: its prefix, and the rest as ranges.
  static ProgressRecord of(const InputRanges& committed);
};

// The writer's replicas' committed positions in this process, started from what --resume found (or nothing).
class ReplicatedProgress {
 public:
  explicit ReplicatedProgress(InputRanges committed) : committed_(std::move(committed)) {}
  // What is committed (a copy: a request's record is this with the request added).
  InputRanges committed() const;
  ProgressRecord record() const { return ProgressRecord::of(committed()); }
  // Request `request` committed on every part.
  void add(const InputRanges& request);
  // Stops recording for every replica (a document without an input position); true for the first caller.
  bool give_up();
  bool gave_up() const;
  // A replica's close(): true for the last of the `replicas` (every request of every replica written by then).
  bool last_to_close(std::size_t replicas);

 private:
  mutable std::mutex mutex_;
  InputRanges committed_;
  bool gave_up_ = false;
  std::size_t closed_ = 0;
};

}  // namespace flowline::pgvector_writer
