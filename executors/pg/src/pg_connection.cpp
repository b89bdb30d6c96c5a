// flowline_pg's libpq layer (flowline/pg/pg_connection.hpp): connecting with bounded retries, errors that
// name the server and never a password, statements and binary COPY.
#include "flowline/pg/pg_connection.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <regex>
#include <thread>

namespace flowline::pg {
namespace {

struct ResultFree {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultFree>;

std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string describe_target(PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  const char* user = PQuser(conn);
  return fmt::format("host {} port {} database {} user {}", host && *host ? host : "(default)",
                     port && *port ? port : "(default)", db && *db ? db : "(default)",
                     user && *user ? user : "(default)");
}

// Failures a retry cannot mend: the server answered and refused us.
bool is_refusal(PGconn* conn, const std::string& message) {
  return PQconnectionNeedsPassword(conn) || message.find("authentication failed") != std::string::npos ||
         message.find("does not exist") != std::string::npos ||
         message.find("no pg_hba.conf entry") != std::string::npos;
}

}  // namespace

std::string check_uri(const std::string& uri) {
  if (uri.empty()) return {};
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(uri.c_str(), &error);
  if (!options) {
    std::string message = trimmed(error);
    PQfreemem(error);
    return fmt::format("not a PostgreSQL connection URI or key=value string ('{}'): {}", redact_uri(uri),
                       message.empty() ? "out of memory" : message);
  }
  bool has_password = false;
  for (PQconninfoOption* o = options; o->keyword; ++o) {
    if (std::string_view(o->keyword) == "password" && o->val && *o->val) has_password = true;
  }
  PQconninfoFree(options);
  if (has_password)
    return fmt::format("'{}' holds a password: give it through PGPASSWORD or ~/.pgpass, never in a flow",
                       redact_uri(uri));
  return {};
}

std::string redact_uri(std::string_view uri) {
  std::string s(uri);
  // postgresql://user:secret@host... and postgres://...: the password sits between the user's ':' and '@'.
  static const std::regex userinfo(R"(^(postgres(?:ql)?://[^:@/?]*:)[^@/?]*@)", std::regex::icase);
  s = std::regex_replace(s, userinfo, "$1***@");
  // ?password=secret&... in a URI, password=secret or password='se cret' in key=value form.
  static const std::regex query(R"(([?&]password=)[^&]*)", std::regex::icase);
  s = std::regex_replace(s, query, "$1***");
  static const std::regex keyvalue(R"((^|\s)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+))", std::regex::icase);
  return std::regex_replace(s, keyvalue, "$1$2***");
}

std::optional<std::string> check_table_name(std::string_view name) {
  static const std::regex pattern(R"([A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?)");
  if (std::regex_match(name.begin(), name.end(), pattern)) return std::nullopt;
  return fmt::format("expected NAME or SCHEMA.NAME (letters, digits and _, not starting with a digit), got '{}'", name);
}

std::optional<std::string> check_column_name(std::string_view name) {
  static const std::regex pattern(R"([A-Za-z_][A-Za-z0-9_]{0,62})");
  if (std::regex_match(name.begin(), name.end(), pattern)) return std::nullopt;
  return fmt::format("expected a column NAME (letters, digits and _, not starting with a digit), got '{}'", name);
}

std::string quote_name(const std::string& name) {
  const auto dot = name.find('.');
  if (dot == std::string::npos) return "\"" + name + "\"";
  return "\"" + name.substr(0, dot) + "\".\"" + name.substr(dot + 1) + "\"";
}

PgResult::~PgResult() { PQclear(result_); }

int PgResult::rows() const { return PQntuples(result_); }

bool PgResult::is_null(int row, int column) const { return PQgetisnull(result_, row, column) != 0; }

std::string_view PgResult::value(int row, int column) const {
  return {PQgetvalue(result_, row, column), static_cast<std::size_t>(PQgetlength(result_, row, column))};
}

std::uint64_t PgResult::affected() const {
  const char* n = PQcmdTuples(result_);
  return n && *n ? std::stoull(n) : 0;
}

std::unique_ptr<PgConnection> PgConnection::connect(const ConnectOptions& options) {
  const std::string timeout = std::to_string(options.connect_timeout_s);
  // Keywords after dbname override what the expanded URI says: the COPY stream's text is UTF-8.
  const char* keys[] = {"dbname", "client_encoding", "connect_timeout", "application_name", nullptr};
  const char* values[] = {options.uri.c_str(), "UTF8", timeout.c_str(), "flowline", nullptr};
  auto backoff = options.first_backoff;
  for (int attempt = 1;; ++attempt) {
    PGconn* conn = PQconnectdbParams(keys, values, 1);
    if (!conn) throw Error("cannot connect to PostgreSQL: libpq is out of memory");
    if (PQstatus(conn) == CONNECTION_OK) return std::unique_ptr<PgConnection>(new PgConnection(conn));
    const std::string message = trimmed(PQerrorMessage(conn));
    const std::string target = describe_target(conn);
    const bool refused = is_refusal(conn, message);
    const bool needs_password = PQconnectionNeedsPassword(conn);
    PQfinish(conn);
    if (needs_password)
      throw Error(
          fmt::format("authentication failed at PostgreSQL server ({}): the server asks for a password and "
                      "none was given (set PGPASSWORD or a ~/.pgpass entry): {}",
                      target, message));
    if (refused) {
      const bool auth = message.find("authentication") != std::string::npos;
      throw Error(fmt::format("{} PostgreSQL server ({}): {}", auth ? "authentication failed at" : "refused by", target,
                              message));
    }
    if (attempt >= options.attempts)
      throw Error(fmt::format("cannot reach PostgreSQL server ({}) after {} attempt{}: {}", target, attempt,
                              attempt == 1 ? "" : "s", message));
    spdlog::warn("PostgreSQL server ({}) not reachable (attempt {} of {}), retrying in {} ms: {}", target, attempt,
                 options.attempts, backoff.count(), message);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

PgConnection::PgConnection(PGconn* conn) : conn_(conn), target_(describe_target(conn)) {
  // Notices (e.g. "relation already exists, skipping") go to the debug log rather than stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char* message) { spdlog::debug("PostgreSQL: {}", trimmed(message)); }, nullptr);
}

PgConnection::~PgConnection() { PQfinish(conn_); }

bool PgConnection::ok() const { return PQstatus(conn_) == CONNECTION_OK; }

void PgConnection::fail(std::string_view what, PGresult* result) {
  std::string message = trimmed(result ? PQresultErrorMessage(result) : PQerrorMessage(conn_));
  if (message.empty()) message = trimmed(PQerrorMessage(conn_));
  if (message.rfind("ERROR:  ", 0) == 0) message.erase(0, 8);
  throw Error(fmt::format("{} ({}): {}", what, target_, message));
}

void PgConnection::exec(const std::string& sql, std::string_view what) {
  Result r(PQexec(conn_, sql.c_str()));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) fail(what, r.get());
}

std::vector<std::string> PgConnection::query_column(const std::string& sql, std::string_view what,
                                                    const std::vector<std::string>& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  Result r(
      PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0));
  if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) fail(what, r.get());
  std::vector<std::string> column;
  for (int i = 0; i < PQntuples(r.get()); ++i) column.emplace_back(PQgetvalue(r.get(), i, 0));
  return column;
}

PgResult PgConnection::query(const std::string& sql, std::string_view what, const std::vector<PgParam>& params,
                             bool binary_result) {
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  for (const PgParam& p : params) {
    values.push_back(p.null ? nullptr : p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  Result r(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), lengths.data(),
                        formats.data(), binary_result ? 1 : 0));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) fail(what, r.get());
  return PgResult(r.release());
}

bool PgConnection::try_exec(const std::string& sql, PgFailure& failure) {
  Result r(PQexec(conn_, sql.c_str()));
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return true;
  failure.message = trimmed(r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_));
  if (failure.message.rfind("ERROR:  ", 0) == 0) failure.message.erase(0, 8);
  const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  failure.sqlstate = state ? state : "";
  return false;
}

void PgConnection::copy_begin(const std::string& copy_sql, std::string_view what) {
  Result r(PQexec(conn_, copy_sql.c_str()));
  if (!r || PQresultStatus(r.get()) != PGRES_COPY_IN) fail(what, r.get());
}

void PgConnection::copy_put(std::string_view data, std::string_view what) {
  if (PQputCopyData(conn_, data.data(), static_cast<int>(data.size())) != 1) fail(what, nullptr);
}

void PgConnection::copy_end(std::string_view what) {
  if (PQputCopyEnd(conn_, nullptr) != 1) fail(what, nullptr);
  Result failed;
  while (PGresult* r = PQgetResult(conn_)) {
    Result current(r);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && !failed) failed = std::move(current);
  }
  if (failed) fail(what, failed.get());
}

}  // namespace flowline::pg
