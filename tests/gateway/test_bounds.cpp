// The HTTP front's memory bound in process (src/gateway/http_front.cpp, Core::http_held): answers a client
// does not read count against it, and such a client is disconnected after --idle-timeout so that its bytes
// come back. (The bound under 80 real clients, RSS from /proc: bench/gateway_memory.py, a ctest of its own.)
#include "gateway_fixtures.hpp"

#include <thread>

using namespace gateway_test;

namespace {

// A Jina body of `n` documents of 64 KiB texts.
std::string large_jina_body(std::size_t n) {
  const std::string doc = "{\"text\":\"" + std::string(64 * 1024, 'x') + "\"}";
  std::string body = "{\"data\":[";
  for (std::size_t i = 0; i < n; ++i) body += (i ? "," : "") + doc;
  return body + "]}";
}

}  // namespace

TEST_CASE("an answer its client does not read counts against the bound until the client is disconnected",
          "[gateway][bounds]") {
  using namespace std::chrono_literals;
  // One request in flight of at most 32 MiB: the bound is 32 MiB. The answer of a 20 MB request, counted
  // three times, passes it, and does not fit in the sockets' buffers (loopback: a few MB each way).
  Served served(delay_flow(0), GatewayOptions{.max_in_flight = 1, .idle_timeout = 1500ms});
  const std::string body = large_jina_body(300);
  REQUIRE(body.size() > 19'000'000);
  asio::io_context io;
  tcp::socket hog(io);
  hog.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), served.port()));
  asio::write(hog, asio::buffer(fmt::format("POST /default HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                            "application/json\r\nContent-Length: {}\r\n\r\n{}",
                                            body.size(), body)));
  // The hog never reads. Its answer is made within a second; from then on a small request is refused.
  const auto started = std::chrono::steady_clock::now();
  Reply refused;
  for (int i = 0; i < 20; ++i) {
    refused = Client(served.port()).post("/default", jina_body(1));
    if (refused.status == 503) break;
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(refused.status == 503);
  CHECK(refused.retry_after == "1");
  CHECK_THAT(refused.body, testing::contains("answers not yet read"));
  CHECK(Client(served.port()).get("/health").status == 200);  // a request without a body still answers
  // After idle_timeout the hog is disconnected and its bytes come back: the same request is answered.
  Reply answered;
  while (std::chrono::steady_clock::now() - started < 10s) {
    answered = Client(served.port()).post("/default", jina_body(1));
    if (answered.status == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(answered.status == 200);
  CHECK(std::chrono::steady_clock::now() - started >= 1s);
}
