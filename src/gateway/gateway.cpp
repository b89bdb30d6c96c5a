// The HTTP server of flowline::Gateway (gateway.hpp): Boost.Beast over Boost.Asio, one strand per
// connection, requests handed to the flow with Flow::submit() and answered when the flow calls back.
//
// A connection's life: read the header (answering "Expect: 100-continue"), read the body within
// max_body_bytes, route, then either answer at once or submit to the flow and wait for its callback (or the
// request timeout), write the answer, and read the next request when the connection is kept alive. One
// request at a time per connection, so pipelined requests are answered in order.
#include "flowline/gateway.hpp"

#include "openapi.hpp"
#include "server.hpp"

#include "flowline/error.hpp"
#include "flowline/flow.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/registry.hpp"
#include "flowline/version.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace flowline {

namespace {

// Why the flow cannot take work although it is serving: a remote executor none of whose hosts is
// connected and that runs no replica here (the reason /ready gives); nullopt when every executor can.
std::optional<std::string> unreachable_executor(const Flow& flow) {
  std::set<std::string> with_local;
  bool remote = false;
  for (const auto& e : flow.config().executors) {
    remote |= e.is_remote();
    if (e.is_remote() && e.remote.local_replicas > 0) with_local.insert(e.name);
  }
  if (!remote) return std::nullopt;  // a probe of a flow all in this process gathers no stats
  const FlowStats stats = flow.stats();
  std::map<std::string, std::vector<std::string>> down;  // executor -> its hosts, when none is up
  std::set<std::string> up;
  for (const auto& h : stats.remote_hosts) {
    if (h.connected) up.insert(h.executor);
    down[h.executor].push_back(h.last_error.empty() ? h.address : fmt::format("{}: {}", h.address, h.last_error));
  }
  for (const auto& [executor, hosts] : down)
    if (!up.count(executor) && !with_local.count(executor))
      return fmt::format("no host of executor '{}' is reachable ({})", executor, fmt::join(hosts, "; "));
  return std::nullopt;
}

constexpr std::size_t kMaxHeaderBytes = 16 * 1024;

// Compares two strings in time that depends only on their lengths, not on where they differ.
bool same_secret(std::string_view a, std::string_view b) {
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
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
  parser_->body_limit(gw_.options.max_body_bytes);
  parser_->header_limit(kMaxHeaderBytes);
  stream_.expires_after(gw_.options.idle_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Connection::on_header, shared_from_this()));
}

void Connection::on_header(beast::error_code ec, std::size_t) {
  busy_ = true;
  started_ = Clock::now();
  if (ec) return read_failed(ec);
  const auto& request = parser_->get();
  if (beast::iequals(request[http::field::expect], "100-continue")) {
    if (const auto length = parser_->content_length(); length && *length > gw_.options.max_body_bytes) {
      return read_failed(http::error::body_limit);
    }
    auto reply = std::make_shared<http::response<http::empty_body>>(http::status::continue_, request.version());
    http::async_write(stream_, *reply, [self = shared_from_this(), reply](beast::error_code ec, std::size_t) {
      if (ec) return self->shutdown();
      self->begin_body();
    });
    return;
  }
  begin_body();
}

void Connection::begin_body() {
  if (stream_requested()) return start_stream();
  read_body();
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
  } catch (const gateway::HttpError& e) {
    reply(e.status, e.body);
  } catch (const std::exception& e) {
    reply(500, gateway::plain_error(500, "server_error", e.what()).body);
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
    return reply(413, gateway::plain_error(413, "request_too_large",
                                           fmt::format("the request body is larger than {} bytes (--max-body-bytes)",
                                                       gw_.options.max_body_bytes))
                          .body);
  }
  if (ec == http::error::header_limit) {
    return reply(431, gateway::plain_error(431, "invalid_request_error",
                                           fmt::format("the request header is larger than {} bytes", kMaxHeaderBytes))
                          .body);
  }
  reply(
      400,
      gateway::plain_error(400, "invalid_request_error", fmt::format("malformed HTTP request: {}", ec.message())).body);
}

void Connection::reply(int status, std::string body, std::string_view content_type) {
  timer_.cancel();
  response_ = {};
  response_.result(static_cast<unsigned>(status));
  response_.version(request_.version() ? request_.version() : 11);
  response_.set(http::field::server, "flowline/" FLOWLINE_VERSION_STRING);
  response_.set(http::field::content_type, content_type);
  if (status == 503) response_.set(http::field::retry_after, "1");
  if (status == 401) response_.set(http::field::www_authenticate, "Bearer");
  if (gw_.draining) keep_alive_ = false;
  response_.keep_alive(keep_alive_);
  response_.body() = std::move(body);
  response_.prepare_payload();
  count_answer(status, documents_);
  http::async_write(stream_, response_, beast::bind_front_handler(&Connection::on_write, shared_from_this()));
}

double Connection::elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

void Connection::count_answer(int status, std::size_t documents) {
  const std::size_t counted = status < 400 ? documents : 0;
  gw_.metrics->record_request(route_, status, counted, elapsed_seconds());
  gw_.requests++;
  gw_.documents += counted;
}

void Connection::on_write(beast::error_code ec, std::size_t) {
  if (ec) return shutdown();
  if (!keep_alive_) return linger_close();
  request_ = {};
  documents_ = 0;
  read_header();
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

bool Connection::authorized() const {
  if (gw_.options.token.empty()) return true;
  const std::string_view header = request_[http::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() < kBearer.size() || !beast::iequals(header.substr(0, kBearer.size()), kBearer)) return false;
  return same_secret(header.substr(kBearer.size()), gw_.options.token);
}

void Connection::handle() {
  const std::string_view target = request_.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const http::verb method = request_.method();
  const bool get = method == http::verb::get;
  const bool post = method == http::verb::post;
  auto json_reply = [&](int status, const json::value& v) { reply(status, json::serialize(v)); };
  auto wrong_method = [&] {
    route_ = Route::Other;
    reply(405, R"({"detail":"Method Not Allowed"})");
  };

  // Probes answer without a token, as orchestrators call them.
  if (path == "/health") {
    route_ = Route::Health;
    if (!get) return wrong_method();
    return json_reply(200, json::object{{"status", "ok"}});
  }
  if (path == "/ready") {
    route_ = Route::Ready;
    if (!get) return wrong_method();
    if (!gw_.serving)
      return json_reply(503, json::object{{"ready", false}, {"reason", gw_.draining ? "draining" : "starting"}});
    if (auto unreachable = unreachable_executor(gw_.flow))
      return json_reply(503, json::object{{"ready", false}, {"reason", *unreachable}});
    return json_reply(200, json::object{{"ready", true}});
  }
  if (!authorized()) {
    route_ = Route::Other;
    return reply(401, gateway::plain_error(401, "authentication_error",
                                           "missing or wrong bearer token (send \"Authorization: Bearer <token>\")")
                          .body);
  }
  if (path == "/metrics") {
    route_ = Route::Metrics;
    if (!get) return wrong_method();
    return reply(200, gw_.metrics->scrape(gw_.flow), "text/plain; version=0.0.4; charset=utf-8");
  }
  // GET /status and the other probes are the gateway's; a POST to a flow endpoint of that name (an index's
  // /status) goes to the flow.
  const bool probe =
      path == "/" || path == "/dry_run" || path == "/status" || path == "/openapi.json" || path == "/docs";
  if (probe && !(post && gw_.endpoints.count(std::string(path)))) {
    route_ = Route::Info;
    if (!get) return wrong_method();
    return handle_info(path);
  }

  const auto body = std::string_view(request_.body());
  // OpenAI's and TEI's embeddings, TEI's /rerank (unless the body is Jina's, {"data": ...}, for a flow
  // endpoint of that name), Jina's and Cohere's /v1/rerank (and Cohere's /v2/rerank, which its ClientV2
  // posts the same body to).
  static const std::map<std::string_view, Route> kModelRoutes{
      {"/v1/embeddings", Route::OpenAI}, {"/embeddings", Route::OpenAI}, {"/embed", Route::TEI},
      {"/rerank", Route::TEIRerank},     {"/v1/rerank", Route::Rerank},  {"/v2/rerank", Route::Rerank}};
  if (const auto it = kModelRoutes.find(path); it != kModelRoutes.end()) {
    route_ = it->second;
    if (!post) return wrong_method();
    json::value parsed = gateway::parse_body(body, gw_.limits, false);
    const bool jina_body = parsed.is_object() && parsed.get_object().contains("data");
    if (route_ != Route::TEIRerank || !jina_body) return handle_model_route(parsed);
  }
  // Jina: /post names the endpoint in its body; every flow endpoint has a route of its own.
  std::string endpoint;
  if (path == "/post") {
    route_ = Route::JinaPost;
  } else if (path == "/default" || gw_.endpoints.count(std::string(path))) {
    route_ = Route::Jina;
    endpoint = path == "/default" ? "/" : std::string(path);
  } else {
    route_ = Route::Other;
    return reply(404, R"({"detail":"Not Found"})");
  }
  if (!post) return wrong_method();
  gateway::Call call =
      gateway::parse_jina(gateway::parse_body(body, gw_.limits, true), std::move(endpoint), gw_.limits);
  auto shared = std::make_shared<gateway::Call>();
  shared->parameters = call.parameters;
  shared->request_id = call.request_id;
  call_flow(
      std::move(call), route_, [shared](const DocumentArray& docs) { return gateway::jina_response(*shared, docs); },
      [shared](const Response& r) { return gateway::jina_failure(*shared, r); });
}

// Jina's health and status routes, and the API description.
void Connection::handle_info(std::string_view path) {
  auto json_reply = [&](int status, const json::value& v) { reply(status, json::serialize(v)); };
  if (path == "/") return reply(200, "{}");
  if (path == "/dry_run") {
    if (gw_.serving) return reply(200, R"({"code":0,"description":"","exception":null})");
    return json_reply(503,
                      json::object{{"code", 1}, {"description", "the flow is not serving"}, {"exception", nullptr}});
  }
  if (path == "/status") {
    json::array executors;
    for (const auto& e : gw_.flow.config().executors) {
      executors.push_back(json::object{{"name", e.name}, {"uses", e.uses}, {"replicas", e.replicas}});
    }
    return json_reply(200, json::object{{"jina", json::object{{"flowline", version()}}},
                                        {"envs", json::object{}},
                                        {"executors", std::move(executors)}});
  }
  if (path == "/openapi.json") return reply(200, gw_.openapi);
  return reply(200, gateway::docs_page(gw_.options.title), "text/html; charset=utf-8");
}

void Connection::call_flow(gateway::Call call, Route route, std::function<std::string(const DocumentArray&)> answer,
                           std::function<std::string(const Response&)> failure) {
  route_ = route;
  documents_ = call.docs.size();
  if (!gw_.serving) {
    return reply(503, gateway::plain_error(503, "unavailable", "the gateway is draining: try another replica").body);
  }
  if (gw_.in_flight.fetch_add(1) >= gw_.max_in_flight) {
    gw_.in_flight--;
    gw_.rejected_busy++;
    return reply(503, gateway::plain_error(503, "overloaded",
                                           fmt::format("{} requests are in the flow already (--max-in-flight): retry "
                                                       "after a second",
                                                       gw_.max_in_flight))
                          .body);
  }
  gw_.metrics->set_in_flight(static_cast<double>(gw_.in_flight.load()));
  const std::uint64_t generation = ++generation_;
  timer_.expires_after(gw_.options.request_timeout);
  timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    if (ec || generation != self->generation_) return;
    ++self->generation_;  // the flow's answer, when it comes, is dropped
    self->gw_.timed_out++;
    self->reply(504, gateway::plain_error(504, "timeout",
                                          fmt::format("the flow did not answer within {} ms (--request-timeout)",
                                                      self->gw_.options.request_timeout.count()))
                         .body);
  });
  auto self = shared_from_this();
  auto on_done = [self, generation, answer = std::move(answer),
                  failure = std::move(failure)](Response&& response) mutable {
    // On the replica thread that finished the request: hand over to the connection's strand.
    asio::post(self->stream_.get_executor(), [self, generation, answer = std::move(answer),
                                              failure = std::move(failure), response = std::move(response)]() mutable {
      self->gw_.in_flight--;
      self->gw_.metrics->set_in_flight(static_cast<double>(self->gw_.in_flight.load()));
      if (generation != self->generation_) return;  // answered 504 already
      ++self->generation_;
      try {
        if (response.ok()) {
          self->reply(200, answer(response.docs));
        } else {
          self->reply(500, failure(response));
        }
      } catch (const gateway::HttpError& e) {
        self->reply(e.status, e.body);
      } catch (const std::exception& e) {
        self->reply(500, gateway::plain_error(500, "server_error", e.what()).body);
      }
    });
  };
  try {
    gw_.flow.submit(call.endpoint, std::move(call.docs), std::move(call.parameters), std::move(call.target),
                    std::move(on_done));
  } catch (const std::exception& e) {
    ++generation_;
    gw_.in_flight--;
    reply(503, gateway::plain_error(503, "unavailable", e.what()).body);
  }
}

// ---- Gateway::Impl ----

void Gateway::Impl::start(GatewayOptions o) {
  if (!flow.started()) throw Error("Gateway::start(): start the flow first");
  if (o.max_body_bytes == 0 || o.max_documents == 0 || o.max_json_depth == 0 || o.max_connections == 0) {
    throw Error(
        "Gateway::start(): max_body_bytes, max_documents, max_json_depth and max_connections must be at least 1");
  }
  if (o.request_timeout.count() <= 0 || o.idle_timeout.count() <= 0) {
    throw Error("Gateway::start(): request_timeout and idle_timeout must be positive");
  }
  options = std::move(o);
  limits = gateway::ParseLimits{options.max_documents, options.max_json_depth};
  const FlowOptions& flow_options = flow.config().options;
  max_in_flight = options.max_in_flight;
  if (max_in_flight == 0) {
    max_in_flight = flow_options.queue_capacity > 0 ? flow_options.queue_capacity : flow_options.max_in_flight;
  }
  max_in_flight = std::max<std::size_t>(max_in_flight, 1);
  endpoints.clear();
  for (const auto& e : flow.config().executors) {
    const Registry::Entry* entry = Registry::global().find_registered(e.uses);
    if (!entry) continue;
    for (const auto& endpoint : entry->spec.endpoints) endpoints.insert(endpoint);
  }
  openapi = gateway::openapi_document(options.title, endpoints);

  beast::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec) throw Error(fmt::format("--host '{}': not an IP address ({})", options.host, ec.message()));
  const tcp::endpoint where(address, options.port);
  acceptor.emplace(io);
  auto fail = [&](std::string_view step) {
    const std::string message = fmt::format("{}:{}: {} failed: {}", options.host, options.port, step, ec.message());
    acceptor.reset();
    throw Error(message);
  };
  acceptor->open(where.protocol(), ec);
  if (ec) fail("open");
  acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  acceptor->bind(where, ec);
  if (ec) fail("bind");
  acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  bound_port = acceptor->local_endpoint().port();
  accept();
  work.emplace(io.get_executor());
  int n = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(n, 1);
  for (int i = 0; i < n; ++i) threads.emplace_back([this] { io.run(); });
  serving = true;
  spdlog::info("serving on http://{}:{} ({} I/O threads, at most {} requests in the flow)", options.host, bound_port, n,
               max_in_flight);
}

void Gateway::Impl::accept() {
  acceptor->async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      if (open_connections >= options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        socket.set_option(tcp::no_delay(true), ec);
        auto connection = std::make_shared<Connection>(*this, std::move(socket));
        {
          std::lock_guard lock(connections_mutex);
          connection->registration = connections.insert(connections.end(), connection);
        }
        metrics->set_connections(static_cast<double>(++open_connections));
        connection->start();
      }
    }
    accept();
  });
}

void Gateway::Impl::forget(Connection* connection) {
  {
    std::lock_guard lock(connections_mutex);
    connections.erase(connection->registration);
  }
  metrics->set_connections(static_cast<double>(--open_connections));
}

void Gateway::Impl::stop() {
  if (threads.empty()) return;
  serving = false;
  draining = true;
  asio::post(io, [this] {
    beast::error_code ignored;
    if (acceptor) acceptor->close(ignored);
  });
  // Every request inside the flow is answered before the connections go. The flow's callbacks post to
  // the I/O threads, so they must run until the last one came back, even past request_timeout (whose
  // clients got 504 already).
  auto warn_at = Clock::now() + options.request_timeout;
  while (in_flight > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (Clock::now() > warn_at) {
      spdlog::warn("stopping: still waiting for {} requests inside the flow", in_flight.load());
      warn_at = Clock::now() + std::chrono::seconds(10);
    }
  }
  // Collected under the lock, used and released outside it: dropping the last reference to a connection
  // destroys it, and its destructor takes the lock to unregister.
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(connections_mutex);
    for (auto& weak : connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
  }
  for (auto& connection : open) connection->close_when_idle();
  open.clear();
  const auto closing = Clock::now() + std::chrono::seconds(5);
  while (open_connections > 0 && Clock::now() < closing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  work.reset();
  io.stop();
  for (auto& t : threads) t.join();
  threads.clear();
}

// ---- Gateway ----

void GatewayOptions::apply(const ServeSettings& s) {
  if (s.host) host = *s.host;
  if (s.port) port = static_cast<std::uint16_t>(*s.port);
  if (s.title) title = *s.title;
  if (s.threads) threads = *s.threads;
  if (s.max_body_bytes) max_body_bytes = *s.max_body_bytes;
  if (s.max_documents) max_documents = *s.max_documents;
  if (s.max_json_depth) max_json_depth = *s.max_json_depth;
  if (s.max_in_flight) max_in_flight = *s.max_in_flight;
  if (s.max_connections) max_connections = *s.max_connections;
  if (s.max_stream_documents) max_stream_documents = *s.max_stream_documents;
  if (s.request_timeout) request_timeout = *s.request_timeout;
  if (s.idle_timeout) idle_timeout = *s.idle_timeout;
  if (s.embeddings_endpoint) embeddings_endpoint = *s.embeddings_endpoint;
}

Gateway::Gateway(Flow& flow) : impl_(std::make_unique<Impl>(flow)) {}

std::shared_ptr<Gateway> Gateway::attach_to(Flow& flow) {
  std::shared_ptr<Gateway> gateway(new Gateway(flow));
  flow.attach(gateway->impl_->metrics);
  return gateway;
}

Gateway::~Gateway() { stop(); }

void Gateway::start(GatewayOptions options) { impl_->start(std::move(options)); }
std::uint16_t Gateway::port() const noexcept { return impl_->bound_port; }
void Gateway::stop() { impl_->stop(); }

GatewayStats Gateway::stats() const {
  return GatewayStats{impl_->requests.load(),  impl_->documents.load(), impl_->rejected_busy.load(),
                      impl_->timed_out.load(), impl_->in_flight.load(), impl_->open_connections.load()};
}

}  // namespace flowline
