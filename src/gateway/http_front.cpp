// The HTTP front of flowline::Gateway (http_front.hpp): Boost.Beast over Boost.Asio, one strand per
// connection, requests handed to the gateway core (core.hpp) and answered when it calls back.
//
// A connection's life: read the header (answering "Expect: 100-continue"), read the body within
// max_body_bytes, route, then either answer at once or submit to the core and wait for its callback (the
// flow's answer, or the request timeout), write the answer, and read the next request when the connection
// is kept alive. One request at a time per connection, so pipelined requests are answered in order.
#include "http_front.hpp"

#include "http_stream.hpp"

#include "openapi.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/version.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <sys/socket.h>

#include <cerrno>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

namespace flowline::gateway {

namespace {
// Frees what `value` holds. Assigning an empty one (`message = {}`, `body = std::string()`) keeps a string's
// buffer in libstdc++: every idle keep-alive connection kept its last body and answer (two 3.5 MB buffers
// each) after giving their bytes back to the front's bound, so that clients which had posted and gone quiet
// took the process past it (bench/gateway_memory.py --idle-after-answer).
template <class T>
void release(T& value) {
  T gone = std::move(value);
  value = T{};
}
}  // namespace

void Connection::close_when_idle() {
  asio::post(stream_.get_executor(), [self = shared_from_this()] {
    if (!self->busy_) self->shutdown();
  });
}

void Connection::read_header() {
  busy_ = false;
  parser_.emplace();
  // The body's bound is set once the header tells whether it streams (begin_body): an NDJSON body of any
  // length is read line by line, each line within max_body_bytes (Beast would refuse its Content-Length
  // with the header already).
  parser_->body_limit(boost::none);
  parser_->header_limit(kMaxHeaderBytes);
  stream_.expires_after(gw_.core.options.idle_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Connection::on_header, shared_from_this()));
}

void Connection::on_header(beast::error_code ec, std::size_t) {
  busy_ = true;
  started_ = Clock::now();
  if (ec) return read_failed(ec);
  const auto& request = parser_->get();
  if (beast::iequals(request[http::field::expect], "100-continue")) {
    if (body_too_large()) return read_failed(http::error::body_limit);
    if (!NdjsonStream::requested(request) && !hold_body()) return;  // refused before the client sends it
    auto reply = std::make_shared<http::response<http::empty_body>>(http::status::continue_, request.version());
    http::async_write(stream_, *reply, [self = shared_from_this(), reply](beast::error_code ec, std::size_t) {
      if (ec) return self->shutdown();
      self->begin_body();
    });
    return;
  }
  begin_body();
}

bool Connection::body_too_large() {
  if (NdjsonStream::requested(parser_->get())) return false;
  const auto length = parser_->content_length();
  return length && *length > gw_.core.options.max_body_bytes;
}

void Connection::begin_body() {
  if (!NdjsonStream::requested(parser_->get())) {
    if (body_too_large()) return read_failed(http::error::body_limit);
    if (held_ == 0 && !hold_body()) return;
    parser_->body_limit(gw_.core.options.max_body_bytes);  // a chunked body, counted as it is read
    return read_body();
  }
  request_.base() = parser_->get().base();
  keep_alive_ = false;  // until the body has been read whole
  route_ = Route::JinaStream;
  NdjsonStream::start(shared_from_this(), *parser_);  // takes the parser's state, when it streams
  parser_.reset();
}

namespace {
// A request's bytes are counted three times: while it is read and parsed the process holds the body, the
// JSON parsed from it and the documents made from it; its answer is text beside the flow's documents it is
// made from. Measured with bench/gateway_memory.py (a NoOp flow, 80 clients posting 30 MB to /post and never
// reading): counted twice, the process peaked at 1.36 x the bound above its idle size; three times, within it.
constexpr std::size_t kHeldPerByte = 3;
}  // namespace

bool Connection::hold_body() {
  // A request without a length is chunked (up to max_body_bytes) or has no body (GET /health).
  const std::size_t length =
      parser_->chunked() ? gw_.core.options.max_body_bytes : parser_->content_length().value_or(0);
  const std::size_t bytes = length > std::numeric_limits<std::size_t>::max() / kHeldPerByte
                                ? std::numeric_limits<std::size_t>::max()
                                : length * kHeldPerByte;
  HeldBytes& held = gw_.core.http_held;
  if (held.try_take(bytes)) {
    held_ = bytes;
    return true;
  }
  // Not read: answered, then the connection closes (what the client still sends is dropped).
  keep_alive_ = false;
  route_ = Route::Other;
  refusal_ = Refusal::Busy;
  gw_.core.rejected_busy++;
  reply(503, plain_error(503, error_type(Refusal::Busy),
                         fmt::format("the gateway holds {} bytes for request bodies and answers not yet read; "
                                     "this body ({} bytes, counted three times) would pass its bound of {} "
                                     "(--max-in-flight x --max-body-bytes): retry after a second",
                                     held.held(), length, held.bound()))
                 .body);
  return false;
}

void Connection::hold_answer(std::size_t bytes) {
  HeldBytes& held = gw_.core.http_held;
  if (bytes > held_) {
    held.take(bytes - held_);
  } else {
    held.give(held_ - bytes);
  }
  held_ = bytes;
}

void Connection::read_body() {
  http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_read, shared_from_this()));
}

void Connection::on_read(beast::error_code ec, std::size_t) {
  if (ec) return read_failed(ec);
  stream_.expires_never();
  request_ = parser_->release();
  parser_.reset();
  keep_alive_ = request_.keep_alive();
  try {
    handle();
  } catch (const HttpError& e) {
    reply(e.status, e.body);
  } catch (const std::exception& e) {
    reply(500, plain_error(500, "server_error", e.what()).body);
  }
}

void Connection::read_failed(beast::error_code ec) {
  keep_alive_ = false;
  route_ = Route::Other;
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == asio::error::eof || ec == http::error::partial_message) {
    // The client went away, or fell silent mid-request for idle_timeout.
    return shutdown();
  }
  if (ec == http::error::body_limit) {
    return reply(413, plain_error(413, "request_too_large",
                                  fmt::format("the request body is larger than {} bytes (--max-body-bytes)",
                                              gw_.core.options.max_body_bytes))
                          .body);
  }
  if (ec == http::error::header_limit) {
    return reply(431, plain_error(431, "invalid_request_error",
                                  fmt::format("the request header is larger than {} bytes", kMaxHeaderBytes))
                          .body);
  }
  reply(400, plain_error(400, "invalid_request_error", fmt::format("malformed HTTP request: {}", ec.message())).body);
}

void Connection::reply(int status, std::string body, std::string_view content_type) {
  response_ = {};
  response_.result(static_cast<unsigned>(status));
  response_.version(request_.version() ? request_.version() : 11);
  response_.set(http::field::server, "flowline/" FLOWLINE_VERSION_STRING);
  response_.set(http::field::content_type, content_type);
  if (status == 503) response_.set(http::field::retry_after, "1");
  if (status == 401) response_.set(http::field::www_authenticate, "Bearer");
  if (gw_.core.draining()) keep_alive_ = false;
  response_.keep_alive(keep_alive_);
  response_.body() = std::move(body);
  response_.prepare_payload();
  hold_answer(response_.body().size() * kHeldPerByte);  // until written, in place of the body's bytes
  // A client that does not read its answer within idle_timeout is disconnected: else it would keep the
  // answer's bytes, and with a few more such clients the bound would refuse every body, for ever.
  stream_.expires_after(gw_.core.options.idle_timeout);
  count_answer(status, documents_);
  http::async_write(stream_, response_, beast::bind_front_handler(&Connection::on_write, shared_from_this()));
}

double Connection::elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

void Connection::count_answer(int status, std::size_t documents) {
  gw_.core.count_answer(FrontKind::Http, route_, status, std::exchange(refusal_, std::nullopt), documents,
                        elapsed_seconds());
}

void Connection::on_write(beast::error_code ec, std::size_t) {
  release(response_);
  hold_answer(0);
  if (ec) return shutdown();
  if (!keep_alive_) return linger_close();
  release(request_);
  documents_ = 0;
  read_header();
}

void Connection::stream_written(bool ok) {
  if (!ok) return shutdown();
  if (!keep_alive_) return linger_close();
  release(request_);
  read_header();
}

void Connection::stream_abandoned() {
  core().metrics->record_request(FrontKind::Http, route_, 499, "abandoned", 0, elapsed_seconds());
  shutdown();
}

void Connection::shutdown() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

// Closing while the client still sends (an answer given before its body was read) would reset the
// connection and could destroy the answer in the client's buffers; so the sending side closes first and
// what the client still sends is read and dropped, for at most a second and 1 MiB, before the close.
void Connection::linger_close() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(1));
  auto scratch = std::make_shared<std::vector<char>>(64 * 1024);
  auto drain = std::make_shared<std::function<void(std::size_t)>>();
  *drain = [self = shared_from_this(), scratch, drain](std::size_t budget) {
    self->stream_.async_read_some(asio::buffer(*scratch),
                                  [self, scratch, drain, budget](beast::error_code ec, std::size_t n) {
                                    if (ec || n >= budget) {
                                      *drain = nullptr;  // breaks the cycle
                                      return self->shutdown();
                                    }
                                    (*drain)(budget - n);
                                  });
  };
  (*drain)(1u << 20);
}

bool Connection::authorized() const { return gw_.core.authorized(request_[http::field::authorization]); }

void Connection::wrong_method() {
  route_ = Route::Other;
  reply(405, R"({"detail":"Method Not Allowed"})");
}

void Connection::handle() {
  const std::string_view target = request_.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const http::verb method = request_.method();
  const bool post = method == http::verb::post;
  const bool flow_endpoint = path == "/default" || gw_.core.endpoints.count(std::string(path)) > 0;
  // A row of the route table, unless a POST goes to a flow endpoint that shares a probe's path (an index's
  // /status).
  const RouteRow* row = find_route(path);
  if (row && post && row->method != Method::Post && flow_endpoint) row = nullptr;
  const auto dispatch = [&] {
    route_ = row->route;
    if (method != (row->method == Method::Get ? http::verb::get : http::verb::post)) return wrong_method();
    (this->*row->handle)(*row);
  };
  if (row && !row->needs_token) return dispatch();  // probes answer without a token, as orchestrators call them
  if (!authorized()) {
    route_ = Route::Other;
    return reply(401, plain_error(401, "authentication_error",
                                  "missing or wrong bearer token (send \"Authorization: Bearer <token>\")")
                          .body);
  }
  if (row) return dispatch();
  // Jina: every flow endpoint has a route of its own.
  if (!flow_endpoint) {
    route_ = Route::Other;
    return reply(404, R"({"detail":"Not Found"})");
  }
  route_ = Route::Jina;
  if (!post) return wrong_method();
  handle_jina(path == "/default" ? "/" : std::string(path));
}

void Connection::handle_jina(std::string endpoint) {
  Call call = parse_jina(parse_body(request_.body(), gw_.core.limits, true), std::move(endpoint), gw_.core.limits);
  auto shared = std::make_shared<Call>();
  shared->parameters = call.parameters;
  shared->request_id = call.request_id;
  shared->names = call.names;
  call_flow(
      std::move(call), route_, [shared](const DocumentArray& docs) { return jina_response(*shared, docs); },
      [shared](const Response& r) { return jina_failure(*shared, r); });
}

// Jina's /post names the endpoint in its body ("execEndpoint").
void Connection::handle_post(const RouteRow&) { handle_jina(std::string()); }

void Connection::handle_health(const RouteRow&) { reply(200, json::serialize(json::object{{"status", "ok"}})); }

void Connection::handle_ready(const RouteRow&) {
  if (auto reason = gw_.core.not_ready())
    return reply(503, json::serialize(json::object{{"ready", false}, {"reason", *reason}}));
  reply(200, json::serialize(json::object{{"ready", true}}));
}

void Connection::handle_metrics(const RouteRow&) {
  reply(200, gw_.core.metrics->scrape(gw_.core.flow), "text/plain; version=0.0.4; charset=utf-8");
}

// Jina's health and status routes, and the API description.
void Connection::handle_info(const RouteRow& row) {
  const std::string_view path = row.path;
  auto json_reply = [&](int status, const json::value& v) { reply(status, json::serialize(v)); };
  if (path == "/") return reply(200, "{}");
  if (path == "/dry_run") {
    if (gw_.core.serving()) return reply(200, R"({"code":0,"description":"","exception":null})");
    return json_reply(503,
                      json::object{{"code", 1}, {"description", "the flow is not serving"}, {"exception", nullptr}});
  }
  if (path == "/status") {
    json::array executors;
    for (const auto& e : gw_.core.flow.config().executors) {
      executors.push_back(json::object{{"name", e.name}, {"uses", e.uses}, {"replicas", e.replicas}});
    }
    return json_reply(200, json::object{{"jina", json::object{{"flowline", version()}}},
                                        {"envs", json::object{}},
                                        {"executors", std::move(executors)}});
  }
  if (path == "/openapi.json") return reply(200, gw_.openapi);
  return reply(200, docs_page(gw_.core.options.title), "text/html; charset=utf-8");
}

void Connection::call_flow(Call call, Route route, std::function<std::string(const DocumentArray&)> answer,
                           std::function<std::string(const Response&)> failure) {
  route_ = route;
  documents_ = call.docs.size();
  release(request_.body());  // parsed into `call`: its bytes stay held (held_) for the documents
  cancel_ = std::make_shared<Cancellation::Flag>(false);
  call.cancel = cancel_;
  auto self = shared_from_this();
  gw_.core.submit(
      std::move(call), gw_.core.options.request_timeout,
      [self, answer = std::move(answer), failure = std::move(failure)](Outcome&& outcome) mutable {
        // On a replica thread (the flow's answer), this strand (a timeout) or at once here (a refusal):
        // posted, so that the answer comes after this call_flow() has returned.
        asio::post(self->stream_.get_executor(), [self, answer = std::move(answer), failure = std::move(failure),
                                                  outcome = std::move(outcome)]() mutable {
          self->answer_call(std::move(outcome), answer, failure);
        });
      },
      stream_.get_executor());
  watch_client();
}

void Connection::watch_client() {
  // Bytes of the next request read with this one (pipelined) are no disconnect; nor is their sender's close.
  if (buffer_.size() > 0) return;
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this(), generation = ++watch_generation_](beast::error_code ec) {
                                self->on_client_readable(generation, ec);
                              });
}

void Connection::on_client_readable(std::uint64_t generation, beast::error_code ec) {
  if (generation != watch_generation_ || !cancel_ || client_gone_) return;  // answered, or another request
  if (ec == asio::error::operation_aborted) return;                         // the connection closed
  if (!ec) {
    char byte = 0;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // a pipelined request: read_header reads it once this one is answered
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch_client();
  }
  // End of stream (recv 0: a client that half-closes its sending side is taken for gone, as nginx does), or
  // a reset: nobody reads the answer. The flow drops the request or its handler stops at its next check.
  client_gone_ = true;
  cancel_->store(true);
  keep_alive_ = false;
  shutdown();
}

void Connection::answer_call(Outcome&& outcome, const std::function<std::string(const DocumentArray&)>& answer,
                             const std::function<std::string(const Response&)>& failure) {
  cancel_.reset();
  if (client_gone_) {
    // Nobody to answer: counted as the client's cancellation (499, as nginx logs a client that closed).
    return gw_.core.metrics->record_request(FrontKind::Http, route_, 499, "cancelled", 0, elapsed_seconds());
  }
  try {
    if (outcome.refused) {
      refusal_ = outcome.refused->kind;  // 503 is Busy or Unavailable: the metrics tell them apart
      const int status = http_status(outcome.refused->kind);
      return reply(status, plain_error(status, error_type(outcome.refused->kind), outcome.refused->message).body);
    }
    if (outcome.response.ok()) return reply(200, answer(outcome.response.docs));
    // The request's own mistake (a parameter out of bounds, an unknown filter operator) is the client's: 422.
    reply(outcome.response.request_error ? 422 : 500, failure(outcome.response));
  } catch (const HttpError& e) {
    reply(e.status, e.body);
  } catch (const std::exception& e) {
    reply(500, plain_error(500, "server_error", e.what()).body);
  }
}

// ---- HttpFront ----

void HttpFront::start() {
  openapi = openapi_document(core.options.title, core.endpoints, &core.flow.config());
  bound_port = listener_.bind(core.io_threads, core.options.host, core.options.port);
  listener_.accept(
      core.options.max_connections,
      [this](tcp::socket socket) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        return std::make_shared<Connection>(*this, std::move(socket));
      },
      [this](Connection& connection) {
        core.metrics->set_connections(static_cast<double>(listener_.open()));
        connection.start();
      });
}

void HttpFront::forget(Connection* connection) {
  listener_.forget(connection->registration);
  core.metrics->set_connections(static_cast<double>(listener_.open()));
}

void HttpFront::close_connections() {
  for (auto& connection : listener_.sessions()) connection->close_when_idle();
  const auto closing = Clock::now() + std::chrono::seconds(5);
  while (listener_.open() > 0 && Clock::now() < closing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace flowline::gateway
