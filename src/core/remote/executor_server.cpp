// The executor server (include/flowline/executor_server.hpp): a listener (net/tcp_server.hpp, the skeleton
// the gateway's HTTP front shares), and one Session per client connection reading frames, submitting
// requests to the flow and writing answers as they come.
#include "flowline/executor_server.hpp"

#include "frame_body.hpp"
#include "wire.hpp"

#include "net/tcp_server.hpp"

#include "flowline/error.hpp"
#include "flowline/flow.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace flowline {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

// Compares without leaking where the first difference is through timing.
bool same_token(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

class ServerSession;

struct ExecutorServer::Impl {
  Impl(Flow& flow, std::string executor) : flow(flow), executor(std::move(executor)) {}

  // Sized by start() from options.max_partial_frame_bytes.
  std::unique_ptr<remote::PartialFrameBudget> partial;

  void forget(ServerSession* session);

  Flow& flow;
  const std::string executor;
  std::string executor_type;
  ExecutorServerOptions options;
  std::atomic<std::uint64_t> requests{0}, documents{0}, protocol_errors{0}, in_flight{0};

  // The listener before the threads, so that the io_context goes first: handlers still queued in it hold
  // sessions, which unregister from the listener when destroyed.
  net::Listener<ServerSession> listener;
  net::IoThreads threads;
  asio::io_context& io = threads.context();
  std::uint16_t port = 0;
};

// One client connection. Its handlers run on its strand; the flow's completions post back to it.
class ServerSession : public std::enable_shared_from_this<ServerSession> {
 public:
  net::Listener<ServerSession>::Registration registration;  // set by the listener

  ServerSession(ExecutorServer::Impl& server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        strand_(net::strand_of(socket_, server.io)),
        handshake_timer_(strand_),
        frame_timer_(strand_),
        budget_timer_(strand_),
        body_(*server.partial) {
    boost::system::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }
  ~ServerSession() { server_.forget(this); }

  void start() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      self->handshake_timer_.expires_after(self->server_.options.handshake_timeout);
      self->handshake_timer_.async_wait([self](const boost::system::error_code& ec) {
        if (!ec && !self->greeted_) self->refuse("no Hello frame within the handshake timeout");
      });
      self->read_frame();
    });
  }

  // Closes once what is in flight has been answered (stop()); on the strand.
  void drain() {
    asio::dispatch(strand_, [self = shared_from_this()] {
      self->draining_ = true;
      if (self->in_flight_ == 0) self->close_after_writes();
    });
  }
  std::uint64_t in_flight() const { return in_flight_.load(); }

 private:
  void read_frame() {
    if (closed_ || closing_) return;
    if (in_flight_ >= server_.options.max_in_flight) {  // resumed by an answer
      paused_ = true;
      return;
    }
    asio::async_read(socket_, asio::buffer(prefix_),
                     asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec,
                                                                              std::size_t) { self->on_prefix(ec); }));
  }

  // Before the Hello a frame may be a few KiB at most: a Hello is tens of bytes, and the peer is not yet
  // known to be a client. After it, the documented frame limit holds, and the body is read as it arrives.
  static constexpr std::size_t kMaxFrameBeforeHello = 4096;

  void on_prefix(const boost::system::error_code& ec) {
    if (ec) return close();
    std::uint32_t length = 0;
    try {
      length = wire::read_length(prefix_, greeted_ ? server_.options.max_frame_bytes : kMaxFrameBeforeHello);
    } catch (const wire::WireError& e) {
      return refuse(greeted_ ? std::string(e.what()) : fmt::format("{} (before the Hello frame)", e.what()));
    }
    body_.start(length);
    frame_timer_.expires_after(server_.options.frame_timeout);
    frame_timer_.async_wait([self = shared_from_this(), length](const boost::system::error_code& ec2) {
      if (!ec2) {
        self->refuse(fmt::format("a frame of {} bytes did not arrive within {} ms ({} arrived)", length,
                                 self->server_.options.frame_timeout.count(), self->body_.received()));
        self->close();
      }
    });
    read_body();
  }

  // Reads what has arrived of the body, growing the buffer with it. When every connection's partial frames
  // together hold the budget, waits (the peer's sends stop at TCP's window) and tries again.
  void read_body() {
    if (closed_ || closing_) return;
    const auto buffer = body_.next();
    if (!buffer) {
      budget_timer_.expires_after(std::chrono::milliseconds(5));
      budget_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) self->read_body();
      });
      return;
    }
    socket_.async_read_some(
        *buffer,
        asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (ec) {
            self->frame_timer_.cancel();
            if (ec == asio::error::eof) self->refuse("the connection ended inside a frame");
            return self->close();
          }
          if (!self->body_.arrived(n)) return self->read_body();
          self->frame_timer_.cancel();
          self->on_frame();
        }));
  }

  void on_frame() {
    try {
      const wire::FrameType type = wire::frame_type(body_.frame());
      if (!greeted_ && type != wire::FrameType::Hello) return refuse("expected a Hello frame first");
      switch (type) {
        case wire::FrameType::Hello:
          if (greeted_) return refuse("a second Hello frame");
          if (!hello(wire::decode_hello(body_.frame()))) return;
          break;
        case wire::FrameType::Request:
          request(wire::decode_request(body_.frame(), version_));
          break;
        case wire::FrameType::Cancel:
          if (version_ < 3) return refuse(fmt::format("a Cancel frame on a protocol version {} connection", version_));
          cancel(wire::decode_cancel(body_.frame()));
          break;
        case wire::FrameType::Ping:
          send(wire::encode_ping(wire::FrameType::Pong, wire::decode_ping(body_.frame())));
          break;
        case wire::FrameType::Pong:
          break;
        case wire::FrameType::Error:
          spdlog::warn("executor server: {} sent an error: {}", peer_, wire::decode_error(body_.frame()));
          return close();
        default:
          return refuse(fmt::format("a client may not send frame type {}", static_cast<int>(type)));
      }
    } catch (const wire::WireError& e) {
      return refuse(e.what());
    } catch (const std::exception& e) {  // nothing a client sends may end the I/O thread
      return refuse(fmt::format("cannot read the frame: {}", e.what()));
    }
    body_.finish();  // decoded: the documents own their data now
    read_frame();
  }

  bool hello(const wire::Hello& h) {
    // The highest version both speak (docs/remote-protocol.md, "Versioning").
    const std::uint16_t version = std::min(h.max_version, wire::kVersion);
    if (version < h.min_version || version < wire::kMinVersion) {
      refuse(fmt::format("unsupported protocol version {}..{}: this server speaks versions {}..{}", h.min_version,
                         h.max_version, wire::kMinVersion, wire::kVersion));
      return false;
    }
    if (!server_.options.token.empty() && !same_token(h.token, server_.options.token)) {
      refuse(h.token.empty() ? "this server needs a token" : "wrong token");
      return false;
    }
    greeted_ = true;
    version_ = version;
    handshake_timer_.cancel();
    wire::Welcome welcome;
    welcome.version = version;
    welcome.executor = server_.executor;
    welcome.executor_type = server_.executor_type;
    welcome.max_frame_bytes =
        static_cast<std::uint32_t>(std::min<std::size_t>(server_.options.max_frame_bytes, 0xFFFFFFFFu));
    welcome.max_in_flight = static_cast<std::uint32_t>(server_.options.max_in_flight);
    send(wire::encode_welcome(welcome));
    return true;
  }

  void request(wire::RequestFrame frame) {
    boost::json::object parameters;
    if (!frame.parameters.empty()) {
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(frame.parameters, ec);
      if (ec || !v.is_object()) throw wire::WireError("parameters: expected a JSON object");
      parameters = std::move(v.get_object());
    }
    ++in_flight_;
    ++server_.in_flight;
    const std::uint64_t id = frame.id;
    const std::size_t count = frame.docs.size();
    const std::uint16_t version = version_;
    // The request's flag: set by a Cancel frame, its deadline, or the connection's end (nobody to answer).
    auto flag = std::make_shared<Cancellation::Flag>(false);
    if (const auto [it, fresh] = live_.try_emplace(id, Live{flag, nullptr}); fresh && frame.deadline_ms > 0) {
      it->second.deadline = std::make_shared<asio::steady_timer>(strand_);
      it->second.deadline->expires_after(std::chrono::milliseconds(frame.deadline_ms));
      it->second.deadline->async_wait([flag](const boost::system::error_code& ec) {
        if (!ec) flag->store(true);
      });
    }
    auto done = [self = shared_from_this(), id, count, version](Response&& r) {
      // A RequestError travels as its own status, so the calling flow fails the request as the request's
      // own (422 at its gateway, counted as bad_request), not as this executor's fault.
      const wire::ResponseStatus status = r.ok()            ? wire::ResponseStatus::Ok
                                          : r.request_error ? wire::ResponseStatus::RequestError
                                                            : wire::ResponseStatus::Failed;
      std::string answer;
      try {
        answer = wire::encode_response(id, status, r.error, r.error_executor, r.docs, version);
      } catch (const std::exception& e) {
        answer = wire::encode_response(id, wire::ResponseStatus::Failed,
                                       fmt::format("cannot encode the answer: {}", e.what()), self->server_.executor,
                                       DocumentArray(), version);
      }
      asio::post(self->strand_, [self, answer = std::move(answer), count, id]() mutable {
        self->answered(std::move(answer), count, id);
      });
    };
    try {
      server_.flow.submit(frame.endpoint, std::move(frame.docs), std::move(parameters), {}, std::move(flag),
                          std::move(done));
    } catch (const std::exception& e) {  // the flow is closing
      forget_request(id);
      --in_flight_;
      --server_.in_flight;
      send(wire::encode_response(id, wire::ResponseStatus::Failed, e.what(), server_.executor, DocumentArray(),
                                 version_));
    }
  }

  // A Cancel frame: the request's flag, if it is still in the flow (an id already answered is no error: the
  // answer and the Cancel crossed).
  void cancel(std::uint64_t id) {
    const auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second.flag->store(true);
    spdlog::debug("executor server: request {} from {} cancelled by its client", id, peer_);
  }

  void forget_request(std::uint64_t id) {
    const auto it = live_.find(id);
    if (it == live_.end()) return;
    if (it->second.deadline) it->second.deadline->cancel();
    live_.erase(it);
  }

  void answered(std::string answer, std::size_t documents, std::uint64_t id) {
    forget_request(id);
    --in_flight_;
    --server_.in_flight;
    ++server_.requests;
    server_.documents += documents;
    if (closed_) return;
    send(std::move(answer));
    if (draining_ && in_flight_ == 0) return close_after_writes();
    if (paused_ && in_flight_ < server_.options.max_in_flight) {
      paused_ = false;
      read_frame();
    }
  }

  // A protocol error: say why, log it, close once the Error frame is written.
  void refuse(const std::string& why) {
    if (closing_ || closed_) return;
    ++server_.protocol_errors;
    spdlog::warn("executor server: closing the connection from {}: {}", peer_, why);
    send(wire::encode_error(why));
    close_after_writes();
  }

  void close_after_writes() {
    closing_ = true;
    if (!writing_) close();
  }

  void send(std::string frame) {
    if (closed_) return;
    writes_.push_back(std::move(frame));
    if (!writing_) write_next();
  }

  void write_next() {
    if (writes_.empty()) {
      writing_ = false;
      if (closing_) close();
      return;
    }
    writing_ = true;
    auto frame = std::make_shared<std::string>(std::move(writes_.front()));
    writes_.pop_front();
    asio::async_write(socket_, asio::buffer(*frame),
                      asio::bind_executor(strand_, [self = shared_from_this(), frame](
                                                       const boost::system::error_code& ec, std::size_t) {
                        if (ec) return self->close();
                        self->write_next();
                      }));
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    writes_.clear();
    // Nobody will read the answers: the flow drops these requests or their handlers stop.
    for (auto& [id, live] : live_) live.flag->store(true);
    handshake_timer_.cancel();
    frame_timer_.cancel();
    budget_timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  ExecutorServer::Impl& server_;
  tcp::socket socket_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer handshake_timer_;
  asio::steady_timer frame_timer_;   // a frame's body, once its length has arrived
  asio::steady_timer budget_timer_;  // waiting for room in the partial-frame budget
  std::string peer_;
  unsigned char prefix_[wire::kLengthBytes] = {};
  remote::FrameBody body_;
  std::deque<std::string> writes_;
  // The requests in the flow, by id: their cancellation flags and deadline timers (on the strand).
  struct Live {
    std::shared_ptr<Cancellation::Flag> flag;
    std::shared_ptr<asio::steady_timer> deadline;  // null: no deadline
  };
  std::unordered_map<std::uint64_t, Live> live_;
  std::atomic<std::uint64_t> in_flight_{0};
  std::uint16_t version_ = wire::kVersion;  // the connection's, chosen by hello()
  bool greeted_ = false, paused_ = false, writing_ = false, closing_ = false, closed_ = false, draining_ = false;
};

void ExecutorServer::Impl::forget(ServerSession* session) { listener.forget(session->registration); }

ExecutorServer::ExecutorServer(Flow& flow, std::string executor)
    : impl_(std::make_unique<Impl>(flow, std::move(executor))) {
  for (const auto& e : flow.config().executors) {
    if (e.name == impl_->executor) impl_->executor_type = e.uses;
  }
}

ExecutorServer::~ExecutorServer() { stop(); }

void ExecutorServer::start(ExecutorServerOptions options) {
  Impl& s = *impl_;
  if (s.threads.running()) throw Error("ExecutorServer::start(): already serving");
  if (!s.flow.started()) throw Error("ExecutorServer::start(): the flow is not started");
  if (options.max_in_flight == 0 || options.max_connections == 0 || options.max_frame_bytes < 64)
    throw Error("ExecutorServer::start(): max_in_flight and max_connections must be positive, max_frame_bytes >= 64");
  if (options.max_partial_frame_bytes < options.max_frame_bytes / 4)
    throw Error(
        fmt::format("ExecutorServer::start(): max_partial_frame_bytes {} is below a quarter of max_frame_bytes "
                    "{}: a large frame could wait for room forever",
                    options.max_partial_frame_bytes, options.max_frame_bytes));
  s.options = std::move(options);
  s.partial = std::make_unique<remote::PartialFrameBudget>(s.options.max_partial_frame_bytes);
  s.port = s.listener.bind(s.threads, s.options.host, s.options.port);
  s.listener.accept(
      s.options.max_connections,
      [&s](tcp::socket socket) { return std::make_shared<ServerSession>(s, std::move(socket)); },
      [](ServerSession& session) { session.start(); },
      [&s] { spdlog::warn("executor server: {} connections open, closing a new one", s.listener.open()); });
  s.threads.start(s.options.threads);
}

std::uint16_t ExecutorServer::port() const { return impl_->port; }

void ExecutorServer::stop() {
  Impl& s = *impl_;
  if (!s.threads.running()) return;
  s.listener.close();
  for (auto& session : s.listener.sessions()) session->drain();
  // Answers in flight are written, then each connection closes itself (bounded: a client that stops
  // reading cannot hold the server).
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((s.in_flight > 0 || s.listener.open() > 0) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  s.threads.stop();
  s.listener.release();
}

ExecutorServerStats ExecutorServer::stats() const {
  const Impl& s = *impl_;
  return ExecutorServerStats{s.listener.open(),  s.listener.accepted(),    s.requests.load(),
                             s.documents.load(), s.protocol_errors.load(), s.in_flight.load()};
}

FlowConfig executor_flow(const FlowConfig& config, const std::string& name) {
  FlowConfig out;
  out.options = config.options;
  out.plugins = config.plugins;
  out.source = config.source;
  out.locations = config.locations;
  std::vector<std::string> names;
  for (const auto& e : config.executors) {
    names.push_back(e.name);
    if (e.name != name) continue;
    if (e.uses.empty())
      throw Error(
          fmt::format("executor '{}' has no `uses`: it names only its hosts, so it cannot be served here", name));
    ExecutorConfig served = e;
    served.needs = std::vector<std::string>{};
    if (!served.hosts.empty()) served.shards = 1;  // one host serves one shard of a remote-sharded executor
    served.hosts.clear();
    out.executors.push_back(std::move(served));
    return out;
  }
  throw Error(fmt::format("the flow has no executor '{}' (it has: {})", name, fmt::join(names, ", ")));
}

}  // namespace flowline
