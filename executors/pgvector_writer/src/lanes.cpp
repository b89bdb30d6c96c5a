// The PgVectorWriter's connections (lanes.hpp): a request's parts prepared at once, then committed at once.
#include "lanes.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <future>

namespace flowline::pgvector_writer {

Lanes::Lanes(const pg::ConnectOptions& options, std::size_t count, std::string executor)
    : options_(options), executor_(std::move(executor)), lanes_(count) {
  for (std::size_t k = 0; k < count; ++k) reconnect(k);
}

void Lanes::reconnect(std::size_t k) {
  Lane& lane = lanes_[k];
  lane.conn.reset();  // the lost one's socket first
  lane.conn = pg::PgConnection::connect(options_);
  lane.stage_ready = false;
  if (lanes_.size() > 1)
    lane.conn->exec(fmt::format("SET lock_timeout = '{}'", kLockTimeout), "setting the session's lock_timeout");
}

pg::PgConnection& Lanes::live(std::size_t k) {
  if (!lanes_[k].conn->ok()) reconnect(k);
  return *lanes_[k].conn;
}

void Lanes::rollback(std::size_t k) noexcept {
  pg::PgFailure failure;
  if (lanes_[k].conn && lanes_[k].conn->ok()) lanes_[k].conn->try_exec("ROLLBACK", failure);
}

void Lanes::in_parallel(const std::vector<bool>& active, const std::function<void(std::size_t)>& body) {
  std::vector<std::future<void>> others;
  for (std::size_t k = 1; k < lanes_.size(); ++k)
    if (active[k]) others.push_back(std::async(std::launch::async, [&body, k] { body(k); }));
  if (active[0]) body(0);
  for (auto& other : others) other.get();
}

std::vector<PartOutcome> Lanes::run(const std::vector<bool>& active, const std::vector<std::string>& what,
                                    bool redo_lost, const Prepare& prepare) {
  std::vector<PartOutcome> outcomes(lanes_.size());
  in_parallel(active, [&](std::size_t k) {
    try {
      prepare_part(k, outcomes[k], redo_lost, prepare);
      outcomes[k].state = PartState::Prepared;
    } catch (...) {
      outcomes[k].state = PartState::Failed;
      outcomes[k].error = std::current_exception();
    }
  });
  prepared_at_ = std::chrono::steady_clock::now();
  bool all = true;
  for (std::size_t k = 0; k < lanes_.size(); ++k) all = all && (!active[k] || outcomes[k].state == PartState::Prepared);
  if (!all) {  // nothing of the request commits
    for (std::size_t k = 0; k < lanes_.size(); ++k) {
      if (outcomes[k].state != PartState::Prepared) continue;
      rollback(k);
      outcomes[k].state = PartState::Failed;
    }
    return outcomes;
  }
  in_parallel(active, [&](std::size_t k) {
    try {
      commit_part(k, outcomes[k], what[k], redo_lost, prepare);
    } catch (...) {
      outcomes[k].state = PartState::Unknown;  // a new connection failed to open: the first COMMIT's fate unknown
      outcomes[k].error = std::current_exception();
    }
  });
  return outcomes;
}

void Lanes::prepare_part(std::size_t k, PartOutcome& outcome, bool redo_lost, const Prepare& prepare) {
  if (!lanes_[k].conn->ok()) reconnect(k);
  try {
    prepare(k, lanes_[k]);
  } catch (const Error& e) {
    if (lanes_[k].conn->ok() || !redo_lost) {
      rollback(k);
      throw;
    }
    // The connection was lost before COMMIT: nothing of the part committed; an upsert is written again.
    redo(k, outcome, e.what(), prepare);
  }
}

void Lanes::redo(std::size_t k, PartOutcome& outcome, const std::string& lost, const Prepare& prepare) {
  spdlog::warn("executor '{}': connection to PostgreSQL lost ({}); reconnecting to redo the request", executor_, lost);
  reconnect(k);
  outcome.redone = true;
  try {
    prepare(k, lanes_[k]);
  } catch (...) {
    rollback(k);
    throw;
  }
}

void Lanes::commit_part(std::size_t k, PartOutcome& outcome, const std::string& what, bool redo_lost,
                        const Prepare& prepare) {
  std::string lost;  // why the connection was lost at COMMIT, when the part is redone
  try {
    lanes_[k].conn->exec("COMMIT", what);
    outcome.state = PartState::Committed;
    return;
  } catch (const Error& e) {
    outcome.error = std::current_exception();
    // A COMMIT the server answered with an error rolled back; one whose connection was lost may have committed.
    outcome.state = lanes_[k].conn->ok() ? PartState::Failed : PartState::Unknown;
    if (outcome.state == PartState::Failed || !redo_lost || outcome.redone) return;
    lost = e.what();
  }
  try {
    redo(k, outcome, lost, prepare);
  } catch (...) {  // no new connection, or the part failed again (and rolled back): the first COMMIT's fate unknown
    outcome.error = std::current_exception();
    return;
  }
  try {
    lanes_[k].conn->exec("COMMIT", what);
    outcome.state = PartState::Committed;
    outcome.error = nullptr;
  } catch (...) {
    rollback(k);
    outcome.error = std::current_exception();
  }
}

}  // namespace flowline::pgvector_writer
