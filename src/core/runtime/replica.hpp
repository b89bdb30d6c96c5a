// A replica: one worker of an executor. The Replica interface is what the runtime needs of it (open, run a
// batch, close); LocalReplica runs an Executor in this process; RemoteReplica (src/core/remote/) runs it on
// an executor server. ReplicaWorker is the loop every replica thread runs: batches from the executor's
// queue, failures isolated, results split back and forwarded, batches a lost replica could not run put back
// in the queue for the others. Private to flowline::core.
#pragma once

#include "batcher.hpp"
#include "observers.hpp"
#include "request.hpp"

#include "flowline/executor.hpp"
#include "flowline/registry.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace flowline::runtime {

// Thrown by Replica::run() when the batch did not run because the replica cannot be reached (a remote host
// lost); the documents are untouched and the worker re-queues the batch for another replica.
class ReplicaUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What Replica::wait_available() found.
enum class Availability {
  Ready,   // take a batch
  Stop,    // the queue is closed: end the loop
  GiveUp,  // no replica of the executor is reachable for too long: fail the batches taken, with
           // unavailable_message()
};

// Threads: every method is called on the replica's own thread, never concurrently.
class Replica {
 public:
  virtual ~Replica() = default;
  // Before the first batch. Throws to fail the flow's start (the message names what went wrong).
  virtual void open() = 0;
  // Runs the executor on `docs` for `endpoint`. Returns the error text, empty on success. On failure `docs`
  // holds what the handler left in it. Throws only ReplicaUnavailable (documents untouched).
  virtual std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) = 0;
  // Before each batch: blocks while the replica cannot take work (a remote host being reconnected);
  // `stop()` says the queue is closed. A local replica is always Ready.
  virtual Availability wait_available(const std::function<bool()>& stop) {
    (void)stop;
    return Availability::Ready;
  }
  virtual std::string unavailable_message() const { return {}; }
  // Whether the last run()'s error is the request's own (the handler threw RequestError; a remote
  // replica's server said so in its answer's status).
  virtual bool last_error_is_request_error() const { return false; }
  // After the last batch, only when open() succeeded, with how the run ended (Executor::run_outcome()).
  // Never throws (failures are logged).
  virtual void close(RunOutcome outcome) noexcept = 0;
  // Filled in by open().
  virtual std::shared_ptr<const ExecutorMetrics> metrics() const { return nullptr; }
  virtual std::optional<std::int64_t> gpu_load_bytes() const { return std::nullopt; }
  // The cancellation of the next run() calls (null: none), set by the worker around each run(). A local
  // replica hands it to the handler (RequestInfo::cancellation); a remote one sends its server a Cancel frame
  // once it is requested (wire version 3, remote_host.hpp).
  void set_cancellation(const Cancellation* cancellation) noexcept { cancellation_ = cancellation; }

 protected:
  const Cancellation* cancellation_ = nullptr;
};

// An Executor constructed in this process from its registry entry. open() constructs it on the calling
// thread (with that thread's device set) and checks that it binds exactly the endpoints its spec declares.
// run() retries a batch that runs out of memory (c10::OutOfMemoryError) in halves, down to single
// documents, so only a document that does not fit alone fails, and its error names it. Before the handler,
// run() checks the request's parameters against the endpoint's declarations (check_request_params): a
// request that breaks them fails as the request's own error, and the handler is not called. The last
// check is kept: the batches of one post share its parameters.
class LocalReplica final : public Replica {
 public:
  LocalReplica(const Registry::Entry& entry, const Params& params, RuntimeInfo runtime)
      : entry_(entry), params_(params), runtime_(std::move(runtime)) {}

  void open() override;
  std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) override;
  bool last_error_is_request_error() const override { return request_error_; }
  void close(RunOutcome outcome) noexcept override;
  std::shared_ptr<const ExecutorMetrics> metrics() const override;
  std::optional<std::int64_t> gpu_load_bytes() const override { return gpu_load_bytes_; }

 private:
  const CheckedRequestParams& checked(const std::string& endpoint, const boost::json::object& parameters);

  bool request_error_ = false;                   // the last run()'s error came from a RequestError
  std::optional<CheckedRequestParams> checked_;  // of checked_endpoint_ and checked_sent_
  std::string checked_endpoint_;
  boost::json::object checked_sent_;
  const Registry::Entry& entry_;
  const Params& params_;
  const RuntimeInfo runtime_;
  std::unique_ptr<Executor> executor_;
  std::optional<std::int64_t> gpu_load_bytes_;
};

// Checks that an executor binds exactly the endpoints `spec` declares (and the default endpoint as the spec
// says). Throws flowline::Error naming the first mismatch.
void check_bound_endpoints(const ExecutorSpec& spec, const Executor& executor);

// The loop of one replica thread. `forward` sends a finished request on (to the next executors or the
// client); it is called for every request the worker takes, failed or not, exactly once.
class ReplicaWorker {
 public:
  using Forward = std::function<void(RequestPtr)>;
  // Puts a request that could not run back at the front of the executor's queue.
  using Requeue = std::function<void(RequestPtr)>;

  ReplicaWorker(Replica& replica, Batcher batcher, Forward forward, const ObserverList& observers,
                const ReplicaPlacement& placement, std::size_t index, Requeue requeue = {})
      : replica_(replica),
        batcher_(std::move(batcher)),
        forward_(std::move(forward)),
        requeue_(std::move(requeue)),
        observers_(observers),
        placement_(placement),
        index_(index) {}

  // Serves batches until the queue is closed and drained.
  void run();
  // One batch: requests that failed upstream, or target another executor, pass straight through; the others run as one
  // handler call, and when that fails with the count unchanged, each request runs again on its own so only the bad one
  // fails. Requests the replica could not run (ReplicaUnavailable) are re-queued, in order, untouched.
  void process(std::vector<RequestPtr> batch);

 private:
  // Fails the requests of `batch` that were cancelled (their poster gave them up) and forwards them, so they
  // never run; returns the others.
  std::vector<RequestPtr> drop_cancelled(std::vector<RequestPtr> batch);
  // Runs `live` as one batch; moves the requests that did not run into `not_run`.
  void run_merged(std::vector<RequestPtr>& live, const PostSession& session, std::vector<RequestPtr>& not_run);
  void requeue(std::vector<RequestPtr> requests);

  Replica& replica_;
  Batcher batcher_;
  Forward forward_;
  Requeue requeue_;
  const ObserverList& observers_;
  const ReplicaPlacement& placement_;
  const std::size_t index_;
};

}  // namespace flowline::runtime
