// NDJSON streams through the gateway (src/gateway/http_stream.cpp): documents in as lines of a chunked body,
// answers out as lines of a chunked response, in input order, with backpressure, and errors that end a
// stream at the line that caused them.
#include "gateway_fixtures.hpp"

#include <atomic>
#include <thread>

using namespace gateway_test;

namespace {

// One connection that posts an NDJSON body in HTTP chunks and reads the streamed answer.
class StreamClient {
 public:
  explicit StreamClient(std::uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  // The request header; the body follows with send_chunk() and end().
  void begin(const std::string& target, const std::string& extra_headers = "") {
    write(
        fmt::format("POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n"
                    "Transfer-Encoding: chunked\r\n{}\r\n",
                    target, extra_headers));
  }
  // The header of a body with a length instead (the body follows with send()).
  void begin_sized(const std::string& target, std::size_t length, const std::string& extra_headers = "") {
    write(
        fmt::format("POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n"
                    "Content-Length: {}\r\n{}\r\n",
                    target, length, extra_headers));
  }
  void send(const std::string& bytes) { write(bytes); }
  void send_chunk(const std::string& bytes) { write(fmt::format("{:x}\r\n{}\r\n", bytes.size(), bytes)); }
  void end() { write("0\r\n\r\n"); }
  // The whole answer: status, content type and the body's lines.
  struct Answer {
    int status = 0;
    std::string content_type;
    std::vector<std::string> lines;
    std::string body;
  };
  Answer read_answer() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    http::read(socket_, buffer_, parser);
    Answer a{static_cast<int>(parser.get().result_int()),
             std::string(parser.get()[http::field::content_type]),
             {},
             parser.get().body()};
    std::size_t start = 0;
    while (start < a.body.size()) {
      const auto end = a.body.find('\n', start);
      a.lines.push_back(a.body.substr(start, end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
    return a;
  }
  tcp::socket& socket() { return socket_; }

 private:
  void write(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

// Lines `first`..`first + n - 1`: alternately a Jina document and a bare JSON string.
std::string ndjson(std::size_t first, std::size_t n, std::size_t padding = 0) {
  std::string out;
  for (std::size_t i = first; i < first + n; ++i) {
    const std::string text = fmt::format("line {}{}", i, std::string(padding, 'x'));
    out += i % 2 ? fmt::format("{{\"text\":\"{}\",\"tags\":{{\"i\":{}}}}}\n", text, i) : fmt::format("\"{}\"\n", text);
  }
  return out;
}

std::size_t documents_encoded() {
  std::lock_guard lock(FakeEncoder::mutex());
  std::size_t n = 0;
  for (std::size_t b : FakeEncoder::batches()) n += b;
  return n;
}

void reset_encoder() {
  std::lock_guard lock(FakeEncoder::mutex());
  FakeEncoder::batches().clear();
}

// Checks that `lines` are the answers to ndjson(0, n) in order (FakeEncoder's embeddings included).
void check_in_order(const std::vector<std::string>& lines, std::size_t n, std::size_t padding = 0) {
  REQUIRE(lines.size() == n);
  for (std::size_t i = 0; i < n; ++i) {
    const json::value doc = json::parse(lines[i]);
    const std::string text = fmt::format("line {}{}", i, std::string(padding, 'x'));
    REQUIRE(doc.at("text").as_string() == text);
    REQUIRE(numbers(doc.at("embedding")) == std::vector<double>{static_cast<double>(text.size()), 0.5, -2});
  }
}

}  // namespace

TEST_CASE("an NDJSON stream is answered line by line, in input order, and the connection stays usable",
          "[gateway][stream]") {
  Served served(fake_encoder_flow());
  StreamClient client(served.port());
  client.begin("/encode");
  constexpr std::size_t kLines = 10'000;
  // Chunks that cut lines anywhere, a blank line and a CRLF line among them.
  std::string body = ndjson(0, 5000) + "\n" + ndjson(5000, 5000);
  body.insert(body.find("\n", 100), "\r");
  for (std::size_t at = 0; at < body.size(); at += 7919) client.send_chunk(body.substr(at, 7919));
  client.end();
  const auto answer = client.read_answer();
  CHECK(answer.status == 200);
  CHECK(answer.content_type == "application/x-ndjson");
  check_in_order(answer.lines, kLines);
  CHECK(json::parse(answer.lines[3]).at("tags").at("i") == 3);

  // The same connection serves the next request.
  http::request<http::string_body> next(http::verb::get, "/health", 11);
  http::write(client.socket(), next);
  beast::flat_buffer buffer;
  http::response<http::string_body> health;
  http::read(client.socket(), buffer, health);
  CHECK(health.result_int() == 200);
  CHECK(served.gateway->stats().documents == kLines);
}

TEST_CASE("concurrent NDJSON streams each come back whole and in order", "[gateway][stream]") {
  Served served(fake_encoder_flow(BatchingOptions{.max_batch_size = 512, .max_delay = std::chrono::microseconds(500)}));
  std::vector<std::thread> threads;
  std::atomic<int> whole{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      StreamClient client(served.port());
      client.begin("/default");
      client.send_chunk(ndjson(0, 3000));
      client.end();
      const auto answer = client.read_answer();
      bool ok = answer.status == 200 && answer.lines.size() == 3000;
      for (std::size_t i = 0; ok && i < answer.lines.size(); ++i) {
        ok = json::parse(answer.lines[i]).at("text").as_string() == fmt::format("line {}", i);
      }
      if (ok) ++whole;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(whole == 4);
}

TEST_CASE("a stream whose client does not read is held to a bounded number of documents", "[gateway][stream]") {
  reset_encoder();
  Served served(fake_encoder_flow());
  StreamClient client(served.port());
  // Small socket buffers on the client's side; the server's stay as the system sizes them.
  client.socket().set_option(asio::socket_base::send_buffer_size(64 * 1024));
  client.socket().set_option(asio::socket_base::receive_buffer_size(64 * 1024));
  constexpr std::size_t kLines = 50'000, kPadding = 2000;  // about 100 MB in, 100 MB out
  std::atomic<std::size_t> sent{0};
  std::atomic<bool> done{false};
  client.begin("/encode");
  std::thread writer([&] {
    try {
      for (std::size_t i = 0; i < kLines; i += 100) {
        client.send_chunk(ndjson(i, 100, kPadding));
        sent = i + 100;
      }
      client.end();
    } catch (const std::exception&) {
    }
    done = true;
  });
  // Until the writer makes no progress for half a second (or 60 s pass): the gateway stopped reading.
  std::size_t last = 0;
  auto still_since = std::chrono::steady_clock::now();
  const auto deadline = still_since + 60s;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    if (sent != last) {
      last = sent;
      still_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - still_since > 500ms) {
      break;
    }
  }
  const std::size_t encoded = documents_encoded();
  INFO("sent " << sent.load() << " lines, encoded " << encoded);
  CHECK_FALSE(done.load());
  CHECK(sent < kLines / 2);
  CHECK(encoded < kLines / 4);  // 8 chunks of 100 held, plus what the sockets' buffers hold
  // Reading now lets the rest through, in order.
  const auto answer = client.read_answer();
  writer.join();
  CHECK(answer.status == 200);
  check_in_order(answer.lines, kLines, kPadding);
}

TEST_CASE("a stream ends at its first bad line with an error line, after answering the lines before it",
          "[gateway][stream]") {
  SECTION("a line that is not a document: 400 in an error line, after the 250 before it") {
    Served served(fake_encoder_flow());
    StreamClient client(served.port());
    client.begin("/encode");
    client.send_chunk(ndjson(0, 250) + "{\"text\": 5}\n" + ndjson(251, 1000));
    client.end();
    const auto answer = client.read_answer();
    CHECK(answer.status == 200);
    REQUIRE(answer.lines.size() == 251);
    check_in_order({answer.lines.begin(), answer.lines.end() - 1}, 250);
    const json::value error = json::parse(answer.lines.back()).at("error");
    CHECK(error.at("code") == 400);
    CHECK(error.at("line") == 251);
    CHECK_THAT(std::string(error.at("message").as_string()), testing::contains("line 251"));
  }
  SECTION("a bad first line: a plain 400 naming it") {
    Served served(fake_encoder_flow());
    StreamClient client(served.port());
    client.begin("/encode");
    client.send_chunk("not json\n" + ndjson(1, 10));
    client.end();
    const auto answer = client.read_answer();
    CHECK(answer.status == 400);
    CHECK_THAT(answer.body, testing::contains("line 1:"));
  }
  SECTION("more documents than max_stream_documents: 413 after the first 100") {
    Served served(fake_encoder_flow(), GatewayOptions{.max_stream_documents = 100});
    StreamClient client(served.port());
    client.begin("/encode");
    client.send_chunk(ndjson(0, 150));
    client.end();
    const auto answer = client.read_answer();
    REQUIRE(answer.lines.size() == 101);
    CHECK(json::parse(answer.lines.back()).at("error").at("code") == 413);
    CHECK_THAT(answer.lines.back(), testing::contains("--max-stream-documents"));
  }
  SECTION("a line longer than max_body_bytes: 413") {
    Served served(fake_encoder_flow(), GatewayOptions{.max_body_bytes = 1000});
    StreamClient client(served.port());
    client.begin("/encode");
    client.send_chunk(ndjson(0, 10) + "\"" + std::string(5000, 'y') + "\"\n");
    client.end();
    const auto answer = client.read_answer();
    REQUIRE(answer.lines.size() == 11);
    CHECK_THAT(answer.lines.back(), testing::contains("line 11 is longer than 1000 bytes"));
  }
  SECTION("a body with a Content-Length over max_body_bytes streams as a chunked one does") {
    Served served(fake_encoder_flow(), GatewayOptions{.max_body_bytes = 1000});
    const std::string body = ndjson(0, 400);
    REQUIRE(body.size() > 5000);
    StreamClient client(served.port());
    client.begin_sized("/encode", body.size());
    client.send(body);
    const auto answer = client.read_answer();
    CHECK(answer.status == 200);
    check_in_order(answer.lines, 400);
    // The same with "Expect: 100-continue", which is answered 100 (not 413) before the body is sent.
    StreamClient expecting(served.port());
    expecting.begin_sized("/encode", body.size(), "Expect: 100-continue\r\n");
    const auto interim = expecting.read_answer();
    CHECK(interim.status == 100);
    expecting.send(body);
    const auto streamed = expecting.read_answer();
    CHECK(streamed.status == 200);
    check_in_order(streamed.lines, 400);
  }
  SECTION("a body read whole with a Content-Length over max_body_bytes: 413 before it is read") {
    Served served(fake_encoder_flow(), GatewayOptions{.max_body_bytes = 1000});
    StreamClient client(served.port());
    asio::write(client.socket(), asio::buffer(std::string("POST /encode HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                          "Content-Type: application/json\r\n"
                                                          "Content-Length: 5000\r\n\r\n")));
    CHECK(client.read_answer().status == 413);
  }
  SECTION("an executor that fails: 500 naming the executor and the lines") {
    Flow flow;
    flow.add({.name = "picky", .uses = "FailIf"});
    Served served(std::move(flow));
    StreamClient client(served.port());
    client.begin("/default");
    client.send_chunk(ndjson(0, 300) + "\"FAIL here\"\n" + ndjson(301, 300));
    client.end();
    const auto answer = client.read_answer();
    REQUIRE(answer.lines.size() == 301);  // the chunks of 100 before the failing one, then the error
    CHECK(json::parse(answer.lines.back()).at("error").at("code") == 500);
    CHECK_THAT(answer.lines.back(), testing::contains("executor 'picky' failed"));
    CHECK_THAT(answer.lines.back(), testing::contains("lines 301-400"));
  }
  SECTION("no such endpoint: 404; parameters that are not an object: 400; an empty body: an empty answer") {
    Served served(fake_encoder_flow());
    StreamClient missing(served.port());
    missing.begin("/nope");
    missing.end();
    CHECK(missing.read_answer().status == 404);
    StreamClient bad_parameters(served.port());
    bad_parameters.begin("/encode", "Flowline-Parameters: [1]\r\n");
    bad_parameters.end();
    CHECK(bad_parameters.read_answer().status == 400);
    StreamClient empty(served.port());
    empty.begin("/encode", "Flowline-Parameters: {\"count_tokens\": true}\r\n");
    empty.end();
    const auto answer = empty.read_answer();
    CHECK(answer.status == 200);
    CHECK(answer.body.empty());
  }
}

TEST_CASE("a stream passes its parameters to the executors", "[gateway][stream]") {
  Served served(fake_encoder_flow());
  StreamClient client(served.port());
  client.begin("/encode", "Flowline-Parameters: {\"count_tokens\": true}\r\n");
  client.send_chunk(ndjson(0, 5));
  client.end();
  const auto answer = client.read_answer();
  REQUIRE(answer.lines.size() == 5);
  CHECK(json::parse(answer.lines[2]).at("tags").at("tokens") == 6);  // "line 2"
}

TEST_CASE("a stream whose client goes away cancels its chunks still in the flow", "[gateway][stream][cancellation]") {
  // Chunks of 100 lines, one per batch, each batch 600 ms: ten chunks take 6 s one after the other.
  Flow flow;
  flow.add({.name = "slow",
            .uses = "Delay",
            .with = {{"batch_ms", 600.0}},
            .batching = BatchingOptions{.max_batch_size = 100, .max_delay = std::chrono::microseconds(0)}});
  Served served(std::move(flow));
  {
    StreamClient leaving(served.port());
    leaving.begin("/default");
    leaving.send_chunk(ndjson(0, 1000));  // the body's end never comes: the client closes mid-body
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const auto closed = std::chrono::steady_clock::now();
  Client other(served.port());
  const Reply answer = other.post("/default", R"({"data": [{"text": "after"}]})");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - closed).count();
  CHECK(answer.status == 200);
  // The chunk running when the client left ends (at most one batch), the nine queued behind it are dropped.
  CHECK(seconds < 2.5);
}
