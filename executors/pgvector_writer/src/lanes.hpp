// lanes.hpp — the PgVectorWriter's connections ("lanes") and one request written over them at once: a part
// per lane, each in its own transaction, the COMMITs sent only once every part is ready.
//
// Threads and ownership: Lanes belongs to one writer replica and is called on that replica's thread only.
// run() calls prepare() for part 0 on the calling thread and for part k > 0 on a thread of its own
// (std::async), each with lane k alone; it returns once every part finished, so between calls nothing but the
// replica's thread touches a lane. Lanes owns the connections: opened in the constructor, reopened by
// reconnect() after a loss, closed on destruction.
#pragma once

#include "flowline/pg/pg_connection.hpp"

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace flowline::pgvector_writer {

// One connection and what the writer keeps beside it.
struct Lane {
  std::unique_ptr<pg::PgConnection> conn;
  bool stage_ready = false;  // the connection's temporary staging table exists (reset on reconnect)
  std::string buffer;        // the COPY stream being encoded (kept across requests: no reallocation once grown)
};

// What became of one part of a request.
enum class PartState {
  Idle,      // nothing to write (run() was not asked to)
  Prepared,  // inside run() only: ready to commit
  Failed,    // not committed: failed or rolled back before or at its COMMIT (the server answered)
  Unknown,   // the connection was lost at its COMMIT: committed or not, nobody can say
  Committed,
};

struct PartOutcome {
  PartState state = PartState::Idle;
  std::exception_ptr error;  // why, when Failed or Unknown (a flowline::Error)
  bool redone = false;       // written a second time on a new connection after the first was lost
};

class Lanes {
 public:
  // Opens `count` connections (≥ 1; throws flowline::Error as PgConnection::connect does). With more than one,
  // each session gets a lock_timeout (kLockTimeout): parts wait for each other's COMMITs, so a lock one part
  // takes and another needs (a unique column besides id holding the same value in both) would otherwise never
  // be released; it fails the request instead.
  // `executor`: the writer's name, for log lines.
  Lanes(const pg::ConnectOptions& options, std::size_t count, std::string executor);
  static constexpr const char* kLockTimeout = "60s";

  std::size_t size() const noexcept { return lanes_.size(); }
  Lane& operator[](std::size_t k) { return lanes_[k]; }
  // Lane k's connection, reopened first when it was lost.
  pg::PgConnection& live(std::size_t k);
  void reconnect(std::size_t k);

  // Writes one request, a part per lane k with active[k] (`what`[k]: what its COMMIT does, for errors,
  // "committing 512 rows into T"): prepare(k, lane) opens the part's transaction and
  // does everything but COMMIT, throwing flowline::Error on failure. When every part prepared, their COMMITs
  // are sent at once; when one failed, the others roll back (nothing of the request commits). A part whose
  // connection was lost before or at its COMMIT is written again once on a new connection when `redo_lost` (an
  // upsert, which can be written twice), else it fails (at its COMMIT: Unknown). Returns each part's outcome;
  // prepared_at(): when the last part prepared.
  using Prepare = std::function<void(std::size_t, Lane&)>;
  std::vector<PartOutcome> run(const std::vector<bool>& active, const std::vector<std::string>& what, bool redo_lost,
                               const Prepare& prepare);
  std::chrono::steady_clock::time_point prepared_at() const noexcept { return prepared_at_; }

 private:
  void prepare_part(std::size_t k, PartOutcome& outcome, bool redo_lost, const Prepare& prepare);
  void commit_part(std::size_t k, PartOutcome& outcome, const std::string& what, bool redo_lost,
                   const Prepare& prepare);
  // Part k's connection was lost (`lost`: the error that said so): warns, opens a new one and prepares the part
  // again on it (outcome.redone). Throws what reconnecting or preparing threw (the part rolled back).
  void redo(std::size_t k, PartOutcome& outcome, const std::string& lost, const Prepare& prepare);
  void rollback(std::size_t k) noexcept;  // when the connection still answers
  // Runs body(k) for every active k at once (k = 0 on this thread); waits for all.
  void in_parallel(const std::vector<bool>& active, const std::function<void(std::size_t)>& body);

  pg::ConnectOptions options_;
  std::string executor_;
  std::vector<Lane> lanes_;
  std::chrono::steady_clock::time_point prepared_at_;
};

}  // namespace flowline::pgvector_writer
