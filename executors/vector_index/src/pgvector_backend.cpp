// The pgvector backend: a VectorIndex over a PostgreSQL table with pgvector that this index does not own —
// one a PgVectorWriter (or any other system) fills. It keeps the documents itself (DocumentBackend,
// backend.hpp): /search is one SQL query per query vector,
//
//   SELECT id, text, tags, embedding <=> $1 FROM table WHERE <filter> ORDER BY embedding <=> $1 LIMIT k
//
// with the query bound in pgvector's binary form and the filter (filter.hpp's language) translated into
// jsonb conditions on the tags column whose values and keys are bound parameters, never SQL text. /index
// upserts by id, /update changes the fields a document carries, /delete and /clear delete rows, /status
// counts them: each request is one transaction, committed before it is answered.
//
// Scores are what the other backends report: cosine similarity (1 - `<=>`), inner product (-`<#>`) and
// Euclidean distance (`<->`). The connection (one per replica) comes from `uri` or the PG* environment,
// never holds a password, is retried with bounded backoff, and every statement has a statement_timeout.
#include "backend.hpp"

#include "flowline/error.hpp"

#if FLOWLINE_HAVE_PG
#include "flowline/pg/pg_connection.hpp"
#endif

#include <ATen/ATen.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <map>

namespace flowline::vector_index {
namespace {

namespace json = boost::json;

#if FLOWLINE_HAVE_PG

struct PgOptions {
  pg::ConnectOptions connect;
  std::string table;  // as given (checked) and quoted for SQL
  std::string quoted_table;
  std::string id, text, tags, embedding;  // column names as given; text and tags may be empty (none)
  int statement_timeout_s = 30;
  std::size_t dim = 0;  // with.dim: the dimension the flow expects (0: the table's)
  std::size_t max_answer_bytes = 0;
};

std::string q(const std::string& column) { return pg::quote_name(column); }

// pgvector's binary form of a float vector (vector_send): int16 dimensions, int16 0, big-endian float4s.
std::string vector_send(const at::Tensor& row) {
  const at::Tensor v = row.to(at::kCPU, at::kFloat).contiguous();
  const auto n = static_cast<std::uint16_t>(v.numel());
  std::string out{static_cast<char>(n >> 8), static_cast<char>(n), 0, 0};
  const float* p = v.data_ptr<float>();
  for (std::int64_t k = 0; k < v.numel(); ++k) {
    const auto bits = std::bit_cast<std::uint32_t>(p[k]);
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(bits >> shift);
  }
  return out;
}

std::uint64_t big_endian(std::string_view bytes) {
  std::uint64_t v = 0;
  for (unsigned char c : bytes) v = (v << 8) | c;
  return v;
}

at::Tensor vector_recv(std::string_view bytes) {
  const std::size_t n = bytes.size() >= 4 ? big_endian(bytes.substr(0, 2)) : 0;
  if (bytes.size() != 4 + 4 * n) throw Error("pgvector sent a vector of an unexpected size");
  at::Tensor out = at::empty({static_cast<std::int64_t>(n)}, at::kFloat);
  float* p = out.data_ptr<float>();
  for (std::size_t k = 0; k < n; ++k) {
    p[k] = std::bit_cast<float>(static_cast<std::uint32_t>(big_endian(bytes.substr(4 + 4 * k, 4))));
  }
  return out;
}

// A document's embedding as one vector, or a clear refusal naming it.
at::Tensor embedding_of(const Document& doc, std::size_t i, std::string_view endpoint) {
  if (!doc.embedding.defined() || doc.embedding.numel() == 0 || doc.embedding.numel() != doc.embedding.size(-1)) {
    throw RequestError(fmt::format("{}: document {} ('{}') needs one embedding vector{}", endpoint, i, doc.id,
                                   doc.embedding.defined() ? "" : " and has none"));
  }
  return doc.embedding.reshape({-1});
}

// A filter (filter.hpp's language, already accepted by Filter::parse) as a SQL condition on the table's
// columns. Every value and tag key is a parameter appended to `params`; what SQL cannot express here (a
// field without a column) is refused with a RequestError naming its place. Each field reads as jsonb (NULL
// when missing), so one set of tests serves tags and the string fields alike, with the filter's meaning:
// numbers by value, strings by bytes (COLLATE "C"), orderings between other types false, a missing field
// satisfying only $ne and $nin.
class FilterSql {
 public:
  FilterSql(const PgOptions& options, std::vector<pg::PgParam>& params) : options_(options), params_(params) {}

  std::string condition(const json::value& spec, const std::string& where) {
    std::vector<std::string> parts;
    for (const auto& kv : spec.as_object()) {
      const std::string_view key = kv.key();
      const std::string at = fmt::format("{}.{}", where, key);
      if (key == "$and" || key == "$or") {
        std::vector<std::string> items;
        const json::array& list = kv.value().as_array();
        for (std::size_t i = 0; i < list.size(); ++i) items.push_back(condition(list[i], fmt::format("{}[{}]", at, i)));
        parts.push_back(joined(items, key == "$and" ? " AND " : " OR "));
      } else {
        parts.push_back(field(key, kv.value(), at));
      }
    }
    return parts.empty() ? "TRUE" : joined(parts, " AND ");
  }

 private:
  static std::string joined(const std::vector<std::string>& parts, std::string_view separator) {
    std::string out = "(";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(separator) : "") + parts[i];
    return out + ")";
  }

  std::string bind(std::string value) {
    params_.push_back(pg::PgParam{std::move(value)});
    return fmt::format("${}", params_.size());
  }

  std::string field(std::string_view key, const json::value& value, const std::string& where) {
    const std::string x = path(key, where);
    const json::object* ops = value.if_object();
    if (!ops || ops->empty() || !ops->begin()->key().starts_with("$")) return test(x, "$eq", value);
    std::vector<std::string> parts;
    for (const auto& kv : *ops) parts.push_back(test(x, kv.key(), kv.value()));
    return joined(parts, " AND ");
  }

  // The field as a jsonb expression: a string column as a JSON string (its NULL as ""), or the tags' value
  // at the path, walking objects only (`->` with a text key is NULL on anything else).
  std::string path(std::string_view key, const std::string& where) {
    if (key == "id") return fmt::format("to_jsonb({}::text)", q(options_.id));
    if (key == "text" && !options_.text.empty())
      return fmt::format("to_jsonb(coalesce({}::text, ''))", q(options_.text));
    if (key == "text" || key == "uri" || key == "url" || options_.tags.empty()) {
      throw RequestError(fmt::format(
          "{}: the pgvector backend cannot filter on '{}': table '{}' has no column for it{}", where, key,
          options_.table, key == "uri" || key == "url" ? "" : " (text_column / tags_column in the index's `with:`)"));
    }
    std::string_view rest = key.starts_with("tags__") ? key.substr(6) : key;
    const std::string_view separator = key.starts_with("tags__") ? "__" : ".";
    if (separator == "." && rest.starts_with("tags.")) rest = rest.substr(5);
    std::string expr = q(options_.tags);
    for (std::size_t start = 0;;) {
      const std::size_t end = rest.find(separator, start);
      expr = fmt::format("({} -> {}::text)", expr, bind(std::string(rest.substr(start, end - start))));
      if (end == std::string_view::npos) return expr;
      start = end + separator.size();
    }
  }

  std::string test(const std::string& x, std::string_view op, const json::value& operand) {
    if (op == "$eq") return fmt::format("({} = {}::jsonb)", x, bind(json::serialize(operand)));
    if (op == "$ne") return fmt::format("({} IS DISTINCT FROM {}::jsonb)", x, bind(json::serialize(operand)));
    if (op == "$in" || op == "$nin") {
      return fmt::format("({}EXISTS (SELECT 1 FROM jsonb_array_elements({}::jsonb) AS e(v) WHERE e.v = {}))",
                         op == "$nin" ? "NOT " : "", bind(json::serialize(operand)), x);
    }
    static const std::map<std::string_view, std::string_view> orderings{
        {"$gt", ">"}, {"$gte", ">="}, {"$lt", "<"}, {"$lte", "<="}};
    const std::string_view sign = orderings.at(op);
    if (operand.is_number()) {
      return fmt::format("(jsonb_typeof({0}) = 'number' AND {0} {1} {2}::jsonb)", x, sign,
                         bind(json::serialize(operand)));
    }
    return fmt::format("(jsonb_typeof({0}) = 'string' AND ({0} #>> '{{}}') COLLATE \"C\" {1} {2}::text)", x, sign,
                       bind(std::string(operand.as_string())));
  }

  const PgOptions& options_;
  std::vector<pg::PgParam>& params_;
};

class PgVectorBackend : public DocumentBackend {
 public:
  PgVectorBackend(PgOptions options, Metric metric) : options_(std::move(options)), metric_(metric) {
    connect();
    check_table();
    spdlog::info("backend 'pgvector': table {} ({}), metric {}, on PostgreSQL ({})", options_.table,
                 dim_ ? fmt::format("vector({})", dim_) : std::string("vector"), metric_name(metric_), conn_->target());
  }

  void search(DocumentArray& queries, std::size_t limit, const json::value* filter, bool with_embeddings) override {
    redo_if_lost([&] { search_once(queries, limit, filter, with_embeddings); });
  }

  void handle(std::string_view endpoint, DocumentArray& docs) override {
    redo_if_lost([&] { handle_once(endpoint, docs); });
  }

 private:
  void search_once(DocumentArray& queries, std::size_t limit, const json::value* filter, bool with_embeddings) {
    std::vector<pg::PgParam> params{pg::PgParam{}};  // $1: the query, set per query
    std::string where = fmt::format("{} IS NOT NULL", q(options_.embedding));
    if (filter) where += " AND " + FilterSql(options_, params).condition(*filter, "parameter 'filter'");
    const char* op = metric_ == Metric::cosine ? "<=>" : (metric_ == Metric::l2 ? "<->" : "<#>");
    const std::string sql = fmt::format(
        "SELECT {}::text, {}, {}, ({} {} $1::vector)::float8{} FROM {} WHERE {} ORDER BY {} {} $1::vector LIMIT {}",
        q(options_.id), options_.text.empty() ? "''::text" : fmt::format("coalesce({}::text, '')", q(options_.text)),
        options_.tags.empty() ? "NULL::text" : fmt::format("{}::text", q(options_.tags)), q(options_.embedding), op,
        with_embeddings ? fmt::format(", {}", q(options_.embedding)) : "", options_.quoted_table, where,
        q(options_.embedding), op, limit);
    std::vector<pg::PgResult> results;
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const at::Tensor query = embedding_of(queries[i], i, "/search");
      check_dimension(query, i, queries[i].id, "/search");
      params[0] = pg::PgParam{vector_send(query), true};
      results.push_back(conn_->query(sql, fmt::format("searching table '{}'", options_.table), params, true));
      for (int r = 0; r < results.back().rows(); ++r) {
        for (int c = 0; c < 3; ++c) bytes += results.back().value(r, c).size();
        bytes += with_embeddings ? results.back().value(r, 4).size() : 0;
      }
    }
    if (bytes > options_.max_answer_bytes) {
      throw RequestError(
          fmt::format("/search: the matches would take {:.1f} MiB, more than this index's max_answer_mb ({} MiB): "
                      "send fewer queries per request or a smaller limit, or raise max_answer_mb",
                      static_cast<double>(bytes) / (1 << 20), options_.max_answer_bytes >> 20));
    }
    for (std::size_t i = 0; i < queries.size(); ++i) queries[i].matches = matches_of(results[i], with_embeddings);
  }

  void handle_once(std::string_view endpoint, DocumentArray& docs) {
    if (endpoint == "/status") return status(docs);
    conn_->exec("BEGIN", "starting a transaction");
    try {
      if (endpoint == "/index" || endpoint == "/update") {
        write(docs, endpoint == "/update");
      } else if (endpoint == "/delete") {
        for (Document& doc : docs) {
          doc.tags["deleted"] =
              conn_
                  ->query(fmt::format("DELETE FROM {} WHERE {} = $1", options_.quoted_table, q(options_.id)),
                          "deleting rows", {pg::PgParam{doc.id}})
                  .affected() > 0;
        }
      } else {
        conn_->exec(fmt::format("DELETE FROM {}", options_.quoted_table), "clearing the table");
      }
      conn_->exec("COMMIT", "committing the request's changes");
    } catch (...) {
      pg::PgFailure ignored;
      if (conn_->ok()) conn_->try_exec("ROLLBACK", ignored);
      throw;
    }
  }

  void connect() {
    conn_ = pg::PgConnection::connect(options_.connect);
    conn_->exec(fmt::format("SET statement_timeout = {}", options_.statement_timeout_s * 1000),
                "setting statement_timeout");
  }

  // Runs `request`; when it failed because the connection was lost (the server restarted, or cut an idle
  // connection), connects again (bounded retries) and runs it once more. A search changes nothing; a write
  // is one transaction, so the first try committed whole or not at all, and upserts and deletes by id redo
  // to the same rows (a /delete redone after a lost COMMIT answers deleted: false for its rows).
  template <class Request>
  void redo_if_lost(Request request) {
    for (int attempt = 0;; ++attempt) {
      if (!conn_->ok()) {
        spdlog::warn("backend 'pgvector': the connection to PostgreSQL ({}) was lost; connecting again",
                     conn_->target());
        connect();
      }
      try {
        return request();
      } catch (const Error&) {
        if (conn_->ok() || attempt > 0) throw;
      }
    }
  }

  // The table as the flow expects it: pgvector installed, the table there, its columns of the right types.
  void check_table() {
    if (conn_->query_column("SELECT 1 FROM pg_extension WHERE extname = 'vector'", "looking for pgvector").empty()) {
      throw Error(fmt::format(
          "backend 'pgvector': the database ({}) lacks the pgvector extension: CREATE EXTENSION vector (pgvector must "
          "be installed on the server)",
          conn_->target()));
    }
    if (conn_->query_column("SELECT to_regclass($1)::text", "looking for the table", {options_.quoted_table})[0]
            .empty())
      throw Error(fmt::format("backend 'pgvector': table '{}' does not exist in the database ({})", options_.table,
                              conn_->target()));
    const auto columns = conn_->query(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass($1) "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        "reading the table's columns", {pg::PgParam{options_.quoted_table}});
    std::map<std::string, std::string, std::less<>> types;
    std::string names;
    for (int r = 0; r < columns.rows(); ++r) {
      types.emplace(columns.value(r, 0), columns.value(r, 1));
      names += fmt::format("{}{}", names.empty() ? "" : ", ", columns.value(r, 0));
    }
    const auto type_of = [&](const std::string& column, std::string_view parameter) {
      const auto it = types.find(column);
      if (it != types.end()) return it->second;
      throw Error(fmt::format("backend 'pgvector': table '{}' has no column '{}' (its columns: {}): set {}",
                              options_.table, column, names, parameter));
    };
    type_of(options_.id, "id_column");
    if (!options_.text.empty()) type_of(options_.text, "text_column");
    if (!options_.tags.empty() && type_of(options_.tags, "tags_column") != "jsonb") {
      throw Error(fmt::format("backend 'pgvector': column '{}' of table '{}' is {}, not jsonb", options_.tags,
                              options_.table, types[options_.tags]));
    }
    const std::string vector_type = type_of(options_.embedding, "embedding_column");
    unsigned dimension = 0;
    if (vector_type != "vector" && std::sscanf(vector_type.c_str(), "vector(%u)", &dimension) != 1) {
      throw Error(fmt::format("backend 'pgvector': column '{}' of table '{}' is {}, not a pgvector vector",
                              options_.embedding, options_.table, vector_type));
    }
    if (options_.dim && dimension && options_.dim != dimension) {
      throw Error(fmt::format("backend 'pgvector': dim is {}, but column '{}' of table '{}' is vector({})",
                              options_.dim, options_.embedding, options_.table, dimension));
    }
    dim_ = dimension ? dimension : options_.dim;
  }

  void check_dimension(const at::Tensor& row, std::size_t i, const std::string& id, std::string_view endpoint) const {
    if (dim_ == 0 || static_cast<std::size_t>(row.numel()) == dim_) return;
    throw RequestError(fmt::format(
        "{}: document {} ('{}') has an embedding of {} dimensions, but column '{}' of table '{}' is vector({})",
        endpoint, i, id, row.numel(), options_.embedding, options_.table, dim_));
  }

  DocumentArray matches_of(const pg::PgResult& result, bool with_embeddings) const {
    DocumentArray matches;
    const std::string score_name = metric_name(metric_);
    for (int r = 0; r < result.rows(); ++r) {
      Document& match = matches.push_back(Document(Document::WithId{std::string(result.value(r, 0))}));
      match.text = std::string(result.value(r, 1));
      if (!result.is_null(r, 2)) {
        json::value tags = json::parse(result.value(r, 2));
        if (!tags.is_object()) {
          throw Error(fmt::format("backend 'pgvector': row '{}' of table '{}' holds tags that are not a JSON object",
                                  match.id, options_.table));
        }
        match.tags = std::move(tags.as_object());
      }
      const double d = std::bit_cast<double>(big_endian(result.value(r, 3)));
      match.scores.emplace(score_name, static_cast<float>(metric_ == Metric::cosine          ? 1.0 - d
                                                          : metric_ == Metric::inner_product ? -d
                                                                                             : d));
      if (with_embeddings) match.embedding = vector_recv(result.value(r, 4));
    }
    return matches;
  }

  // /index (every document upserted by id) or /update (the fields a document carries replace the row's;
  // every id must be in the table, else nothing changes), in the caller's transaction.
  void write(const DocumentArray& docs, bool update) {
    std::vector<std::string> columns{options_.id, options_.embedding};
    if (!options_.text.empty()) columns.push_back(options_.text);
    if (!options_.tags.empty()) columns.push_back(options_.tags);
    std::string names, values, sets;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const std::string cast = c == 1 ? "::vector" : (columns[c] == options_.tags ? "::jsonb" : "::text");
      names += fmt::format("{}{}", c ? ", " : "", q(columns[c]));
      values += fmt::format("{}${}{}", c ? ", " : "", c + 1, cast);
      if (c > 0) {
        sets += fmt::format("{}{} = {}", c > 1 ? ", " : "", q(columns[c]),
                            update ? fmt::format("coalesce(${}{}, {})", c + 1, cast, q(columns[c]))
                                   : fmt::format("EXCLUDED.{}", q(columns[c])));
      }
    }
    const std::string sql =
        update ? fmt::format("UPDATE {} SET {} WHERE {} = $1", options_.quoted_table, sets, q(options_.id))
               : fmt::format("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO UPDATE SET {}", options_.quoted_table,
                             names, values, q(options_.id), sets);
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      const Document& doc = docs[i];
      std::vector<pg::PgParam> params{pg::PgParam{doc.id}, pg::PgParam{{}, true, true}};
      if (!update || doc.embedding.defined()) {
        const at::Tensor row = embedding_of(doc, i, update ? "/update" : "/index");
        check_dimension(row, i, doc.id, update ? "/update" : "/index");
        params[1] = pg::PgParam{vector_send(row), true};
      }
      if (!options_.text.empty()) params.push_back(pg::PgParam{doc.text, false, update && doc.text.empty()});
      if (!options_.tags.empty()) {
        params.push_back(pg::PgParam{json::serialize(doc.tags), false, update && doc.tags.empty()});
      }
      if (conn_->query(sql, update ? "updating rows" : "upserting rows", params).affected() == 0)
        missing.push_back(doc.id);
    }
    if (!missing.empty()) {
      throw Error(fmt::format(
          "/update: {} of {} documents are not in table '{}' (ids {}); nothing was changed", missing.size(),
          docs.size(), options_.table,
          fmt::join(missing.begin(),
                    missing.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(missing.size(), 10)), ", ")));
    }
  }

  void status(DocumentArray& docs) {
    const auto count =
        conn_->query_column(fmt::format("SELECT count(*) FROM {}", options_.quoted_table), "counting rows");
    const auto bytes = conn_->query_column("SELECT pg_total_relation_size(to_regclass($1))", "measuring the table",
                                           {options_.quoted_table});
    json::object tags{{"count", std::stoull(count.at(0))},
                      {"dimension", dim_},
                      {"metric", metric_name(metric_)},
                      {"backend", "pgvector"},
                      {"where", fmt::format("table {} ({})", options_.table, conn_->target())},
                      {"bytes", std::stoull(bytes.at(0))},
                      {"workspace", ""}};
    if (docs.empty()) docs.push_back(Document());
    for (Document& doc : docs) {
      for (const auto& kv : tags) doc.tags[kv.key()] = kv.value();
    }
  }

  PgOptions options_;
  Metric metric_;
  std::size_t dim_ = 0;  // the table's vector dimension (0: unknown, any goes)
  std::unique_ptr<pg::PgConnection> conn_;
};

#endif

std::optional<std::string> check_name(const json::value& v, [[maybe_unused]] bool table) {
  [[maybe_unused]] const std::string_view name = v.as_string();
#if FLOWLINE_HAVE_PG
  if (!name.empty()) return table ? pg::check_table_name(name) : pg::check_column_name(name);
#endif
  return std::nullopt;
}

}  // namespace

// The backend table's row (backends.cpp).
BackendRow pgvector_backend_row() {
  BackendRow row;
  row.name = "pgvector";
  row.help = "a PostgreSQL table with pgvector, searched by SQL (one a PgVectorWriter or another system fills)";
  const auto column = [](std::string name, const char* column, std::string help) -> ParamSpec {
    return ParamSpec::optional(std::move(name), ParamType::String, column, std::move(help))
        .check([](const json::value& v) { return check_name(v, false); });
  };
  row.parameters = {
      ParamSpec::optional("uri", ParamType::String, "",
                          "pgvector: PostgreSQL connection URI or key=value string, without a password (PGPASSWORD "
                          "or ~/.pgpass); empty: the PG* environment variables")
          .check([]([[maybe_unused]] const json::value& v) -> std::optional<std::string> {
#if FLOWLINE_HAVE_PG
            if (std::string problem = pg::check_uri(std::string(v.as_string())); !problem.empty()) return problem;
#endif
            return std::nullopt;
          }),
      ParamSpec::optional("table", ParamType::String, "", "pgvector: the table searched, NAME or SCHEMA.NAME")
          .check([](const json::value& v) { return check_name(v, true); }),
      column("id_column", "id", "pgvector: the column of the documents' ids (unique: upserts go by it)"),
      column("text_column", "text", "pgvector: the column of their texts (empty: none)"),
      column("tags_column", "tags", "pgvector: the jsonb column of their tags, which filters read (empty: none)"),
      column("embedding_column", "embedding", "pgvector: the vector column searched"),
      ParamSpec::optional("connect_attempts", ParamType::Int, 5, "pgvector: connection attempts before giving up")
          .min(1)
          .max(100),
      ParamSpec::optional("connect_timeout", ParamType::Int, 10, "pgvector: seconds per connection attempt").min(1),
      ParamSpec::optional("statement_timeout", ParamType::Int, 30, "pgvector: seconds a statement may run").min(1)};
  row.make = [](const BackendSettings& settings) -> BackendPlan {
#if FLOWLINE_HAVE_PG
    const Params& with = settings.with;
    PgOptions o;
    o.table = with.get<std::string>("table");
    if (o.table.empty()) throw Error("backend 'pgvector': parameter 'table' is required (the table searched)");
    if (!with.get<std::string>("workspace").empty()) {
      throw Error("backend 'pgvector' keeps the documents in its table: leave 'workspace' empty");
    }
    if (settings.shards > 1) {
      throw Error("backend 'pgvector' searches one table: 'shards' must be 1 (each shard would answer every row)");
    }
    o.quoted_table = pg::quote_name(o.table);
    o.connect.uri = with.get<std::string>("uri");
    o.connect.attempts = with.get<int>("connect_attempts");
    o.connect.connect_timeout_s = with.get<int>("connect_timeout");
    o.statement_timeout_s = with.get<int>("statement_timeout");
    o.id = with.get<std::string>("id_column");
    o.text = with.get<std::string>("text_column");
    o.tags = with.get<std::string>("tags_column");
    o.embedding = with.get<std::string>("embedding_column");
    if (o.id.empty() || o.embedding.empty()) {
      throw Error("backend 'pgvector': id_column and embedding_column must name columns");
    }
    if (const auto problem = pg::check_uri(o.connect.uri); !problem.empty()) {
      throw Error("backend 'pgvector': parameter 'uri': " + problem);
    }
    o.dim = with.get<std::size_t>("dim");
    o.max_answer_bytes = with.get<std::size_t>("max_answer_mb") << 20;
    BackendPlan plan;
    plan.documents = [o](Metric metric) { return std::make_unique<PgVectorBackend>(o, metric); };
    return plan;
#else
    (void)settings;
    throw Error(
        "backend 'pgvector': this flowline was built without libpq (Debian: apt-get install libpq-dev, then "
        "rebuild)");
#endif
  };
  return row;
}

}  // namespace flowline::vector_index
