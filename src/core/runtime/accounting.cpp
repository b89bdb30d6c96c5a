// Per-replica accounting: counts, batch-time percentiles, executor metrics and GPU figures per replica.
#include "accounting.hpp"

#include "flowline/device.hpp"
#include "flowline/flow_stats_json.hpp"
#include "flowline/executor.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>

namespace flowline {

double nearest_rank_percentile(const std::vector<double>& sorted, double p) {
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<std::size_t>(std::ceil(p * n / 100.0));  // 1-based; p * n first: exact
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

boost::json::object stats_json(const FlowStats& stats) {
  boost::json::array replicas;
  for (const auto& r : stats.replicas) {
    boost::json::object o{{"executor", r.executor},
                          {"type", r.type},
                          {"replica", r.replica},
                          {"device", r.device},
                          {"documents", r.documents},
                          {"batches", r.batches},
                          {"errors", r.errors},
                          {"batch_ms_mean", r.batch_ms_mean},
                          {"batch_ms_p50", r.batch_ms_p50},
                          {"batch_ms_p99", r.batch_ms_p99}};
    if (r.has_gpu_memory) {
      o["gpu_load_bytes"] = r.gpu_load_bytes;
      o["gpu_peak_allocated_bytes"] = r.gpu_peak_allocated_bytes;
      o["gpu_peak_reserved_bytes"] = r.gpu_peak_reserved_bytes;
    } else {
      o["gpu"] = "not available";
    }
    boost::json::object metrics;
    for (const auto& [name, value] : r.metrics) metrics[name] = value;
    o["metrics"] = std::move(metrics);
    replicas.push_back(std::move(o));
  }
  boost::json::array devices;
  for (const auto& d : stats.devices) {
    boost::json::object o{{"device", d.device},
                          {"load_bytes", d.load_bytes},
                          {"peak_allocated_bytes", d.peak_allocated_bytes},
                          {"peak_reserved_bytes", d.peak_reserved_bytes},
                          {"reserved_after_load_bytes", d.reserved_after_load_bytes},
                          {"startup_peak_allocated_bytes", d.startup_peak_allocated_bytes}};
    if (d.has_nvml) {
      o.insert({{"nvml_total_bytes", d.nvml_total_bytes},
                {"nvml_used_at_start_bytes", d.nvml_used_at_start_bytes},
                {"nvml_used_after_load_bytes", d.nvml_used_after_load_bytes},
                {"nvml_peak_used_bytes", d.nvml_peak_used_bytes},
                {"outside_allocator_bytes", d.outside_allocator_bytes()},
                {"accounted_peak_bytes", d.accounted_peak_bytes()}});
    } else {
      o["nvml"] = "not available";
    }
    devices.push_back(std::move(o));
  }
  boost::json::array hosts;
  for (const auto& h : stats.remote_hosts) {
    hosts.push_back(boost::json::object{{"executor", h.executor},
                                        {"address", h.address},
                                        {"connected", h.connected},
                                        {"requests", h.requests},
                                        {"lost", h.lost},
                                        {"reconnects", h.reconnects},
                                        {"requeued_batches", h.requeued_batches},
                                        {"last_error", h.last_error}});
  }
  boost::json::array executors;
  for (const auto& e : stats.executors) {
    executors.push_back(boost::json::object{{"executor", e.executor},
                                            {"batches", e.batches},
                                            {"batch_ms_mean", e.batch_ms_mean},
                                            {"batch_ms_p50", e.batch_ms_p50},
                                            {"batch_ms_p99", e.batch_ms_p99}});
  }
  return boost::json::object{{"replicas", std::move(replicas)},
                             {"executors", std::move(executors)},
                             {"remote_hosts", std::move(hosts)},
                             {"devices", std::move(devices)},
                             {"host_peak_rss_mb", stats.host_peak_rss_mb}};
}

}  // namespace flowline

namespace flowline::runtime {

void ReplicaAccounting::Account::record(std::size_t documents, double ms, bool failed) {
  std::lock_guard lock(mutex);
  stats.documents += documents;
  stats.batches += 1;
  stats.errors += failed;
  total_ms += ms;
  ++seen;
  if (batch_ms.size() < kMaxSamples) {
    batch_ms.push_back(ms);
  } else {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const std::uint64_t slot = rng % seen;
    if (slot < kMaxSamples) batch_ms[slot] = ms;
  }
}

ReplicaStats ReplicaAccounting::Account::snapshot() const {
  std::lock_guard lock(mutex);
  ReplicaStats out = stats;
  if (metrics) out.metrics = metrics->snapshot();
  if (out.has_gpu_memory) {
    if (const auto memory = device_memory(device)) {
      out.gpu_peak_allocated_bytes = memory->peak_allocated;
      out.gpu_peak_reserved_bytes = memory->peak_reserved;
    }
  }
  if (!batch_ms.empty()) {
    std::vector<double> sorted = batch_ms;
    std::sort(sorted.begin(), sorted.end());
    out.batch_ms_mean = total_ms / static_cast<double>(seen);
    out.batch_ms_p50 = nearest_rank_percentile(sorted, 50);
    out.batch_ms_p99 = nearest_rank_percentile(sorted, 99);
  }
  return out;
}

void ReplicaAccounting::on_flow_start(const FlowTopology& topology) {
  std::vector<std::unique_ptr<Account>> accounts;
  for (const auto& placement : topology.replicas) {
    auto account = std::make_unique<Account>();
    account->stats.executor = placement.executor;
    account->stats.type = placement.type;
    account->stats.replica = placement.replica;
    account->stats.device = placement.host.empty() ? placement.device.str() : "remote " + placement.host;
    account->device = placement.device;
    accounts.push_back(std::move(account));
  }
  std::lock_guard lock(mutex_);
  accounts_ = std::move(accounts);
}

void ReplicaAccounting::on_replica_ready(const ReplicaReady& ready) {
  std::lock_guard lock(mutex_);
  Account& account = *accounts_.at(ready.index);
  std::lock_guard account_lock(account.mutex);
  account.metrics = ready.metrics;
  account.stats.has_gpu_memory = ready.has_gpu_memory;
  account.stats.gpu_load_bytes = ready.gpu_load_bytes;
}

void ReplicaAccounting::on_batch(const BatchDone& batch) {
  // No lock on the vector: it is replaced only by on_flow_start, before any replica thread exists.
  accounts_.at(batch.index)->record(batch.documents, batch.milliseconds, batch.failed);
}

std::vector<ExecutorBatchStats> ReplicaAccounting::executors() const {
  std::lock_guard lock(mutex_);
  std::vector<ExecutorBatchStats> out;
  std::vector<std::vector<double>> samples;
  std::vector<double> totals;
  for (const auto& account : accounts_) {
    std::lock_guard account_lock(account->mutex);
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.executor == account->stats.executor; });
    if (it == out.end()) {
      out.push_back(ExecutorBatchStats{account->stats.executor, 0, 0, 0, 0});
      samples.emplace_back();
      totals.push_back(0);
      it = out.end() - 1;
    }
    const auto i = static_cast<std::size_t>(it - out.begin());
    it->batches += account->seen;
    totals[i] += account->total_ms;
    samples[i].insert(samples[i].end(), account->batch_ms.begin(), account->batch_ms.end());
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (samples[i].empty()) continue;
    std::sort(samples[i].begin(), samples[i].end());
    out[i].batch_ms_mean = totals[i] / static_cast<double>(out[i].batches);
    out[i].batch_ms_p50 = nearest_rank_percentile(samples[i], 50);
    out[i].batch_ms_p99 = nearest_rank_percentile(samples[i], 99);
  }
  return out;
}

std::vector<ReplicaStats> ReplicaAccounting::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaStats> out;
  for (const auto& account : accounts_) out.push_back(account->snapshot());
  return out;
}

}  // namespace flowline::runtime
