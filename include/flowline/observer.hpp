// flowline/observer.hpp — watching a running Flow: batches done, replicas ready, device memory samples.
//
// A FlowObserver is told what the runtime does without the runtime knowing what it is for: the per-replica
// accounting behind Flow::stats(), the GPU memory monitor and a metrics endpoint are all observers. Attach
// one with Flow::attach() before start(); the flow keeps it (shared ownership) until it is destroyed.
//
// Threads. Every hook may be called from any thread, and on_batch() from several replica threads at once:
// an observer protects its own state. Hooks are called on the runtime's hot path (on_batch after every
// batch), so they must be cheap and must not throw; an exception escaping a hook is logged and dropped.
//
// Order, for one start() ... close() cycle:
//   on_flow_start (once, before any replica is constructed)
//   on_replica_ready (once per replica that constructed successfully, from its thread)
//   on_flow_loaded (once, after every replica was constructed, whether or not all succeeded)
//   on_batch (after each batch), on_device_sample (from the device sampler's thread, if any)
//   on_flow_stop (once, after every replica has closed)
#pragma once

#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flowline {

class ExecutorMetrics;

// One replica of the flow, as the runtime placed it.
struct ReplicaPlacement {
  std::string executor;  // the executor's name in the flow
  std::string type;      // its spec name ("SentenceEncoder")
  int replica = 0;
  c10::Device device{c10::kCPU};
  std::string host;  // "host:port" of a remote replica (its device is the server's); empty here
};

// What start() is about to run: every replica, in executor order, then replica order.
struct FlowTopology {
  std::vector<ReplicaPlacement> replicas;
  std::vector<c10::Device> gpus;  // the distinct GPU devices the replicas use, first use first
};

// The events below refer to the flow's own placement (`placement`): valid during the hook's call only, so an
// observer that keeps an event copies the ReplicaPlacement, not the reference.

// A replica constructed and ready for batches.
struct ReplicaReady {
  const ReplicaPlacement& placement;
  std::size_t index = 0;                           // position in FlowTopology::replicas
  std::shared_ptr<const ExecutorMetrics> metrics;  // the executor's own figures (thread-safe)
  bool has_gpu_memory = false;
  std::int64_t gpu_load_bytes = 0;  // allocated on its GPU by its construction
};

// One handler call finished (after out-of-memory retries and failure isolation).
struct BatchDone {
  const ReplicaPlacement& placement;
  std::size_t index = 0;      // position in FlowTopology::replicas
  std::size_t documents = 0;  // documents that entered the batch
  std::size_t requests = 0;   // requests merged into it
  double milliseconds = 0;    // wall time of the handler call(s)
  bool failed = false;        // any of its requests failed
};

// A reading of one GPU's memory as NVML reports it (every process together).
struct DeviceSample {
  c10::Device device{c10::kCPU};
  std::int64_t used_bytes = 0;
  std::int64_t total_bytes = 0;
};

class FlowObserver {
 public:
  virtual ~FlowObserver() = default;
  virtual void on_flow_start(const FlowTopology& /*topology*/) {}
  virtual void on_replica_ready(const ReplicaReady& /*ready*/) {}
  virtual void on_flow_loaded() {}
  virtual void on_batch(const BatchDone& /*batch*/) {}
  virtual void on_device_sample(const DeviceSample& /*sample*/) {}
  virtual void on_flow_stop() {}
};

}  // namespace flowline
