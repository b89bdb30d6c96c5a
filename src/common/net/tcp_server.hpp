// The Asio skeleton of flowline's TCP servers — the executor server (src/core/remote/executor_server.cpp) and
// the gateway's HTTP front (src/gateway/http_front.cpp) — so that binding, the accept loop with its
// connection bound, the list of open sessions for a drain and the I/O threads are written once. Header-only,
// private to flowline: src/common is a PRIVATE include folder of flowline_core and flowline_gateway, so
// both write `#include "net/tcp_server.hpp"`.
//
//   net::Listener<Session> listener;             // declared before the threads: see below
//   net::IoThreads threads;                      // owns the io_contexts
//   port = listener.bind(threads, host, port);   // throws "HOST:PORT: bind failed: ..."
//   listener.accept(max_connections, [&](tcp::socket s) { return std::make_shared<Session>(..., std::move(s)); },
//                   [](Session& s) { s.start(); });
//   threads.start(n);
//   ...
//   listener.close();                           // no new connections
//   for (auto& s : listener.sessions()) s->drain();
//   threads.stop();
//   listener.release();                         // the acceptor, before the io_context goes
//
// Threads and ownership: bind(), accept(), close() and IoThreads' start()/stop() are called from the
// controlling thread; the accept loop runs on the first context's thread, each accepted socket on a strand of
// its own over the next context (IoThreads::next()); forget(), sessions() and open() may be called from any thread. The
// listener registers each session it accepts (Session::registration) and the session calls forget(registration) in its
// destructor, so the Listener must outlive its sessions, which the io_context's queued handlers may hold until the
// io_context is destroyed: declare the Listener before the IoThreads (members are destroyed in reverse).
#pragma once

#include "flowline/error.hpp"
#include "thread_name.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace flowline::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// N io_contexts, each run by a thread of its own until stop(); a work guard keeps each running while no
// socket operation is pending (handlers posted from other threads, timers). A listener spreads its connections
// over them (next(), round-robin), so a connection's handlers all run on one thread and the threads share no
// queue: one io_context run by N threads passes every handler through one scheduler lock and wakes threads
// for each other, and its CPU per request grew with the threads (a NoOp flow served with 16 I/O threads on a
// 16-core machine: 243 us of server CPU a request, 52 with a context per thread; docs/benchmarks.md). The first
// context exists from construction (context(): acceptors, timers nobody else owns); start() adds the others.
class IoThreads {
 public:
  IoThreads() { contexts_.push_back(std::make_unique<asio::io_context>(1)); }
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;
  ~IoThreads() { stop(); }

  asio::io_context& context() noexcept { return *contexts_.front(); }
  // The context for a new connection: each in turn (any thread; before start(), the first).
  asio::io_context& next() noexcept {
    return *contexts_[next_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()];
  }
  bool running() const noexcept { return !threads_.empty(); }
  // Starts max(n, 1) threads, one per context. Called once, from the controlling thread, before any of the
  // contexts' handlers can run (so next() never sees the list grow).
  void start(int n) {
    while (contexts_.size() < static_cast<std::size_t>(std::max(n, 1)))
      contexts_.push_back(std::make_unique<asio::io_context>(1));
    for (auto& io : contexts_) {
      work_.emplace_back(io->get_executor());
      threads_.emplace_back([context = io.get()] {
        runtime::name_this_thread("io");
        context->run();
      });
    }
  }
  // Stops the io_contexts (handlers not yet run are dropped) and joins the threads. Idempotent. The
  // contexts stay until the destructor: sockets made on them may outlive the threads.
  void stop() {
    work_.clear();
    for (auto& io : contexts_) io->stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::atomic<std::size_t> next_{0};
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
};

// The strand a Listener gave an accepted socket (over one of the IoThreads' contexts), for a session's own
// timers and posts, so that they run on the socket's thread; a socket made elsewhere gets a new strand over
// `fallback`.
inline asio::strand<asio::io_context::executor_type> strand_of(tcp::socket& socket, asio::io_context& fallback) {
  if (const auto* strand = socket.get_executor().target<asio::strand<asio::io_context::executor_type>>())
    return *strand;
  return asio::make_strand(fallback);
}

// Session: any class with a public member `std::list<std::weak_ptr<Session>>::iterator registration`, whose
// destructor calls listener.forget(registration).
template <class Session>
class Listener {
 public:
  using Registration = typename std::list<std::weak_ptr<Session>>::iterator;

  Listener() = default;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds host:port (port 0: a free one) and listens; returns the bound port. Throws flowline::Error
  // naming the address and the step that failed ("127.0.0.1:8080: bind failed: Address already in use").
  std::uint16_t bind(IoThreads& threads, const std::string& host, std::uint16_t port) {
    threads_ = &threads;
    io_ = &threads.context();
    asio::io_context& io = *io_;
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(host, ec);
    if (ec) throw Error(fmt::format("--host '{}': not an IP address ({})", host, ec.message()));
    const tcp::endpoint where(address, port);
    acceptor_.emplace(io);
    auto check = [&](const char* step) {
      if (!ec) return;
      const std::string message = fmt::format("{}:{}: {} failed: {}", host, port, step, ec.message());
      acceptor_.reset();
      throw Error(message);
    };
    acceptor_->open(where.protocol(), ec);
    check("open");
    acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_->bind(where, ec);
    check("bind");
    acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    check("listen");
    return acceptor_->local_endpoint().port();
  }

  // Accepts connections until close(): while `max_connections` are open a new one is closed at once
  // (`on_refused` is told); otherwise make(socket) builds its session, which is registered and then given
  // to start(). Each socket gets a strand of its own, over the threads' next context.
  void accept(std::size_t max_connections, std::function<std::shared_ptr<Session>(tcp::socket)> make,
              std::function<void(Session&)> start, std::function<void()> on_refused = {}) {
    max_connections_ = max_connections;
    make_ = std::move(make);
    start_ = std::move(start);
    on_refused_ = std::move(on_refused);
    accept_next();
  }

  // Stops accepting (posted to the io_context, so callable from any thread).
  void close() {
    closing_ = true;
    if (!io_) return;
    asio::post(*io_, [this] {
      boost::system::error_code ignored;
      if (acceptor_) acceptor_->close(ignored);
    });
  }

  // After the io_context's threads stopped: the acceptor goes, before the io_context it belongs to.
  void release() { acceptor_.reset(); }

  void forget(Registration registration) {
    std::lock_guard lock(mutex_);
    sessions_.erase(registration);
    --open_;
  }
  // The sessions open now (taken under the lock; the caller drops them outside any lock of theirs, since
  // dropping the last reference runs the destructor, which calls forget()).
  std::vector<std::shared_ptr<Session>> sessions() {
    std::vector<std::shared_ptr<Session>> out;
    std::lock_guard lock(mutex_);
    for (auto& weak : sessions_) {
      if (auto session = weak.lock()) out.push_back(std::move(session));
    }
    return out;
  }
  std::uint64_t open() const noexcept { return open_; }
  std::uint64_t accepted() const noexcept { return accepted_; }

 private:
  void accept_next() {
    acceptor_->async_accept(asio::make_strand(threads_->next()),
                            [this](const boost::system::error_code& ec, tcp::socket socket) {
                              if (ec == asio::error::operation_aborted || closing_ || !acceptor_->is_open()) return;
                              if (!ec) {
                                ++accepted_;
                                if (open_ >= max_connections_) {
                                  boost::system::error_code ignored;
                                  socket.close(ignored);
                                  if (on_refused_) on_refused_();
                                } else {
                                  auto session = make_(std::move(socket));
                                  {
                                    std::lock_guard lock(mutex_);
                                    session->registration = sessions_.insert(sessions_.end(), session);
                                    ++open_;
                                  }
                                  start_(*session);
                                }
                              }
                              accept_next();
                            });
  }

  IoThreads* threads_ = nullptr;
  asio::io_context* io_ = nullptr;  // the acceptor's: threads_->context()
  std::optional<tcp::acceptor> acceptor_;
  std::size_t max_connections_ = 0;
  std::function<std::shared_ptr<Session>(tcp::socket)> make_;
  std::function<void(Session&)> start_;
  std::function<void()> on_refused_;
  std::atomic<bool> closing_{false};
  std::mutex mutex_;
  std::list<std::weak_ptr<Session>> sessions_;
  std::atomic<std::uint64_t> open_{0}, accepted_{0};
};

}  // namespace flowline::net
