// A throwaway PostgreSQL server with pgvector for a test case (tests/pgvector/pg_server.py, from PyPI's
// pgserver wheel): started on a Unix socket in a temp folder when constructed, stopped and removed when
// destroyed. Where pgserver is missing, available() is false and skip_reason() says why (REQUIRE_SERVER
// skips the case). Used by one test thread.
#pragma once

#include "test_support.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace flowline::testing {

inline const std::string kPgServerScript = std::string(FLOWLINE_SOURCE_DIR) + "/tests/pgvector/pg_server.py";

// A server of its own for one test case, stopped (and its folder removed) on destruction.
class PgServer {
 public:
  explicit PgServer(const std::optional<std::string>& password = std::nullopt) {
    const auto r =
        testing::run_process(fmt::format("timeout 90 '{}' '{}' start{}", FLOWLINE_TEST_PYTHON, kPgServerScript,
                                         password ? " --password '" + *password + "'" : ""));
    if (r.exit_code == 77) {
      skip_reason_ = r.err;
      return;
    }
    INFO(r.out + r.err);
    REQUIRE(r.exit_code == 0);
    const auto o = boost::json::parse(r.out).as_object();
    folder_ = std::string(o.at("socket_dir").as_string());
    bin_ = std::string(o.at("bin").as_string());
    password_ = password.value_or("");
  }
  ~PgServer() {
    if (!folder_.empty())
      testing::run_process(
          fmt::format("timeout 60 '{}' '{}' stop '{}'", FLOWLINE_TEST_PYTHON, kPgServerScript, folder_));
  }
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  bool available() const { return skip_reason_.empty(); }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& folder() const { return folder_; }
  std::string uri() const { return "postgresql://postgres@/postgres?host=" + folder_; }

  // Runs `sql` with psql; returns its rows, fields separated by '|'.
  std::vector<std::string> sql(const std::string& sql) const {
    const auto r =
        testing::run_process(fmt::format("PGPASSWORD='{}' '{}/psql' -X -q -At -v ON_ERROR_STOP=1 -h '{}' "
                                         "-U postgres -d postgres -c \"{}\"",
                                         password_, bin_, folder_, sql));
    INFO(sql << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> rows;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) rows.push_back(line);
    return rows;
  }

 private:
  std::string folder_, bin_, password_, skip_reason_;
};

#define REQUIRE_SERVER(server) \
  if (!(server).available()) FLOWLINE_SKIP((server).skip_reason())

}  // namespace flowline::testing
