// flowline/flow.hpp — running a Flow: executors wired into a DAG, fed from a client that posts documents.
//
//   flowline::Flow flow;
//   flow.add({.name = "split", .uses = "TextSplitter"})
//       .add({.name = "write", .uses = "JsonlWriter", .with = {{"path", "out.jsonl"}}});
//   flow.start();
//   flow.post("/index", source, [](flowline::Response&& r) { ... });
//   flow.close();
//
// Runtime model. Each executor runs `replicas` instances, each on its own thread, all taking batches from
// the executor's one bounded queue. A request (request_size documents) moves through the DAG; where
// several branches join, their documents are merged by id. With batching options, an executor's worker
// merges waiting requests into one batch and splits the results back.
//
// post() may be called from several threads at once. It keeps at most max_in_flight requests of its own
// inside the flow (so memory stays flat on an endless input) and calls on_response on the calling thread,
// once per request, in input order. A request an executor fails comes back with its error and its input
// documents; the flow keeps serving the others. When a handler runs out of memory (c10::OutOfMemoryError,
// e.g. a CUDA allocation), its batch is split in halves and retried down to single documents, with a
// warning in the log; only a document that does not fit alone fails, and its error names it. close() waits for work in
// flight, then closes each executor on its own thread. The destructor closes. Flow::stats() and any FlowObserver
// attached see what the replicas do; docs/architecture.md draws the rooms of the runtime and a request's path through
// them.
#pragma once

#include "flowline/document.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/observer.hpp"
#include "flowline/registry.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

class DocumentSource;

// The answer to one request.
struct Response {
  std::uint64_t index = 0;     // 0-based request number within its post() call
  DocumentArray docs;          // results; on failure, the documents as they entered the failing executor
  std::string error;           // empty on success
  std::string error_executor;  // the executor that failed
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
  std::uint64_t documents = 0;
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
  std::vector<RemoteHostStats> remote_hosts;  // in flow order, then host order
  std::vector<DeviceStats> devices;           // GPUs only; empty when every executor runs on the CPU
  double host_peak_rss_mb = 0;                // of the whole process
  // Requests waiting in each executor's queue now, in flow order (empty while the flow is not started,
  // or while start() or close() holds the flow).
  std::vector<std::pair<std::string, std::size_t>> queued_requests;
};

class Flow {
 public:
  explicit Flow(FlowOptions options = {}, Registry& registry = Registry::global());
  // A flow from a config, typically load_flow_config()'s. Validated again at start().
  explicit Flow(FlowConfig config, Registry& registry = Registry::global());
  // Loads a YAML flow file (plugins included). Throws ConfigError.
  static Flow from_yaml(const std::filesystem::path& file, Registry& registry = Registry::global());

  Flow(Flow&&) noexcept;
  Flow& operator=(Flow&&) noexcept;
  ~Flow();

  // Appends an executor. Only before start().
  Flow& add(ExecutorConfig executor);
  // Attaches an observer of the runtime (flowline/observer.hpp says when its hooks are called and on which
  // threads). The flow shares ownership. Only before start(); observers stay attached across restarts.
  Flow& attach(std::shared_ptr<FlowObserver> observer);

  // Validates the config and constructs every replica on its thread. Throws ConfigError for a bad config,
  // ExecutorError (all failures listed) when a constructor throws; the flow is then closed.
  void start();
  bool started() const noexcept;

  // Streams every document of `source` through the flow, calling `on_response` on this thread in input
  // order. Returns when every request is answered. Starts the flow if needed.
  PostSummary post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                   const PostOptions& options = {});
  // Posts `docs` and returns the results in order. Throws ExecutorError for the first failed request
  // (after all requests finished).
  DocumentArray post(std::string_view endpoint, DocumentArray docs, const PostOptions& options = {});

  // Submits `docs` as one request and returns at once: the asynchronous entry for servers. `done` is
  // called exactly once, on the runtime thread that finished the request (a replica's), with the results
  // or the error; it must be quick and must not throw: hand the response over to a thread of your own.
  // Requests of any submits and posts with the same endpoint, parameters and target share executors'
  // batches (with batching options), so many small requests fill large batches. With `target` set, only
  // the executor of that name runs the request; the others pass it on. The flow must be started; throws
  // Error when it is closing. close() waits for every submitted request. submit() blocks while the first
  // executors' queues are full, so callers bound their requests in flight (queue_capacity is the size
  // that never blocks).
  void submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters, std::string target,
              std::function<void(Response&&)> done);

  // Waits for posts in flight, closes executors (each on its own thread) and joins all threads.
  // Idempotent. Errors thrown by executors' close() are logged, not thrown.
  void close();

  const FlowConfig& config() const noexcept;

  // A snapshot of every replica's accounting; thread-safe, callable while posts run and after close().
  FlowStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowline
