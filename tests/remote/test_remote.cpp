// Remote executors: the wire format on its own, an ExecutorServer in this process (answers, executor
// errors, tokens, malformed frames, unreachable hosts), and `flowline serve --executor` run as real
// processes that are killed (SIGKILL), hung (SIGSTOP) and restarted while a flow posts through them.
#include "child_process.hpp"
#include "test_support.hpp"

#include "remote/remote_replica.hpp"
#include "remote/wire.hpp"

#include "flowline/executor_server.hpp"

#include <ATen/ATen.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

using namespace flowline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Documents "0", "1", ... generated on demand, so a million need no array up front.
class CountingSource : public DocumentSource {
 public:
  explicit CountingSource(std::size_t n) : n_(n) {}
  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t added = 0;
    for (; added < max && next_ < n_; ++added) out.push_back(Document(std::to_string(next_++)));
    return added;
  }

 private:
  std::size_t n_;
  std::size_t next_ = 0;
};

// Checks what a post answers: every document once, in input order, processed where expected.
struct OrderCheck {
  std::atomic<std::size_t> documents{0};
  std::size_t failed_requests = 0;
  std::string first_problem;
  std::map<std::string, std::size_t> by_server;

  void operator()(Response&& r) {
    if (!r.ok()) {
      ++failed_requests;
      if (first_problem.empty()) first_problem = fmt::format("request {} failed: {}", r.index, r.error);
    }
    for (const auto& doc : r.docs) {
      const std::size_t expected = documents.load();
      if (first_problem.empty() && doc.text != std::to_string(expected))
        first_problem = fmt::format("document {} came where {} was expected", doc.text, expected);
      const auto* server = doc.tags.if_contains("server");
      ++by_server[server ? std::string(server->as_string()) : std::string("none")];
      documents.store(expected + 1);
    }
  }
};

FlowConfig client_flow(const std::vector<std::uint16_t>& ports, const std::string& remote_options) {
  std::string hosts;
  for (const auto port : ports) hosts += fmt::format("{}127.0.0.1:{}", hosts.empty() ? "" : ", ", port);
  return load_flow_config_text(fmt::format("with: {{request_size: 100, max_in_flight: 64}}\n"
                                           "executors:\n"
                                           "  - {{name: first, uses: NoOp}}\n"
                                           "  - name: mid\n"
                                           "    hosts: [{}]\n"
                                           "    remote: {{{}}}\n"
                                           "  - {{name: last, uses: NoOp}}\n",
                                           hosts, remote_options),
                               "client.yml");
}

// An executor `mid` served in this process: SetTags marking documents with `server`. On `options.host`, at
// `port` (0: a free one).
struct InProcessServer {
  explicit InProcessServer(const std::string& name, ExecutorServerOptions options = {}, const std::string& uses = "",
                           std::uint16_t port = 0)
      : flow(executor_flow(
            load_flow_config_text(uses.empty() ? fmt::format("executors:\n  - name: mid\n    uses: SetTags\n"
                                                             "    with: {{tags: {{server: {}}}}}\n",
                                                             name)
                                               : uses,
                                  "server.yml"),
            "mid")) {
    flow.start();
    server = std::make_unique<ExecutorServer>(flow, "mid");
    options.port = port;
    server->start(options);
  }
  ~InProcessServer() {
    server->stop();
    flow.close();
  }
  std::uint16_t port() const { return server->port(); }
  Flow flow;
  std::unique_ptr<ExecutorServer> server;
};

// A raw client: writes bytes, reads frames until the server closes.
struct RawClient {
  explicit RawClient(std::uint16_t port) : socket(io) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  void write(const std::string& bytes) { asio::write(socket, asio::buffer(bytes)); }
  // The frames the server sends until it closes the connection (bounded by the server's own timeouts).
  std::vector<std::string> frames_until_closed() {
    std::vector<std::string> frames;
    while (true) {
      unsigned char prefix[4];
      boost::system::error_code ec;
      asio::read(socket, asio::buffer(prefix), ec);
      if (ec) return frames;
      std::uint32_t n = 0;
      std::memcpy(&n, prefix, 4);
      std::string body(n, '\0');
      asio::read(socket, asio::buffer(body), ec);
      if (ec) return frames;
      frames.push_back(std::move(body));
    }
  }
  asio::io_context io;
  tcp::socket socket;
};

std::string hello_frame(std::uint16_t min_version = wire::kVersion, std::uint16_t max_version = wire::kVersion,
                        std::string token = "") {
  return wire::encode_hello(wire::Hello{min_version, max_version, std::move(token)});
}

// What a server refused the connection with: the text of its Error frame.
std::string refusal(const std::vector<std::string>& frames) {
  for (const auto& f : frames) {
    if (!f.empty() && f[0] == static_cast<char>(wire::FrameType::Error)) return wire::decode_error(f);
  }
  return "(no Error frame)";
}

}  // namespace

TEST_CASE("documents with every field and tensors of every dtype cross the wire unchanged", "[remote]") {
  DocumentArray docs;
  Document a("hello");
  a.blob = {0, 1, 2, 255};
  a.tensor = at::arange(12, at::kFloat).reshape({3, 4});
  a.embedding = at::rand({384}).to(at::kHalf);
  a.tags["n"] = 3;
  a.tags["nested"] = boost::json::object{{"x", boost::json::array{1, "two"}}};
  a.mime_type = "text/plain";
  a.uri = "file:///a";
  a.scores["cos"] = 0.5f;
  a.parent_id = "p";
  Document chunk("inner");
  chunk.embedding = at::tensor({1, 0}).to(at::kBool);
  a.chunks.push_back(chunk);
  a.matches.push_back(Document("match"));
  docs.push_back(a);
  Document empty;
  empty.id = "";
  docs.push_back(empty);
  for (const auto type : {at::kDouble, at::kBFloat16, at::kLong, at::kInt, at::kShort, at::kChar, at::kByte}) {
    Document d;
    d.tensor = (at::arange(6, at::kDouble) - 2).to(type).reshape({2, 3});
    docs.push_back(d);
  }
  Document zero;
  zero.tensor = at::empty({0, 5});
  docs.push_back(zero);
  Document strided;
  strided.tensor = at::arange(16, at::kFloat).reshape({4, 4}).t();  // not contiguous
  docs.push_back(strided);

  const wire::RequestFrame back =
      wire::decode_request(wire::encode_request(42, "/encode", R"({"k":1})", docs).substr(wire::kLengthBytes));
  CHECK(back.id == 42);
  CHECK(back.endpoint == "/encode");
  CHECK(back.parameters == R"({"k":1})");
  REQUIRE(back.docs.size() == docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    INFO("document " << i);
    const Document& x = docs[i];
    const Document& y = back.docs[i];
    CHECK(y.id == x.id);
    CHECK(y.text == x.text);
    CHECK(y.blob == x.blob);
    CHECK(y.tags == x.tags);
    CHECK(y.scores == x.scores);
    CHECK(y.parent_id == x.parent_id);
    CHECK(y.uri == x.uri);
    CHECK(y.mime_type == x.mime_type);
    CHECK(y.chunks.size() == x.chunks.size());
    CHECK(y.matches.size() == x.matches.size());
    for (const auto& [mine, theirs] : {std::pair{&x.tensor, &y.tensor}, std::pair{&x.embedding, &y.embedding}}) {
      REQUIRE(mine->defined() == theirs->defined());
      if (!mine->defined()) continue;
      CHECK(theirs->scalar_type() == mine->scalar_type());
      CHECK(theirs->sizes() == mine->sizes());
      CHECK(at::equal(*theirs, *mine));
    }
  }
  CHECK(at::equal(back.docs[0].chunks[0].embedding, chunk.embedding));
  CHECK(back.docs[0].matches[0].text == "match");
}

TEST_CASE("malformed frames are refused with the field and offset that is wrong", "[remote]") {
  DocumentArray docs;
  Document d("x");
  d.tensor = at::ones({4, 4});
  docs.push_back(d);
  const std::string frame = wire::encode_request(7, "/", "", docs).substr(wire::kLengthBytes);
  // Every truncation of a valid frame is an error, never a crash or a read past the end.
  for (std::size_t cut = 0; cut < frame.size(); ++cut) {
    CHECK_THROWS_AS(wire::decode_request(std::string_view(frame).substr(0, cut)), wire::WireError);
  }
  CHECK_THROWS_WITH(wire::decode_request(frame + "zz"), testing::contains("2 bytes after the last field"));
  std::string shape = frame;  // the tensor's first dimension is the 8 bytes after dtype and rank
  const auto at = shape.find(std::string("\x01\x02", 2));
  REQUIRE(at != std::string::npos);
  shape[at + 2] = 5;  // 5 x 4 floats, but 64 bytes of data follow
  CHECK_THROWS_WITH(wire::decode_request(shape), testing::contains("has 80 bytes, not 64"));
  {  // an empty tensor whose other sizes overflow LibTorch's strides (found by fuzz_wire_frames)
    std::string bytes("\x01\x00\x00\x00\x01\x03\x01\x03", 8);  // 1 document, 1 field: tensor, float32, rank 3
    for (const std::uint64_t size :
         {std::uint64_t{2}, std::uint64_t{0x0600000000000000}, std::uint64_t{0}, std::uint64_t{0}})
      bytes.append(reinterpret_cast<const char*>(&size), 8);  // the sizes, then a byte count of 0
    CHECK_THROWS_WITH(wire::decode_documents(bytes),
                      testing::contains("tensor dimension 1 (432345564227567616) overflows"));
  }
  unsigned char big[4] = {0xff, 0xff, 0xff, 0x7f};
  CHECK_THROWS_WITH(wire::read_length(big, 1 << 20), testing::contains("above the maximum frame size"));
  unsigned char zero[4] = {0, 0, 0, 0};
  CHECK_THROWS_WITH(wire::read_length(zero, 1 << 20), testing::contains("length 0"));
  CHECK_THROWS_WITH(wire::frame_type(std::string("\x63", 1)), testing::contains("unknown frame type 99"));
}

TEST_CASE("a flow runs its middle executor on an executor server and gets every document back in order", "[remote]") {
  InProcessServer a("a"), b("b");
  Flow flow(client_flow({a.port(), b.port()}, "in_flight: 2"));
  flow.start();
  OrderCheck check;
  CountingSource source(20'000);
  const PostSummary summary = flow.post("/", source, std::ref(check));
  INFO(check.first_problem);
  CHECK(check.first_problem.empty());
  CHECK(check.documents == 20'000);
  CHECK(summary.failed_requests == 0);
  CHECK(check.by_server.count("none") == 0);
  CHECK(check.by_server["a"] + check.by_server["b"] == 20'000);
  const FlowStats stats = flow.stats();
  REQUIRE(stats.remote_hosts.size() == 2);
  for (const auto& h : stats.remote_hosts) {
    CHECK(h.connected);
    CHECK(h.lost == 0);
    CHECK(h.requests > 0);  // both hosts took work
  }
  flow.close();
  CHECK(a.server->stats().requests + b.server->stats().requests == 200);
}

TEST_CASE("remote.connections opens that many connections to one host, each counted apart in the stats", "[remote]") {
  InProcessServer a("a");
  Flow flow(client_flow({a.port()}, "in_flight: 2, connections: 3"));
  flow.start();
  OrderCheck check;
  CountingSource source(10'000);
  const PostSummary summary = flow.post("/", source, std::ref(check));
  INFO(check.first_problem);
  CHECK(check.first_problem.empty());
  CHECK(check.documents == 10'000);
  CHECK(summary.failed_requests == 0);
  const FlowStats stats = flow.stats();
  REQUIRE(stats.remote_hosts.size() == 3);
  std::uint64_t requests = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(stats.remote_hosts[k].address == fmt::format("127.0.0.1:{}#{}", a.port(), k + 1));
    CHECK(stats.remote_hosts[k].connected);
    requests += stats.remote_hosts[k].requests;
  }
  CHECK(requests == 100);
  flow.close();
  CHECK(a.server->stats().accepted == 3);
}

TEST_CASE("an executor error on a server fails that request only and is not retried", "[remote]") {
  InProcessServer server("s", {}, "executors:\n  - {name: mid, uses: FailIf}\n");
  Flow flow(client_flow({server.port()}, "in_flight: 2"));
  DocumentArray docs = testing::numbered_docs(10);
  docs[4].text = "FAIL here";
  std::vector<Response> responses;
  PostOptions options;
  options.request_size = 2;
  ArraySource source(std::move(docs));
  flow.post(
      "/", source, [&](Response&& r) { responses.push_back(std::move(r)); }, options);
  REQUIRE(responses.size() == 5);
  for (const auto& r : responses) {
    INFO("request " << r.index << ": " << r.error);
    CHECK(r.ok() == (r.index != 2));
  }
  CHECK(responses[2].error_executor == "mid");
  CHECK_THAT(responses[2].error, testing::contains("contains 'FAIL'"));
  CHECK(server.server->stats().requests == 5);  // once each: the failure was not retried
  CHECK(flow.stats().remote_hosts.at(0).requeued_batches == 0);
}

TEST_CASE("an executor server closes a connection that sends a bad frame, says why, and keeps serving", "[remote]") {
  ExecutorServerOptions options;
  options.max_frame_bytes = 1 << 20;
  options.token = "s3cret";
  options.handshake_timeout = 2s;
  InProcessServer server("s", options);
  const std::uint16_t port = server.port();

  auto refused = [&](const std::string& bytes) {
    RawClient client(port);
    client.write(bytes);
    return refusal(client.frames_until_closed());
  };
  const std::string hello = hello_frame(wire::kVersion, wire::kVersion, "s3cret");
  CHECK_THAT(refused(std::string("\xff\xff\xff\x7f", 4)), testing::contains("above the maximum frame size"));
  CHECK_THAT(refused("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), testing::contains("above the maximum frame size"));
  CHECK_THAT(refused(hello_frame(7, 9, "s3cret")), testing::contains("unsupported protocol version 7..9"));
  CHECK_THAT(refused(hello_frame()), testing::contains("needs a token"));
  CHECK_THAT(refused(hello_frame(wire::kVersion, wire::kVersion, "guess")), testing::contains("wrong token"));
  CHECK_THAT(refused(wire::encode_ping(wire::FrameType::Ping, 1)), testing::contains("expected a Hello frame first"));
  CHECK_THAT(refused(hello + std::string("\x01\x00\x00\x00\x63", 5)), testing::contains("unknown frame type 99"));
  {  // a tensor whose data is cut short, in a frame whose length matches what was sent
    DocumentArray docs;
    Document d("x");
    d.tensor = at::ones({16});
    docs.push_back(d);
    std::string request = wire::encode_request(1, "/", "", docs);
    request.resize(request.size() - 8);
    const auto n = static_cast<std::uint32_t>(request.size() - 4);
    std::memcpy(request.data(), &n, 4);
    CHECK_THAT(refused(hello + request), testing::contains("tensor data needs 64 bytes, 56 left"));
  }
  {  // a frame that never completes is cut off by the frame timeout... here the handshake timeout
    RawClient silent(port);
    const auto started = std::chrono::steady_clock::now();
    CHECK_THAT(refusal(silent.frames_until_closed()), testing::contains("no Hello frame within the handshake timeout"));
    CHECK(std::chrono::steady_clock::now() - started < 10s);
  }
  CHECK(server.server->stats().protocol_errors == 9);

  // The server goes on serving a well-behaved flow.
  Flow flow(client_flow({port}, "in_flight: 2, token: s3cret"));
  OrderCheck check;
  CountingSource source(1'000);
  flow.post("/", source, std::ref(check));
  CHECK(check.first_problem.empty());
  CHECK(check.documents == 1'000);
}

TEST_CASE("a flow whose host cannot be reached fails to start naming it, or starts degraded when told to", "[remote]") {
  const std::uint16_t port = testing::unused_loopback_port();
  {
    Flow flow(client_flow({port}, "connect_timeout_ms: 1000"));
    CHECK_THROWS_WITH(flow.start(), testing::contains(fmt::format("cannot reach host 127.0.0.1:{}", port)) &&
                                        testing::contains("executor 'mid'"));
  }
  // Degraded: the flow starts; the server comes up on that port later and the host joins by itself.
  Flow flow(client_flow({port}, "start_degraded: true, retry_max_ms: 200"));
  flow.start();
  CHECK_FALSE(flow.stats().remote_hosts.at(0).connected);
  ExecutorServerOptions options;
  Flow served(executor_flow(load_flow_config_text("executors:\n  - {name: mid, uses: NoOp}\n", "s.yml"), "mid"));
  served.start();
  ExecutorServer server(served, "mid");
  options.port = port;
  server.start(options);
  CHECK(testing::eventually(5s, [&] { return flow.stats().remote_hosts.at(0).connected; }));
  OrderCheck check;
  CountingSource source(500);
  flow.post("/", source, std::ref(check));
  CHECK(check.documents == 500);
  flow.close();
  server.stop();
}

// ---- real processes -----------------------------------------------------------------------------------------

namespace {

// `flowline serve FLOW --executor mid --port PORT --ready-file F`, its `mid` tagging documents with `name`.
class ServerProcess {
 public:
  ServerProcess(const fs::path& dir, const std::string& name, std::uint16_t port = 0,
                const std::vector<std::string>& extra = {}) {
    const fs::path flow = dir / fmt::format("{}.yml", name);
    testing::write_text(flow, fmt::format("plugins: ['{}/libflowline_testing_executors.so']\n"
                                          "executors:\n"
                                          "  - name: mid\n"
                                          "    uses: SetTags\n"
                                          "    replicas: 2\n"
                                          "    with: {{tags: {{server: {}}}}}\n",
                                          FLOWLINE_TEST_PLUGIN_DIR, name));
    const fs::path ready = dir / fmt::format("{}.port", name);
    fs::remove(ready);
    std::vector<std::string> args{FLOWLINE_LAUNCHER,    "serve",        flow.string(), "--executor", "mid", "--port",
                                  std::to_string(port), "--ready-file", ready.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    process_ = std::make_unique<testing::ChildProcess>(args, dir / fmt::format("{}.log", name));
    port_ = static_cast<std::uint16_t>(testing::wait_for_port(*process_, ready, 60s));
    INFO("server " << name << ": " << process_->log());
    REQUIRE(port_ != 0);
  }
  std::uint16_t port() const { return port_; }
  testing::ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<testing::ChildProcess> process_;
  std::uint16_t port_ = 0;
};

// Posts `documents` generated documents on a thread of its own, checking order as they come back.
class BackgroundPost {
 public:
  BackgroundPost(Flow& flow, std::size_t documents)
      : source_(documents), thread_([this, &flow] { summary_ = flow.post("/", source_, std::ref(check)); }) {}
  ~BackgroundPost() {
    if (thread_.joinable()) thread_.join();
  }
  // Whether `documents` have come back within `bound`.
  bool reached(std::size_t documents, std::chrono::milliseconds bound) {
    return testing::eventually(
        bound, [&] { return check.documents >= documents; }, 1ms);
  }
  PostSummary finish() {
    thread_.join();
    return summary_;
  }
  OrderCheck check;

 private:
  CountingSource source_;
  PostSummary summary_;
  std::thread thread_;  // last: it uses the members above
};

// Stands in for DNS under remote.discovery: dns: the addresses `encoder-pods` resolves to, changed by the
// test while the flow runs (as a headless Service's answer changes when pods come and go).
class FakeDns {
 public:
  FakeDns() {
    remote::set_server_resolver([this](const std::string& name, const std::string& port) {
      lookups_.fetch_add(1);
      std::lock_guard lock(mutex_);
      if (name != "encoder-pods" || failing_) throw std::runtime_error(fmt::format("cannot resolve {}", name));
      std::vector<std::string> out;
      for (const auto& ip : ips_) out.push_back(fmt::format("{}:{}", ip, port));
      return out;
    });
  }
  ~FakeDns() { remote::set_server_resolver({}); }
  void answer(std::vector<std::string> ips) {
    std::lock_guard lock(mutex_);
    ips_ = std::move(ips);
    failing_ = false;
  }
  void fail() {
    std::lock_guard lock(mutex_);
    failing_ = true;
  }
  int lookups() const { return lookups_.load(); }

 private:
  std::mutex mutex_;
  std::vector<std::string> ips_;
  bool failing_ = false;
  std::atomic<int> lookups_{0};
};

// Every remote host the stats list, for a failure's message.
std::string hosts_text(Flow& flow) {
  std::string out;
  for (const auto& h : flow.stats().remote_hosts)
    out += fmt::format("{} connected={} requests={} error='{}'; ", h.address, h.connected, h.requests, h.last_error);
  return out;
}

// The servers the flow's stats list as connected, by address (without the entry's name).
std::set<std::string> connected_servers(Flow& flow) {
  std::set<std::string> out;
  for (const auto& h : flow.stats().remote_hosts) {
    if (h.connected) out.insert(h.address.substr(0, h.address.find(' ')));
  }
  return out;
}

}  // namespace

TEST_CASE("remote.discovery: dns spreads requests over every server a name resolves to, as servers come and go",
          "[remote]") {
  // Three servers on one port at three loopback addresses, as a headless Service's pods are.
  ExecutorServerOptions at;
  at.host = "127.0.0.2";
  InProcessServer a("a", at);
  const std::uint16_t port = a.port();
  at.host = "127.0.0.3";
  InProcessServer b("b", at, "", port);
  at.host = "127.0.0.4";
  InProcessServer c("c", at, "", port);
  const auto addr = [port](const char* ip) { return fmt::format("{}:{}", ip, port); };
  FakeDns dns;
  dns.answer({"127.0.0.2", "127.0.0.3"});
  Flow flow(load_flow_config_text(
      fmt::format("with: {{request_size: 100, max_in_flight: 64}}\n"
                  "executors:\n"
                  "  - name: mid\n"
                  "    hosts: [encoder-pods:{}]\n"
                  "    remote: {{discovery: dns, discovery_interval_ms: 100, max_servers: 4, in_flight: 2}}\n",
                  port),
      "client.yml"));
  flow.start();
  CHECK(connected_servers(flow) == std::set<std::string>{addr("127.0.0.2"), addr("127.0.0.3")});
  // Posts `n` documents; how many each server handled.
  const auto post = [&flow](std::size_t n) {
    OrderCheck check;
    CountingSource source(n);
    const PostSummary summary = flow.post("/", source, std::ref(check));
    INFO(check.first_problem);
    CHECK(check.first_problem.empty());
    CHECK(check.documents == n);
    CHECK(summary.failed_requests == 0);
    CHECK(check.by_server.count("none") == 0);
    return check.by_server;
  };
  auto by_server = post(20'000);
  CHECK(by_server["a"] > 0);
  CHECK(by_server["b"] > 0);
  CHECK(by_server["c"] == 0);

  // Under load the answer changes twice: a goes and c comes, then b goes and a comes back. Every document
  // is answered once and in order, and none fails.
  constexpr std::size_t kDocuments = 300'000;
  {
    BackgroundPost load(flow, kDocuments);
    REQUIRE(load.reached(kDocuments / 4, 60s));
    dns.answer({"127.0.0.3", "127.0.0.4"});
    INFO(hosts_text(flow));
    REQUIRE(testing::eventually(10s, [&] {
      return connected_servers(flow) == std::set<std::string>{addr("127.0.0.3"), addr("127.0.0.4")};
    }));
    dns.answer({"127.0.0.2", "127.0.0.4"});
    REQUIRE(testing::eventually(10s, [&] {
      return connected_servers(flow) == std::set<std::string>{addr("127.0.0.2"), addr("127.0.0.4")};
    }));
    const PostSummary summary = load.finish();
    INFO(load.check.first_problem);
    CHECK(load.check.first_problem.empty());
    CHECK(load.check.documents == kDocuments);
    CHECK(summary.failed_requests == 0);
    fmt::print("discovery test under load: a {}, b {}, c {} documents; {} lookups\n", load.check.by_server["a"],
               load.check.by_server["b"], load.check.by_server["c"], dns.lookups());
  }
  // Now a and c take the work, and nothing goes to b, which left the answer.
  const std::uint64_t b_when_gone = b.server->stats().requests;
  by_server = post(20'000);
  CHECK(by_server["a"] > 0);
  CHECK(by_server["b"] == 0);
  CHECK(by_server["c"] > 0);
  CHECK(b.server->stats().requests == b_when_gone);

  // A failed lookup keeps the servers known before.
  dns.fail();
  const int lookups = dns.lookups();
  REQUIRE(testing::eventually(5s, [&] { return dns.lookups() > lookups + 1; }));
  CHECK(connected_servers(flow) == std::set<std::string>{addr("127.0.0.2"), addr("127.0.0.4")});
  DocumentArray docs = testing::numbered_docs(10);
  CHECK(flow.post("/", docs).size() == 10);
  flow.close();
}

TEST_CASE("remote.discovery: dns asks the system's resolver, and a name it cannot resolve fails the start naming it",
          "[remote]") {
  InProcessServer a("a");
  Flow flow(load_flow_config_text(fmt::format("executors:\n  - name: mid\n    hosts: [localhost:{}]\n"
                                              "    remote: {{discovery: dns}}\n",
                                              a.port()),
                                  "client.yml"));
  flow.start();
  const FlowStats stats = flow.stats();
  REQUIRE(stats.remote_hosts.size() == 1);
  CHECK(stats.remote_hosts[0].address == fmt::format("127.0.0.1:{} (localhost:{})", a.port(), a.port()));
  CHECK(stats.remote_hosts[0].connected);
  DocumentArray docs = testing::numbered_docs(10);
  CHECK(flow.post("/", docs).size() == 10);
  flow.close();

  Flow nowhere(
      load_flow_config_text("executors:\n  - name: mid\n    hosts: [no-such-host.invalid:9000]\n"
                            "    remote: {discovery: dns, connect_timeout_ms: 500}\n",
                            "client.yml"));
  try {
    nowhere.start();
    FAIL("the flow started without its host");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), testing::contains("no-such-host.invalid:9000 (cannot resolve no-such-host.invalid"));
  }
}

TEST_CASE(
    "a million documents through three executor servers, one killed a third of the way: each answered once, in order",
    "[remote][processes]") {
  const fs::path dir = testing::scratch_dir("remote_kill");
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (const char* name : {"s0", "s1", "s2"}) servers.push_back(std::make_unique<ServerProcess>(dir, name));
  Flow flow(client_flow({servers[0]->port(), servers[1]->port(), servers[2]->port()},
                        "in_flight: 4, timeout_ms: 5000, retry_max_ms: 500"));
  flow.start();

  constexpr std::size_t kDocuments = 1'000'000;
  BackgroundPost post(flow, kDocuments);
  OrderCheck& check = post.check;
  REQUIRE(post.reached(kDocuments / 3, 120s));
  servers[1]->process().signal(SIGKILL);
  const std::size_t killed_at = check.documents;
  REQUIRE(testing::eventually(10s, [&] { return flow.stats().remote_hosts.at(1).lost >= 1; }));
  // Restarted on the same port, it rejoins by itself.
  const std::uint16_t port = servers[1]->port();
  servers[1] = std::make_unique<ServerProcess>(dir, "s1b", port);
  const auto restarted = std::chrono::steady_clock::now();
  CHECK(testing::eventually(
      5s, [&] { return flow.stats().remote_hosts.at(1).connected; }, 10ms));
  const double rejoin_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - restarted).count();
  const PostSummary summary = post.finish();

  INFO(check.first_problem);
  INFO("killed at document " << killed_at << "; rejoined " << rejoin_s << " s after the restart was ready");
  CHECK(check.first_problem.empty());
  CHECK(check.documents == kDocuments);
  CHECK(summary.failed_requests == 0);
  CHECK(check.by_server.count("none") == 0);
  const FlowStats stats = flow.stats();
  CHECK(stats.remote_hosts.at(1).lost >= 1);
  CHECK(stats.remote_hosts.at(1).reconnects >= 1);
  CHECK(stats.remote_hosts.at(0).lost == 0);
  CHECK(stats.remote_hosts.at(2).lost == 0);
  fmt::print(
      "kill test: killed at document {}, {} batches re-queued, rejoined {:.2f} s after the restart; per server: "
      "s0 {}, s1 {}, s1 restarted {}, s2 {}\n",
      killed_at, stats.remote_hosts.at(1).requeued_batches, rejoin_s, check.by_server["s0"], check.by_server["s1"],
      check.by_server["s1b"], check.by_server["s2"]);
  flow.close();
  for (auto& s : servers) CHECK(s->process().stop(30s) == 0);
}

TEST_CASE("an executor server that hangs (SIGSTOP) is detected by the timeout and its batches go to the others",
          "[remote][processes]") {
  const fs::path dir = testing::scratch_dir("remote_hang");
  ServerProcess a(dir, "a"), b(dir, "b");
  Flow flow(client_flow({a.port(), b.port()}, "in_flight: 2, timeout_ms: 1000, retry_max_ms: 300"));
  flow.start();
  constexpr std::size_t kDocuments = 100'000;
  BackgroundPost post(flow, kDocuments);
  OrderCheck& check = post.check;
  REQUIRE(post.reached(kDocuments / 3, 60s));
  a.process().signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  REQUIRE(testing::eventually(
      10s, [&] { return flow.stats().remote_hosts.at(0).lost >= 1; }, 10ms));
  const double detected_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const PostSummary summary = post.finish();
  INFO(check.first_problem);
  CHECK(check.first_problem.empty());
  CHECK(check.documents == kDocuments);
  CHECK(summary.failed_requests == 0);
  const RemoteHostStats hung = flow.stats().remote_hosts.at(0);
  INFO("detected after " << detected_s << " s; last error: " << hung.last_error);
  CHECK(detected_s < 3.0);
  CHECK_FALSE(hung.connected);
  fmt::print("hang test: detected {:.2f} s after SIGSTOP ({}); {} batches re-queued\n", detected_s, hung.last_error,
             hung.requeued_batches);
  // Resumed, it answers the handshake again and rejoins.
  a.process().signal(SIGCONT);
  CHECK(testing::eventually(5s, [&] { return flow.stats().remote_hosts.at(0).connected; }));
  flow.close();
}

namespace {

// The resident set of process `pid` in MB, from /proc.
double rss_mb(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

std::string length_prefix(std::uint32_t n) {
  std::string out(4, '\0');
  std::memcpy(out.data(), &n, 4);
  return out;
}

// A plain blocking socket to the server (a thousand of them: no io_context each).
int open_connection(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed it: what the caller checks
    sent += static_cast<std::size_t>(n);
  }
}

// Posts 1,000 documents through a flow whose `mid` is the server; all must come back from it.
void well_behaved_client_is_answered(std::uint16_t port) {
  Flow flow(client_flow({port}, "timeout_ms: 20000"));
  flow.start();
  const DocumentArray out = flow.post("/", testing::numbered_docs(1000));
  REQUIRE(out.size() == 1000);
  CHECK(out[999].text == "999");
  CHECK(out[0].tags.at("server").as_string() == "m");
  flow.close();
}

}  // namespace

TEST_CASE("an executor server's memory is bounded by the bytes that arrived, not the frame lengths peers declare",
          "[remote][memory]") {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 8192);  // a thousand sockets here and in the server
  setrlimit(RLIMIT_NOFILE, &files);
  REQUIRE(files.rlim_cur >= 2100);
  const auto dir = testing::scratch_dir("remote memory");
  // 64 MiB for partly read frames (a quarter of the 256 MiB frame limit), so a thousand peers reach it.
  ServerProcess server(dir, "m", 0, {"--max-partial-frame-bytes", std::to_string(64u << 20)});
  const pid_t pid = server.process().pid();
  const double start_rss = rss_mb(pid);

  // Before the Hello a frame may be 4 KiB: a declared 256 MiB closes the connection, saying why.
  {
    RawClient c(server.port());
    c.write(length_prefix(256u << 20));
    CHECK_THAT(refusal(c.frames_until_closed()), testing::contains("above the maximum frame size of 4096 bytes "
                                                                   "(before the Hello frame)"));
  }
  // After the Hello, 16 connections each declare a 256 MiB frame and send nothing.
  std::vector<int> quiet;
  for (int i = 0; i < 16; ++i) {
    quiet.push_back(open_connection(server.port()));
    send_all(quiet.back(), hello_frame() + length_prefix(256u << 20));
  }
  std::this_thread::sleep_for(500ms);
  const double quiet_rss = rss_mb(pid);
  well_behaved_client_is_answered(server.port());
  // A thousand more declare 256 MiB and trickle 192 KiB each: 188 MiB in all, past the 64 MiB budget, so
  // most wait with part of it unread (it stays in the sockets' buffers).
  std::vector<int> trickling;
  const std::string trickle(192 << 10, '\x02');
  for (int i = 0; i < 1000; ++i) {
    trickling.push_back(open_connection(server.port()));
    send_all(trickling.back(), hello_frame() + length_prefix(256u << 20) + trickle);
  }
  std::this_thread::sleep_for(1s);
  const double busy_rss = rss_mb(pid);
  well_behaved_client_is_answered(server.port());
  WARN(
      fmt::format("executor server RSS: {:.0f} MB at start, {:.0f} MB with 16 quiet 256 MiB frames, {:.0f} MB with "
                  "1,000 more trickling 192 KiB each",
                  start_rss, quiet_rss, busy_rss));
  CHECK(quiet_rss < 400);
  // The budget (64 MiB) plus a first 64 KiB step per connection (64 MB), above where the server started.
  CHECK(busy_rss < start_rss + 64 + 70 + 40);
  for (int fd : quiet) ::close(fd);
  for (int fd : trickling) ::close(fd);
  CHECK(server.process().running());
}
