// The gateway's protocol-neutral core (core.hpp): admission, the request timeout, the token, readiness
// and the counters every front shares.
#include "core.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/registry.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <limits>
#include <thread>
#include <vector>

namespace flowline::gateway {

namespace asio = boost::asio;

namespace {

// Why the flow cannot take work although it is serving: a remote executor none of whose hosts is
// connected and that runs no replica here; nullopt when every executor can.
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

// One submitted call: whichever of the flow's answer and the timer comes first delivers the outcome.
struct Pending {
  explicit Pending(const asio::any_io_executor& executor) : timer(executor) {}
  std::atomic<bool> delivered{false};
  asio::steady_timer timer;
  std::function<void(Outcome&&)> done;
};

// Each refusal's HTTP status, the "type" of the gateway's JSON error shape, and the metrics' outcome label,
// in the enum's order.
struct RefusalRow {
  int status;
  const char* type;
  const char* outcome;
};
constexpr RefusalRow kRefusals[] = {
    {400, "invalid_request_error", "bad_request"},  // BadRequest
    {401, "authentication_error", "unauthenticated"},
    {404, "not_found", "not_found"},
    {413, "request_too_large", "too_large"},
    {503, "overloaded", "busy"},
    {503, "unavailable", "unavailable"},
    {504, "timeout", "timeout"},
    {500, "server_error", "failed"},  // Failed
};
static_assert(std::size(kRefusals) == static_cast<std::size_t>(Refusal::Failed) + 1);

const RefusalRow& row_of(Refusal kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return kRefusals[i < std::size(kRefusals) ? i : std::size(kRefusals) - 1];
}

}  // namespace

int http_status(Refusal kind) noexcept { return row_of(kind).status; }

const char* refusal_name(Refusal kind) noexcept { return row_of(kind).outcome; }

const char* error_type(Refusal kind) noexcept { return row_of(kind).type; }

std::optional<Refusal> refusal_of_status(int status) noexcept {
  if (status < 400) return std::nullopt;
  switch (status) {
    case 400:
    case 405:
    case 422:
    case 431:
      return Refusal::BadRequest;
    case 401:
      return Refusal::Unauthenticated;
    case 404:
      return Refusal::NotFound;
    case 413:
      return Refusal::TooLarge;
    case 503:
      return Refusal::Unavailable;
    case 504:
      return Refusal::Timeout;
    default:
      return status < 500 ? Refusal::BadRequest : Refusal::Failed;
  }
}

void Core::configure(GatewayOptions o) {
  if (!flow.started()) throw Error("Gateway::start(): start the flow first");
  if (o.max_body_bytes == 0 || o.max_documents == 0 || o.max_json_depth == 0 || o.max_connections == 0) {
    throw Error(
        "Gateway::start(): max_body_bytes, max_documents, max_json_depth and max_connections must be at least 1");
  }
  if (o.request_timeout.count() <= 0 || o.idle_timeout.count() <= 0) {
    throw Error("Gateway::start(): request_timeout and idle_timeout must be positive");
  }
  if (o.grpc_port && o.grpc_memory_bytes != 0 && o.grpc_memory_bytes / 2 < o.max_body_bytes) {
    throw Error(fmt::format("Gateway::start(): grpc_memory_bytes ({}) must hold two messages of max_body_bytes ({})",
                            o.grpc_memory_bytes, o.max_body_bytes));
  }
  options = std::move(o);
  limits = ParseLimits{options.max_documents, options.max_json_depth};
  const FlowOptions& flow_options = flow.config().options;
  max_in_flight = options.max_in_flight;
  if (max_in_flight == 0) {
    max_in_flight = flow_options.queue_capacity > 0 ? flow_options.queue_capacity : flow_options.max_in_flight;
  }
  max_in_flight = std::max<std::size_t>(max_in_flight, 1);
  const std::size_t most = std::numeric_limits<std::size_t>::max();
  http_held.set_bound(options.max_body_bytes > most / max_in_flight ? most : max_in_flight * options.max_body_bytes);
  grpc_held.set_bound(http_held.bound());
  endpoints.clear();
  for (const auto& e : flow.config().executors) {
    const Registry::Entry* entry = Registry::global().find_registered(e.uses);
    if (!entry) continue;
    for (const auto& endpoint : entry->spec.endpoints) endpoints.insert(endpoint);
  }
}

bool Core::try_enter() {
  if (in_flight.fetch_add(1) >= max_in_flight) {
    in_flight--;
    return false;
  }
  metrics->set_in_flight(static_cast<double>(in_flight.load()));
  return true;
}

void Core::leave() {
  in_flight--;
  metrics->set_in_flight(static_cast<double>(in_flight.load()));
  // A call waiting for this slot starts on an I/O thread: leave() runs on replica threads, where
  // Flow::submit() could block on a full queue.
  if (waiting_count_ > 0) asio::post(io, [this] { admit_waiting(); });
}

void Core::submit(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done,
                  asio::any_io_executor timer) {
  auto refuse = [&](Refusal kind, std::string message) { done(Outcome{Refused{kind, std::move(message)}, {}}); };
  if (!serving_) return refuse(Refusal::Unavailable, "the gateway is draining: try another replica");
  if (!try_enter()) {
    rejected_busy++;
    return refuse(Refusal::Busy, fmt::format("{} requests are in the flow already (--max-in-flight): retry after a "
                                             "second",
                                             max_in_flight));
  }
  start_call(std::move(call), timeout, std::move(done), std::move(timer));
}

void Core::submit_or_wait(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done) {
  if (!serving_) {
    return done(Outcome{Refused{Refusal::Unavailable, "the gateway is draining: try another replica"}, {}});
  }
  bool admitted = false;
  {
    std::lock_guard lock(waiting_mutex_);
    if (waiting_.empty() && try_enter()) {
      admitted = true;  // a slot, and nobody before this call
    } else {
      waiting_.push_back(Waiting{std::move(call), timeout, std::move(done)});
      waiting_count_++;
    }
  }
  if (admitted) return start_call(std::move(call), timeout, std::move(done), {});
  admit_waiting();  // a slot may have come free between the try and the queueing
}

void Core::admit_waiting() {
  for (;;) {
    Waiting next;
    {
      std::lock_guard lock(waiting_mutex_);
      if (waiting_.empty()) return;
      if (serving_ && !try_enter()) return;
      next = std::move(waiting_.front());
      waiting_.pop_front();
      waiting_count_--;
    }
    if (!serving_) {
      next.done(Outcome{Refused{Refusal::Unavailable, "the gateway is draining: try another replica"}, {}});
      continue;
    }
    start_call(std::move(next.call), next.timeout, std::move(next.done), {});
  }
}

void Core::start_call(Call call, std::chrono::milliseconds timeout, std::function<void(Outcome&&)> done,
                      asio::any_io_executor timer) {
  auto pending = std::make_shared<Pending>(timer ? timer : io_threads.next().get_executor());
  pending->done = std::move(done);
  if (!call.cancel) call.cancel = std::make_shared<Cancellation::Flag>(false);
  pending->timer.expires_after(timeout);
  pending->timer.async_wait([this, pending, timeout, cancel = call.cancel](const boost::system::error_code& ec) {
    if (ec || pending->delivered.exchange(true)) return;
    // Nobody waits for the answer now: the flow drops the request, or its handler stops at its next check.
    cancel->store(true);
    timed_out++;
    pending->done(
        Outcome{Refused{Refusal::Timeout,
                        fmt::format("the flow did not answer within {} ms (--request-timeout)", timeout.count())},
                {}});
  });
  auto on_done = [this, pending](Response&& response) {
    // On the replica thread that finished the request.
    leave();
    if (pending->delivered.exchange(true)) return;  // answered as timed out already
    asio::post(pending->timer.get_executor(), [pending] { pending->timer.cancel(); });
    pending->done(Outcome{std::nullopt, std::move(response)});
  };
  try {
    flow.submit(call.endpoint, std::move(call.docs), std::move(call.parameters), std::move(call.target),
                std::move(call.cancel), std::move(on_done));
  } catch (const std::exception& e) {
    leave();
    if (pending->delivered.exchange(true)) return;
    asio::post(pending->timer.get_executor(), [pending] { pending->timer.cancel(); });
    pending->done(Outcome{Refused{Refusal::Unavailable, e.what()}, {}});
  }
}

bool Core::authorized(std::string_view header) const {
  if (options.token.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() < kBearer.size()) return false;
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != std::tolower(static_cast<unsigned char>(kBearer[i])))
      return false;
  }
  return same_secret(header.substr(kBearer.size()), options.token);
}

std::optional<std::string> Core::not_ready() const {
  if (!serving_) return std::string(draining_ ? "draining" : "starting");
  return unreachable_executor(flow);
}

void Core::count_answer(FrontKind front, Route route, int status, std::optional<Refusal> refusal,
                        std::size_t documents_answered, double seconds) {
  const std::size_t counted = status < 400 ? documents_answered : 0;
  if (!refusal) refusal = refusal_of_status(status);
  metrics->record_request(front, route, status, refusal ? refusal_name(*refusal) : "ok", counted, seconds);
  requests++;
  documents += counted;
}

void Core::wait_for_flow() {
  admit_waiting();  // not serving: the waiting calls are refused
  auto warn_at = std::chrono::steady_clock::now() + options.request_timeout;
  while (in_flight > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (std::chrono::steady_clock::now() > warn_at) {
      spdlog::warn("stopping: still waiting for {} requests inside the flow", in_flight.load());
      warn_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
  }
}

}  // namespace flowline::gateway
