// The gateway's core, shared by its fronts: the HTTP front (http_front.cpp, http_stream.cpp) and the gRPC
// front (grpc_front.cpp, when built). A front turns its protocol's messages into a gateway::Call and hands
// it to Core::submit(); the core owns what every protocol shares — the flow, admission (requests inside the
// flow at once), the request timeout, the bearer token, readiness, the counters of stats() and the
// Prometheus metrics — and says why it refuses a request in a protocol-neutral Refusal that each front maps
// to its own code (http_status() here, the gRPC front's grpc_code()). A third protocol is a third front
// file over this core. Private to flowline::gateway.
//
// Threads and ownership: Gateway::Impl owns one Core, which owns the I/O threads that run `io`; the fronts
// hold a reference. configure() and the serving switches (begin_serving(), begin_draining()) are called from the
// controlling thread (start/stop); everything else from any thread. submit()'s `done` runs exactly once: at once on
// the calling thread (a refusal), on a replica thread (the flow's answer) or on the timer's executor (a timeout);
// a front hands it over to its own context.
#pragma once

#include "metrics.hpp"
#include "protocols.hpp"

#include "net/tcp_server.hpp"

#include "flowline/flow.hpp"
#include "flowline/gateway.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flowline::gateway {

// Why the gateway refuses a request, whatever the protocol.
enum class Refusal {
  BadRequest,       // malformed or invalid: HTTP 400, gRPC INVALID_ARGUMENT
  Unauthenticated,  // missing or wrong bearer token: 401, UNAUTHENTICATED
  NotFound,         // no such endpoint or route: 404, NOT_FOUND
  TooLarge,         // body, message or documents beyond a limit: 413, RESOURCE_EXHAUSTED
  Busy,             // max_in_flight requests are in the flow already: 503 + Retry-After, UNAVAILABLE
  Unavailable,      // draining, or the flow cannot take work: 503, UNAVAILABLE
  Timeout,          // the flow did not answer within the request timeout: 504, DEADLINE_EXCEEDED
  Failed,           // an executor failed the request: 500, answered in each protocol's error shape
};
int http_status(Refusal kind) noexcept;
// The metrics' outcome label: "bad_request", "unauthenticated", ... ("ok" for an answered request).
const char* refusal_name(Refusal kind) noexcept;
// The refusal an HTTP status stands for (400, 405, 422, 431: BadRequest; 503: Unavailable; ...); nullopt
// below 400. What a front counts when the status is all it knows.
std::optional<Refusal> refusal_of_status(int status) noexcept;
// The "type" of the gateway's own JSON error shape (plain_error): "overloaded", "timeout", ...
const char* error_type(Refusal kind) noexcept;

struct Refused {
  Refusal kind;
  std::string message;
};

// A request refused while it is read (by a front's parser): the kind, and the message that says where and
// what was expected.
class RefusedError : public std::runtime_error {
 public:
  RefusedError(Refusal kind, const std::string& message) : std::runtime_error(message), kind(kind) {}
  Refusal kind;
};

// The bytes of request bodies and answers a front holds, against one bound for all its connections: a
// connection takes a body's bytes before it reads the body (and is refused when they are not there), keeps
// them while the flow works, trades them for its answer's bytes once the answer is made, and gives them
// back once the answer is written — so answers a client does not read keep counting, and new bodies are
// refused until they are read. Any thread (atomics).
class HeldBytes {
 public:
  // `bound`: 0 means none.
  void set_bound(std::size_t bound) { bound_ = bound; }
  std::size_t bound() const { return bound_; }
  std::size_t held() const { return held_.load(); }
  // Takes `n` bytes when they fit under the bound, or when nothing is held (one request larger than the
  // bound alone still goes through: max_body_bytes may pass the bound when max_in_flight is small). False:
  // nothing taken.
  bool try_take(std::size_t n) {
    std::size_t now = held_.load();
    do {
      if (bound_ != 0 && now != 0 && n > bound_ - std::min(now, bound_)) return false;
    } while (!held_.compare_exchange_weak(now, now + n));
    return true;
  }
  // Takes `n` bytes whatever the bound (an answer made for a body that was admitted): later bodies wait.
  void take(std::size_t n) { held_ += n; }
  void give(std::size_t n) { held_ -= n; }

 private:
  std::size_t bound_ = 0;
  std::atomic<std::size_t> held_{0};
};

// What became of a submitted call: the flow's Response, or the core's refusal (Busy, Unavailable, Timeout).
struct Outcome {
  std::optional<Refused> refused;
  Response response;
};

class Core {
 public:
  explicit Core(Flow& flow) : flow(flow), metrics(std::make_shared<GatewayMetrics>()) {}
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Checks the options and derives the limits, the in-flight bound and the flow's endpoints. Throws
  // flowline::Error naming an option out of range.
  void configure(GatewayOptions o);

  // Hands `call` to the flow when a slot is free and the gateway serves; `done` gets the flow's answer, or
  // a refusal: Busy or Unavailable at once (on this thread), Timeout once `timeout` passed without the
  // flow's answer (whose late arrival then only frees its slot). `timer`: the executor the timeout's timer runs
  // on, the caller's (its connection's strand), so that the timer stays on its thread; none: the I/O threads'
  // next context.
  void submit(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done,
              boost::asio::any_io_executor timer = {});

  // submit(), except that a call finding no free slot waits for one (in arrival order) instead of being
  // refused Busy: for fronts whose clients are held back by a window of their own (gRPC streams), so that
  // the waiting is bounded by the windows. Draining refuses the waiting calls (Unavailable).
  void submit_or_wait(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done);

  // Admission for fronts that pace their own submissions (the NDJSON streams): try_enter() takes a slot
  // (false: none free), leave() gives it back once the flow answered.
  bool try_enter();
  void leave();

  // True when no token is set, or `authorization` is "Bearer <token>" (compared in constant time).
  bool authorized(std::string_view authorization) const;
  // Why the gateway is not ready ("starting", "draining", an unreachable remote executor); nullopt: ready.
  std::optional<std::string> not_ready() const;
  bool has_endpoint(const std::string& endpoint) const { return endpoints.count(endpoint) > 0; }

  // One answered request of any front: metrics ({front, route, outcome}, and HTTP's {route, status} with
  // the latency) and stats(). `refusal`: why it was refused, when the front knows (else from the status).
  void count_answer(FrontKind front, Route route, int status, std::optional<Refusal> refusal, std::size_t documents,
                    double seconds);
  // The serving switches, turned by Gateway::Impl from the controlling thread and read by the fronts from
  // any thread: begin_serving() once every front listens (ready); begin_draining() when stop() begins
  // (answer what is in flight, take nothing new: submit() refuses Unavailable from then on).
  void begin_serving() { serving_ = true; }
  void begin_draining() {
    serving_ = false;
    draining_ = true;
  }
  bool serving() const { return serving_; }    // started and not draining: ready
  bool draining() const { return draining_; }  // stop() began
  // Waits until every request inside the flow came back (stop(), after begin_draining()).
  void wait_for_flow();

  Flow& flow;
  std::shared_ptr<GatewayMetrics> metrics;
  GatewayOptions options;
  ParseLimits limits;
  std::size_t max_in_flight = 0;
  std::set<std::string> endpoints;  // the flow's endpoints, as Jina routes ("/encode"; "/default" is "/")
  // The HTTP front's bodies and answers (read whole; NDJSON streams bound theirs per stream): at most
  // max_in_flight x max_body_bytes, set by configure().
  HeldBytes http_held;
  // The gRPC front's messages and answers not yet written, over all its streams and calls: the same bound
  // (past it a request is refused RESOURCE_EXHAUSTED; gRPC's own buffers are its resource quota's).
  HeldBytes grpc_held;

  std::int64_t started_unix = 0;  // when start() began serving (seconds since the epoch)
  std::atomic<std::uint64_t> in_flight{0}, requests{0}, documents{0}, rejected_busy{0}, timed_out{0};

  // The gateway's I/O threads (started and stopped by Gateway::Impl), an io_context each: they run the HTTP
  // front's connections and the timers of submit(); `io` is the first one's (the acceptor, admit_waiting()).
  net::IoThreads io_threads;
  boost::asio::io_context& io = io_threads.context();

 private:
  // After admission: the timer and the flow.
  void start_call(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done,
                  boost::asio::any_io_executor timer);
  // Starts waiting calls while slots are free (on an I/O thread, or the caller's).
  void admit_waiting();

  struct Waiting {
    Call call;
    std::chrono::milliseconds timeout;
    std::function<void(Outcome&&)> done;
  };
  std::atomic<bool> serving_{false}, draining_{false};
  std::mutex waiting_mutex_;
  std::deque<Waiting> waiting_;
  std::atomic<std::size_t> waiting_count_{0};
};

}  // namespace flowline::gateway
