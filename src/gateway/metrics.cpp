// The gateway's Prometheus metrics (metrics.hpp).
#include "metrics.hpp"

#include <fmt/format.h>
#include <prometheus/text_serializer.h>

#include <c10/core/Device.h>

#include <sstream>

namespace flowline::gateway {

namespace {

// Seconds, from 100 µs to a minute: HTTP requests and executor batches alike.
const prometheus::Histogram::BucketBoundaries kSecondsBuckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

}  // namespace

GatewayMetrics::GatewayMetrics()
    : requests_(prometheus::BuildCounter()
                    .Name("flowline_http_requests_total")
                    .Help("HTTP requests answered, by route and status code")
                    .Register(*registry_)),
      outcomes_(prometheus::BuildCounter()
                    .Name("flowline_requests_total")
                    .Help("Requests answered by every front, by front (http, grpc), route and outcome (ok, or why "
                          "it was refused: bad_request, unauthenticated, not_found, too_large, busy, unavailable, "
                          "timeout, failed)")
                    .Register(*registry_)),
      documents_(prometheus::BuildCounter()
                     .Name("flowline_http_documents_total")
                     .Help("Documents (or inputs) in successfully answered requests, by route")
                     .Register(*registry_)),
      latency_(prometheus::BuildHistogram()
                   .Name("flowline_http_request_duration_seconds")
                   .Help("Time from reading a request to its response being queued for writing, by route")
                   .Register(*registry_)),
      batch_latency_(prometheus::BuildHistogram()
                         .Name("flowline_executor_batch_duration_seconds")
                         .Help("Wall time of an executor replica's handler call on one batch")
                         .Register(*registry_)),
      batch_documents_(prometheus::BuildCounter()
                           .Name("flowline_executor_documents_total")
                           .Help("Documents that entered an executor replica's batches")
                           .Register(*registry_)),
      failed_batches_(prometheus::BuildCounter()
                          .Name("flowline_executor_failed_batches_total")
                          .Help("Batches in which an executor replica failed a request")
                          .Register(*registry_)) {
  in_flight_ = &prometheus::BuildGauge()
                    .Name("flowline_http_in_flight_requests")
                    .Help("Requests handed to the flow and not yet answered")
                    .Register(*registry_)
                    .Add({});
  connections_ = &prometheus::BuildGauge()
                      .Name("flowline_http_connections")
                      .Help("Open client connections")
                      .Register(*registry_)
                      .Add({});
  for (std::size_t i = 0; i < route_latency_.size(); ++i) {
    const prometheus::Labels labels{{"route", route_name(static_cast<Route>(i))}};
    route_latency_[i] = &latency_.Add(labels, kSecondsBuckets);
    route_documents_[i] = &documents_.Add(labels);
  }
}

void GatewayMetrics::on_flow_start(const FlowTopology& topology) {
  std::lock_guard lock(topology_mutex_);
  replicas_.clear();
  for (const auto& placement : topology.replicas) {
    const prometheus::Labels labels{{"executor", placement.executor},
                                    {"replica", std::to_string(placement.replica)},
                                    {"device", placement.device.str()}};
    replicas_.push_back(ReplicaSeries{&batch_latency_.Add(labels, kSecondsBuckets), &batch_documents_.Add(labels),
                                      &failed_batches_.Add(labels)});
  }
}

void GatewayMetrics::on_batch(const BatchDone& batch) {
  if (batch.index >= replicas_.size()) return;
  const ReplicaSeries& series = replicas_[batch.index];
  series.batch_seconds->Observe(batch.milliseconds / 1000.0);
  series.batch_documents->Increment(static_cast<double>(batch.documents));
  if (batch.failed) series.failed_batches->Increment();
}

void GatewayMetrics::record_request(FrontKind front, Route route, int status, std::string_view outcome,
                                    std::size_t documents, double seconds) {
  const auto i = static_cast<std::size_t>(route);
  route_latency_[i]->Observe(seconds);
  if (status < 400) route_documents_[i]->Increment(static_cast<double>(documents));
  prometheus::Counter* counter = nullptr;
  prometheus::Counter* by_outcome = nullptr;
  {
    std::lock_guard lock(status_mutex_);
    prometheus::Counter*& cached = status_counters_[static_cast<int>(i) * 1000 + status];
    if (!cached) cached = &requests_.Add({{"route", route_name(route)}, {"status", std::to_string(status)}});
    counter = cached;
    std::string key = fmt::format("{}/{}/{}", front_name(front), route_name(route), outcome);
    prometheus::Counter*& series = outcome_counters_[key];
    if (!series) {
      series = &outcomes_.Add(
          {{"front", front_name(front)}, {"route", route_name(route)}, {"outcome", std::string(outcome)}});
    }
    by_outcome = series;
  }
  counter->Increment();
  by_outcome->Increment();
}

std::string GatewayMetrics::scrape(const Flow& flow) {
  // The flow's figures as they are now, in a registry made for this scrape.
  prometheus::Registry now;
  const FlowStats stats = flow.stats();
  auto& queued = prometheus::BuildGauge()
                     .Name("flowline_executor_queued_requests")
                     .Help("Requests waiting in an executor's queue")
                     .Register(now);
  for (const auto& [executor, depth] : stats.queued_requests) {
    queued.Add({{"executor", executor}}).Set(static_cast<double>(depth));
  }
  auto& weights = prometheus::BuildGauge()
                      .Name("flowline_replica_gpu_load_bytes")
                      .Help("GPU memory allocated by constructing a replica (its weights and buffers)")
                      .Register(now);
  auto& executor_figures = prometheus::BuildGauge()
                               .Name("flowline_executor_metric")
                               .Help("An executor replica's own figures (Executor::metrics()), by name")
                               .Register(now);
  for (const auto& r : stats.replicas) {
    const prometheus::Labels labels{
        {"executor", r.executor}, {"replica", std::to_string(r.replica)}, {"device", r.device}};
    if (r.has_gpu_memory) weights.Add(labels).Set(static_cast<double>(r.gpu_load_bytes));
    for (const auto& [name, value] : r.metrics) {
      prometheus::Labels with_name = labels;
      with_name["name"] = name;
      executor_figures.Add(with_name).Set(value);
    }
  }
  auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(now);
  };
  auto& allocated = gauge("flowline_gpu_allocator_peak_allocated_bytes",
                          "Peak bytes allocated by the CUDA caching allocator on a device while serving");
  auto& reserved = gauge("flowline_gpu_allocator_peak_reserved_bytes",
                         "Peak bytes reserved by the CUDA caching allocator on a device while serving");
  auto& loaded = gauge("flowline_gpu_allocator_load_bytes", "Bytes allocated on a device by constructing its replicas");
  auto& nvml_used =
      gauge("flowline_gpu_nvml_peak_used_bytes", "Highest device memory use NVML reported (all processes)");
  auto& nvml_total = gauge("flowline_gpu_nvml_total_bytes", "Device memory NVML reports");
  for (const auto& d : stats.devices) {
    const prometheus::Labels labels{{"device", d.device}};
    allocated.Add(labels).Set(static_cast<double>(d.peak_allocated_bytes));
    reserved.Add(labels).Set(static_cast<double>(d.peak_reserved_bytes));
    loaded.Add(labels).Set(static_cast<double>(d.load_bytes));
    if (d.has_nvml) {
      nvml_used.Add(labels).Set(static_cast<double>(d.nvml_peak_used_bytes));
      nvml_total.Add(labels).Set(static_cast<double>(d.nvml_total_bytes));
    }
  }
  auto& host_up = gauge("flowline_remote_host_up", "1 while the flow is connected to a remote executor's host");
  auto& host_requests = gauge("flowline_remote_host_requests", "Requests a remote host answered");
  auto& host_lost = gauge("flowline_remote_host_lost", "Times the connection to a remote host was lost");
  auto& host_back = gauge("flowline_remote_host_reconnects", "Times a lost remote host came back");
  auto& host_requeued =
      gauge("flowline_remote_host_requeued_batches", "Batches a lost remote host could not run, re-queued");
  for (const auto& h : stats.remote_hosts) {
    const prometheus::Labels labels{{"executor", h.executor}, {"host", h.address}};
    host_up.Add(labels).Set(h.connected ? 1 : 0);
    host_requests.Add(labels).Set(static_cast<double>(h.requests));
    host_lost.Add(labels).Set(static_cast<double>(h.lost));
    host_back.Add(labels).Set(static_cast<double>(h.reconnects));
    host_requeued.Add(labels).Set(static_cast<double>(h.requeued_batches));
  }
  gauge("flowline_process_peak_rss_bytes", "Peak resident memory of the serving process")
      .Add({})
      .Set(stats.host_peak_rss_mb * 1024 * 1024);

  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (auto& family : now.Collect()) families.push_back(std::move(family));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

}  // namespace flowline::gateway
