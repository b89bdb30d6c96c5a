// A replica: one worker of an executor. The Replica interface is what the runtime needs of it (open, run a
// batch, close); LocalReplica runs an Executor in this process; a replica in another process is a second
// implementation of the same interface. ReplicaWorker is the loop every replica thread runs: batches from
// the executor's queue, failures isolated, results split back and forwarded. Private to flowline::core.
#pragma once

#include "batcher.hpp"
#include "observers.hpp"
#include "request.hpp"

#include "flowline/executor.hpp"
#include "flowline/registry.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flowline::runtime {

// Threads: every method is called on the replica's own thread, never concurrently.
class Replica {
 public:
  virtual ~Replica() = default;
  // Before the first batch. Throws to fail the flow's start (the message names what went wrong).
  virtual void open() = 0;
  // Runs the executor on `docs` for `endpoint`. Returns the error text, empty on success; never throws.
  // On failure `docs` holds what the handler left in it.
  virtual std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) = 0;
  // After the last batch, only when open() succeeded. Never throws (failures are logged).
  virtual void close() noexcept = 0;
  // Filled in by open().
  virtual std::shared_ptr<const ExecutorMetrics> metrics() const { return nullptr; }
  virtual std::optional<std::int64_t> gpu_load_bytes() const { return std::nullopt; }
};

// An Executor constructed in this process from its registry entry. open() constructs it on the calling
// thread (with that thread's device set) and checks that it binds exactly the endpoints its spec declares.
// run() retries a batch that runs out of memory (c10::OutOfMemoryError) in halves, down to single
// documents, so only a document that does not fit alone fails, and its error names it.
class LocalReplica final : public Replica {
 public:
  LocalReplica(const Registry::Entry& entry, const Params& params, RuntimeInfo runtime)
      : entry_(entry), params_(params), runtime_(std::move(runtime)) {}

  void open() override;
  std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) override;
  void close() noexcept override;
  std::shared_ptr<const ExecutorMetrics> metrics() const override;
  std::optional<std::int64_t> gpu_load_bytes() const override { return gpu_load_bytes_; }

 private:
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

  ReplicaWorker(Replica& replica, Batcher batcher, Forward forward, const ObserverList& observers,
                const ReplicaPlacement& placement, std::size_t index)
      : replica_(replica),
        batcher_(std::move(batcher)),
        forward_(std::move(forward)),
        observers_(observers),
        placement_(placement),
        index_(index) {}

  // Serves batches until the queue is closed and drained.
  void run();
  // One batch: requests that failed upstream, or target another executor, pass straight through; the others run as one
  // handler call, and when that fails with the count unchanged, each request runs again on its own so only the bad one
  // fails.
  void process(std::vector<RequestPtr> batch);

 private:
  void run_merged(std::vector<RequestPtr>& live, const PostSession& session);

  Replica& replica_;
  Batcher batcher_;
  Forward forward_;
  const ObserverList& observers_;
  const ReplicaPlacement& placement_;
  const std::size_t index_;
};

}  // namespace flowline::runtime
