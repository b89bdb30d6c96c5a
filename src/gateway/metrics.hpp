// The gateway's Prometheus metrics: requests by route (HTTP routes, and "grpc") and status, their latency, documents,
// requests in flight and connections (counted by the server), and the flow's own figures — batches and their latency
// per executor (a FlowObserver), queue depths, per-replica work, weights and GPU memory (read from Flow::stats() at
// each scrape). Private to flowline::gateway.
//
// Threads: on_batch() runs on replica threads, the record_*() calls on the gateway's I/O threads, scrape()
// on whichever I/O thread serves /metrics; prometheus-cpp's metrics are thread-safe, and the per-route and
// per-executor series are created up front (or under a mutex) so the hot paths only add and observe.
#pragma once

#include "routes.hpp"

#include "flowline/flow.hpp"
#include "flowline/observer.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace flowline::gateway {

class GatewayMetrics final : public FlowObserver {
 public:
  GatewayMetrics();

  // FlowObserver: the replicas to report on, and their batches.
  void on_flow_start(const FlowTopology& topology) override;
  void on_batch(const BatchDone& batch) override;

  // One answered request: its front, route, status, outcome ("ok" or a refusal's name), documents and
  // seconds from the first byte read. Counted as {front, route, outcome} for every front, and as HTTP's
  // {route, status} (with the latency and documents) as before.
  void record_request(FrontKind front, Route route, int status, std::string_view outcome, std::size_t documents,
                      double seconds);
  void set_in_flight(double requests) { in_flight_->Set(requests); }
  void set_connections(double connections) { connections_->Set(connections); }

  // The Prometheus text exposition of every metric, the flow's current figures included.
  std::string scrape(const Flow& flow);

 private:
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& outcomes_;  // flowline_requests_total{front, route, outcome}
  prometheus::Family<prometheus::Counter>& documents_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Gauge* connections_ = nullptr;
  std::array<prometheus::Histogram*, static_cast<std::size_t>(Route::kCount)> route_latency_{};
  std::array<prometheus::Counter*, static_cast<std::size_t>(Route::kCount)> route_documents_{};
  std::mutex status_mutex_;  // guards status_counters_
  // The {route, status} series made so far, by route * 1000 + status: a request looks its counter up
  // here instead of building a label set for the family.
  std::unordered_map<int, prometheus::Counter*> status_counters_;
  // The {front, route, outcome} series made so far, by their label values joined (guarded by status_mutex_).
  std::unordered_map<std::string, prometheus::Counter*> outcome_counters_;

  struct ReplicaSeries {
    prometheus::Histogram* batch_seconds = nullptr;
    prometheus::Counter* batch_documents = nullptr;
    prometheus::Counter* failed_batches = nullptr;
  };
  prometheus::Family<prometheus::Histogram>& batch_latency_;
  prometheus::Family<prometheus::Counter>& batch_documents_;
  prometheus::Family<prometheus::Counter>& failed_batches_;
  std::mutex topology_mutex_;
  std::vector<ReplicaSeries> replicas_;  // by FlowTopology index; set in on_flow_start
};

}  // namespace flowline::gateway
