// One HTTP/1.1 request over loopback, on a connection of its own, for tests that talk to a real `flowline serve`
// (or a Prometheus) in another process. Header-only; any test thread may call it; nothing is kept between calls.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace flowline::testing {

struct HttpReply {
  int status = 0;  // 0: no answer (see error)
  std::string body;
  std::string error;  // the connection or read error, the timeout
};

// `verb target` with `body` (sent as JSON when not empty) to 127.0.0.1:port, bounded by `timeout` as a whole.
inline HttpReply http_call(std::uint16_t port, boost::beast::http::verb verb, const std::string& target,
                           const std::string& body = {}, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  http::request<http::string_body> request(verb, target, 11);
  request.set(http::field::host, fmt::format("127.0.0.1:{}", port));
  request.set(http::field::connection, "close");
  if (!body.empty()) request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code failed;
  stream.expires_after(timeout);
  const boost::asio::ip::tcp::endpoint to(boost::asio::ip::make_address("127.0.0.1"), port);
  stream.async_connect(to, [&](beast::error_code ec) {
    if (ec) return void(failed = ec);
    http::async_write(stream, request, [&](beast::error_code ec2, std::size_t) {
      if (ec2) return void(failed = ec2);
      http::async_read(stream, buffer, response, [&](beast::error_code ec3, std::size_t) { failed = ec3; });
    });
  });
  io.run();
  if (failed)
    return {
        0, {}, fmt::format("{} {} on port {}: {}", std::string(http::to_string(verb)), target, port, failed.message())};
  return {static_cast<int>(response.result_int()), response.body(), {}};
}

}  // namespace flowline::testing
