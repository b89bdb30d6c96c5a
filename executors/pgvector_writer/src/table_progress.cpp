// The PgVectorWriter's rows in flowline_progress (table_progress.hpp): recorded in each part's transaction,
// read back and repaired at --resume.
#include "table_progress.hpp"

#include "flowline/error.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

namespace flowline::pgvector_writer {
namespace {

using pg::PgConnection;
using pg::PgParam;

// Serialises creating flowline_progress between writers (the writer's own key for CREATE TABLE).
constexpr std::int64_t kCreateLock = 0x666c6f776c696e65;  // "flowline"

// One row of flowline_progress read back.
struct PartRow {
  std::string run_key, last_id;
  std::uint64_t documents = 0;
};

}  // namespace

std::string text_array_literal(const std::vector<std::string_view>& values) {
  std::string s = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    s += i ? ",\"" : "\"";
    for (char c : values[i]) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
    s += '"';
  }
  return s + "}";
}

TableProgress::TableProgress(std::string table, std::size_t parts, bool keeps_ids, std::size_t replicas,
                             std::size_t replica)
    : table_(std::move(table)),
      parts_(parts),
      keeps_ids_(keeps_ids && parts > 1),
      replicas_(replicas),
      replica_(replica) {}

std::string TableProgress::key_of(std::size_t replica, std::size_t part) const {
  if (replicas_ > 1) return fmt::format("{}#{}.{}", table_, replica, part);
  return part == 0 ? table_ : fmt::format("{}#{}", table_, part);
}

void TableProgress::create(PgConnection& conn) const {
  std::string more;
  if (parts_ > 1 || replicas_ > 1) more += "; ALTER TABLE flowline_progress ADD COLUMN IF NOT EXISTS part_ids text[]";
  if (replicas_ > 1) more += "; ALTER TABLE flowline_progress ADD COLUMN IF NOT EXISTS ranges jsonb";
  conn.exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); CREATE TABLE IF NOT EXISTS flowline_progress "
                        "(sink text PRIMARY KEY, run_key text NOT NULL, documents bigint NOT NULL, last_id text "
                        "NOT NULL); ALTER TABLE flowline_progress ADD COLUMN IF NOT EXISTS complete boolean NOT NULL "
                        "DEFAULT false{}; COMMIT",
                        kCreateLock, more),
            "creating the table flowline_progress");
}

void TableProgress::start_rows(PgConnection& conn, const std::string& run_key, bool resuming) const {
  conn.exec("BEGIN", "starting a transaction");
  conn.query("DELETE FROM flowline_progress WHERE split_part(sink, '#', 1) = $1", "clearing an earlier run's progress",
             {PgParam{table_}});
  for (std::size_t r = 0; r < replicas_ && !resuming; ++r)
    for (std::size_t k = 0; k < parts_; ++k)
      upsert(conn, key_of(r, k), run_key, ProgressRecord{}, {}, "recording the run's start");
  conn.exec("COMMIT", "recording the run's start");
}

std::optional<SinkPoint> TableProgress::completed(PgConnection& conn, const std::string& run_key,
                                                  const std::string& executor) const {
  const pg::PgResult found =
      conn.query("SELECT run_key, documents, last_id FROM flowline_progress WHERE sink = $1 AND complete",
                 "reading the run's progress", {PgParam{table_}});
  if (found.rows() == 0) return std::nullopt;
  if (found.value(0, 0) != run_key) throw another_run(executor);
  const SinkPoint point{std::stoull(std::string(found.value(0, 1))), std::string(found.value(0, 2)), 0};
  spdlog::info(
      "executor '{}': table {} holds the {} input documents of this run, which completed: none is written "
      "again",
      executor, table_, point.documents);
  return point;
}

Error TableProgress::another_run(const std::string& executor) const {
  return Error(
      fmt::format("executor '{}': table {} was filled by another run (a changed input, flow file, --set, endpoint "
                  "or request size; flowline_progress): refused, nothing written",
                  executor, table_));
}

SinkPoint TableProgress::open(PgConnection& conn, const std::string& run_key, bool resuming,
                              const std::string& executor) {
  create(conn);
  if (resuming)
    if (auto done = completed(conn, run_key, executor)) return *done;
  const pg::PgResult found =
      conn.query("SELECT sink, run_key, documents, last_id FROM flowline_progress WHERE split_part(sink, '#', 1) = $1",
                 "reading the run's progress", {PgParam{table_}});
  if (!resuming || found.rows() == 0) {
    start_rows(conn, run_key, resuming);
    return {};
  }
  std::map<std::size_t, PartRow> rows;
  for (int r = 0; r < found.rows(); ++r) {
    const std::string sink(found.value(r, 0));
    std::size_t part = parts_;
    for (std::size_t k = 0; k < parts_; ++k)
      if (sink == key(k)) part = k;
    if (found.value(r, 1) != run_key) throw another_run(executor);
    if (part == parts_) {
      throw Error(
          fmt::format("executor '{}': flowline_progress holds the row '{}', which is no part of this "
                      "writer's {} connection{}: refused, nothing written",
                      executor, sink, parts_, parts_ == 1 ? "" : "s"));
    }
    rows[part] = {std::string(found.value(r, 1)), std::string(found.value(r, 3)),
                  std::stoull(std::string(found.value(r, 2)))};
  }
  if (rows.size() != parts_) {
    throw Error(
        fmt::format("executor '{}': flowline_progress holds {} of the {} rows of table {}'s parts: refused, "
                    "nothing written",
                    executor, rows.size(), parts_, table_));
  }
  const auto [lo_it, hi_it] = std::minmax_element(
      rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.documents < b.second.documents; });
  const PartRow lo = lo_it->second;
  const std::uint64_t hi = hi_it->second.documents;
  std::size_t at_hi = 0;
  for (const auto& [part, row] : rows) {
    if (row.documents != lo.documents && row.documents != hi) {
      throw Error(
          fmt::format("executor '{}': flowline_progress's parts of table {} are at input documents {}, {} "
                      "and {}: more than one request apart, which the writer never leaves: refused",
                      executor, table_, lo.documents, row.documents, hi));
    }
    at_hi += row.documents == hi ? 1 : 0;
  }
  const SinkPoint held{lo.documents, lo.last_id, 0};
  if (hi == lo.documents) return held;
  // The request from lo to hi committed on some connections only (table_progress.hpp says why this repairs it).
  conn.exec("BEGIN", "starting a transaction");
  std::uint64_t deleted = 0;
  if (keeps_ids_) {
    deleted = conn.query(fmt::format("DELETE FROM {} AS target USING flowline_progress AS progress WHERE "
                                     "split_part(progress.sink, '#', 1) = $1 AND progress.documents = $2 AND "
                                     "target.id = ANY(progress.part_ids)",
                                     pg::quote_name(table_)),
                         "removing the rows of a request that committed in part", {{table_}, {std::to_string(hi)}})
                  .affected();
  }
  conn.query("UPDATE flowline_progress SET documents = $3, last_id = $4" +
                 std::string(parts_ > 1 ? ", part_ids = NULL" : "") +
                 " WHERE split_part(sink, '#', 1) = $1 AND documents = $2",
             "setting the run's progress back",
             {{table_}, {std::to_string(hi)}, {std::to_string(lo.documents)}, {lo.last_id}});
  conn.exec("COMMIT", "repairing a request that committed in part");
  spdlog::warn(
      "executor '{}': the request of input documents {} to {} had committed on {} of {} connections when the run "
      "stopped: {}",
      executor, lo.documents, hi - 1, at_hi, parts_,
      keeps_ids_ ? fmt::format("the {} rows it left were deleted, and it is written again", deleted)
                 : std::string("it is written again (an upsert: its rows are replaced)"));
  return held;
}

void TableProgress::record(PgConnection& conn, std::size_t part, const std::string& run_key,
                           const ProgressRecord& record, const std::vector<std::string_view>& ids) const {
  upsert(conn, key(part), run_key, record, ids,
         parts_ == 1 ? std::string("recording the run's progress")
                     : fmt::format("recording the run's progress (part {} of {})", part + 1, parts_));
}

void TableProgress::upsert(PgConnection& conn, const std::string& key, const std::string& run_key,
                           const ProgressRecord& record, const std::vector<std::string_view>& ids,
                           const std::string& what) const {
  constexpr const char* kUpsert =
      "INSERT INTO flowline_progress (sink, run_key, documents, last_id{}) VALUES ($1, $2, $3, $4{}) ON CONFLICT "
      "(sink) DO UPDATE SET run_key = EXCLUDED.run_key, documents = EXCLUDED.documents, last_id = "
      "EXCLUDED.last_id{}";
  std::vector<PgParam> params = {{key}, {run_key}, {std::to_string(record.point.documents)}, {record.point.last_id}};
  if (parts_ == 1 && replicas_ == 1) {  // as a writer of one connection always wrote it: no part_ids needed
    conn.query(fmt::format(kUpsert, "", "", ""), what, params);
    return;
  }
  PgParam listed;
  listed.null = !keeps_ids_;
  if (keeps_ids_) listed.value = text_array_literal(ids);
  params.push_back(std::move(listed));
  if (replicas_ == 1) {
    conn.query(fmt::format(kUpsert, ", part_ids", ", $5::text[]", ", part_ids = EXCLUDED.part_ids"), what, params);
    return;
  }
  boost::json::array ranges;
  for (const auto& [begin, range] : record.beyond.ranges())
    ranges.push_back(boost::json::array{begin, range.end, boost::json::string(range.last_id)});
  params.push_back({boost::json::serialize(ranges)});
  conn.query(fmt::format(kUpsert, ", part_ids, ranges", ", $5::text[], $6::jsonb",
                         ", part_ids = EXCLUDED.part_ids, ranges = EXCLUDED.ranges"),
             what, params);
}

InputRanges TableProgress::open_replicated(PgConnection& conn, const std::string& run_key, bool resuming,
                                           const std::string& executor) {
  create(conn);
  if (resuming) {
    if (auto done = completed(conn, run_key, executor)) {
      InputRanges all;
      if (done->documents > 0) all.add(0, done->documents, done->last_id);
      return all;
    }
  }
  const pg::PgResult found = conn.query(
      "SELECT sink, run_key, documents, last_id, coalesce(ranges::text, '[]') FROM flowline_progress WHERE "
      "split_part(sink, '#', 1) = $1",
      "reading the run's progress", {PgParam{table_}});
  if (!resuming || found.rows() == 0) {
    start_rows(conn, run_key, resuming);
    return {};
  }
  // Each row's committed set: its prefix and its ranges past it.
  std::map<std::string, InputRanges> sets;
  for (int i = 0; i < found.rows(); ++i) {
    const std::string sink(found.value(i, 0));
    if (found.value(i, 1) != run_key) throw another_run(executor);
    InputRanges set;
    try {
      const std::uint64_t prefix = std::stoull(std::string(found.value(i, 2)));
      set.add(0, prefix, std::string(found.value(i, 3)));
      const boost::json::value ranges = boost::json::parse(found.value(i, 4));
      for (const auto& item : ranges.as_array()) {
        const auto& range = item.as_array();
        set.add(range.at(0).to_number<std::uint64_t>(), range.at(1).to_number<std::uint64_t>(),
                std::string(range.at(2).as_string()));
      }
    } catch (const std::exception& e) {
      throw Error(fmt::format("executor '{}': flowline_progress's row '{}' is not a writer's progress ({}): refused",
                              executor, sink, e.what()));
    }
    sets.emplace(sink, std::move(set));
  }
  std::vector<std::string> keys;
  for (std::size_t r = 0; r < replicas_; ++r)
    for (std::size_t k = 0; k < parts_; ++k) keys.push_back(key_of(r, k));
  for (const auto& [sink, set] : sets) {
    if (std::find(keys.begin(), keys.end(), sink) == keys.end()) {
      throw Error(
          fmt::format("executor '{}': flowline_progress holds the row '{}', which is no part of this writer's {} "
                      "replicas of {} connection{}: refused, nothing written",
                      executor, sink, replicas_, parts_, parts_ == 1 ? "" : "s"));
    }
  }
  if (sets.size() != keys.size()) {
    throw Error(
        fmt::format("executor '{}': flowline_progress holds {} of the {} rows of table {}'s replicas and parts: "
                    "refused, nothing written",
                    executor, sets.size(), keys.size(), table_));
  }
  // A replica committed what all its parts' rows say; a row saying more holds a request that committed on
  // some of the replica's connections only.
  InputRanges committed;
  std::vector<std::string> partial;
  for (std::size_t r = 0; r < replicas_; ++r) {
    InputRanges replica = sets.at(key_of(r, 0));
    for (std::size_t k = 1; k < parts_; ++k) replica = replica.intersect(sets.at(key_of(r, k)));
    for (std::size_t k = 0; k < parts_; ++k)
      if (!(sets.at(key_of(r, k)) == replica)) partial.push_back(key_of(r, k));
    committed.add(replica);
  }
  conn.exec("BEGIN", "starting a transaction");
  std::uint64_t deleted = 0;
  if (keeps_ids_ && !partial.empty()) {
    std::vector<std::string_view> listed(partial.begin(), partial.end());
    deleted = conn.query(fmt::format("DELETE FROM {} AS target USING flowline_progress AS progress WHERE "
                                     "progress.sink = ANY($1::text[]) AND target.id = ANY(progress.part_ids)",
                                     pg::quote_name(table_)),
                         "removing the rows of a request that committed in part", {{text_array_literal(listed)}})
                  .affected();
  }
  // Every row says the same from here: what the table holds.
  const ProgressRecord held = ProgressRecord::of(committed);
  for (const std::string& key : keys) upsert(conn, key, run_key, held, {}, "setting the run's progress");
  conn.exec("COMMIT", "recording what the table holds");
  if (!partial.empty()) {
    spdlog::warn(
        "executor '{}': {} row{} of flowline_progress held a request that committed on some of its "
        "replica's connections only when the run stopped: {}",
        executor, partial.size(), partial.size() == 1 ? "" : "s",
        keeps_ids_ ? fmt::format("the {} rows it left were deleted, and it is written again", deleted)
                   : std::string("it is written again (an upsert: its rows are replaced)"));
  }
  const std::size_t past = held.beyond.ranges().size();
  spdlog::info("executor '{}': table {} holds the first {} input documents{}", executor, table_, held.point.documents,
               past == 0 ? std::string()
                         : fmt::format(" and {} range{} after them (not written again)", past, past == 1 ? "" : "s"));
  return committed;
}

void TableProgress::complete(PgConnection& conn, const std::string& run_key, const SinkPoint& point) const {
  conn.exec("BEGIN", "starting a transaction");
  clear(conn);
  conn.query(
      "INSERT INTO flowline_progress (sink, run_key, documents, last_id, complete) VALUES ($1, $2, $3, $4, "
      "true)",
      "recording that the run completed",
      {PgParam{table_}, PgParam{run_key}, PgParam{std::to_string(point.documents)}, PgParam{point.last_id}});
  conn.exec("COMMIT", "recording that the run completed");
}

void TableProgress::clear(PgConnection& conn) const {
  conn.query("DELETE FROM flowline_progress WHERE split_part(sink, '#', 1) = $1", "clearing the run's progress",
             {PgParam{table_}});
}

ProgressGap::ProgressGap(std::string executor, bool upsert) : executor_(std::move(executor)), upsert_(upsert) {}

bool ProgressGap::may_record(const DocumentArray& docs) {
  bool again = !failed_ids_.empty() && docs.size() == failed_ids_.size();
  for (std::size_t i = 0; again && i < docs.size(); ++i) again = docs[i].id == failed_ids_[i];
  if (!failed_ids_.empty() && !again) {  // the run went on without the failed request: said once
    stopped_at_ = failed_at_;
    failed_ids_.clear();
    spdlog::warn(
        "executor '{}': a request failed at input document {} and the run went on without it: flowline_progress "
        "stays there for the rest of the run; {}",
        executor_, failed_at_,
        upsert_ ? "later requests are written, and `flowline run --resume` writes them again from there (an "
                  "upsert: their rows are replaced)"
                : "later requests are refused (on_conflict: error: a --resume would find their rows and fail on "
                  "them), and `flowline run --resume` continues from there");
  }
  if (stopped_at_ && !upsert_) {
    throw Error(
        fmt::format("executor '{}': refused: a request failed at input document {} and flowline_progress stays "
                    "there (on_conflict: error: a --resume would find this request's rows and fail on them); "
                    "`flowline run --resume` continues from there",
                    executor_, *stopped_at_));
  }
  return !stopped_at_;
}

std::string ProgressGap::failed(const DocumentArray& docs, std::uint64_t at, const std::string& what) {
  failed_at_ = at;
  failed_ids_.clear();
  for (const Document& d : docs) failed_ids_.push_back(d.id);
  return fmt::format(
      "{} (flowline_progress stays at input document {} until this request is written: `flowline run --resume` "
      "continues from there)",
      what, at);
}

}  // namespace flowline::pgvector_writer
