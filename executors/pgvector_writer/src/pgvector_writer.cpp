// PgVectorWriter: documents into a PostgreSQL table with pgvector, one transaction per request, rows by
// binary COPY (the header, flowline/pgvector_writer/pgvector_writer.hpp, states the contract).
#include "flowline/pgvector_writer/pgvector_writer.hpp"

#include "copy_rows.hpp"
#include "lanes.hpp"
#include "replicated_progress.hpp"
#include "table_progress.hpp"

#include "flowline/pg/pg_connection.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/resumable_sink.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <numeric>
#include <regex>
#include <span>
#include <unordered_map>

namespace flowline::pgvector_writer {
namespace {

using pg::check_uri;
using pg::ConnectOptions;
using pg::PgConnection;
using pg::PgFailure;
using pg::quote_name;

const std::vector<std::string> kFields = {"id", "text", "tags", "embedding", "mime_type", "uri", "parent_id"};
// Serialises CREATE EXTENSION and CREATE TABLE between replicas and processes (pg_advisory_xact_lock's key).
constexpr std::int64_t kCreateLock = 0x666c6f776c696e65;  // "flowline"
// `connections`' default: measured on a 2-core machine (docs/benchmarks.md, bench/pgvector_writer.py).
constexpr int kDefaultConnections = 1;

std::optional<std::string> check_table_name(const boost::json::value& v) {
  return pg::check_table_name(std::string_view(v.as_string()));
}

std::optional<std::string> check_uri_param(const boost::json::value& v) {
  std::string problem = check_uri(std::string(v.as_string()));
  if (problem.empty()) return std::nullopt;
  return problem;
}

std::string sql_type(const std::string& field, std::int64_t dimension) {
  if (field == "id") return "text PRIMARY KEY";
  if (field == "tags") return "jsonb";
  if (field == "embedding") return fmt::format("vector({})", dimension);
  return "text";
}

class PgVectorWriter : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "PgVectorWriter",
        "Write every document as a row of a PostgreSQL table with pgvector (binary COPY, one transaction per request)",
        {ParamSpec::optional("uri", ParamType::String, "",
                             "PostgreSQL connection URI or key=value string, without a password; empty: the PG* "
                             "environment variables")
             .check(check_uri_param),
         ParamSpec::required_param("table", ParamType::String, "table to fill: NAME or SCHEMA.NAME")
             .check(check_table_name),
         ParamSpec::choice_list("fields", kFields, {"id", "text", "tags", "embedding"},
                                "document fields written, one column each (id always)"),
         ParamSpec::optional("dimension", ParamType::Int, 0,
                             "the embedding column's dimension when the table is created; 0: the first request's")
             .min(0)
             .max(16000),
         ParamSpec::optional("create", ParamType::Bool, true, "create the vector extension and the table when missing"),
         ParamSpec::choice("on_conflict", {"update", "error"}, "update",
                           "a row whose id the table holds: replaced (upsert), or the request fails"),
         ParamSpec::choice("index", {"none", "hnsw", "ivfflat"}, "none",
                           "vector index built on the embedding column once the run completed"),
         ParamSpec::choice("metric", {"cosine", "l2", "ip"}, "cosine", "the index's distance"),
         ParamSpec::optional("lists", ParamType::Int, 0, "IVFFlat lists; 0: rows / 1000, at least 1").min(0),
         ParamSpec::optional("connect_attempts", ParamType::Int, 5, "connection attempts before giving up")
             .min(1)
             .max(100),
         ParamSpec::optional("connect_timeout", ParamType::Int, 10, "seconds per connection attempt").min(1),
         ParamSpec::optional("connections", ParamType::Int, kDefaultConnections,
                             "connections writing each request at once, its rows split between them (a transaction "
                             "each; the request is acknowledged once all committed)")
             .min(1)
             .max(64)},
        {},
    };
    for (auto& p : resumable_sink_params()) spec.params.push_back(std::move(p));
    spec.replicated_sink = true;  // replicas share one progress (replicated_progress.hpp)
    return spec;
  }

  explicit PgVectorWriter(const ExecutorContext& context) : Executor(context) {
    table_ = params().get<std::string>("table");
    fields_ = {"id"};
    for (const auto& f : params().get<std::vector<std::string>>("fields"))
      if (f != "id" && std::find(fields_.begin(), fields_.end(), f) == fields_.end()) fields_.push_back(f);
    upsert_ = params().get<std::string>("on_conflict") == "update";
    dimension_ = params().get<std::int64_t>("dimension");
    options_.uri = params().get<std::string>("uri");
    options_.attempts = params().get<int>("connect_attempts");
    options_.connect_timeout_s = params().get<int>("connect_timeout");
    if (const auto problem = check_uri(options_.uri); !problem.empty()) throw Error("parameter 'uri': " + problem);
    lanes_ =
        std::make_unique<Lanes>(options_, static_cast<std::size_t>(params().get<int>("connections")), runtime().name);
    prepare_database();
    open_progress();
    bind_default(&PgVectorWriter::write);
  }

  void close() override {
    // The run completed: one row says so (a later --resume writes nothing), written by the last replica to
    // close, once every request of every replica is in.
    if (progress_.enabled() && run_outcome() == RunOutcome::Complete) {
      if (!replicated_) {
        if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) write_in_order(rest);
        table_progress_->complete(conn(), progress_.run_key(), progress_.point());
      } else if (replicated_->last_to_close(static_cast<std::size_t>(runtime().replicas))) {
        const InputRanges all = replicated_->committed();
        const bool prefix_only = all.empty() || (all.ranges().size() == 1 && all.prefix() > 0);
        if (replicated_->gave_up() || !prefix_only)
          table_progress_->clear(conn());  // no input positions throughout: what the table holds is unknown
        else
          table_progress_->complete(conn(), progress_.run_key(), {all.prefix(), all.prefix_last_id(), 0});
      }
    }
    const std::string method = params().get<std::string>("index");
    if (run_outcome() != RunOutcome::Complete || method == "none" || runtime().replica != 0 || !table_exists_) return;
    build_index(method);
  }

 private:
  // Lane 0's connection, reopened first when it was lost: the set-up, the progress rows, the index.
  PgConnection& conn() { return lanes_->live(0); }

  // The extension and, when its dimension is known, the table; or the existing table's columns checked.
  void prepare_database() {
    const bool create = params().get<bool>("create");
    if (create) {
      PgFailure failure;
      if (!conn().try_exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); "
                                       "CREATE EXTENSION IF NOT EXISTS vector; COMMIT",
                                       kCreateLock),
                           failure)) {
        conn().try_exec("ROLLBACK", failure);
        throw Error(fmt::format("pgvector missing on PostgreSQL server ({}): CREATE EXTENSION vector failed: {}",
                                conn().target(), failure.message));
      }
    } else if (conn().query_column("SELECT 1 FROM pg_type WHERE typname = 'vector'", "looking for pgvector").empty()) {
      throw Error(
          fmt::format("pgvector missing on PostgreSQL server ({}): there is no type 'vector' (install the "
                      "extension, or let the writer create it with create: true)",
                      conn().target()));
    }
    read_table();
    if (!table_exists_ && !create)
      throw Error(fmt::format("table {} does not exist on PostgreSQL server ({}) and create is false", table_,
                              conn().target()));
    if (!table_exists_ && dimension_ > 0) create_table(dimension_);
  }

  // Whether the table exists, and its embedding column's dimension (0: any); its columns checked.
  void read_table() {
    const auto found = conn().query_column("SELECT coalesce(to_regclass($1)::text, '')", "looking for the table",
                                           {quote_name(table_)});
    table_exists_ = !found.empty() && !found[0].empty();
    if (!table_exists_) return;
    const auto columns = conn().query_column(
        "SELECT attname || ' ' || format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
        "reading the table's columns", {quote_name(table_)});
    for (const auto& field : fields_) {
      const auto it = std::find_if(columns.begin(), columns.end(),
                                   [&](const std::string& c) { return c.rfind(field + " ", 0) == 0; });
      if (it == columns.end())
        throw Error(fmt::format("table {} has no column '{}' (fields: {})", table_, field, fmt::join(fields_, ", ")));
      if (field != "embedding") continue;
      const std::string type = it->substr(field.size() + 1);
      std::smatch m;
      if (std::regex_match(type, m, std::regex(R"(vector\((\d+)\))"))) {
        table_dimension_ = std::stoll(m[1]);
      } else if (type != "vector") {
        throw Error(fmt::format("table {}'s column embedding is {}, not pgvector's vector", table_, type));
      }
    }
  }

  void create_table(std::int64_t dimension) {
    std::string columns;
    for (const auto& f : fields_)
      columns += fmt::format("{}\"{}\" {}", columns.empty() ? "" : ", ", f, sql_type(f, dimension));
    conn().exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); CREATE TABLE IF NOT EXISTS {} ({}); COMMIT",
                            kCreateLock, quote_name(table_), columns),
                fmt::format("creating table {}", table_));
    read_table();
  }

  void check_dimension(std::int64_t docs_dimension) {
    if (!table_exists_) {
      if (dimension_ > 0 && dimension_ != docs_dimension)
        throw Error(fmt::format("parameter dimension is {}, the documents' embeddings have {} dimensions", dimension_,
                                docs_dimension));
      create_table(docs_dimension);
    }
    if (table_dimension_ > 0 && table_dimension_ != docs_dimension)
      throw Error(fmt::format("table {}'s embedding column is vector({}), the documents' embeddings have {} dimensions",
                              table_, table_dimension_, docs_dimension));
  }

  // A resumable sink (flowline/resumable_sink.hpp) under `flowline run`: the table flowline_progress holds a
  // row per target table and connection (run key, input documents held, last id), and with several replicas one
  // per replica and connection, with the ranges committed past that prefix; written in each part's own
  // transaction, so after a kill it names exactly what committed (table_progress.hpp: a request committed on some
  // connections only is repaired first). --resume reads it, checks that the table holds the last id, and the run
  // skips that many input documents (and the replicas the ranges past them).
  void open_progress() {
    const auto replicas = static_cast<std::size_t>(runtime().replicas);
    table_progress_ = std::make_unique<TableProgress>(table_, lanes_->size(), !upsert_, replicas,
                                                      static_cast<std::size_t>(runtime().replica));
    if (!progress_.enabled()) return;
    SinkPoint held;
    if (replicas > 1) {
      if (!runtime().group) {  // constructed outside a flow: nothing to share the progress with
        if (progress_.resuming())
          throw Error(
              fmt::format("executor '{}': --resume of several replicas needs them in one flow", runtime().name));
        progress_.disable();
        return;
      }
      // The first replica reads (and repairs) the rows; the others wait for it and share what it found.
      replicated_ = runtime().group->shared<ReplicatedProgress>([&] {
        return std::make_shared<ReplicatedProgress>(
            table_progress_->open_replicated(conn(), progress_.run_key(), progress_.resuming(), runtime().name));
      });
      held = replicated_->record().point;
    } else {
      held = table_progress_->open(conn(), progress_.run_key(), progress_.resuming(), runtime().name);
    }
    if (held.documents > 0 &&
        (!table_exists_ || conn()
                               .query_column(fmt::format("SELECT 1 FROM {} WHERE id = $1", quote_name(table_)),
                                             "looking for the last id", {held.last_id})
                               .empty())) {
      throw Error(
          fmt::format("executor '{}': flowline_progress says '{}' was written, but table {} does not hold "
                      "it: refused",
                      runtime().name, held.last_id, table_));
    }
    progress_.held(held);
  }

  // Under a resumed run, the leading documents the table holds already are not written again. A request that
  // fails holds the progress records where they were (ProgressGap, table_progress.hpp).
  // Batches go through order() first when the run's ids are positional (resumable_sink.hpp).
  void write(DocumentArray& docs, const RequestInfo& request) {
    if (replicated_) return write_replicated(docs, request);
    if (progress_.orders(request)) return write_in_order(progress_.order(docs));
    write_in_order(docs);
  }

  // One of several replicas: requests come in any order. The request's input positions go into its parts'
  // progress rows with everything the replicas committed before it (replicated_progress.hpp); documents whose
  // positions committed already (a resumed run's ranges past its start) are not written again.
  void write_replicated(const DocumentArray& docs, const RequestInfo& request) {
    if (docs.empty()) return;
    InputRanges positions;
    std::vector<std::uint64_t> at(docs.size());  // each document's input position
    if (!replicated_->gave_up()) {
      const bool positional = progress_.orders(request);
      for (std::size_t i = 0; positional && i < docs.size(); ++i) {
        const std::optional<std::uint64_t> position = progress_.position_of(docs[i]);
        if (!position) {
          if (replicated_->give_up())
            spdlog::warn(
                "executor '{}': document '{}' has no input position: its replicas write as documents come from here "
                "on and record no more progress (a --resume continues from the last progress recorded, and "
                "writes again what came after)",
                runtime().name, docs[i].id);
          positions = {};
          break;
        }
        at[i] = *position;
        positions.add(at[i], at[i] + 1, docs[i].id);
      }
      if (!positional && !docs.empty() && replicated_->give_up())
        spdlog::warn("executor '{}': the run's documents carry no input positions: no progress is recorded",
                     runtime().name);
    }
    if (positions.empty()) return write_request(docs);
    InputRanges committed = replicated_->committed();
    std::vector<Document> rest;
    for (std::size_t i = 0; i < docs.size(); ++i)
      if (!committed.contains(at[i])) rest.push_back(docs[i]);
    if (rest.empty()) return;  // committed before the run was resumed
    committed.add(positions);  // what the table holds once this request committed
    next_progress_ = ProgressRecord::of(committed);
    try {
      write_request(rest.size() == docs.size() ? docs : DocumentArray(std::move(rest)));
    } catch (const std::exception& e) {
      next_progress_.reset();
      throw Error(
          fmt::format("{} (flowline_progress keeps the documents before this request and the requests "
                      "committed after it: `flowline run --resume` writes this one again)",
                      e.what()));
    }
    next_progress_.reset();
    replicated_->add(positions);
  }

  void write_in_order(const DocumentArray& docs) {
    if (docs.empty()) return;
    const std::size_t held = progress_.skip(docs);
    if (held == docs.size()) return progress_.wrote(docs);
    const bool recorded = progress_.enabled() && gap_.may_record(docs);
    if (recorded)
      next_progress_ = ProgressRecord{{progress_.point().documents + docs.size(), docs[docs.size() - 1].id, 0}, {}};
    try {
      if (held == 0) {
        write_request(docs);
      } else {
        write_request(DocumentArray(
            std::vector<Document>(docs.docs().begin() + static_cast<std::ptrdiff_t>(held), docs.docs().end())));
      }
    } catch (const std::exception& e) {
      next_progress_.reset();  // no later request may record this one's point
      if (!recorded) throw;
      throw Error(gap_.failed(docs, progress_.point().documents, e.what()));
    } catch (...) {
      next_progress_.reset();
      throw;
    }
    next_progress_.reset();
    if (recorded) gap_.written();
    progress_.wrote(docs);
  }

  // The request's rows, checked on the replica's thread before any part is written.
  struct Rows {
    std::vector<std::size_t> rows;       // the documents written, in order (an upsert: the last of each id)
    std::vector<at::Tensor> embeddings;  // by document: float32, contiguous, on the CPU
  };

  Rows check_rows(const DocumentArray& docs) {
    const bool with_embedding = std::find(fields_.begin(), fields_.end(), "embedding") != fields_.end();
    Rows checked;
    std::vector<std::size_t>& rows = checked.rows;
    rows.reserve(docs.size());
    // An upsert keeps the last document of each id (ON CONFLICT cannot touch a row twice in one go). A plain COPY
    // over several connections refuses a repeated id here: its two parts would wait for each other's COMMIT.
    if (upsert_ || lanes_->size() > 1) {
      std::unordered_map<std::string_view, std::size_t> last;
      last.reserve(docs.size());
      for (std::size_t i = 0; i < docs.size(); ++i) {
        const auto [it, fresh] = last.try_emplace(docs[i].id, i);
        if (!fresh && !upsert_ && !docs[i].id.empty())
          throw Error(
              fmt::format("duplicate key value: documents {} and {} of the request have the id '{}' "
                          "(on_conflict: error)",
                          it->second, i, docs[i].id));
        it->second = i;
      }
      for (std::size_t i = 0; i < docs.size(); ++i)
        if (!upsert_ || last[docs[i].id] == i) rows.push_back(i);
    } else {
      for (std::size_t i = 0; i < docs.size(); ++i) rows.push_back(i);
    }
    checked.embeddings.resize(docs.size());
    std::int64_t dimension = -1;
    for (std::size_t i : rows) {
      const Document& d = docs[i];
      if (d.id.empty()) throw Error(fmt::format("document {} has an empty id (the table's primary key)", i));
      if (!with_embedding) continue;
      if (!d.embedding.defined())
        throw Error(
            fmt::format("document {} (id '{}') has no embedding: PgVectorWriter writes embedded documents "
                        "(put an encoder before it, or leave embedding out of fields)",
                        i, d.id));
      at::Tensor e = d.embedding;
      if (e.device().type() != c10::kCPU || e.scalar_type() != at::kFloat) e = e.to(c10::kCPU, at::kFloat);
      if (!e.is_contiguous()) e = e.contiguous();
      if (dimension < 0) dimension = e.numel();
      if (e.numel() != dimension || dimension == 0)
        throw Error(fmt::format("document {} (id '{}') has an embedding of {} values, the request's first has {}", i,
                                d.id, e.numel(), dimension));
      checked.embeddings[i] = std::move(e);
    }
    if (with_embedding) check_dimension(dimension);
    if (!table_exists_) create_table(0);
    return checked;
  }

  // One transaction per connection (lanes.hpp): part k holds rows [size * k / N, size * (k + 1) / N) of the
  // request; every part's transaction also records the request's progress, so a part without rows still runs
  // one when progress is kept. The request is acknowledged (this returns) only once every part committed.
  void write_request(const DocumentArray& docs) {
    const Rows checked = check_rows(docs);
    const std::size_t n = lanes_->size();
    std::vector<std::span<const std::size_t>> parts(n);
    std::vector<bool> active(n);
    std::vector<std::string> what(n);
    std::vector<std::size_t> bytes(n, 0);
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t begin = checked.rows.size() * k / n, end = checked.rows.size() * (k + 1) / n;
      parts[k] = std::span<const std::size_t>(checked.rows).subspan(begin, end - begin);
      active[k] = !parts[k].empty() || next_progress_.has_value();
      what[k] = n == 1 ? fmt::format("committing {} rows into {}", parts[k].size(), table_)
                       : fmt::format("committing part {} of {} ({} rows) into {}", k + 1, n, parts[k].size(), table_);
    }
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = lanes_->run(active, what, upsert_, [&](std::size_t k, Lane& lane) {
      bytes[k] = write_part(lane, k, docs, parts[k], checked.embeddings);
    });
    const auto committed = std::chrono::steady_clock::now();
    settle(outcomes, docs, parts, checked.rows.size());
    metrics().add("rows", static_cast<double>(checked.rows.size()));
    metrics().add("bytes", static_cast<double>(std::accumulate(bytes.begin(), bytes.end(), std::size_t{0})));
    metrics().add("copy_seconds", std::chrono::duration<double>(lanes_->prepared_at() - start).count());
    metrics().add("commit_seconds", std::chrono::duration<double>(committed - lanes_->prepared_at()).count());
  }

  // Part k's transaction on `lane` up to its COMMIT (lanes.hpp sends that). Returns the bytes it sent.
  std::size_t write_part(Lane& lane, std::size_t k, const DocumentArray& docs, std::span<const std::size_t> rows,
                         const std::vector<at::Tensor>& embeddings) {
    PgConnection& conn = *lane.conn;
    if (upsert_ && !lane.stage_ready) {  // outside the transaction: a rolled-back request keeps it
      conn.exec(fmt::format("CREATE TEMP TABLE IF NOT EXISTS flowline_stage (LIKE {} INCLUDING DEFAULTS) "
                            "ON COMMIT DELETE ROWS",
                            quote_name(table_)),
                "creating the staging table");
      lane.stage_ready = true;
    }
    conn.exec("BEGIN", "starting a transaction");
    std::size_t bytes = 0;
    if (!rows.empty()) {
      const std::string columns = column_list();
      const std::string what =
          upsert_ ? fmt::format("COPY into the staging table of {}", table_) : fmt::format("COPY into {}", table_);
      conn.copy_begin(fmt::format("COPY {} ({}) FROM STDIN (FORMAT BINARY)",
                                  upsert_ ? std::string("flowline_stage") : quote_name(table_), columns),
                      what);
      bytes = send_copy_rows(lane, fields_, docs, rows, embeddings, what);
      conn.copy_end(what);
      if (upsert_) {
        std::string updates;
        for (std::size_t f = 1; f < fields_.size(); ++f)
          updates += fmt::format("{}\"{}\" = EXCLUDED.\"{}\"", f > 1 ? ", " : "", fields_[f], fields_[f]);
        conn.exec(
            fmt::format("INSERT INTO {} ({}) SELECT {} FROM flowline_stage ON CONFLICT (id) DO {}", quote_name(table_),
                        columns, columns, updates.empty() ? "NOTHING" : "UPDATE SET " + updates),
            fmt::format("upserting into {}", table_));
      }
    }
    if (next_progress_)  // committed with the rows, or not at all
      table_progress_->record(conn, k, progress_.run_key(), *next_progress_, ids_of(docs, rows));
    return bytes;
  }

  std::vector<std::string_view> ids_of(const DocumentArray& docs, std::span<const std::size_t> rows) const {
    std::vector<std::string_view> ids;
    if (!table_progress_->keeps_ids()) return ids;
    ids.reserve(rows.size());
    for (std::size_t i : rows) ids.push_back(docs[i].id);
    return ids;
  }

  // Returns when every part committed; else throws what went wrong, having undone what it can: with one
  // connection the error as it came (the request was one transaction); with several, a plain COPY's parts that
  // committed (or may have: a connection lost at COMMIT) are deleted again by id, so the request leaves nothing;
  // an upsert's cannot be (the rows they replaced are gone): the error says so, and a --resume redoes them.
  void settle(const std::vector<PartOutcome>& outcomes, const DocumentArray& docs,
              const std::vector<std::span<const std::size_t>>& parts, std::size_t rows) {
    const std::size_t n = outcomes.size();
    std::size_t first = n;
    std::vector<std::size_t> landed;
    for (std::size_t k = 0; k < n; ++k) {
      if (outcomes[k].state == PartState::Committed || outcomes[k].state == PartState::Unknown) landed.push_back(k);
      if (outcomes[k].error && first == n) first = k;
    }
    if (first == n) return;
    if (n == 1) std::rethrow_exception(outcomes[0].error);
    const std::size_t begin = rows * first / n;
    const std::string held = parts[first].empty()
                                 ? "no rows of the request"
                                 : fmt::format("rows {} to {} of the request", begin, begin + parts[first].size() - 1);
    std::string message = fmt::format("part {} of {} ({}): {}", first + 1, n, held, what_of(outcomes[first].error));
    if (landed.empty()) throw Error(message);
    if (upsert_) {
      throw Error(
          fmt::format("{}; {} of the request's {} parts committed: their rows replaced those of the same ids "
                      "(writing the request again, or --resume, completes it)",
                      message, landed.size(), n));
    }
    try {
      undo(landed, docs, parts);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}; undoing the parts that had committed failed too: {} (a --resume removes them)",
                              message, e.what()));
    }
    throw Error(fmt::format("{}; the {} part{} that had committed {} undone: the request left nothing", message,
                            landed.size(), landed.size() == 1 ? "" : "s", landed.size() == 1 ? "was" : "were"));
  }

  // Deletes the rows of a plain COPY's parts `landed` and sets their progress rows back, in one transaction.
  void undo(const std::vector<std::size_t>& landed, const DocumentArray& docs,
            const std::vector<std::span<const std::size_t>>& parts) {
    std::vector<std::string_view> ids;
    for (std::size_t k : landed)
      for (std::size_t i : parts[k]) ids.push_back(docs[i].id);
    PgConnection& conn = lanes_->live(0);
    conn.exec("BEGIN", "starting a transaction");
    conn.query(fmt::format("DELETE FROM {} WHERE id = ANY($1::text[])", quote_name(table_)),
               fmt::format("deleting the rows of the request's committed parts from {}", table_),
               {{text_array_literal(ids)}});
    if (next_progress_)
      for (std::size_t k : landed)
        table_progress_->record(conn, k, progress_.run_key(),
                                replicated_ ? replicated_->record() : ProgressRecord{progress_.point(), {}}, {});
    conn.exec("COMMIT", "undoing the request's committed parts");
  }

  static std::string what_of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an unknown error";
    }
  }

  std::string column_list() const {
    std::string s;
    for (const auto& f : fields_) s += fmt::format("{}\"{}\"", s.empty() ? "" : ", ", f);
    return s;
  }

  void build_index(const std::string& method) {
    const std::string metric = params().get<std::string>("metric");
    const std::string ops = metric == "cosine" ? "vector_cosine_ops"
                            : metric == "l2"   ? "vector_l2_ops"
                                               : "vector_ip_ops";
    std::string with;
    if (method == "ivfflat") {
      std::int64_t lists = params().get<std::int64_t>("lists");
      if (lists == 0) {
        const auto count =
            conn().query_column(fmt::format("SELECT count(*) FROM {}", quote_name(table_)), "counting rows");
        lists = std::max<std::int64_t>(1, std::stoll(count.at(0)) / 1000);
      }
      with = fmt::format(" WITH (lists = {})", lists);
    }
    const auto dot = table_.find('.');
    const std::string bare = dot == std::string::npos ? table_ : table_.substr(dot + 1);
    const auto start = std::chrono::steady_clock::now();
    conn().exec(fmt::format("CREATE INDEX IF NOT EXISTS \"{}\" ON {} USING {} (\"embedding\" {}){}",
                            fmt::format("{}_embedding_{}_{}", bare, method, metric).substr(0, 63), quote_name(table_),
                            method, ops, with),
                fmt::format("building the {} index of {}", method, table_));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics().add("index_seconds", seconds);
    spdlog::info("executor '{}': {} index ({}) of {} built in {:.2f} s", runtime().name, method, metric, table_,
                 seconds);
  }

  ConnectOptions options_;
  SinkProgress progress_{params(), runtime().name};
  std::optional<ProgressRecord> next_progress_;     // what the request being written reaches, recorded with it
  std::shared_ptr<ReplicatedProgress> replicated_;  // several replicas under flowline run: their common progress
  // A failed request that holds progress back.
  ProgressGap gap_{runtime().name, params().get<std::string>("on_conflict") == "update"};
  std::unique_ptr<Lanes> lanes_;                   // the connections; lane 0 also sets up, clears and indexes
  std::unique_ptr<TableProgress> table_progress_;  // the rows of flowline_progress
  std::string table_;
  std::vector<std::string> fields_;
  bool upsert_ = true;
  std::int64_t dimension_ = 0;  // the `dimension` parameter
  bool table_exists_ = false;
  std::int64_t table_dimension_ = 0;  // the embedding column's (0: unknown or any)
};

}  // namespace

void register_pgvector_writer(Registry& registry) { registry.add<PgVectorWriter>("flowline::pgvector_writer"); }

}  // namespace flowline::pgvector_writer
