// PgVectorWriter: documents into a PostgreSQL table with pgvector, one transaction per request, rows by
// binary COPY (the header, flowline/pgvector_writer/pgvector_writer.hpp, states the contract).
#include "flowline/pgvector_writer/pgvector_writer.hpp"

#include "flowline/pg/pg_connection.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/resumable_sink.hpp"

#include <ATen/ATen.h>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <regex>
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

// Big-endian appends, as binary COPY wants.
void put16(std::string& out, std::uint16_t v) {
  const std::array<char, 2> b{static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b.data(), 2);
}
void put32(std::string& out, std::uint32_t v) {
  const std::array<char, 4> b{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                              static_cast<char>(v)};
  out.append(b.data(), 4);
}
void put_text(std::string& out, std::string_view s) {
  put32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
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
         ParamSpec::optional("connect_timeout", ParamType::Int, 10, "seconds per connection attempt").min(1)},
        {},
    };
    for (auto& p : resumable_sink_params()) spec.params.push_back(std::move(p));
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
    conn_ = PgConnection::connect(options_);
    prepare_database();
    open_progress();
    bind_default(&PgVectorWriter::write);
  }

  void close() override {
    if (progress_.enabled() && run_outcome() == RunOutcome::Complete) {
      if (!conn_->ok()) reconnect();
      if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) write_in_order(rest);
      conn_->query_column("DELETE FROM flowline_progress WHERE sink = $1 RETURNING 1", "clearing the run's progress",
                          {table_});
    }
    const std::string method = params().get<std::string>("index");
    if (run_outcome() != RunOutcome::Complete || method == "none" || runtime().replica != 0 || !table_exists_) return;
    if (!conn_->ok()) reconnect();
    build_index(method);
  }

 private:
  // The extension and, when its dimension is known, the table; or the existing table's columns checked.
  void prepare_database() {
    const bool create = params().get<bool>("create");
    if (create) {
      PgFailure failure;
      if (!conn_->try_exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); "
                                       "CREATE EXTENSION IF NOT EXISTS vector; COMMIT",
                                       kCreateLock),
                           failure)) {
        conn_->try_exec("ROLLBACK", failure);
        throw Error(fmt::format("pgvector missing on PostgreSQL server ({}): CREATE EXTENSION vector failed: {}",
                                conn_->target(), failure.message));
      }
    } else if (conn_->query_column("SELECT 1 FROM pg_type WHERE typname = 'vector'", "looking for pgvector").empty()) {
      throw Error(
          fmt::format("pgvector missing on PostgreSQL server ({}): there is no type 'vector' (install the "
                      "extension, or let the writer create it with create: true)",
                      conn_->target()));
    }
    read_table();
    if (!table_exists_ && !create)
      throw Error(fmt::format("table {} does not exist on PostgreSQL server ({}) and create is false", table_,
                              conn_->target()));
    if (!table_exists_ && dimension_ > 0) create_table(dimension_);
  }

  // Whether the table exists, and its embedding column's dimension (0: any); its columns checked.
  void read_table() {
    const auto found = conn_->query_column("SELECT coalesce(to_regclass($1)::text, '')", "looking for the table",
                                           {quote_name(table_)});
    table_exists_ = !found.empty() && !found[0].empty();
    if (!table_exists_) return;
    const auto columns = conn_->query_column(
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
    conn_->exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); CREATE TABLE IF NOT EXISTS {} ({}); COMMIT",
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

  // A resumable sink (flowline/resumable_sink.hpp) under `flowline run`, one replica: the table
  // flowline_progress holds a row per target table (run key, input documents held, last id), written in each
  // request's own transaction, so after a kill it names exactly what committed. --resume reads it, checks that
  // the table holds the last id, and the run skips that many input documents.
  void open_progress() {
    if (!progress_.enabled()) return;
    if (runtime().replicas > 1) {
      if (progress_.resuming())
        throw Error(
            fmt::format("executor '{}': --resume needs one replica (the run counts what it wrote)", runtime().name));
      progress_.disable();
      return;
    }
    conn_->exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}); CREATE TABLE IF NOT EXISTS flowline_progress "
                            "(sink text PRIMARY KEY, run_key text NOT NULL, documents bigint NOT NULL, last_id text "
                            "NOT NULL); COMMIT",
                            kCreateLock),
                "creating the table flowline_progress");
    SinkPoint held;
    const auto row = conn_->query_column(
        "SELECT run_key || ' ' || documents || ' ' || last_id FROM flowline_progress WHERE sink = $1",
        "reading the run's progress", {table_});
    if (progress_.resuming() && !row.empty()) {
      const std::size_t a = row[0].find(' '), b = row[0].find(' ', a + 1);
      if (row[0].substr(0, a) != progress_.run_key()) {
        throw Error(
            fmt::format("executor '{}': table {} was filled by another run (a changed input, flow file, "
                        "--set, endpoint or request size; flowline_progress): refused, nothing written",
                        runtime().name, table_));
      }
      held.documents = std::stoull(row[0].substr(a + 1, b - a - 1));
      held.last_id = row[0].substr(b + 1);
      if (held.documents > 0 &&
          (!table_exists_ || conn_
                                 ->query_column(fmt::format("SELECT 1 FROM {} WHERE id = $1", quote_name(table_)),
                                                "looking for the last id", {held.last_id})
                                 .empty())) {
        throw Error(
            fmt::format("executor '{}': flowline_progress says '{}' was written, but table {} does not hold "
                        "it: refused",
                        runtime().name, held.last_id, table_));
      }
    }
    progress_.held(held);
    if (!progress_.resuming()) record_progress(held);
  }

  void record_progress(const SinkPoint& point) {
    conn_->query_column(
        "INSERT INTO flowline_progress (sink, run_key, documents, last_id) VALUES ($1, $2, $3, $4) ON CONFLICT "
        "(sink) DO UPDATE SET run_key = EXCLUDED.run_key, documents = EXCLUDED.documents, last_id = "
        "EXCLUDED.last_id RETURNING 1",
        "recording the run's progress", {table_, progress_.run_key(), std::to_string(point.documents), point.last_id});
  }

  // Under a resumed run, the leading documents the table holds already are not written again. A request that
  // fails stops the progress records (the rows after it would claim its documents).
  // Batches go through order() first when the run's ids are positional (resumable_sink.hpp).
  void write(DocumentArray& docs, const RequestInfo& request) {
    if (progress_.orders(request)) return write_in_order(progress_.order(docs));
    write_in_order(docs);
  }

  void write_in_order(const DocumentArray& docs) {
    if (docs.empty()) return;
    const std::size_t held = progress_.skip(docs);
    if (held == docs.size()) return progress_.wrote(docs);
    const SinkPoint after{progress_.point().documents + docs.size(), docs[docs.size() - 1].id, 0};
    if (progress_.enabled() && !progress_failed_) next_progress_ = after;
    try {
      if (held == 0) {
        write_request(docs);
      } else {
        write_request(DocumentArray(
            std::vector<Document>(docs.docs().begin() + static_cast<std::ptrdiff_t>(held), docs.docs().end())));
      }
    } catch (...) {
      progress_failed_ = true;
      throw;
    }
    next_progress_.reset();
    progress_.wrote(docs);
  }

  void write_request(const DocumentArray& docs) {
    if (!conn_->ok()) reconnect();
    try {
      write_rows(docs);
    } catch (const Error& e) {
      PgFailure failure;
      if (conn_->ok()) {
        conn_->try_exec("ROLLBACK", failure);
        throw;
      }
      // The connection was lost mid-request, the transaction's fate unknown: an upsert can be redone; a plain
      // COPY cannot (its rows may have committed), so that request fails and the next one reconnects.
      if (!upsert_) throw;
      spdlog::warn("executor '{}': connection to PostgreSQL lost ({}); reconnecting to redo the request",
                   runtime().name, e.what());
      reconnect();
      write_rows(docs);
    }
  }

  void reconnect() {
    conn_ = PgConnection::connect(options_);
    stage_ready_ = false;
  }

  void write_rows(const DocumentArray& docs) {
    const bool with_embedding = std::find(fields_.begin(), fields_.end(), "embedding") != fields_.end();
    // Rows kept: with upsert, the last document of each id (ON CONFLICT cannot touch a row twice in one go).
    std::vector<std::size_t> rows;
    rows.reserve(docs.size());
    if (upsert_) {
      std::unordered_map<std::string_view, std::size_t> last;
      last.reserve(docs.size());
      for (std::size_t i = 0; i < docs.size(); ++i) last[docs[i].id] = i;
      for (std::size_t i = 0; i < docs.size(); ++i)
        if (last[docs[i].id] == i) rows.push_back(i);
    } else {
      for (std::size_t i = 0; i < docs.size(); ++i) rows.push_back(i);
    }
    std::vector<at::Tensor> embeddings(docs.size());
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
      embeddings[i] = std::move(e);
    }
    if (with_embedding) check_dimension(dimension);
    if (!table_exists_) create_table(0);

    const auto start = std::chrono::steady_clock::now();
    const std::string columns = column_list();
    conn_->exec("BEGIN", "starting a transaction");
    if (upsert_ && !stage_ready_) {
      conn_->exec(fmt::format("CREATE TEMP TABLE IF NOT EXISTS flowline_stage (LIKE {} INCLUDING DEFAULTS) "
                              "ON COMMIT DELETE ROWS",
                              quote_name(table_)),
                  "creating the staging table");
      stage_ready_ = true;
    }
    const std::string what =
        upsert_ ? fmt::format("COPY into the staging table of {}", table_) : fmt::format("COPY into {}", table_);
    conn_->copy_begin(fmt::format("COPY {} ({}) FROM STDIN (FORMAT BINARY)",
                                  upsert_ ? std::string("flowline_stage") : quote_name(table_), columns),
                      what);
    const std::size_t bytes = encode(docs, rows, embeddings, what);
    conn_->copy_end(what);
    if (upsert_) {
      std::string updates;
      for (std::size_t f = 1; f < fields_.size(); ++f)
        updates += fmt::format("{}\"{}\" = EXCLUDED.\"{}\"", f > 1 ? ", " : "", fields_[f], fields_[f]);
      conn_->exec(
          fmt::format("INSERT INTO {} ({}) SELECT {} FROM flowline_stage ON CONFLICT (id) DO {}", quote_name(table_),
                      columns, columns, updates.empty() ? "NOTHING" : "UPDATE SET " + updates),
          fmt::format("upserting into {}", table_));
    }
    if (next_progress_) record_progress(*next_progress_);  // committed with the rows, or not at all
    const auto copied = std::chrono::steady_clock::now();
    conn_->exec("COMMIT", fmt::format("committing {} rows into {}", rows.size(), table_));
    const auto committed = std::chrono::steady_clock::now();
    metrics().add("rows", static_cast<double>(rows.size()));
    metrics().add("bytes", static_cast<double>(bytes));
    metrics().add("copy_seconds", std::chrono::duration<double>(copied - start).count());
    metrics().add("commit_seconds", std::chrono::duration<double>(committed - copied).count());
  }

  std::string column_list() const {
    std::string s;
    for (const auto& f : fields_) s += fmt::format("{}\"{}\"", s.empty() ? "" : ", ", f);
    return s;
  }

  // Sends the binary COPY stream of `rows` in parts of about kPart bytes, each encoded in buffer_ (kept across
  // requests: no reallocation once grown) while the server stores the part before. Returns the bytes sent.
  std::size_t encode(const DocumentArray& docs, const std::vector<std::size_t>& rows,
                     const std::vector<at::Tensor>& embeddings, const std::string& what) {
    constexpr std::size_t kPart = std::size_t{256} << 10;
    std::size_t sent = 0;
    buffer_.clear();
    static constexpr char kHeader[] = "PGCOPY\n\377\r\n";  // 11 bytes with its NUL
    buffer_.append(kHeader, 11);
    put32(buffer_, 0);  // flags
    put32(buffer_, 0);  // header extension length
    for (std::size_t i : rows) {
      const Document& d = docs[i];
      put16(buffer_, static_cast<std::uint16_t>(fields_.size()));
      for (const auto& f : fields_) {
        if (f == "id") {
          put_text(buffer_, d.id);
        } else if (f == "text") {
          put_text(buffer_, d.text);
        } else if (f == "tags") {
          const std::string json = boost::json::serialize(d.tags);
          put32(buffer_, static_cast<std::uint32_t>(json.size() + 1));
          buffer_.push_back('\1');  // jsonb's binary format: version 1, then the JSON text
          buffer_.append(json);
        } else if (f == "embedding") {
          // pgvector's vector_recv: int16 dimensions, int16 unused, then float4s, all big-endian.
          const at::Tensor& e = embeddings[i];
          const auto n = static_cast<std::size_t>(e.numel());
          put32(buffer_, static_cast<std::uint32_t>(4 + 4 * n));
          put16(buffer_, static_cast<std::uint16_t>(n));
          put16(buffer_, 0);
          const std::size_t at = buffer_.size();
          buffer_.resize(at + 4 * n);
          const auto* src = e.data_ptr<float>();
          char* out = buffer_.data() + at;
          for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t bits = __builtin_bswap32(std::bit_cast<std::uint32_t>(src[k]));
            std::memcpy(out + 4 * k, &bits, 4);
          }
        } else {
          put_text(buffer_, f == "mime_type" ? d.mime_type : f == "uri" ? d.uri : d.parent_id);
        }
      }
      if (buffer_.size() >= kPart) {
        conn_->copy_put(buffer_, what);
        sent += buffer_.size();
        buffer_.clear();
      }
    }
    put16(buffer_, 0xffff);  // trailer: -1
    conn_->copy_put(buffer_, what);
    return sent + buffer_.size();
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
            conn_->query_column(fmt::format("SELECT count(*) FROM {}", quote_name(table_)), "counting rows");
        lists = std::max<std::int64_t>(1, std::stoll(count.at(0)) / 1000);
      }
      with = fmt::format(" WITH (lists = {})", lists);
    }
    const auto dot = table_.find('.');
    const std::string bare = dot == std::string::npos ? table_ : table_.substr(dot + 1);
    const auto start = std::chrono::steady_clock::now();
    conn_->exec(fmt::format("CREATE INDEX IF NOT EXISTS \"{}\" ON {} USING {} (\"embedding\" {}){}",
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
  std::optional<SinkPoint> next_progress_;  // the point the request being written reaches
  bool progress_failed_ = false;
  std::unique_ptr<PgConnection> conn_;
  std::string table_;
  std::vector<std::string> fields_;
  bool upsert_ = true;
  std::int64_t dimension_ = 0;  // the `dimension` parameter
  bool table_exists_ = false;
  std::int64_t table_dimension_ = 0;  // the embedding column's (0: unknown or any)
  bool stage_ready_ = false;          // this connection's temporary staging table exists
  std::string buffer_;
};

}  // namespace

void register_pgvector_writer(Registry& registry) { registry.add<PgVectorWriter>("flowline::pgvector_writer"); }

}  // namespace flowline::pgvector_writer
