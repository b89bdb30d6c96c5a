// The Executor base: binding handlers to endpoints, dispatching a batch to its handler, executor metrics.
#include "flowline/executor.hpp"
#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace flowline {

void ExecutorMetrics::add(std::string_view name, double delta) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(name);
  if (it == values_.end())
    values_.emplace(std::string(name), delta);
  else
    it->second += delta;
}

void ExecutorMetrics::set_max(std::string_view name, double value) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(name);
  if (it == values_.end())
    values_.emplace(std::string(name), value);
  else
    it->second = std::max(it->second, value);
}

void ExecutorMetrics::set(std::string_view name, double value) {
  std::lock_guard lock(mutex_);
  auto it = values_.find(name);
  if (it == values_.end())
    values_.emplace(std::string(name), value);
  else
    it->second = value;
}

std::map<std::string, double> ExecutorMetrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return {values_.begin(), values_.end()};
}

Executor::Executor(const ExecutorContext& context) : runtime_(context.runtime), params_(context.params) {}
Executor::~Executor() = default;

void Executor::bind(std::string endpoint, Handler handler) {
  if (endpoint.empty() || endpoint == kDefaultEndpoint) {
    throw ExecutorError(runtime_.name, "bind(): use bind_default() for the default endpoint");
  }
  if (!handler) throw ExecutorError(runtime_.name, fmt::format("bind('{}'): empty handler", endpoint));
  if (!handlers_.emplace(endpoint, std::move(handler)).second) {
    throw ExecutorError(runtime_.name, fmt::format("endpoint '{}' is bound twice", endpoint));
  }
}

void Executor::bind_default(Handler handler) {
  if (!handler) throw ExecutorError(runtime_.name, "bind_default(): empty handler");
  if (default_handler_) throw ExecutorError(runtime_.name, "the default endpoint is bound twice");
  default_handler_ = std::move(handler);
}

void Executor::handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters) {
  handle(endpoint, docs, parameters, nullptr);
}

void Executor::handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters,
                      const Params* declared) {
  handle(endpoint, docs, parameters, declared, nullptr);
}

namespace {
thread_local const Cancellation* current_cancellation = nullptr;

// Sets this thread's cancellation for one handler call; the previous one comes back after it (a handler
// may call another executor's handle()).
class CancellationScope {
 public:
  explicit CancellationScope(const Cancellation* c) : previous_(current_cancellation) { current_cancellation = c; }
  ~CancellationScope() { current_cancellation = previous_; }
  CancellationScope(const CancellationScope&) = delete;
  CancellationScope& operator=(const CancellationScope&) = delete;

 private:
  const Cancellation* previous_;
};
}  // namespace

const Cancellation* this_thread_cancellation() noexcept { return current_cancellation; }

void throw_if_cancelled(std::string_view what) {
  if (current_cancellation && current_cancellation->requested()) {
    throw RequestError(fmt::format("cancelled during {}: the request's deadline passed or its client went away", what));
  }
}

void Executor::handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters,
                      const Params* declared, const Cancellation* cancellation) {
  RequestInfo request{endpoint, parameters, declared};
  request.cancellation = cancellation;
  const CancellationScope scope(cancellation);
  auto it = handlers_.find(endpoint);
  if (it != handlers_.end()) {
    it->second(docs, request);
  } else if (default_handler_) {
    default_handler_(docs, request);
  }
}

bool Executor::has_handler(std::string_view endpoint) const {
  return handlers_.find(endpoint) != handlers_.end() || static_cast<bool>(default_handler_);
}

std::vector<std::string> Executor::bound_endpoints() const {
  std::vector<std::string> out;
  for (const auto& [name, handler] : handlers_) out.push_back(name);
  return out;
}

}  // namespace flowline
