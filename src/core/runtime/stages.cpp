// Stages and FlowFigures (stages.hpp): building the running flow's executors, and gathering its figures.
#include "stages.hpp"

#include "../remote/remote_replica.hpp"

#include "flowline/device.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace flowline::runtime {

namespace {

// An executor's `with:` as its replicas read it, each parameter knowing where in the flow file it was set.
Params stage_params(const ExecutorConfig& e) {
  std::map<std::string, SourceLocation> locations;
  for (const auto& [key, where] : e.locations) {
    if (key.rfind("with.", 0) == 0) locations[key.substr(5)] = where;
  }
  return Params(e.name, e.with, std::move(locations));
}

// The replicas that run in this process, on their devices. A shard's replicas all run on the shard's device
// (devices[shard % n]); their numbers in the topology follow the shards before them.
void add_local_replicas(Stage& stage, const ExecutorConfig& e, const FlowConfig& config, Registry& registry,
                        FlowTopology& topology) {
  const int local = e.is_remote() ? e.remote.local_replicas : e.replicas;
  if (local <= 0) return;
  stage.entry = &registry.get(e.uses);
  stage.params = stage_params(e);
  ExecutorConfig sized = e;
  if (e.shards > 1) {
    sized.replicas = e.shards;
    sized.devices = {replica_devices(sized)[stage.shard]};
  }
  sized.replicas = local;
  for (const auto& name : replica_devices(sized)) stage.devices.push_back(resolve_device(name));
  const auto group = std::make_shared<ReplicaGroup>();
  const int shard = static_cast<int>(stage.shard);
  for (int r = 0; r < local; ++r) {
    const c10::Device device = stage.devices[static_cast<std::size_t>(r)];
    const int on_device = static_cast<int>(std::count(stage.devices.begin(), stage.devices.end(), device));
    RuntimeInfo info{e.name,
                     stage.entry->spec.name,
                     r,
                     local,
                     device,
                     on_device,
                     config.options.request_size,
                     group,
                     shard,
                     e.shards,
                     config.options.max_output_bytes,
                     config.options.local_input_files};
    stage.replicas.push_back(std::make_unique<LocalReplica>(*stage.entry, stage.params, std::move(info)));
    topology.replicas.push_back(ReplicaPlacement{e.name, stage.entry->spec.name, shard * local + r, device, {}});
    if (device.is_cuda() && std::find(topology.gpus.begin(), topology.gpus.end(), device) == topology.gpus.end()) {
      topology.gpus.push_back(device);
    }
  }
}

// The replicas on executor servers (`hosts:`): remote.in_flight per host (per discovery slot), after the
// local ones. A remote shard is served by its one host, hosts[shard].
void add_remote_replicas(Stage& stage, const ExecutorConfig& e, FlowTopology& topology) {
  if (!e.is_remote()) return;
  ExecutorConfig shard = e;
  if (e.shards > 1) shard.hosts = {e.hosts[stage.shard]};
  stage.remote = std::make_unique<remote::RemoteGroup>(shard);
  const std::string type = e.uses.empty() ? std::string("remote") : e.uses;
  int r = e.remote.local_replicas +
          static_cast<int>(stage.shard * e.remote.in_flight * std::max<std::size_t>(e.remote.connections, 1));
  for (const auto& host : stage.remote->hosts()) {
    for (std::size_t k = 0; k < e.remote.in_flight; ++k, ++r) {
      stage.replicas.push_back(std::make_unique<remote::RemoteReplica>(*host, *stage.remote));
      topology.replicas.push_back(ReplicaPlacement{e.name, type, r, c10::Device(c10::kCPU), host->label()});
    }
  }
}

}  // namespace

Stage::Stage() = default;
Stage::~Stage() = default;

std::vector<Stage*> Stage::workers() {
  if (shards.empty()) return {this};
  std::vector<Stage*> out;
  for (auto& s : shards) out.push_back(s.get());
  return out;
}

Stages build_stages(const FlowConfig& config, Registry& registry) {
  Stages out;
  out.graph = build_flow_graph(config);
  const std::size_t capacity =
      config.options.queue_capacity > 0 ? config.options.queue_capacity : config.options.max_in_flight;
  for (std::size_t i = 0; i < config.executors.size(); ++i) {
    const ExecutorConfig& e = config.executors[i];
    auto stage = std::make_unique<Stage>();
    stage->config = &e;
    stage->node = i;
    stage->first_replica = out.topology.replicas.size();
    stage->join = std::make_unique<JoinPoint>(out.graph.nodes[i].inputs);
    stage->queue = std::make_unique<RequestQueue>(std::max<std::size_t>(capacity, 1));
    stage->batches = std::make_unique<BatchSource>(*stage->queue);
    if (e.shards > 1) {
      stage->entry = &registry.get(e.uses);
      stage->params = stage_params(e);
      stage->router = std::make_unique<ShardRouter>(e.name, e.shards, stage->entry->spec.shards, stage->params,
                                                    stage->entry->request_params);
      for (int s = 0; s < e.shards; ++s) {
        auto shard = std::make_unique<Stage>();
        shard->config = &e;
        shard->node = i;
        shard->shard = static_cast<std::size_t>(s);
        shard->sharded = stage.get();
        shard->first_replica = out.topology.replicas.size();
        add_local_replicas(*shard, e, config, registry, out.topology);
        add_remote_replicas(*shard, e, out.topology);
        shard->queue = std::make_unique<RequestQueue>(std::max<std::size_t>(capacity, 1));
        shard->batches = std::make_unique<BatchSource>(*shard->queue);
        stage->shards.push_back(std::move(shard));
      }
      out.stages.push_back(std::move(stage));
      continue;
    }
    add_local_replicas(*stage, e, config, registry, out.topology);
    add_remote_replicas(*stage, e, out.topology);
    out.stages.push_back(std::move(stage));
  }
  out.sink_join = std::make_unique<JoinPoint>(out.graph.sink_inputs);
  return out;
}

FlowFigures::FlowFigures(ObserverList& observers) : monitor_(std::make_shared<DeviceMonitor>(observers)) {
  observers.add(accounting_);
  observers.add(monitor_);
}

void FlowFigures::forget_remote_hosts() {
  std::lock_guard lock(remote_mutex_);
  last_remote_hosts_.clear();
}

void FlowFigures::keep_remote_hosts(Stage& worker) {
  if (!worker.remote) return;
  {
    std::lock_guard lock(remote_mutex_);
    for (auto& host : worker.remote->stats()) last_remote_hosts_.push_back(std::move(host));
  }
  worker.remote.reset();
}

void start_remote_hosts(Stage& worker) {
  if (worker.remote) worker.remote->start();
}

FlowStats FlowFigures::snapshot(const std::vector<std::unique_ptr<Stage>>* running, bool stages_readable) const {
  FlowStats out;
  out.replicas = accounting_->snapshot();
  out.executors = accounting_->executors();
  out.devices = monitor_->snapshot();
  out.host_peak_rss_mb = host_peak_rss_mb();
  if (!stages_readable) return out;
  if (running) {
    for (const auto& stage : *running) {
      std::size_t queued = stage->queue->size();
      for (Stage* worker : stage->workers()) {
        if (worker != stage.get()) queued += worker->queue->size();
        if (!worker->remote) continue;
        for (auto& host : worker->remote->stats()) out.remote_hosts.push_back(std::move(host));
      }
      out.queued_requests.emplace_back(stage->config->name, queued);
    }
  } else {
    std::lock_guard lock(remote_mutex_);
    out.remote_hosts = last_remote_hosts_;
  }
  return out;
}

}  // namespace flowline::runtime
