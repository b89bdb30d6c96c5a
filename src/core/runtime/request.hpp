// The unit of work inside the runtime: one request (a slice of a post's documents) and the post it belongs
// to, where finished requests wait to be delivered in input order. Private to flowline::core.
#pragma once

#include "flowline/document.hpp"
#include "flowline/executor.hpp"

#include <boost/json/object.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace flowline::runtime {

class PostSession;

// One request travelling through the flow. Owned by whichever queue, replica or join holds it.
struct Request {
  std::uint64_t index = 0;         // position within its post
  PostSession* session = nullptr;  // outlives the request (post() waits for all of its requests)
  DocumentArray docs;
  std::string error;  // set by the first executor that fails it; it then passes through
  std::string error_executor;
  bool request_error = false;  // the executor threw RequestError (Response::request_error)
  bool failed() const noexcept { return !error.empty(); }
};
using RequestPtr = std::unique_ptr<Request>;

// Where finished requests go: the state of one post() call, or of one submit(). complete() is called by
// whichever replica thread finishes a request (after the last join), exactly once per request.
class PostSession {
 public:
  PostSession(std::string endpoint, boost::json::object parameters, std::string target = {})
      : endpoint(std::move(endpoint)), parameters(std::move(parameters)), target(std::move(target)) {}
  virtual ~PostSession() = default;

  // Keeps the request until the posting thread asks for it (wait_for). Notifies under the lock: once the
  // last request is in, the posting thread may return from post() and destroy the session, so nothing
  // may touch it after the lock is released (TSan caught notify_one on a destroyed condition variable).
  virtual void complete(RequestPtr request) {
    std::lock_guard lock(mutex_);
    done_.emplace(request->index, std::move(request));
    ready_.notify_one();
  }
  // Waits for request `index` to be complete and returns it. Posting thread only.
  RequestPtr wait_for(std::uint64_t index) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return done_.count(index) > 0; });
    auto it = done_.find(index);
    RequestPtr request = std::move(it->second);
    done_.erase(it);
    return request;
  }

  // Whether requests of the two sessions may share a batch: the same endpoint, parameters and target, so
  // one handler call serves them all.
  bool batches_with(const PostSession& other) const {
    return this == &other || (endpoint == other.endpoint && target == other.target && parameters == other.parameters);
  }
  // Whether executor `name` handles this session's requests (the others pass them on untouched).
  bool targets(std::string_view name) const { return target.empty() || target == name; }
  // Whether whoever posted gave the requests up (the gateway, at their deadline or when the client went).
  bool cancelled() const noexcept { return cancel && cancel->load(std::memory_order_relaxed); }

  const std::string endpoint;
  const boost::json::object parameters;
  const std::string target;  // empty: every executor; else only the executor of that name
  // Set by the poster, read by replica threads (Flow::submit()); null: never cancelled. Set before the
  // session's first request is queued, constant after.
  std::shared_ptr<const Cancellation::Flag> cancel;

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::unordered_map<std::uint64_t, RequestPtr> done_;
};

// The session of one Flow::submit(): a single request whose completion calls `done` on the replica
// thread that finished it, then deletes the session. Created with new by submit(); it owns itself.
class SubmitSession final : public PostSession {
 public:
  using Done = std::function<void(RequestPtr)>;
  SubmitSession(std::string endpoint, boost::json::object parameters, std::string target, Done done)
      : PostSession(std::move(endpoint), std::move(parameters), std::move(target)), done_(std::move(done)) {}

  void complete(RequestPtr request) override {
    Done done = std::move(done_);
    delete this;  // nothing refers to the session any more: this was its only request
    done(std::move(request));
  }

 private:
  Done done_;
};

}  // namespace flowline::runtime
