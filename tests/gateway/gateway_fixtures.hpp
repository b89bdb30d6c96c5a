// What the gateway's tests share: a fake encoder, a small blocking HTTP client over a real loopback socket
// (Beast), and a Flow served by a Gateway on a port the system picks. Included by test_gateway.cpp and
// test_stream.cpp; everything is inline.
#pragma once

#include "test_support.hpp"

#include "flowline/gateway.hpp"

#include <ATen/ATen.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

namespace gateway_test {

using namespace flowline;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

// Sets each document's embedding to [text length, 0.5, -2] and, when asked with count_tokens, tags
// "tokens" to the text length; records the size of every batch.
class FakeEncoder : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"FakeEncoder", "embeds texts by their length", {}, {"/encode"}}; }
  explicit FakeEncoder(const ExecutorContext& c) : Executor(c) {
    auto handler = [](DocumentArray& docs, const RequestInfo& request) {
      {
        std::lock_guard lock(mutex());
        batches().push_back(docs.size());
      }
      const bool count = request.parameters.contains("count_tokens");
      for (auto& doc : docs) {
        doc.embedding = at::tensor({static_cast<float>(doc.text.size()), 0.5f, -2.0f});
        if (count) doc.tags["tokens"] = static_cast<std::int64_t>(doc.text.size());
      }
    };
    bind("/encode", handler);
    bind_default(handler);
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::size_t>& batches() {
    static std::vector<std::size_t> b;
    return b;
  }
};

struct Reply {
  int status = 0;
  std::string body;
  std::string retry_after;
  json::value json() const { return json::parse(body); }
};

// One keep-alive connection to the gateway.
class Client {
 public:
  explicit Client(std::uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  Reply send(http::verb method, const std::string& target, const std::string& body = {},
             const std::string& token = {}) {
    http::request<http::string_body> request(method, target, 11);
    request.set(http::field::host, "127.0.0.1");
    if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    if (!body.empty()) {
      request.set(http::field::content_type, "application/json");
      request.body() = body;
    }
    request.prepare_payload();
    http::write(socket_, request);
    return receive();
  }
  Reply post(const std::string& target, const std::string& body, const std::string& token = {}) {
    return send(http::verb::post, target, body, token);
  }
  Reply get(const std::string& target) { return send(http::verb::get, target); }
  // Writes raw bytes (a malformed request) and reads the answer.
  Reply raw(const std::string& bytes) {
    asio::write(socket_, asio::buffer(bytes));
    return receive();
  }
  // True when the server has closed the connection (reads end of stream within `wait`).
  bool closed_by_server(std::chrono::milliseconds wait) {
    socket_.non_blocking(false);
    timeval tv{static_cast<long>(wait.count() / 1000), static_cast<long>((wait.count() % 1000) * 1000)};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    return ::recv(socket_.native_handle(), &c, 1, 0) == 0;
  }

 private:
  Reply receive() {
    http::response<http::string_body> response;
    http::read(socket_, buffer_, response);
    return Reply{static_cast<int>(response.result_int()), response.body(),
                 std::string(response[http::field::retry_after])};
  }
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

// A filter before the encoder: drops documents whose text starts with "drop" and reverses the order of the
// rest (so routes that answer by position must match documents to inputs by id).
class DropAndReverse : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"DropAndReverse", "drops texts starting with drop", {}, {}}; }
  explicit DropAndReverse(const ExecutorContext& c) : Executor(c) {
    bind_default([](DocumentArray& docs, const RequestInfo&) {
      auto& all = docs.docs();
      all.erase(std::remove_if(all.begin(), all.end(), [](const Document& d) { return d.text.rfind("drop", 0) == 0; }),
                all.end());
      std::reverse(all.begin(), all.end());
    });
  }
};

// A JSON array of numbers (integers or not) as doubles.
inline std::vector<double> numbers(const json::value& v) {
  std::vector<double> out;
  for (const auto& x : v.as_array()) out.push_back(x.to_number<double>());
  return out;
}

inline std::string jina_body(std::size_t n, std::string_view extra = "") {
  json::array data;
  for (std::size_t i = 0; i < n; ++i) data.push_back(json::object{{"text", fmt::format("doc {}", i)}});
  std::string body = json::serialize(json::object{{"data", std::move(data)}, {"parameters", json::object{}}});
  if (!extra.empty()) body.insert(body.size() - 1, fmt::format(",{}", extra));
  return body;
}

struct Served {
  explicit Served(Flow f, GatewayOptions options = {}) : flow(std::move(f)) {
    gateway = Gateway::attach_to(flow);
    flow.start();
    options.port = 0;
    gateway->start(options);
  }
  ~Served() {
    gateway->stop();
    flow.close();
  }
  std::uint16_t port() const { return gateway->port(); }
  Flow flow;
  std::shared_ptr<Gateway> gateway;
};

// A flow of FakeEncoder, registered once in the global registry (the gateway reads endpoints from there).
inline Flow fake_encoder_flow(BatchingOptions batching = {}) {
  static const bool registered = [] {
    Registry::global().add<FakeEncoder>();
    return true;
  }();
  (void)registered;
  Flow flow;
  flow.add({.name = "encoder", .uses = "FakeEncoder", .batching = batching});
  return flow;
}

// DropAndReverse, then FakeEncoder.
inline Flow dropping_flow() {
  static const bool registered = [] {
    Registry::global().add<DropAndReverse>();
    (void)fake_encoder_flow();  // registers FakeEncoder
    return true;
  }();
  (void)registered;
  Flow out;
  out.add({.name = "filter", .uses = "DropAndReverse"});
  out.add({.name = "encoder", .uses = "FakeEncoder"});
  return out;
}

inline Flow delay_flow(double batch_ms) {
  Flow flow;
  flow.add({.name = "slow", .uses = "Delay", .with = {{"batch_ms", batch_ms}}});
  return flow;
}

}  // namespace gateway_test
