// Reading a post's requests from its source and delivering its responses in order.
#include "poster.hpp"

namespace flowline::runtime {

RequestPtr Poster::read() {
  auto request = std::make_unique<Request>();
  const auto started = Clock::now();
  try {
    const std::size_t got = source_.read(request->docs, request_size_);
    summary.source_seconds += std::chrono::duration<double>(Clock::now() - started).count();
    if (got == 0) return nullptr;
    summary.input_documents += got;
  } catch (...) {
    failure = std::current_exception();
    return nullptr;
  }
  request->index = next_index_++;
  request->session = &session_;
  return request;
}

bool Poster::deliver_next(const ResponseCallback& on_response, const PostOptions& options, Clock::time_point started) {
  RequestPtr done = session_.wait_for(next_delivery_++);
  const auto deliver_start = Clock::now();
  Response response{done->index, std::move(done->docs), std::move(done->error), std::move(done->error_executor),
                    done->request_error};
  done.reset();
  summary.requests++;
  summary.documents += response.docs.size();
  if (!response.ok()) {
    summary.failed_requests++;
    summary.failed_documents += response.docs.size();
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  bool ok = true;
  if (!failure) {
    try {
      on_response(std::move(response));
      if (options.on_progress) {
        options.on_progress(Progress{summary.documents, summary.requests, summary.failed_requests, summary.seconds});
      }
    } catch (...) {
      failure = std::current_exception();
      ok = false;
    }
  }
  response.docs.clear();  // counted as delivery: the documents are dropped here
  summary.deliver_seconds += std::chrono::duration<double>(Clock::now() - deliver_start).count();
  return ok;
}

}  // namespace flowline::runtime
