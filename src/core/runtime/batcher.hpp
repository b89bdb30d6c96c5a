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
//   documents, waiting up to max_delay after the first for more (0: only what is already queued). Without
//   a max_delay, it waits only under load: while another replica of the executor is running a batch (the
//   device already has work, so a fuller batch costs it nothing), up to an eighth of the executor's recent
//   batch time, at most 1 ms; with every other replica idle it takes what is queued at once. A
//   request that does not fit, or belongs to another post, is carried over to start the next batch: no
//   request is reordered or dropped. A single request larger than max_batch_size is a batch of its own.
// - A replica's batch runs from take() returning it to that replica's next take() (or the Batcher's end):
//   the BatchSource counts the batches running and keeps their recent time for the wait above.
// - An executor's replicas collect one at a time (BatchSource): while one replica fills its batch, the
//   others wait for their turn instead of taking requests as they arrive. Idle replicas racing for each
//   request split a burst of small requests (a gateway's clients) into several part-filled batches; one
//   collector fills a batch before the next replica starts its own. The request carried over belongs to
//   the executor, not to the replica that took it: the next replica to collect starts with it.
// - Splitting back: when the handler returns as many documents as went in, the results go back by
//   position (request i gets its own count of documents, in order). When the count changed (a splitter, a
//   filter), each result goes to the request that held its id, or its parent_id; a result that matches no
//   input fails the whole batch with an error saying so.
// One Batcher belongs to one replica thread; the BatchSource (queue, turn, carried request) is shared by the
// executor's replicas and thread-safe, and outlives them.
#pragma once

#include "request.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/queue.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flowline::runtime {

using RequestQueue = BoundedQueue<RequestPtr>;

// What an executor's replicas take their batches from: its queue, the turn to collect a batch and the
// request carried over to the next batch.
class BatchSource {
 public:
  explicit BatchSource(RequestQueue& queue) : queue_(queue) {}
  BatchSource(const BatchSource&) = delete;
  BatchSource& operator=(const BatchSource&) = delete;

  // Whether the queue is closed and nothing is carried over: a take() would return no batch.
  bool closed() const { return !carrying_.load() && queue_.closed(); }

 private:
  friend class Batcher;
  RequestQueue& queue_;
  std::mutex turn_;                    // held by the replica collecting a batch
  RequestPtr carry_;                   // under turn_: taken from the queue, left for the next batch
  std::atomic<bool> carrying_{false};  // carry_ is set (read by closed() without the turn)
  std::atomic<int> running_{0};        // batches taken and not yet done (each replica's last one)
  // Recent batch time in nanoseconds: a running average over the executor's batches (0: none yet).
  std::atomic<std::int64_t> recent_batch_ns_{0};
};

class Batcher {
 public:
  Batcher(BatchSource& source, BatchingOptions options) : source_(source), options_(options) {}
  // Moved into its replica's worker before the first take(); the batch it counts moves with it.
  Batcher(Batcher&& other) noexcept
      : source_(other.source_),
        options_(other.options_),
        running_(std::exchange(other.running_, false)),
        started_(other.started_) {}
  Batcher& operator=(Batcher&&) = delete;
  ~Batcher() { finish_batch(); }

  // The next batch; empty once the queue is closed and drained (and nothing is carried over). Waits for
  // this replica's turn to collect when batching is on (max_batch_size > 0). Calling it ends the batch
  // this Batcher returned last.
  std::vector<RequestPtr> take();
  bool closed() const { return source_.closed(); }

 private:
  // How long to wait for more requests once a batch has its first (the contract above).
  std::chrono::microseconds wait_for_more() const;
  void start_batch();
  void finish_batch() noexcept;

  BatchSource& source_;
  const BatchingOptions options_;
  bool running_ = false;  // this replica's last batch is counted in source_.running_
  std::chrono::steady_clock::time_point started_;
};

// The wait for more requests when BatchingOptions::max_delay is unset: none while `others_running` (the
// executor's other replicas' batches in flight) is 0, else an eighth of `recent` (the executor's recent batch
// time), at most 1 ms. Pure.
std::chrono::microseconds wait_under_load(int others_running, std::chrono::nanoseconds recent);

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
