// flowline_pg (executors/pg): one libpq connection with what flowline's PostgreSQL executors need — the
// PgVectorWriter and the VectorIndex's pgvector backend link it: connecting with bounded retries, errors that
// say what went wrong without ever showing a password, plain and parameterised statements, binary COPY, and
// the checks of table names that a flow's `with:` gives.
//
// Threads: a PgConnection belongs to one replica and is used by that replica's thread only (libpq
// connections are not shared). It owns its PGconn and closes it on destruction; a PgResult owns its PGresult.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct pg_conn;
struct pg_result;

namespace flowline::pg {

// What PgConnection::connect() is told. `uri` is a PostgreSQL connection URI (postgresql://...) or a
// key=value string; empty: libpq's PG* environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGPASSWORD, PGSSLMODE, ...) and ~/.pgpass alone.
struct ConnectOptions {
  std::string uri;
  int attempts = 5;                              // connection attempts before giving up (≥ 1)
  std::chrono::milliseconds first_backoff{200};  // wait after the first failed attempt, doubled each time
  std::chrono::milliseconds max_backoff{5000};
  int connect_timeout_s = 10;  // libpq's connect_timeout per attempt
};

// Checks `uri` without connecting: that libpq can parse it and that it holds no password (passwords come
// from PGPASSWORD or ~/.pgpass, never from a flow file). Returns what is wrong, or an empty string.
std::string check_uri(const std::string& uri);

// `uri` with any password replaced by "***", for messages.
std::string redact_uri(std::string_view uri);

// Checks a table name as a flow gives it: NAME or SCHEMA.NAME, letters, digits and _, not starting with a
// digit (so it can be quoted without escaping). Returns what is wrong, or nothing.
std::optional<std::string> check_table_name(std::string_view name);
// Checks a column name: one NAME as above.
std::optional<std::string> check_column_name(std::string_view name);
// A checked name quoted for SQL: "a.b" -> "\"a\".\"b\"".
std::string quote_name(const std::string& name);

// One parameter of PgConnection::query(): text (libpq's text form of its type) or binary (the type's send
// form, e.g. pgvector's), or SQL NULL.
struct PgParam {
  std::string value;
  bool binary = false;
  bool null = false;
};

// A statement's rows (owned; freed on destruction). Values are text or binary as the query asked.
class PgResult {
 public:
  explicit PgResult(pg_result* result) noexcept : result_(result) {}
  ~PgResult();
  PgResult(PgResult&& other) noexcept : result_(other.result_) { other.result_ = nullptr; }
  PgResult& operator=(PgResult&&) = delete;
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;

  int rows() const;
  bool is_null(int row, int column) const;
  std::string_view value(int row, int column) const;  // empty for NULL; a view into this result (lives as long)
  // The rows an INSERT, UPDATE or DELETE touched.
  std::uint64_t affected() const;

 private:
  pg_result* result_;
};

// A failed statement's result, for messages: the server's message and its SQLSTATE.
struct PgFailure {
  std::string message;
  std::string sqlstate;
};

class PgConnection {
 public:
  // Connects, retrying an unreachable server with doubling backoff (`options.attempts` tries in all). An
  // authentication failure is not retried. Throws flowline::Error naming the server (host, port, database,
  // user; never the password) and what went wrong: "cannot reach PostgreSQL server ..." or "authentication
  // failed ...".
  static std::unique_ptr<PgConnection> connect(const ConnectOptions& options);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // "host H port P database D user U", from the live connection.
  const std::string& target() const noexcept { return target_; }
  // Whether the connection is still usable (false once the server went away).
  bool ok() const;
  // Runs `sql` (one or more statements, no parameters). Throws flowline::Error "what: server message".
  void exec(const std::string& sql, std::string_view what);
  // Runs `sql` and returns the first column of its rows as text (NULL as empty).
  std::vector<std::string> query_column(const std::string& sql, std::string_view what,
                                        const std::vector<std::string>& params = {});
  // Runs `sql` with `params` ($1, $2, ...; their types from the SQL's casts); its rows' values in binary
  // form when `binary_result`, else text. Throws flowline::Error "what (server): message".
  PgResult query(const std::string& sql, std::string_view what, const std::vector<PgParam>& params,
                 bool binary_result = false);
  // Like exec(), but returns the failure instead of throwing.
  bool try_exec(const std::string& sql, PgFailure& failure);
  // COPY ... FROM STDIN (FORMAT BINARY) in parts, so the server parses and stores rows while the caller
  // encodes the next ones: copy_begin(), copy_put() of the stream in order (header, tuples, trailer), then
  // copy_end(), which returns once the server has taken every row (or throws its error).
  void copy_begin(const std::string& copy_sql, std::string_view what);
  void copy_put(std::string_view data, std::string_view what);
  void copy_end(std::string_view what);

 private:
  explicit PgConnection(pg_conn* conn);
  [[noreturn]] void fail(std::string_view what, pg_result* result);

  pg_conn* conn_;
  std::string target_;
};

}  // namespace flowline::pg
