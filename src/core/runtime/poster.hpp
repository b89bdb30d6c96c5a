// The posting thread's side of one Flow::post(): reading requests from the source and delivering the
// responses in input order, with the time each takes. One Poster per post() call, used only by the thread
// that called post(). Private to flowline::core.
#pragma once

#include "request.hpp"

#include "flowline/flow_results.hpp"
#include "flowline/io.hpp"

#include <chrono>
#include <exception>

namespace flowline::runtime {

using Clock = std::chrono::steady_clock;

class Poster {
 public:
  Poster(PostSession& session, DocumentSource& source, std::size_t request_size)
      : session_(session), source_(source), request_size_(request_size) {}

  // The next request read from the source, or nullptr at the end of input (or when the source threw:
  // `failure` then holds the exception).
  RequestPtr read();

  // Waits for the oldest request in flight and hands it to the callback (unless an earlier callback or
  // the source failed). Returns false once the callback has failed.
  bool deliver_next(const ResponseCallback& on_response, const PostOptions& options, Clock::time_point started);

  std::uint64_t in_flight() const noexcept { return next_index_ - next_delivery_; }

  PostSummary summary;
  std::exception_ptr failure;  // from the source or the callback; rethrown once nothing is in flight

 private:
  PostSession& session_;
  DocumentSource& source_;
  const std::size_t request_size_;
  std::uint64_t next_index_ = 0, next_delivery_ = 0;
};

}  // namespace flowline::runtime
