// The HTTP front of flowline::Gateway (include/flowline/gateway.hpp): HttpFront, which owns the acceptor and
// the list of connections, and Connection, one client's keep-alive connection. http_front.cpp has the
// request/response path, http_stream.cpp the NDJSON streams, model_routes.cpp the model APIs; admission,
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

#include "../core/net/tcp_server.hpp"

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

namespace flowline {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using gateway::Route;

class Connection;
struct NdjsonStream;

class HttpFront {
 public:
  // Only stores `core` (Gateway::Impl constructs the front before the core: see there).
  explicit HttpFront(gateway::Core& core) : core(core) {}

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

  gateway::Core& core;
  std::string openapi;  // /openapi.json, made at start()
  std::uint16_t bound_port = 0;

 private:
  net::Listener<Connection> listener_;
};

// One client connection. Lives as long as an operation (read, write, timer, flow callback) holds it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpFront& front, tcp::socket socket) : gw_(front), stream_(std::move(socket)) {}
  ~Connection() { gw_.forget(this); }

  void start() { read_header(); }

  // From stop(), on any thread: closes the connection if it is waiting for a request; otherwise it closes
  // after answering the one it has.
  void close_when_idle();

  net::Listener<Connection>::Registration registration;

  // The handlers of the route table's rows (routes.hpp), on the connection's strand with the request read.
  void handle_health(const gateway::RouteRow& row);
  void handle_ready(const gateway::RouteRow& row);
  void handle_metrics(const gateway::RouteRow& row);
  void handle_info(const gateway::RouteRow& row);    // /, /dry_run, /status, /openapi.json, /docs
  void handle_post(const gateway::RouteRow& row);    // Jina's /post
  void handle_models(const gateway::RouteRow& row);  // OpenAI's GET /v1/models (models.list())
  // The model APIs (model_routes.cpp): each parses its body into a flow call and shapes the answer.
  void handle_openai(const gateway::RouteRow& row);
  void handle_tei(const gateway::RouteRow& row);
  void handle_tei_rerank(const gateway::RouteRow& row);
  void handle_rerank(const gateway::RouteRow& row);

 private:
  void read_header();

  void on_header(beast::error_code ec, std::size_t);

  void read_body();

  void on_read(beast::error_code ec, std::size_t);

  // A request that could not be read: answered when the client can still read an answer, then closed.
  void read_failed(beast::error_code ec);

  void begin_body();  // after the header: read the body whole, or stream it (NDJSON)
  // Dispatches the request read whole: a row of the route table, else a flow endpoint (Jina), else 404.
  void handle();
  // Jina's body for flow endpoint `endpoint` ("/" for /default), answered in Jina's shape.
  void handle_jina(std::string endpoint);
  void wrong_method();
  // Submits `call` through the core; answers with answer(docs), failure(response) when an executor failed,
  // or the core's refusal in the gateway's error shape.
  void call_flow(gateway::Call call, Route route, std::function<std::string(const DocumentArray&)> answer,
                 std::function<std::string(const Response&)> failure);
  void answer_call(gateway::Outcome&& outcome, const std::function<std::string(const DocumentArray&)>& answer,
                   const std::function<std::string(const Response&)>& failure);

  void reply(int status, std::string body, std::string_view content_type = "application/json");
  // Counts an answered request in the metrics and stats(); its documents only when the status is below 400.
  void count_answer(int status, std::size_t documents);
  double elapsed_seconds() const;  // since the request's first byte

  void on_write(beast::error_code ec, std::size_t);

  void shutdown();
  void linger_close();  // after an answer that ends the connection

  // NDJSON streams (http_stream.cpp): POST /<endpoint> or /default with Content-Type application/x-ndjson, one
  // document per line in, one per line out, in input order, in chunks of the flow's request_size with at
  // most kStreamWindow chunks held at a time. Every member runs on the connection's strand.
  bool stream_requested() const;
  void start_stream();
  void stream_pump();  // submits, reads, writes and finishes as far as the state allows
  void stream_read();
  void on_stream_read(const std::shared_ptr<NdjsonStream>& st, beast::error_code ec);
  void stream_lines(NdjsonStream& st, const char* data, std::size_t size);
  void stream_line(NdjsonStream& st, std::string_view line);
  void stream_close_chunk(NdjsonStream& st);
  bool stream_submit(NdjsonStream& st);
  void stream_done(const std::shared_ptr<NdjsonStream>& st, std::uint64_t seq, Response&& response);
  void stream_error(NdjsonStream& st, int status, std::string_view type, std::string message);
  void stream_end_at(NdjsonStream& st, std::uint64_t seq, int status, std::string_view type, std::string message,
                     std::size_t line);
  void stream_write(NdjsonStream& st);
  void stream_finish(NdjsonStream& st);
  void stream_watch(const std::shared_ptr<NdjsonStream>& st);
  void stream_abort();

  bool authorized() const;

  HttpFront& gw_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  Clock::time_point started_;
  Route route_ = Route::Other;
  std::optional<gateway::Refusal> refusal_;  // why the answer being written refuses, when the core said so
  std::size_t documents_ = 0;
  bool keep_alive_ = true;
  bool busy_ = false;                     // between the first byte of a request and its answer written
  std::shared_ptr<NdjsonStream> ndjson_;  // the NDJSON stream being answered, if any
};

}  // namespace flowline
