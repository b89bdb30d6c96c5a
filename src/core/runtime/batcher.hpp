// Dynamic batching: taking a batch of requests from an executor's queue, merging their documents into one
// DocumentArray for one handler call, and splitting the results back to their requests. Private to
// flowline::core (tests include it directly).
//
// The contract, in one place:
// - A batch holds requests of the same endpoint and parameters, in queue order: requests of one post, and
//   of different posts and submits alike (the gateway's many small client requests make GPU-sized
//   batches this way). Without
//   batching options (max_batch_size 0) a batch is one request.
// - take(): waits for a first request, then adds requests while the batch has at most max_batch_size
//   documents, waiting up to max_delay after the first for more (0: only what is already queued). A
//   request that does not fit, or belongs to another post, is carried over to start the next batch: no
//   request is reordered or dropped. A single request larger than max_batch_size is a batch of its own.
// - Splitting back: when the handler returns as many documents as went in, the results go back by
//   position (request i gets its own count of documents, in order). When the count changed (a splitter, a
//   filter), each result goes to the request that held its id, or its parent_id; a result that matches no
//   input fails the whole batch with an error saying so.
// One Batcher belongs to one replica thread; the queue it takes from is shared and thread-safe.
#pragma once

#include "request.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/queue.hpp"

#include <string>
#include <unordered_map>
#include <vector>

namespace flowline::runtime {

using RequestQueue = BoundedQueue<RequestPtr>;

class Batcher {
 public:
  Batcher(RequestQueue& queue, BatchingOptions options) : queue_(queue), options_(options) {}

  // The next batch; empty once the queue is closed and drained (and nothing is carried over).
  std::vector<RequestPtr> take();
  // Whether the queue is closed (and nothing is carried over): take() would return no batch.
  bool closed() const { return !carry_ && queue_.closed(); }

 private:
  RequestQueue& queue_;
  const BatchingOptions options_;
  RequestPtr carry_;  // taken from the queue but left for the next batch
};

// The documents of several requests, concatenated for one handler call, and what it takes to split the
// results back.
struct MergedBatch {
  DocumentArray docs;
  std::vector<std::size_t> counts;                     // documents each request contributed
  std::unordered_map<std::string, std::size_t> owner;  // input document id -> request position
};

// Moves the documents of `requests` into one batch (their docs are left empty).
MergedBatch merge_requests(std::vector<RequestPtr>& requests);

// Gives the results in `merged` back to `requests`, as the contract above says. Returns an empty string,
// or the error that fails every request of the batch (the results that could be placed stay placed).
std::string split_results(MergedBatch& merged, std::vector<RequestPtr>& requests);

}  // namespace flowline::runtime
