// Per-replica accounting as an observer: documents, batches, errors and batch-time percentiles of every
// replica, plus its executor's own metrics and GPU load, for Flow::stats(). Private to flowline::core.
// Hooks come from replica threads concurrently; snapshot() may be called from any thread at any time,
// also after the flow closed (the figures of the last run stay until the next start).
#pragma once

#include "flowline/flow_results.hpp"
#include "flowline/observer.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace flowline::runtime {

class ReplicaAccounting final : public FlowObserver {
 public:
  void on_flow_start(const FlowTopology& topology) override;
  void on_replica_ready(const ReplicaReady& ready) override;
  void on_batch(const BatchDone& batch) override;

  std::vector<ReplicaStats> snapshot() const;
  // Each executor's batch times over all its replicas, in the order its replicas were placed.
  std::vector<ExecutorBatchStats> executors() const;

 private:
  // One replica's figures; batch times beyond kMaxSamples are kept as a uniform reservoir sample.
  struct Account {
    static constexpr std::size_t kMaxSamples = 100000;
    mutable std::mutex mutex;
    ReplicaStats stats;
    c10::Device device{c10::kCPU};
    std::shared_ptr<const ExecutorMetrics> metrics;
    std::vector<double> batch_ms;  // all of them, or the reservoir
    double total_ms = 0;           // of every batch: the mean is exact even beyond the reservoir
    std::uint64_t seen = 0;
    std::uint64_t rng = 0x9E3779B97F4A7C15ull;

    void record(std::size_t documents, double ms, bool failed);
    ReplicaStats snapshot() const;
  };

  mutable std::mutex mutex_;  // guards the vector itself (replaced by on_flow_start)
  std::vector<std::unique_ptr<Account>> accounts_;
};

}  // namespace flowline::runtime
