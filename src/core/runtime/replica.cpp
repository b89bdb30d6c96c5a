// Replicas: constructing an executor in this process, running its handler with out-of-memory retries, and
// the worker loop every replica thread runs.
#include "replica.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>

namespace flowline::runtime {

void check_bound_endpoints(const ExecutorSpec& spec, const Executor& executor) {
  std::vector<std::string> declared = spec.endpoints;
  std::sort(declared.begin(), declared.end());
  const auto bound = executor.bound_endpoints();
  for (const auto& e : bound) {
    if (!std::binary_search(declared.begin(), declared.end(), e)) {
      throw Error(fmt::format("{} binds endpoint '{}' which its spec does not declare (declared: {})", spec.name, e,
                              declared.empty() ? std::string("none") : fmt::format("{}", fmt::join(declared, ", "))));
    }
  }
  for (const auto& e : declared) {
    if (!std::binary_search(bound.begin(), bound.end(), e)) {
      throw Error(fmt::format("{} declares endpoint '{}' but its constructor did not bind it", spec.name, e));
    }
  }
  if (spec.default_endpoint != executor.has_default_handler()) {
    throw Error(fmt::format("{} {} the default endpoint but its spec says default_endpoint = {}", spec.name,
                            executor.has_default_handler() ? "binds" : "does not bind", spec.default_endpoint));
  }
}

void LocalReplica::open() {
  set_thread_device(runtime_.device);
  const auto memory_before = device_memory(runtime_.device);
  executor_ = entry_.factory(ExecutorContext{runtime_, params_});
  if (!executor_) throw Error("the factory returned no executor");
  try {
    check_bound_endpoints(entry_.spec, *executor_);
  } catch (...) {
    executor_.reset();
    throw;
  }
  if (memory_before) gpu_load_bytes_ = device_memory(runtime_.device)->allocated - memory_before->allocated;
}

namespace {
// Runs the handler; on c10::OutOfMemoryError splits the batch in halves and retries each, recursively.
// `request_error` is set when the error is the request's own (RequestError).
std::string run_handler(Executor& executor, const std::string& endpoint, DocumentArray& docs,
                        const CheckedRequestParams& parameters, const Cancellation* cancellation, bool& request_error) {
  try {
    executor.handle(endpoint, docs, parameters.parameters, &parameters.declared, cancellation);
    return {};
  } catch (const c10::OutOfMemoryError& e) {
    const std::string what = e.what_without_backtrace();
    const std::string first_line = what.substr(0, what.find('\n'));
    if (docs.size() <= 1) {
      return fmt::format("out of memory on document {} alone: {}", docs.empty() ? "(none)" : docs[0].id, first_line);
    }
    const std::size_t half = docs.size() / 2;
    spdlog::warn("executor '{}' replica {}: out of memory on a batch of {} documents; retrying as {} + {}",
                 executor.runtime().name, executor.runtime().replica, docs.size(), half, docs.size() - half);
    DocumentArray second = docs.take(half, docs.size() - half);
    std::string error = run_handler(executor, endpoint, docs, parameters, cancellation, request_error);
    std::string second_error = run_handler(executor, endpoint, second, parameters, cancellation, request_error);
    docs.append(std::move(second));
    return error.empty() ? second_error : error;
  } catch (const RequestError& e) {
    request_error = true;
    return e.what();
  } catch (const c10::Error& e) {
    // LibTorch's messages carry C++ frames, install paths and load addresses: the log gets all of it, the
    // request (and so the client) the message's first line.
    spdlog::error("executor '{}' replica {}: {}", executor.runtime().name, executor.runtime().replica, e.what());
    const std::string what = e.what_without_backtrace();
    return fmt::format("LibTorch: {} (the detail is in the server's log)", what.substr(0, what.find('\n')));
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}
}  // namespace

const CheckedRequestParams& LocalReplica::checked(const std::string& endpoint, const boost::json::object& parameters) {
  if (checked_ && checked_endpoint_ == endpoint && checked_sent_ == parameters) return *checked_;
  checked_.reset();
  CheckedRequestParams made = check_request_params(entry_.request_params, runtime_.name, endpoint, parameters);
  if (!made.unknown.empty()) {
    spdlog::debug("executor '{}' ({}) on {}: request parameters it does not declare, passed on unchecked: {}",
                  runtime_.name, entry_.spec.name, endpoint, fmt::join(made.unknown, ", "));
  }
  checked_endpoint_ = endpoint;
  checked_sent_ = parameters;
  checked_ = std::move(made);
  return *checked_;
}

std::string LocalReplica::run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) {
  request_error_ = false;
  const CheckedRequestParams* request = nullptr;
  try {
    request = &checked(endpoint, parameters);
  } catch (const RequestError& e) {
    request_error_ = true;
    return e.what();
  }
  return run_handler(*executor_, endpoint, docs, *request, cancellation_, request_error_);
}

void LocalReplica::close(RunOutcome outcome) noexcept {
  if (!executor_) return;
  executor_->set_run_outcome(outcome);
  try {
    executor_->close();
  } catch (const std::exception& e) {
    spdlog::error("executor '{}' replica {}: close() failed: {}", runtime_.name, runtime_.replica, e.what());
  }
  executor_.reset();
}

std::shared_ptr<const ExecutorMetrics> LocalReplica::metrics() const {
  return executor_ ? executor_->shared_metrics() : nullptr;
}

void ReplicaWorker::run() {
  const auto closed = [this] { return batcher_.closed(); };
  while (true) {
    const Availability availability = replica_.wait_available(closed);
    if (availability == Availability::Stop) break;
    std::vector<RequestPtr> batch = batcher_.take();
    if (batch.empty()) break;
    if (availability == Availability::GiveUp) {
      const std::string message = replica_.unavailable_message();
      for (auto& r : batch) {
        if (!r->failed() && r->session->targets(placement_.executor)) {
          r->error = message;
          r->error_executor = placement_.executor;
        }
        forward_(std::move(r));
      }
      continue;
    }
    process(std::move(batch));
  }
}

void ReplicaWorker::requeue(std::vector<RequestPtr> requests) {
  // Back to the front in reverse, so the queue holds them in their order again.
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) requeue_(std::move(*it));
}

std::vector<RequestPtr> ReplicaWorker::drop_cancelled(std::vector<RequestPtr> batch) {
  std::vector<RequestPtr> kept;
  for (auto& request : batch) {
    if (request->session->cancelled()) {
      request->error = "cancelled before it ran: the request's deadline passed or its client went away";
      request->error_executor = placement_.executor;
      request->request_error = true;
      forward_(std::move(request));
    } else {
      kept.push_back(std::move(request));
    }
  }
  return kept;
}

namespace {
// The cancellation of one handler call over `live`: every request's flag, or none when one of them has no
// flag (it can never be cancelled, so neither can the call).
Cancellation cancellation_of(const std::vector<RequestPtr>& live) {
  std::vector<const Cancellation::Flag*> flags;
  for (const auto& r : live) {
    if (!r->session->cancel) return Cancellation{};
    flags.push_back(r->session->cancel.get());
  }
  return Cancellation{std::move(flags)};
}

// Sets the replica's cancellation for one scope (the run() calls of one batch).
class RunCancellation {
 public:
  RunCancellation(Replica& replica, const Cancellation& cancellation) : replica_(replica) {
    replica_.set_cancellation(&cancellation);
  }
  ~RunCancellation() { replica_.set_cancellation(nullptr); }
  RunCancellation(const RunCancellation&) = delete;
  RunCancellation& operator=(const RunCancellation&) = delete;

 private:
  Replica& replica_;
};
}  // namespace

void ReplicaWorker::process(std::vector<RequestPtr> batch) {
  std::vector<RequestPtr> live;
  for (auto& request : batch) {
    if (request->failed() || !request->session->targets(placement_.executor)) {
      forward_(std::move(request));
    } else {
      live.push_back(std::move(request));
    }
  }
  live = drop_cancelled(std::move(live));
  if (live.empty()) return;
  const PostSession& session = *live.front()->session;
  const Cancellation cancellation = cancellation_of(live);
  const RunCancellation run_cancellation(replica_, cancellation);
  const auto started = std::chrono::steady_clock::now();
  std::size_t documents = 0;
  for (const auto& r : live) documents += r->docs.size();

  std::vector<RequestPtr> not_run;
  if (live.size() == 1) {
    try {
      std::string error = replica_.run(session.endpoint, live[0]->docs, session.parameters);
      if (!error.empty()) {
        live[0]->error = std::move(error);
        live[0]->request_error = replica_.last_error_is_request_error();
      }
    } catch (const ReplicaUnavailable&) {
      not_run = std::move(live);
      live.clear();
    }
  } else {
    run_merged(live, session, not_run);
  }
  if (!not_run.empty()) {
    spdlog::debug("executor '{}' replica {}: {} request(s) re-queued", placement_.executor, placement_.replica,
                  not_run.size());
    requeue(std::move(not_run));
  }
  if (live.empty()) return;
  bool failed = false;
  for (auto& r : live) {
    if (r->failed()) {
      failed = true;
      if (r->error_executor.empty()) r->error_executor = placement_.executor;
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  observers_.batch_done(BatchDone{placement_, index_, documents, live.size(), ms, failed});
  for (auto& r : live) forward_(std::move(r));
}

void ReplicaWorker::run_merged(std::vector<RequestPtr>& live, const PostSession& session,
                               std::vector<RequestPtr>& not_run) {
  MergedBatch merged = merge_requests(live);
  std::size_t total = merged.docs.size();
  std::string error;
  try {
    error = replica_.run(session.endpoint, merged.docs, session.parameters);
  } catch (const ReplicaUnavailable&) {
    split_results(merged, live);  // the documents are untouched: back to their requests by position
    not_run = std::move(live);
    live.clear();
    return;
  }
  const bool same_count = merged.docs.size() == total;
  if (!error.empty() && !same_count) {
    for (auto& r : live) r->error = error;
    return;
  }
  const std::string split_error = split_results(merged, live);
  if (!split_error.empty()) {
    for (auto& r : live) r->error = split_error;
    return;
  }
  if (error.empty()) return;
  // Isolate the failure: each request runs on its own, so only the bad one fails. One given up meanwhile
  // does not run again.
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (live[i]->session->cancelled()) {
      live[i]->error = "cancelled: the request's deadline passed or its client went away";
      live[i]->request_error = true;
      continue;
    }
    const Cancellation alone =
        live[i]->session->cancel ? Cancellation{{live[i]->session->cancel.get()}} : Cancellation{};
    const RunCancellation run_alone(replica_, alone);
    try {
      std::string own = replica_.run(session.endpoint, live[i]->docs, session.parameters);
      if (!own.empty()) {
        live[i]->error = std::move(own);
        live[i]->request_error = replica_.last_error_is_request_error();
      }
    } catch (const ReplicaUnavailable&) {  // those not run yet go to another replica
      std::move(live.begin() + static_cast<std::ptrdiff_t>(i), live.end(), std::back_inserter(not_run));
      live.resize(i);
      return;
    }
  }
}

}  // namespace flowline::runtime
