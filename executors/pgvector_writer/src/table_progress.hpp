// table_progress.hpp — the PgVectorWriter's progress rows in flowline_progress, what `flowline run --resume`
// reads back (a resumable sink's record, flowline/resumable_sink.hpp), for a writer of one or several connections.
//
// The table: flowline_progress (sink text PRIMARY KEY, run_key text, documents bigint, last_id text, complete
// boolean, part_ids text[], ranges jsonb). Once a run completes, its table has one row, "T" with complete: true. A
// writer of N connections (`connections: N`) splits each request's rows into N parts, one transaction per connection,
// and each part's transaction upserts its own row, committed with the part's rows or not at all: sink "T" for part 0
// (the only row of a writer with one connection, as before), "T#k" for part k (a table name holds no '#'); documents
// and last_id: the point the whole request reaches (input documents written, the last one's id); part_ids: with
// on_conflict: error and N > 1, the ids of the part's rows.
//
// Why that is enough to resume after kill -9 at any moment. The N transactions of a request do not commit
// atomically together (PostgreSQL's two-phase commit, PREPARE TRANSACTION, is off unless the server sets
// max_prepared_transactions, so it cannot be counted on). The writer (a) runs every part up to just before its
// COMMIT and sends the COMMITs only once all of them got there (a part that fails before: all roll back, nothing
// of the request commits); (b) acknowledges the request only after every COMMIT succeeded; (c) starts the next
// request only after that. So the only partial state is a request whose COMMITs landed on some connections and
// not on others (the process killed, or a connection lost, between them), and the rows of flowline_progress then
// say exactly which: the parts that committed are at the request's point `hi`, the others at the previous
// request's `lo` — never further apart than one request. open() resolves it before anything is written, in one
// transaction (a kill during it changes nothing): the run resumes from `lo`; with on_conflict: error the rows of
// the parts at `hi` are deleted by the ids their rows hold (a plain COPY inserted exactly those ids: one of them
// already in the table would have failed its part before the COMMITs), so the table is again what it held after
// request `lo`; with on_conflict: update nothing is deleted: writing the request again replaces those ids with the
// same values, and every later request follows in input order as before, so the last write of each id is the
// same as an uninterrupted run's. The part rows are then set back to `lo`.
//
// A writer of R > 1 replicas (`replicas: R` under `flowline run`) keeps a row per replica and connection, sink
// "T#r.k", whose documents/last_id are the input prefix committed and whose ranges (jsonb, [[begin, end, last
// id], ...]) the ranges committed past it (replicated_progress.hpp says why): each request's part transactions
// record everything the replicas had committed when it started plus the request. open_replicated() reads them
// back: a replica's request committed where all its parts' rows say so (a request committed on some of its
// connections only is repaired as above: a plain COPY's rows of it deleted by part_ids, an upsert's written
// again); the union over replicas is what the table holds. The run resumes at its prefix, and the documents of
// the ranges past it are skipped by the replicas, never written twice.
//
// Threads: a TableProgress belongs to one writer replica; record() runs on the thread of the part it records
// (each on its own connection), the rest on the replica's thread. It holds no connection.
#pragma once

#include "flowline/error.hpp"
#include "flowline/pg/pg_connection.hpp"
#include "replicated_progress.hpp"
#include "flowline/resumable_sink.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::pgvector_writer {

class TableProgress {
 public:
  // `table`: the writer's table; `parts`: its connections; `keeps_ids`: record each part's ids (a plain COPY
  // over several connections: resume deletes the rows of a request's parts that committed alone); `replicas`:
  // the writer's, `replica`: this one's.
  TableProgress(std::string table, std::size_t parts, bool keeps_ids, std::size_t replicas = 1,
                std::size_t replica = 0);

  // Creates flowline_progress when missing (and its part_ids column for several parts). Resuming: reads this
  // table's rows, refuses (throws flowline::Error naming `executor`) another run's or a set of parts not this
  // writer's, repairs a request that committed in part (above) and returns the point every part holds. Not
  // resuming: replaces the table's rows with rows at the start and returns the start.
  SinkPoint open(pg::PgConnection& conn, const std::string& run_key, bool resuming, const std::string& executor);
  // The same for a writer of several replicas (called once, by the first replica: ReplicatedProgress): the
  // positions every replica's parts committed, repaired first where a request committed in part. Not resuming:
  // replaces the table's rows with rows at the start and returns nothing.
  InputRanges open_replicated(pg::PgConnection& conn, const std::string& run_key, bool resuming,
                              const std::string& executor);
  // In part `part`'s open transaction on `conn`: the request reaches `record` (with several replicas, its
  // ranges too); `ids`: the part's rows' ids (read only when keeps_ids).
  void record(pg::PgConnection& conn, std::size_t part, const std::string& run_key, const ProgressRecord& record,
              const std::vector<std::string_view>& ids) const;
  // The run completed: the table's rows replaced, in one transaction, by one row saying so (sink "T",
  // complete: true) and how far the input went (`point`: all of it). open() and open_replicated() of a --resume
  // of the same run then return that point, so the run writes nothing and ends as a complete file's does.
  void complete(pg::PgConnection& conn, const std::string& run_key, const SinkPoint& point) const;
  // Deletes the table's rows (a run that completed without knowing its input positions throughout).
  void clear(pg::PgConnection& conn) const;

  bool keeps_ids() const noexcept { return keeps_ids_; }
  // The sink key of this replica's part `part`: "T", "T#1", ... (one replica); "T#0.0", "T#1.2", ... (several).
  std::string key(std::size_t part) const { return key_of(replica_, part); }

 private:
  std::string key_of(std::size_t replica, std::size_t part) const;
  void create(pg::PgConnection& conn) const;
  // The refusal of rows another run left (a changed input, flow, ...).
  Error another_run(const std::string& executor) const;
  // Resuming: the point of this run's complete row, if the table has one (another run's is refused).
  std::optional<SinkPoint> completed(pg::PgConnection& conn, const std::string& run_key,
                                     const std::string& executor) const;
  // Replaces the table's rows with rows at the start (none when `resuming`: a resume that found nothing).
  void start_rows(pg::PgConnection& conn, const std::string& run_key, bool resuming) const;
  void upsert(pg::PgConnection& conn, const std::string& key, const std::string& run_key, const ProgressRecord& record,
              const std::vector<std::string_view>& ids, const std::string& what) const;

  std::string table_;
  std::size_t parts_;
  bool keeps_ids_;
  std::size_t replicas_, replica_;
};

// What a failed request does to the progress rows. They are an input prefix: a request that fails leaves its
// documents out of the table, so no later request may record its point while they are missing. The rows wait at
// the failed request's start until it is written after all (the same documents, in the same order, as the next
// request); a request other than that one makes the stop final for the run: a warning says so, later requests
// of an upsert are written without moving the rows (a --resume writes them again, replacing their rows), and
// those of a plain COPY are refused (a --resume writing them again would fail on the rows they left).
// Used on the writer replica's thread, only while it keeps progress.
class ProgressGap {
 public:
  // `executor`: the writer's name, for messages; `upsert`: on_conflict: update.
  ProgressGap(std::string executor, bool upsert);
  // Before request `docs` is written: whether it may record its point. Throws flowline::Error (refused) for a
  // plain COPY's request after the stop.
  bool may_record(const DocumentArray& docs);
  // Request `docs`, which started at input document `at` and was to record its point, failed with `what`: what
  // its error says.
  std::string failed(const DocumentArray& docs, std::uint64_t at, const std::string& what);
  // The request that recorded its point committed.
  void written() noexcept { failed_ids_.clear(); }

 private:
  std::string executor_;
  bool upsert_;
  std::uint64_t failed_at_ = 0;
  std::vector<std::string> failed_ids_;      // the failed request's ids while it may still be written; else empty
  std::optional<std::uint64_t> stopped_at_;  // where the rows stay for the run
};

// `values` as a PostgreSQL array literal of text ({"a","b\"c"}), for a text[] parameter.
std::string text_array_literal(const std::vector<std::string_view>& values);

}  // namespace flowline::pgvector_writer
