// The HTTP front of flowline::Gateway (include/flowline/gateway.hpp): HttpFront, which owns the acceptor and
// the list of connections, and Connection, one client's keep-alive connection. http_front.cpp has the
// request/response path, http_stream.hpp the NDJSON stream (a class of its own that borrows the connection
// while it answers), model_routes.cpp the model APIs; admission,
// timeouts, the token and the counters are the gateway core's (core.hpp). Private to flowline::gateway.
//
// Threads: the core's io_context runs on the gateway's I/O threads; each Connection's handlers run on its
// own strand (so a Connection's members need no lock); the core's callbacks post to that strand. A
// Connection lives as long as an operation (read, write, timer, flow callback) holds a shared_ptr to it;
// it unregisters itself from the HttpFront when destroyed.
#pragma once

#include "core.hpp"
#include "metrics.hpp"
#include "protocols.hpp"
#include "routes.hpp"

#include "net/tcp_server.hpp"

#include "flowline/flow.hpp"
#include "flowline/gateway.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace flowline::models {
class Tokenizer;  // flowline/models/tokenizer.hpp
}  // namespace flowline::models

namespace flowline::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

class Connection;

// A request header larger than this gets 431 (docs/serving.md's limits table says so).
inline constexpr std::size_t kMaxHeaderBytes = 16 * 1024;

class HttpFront {
 public:
  // Only stores `core` (Gateway::Impl constructs the front before the core: see there).
  explicit HttpFront(Core& core) : core(core) {}

  // Binds and listens on options.host:options.port and starts accepting on the core's io_context (whose
  // threads the caller runs). Throws flowline::Error when the address cannot be bound.
  void start();
  // stop(), after the flow gave every request back: no new connection; idle ones close (waits up to 5 s).
  void stop_accepting() { listener_.close(); }
  // After the I/O threads stopped.
  void release() { listener_.release(); }
  void close_connections();
  void forget(Connection* connection);
  std::uint64_t open_connections() const noexcept { return listener_.open(); }

  Core& core;
  std::string openapi;  // /openapi.json, made at start()
  // TEI's /tokenize: the tokenizer of the flow's first executor with a `model` folder, loaded once at the
  // first request (null with `tokenizer_error` saying why when there is none).
  std::once_flag tokenizer_once;
  std::shared_ptr<const models::Tokenizer> tokenizer;
  std::size_t tokenizer_max_length = 0;  // that executor's max_seq_length (0: none given)
  std::string tokenizer_error;
  std::uint16_t bound_port = 0;

 private:
  net::Listener<Connection> listener_;
};

// One client connection. Lives as long as an operation (read, write, timer, flow callback) holds it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpFront& front, tcp::socket socket) : gw_(front), stream_(std::move(socket)) {}
  ~Connection() {
    gw_.core.http_held.give(held_);
    gw_.forget(this);
  }

  void start() { read_header(); }

  // From stop(), on any thread: closes the connection if it is waiting for a request; otherwise it closes
  // after answering the one it has.
  void close_when_idle();

  net::Listener<Connection>::Registration registration;

  // The handlers of the route table's rows (routes.hpp), on the connection's strand with the request read.
  void handle_health(const RouteRow& row);
  void handle_ready(const RouteRow& row);
  void handle_metrics(const RouteRow& row);
  void handle_info(const RouteRow& row);      // /, /dry_run, /status, /openapi.json, /docs
  void handle_post(const RouteRow& row);      // Jina's /post
  void handle_models(const RouteRow& row);    // OpenAI's GET /v1/models (models.list())
  void handle_tei_info(const RouteRow& row);  // TEI's GET /info
  // The model APIs (model_routes.cpp): each parses its body into a flow call and shapes the answer.
  void handle_openai(const RouteRow& row);
  void handle_cohere_embed(const RouteRow& row);
  void handle_tei(const RouteRow& row);
  void handle_tei_rerank(const RouteRow& row);
  void handle_rerank(const RouteRow& row);
  void handle_tei_predict(const RouteRow& row);
  void handle_classify(const RouteRow& row);
  void handle_tei_tokenize(const RouteRow& row);
  void handle_token_classification(const RouteRow& row);  // Hugging Face's POST /token-classification

  // For the NDJSON stream (http_stream.hpp), which answers the request whose header was read, on this
  // connection's strand, until it hands the connection back with stream_written() or stream_abandoned().
  beast::tcp_stream& transport() { return stream_; }
  beast::flat_buffer& read_buffer() { return buffer_; }
  const http::request<http::string_body>& request() const { return request_; }
  Core& core() { return gw_.core; }
  bool authorized() const;
  void keep_alive(bool keep) { keep_alive_ = keep; }  // whether the connection reads another request after this one
  // Answers at once (also the stream's refusal, or an error before anything of the stream was written).
  void reply(int status, std::string body, std::string_view content_type = "application/json");
  // Counts an answered request in the metrics and stats(); its documents only when the status is below 400.
  void count_answer(int status, std::size_t documents);
  // The stream's last chunk was written (`ok`) or failed: the next request, or the close.
  void stream_written(bool ok);
  // The client went away or stopped reading mid-stream: counted as abandoned, and closed.
  void stream_abandoned();
  void shutdown();

 private:
  void read_header();

  void on_header(beast::error_code ec, std::size_t);

  void read_body();

  void on_read(beast::error_code ec, std::size_t);

  // A request that could not be read: answered when the client can still read an answer, then closed.
  void read_failed(beast::error_code ec);

  // A body that is read whole and whose Content-Length passes max_body_bytes (an NDJSON body never is).
  bool body_too_large();
  // Takes the body's bytes (three times its Content-Length or, chunked, max_body_bytes: http_front.cpp says why)
  // from the core's http_held before the body is read; when they are not there, answers 503 without
  // reading it and returns false.
  bool hold_body();
  // Holds `bytes` in place of what the connection held (the answer's size once it is made; 0 once written).
  void hold_answer(std::size_t bytes);
  void begin_body();  // after the header: read the body whole, or stream it (NDJSON)
  // Dispatches the request read whole: a row of the route table, else a flow endpoint (Jina), else 404.
  void handle();
  // Jina's body for flow endpoint `endpoint` ("/" for /default), answered in Jina's shape.
  void handle_jina(std::string endpoint);
  void wrong_method();
  // Submits `call` through the core; answers with answer(docs), failure(response) when an executor failed,
  // or the core's refusal in the gateway's error shape.
  void call_flow(Call call, Route route, std::function<std::string(const DocumentArray&)> answer,
                 std::function<std::string(const Response&)> failure);
  void answer_call(Outcome&& outcome, const std::function<std::string(const DocumentArray&)>& answer,
                   const std::function<std::string(const Response&)>& failure);
  // While the request is in the flow: waits for the socket to become readable and peeks. End of stream or
  // an error means the client went away: the request's flag is set (the flow drops it or its handler stops)
  // and the connection closes. Bytes mean a pipelined request: left unread for read_header, no more watching.
  void watch_client();
  void on_client_readable(std::uint64_t generation, beast::error_code ec);

  double elapsed_seconds() const;  // since the request's first byte

  void on_write(beast::error_code ec, std::size_t);

  void linger_close();  // after an answer that ends the connection

  HttpFront& gw_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  Clock::time_point started_;
  Route route_ = Route::Other;
  std::optional<Refusal> refusal_;  // why the answer being written refuses, when the core said so
  std::size_t documents_ = 0;
  bool keep_alive_ = true;
  bool busy_ = false;     // between the first byte of a request and its answer written
  std::size_t held_ = 0;  // bytes taken from core.http_held: the body being read or in the flow, or the answer
  std::shared_ptr<Cancellation::Flag> cancel_;  // the request in the flow's flag (null: none in the flow)
  std::uint64_t watch_generation_ = 0;          // a watch_client() wait of an older request does nothing
  bool client_gone_ = false;                    // the client closed while its request was in the flow
};

}  // namespace flowline::gateway
