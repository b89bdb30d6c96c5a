// A request past its deadline stops its work (issue 50 §2), with `flowline serve` as a real process: a
// search whose filter would keep the index busy for minutes is answered 504 at the deadline, its filter's
// evaluation stops (the gateway's cancellation reaches the executor), so a trivial search right after is
// answered at once, and SIGTERM's drain ends within its bound. The times are printed.
#include "serve_fixtures.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

using namespace flowline;
using namespace serve_test;
using gateway_test::Client;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A /search body of one query; with `conditions` > 0, a filter of that many ordered tests on one tag, ORed
// (no equality: they are not read as one $in, so each runs on every document) and none true.
std::string search_body(int conditions) {
  json::array embedding;
  for (int d = 0; d < kDim; ++d) embedding.emplace_back(component(0, 1, d));
  json::object parameters{{"limit", 3}};
  if (conditions > 0) {
    json::array any;
    for (int c = 0; c < conditions; ++c) {
      any.push_back(json::object{{"i", json::object{{"$gt", 1'000'000 + c}}}});
    }
    parameters["filter"] = json::object{{"$or", std::move(any)}};
  }
  return json::serialize(json::object{{"data", json::array{json::object{{"embedding", std::move(embedding)}}}},
                                      {"parameters", std::move(parameters)}});
}

// An index flow of one replica (a search behind the cancelled one waits for it) under `timeout_ms`, its filter
// bounds raised so that a filter of 100,000 conditions over 20,000 documents (2e9 tests: minutes) is accepted.
fs::path write_index_flow(const fs::path& dir, int timeout_ms) {
  const fs::path flow = dir / "index.yml";
  testing::write_text(flow, fmt::format("with:\n"
                                        "  gateway: {{request_timeout_ms: {}}}\n"
                                        "executors:\n"
                                        "  - name: index\n"
                                        "    uses: VectorIndex\n"
                                        "    with: {{dim: {}, max_filter_size: 1000000, "
                                        "max_filter_conditions: 1000000}}\n",
                                        timeout_ms, kDim));
  return flow;
}

}  // namespace

TEST_CASE("a search past its deadline is answered 504 and stops, so the next search and the drain are prompt",
          "[index][cancellation]") {
  const fs::path dir = testing::scratch_dir("index cancellation");
  const fs::path flow = write_index_flow(dir, 1000);  // a 1 s deadline
  IndexServer server(flow, dir, "serve");
  Client client(server.port());
  for (int b = 0; b < 40; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);

  const std::string heavy = search_body(100'000);
  auto start = Clock::now();
  const auto timed_out = client.post("/search", heavy);
  const double heavy_seconds = seconds_since(start);
  INFO(server.process().log());
  CHECK(timed_out.status == 504);

  // A trivial search on a connection of its own: served once the cancelled search freed the index.
  Client other(server.port());
  start = Clock::now();
  const auto trivial = other.post("/search", search_body(0));
  const double trivial_seconds = seconds_since(start);
  CHECK(trivial.status == 200);
  CHECK(trivial_seconds < 0.9);  // within the deadline, so not a 504 of its own

  // The same search again, then SIGTERM while it runs: the drain cancels nothing itself, but the request's
  // deadline does, and the server ends well within its bound.
  Client third(server.port());
  std::thread late([&] {
    try {
      (void)third.post("/search", heavy);
    } catch (const std::exception&) {  // the server may close the connection as it ends: either is fine here
    }
  });
  std::this_thread::sleep_for(300ms);
  start = Clock::now();
  server.process().signal(SIGTERM);
  const std::optional<int> status = server.process().wait(15s);
  const double drain_seconds = seconds_since(start);
  late.join();
  std::printf(
      "filter of 100,000 conditions over 20,000 documents, 1 s deadline: answered %d in %.2f s; a trivial "
      "search after it: %d in %.3f s; SIGTERM during another: ended in %.2f s\n",
      timed_out.status, heavy_seconds, trivial.status, trivial_seconds, drain_seconds);
  CHECK(heavy_seconds < 3.0);
  REQUIRE(status.has_value());
  CHECK(drain_seconds < 5.0);
}

TEST_CASE("a search whose client closes its connection stops, so the next search is prompt",
          "[index][cancellation][disconnect]") {
  const fs::path dir = testing::scratch_dir("index disconnect");
  // A deadline far beyond the test's bounds: only the client's going away can free the index in time.
  const fs::path flow = write_index_flow(dir, 120000);
  IndexServer server(flow, dir, "serve");
  Client client(server.port());
  for (int b = 0; b < 40; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);

  // The heavy search on a socket of its own, closed 0.3 s after the request went out, its answer unread.
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), server.port()});
    const std::string body = search_body(100'000);
    const std::string request = fmt::format(
        "POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.size(), body);
    boost::asio::write(socket, boost::asio::buffer(request));
    std::this_thread::sleep_for(300ms);
    socket.close();
  }
  const auto closed = Clock::now();
  Client other(server.port());
  const auto trivial = other.post("/search", search_body(0));
  const double trivial_seconds = seconds_since(closed);
  INFO(server.process().log());
  CHECK(trivial.status == 200);
  std::printf(
      "filter of 100,000 conditions over 20,000 documents, its client gone after 0.3 s: a trivial search "
      "answered %d %.3f s after the close\n",
      trivial.status, trivial_seconds);
  CHECK(trivial_seconds < 2.0);  // the heavy search alone would hold the index for minutes

  // The metrics count the search as the client's cancellation.
  const std::string metrics = other.get("/metrics").body;
  INFO(metrics);
  bool counted = false;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    counted |= line.starts_with("flowline_requests_total{") && line.find(R"(front="http")") != std::string::npos &&
               line.find(R"(outcome="cancelled")") != std::string::npos && !line.ends_with(" 0");
  }
  CHECK(counted);
}
