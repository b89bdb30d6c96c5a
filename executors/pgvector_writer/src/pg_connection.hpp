// pg_connection.hpp (private to the PgVectorWriter) — one libpq connection with what the writer needs:
// connecting with bounded retries, errors that say what went wrong without ever showing a password, plain
// statements, and binary COPY.
//
// Threads: a PgConnection belongs to one replica and is used by that replica's thread only (libpq
// connections are not shared). It owns its PGconn and closes it on destruction.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pg_conn;
struct pg_result;

namespace flowline::pgvector_writer {

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

}  // namespace flowline::pgvector_writer
