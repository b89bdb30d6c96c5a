// The Flow runtime: nodes (one per executor) with a bounded queue and replica threads, join points where
// branches meet, and per-post sessions that reorder responses.
#include "flowline/flow.hpp"
#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "flowline/queue.hpp"

#include <c10/cuda/CUDACachingAllocator.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace flowline {

namespace {

using Clock = std::chrono::steady_clock;

class PostSession;

// One request travelling through the flow.
struct Request {
  std::uint64_t index = 0;
  PostSession* session = nullptr;
  DocumentArray docs;
  std::string error;
  std::string error_executor;
};
using RequestPtr = std::unique_ptr<Request>;

// The state of one post() call: where finished requests wait to be delivered in order.
class PostSession {
 public:
  PostSession(std::string endpoint, boost::json::object parameters)
      : endpoint(std::move(endpoint)), parameters(std::move(parameters)) {}

  void complete(RequestPtr request) {
    {
      std::lock_guard lock(mutex_);
      done_.emplace(request->index, std::move(request));
    }
    ready_.notify_one();
  }
  // Waits for request `index` to be complete and returns it.
  RequestPtr wait_for(std::uint64_t index) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return done_.count(index) > 0; });
    auto it = done_.find(index);
    RequestPtr request = std::move(it->second);
    done_.erase(it);
    return request;
  }

  const std::string endpoint;
  const boost::json::object parameters;

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::unordered_map<std::uint64_t, RequestPtr> done_;
};

// Where `inputs` branches meet: a request goes on once every branch has delivered it, merged by id.
class JoinPoint {
 public:
  explicit JoinPoint(std::size_t inputs) : inputs_(inputs) {}

  // Returns the merged request when this arrival completes it, else nullptr.
  RequestPtr arrive(std::size_t slot, RequestPtr request) {
    if (inputs_ <= 1) return request;
    std::vector<RequestPtr> parts;
    {
      std::lock_guard lock(mutex_);
      auto& waiting = pending_[{request->session, request->index}];
      if (waiting.empty()) waiting.resize(inputs_);
      waiting[slot] = std::move(request);
      for (const auto& part : waiting) {
        if (!part) return nullptr;
      }
      parts = std::move(waiting);
      pending_.erase({parts[0]->session, parts[0]->index});
    }
    RequestPtr merged = std::move(parts[0]);
    for (std::size_t i = 1; i < parts.size(); ++i) {
      Request& part = *parts[i];
      if (!merged->error.empty()) continue;
      if (!part.error.empty()) {
        merged->error = std::move(part.error);
        merged->error_executor = std::move(part.error_executor);
        continue;
      }
      for (auto& doc : part.docs) {
        if (Document* existing = merged->docs.find(doc.id)) {
          existing->merge_from(std::move(doc));
        } else {
          merged->docs.push_back(std::move(doc));
        }
      }
    }
    return merged;
  }

 private:
  const std::size_t inputs_;
  std::mutex mutex_;
  std::map<std::pair<PostSession*, std::uint64_t>, std::vector<RequestPtr>> pending_;
};

struct Node;

// Where a node's output goes: another node (with the slot it arrives in) or the sink.
struct Edge {
  Node* target = nullptr;  // nullptr: the sink
  std::size_t slot = 0;
};

// Accounting of one replica. Written by its thread, read by stats() under the mutex.
struct ReplicaAccount {
  static constexpr std::size_t kMaxSamples = 100000;  // batch times kept; beyond, a uniform reservoir
  mutable std::mutex mutex;
  ReplicaStats stats;
  std::shared_ptr<const ExecutorMetrics> metrics;  // the executor's own, once constructed
  std::vector<double> batch_ms;
  std::uint64_t seen = 0;
  std::uint64_t rng = 0x9E3779B97F4A7C15ull;

  void record(std::size_t documents, double ms, bool failed) {
    std::lock_guard lock(mutex);
    stats.documents += documents;
    stats.batches += 1;
    stats.errors += failed;
    ++seen;
    if (batch_ms.size() < kMaxSamples) {
      batch_ms.push_back(ms);
    } else {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      const std::uint64_t slot = rng % seen;
      if (slot < kMaxSamples) batch_ms[slot] = ms;
    }
  }
  ReplicaStats snapshot() const {
    std::lock_guard lock(mutex);
    ReplicaStats out = stats;
    if (metrics) out.metrics = metrics->snapshot();
    if (!batch_ms.empty()) {
      std::vector<double> sorted = batch_ms;
      std::sort(sorted.begin(), sorted.end());
      double sum = 0;
      for (double v : sorted) sum += v;
      out.batch_ms_mean = sum / static_cast<double>(sorted.size());
      out.batch_ms_p50 = sorted[(sorted.size() - 1) / 2];
      out.batch_ms_p99 = sorted[static_cast<std::size_t>(0.99 * static_cast<double>(sorted.size() - 1))];
    }
    return out;
  }
};

// The GPUs a flow runs on: NVML and allocator readings at start and after loading, and a thread that
// samples NVML's used memory every 5 ms from start() to close() to catch its peak.
class DeviceMonitor {
 public:
  explicit DeviceMonitor(std::vector<c10::Device> devices) {
    for (const auto& d : devices) {
      auto slot = std::make_unique<Slot>();
      slot->device = d;
      slot->stats.device = d.str();
      if (const auto nvml = nvml_memory(d)) {
        slot->stats.has_nvml = true;
        slot->stats.nvml_total_bytes = nvml->total;
        slot->stats.nvml_used_at_start_bytes = nvml->used;
        slot->peak.store(nvml->used);
      }
      if (const auto memory = device_memory(d)) {
        c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
        slot->allocated_at_start = memory->allocated;
      }
      slots_.push_back(std::move(slot));
    }
    if (std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->stats.has_nvml; })) {
      sampler_ = std::thread([this] { sample(); });
    }
  }
  ~DeviceMonitor() { stop(); }

  // Called once every replica is constructed (and warmed up). The allocator's peaks restart here, so
  // they measure processing; the start-up peak is kept apart.
  void loaded() {
    for (auto& slot : slots_) {
      if (const auto memory = device_memory(slot->device)) {
        slot->stats.load_bytes = memory->allocated - slot->allocated_at_start;
        slot->stats.reserved_after_load_bytes = memory->reserved;
        slot->stats.startup_peak_allocated_bytes = memory->peak_allocated;
        c10::cuda::CUDACachingAllocator::resetPeakStats(slot->device.index());
      }
      if (const auto nvml = nvml_memory(slot->device)) slot->stats.nvml_used_after_load_bytes = nvml->used;
    }
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (sampler_.joinable()) sampler_.join();
  }

  std::vector<DeviceStats> snapshot() const {
    std::vector<DeviceStats> out;
    for (const auto& slot : slots_) {
      DeviceStats s = slot->stats;
      if (const auto memory = device_memory(slot->device)) {
        s.peak_allocated_bytes = memory->peak_allocated;
        s.peak_reserved_bytes = memory->peak_reserved;
      }
      if (s.has_nvml) {
        if (!stopping()) read_nvml(*slot);
        s.nvml_peak_used_bytes = slot->peak.load();
      }
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  struct Slot {
    c10::Device device{c10::kCPU};
    DeviceStats stats;
    std::int64_t allocated_at_start = 0;
    mutable std::atomic<std::int64_t> peak{0};
  };
  static void read_nvml(const Slot& slot) {
    if (const auto nvml = nvml_memory(slot.device)) {
      std::int64_t seen = slot.peak.load();
      while (nvml->used > seen && !slot.peak.compare_exchange_weak(seen, nvml->used)) {
      }
    }
  }
  bool stopping() const {
    std::lock_guard lock(mutex_);
    return stopping_;
  }
  void sample() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      for (const auto& slot : slots_) {
        if (slot->stats.has_nvml) read_nvml(*slot);
      }
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_; });
    }
  }

  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread sampler_;
};

struct Node {
  ExecutorConfig config;
  const Registry::Entry* entry = nullptr;
  Params params;
  std::vector<c10::Device> devices;  // one per replica
  std::vector<Edge> outputs;
  std::size_t input_count = 0;
  std::unique_ptr<JoinPoint> join;
  std::unique_ptr<BoundedQueue<RequestPtr>> queue;
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<ReplicaAccount>> accounts;  // one per replica
};

}  // namespace

class Flow::Impl {
 public:
  Impl(FlowConfig config, Registry& registry) : config_(std::move(config)), registry_(registry) {}
  ~Impl() { close(); }

  void start();
  void close();
  PostSummary post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                   const PostOptions& options);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }

  FlowConfig config_;
  Registry& registry_;
  std::atomic<bool> started_{false};
  std::mutex lifecycle_mutex_;  // serialises start() and close()
  std::unique_ptr<DeviceMonitor> monitor_;  // the GPUs the flow runs on; set by start()

 private:
  void build_graph();
  void worker(Node& node, int replica);
  void run_batch(Node& node, Executor& executor, std::vector<RequestPtr>& batch, ReplicaAccount& account);
  void forward(const std::vector<Edge>& outputs, RequestPtr request);
  void deliver(const Edge& edge, RequestPtr request);
  std::vector<RequestPtr> take_batch(Node& node, RequestPtr& carry);

  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Edge> entries_;  // where the client's requests go
  std::unique_ptr<JoinPoint> sink_join_;

  // Start-up handshake between start() and the replica threads.
  std::mutex start_mutex_;
  std::condition_variable start_cv_;
  int starting_ = 0;
  bool start_failed_ = false;  // set while start() cleans up after a failed start
  std::vector<std::pair<std::string, std::string>> start_errors_;  // executor name, message

  // Posts in progress, for close().
  std::mutex posts_mutex_;
  std::condition_variable posts_cv_;
  int active_posts_ = 0;
  bool closing_ = false;
};

void Flow::Impl::build_graph() {
  std::map<std::string, Node*> by_name;
  for (const auto& e : config_.executors) {
    auto node = std::make_unique<Node>();
    node->config = e;
    node->entry = &registry_.get(e.uses);
    std::map<std::string, SourceLocation> locations;
    for (const auto& [key, where] : e.locations) {
      if (key.rfind("with.", 0) == 0) locations[key.substr(5)] = where;
    }
    node->params = Params(e.name, e.with, std::move(locations));
    for (const auto& name : replica_devices(e)) node->devices.push_back(resolve_device(name));
    by_name[e.name] = node.get();
    nodes_.push_back(std::move(node));
  }
  std::vector<std::vector<Node*>> inputs(nodes_.size());
  std::vector<bool> has_output(nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = *nodes_[i];
    std::vector<std::string> needs;
    if (node.config.needs) {
      needs = *node.config.needs;
    } else if (i > 0) {
      needs = {nodes_[i - 1]->config.name};
    }
    if (needs.empty()) {
      entries_.push_back(Edge{&node, node.input_count++});
    }
    for (const auto& need : needs) {
      Node* source = by_name.at(need);
      source->outputs.push_back(Edge{&node, node.input_count++});
    }
  }
  std::size_t terminals = 0;
  for (auto& node : nodes_) {
    if (node->outputs.empty()) node->outputs.push_back(Edge{nullptr, terminals++});
  }
  if (nodes_.empty()) entries_.push_back(Edge{nullptr, terminals++});
  sink_join_ = std::make_unique<JoinPoint>(terminals);

  const std::size_t capacity =
      config_.options.queue_capacity > 0 ? config_.options.queue_capacity : config_.options.max_in_flight;
  for (auto& node : nodes_) {
    node->join = std::make_unique<JoinPoint>(node->input_count);
    for (int r = 0; r < node->config.replicas; ++r) {
      auto account = std::make_unique<ReplicaAccount>();
      account->stats.executor = node->config.name;
      account->stats.type = node->entry->spec.name;
      account->stats.replica = r;
      account->stats.device = node->devices[static_cast<std::size_t>(r)].str();
      node->accounts.push_back(std::move(account));
    }
    node->queue = std::make_unique<BoundedQueue<RequestPtr>>(std::max<std::size_t>(capacity, 1));
  }
}

void Flow::Impl::start() {
  std::lock_guard start_lock(lifecycle_mutex_);
  if (started_) return;
  validate_flow_config(config_, registry_);
  nodes_.clear();  // a restarted flow starts its accounting afresh
  entries_.clear();
  build_graph();
  {
    std::vector<c10::Device> gpus;
    for (const auto& node : nodes_) {
      for (const auto& d : node->devices) {
        if (d.is_cuda() && std::find(gpus.begin(), gpus.end(), d) == gpus.end()) gpus.push_back(d);
      }
    }
    monitor_ = std::make_unique<DeviceMonitor>(std::move(gpus));
  }
  int total = 0;
  for (auto& node : nodes_) total += node->config.replicas;
  {
    std::lock_guard lock(start_mutex_);
    starting_ = total;
  }
  for (auto& node : nodes_) {
    for (int r = 0; r < node->config.replicas; ++r) {
      node->threads.emplace_back([this, n = node.get(), r] { worker(*n, r); });
    }
  }
  {
    std::unique_lock lock(start_mutex_);
    start_cv_.wait(lock, [&] { return starting_ == 0; });
  }
  monitor_->loaded();
  started_ = true;
  if (!start_errors_.empty()) {
    std::vector<std::string> lines;
    for (const auto& [name, message] : start_errors_) lines.push_back(message);
    const std::string first = start_errors_.front().first;
    start_failed_ = true;
    close();
    start_failed_ = false;
    throw ExecutorError(first, fmt::format("the flow could not start:\n  {}", fmt::join(lines, "\n  ")));
  }
}

void Flow::Impl::close() {
  std::unique_lock lifecycle(lifecycle_mutex_, std::defer_lock);
  // start() calls close() on failure while holding the lock.
  if (!start_failed_) lifecycle.lock();
  if (!started_) return;
  {
    std::unique_lock lock(posts_mutex_);
    closing_ = true;
    posts_cv_.wait(lock, [&] { return active_posts_ == 0; });
  }
  // Nothing is in flight now: closing the queues lets every worker finish, close its executor and exit.
  for (auto& node : nodes_) node->queue->close();
  for (auto& node : nodes_) {
    for (auto& t : node->threads) t.join();
    node->threads.clear();
  }
  if (monitor_) monitor_->stop();
  start_errors_.clear();
  started_ = false;
}

void Flow::Impl::worker(Node& node, int replica) {
  std::unique_ptr<Executor> executor;
  std::string failure;
  try {
    const c10::Device device = node.devices[static_cast<std::size_t>(replica)];
    set_thread_device(device);
    const auto memory_before = device_memory(device);
    const int on_device = static_cast<int>(std::count(node.devices.begin(), node.devices.end(), device));
    RuntimeInfo runtime{node.config.name, node.entry->spec.name, replica, node.config.replicas, device, on_device,
                        config_.options.request_size};
    executor = node.entry->factory(ExecutorContext{runtime, node.params});
    if (!executor) throw Error("the factory returned no executor");
    // The endpoints bound must be exactly those the spec declares: a misspelt bind() fails here.
    const auto& spec = node.entry->spec;
    std::vector<std::string> declared = spec.endpoints;
    std::sort(declared.begin(), declared.end());
    const auto bound = executor->bound_endpoints();
    for (const auto& e : bound) {
      if (!std::binary_search(declared.begin(), declared.end(), e)) {
        throw Error(fmt::format("{} binds endpoint '{}' which its spec does not declare (declared: {})", spec.name, e,
                                declared.empty() ? std::string("none") : fmt::format("{}", fmt::join(declared, ", "))));
      }
    }
    for (const auto& e : declared) {
      if (!std::binary_search(bound.begin(), bound.end(), e)) {
        throw Error(fmt::format("{} declares endpoint '{}' but its constructor did not bind it", spec.name, e));
      }
    }
    if (spec.default_endpoint != executor->has_default_handler()) {
      throw Error(fmt::format("{} {} the default endpoint but its spec says default_endpoint = {}", spec.name,
                              executor->has_default_handler() ? "binds" : "does not bind", spec.default_endpoint));
    }
    auto& account = *node.accounts[static_cast<std::size_t>(replica)];
    std::lock_guard lock(account.mutex);
    account.metrics = executor->shared_metrics();
    if (memory_before) {
      account.stats.has_gpu_memory = true;
      account.stats.gpu_load_bytes = device_memory(device)->allocated - memory_before->allocated;
    }
  } catch (const std::exception& e) {
    failure = fmt::format("executor '{}' replica {}: {}", node.config.name, replica, e.what());
    executor.reset();
  }
  {
    std::lock_guard lock(start_mutex_);
    if (!failure.empty()) start_errors_.emplace_back(node.config.name, failure);
    --starting_;
  }
  start_cv_.notify_all();
  if (!executor) return;

  RequestPtr carry;
  while (true) {
    std::vector<RequestPtr> batch = take_batch(node, carry);
    if (batch.empty()) break;
    run_batch(node, *executor, batch, *node.accounts[static_cast<std::size_t>(replica)]);
  }
  try {
    executor->close();
  } catch (const std::exception& e) {
    spdlog::error("executor '{}' replica {}: close() failed: {}", node.config.name, replica, e.what());
  }
  executor.reset();
}

std::vector<RequestPtr> Flow::Impl::take_batch(Node& node, RequestPtr& carry) {
  std::vector<RequestPtr> batch;
  if (carry) {
    batch.push_back(std::move(carry));
  } else if (auto first = node.queue->pop()) {
    batch.push_back(std::move(*first));
  } else {
    return batch;
  }
  const BatchingOptions& batching = node.config.batching;
  if (batching.max_batch_size == 0) return batch;
  std::size_t size = batch.front()->docs.size();
  const auto deadline = Clock::now() + batching.max_delay;
  while (size < batching.max_batch_size) {
    auto next = batching.max_delay.count() > 0 ? node.queue->pop_until(deadline) : node.queue->try_pop();
    if (!next) break;
    RequestPtr& r = *next;
    // Only requests of the same post (same endpoint and parameters) share a batch.
    if (r->session != batch.front()->session || size + r->docs.size() > batching.max_batch_size) {
      carry = std::move(r);
      break;
    }
    size += r->docs.size();
    batch.push_back(std::move(r));
  }
  return batch;
}

namespace {
// Runs the executor on one batch; returns the error text, empty on success. An out-of-memory error
// (c10::OutOfMemoryError, as a CUDA allocation failure throws) splits the batch in halves and retries
// each, down to single documents, so no document is lost to a batch that was too large; a document that
// does not fit alone fails with its id named.
std::string run_handler(Executor& executor, const std::string& endpoint, DocumentArray& docs,
                        const boost::json::object& parameters) {
  try {
    executor.handle(endpoint, docs, parameters);
    return {};
  } catch (const c10::OutOfMemoryError& e) {
    const std::string what = e.what_without_backtrace();
    const std::string first_line = what.substr(0, what.find('\n'));
    if (docs.size() <= 1) {
      return fmt::format("out of memory on document {} alone: {}", docs.empty() ? "(none)" : docs[0].id, first_line);
    }
    const std::size_t half = docs.size() / 2;
    spdlog::warn("executor '{}' replica {}: out of memory on a batch of {} documents; retrying as {} + {}",
                 executor.runtime().name, executor.runtime().replica, docs.size(), half, docs.size() - half);
    DocumentArray second = docs.take(half, docs.size() - half);
    std::string error = run_handler(executor, endpoint, docs, parameters);
    std::string second_error = run_handler(executor, endpoint, second, parameters);
    docs.append(std::move(second));
    return error.empty() ? second_error : error;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}
}  // namespace

void Flow::Impl::run_batch(Node& node, Executor& executor, std::vector<RequestPtr>& batch, ReplicaAccount& account) {
  // Requests that failed upstream pass straight through.
  std::vector<RequestPtr> live;
  for (auto& r : batch) {
    if (r->error.empty()) {
      live.push_back(std::move(r));
    } else {
      forward(node.outputs, std::move(r));
    }
  }
  if (live.empty()) return;
  const PostSession& session = *live.front()->session;
  auto fail = [&](Request& r, std::string message) {
    r.error = std::move(message);
    r.error_executor = node.config.name;
  };

  const auto started = Clock::now();
  std::size_t documents = 0;
  for (const auto& r : live) documents += r->docs.size();
  // Records the batch once its outcome is known (failed: any of its requests failed).
  auto account_batch = [&] {
    bool failed = false;
    for (const auto& r : live) failed |= r && !r->error.empty();
    account.record(documents, std::chrono::duration<double, std::milli>(Clock::now() - started).count(), failed);
  };
  if (live.size() == 1) {
    std::string error = run_handler(executor, session.endpoint, live[0]->docs, session.parameters);
    if (!error.empty()) fail(*live[0], std::move(error));
    account_batch();
    forward(node.outputs, std::move(live[0]));
    return;
  }

  // Several requests merged into one batch, then split back by position, or by id when the executor
  // changed the number of documents.
  std::vector<std::size_t> counts;
  std::unordered_map<std::string, std::size_t> owner;  // input id -> request, for re-splitting by id
  DocumentArray merged;
  for (std::size_t i = 0; i < live.size(); ++i) {
    counts.push_back(live[i]->docs.size());
    for (const auto& d : live[i]->docs) owner.emplace(d.id, i);
    merged.append(std::move(live[i]->docs));
  }
  const std::size_t total = merged.size();
  std::string error = run_handler(executor, session.endpoint, merged, session.parameters);
  if (merged.size() == total) {
    for (std::size_t i = 0; i < live.size(); ++i) live[i]->docs = merged.take(0, counts[i]);
    if (!error.empty()) {
      // Isolate the failure: run each request on its own, so only the bad one fails.
      for (auto& r : live) {
        std::string own = run_handler(executor, session.endpoint, r->docs, session.parameters);
        if (!own.empty()) fail(*r, std::move(own));
      }
    }
  } else if (error.empty()) {
    // The executor added or removed documents: each result goes to the request that held its id, or its
    // parent's id (a splitter's output).
    for (auto& d : merged) {
      auto it = owner.find(d.id);
      if (it == owner.end()) it = owner.find(d.parent_id);
      if (it == owner.end()) {
        error = fmt::format("document {} in a merged batch has neither the id nor the parent_id of an input "
                            "document, so its request is unknown; turn batching off for this executor", d.id);
        break;
      }
      live[it->second]->docs.push_back(std::move(d));
    }
    if (!error.empty()) {
      for (auto& r : live) fail(*r, error);
    }
  } else {
    for (auto& r : live) fail(*r, error);
  }
  account_batch();
  for (auto& r : live) forward(node.outputs, std::move(r));
}

void Flow::Impl::forward(const std::vector<Edge>& outputs, RequestPtr request) {
  for (std::size_t i = 0; i + 1 < outputs.size(); ++i) {
    auto copy = std::make_unique<Request>(*request);
    deliver(outputs[i], std::move(copy));
  }
  deliver(outputs.back(), std::move(request));
}

void Flow::Impl::deliver(const Edge& edge, RequestPtr request) {
  JoinPoint& join = edge.target ? *edge.target->join : *sink_join_;
  RequestPtr ready = join.arrive(edge.slot, std::move(request));
  if (!ready) return;
  if (edge.target) {
    edge.target->queue->push(ready);
  } else {
    PostSession* session = ready->session;
    session->complete(std::move(ready));
  }
}

PostSummary Flow::Impl::post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                             const PostOptions& options) {
  {
    std::lock_guard lock(posts_mutex_);
    if (closing_) throw Error("post(): the flow is closed");
    ++active_posts_;
  }
  struct Leave {
    Impl& impl;
    ~Leave() {
      {
        std::lock_guard lock(impl.posts_mutex_);
        --impl.active_posts_;
      }
      impl.posts_cv_.notify_all();
    }
  } leave{*this};

  PostSession session(std::string(endpoint), options.parameters);
  const std::size_t request_size = options.request_size > 0 ? options.request_size : config_.options.request_size;
  const std::size_t max_in_flight = std::max<std::size_t>(config_.options.max_in_flight, 1);
  const auto started = Clock::now();
  PostSummary summary;
  Progress progress;
  std::uint64_t next_index = 0, next_delivery = 0;
  bool input_done = false;
  std::exception_ptr failure;  // from the source or the callback; rethrown once nothing is in flight

  while (true) {
    while (!input_done && next_index - next_delivery < max_in_flight) {
      auto request = std::make_unique<Request>();
      const auto read_start = Clock::now();
      try {
        const std::size_t got = source.read(request->docs, request_size);
        summary.source_seconds += std::chrono::duration<double>(Clock::now() - read_start).count();
        if (got == 0) {
          input_done = true;
          break;
        }
      } catch (...) {
        failure = std::current_exception();
        input_done = true;
        break;
      }
      request->index = next_index++;
      request->session = &session;
      forward(entries_, std::move(request));
    }
    if (next_delivery == next_index) break;
    RequestPtr done = session.wait_for(next_delivery++);
    const auto deliver_start = Clock::now();
    Response response{done->index, std::move(done->docs), std::move(done->error), std::move(done->error_executor)};
    done.reset();
    summary.requests++;
    summary.documents += response.docs.size();
    if (!response.ok()) {
      summary.failed_requests++;
      summary.failed_documents += response.docs.size();
    }
    summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (!failure) {
      try {
        on_response(std::move(response));
        if (options.on_progress) {
          progress = Progress{summary.documents, summary.requests, summary.failed_requests, summary.seconds};
          options.on_progress(progress);
        }
      } catch (...) {
        failure = std::current_exception();
        input_done = true;
      }
    }
    response.docs.clear();  // counted as delivery: the documents are dropped here
    summary.deliver_seconds += std::chrono::duration<double>(Clock::now() - deliver_start).count();
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (failure) std::rethrow_exception(failure);
  return summary;
}

// ---- Flow ----

Flow::Flow(FlowOptions options, Registry& registry) {
  FlowConfig config;
  config.options = options;
  impl_ = std::make_unique<Impl>(std::move(config), registry);
}
Flow::Flow(FlowConfig config, Registry& registry) : impl_(std::make_unique<Impl>(std::move(config), registry)) {}
Flow Flow::from_yaml(const std::filesystem::path& file, Registry& registry) {
  return Flow(load_flow_config(file, registry), registry);
}
Flow::Flow(Flow&&) noexcept = default;
Flow& Flow::operator=(Flow&&) noexcept = default;
Flow::~Flow() = default;

Flow& Flow::add(ExecutorConfig executor) {
  if (impl_->started_) throw Error("Flow::add(): the flow has started");
  impl_->config_.executors.push_back(std::move(executor));
  return *this;
}

void Flow::start() { impl_->start(); }
bool Flow::started() const noexcept { return impl_->started_; }
void Flow::close() { impl_->close(); }
const FlowConfig& Flow::config() const noexcept { return impl_->config_; }

FlowStats Flow::stats() const {
  FlowStats out;
  for (const auto& node : impl_->nodes()) {
    for (std::size_t r = 0; r < node->accounts.size(); ++r) {
      ReplicaStats s = node->accounts[r]->snapshot();
      if (s.has_gpu_memory) {
        if (const auto memory = device_memory(node->devices[r])) {
          s.gpu_peak_allocated_bytes = memory->peak_allocated;
          s.gpu_peak_reserved_bytes = memory->peak_reserved;
        }
      }
      out.replicas.push_back(std::move(s));
    }
  }
  if (impl_->monitor_) out.devices = impl_->monitor_->snapshot();
  out.host_peak_rss_mb = host_peak_rss_mb();
  return out;
}

PostSummary Flow::post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                       const PostOptions& options) {
  if (!impl_->started_) start();
  return impl_->post(endpoint, source, on_response, options);
}

DocumentArray Flow::post(std::string_view endpoint, DocumentArray docs, const PostOptions& options) {
  ArraySource source(std::move(docs));
  DocumentArray out;
  std::optional<ExecutorError> first_error;
  post(endpoint, source, [&](Response&& r) {
    if (!r.ok() && !first_error) first_error.emplace(r.error_executor, r.error);
    out.append(std::move(r.docs));
  }, options);
  if (first_error) throw *first_error;
  return out;
}

}  // namespace flowline
