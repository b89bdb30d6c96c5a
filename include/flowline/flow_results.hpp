// flowline/flow_results.hpp — what a Flow hands back: the response to a request, the options and summary of
// a post(), progress, and the figures of Flow::stats(). Plain values: whoever receives one owns it, and
// none is shared between threads by the flow once handed over. Split from flowline/flow.hpp (which includes
// it) so that the runtime's rooms and the remote client speak this vocabulary without the Flow front.
//
// Threads: a Response is built on a runtime thread and handed to the caller's callback (post(): on the
// posting thread; submit(): on the replica thread that finished the request). PostOptions::on_progress is
// called on the posting thread. FlowStats is a snapshot, taken on any thread.
#pragma once

#include "flowline/document.hpp"

#include <boost/json/object.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace flowline {

// The answer to one request.
struct Response {
  std::uint64_t index = 0;     // 0-based request number within its post() call
  DocumentArray docs;          // results; on failure, the documents as they entered the failing executor
  std::string error;           // empty on success
  std::string error_executor;  // the executor that failed
  // The failure is the request's own (its executor threw RequestError: a parameter out of its bounds, a
  // filter flowline does not have): the gateway answers 422 / INVALID_ARGUMENT instead of 500.
  bool request_error = false;
  bool ok() const noexcept { return error.empty(); }
};

struct Progress {
  std::uint64_t documents = 0;  // documents answered so far
  std::uint64_t requests = 0;
  std::uint64_t failed_requests = 0;
  double seconds = 0;  // since post() began
};

struct PostOptions {
  std::size_t request_size = 0;    // 0: the flow's request_size
  boost::json::object parameters;  // passed to every handler as RequestInfo::parameters
  // Called on the posting thread after each delivered response (throttle display in the callback).
  std::function<void(const Progress&)> on_progress;
};

struct PostSummary {
  std::uint64_t input_documents = 0;  // read from the source
  std::uint64_t documents = 0;        // in the responses: executors may have dropped or added documents
  std::uint64_t requests = 0;
  std::uint64_t failed_requests = 0;
  std::uint64_t failed_documents = 0;
  double seconds = 0;
  // Where the posting thread's time went: reading the source (splitting, making documents) and the
  // response callback (plus dropping the delivered documents). The rest it spent waiting for the flow;
  // when these two fill `seconds`, the input side, not the executors, bounds the throughput.
  double source_seconds = 0;
  double deliver_seconds = 0;
  double docs_per_second() const noexcept { return seconds > 0 ? documents / seconds : 0; }
};

using ResponseCallback = std::function<void(Response&&)>;

// The one percentile definition flowline reports (--stats, --stats-json, profile, bench figures): the
// nearest rank, i.e. the smallest sample that at least p% of the samples do not exceed. It is always a
// sample, never below the median for p >= 50, and with few samples p99 is the largest (3 batches: the
// slowest). `sorted` is ascending and not empty; p in (0, 100].
double nearest_rank_percentile(const std::vector<double>& sorted, double p);

// One executor's batch times over all its replicas (the percentiles of the merged samples, not a
// combination of each replica's).
struct ExecutorBatchStats {
  std::string executor;
  std::uint64_t batches = 0;
  double batch_ms_mean = 0, batch_ms_p50 = 0, batch_ms_p99 = 0;
};

// What one executor replica has done since the flow started. GPU figures come from the CUDA caching
// allocator of the replica's device and are absent (has_gpu_memory false) on the CPU.
struct ReplicaStats {
  std::string executor;
  std::string type;
  int replica = 0;
  std::string device;
  std::uint64_t documents = 0;
  std::uint64_t batches = 0;
  std::uint64_t errors = 0;  // batches whose handler threw
  double batch_ms_mean = 0, batch_ms_p50 = 0, batch_ms_p99 = 0;
  bool has_gpu_memory = false;
  std::int64_t gpu_load_bytes = 0;            // allocated by constructing this replica (weights)
  std::int64_t gpu_peak_allocated_bytes = 0;  // device-wide peaks while the flow ran
  std::int64_t gpu_peak_reserved_bytes = 0;
  // What the executor reported about its own work (Executor::metrics()), e.g. "tokens".
  std::map<std::string, double> metrics;
};

// One GPU the flow runs on: the GPU's own figures (NVML, every process together) and this process's
// CUDA caching allocator. The allocator's peaks are reset when the flow starts and again once every
// replica is constructed, so peak_* cover processing and startup_peak_allocated_bytes covers loading
// and warm-up.
struct DeviceStats {
  std::string device;                     // "cuda:0"
  std::int64_t load_bytes = 0;            // allocator: allocated by constructing the replicas on it
  std::int64_t peak_allocated_bytes = 0;  // allocator peaks while processing (since start-up ended)
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t startup_peak_allocated_bytes = 0;  // allocator peak while the replicas were constructed
  std::int64_t reserved_after_load_bytes = 0;     // allocator: reserved once every replica was constructed
  bool has_nvml = false;                          // false without a GPU driver's NVML
  std::int64_t nvml_total_bytes = 0;
  std::int64_t nvml_used_at_start_bytes = 0;    // before the flow constructed anything
  std::int64_t nvml_used_after_load_bytes = 0;  // once every replica was constructed (and warmed up)
  std::int64_t nvml_peak_used_bytes = 0;        // highest reading, sampled every 5 ms while the flow ran
  // GPU memory this process holds outside the caching allocator (CUDA context, library handles), as
  // NVML and the allocator saw it after loading.
  std::int64_t outside_allocator_bytes() const noexcept {
    return nvml_used_after_load_bytes - nvml_used_at_start_bytes - reserved_after_load_bytes;
  }
  // The device's peak use that the allocator's figures account for: what was there before, plus this
  // process's memory outside the allocator, plus the allocator's peak reservation. Compare with
  // nvml_peak_used_bytes.
  std::int64_t accounted_peak_bytes() const noexcept {
    return nvml_used_at_start_bytes + outside_allocator_bytes() + peak_reserved_bytes;
  }
};

// One host of a remote executor (`hosts:`): its connection and what failover did.
struct RemoteHostStats {
  std::string executor;
  std::string address;  // host:port
  bool connected = false;
  std::uint64_t requests = 0;          // answered
  std::uint64_t lost = 0;              // times the connection was lost (closed, timed out, bad frame)
  std::uint64_t reconnects = 0;        // times it came back after being lost
  std::uint64_t requeued_batches = 0;  // batches that could not run there and went to other replicas
  std::string last_error;              // why it was last lost or unreachable
};

struct FlowStats {
  std::vector<ReplicaStats> replicas;
  std::vector<ExecutorBatchStats> executors;  // in flow order, each over all its replicas
  std::vector<RemoteHostStats> remote_hosts;  // in flow order, then host order
  std::vector<DeviceStats> devices;           // GPUs only; empty when every executor runs on the CPU
  double host_peak_rss_mb = 0;                // of the whole process
  // Requests waiting in each executor's queue now, in flow order (empty while the flow is not started,
  // or while start() or close() holds the flow).
  std::vector<std::pair<std::string, std::size_t>> queued_requests;
};

}  // namespace flowline
