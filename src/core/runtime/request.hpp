// The unit of work inside the runtime: one request (a slice of a post's documents) and the post it belongs
// to, where finished requests wait to be delivered in input order. Private to flowline::core.
#pragma once

#include "flowline/document.hpp"

#include <boost/json/object.hpp>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
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
  bool failed() const noexcept { return !error.empty(); }
};
using RequestPtr = std::unique_ptr<Request>;

// The state of one post() call. complete() is called by whichever thread finishes a request; wait_for()
// by the posting thread only.
class PostSession {
 public:
  PostSession(std::string endpoint, boost::json::object parameters)
      : endpoint(std::move(endpoint)), parameters(std::move(parameters)) {}

  void complete(RequestPtr request) {
    {
      std::lock_guard lock(mutex_);
      done_.emplace(request->index, std::move(request));
    }
    ready_.notify_one();
  }
  // Waits for request `index` to be complete and returns it.
  RequestPtr wait_for(std::uint64_t index) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return done_.count(index) > 0; });
    auto it = done_.find(index);
    RequestPtr request = std::move(it->second);
    done_.erase(it);
    return request;
  }

  const std::string endpoint;
  const boost::json::object parameters;

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::unordered_map<std::uint64_t, RequestPtr> done_;
};

}  // namespace flowline::runtime
