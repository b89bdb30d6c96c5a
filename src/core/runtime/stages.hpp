// The running flow's executors as the Flow front uses them: a Stage per executor (where its requests wait,
// who serves them), built from a validated FlowConfig in one go with the graph and the topology the
// observers see; and FlowFigures, which gathers Flow::stats() from the accounting observers, the stages'
// queues and the remote hosts. Private to flowline::core.
//
// Threads and ownership. build_stages() runs under the Flow's lifecycle lock (start()); the Stages it
// returns belong to the Flow and live until close() clears them. A Stage's replicas and threads are
// touched only by start() and close(); its join and queue are thread-safe. FlowFigures is thread-safe:
// snapshot() may run on any thread while the flow serves, the caller holding the lifecycle lock so that
// the stages it reads are not being built or torn down.
#pragma once

#include "accounting.hpp"
#include "device_monitor.hpp"
#include "graph.hpp"
#include "observers.hpp"
#include "replica.hpp"
#include "shards.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/flow_results.hpp"
#include "flowline/observer.hpp"
#include "flowline/registry.hpp"

#include <c10/core/Device.h>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flowline::remote {
class RemoteGroup;
}

namespace flowline::runtime {

// One executor of the running flow: where its requests wait (join, queue) and who serves them. A sharded
// executor (`shards: N`) is a Stage whose `router` splits each request over N shard Stages, each with its
// own queue, replicas (or remote host) and threads; the executor's Stage then has no replicas of its own.
struct Stage {
  Stage();
  ~Stage();  // out of line: RemoteGroup is complete only in stages.cpp
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  const ExecutorConfig* config = nullptr;
  const Registry::Entry* entry = nullptr;
  Params params;
  std::vector<c10::Device> devices;  // one per replica
  std::size_t node = 0;              // its position in the flow (and the graph)
  std::size_t first_replica = 0;     // its first replica's position in the topology
  std::unique_ptr<JoinPoint> join;
  std::unique_ptr<RequestQueue> queue;
  std::unique_ptr<BatchSource> batches;  // over `queue`: its replicas' turns to collect a batch
  std::vector<std::unique_ptr<Replica>> replicas;
  std::unique_ptr<remote::RemoteGroup> remote;  // the hosts of a remote executor
  std::vector<std::thread> threads;
  std::unique_ptr<ShardRouter> router;         // sharded: splits requests over `shards`, gathers answers
  std::vector<std::unique_ptr<Stage>> shards;  // sharded: one Stage per shard
  Stage* sharded = nullptr;                    // a shard: the executor's Stage (its router gathers)
  std::size_t shard = 0;                       // a shard: which

  // The Stages whose replicas run: the shards of a sharded executor, else this one.
  std::vector<Stage*> workers();
};

// Everything start() builds before any replica is constructed.
struct Stages {
  FlowGraph graph;
  FlowTopology topology;
  std::vector<std::unique_ptr<Stage>> stages;  // in flow order
  std::unique_ptr<JoinPoint> sink_join;
};

// The stages of a validated config: replicas (local ones not yet opened, remote ones on hosts not yet
// connected), queues sized by queue_capacity (else max_in_flight), joins from the graph. `config` and
// `registry` must outlive the result (stages point into them).
Stages build_stages(const FlowConfig& config, Registry& registry);

// At start(), after build_stages(): connects `worker`'s remote hosts when it is a remote executor's Stage
// (one of workers()); does nothing for a local one. Throws Error when they cannot be started. The Flow
// front reaches remote/ only through this and FlowFigures::keep_remote_hosts.
void start_remote_hosts(Stage& worker);

// Flow::stats()'s sources: the per-replica accounting and the device monitor (both attached to the flow's
// observers here), the remote hosts as the last close() left them, and, while the flow runs, the stages.
class FlowFigures {
 public:
  // Adds the accounting and the device monitor to `observers`, which must outlive this.
  explicit FlowFigures(ObserverList& observers);

  // At start(): the previous run's remote hosts are forgotten.
  void forget_remote_hosts();
  // At close(), for each worker Stage after its threads are joined: a remote one's hosts' figures are kept
  // for stats() and its hosts are dropped; a local one is left as it is.
  void keep_remote_hosts(Stage& worker);

  // The figures now. `running`: the stages while the flow runs (queues and live remote hosts are read from
  // them), or nullptr when it is not running (the remote hosts as close() left them). `stages_readable`:
  // false while start() or close() holds the flow, when neither is read.
  FlowStats snapshot(const std::vector<std::unique_ptr<Stage>>* running, bool stages_readable) const;

 private:
  std::shared_ptr<ReplicaAccounting> accounting_ = std::make_shared<ReplicaAccounting>();
  std::shared_ptr<DeviceMonitor> monitor_;
  mutable std::mutex remote_mutex_;
  std::vector<RemoteHostStats> last_remote_hosts_;
};

}  // namespace flowline::runtime
