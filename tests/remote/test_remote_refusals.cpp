// A remote executor's refusal of a request reaches the client as the request's own (issue 51): a
// `flowline serve --executor` process runs a VectorIndex, a `flowline serve` gateway in front of it
// reaches it through `hosts:`, and a client sends a bad request parameter over HTTP and gRPC. The wire's
// version rule is checked on the same process: a version 1 client still reads the answer (as a failure).
// Cancellation reaches a remote executor (issue 50 §2, wire version 3): a search past its gateway's deadline
// frees the remote index, as does a gRPC client that cancels its call, and on the wire a request's deadline, a Cancel
// frame and a closed connection each stop a request the server is running, while a version 2 client is still served.
#include "child_process.hpp"
#include "http_call.hpp"
#include "jina_grpc_call.hpp"
#include "test_support.hpp"

#include "remote/wire.hpp"

#include <ATen/ATen.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

using namespace flowline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// `flowline serve FLOW ...` as a child process, its port (and gRPC port) read from its ready file.
class Serve {
 public:
  Serve(const fs::path& dir, const std::string& name, const std::string& flow_yaml,
        const std::vector<std::string>& extra) {
    const fs::path flow = dir / (name + ".yml");
    testing::write_text(flow, flow_yaml);
    ready_ = dir / (name + ".port");
    std::vector<std::string> args{FLOWLINE_LAUNCHER, "serve",        flow.string(), "--port", "0",
                                  "--ready-file",    ready_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    process_ = std::make_unique<testing::ChildProcess>(args, dir / (name + ".log"));
    port_ = static_cast<std::uint16_t>(testing::wait_for_port(*process_, ready_, 120s));
    INFO(name << "'s output:\n" << process_->log());
    REQUIRE(port_ != 0);
  }
  std::uint16_t port() const { return port_; }
  // The second line of the ready file: the gRPC port (--grpc-port 0).
  std::uint16_t grpc_port() const {
    const std::string text = testing::read_text(ready_);
    return static_cast<std::uint16_t>(std::stoi(text.substr(text.find('\n') + 1)));
  }
  std::string log() const { return process_->log(); }

 private:
  fs::path ready_;
  std::unique_ptr<testing::ChildProcess> process_;
  std::uint16_t port_ = 0;
};

using Reply = testing::HttpReply;
using testing::http_call;

// Jina's /post: one query with a 4-dimension embedding, to /search with `parameters`.
std::string search_body(const std::string& parameters) {
  return fmt::format(R"({{"data": [{{"id": "q", "embedding": [1, 0, 0.5, 0]}}], "exec_endpoint": "/search", )"
                     R"("parameters": {}}})",
                     parameters);
}

// The value of the first Prometheus sample of `name` whose line holds every one of `labels`; -1 if none.
double metric(const std::string& metrics, const std::string& name, const std::vector<std::string>& labels) {
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// A wire client speaking protocol versions min..max to an executor server: the handshake, then one request.
struct WireClient {
  WireClient(std::uint16_t port, std::uint16_t min_version, std::uint16_t max_version) : socket(io) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    asio::write(socket, asio::buffer(wire::encode_hello(wire::Hello{min_version, max_version, ""})));
    welcome = wire::decode_welcome(read_frame());
  }
  std::string read_frame() {
    unsigned char prefix[wire::kLengthBytes];
    asio::read(socket, asio::buffer(prefix));
    std::string body(wire::read_length(prefix, 1u << 30), '\0');
    asio::read(socket, asio::buffer(body));
    return body;
  }
  // Sends a search (with `deadline_ms`, written on a version 3 connection only) without waiting.
  void send_search(std::uint64_t id, const std::string& parameters, std::uint32_t deadline_ms = 0) {
    DocumentArray docs;
    Document query("q");
    query.embedding = at::tensor({1.0f, 0.0f, 0.5f, 0.0f});
    docs.push_back(std::move(query));
    asio::write(socket,
                asio::buffer(wire::encode_request(id, "/search", parameters, docs, deadline_ms, welcome.version)));
  }
  wire::ResponseFrame search(std::uint64_t id, const std::string& parameters, std::uint32_t deadline_ms = 0) {
    send_search(id, parameters, deadline_ms);
    return answer();
  }
  wire::ResponseFrame answer() { return wire::decode_response(read_frame(), welcome.version); }
  asio::io_context io;
  tcp::socket socket;
  wire::Welcome welcome;
};

}  // namespace

TEST_CASE("a remote executor's RequestError reaches the client as the request's own: HTTP 422 and gRPC, by name",
          "[remote][gateway][params]") {
  const auto dir = testing::scratch_dir("remote refusals");
  Serve executor(dir, "executor", "executors:\n  - {name: idx, uses: VectorIndex, with: {dim: 4}}\n",
                 {"--executor", "idx"});
  const bool grpc = testing::jina_grpc_available();
  std::vector<std::string> front_flags;
  if (grpc) front_flags = {"--grpc-port", "0"};
  Serve front(dir, "front",
              fmt::format("executors:\n  - name: idx\n    hosts: [127.0.0.1:{}]\n    remote: {{timeout_ms: 30000}}\n",
                          executor.port()),
              front_flags);
  INFO("the executor's output:\n" << executor.log() << "\nthe gateway's output:\n" << front.log());

  // HTTP: a limit of 5.5 is the request's fault (422 naming the parameter), not the server's (500).
  const Reply bad = http_call(front.port(), http::verb::post, "/post", search_body(R"({"limit": 5.5})"));
  CHECK(bad.status == 422);
  CHECK_THAT(bad.body, testing::contains("parameter 'limit': expected an integer"));
  const Reply five = http_call(front.port(), http::verb::post, "/post", search_body(R"({"limit": 5.0})"));
  CHECK(five.status == 200);
  const Reply next = http_call(front.port(), http::verb::post, "/post", search_body(R"({"limit": 2})"));
  CHECK(next.status == 200);
  CHECK_THAT(next.body, testing::contains(R"("id":"q")"));

  if (grpc) {
    // gRPC answers an executor's failure in Jina's shape (header status ERROR, the stream goes on); the
    // gateway counts this one as the request's own, which only the wire's status can have told it.
    const auto refused =
        testing::jina_grpc_call(front.grpc_port(), "/search", R"({"limit": 5.5})", "q", {1.0f, 0.0f, 0.5f, 0.0f}, 30s);
    INFO("gRPC: code " << refused.grpc_code << " " << refused.grpc_message << "; " << refused.description);
    CHECK(refused.grpc_code == 0);
    CHECK(refused.header_error);
    CHECK_THAT(refused.description, testing::contains("parameter 'limit': expected an integer"));
    const auto answered =
        testing::jina_grpc_call(front.grpc_port(), "/search", R"({"limit": 2})", "q", {1.0f, 0.0f, 0.5f, 0.0f}, 30s);
    CHECK(answered.grpc_code == 0);
    CHECK_FALSE(answered.header_error);
    CHECK(answered.documents == 1);
  }
  const std::string metrics = http_call(front.port(), http::verb::get, "/metrics").body;
  INFO(metrics);
  CHECK(metric(metrics, "flowline_requests_total", {R"(front="http")", R"(outcome="bad_request")"}) == 1);
  CHECK(metric(metrics, "flowline_requests_total", {R"(outcome="failed")"}) <= 0);
  if (grpc) CHECK(metric(metrics, "flowline_requests_total", {R"(front="grpc")", R"(outcome="bad_request")"}) == 1);

  // The wire itself: a version 2 client reads the refusal's kind; a version 1 client (an older flow) is
  // answered version 1 and reads the same refusal as a failure, with its message.
  WireClient current(executor.port(), wire::kMinVersion, wire::kVersion);
  CHECK(current.welcome.version == wire::kVersion);
  const wire::ResponseFrame kind = current.search(1, R"({"limit": 5.5})");
  CHECK(kind.status == wire::ResponseStatus::RequestError);
  CHECK_THAT(kind.error, testing::contains("parameter 'limit'"));
  CHECK(current.search(2, R"({"limit": 2})").status == wire::ResponseStatus::Ok);
  WireClient old(executor.port(), 1, 1);
  CHECK(old.welcome.version == 1);
  const wire::ResponseFrame text_only = old.search(1, R"({"limit": 5.5})");
  CHECK(text_only.status == wire::ResponseStatus::Failed);
  CHECK_THAT(text_only.error, testing::contains("parameter 'limit'"));
}

TEST_CASE("a Response's status survives the wire by protocol version: RequestError is version 2's", "[remote][wire]") {
  const DocumentArray none;
  const auto body = [](const std::string& frame) { return frame.substr(wire::kLengthBytes); };
  const std::string v2 = body(wire::encode_response(7, wire::ResponseStatus::RequestError, "bad limit", "idx", none));
  CHECK(wire::decode_response(v2).status == wire::ResponseStatus::RequestError);
  CHECK_THROWS_WITH(wire::decode_response(v2, 1), testing::contains("unknown status 2 (protocol version 1)"));
  const std::string v1 =
      body(wire::encode_response(7, wire::ResponseStatus::RequestError, "bad limit", "idx", none, 1));
  const wire::ResponseFrame old = wire::decode_response(v1, 1);
  CHECK(old.status == wire::ResponseStatus::Failed);
  CHECK(old.error == "bad limit");
  CHECK(old.error_executor == "idx");
  CHECK(wire::decode_response(v1).status == wire::ResponseStatus::Failed);  // a newer peer reads version 1's too
  std::string unknown = v2;
  unknown[1 + 8] = 3;  // after the type byte and the id
  CHECK_THROWS_WITH(wire::decode_response(unknown, 2), testing::contains("unknown status 3 (protocol version 2)"));
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A search's parameters whose filter keeps a 20,000-document index busy for minutes: `conditions` ordered
// tests on tag "i", ORed, none true (not read as one $in, so each runs on every document).
std::string heavy_filter(int conditions) {
  std::string any;
  for (int c = 0; c < conditions; ++c) any += fmt::format(R"({}{{"i": {{"$gt": {}}}}})", c ? "," : "", 1'000'000 + c);
  return fmt::format(R"({{"limit": 3, "filter": {{"$or": [{}]}}}})", any);
}

// The executor server of the cancellation cases: one VectorIndex replica with bounds raised for the heavy
// filter, filled with 20,000 documents through a wire client.
std::unique_ptr<Serve> heavy_index(const fs::path& dir) {
  auto executor =
      std::make_unique<Serve>(dir, "executor",
                              "executors:\n  - {name: idx, uses: VectorIndex, with: {dim: 4, max_filter_size: 1000000, "
                              "max_filter_conditions: 1000000}}\n",
                              std::vector<std::string>{"--executor", "idx"});
  WireClient filler(executor->port(), wire::kMinVersion, wire::kVersion);
  DocumentArray docs;
  for (int i = 0; i < 20'000; ++i) {
    Document doc(fmt::format("d{}", i));
    doc.embedding = at::tensor({std::sin(0.3f * i), std::cos(0.7f * i), 0.5f, std::sin(1.1f * i)});
    doc.tags["i"] = static_cast<std::int64_t>(i);
    docs.push_back(std::move(doc));
  }
  asio::write(filler.socket, asio::buffer(wire::encode_request(1, "/index", "", docs, 0, filler.welcome.version)));
  INFO(executor->log());
  REQUIRE(filler.answer().ok());
  return executor;
}

}  // namespace

TEST_CASE("a search past its gateway's deadline frees the remote index it runs on", "[remote][cancellation]") {
  const auto dir = testing::scratch_dir("remote cancellation");
  const auto executor = heavy_index(dir);
  // Two calls in flight to the host, so that the trivial search reaches the server while the heavy one
  // may still run there; the gateway's deadline is 1 s, the host's own timeout far beyond the test.
  Serve front(dir, "front",
              fmt::format("with:\n  gateway: {{request_timeout_ms: 1000}}\n"
                          "executors:\n  - name: idx\n    hosts: [127.0.0.1:{}]\n"
                          "    remote: {{timeout_ms: 120000, in_flight: 2}}\n",
                          executor->port()),
              {});
  INFO("the executor's output:\n" << executor->log() << "\nthe gateway's output:\n" << front.log());
  auto start = Clock::now();
  const Reply heavy = http_call(front.port(), http::verb::post, "/post", search_body(heavy_filter(100'000)), 60s);
  const double heavy_seconds = seconds_since(start);
  CHECK(heavy.status == 504);
  start = Clock::now();
  const Reply trivial = http_call(front.port(), http::verb::post, "/post", search_body(R"({"limit": 2})"), 60s);
  const double trivial_seconds = seconds_since(start);
  std::printf(
      "through a gateway, a remote index's search past its 1 s deadline: answered %d in %.2f s; a trivial "
      "search after it: %d in %.3f s\n",
      heavy.status, heavy_seconds, trivial.status, trivial_seconds);
  CHECK(heavy_seconds < 3.0);
  CHECK(trivial.status == 200);  // a 504 of its own when the remote still runs the heavy search
  CHECK(trivial_seconds < 0.9);
}

TEST_CASE("on the wire a deadline, a Cancel frame and a closed connection each stop a request, and version 2 is served",
          "[remote][cancellation][wire]") {
  const auto dir = testing::scratch_dir("remote cancellation wire");
  const auto executor = heavy_index(dir);
  INFO(executor->log());
  const std::string heavy = heavy_filter(100'000);
  const auto prompt = [&](WireClient& client, std::uint64_t id) {
    const auto start = Clock::now();
    CHECK(client.search(id, R"({"limit": 2})").ok());
    return seconds_since(start);
  };

  // The request's deadline (version 3): answered with the cancellation once it passes.
  WireClient client(executor->port(), wire::kMinVersion, wire::kVersion);
  REQUIRE(client.welcome.version == 3);
  auto start = Clock::now();
  const wire::ResponseFrame expired = client.search(10, heavy, 500);
  const double deadline_seconds = seconds_since(start);
  CHECK_FALSE(expired.ok());
  CHECK_THAT(expired.error, testing::contains("cancelled"));
  CHECK(deadline_seconds < 3.0);

  // A Cancel frame for a request in flight: its answer comes at once, and the index is free after it.
  client.send_search(11, heavy);
  std::this_thread::sleep_for(300ms);
  start = Clock::now();
  asio::write(client.socket, asio::buffer(wire::encode_cancel(11)));
  const wire::ResponseFrame cancelled = client.answer();
  const double cancel_seconds = seconds_since(start);
  CHECK(cancelled.id == 11);
  CHECK_FALSE(cancelled.ok());
  CHECK(cancel_seconds < 2.0);
  asio::write(client.socket, asio::buffer(wire::encode_cancel(11)));  // answered already: no error
  const double after_cancel = prompt(client, 12);
  CHECK(after_cancel < 1.0);

  // A client that closes its connection with a request in flight: the server stops it.
  {
    WireClient leaving(executor->port(), wire::kMinVersion, wire::kVersion);
    leaving.send_search(1, heavy);
    std::this_thread::sleep_for(300ms);
  }
  const double after_close = prompt(client, 13);
  CHECK(after_close < 2.0);

  // A version 2 client: no deadline on its requests, no Cancel frame, answered as before.
  WireClient older(executor->port(), 1, 2);
  CHECK(older.welcome.version == 2);
  CHECK(older.search(1, R"({"limit": 2})").ok());
  std::printf(
      "on the wire, a heavy search: its 500 ms deadline answered in %.2f s; a Cancel frame answered in "
      "%.3f s, a search after it in %.3f s; a search after a client closed its connection in %.3f s\n",
      deadline_seconds, cancel_seconds, after_cancel, after_close);
}

TEST_CASE("a gRPC client that cancels its call frees the remote index its search runs on", "[remote][cancellation]") {
  if (!testing::jina_grpc_available()) FLOWLINE_SKIP("this build has no gRPC C++");
  const auto dir = testing::scratch_dir("remote cancellation grpc");
  const auto executor = heavy_index(dir);
  // Deadlines far beyond the test: only the client's cancel can free the index in time.
  Serve front(dir, "front",
              fmt::format("with:\n  gateway: {{request_timeout_ms: 120000}}\n"
                          "executors:\n  - name: idx\n    hosts: [127.0.0.1:{}]\n"
                          "    remote: {{timeout_ms: 120000, in_flight: 2}}\n",
                          executor->port()),
              {"--grpc-port", "0"});
  INFO("the executor's output:\n" << executor->log() << "\nthe gateway's output:\n" << front.log());
  const std::vector<float> query{1.0f, 0.0f, 0.5f, 0.0f};
  // Cancelled 0.3 s after the gateway put it into the flow (its in-flight gauge), so that it runs remotely
  // by then: a multi-megabyte message can take longer than that to arrive and be read on a loaded machine.
  std::optional<Clock::time_point> in_flow;
  const auto cancel_when = [&] {
    if (!in_flow) {
      const std::string metrics = http_call(front.port(), http::verb::get, "/metrics").body;
      if (metrics.find("\nflowline_http_in_flight_requests 1") != std::string::npos) in_flow = Clock::now();
      return false;
    }
    return Clock::now() - *in_flow > 300ms;
  };
  const auto cancelled =
      testing::jina_grpc_call(front.grpc_port(), "/search", heavy_filter(100'000), "q", query, 60s, cancel_when);
  REQUIRE(in_flow.has_value());
  CHECK(cancelled.grpc_code == 1);  // CANCELLED
  const auto start = Clock::now();
  const auto trivial = testing::jina_grpc_call(front.grpc_port(), "/search", R"({"limit": 2})", "q", query, 60s);
  const double trivial_seconds = seconds_since(start);
  std::printf(
      "over gRPC, a remote index's search cancelled by its client 0.3 s after it entered the flow: a trivial search "
      "after it "
      "answered (code %d) in %.3f s\n",
      trivial.grpc_code, trivial_seconds);
  CHECK(trivial.grpc_code == 0);
  CHECK(trivial.documents == 1);
  CHECK(trivial_seconds < 2.0);  // the heavy search alone holds the index for tens of seconds
}
