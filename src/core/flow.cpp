// The Flow's public front: start (build the graph, construct the replicas), post (stream a source through
// and deliver responses in order), close (drain and join). The rooms it uses live in src/core/runtime/:
// stages (building each executor's queue, join and replicas; gathering stats()), graph (DAG and join),
// batcher, replica (worker loop), observers (accounting, device monitor).
#include "flowline/flow.hpp"
#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "python_workers.hpp"

#include "runtime/graph.hpp"
#include "runtime/observers.hpp"
#include "runtime/poster.hpp"
#include "runtime/replica.hpp"
#include "runtime/request.hpp"
#include "runtime/stages.hpp"
#include "thread_name.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <thread>

namespace flowline {

using runtime::Edge;
using runtime::RequestPtr;
using runtime::Stage;
using Clock = std::chrono::steady_clock;

class Flow::Impl {
 public:
  Impl(FlowConfig config, Registry& registry) : config_(std::move(config)), registry_(registry) {}
  ~Impl() { close(RunOutcome::Complete); }

  void start();
  void close(RunOutcome outcome) {
    std::lock_guard lock(lifecycle_mutex_);
    close_locked(outcome);
  }
  PostSummary post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                   const PostOptions& options);
  void submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters, std::string target,
              std::shared_ptr<const Cancellation::Flag> cancel, std::function<void(Response&&)> done);

  FlowConfig config_;
  Registry& registry_;
  std::atomic<bool> started_{false};
  runtime::ObserverList observers_;
  runtime::FlowFigures figures_{observers_};  // attaches the accounting and the device monitor first

 private:
  void replica_thread(Stage& stage, std::size_t replica, std::latch& constructed);
  void close_locked(RunOutcome outcome);
  void route(const std::vector<Edge>& outputs, RequestPtr request);
  void deliver(const Edge& edge, RequestPtr request);
  void enter_post(const char* what);
  void leave_post();

  friend class Flow;
  mutable std::mutex lifecycle_mutex_;  // serialises start() and close()
  runtime::FlowGraph graph_;
  FlowTopology topology_;
  std::unique_ptr<detail::PythonWorkers> python_workers_;  // outlives the stages that connect to them
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<runtime::JoinPoint> sink_join_;

  std::mutex start_errors_mutex_;
  std::vector<std::pair<std::string, std::string>> start_errors_;  // executor name, message

  // Posts in progress, for close().
  std::mutex posts_mutex_;
  std::condition_variable posts_cv_;
  int active_posts_ = 0;
  bool closing_ = false;
  std::atomic<RunOutcome> outcome_{RunOutcome::Complete};  // what close() tells the executors
};

void Flow::Impl::start() {
  std::lock_guard lock(lifecycle_mutex_);
  if (started_) return;
  figures_.forget_remote_hosts();
  validate_flow_config(config_, registry_);
  if (!python_workers_) python_workers_ = detail::start_python_workers(config_);  // fills their hosts
  runtime::Stages built = runtime::build_stages(config_, registry_);
  graph_ = std::move(built.graph);
  topology_ = std::move(built.topology);
  stages_ = std::move(built.stages);
  sink_join_ = std::move(built.sink_join);
  for (auto& stage : stages_) {
    for (Stage* worker : stage->workers()) {
      try {
        runtime::start_remote_hosts(*worker);
      } catch (const Error& e) {
        const std::string name = stage->config->name;
        stages_.clear();
        throw ExecutorError(name, fmt::format("the flow could not start: {}", e.what()));
      }
    }
  }
  observers_.flow_start(topology_);
  std::latch constructed(static_cast<std::ptrdiff_t>(topology_.replicas.size()));
  for (auto& stage : stages_) {
    for (Stage* w : stage->workers()) {
      for (std::size_t r = 0; r < w->replicas.size(); ++r)
        w->threads.emplace_back([this, w, r, &constructed] { replica_thread(*w, r, constructed); });
    }
  }
  constructed.wait();
  observers_.flow_loaded();
  started_ = true;
  if (start_errors_.empty()) return;
  std::vector<std::string> lines;
  for (const auto& [name, message] : start_errors_) lines.push_back(message);
  const std::string first = start_errors_.front().first;
  close_locked(RunOutcome::Incomplete);
  throw ExecutorError(first, fmt::format("the flow could not start:\n  {}", fmt::join(lines, "\n  ")));
}

void Flow::Impl::replica_thread(Stage& stage, std::size_t r, std::latch& constructed) {
  const ExecutorConfig& e = *stage.config;
  runtime::Replica& replica = *stage.replicas[r];
  const std::size_t index = stage.first_replica + r;
  const ReplicaPlacement& placement = topology_.replicas[index];
  runtime::name_this_thread(stage.sharded ? fmt::format("{}/{}.{}", e.name, stage.shard, r)
                                          : fmt::format("{}/{}", e.name, r));
  bool opened = false;
  try {
    replica.open();
    opened = true;
    const auto load = replica.gpu_load_bytes();
    observers_.replica_ready(ReplicaReady{placement, index, replica.metrics(), load.has_value(), load.value_or(0)});
  } catch (const std::exception& ex) {
    std::lock_guard lock(start_errors_mutex_);
    start_errors_.emplace_back(e.name, fmt::format("executor '{}' replica {}: {}", e.name, r, ex.what()));
  }
  constructed.count_down();
  if (!opened) return;
  const std::vector<Edge>& outputs = graph_.nodes[stage.node].outputs;
  runtime::ReplicaWorker worker(
      replica, runtime::Batcher(*stage.batches, e.batching),
      [this, &outputs, &stage](RequestPtr request) {
        if (stage.sharded) request = stage.sharded->router->gather(stage.shard, std::move(request));
        if (request) route(outputs, std::move(request));
      },
      observers_, placement, index, [&stage](RequestPtr request) { stage.queue->push_front(std::move(request)); });
  worker.run();
  replica.close(outcome_.load());
}

void Flow::Impl::close_locked(RunOutcome outcome) {
  if (!started_) return;
  outcome_ = outcome;  // read by each replica thread once its queue is closed and drained
  {
    std::unique_lock lock(posts_mutex_);
    closing_ = true;
    posts_cv_.wait(lock, [&] { return active_posts_ == 0; });
  }
  // Nothing is in flight now: closing the queues lets every worker finish, close its executor and exit.
  for (auto& stage : stages_) {
    for (Stage* w : stage->workers()) w->queue->close();
  }
  for (auto& stage : stages_) {
    for (Stage* w : stage->workers()) {
      for (auto& t : w->threads) t.join();
      w->threads.clear();
      w->replicas.clear();
      figures_.keep_remote_hosts(*w);
    }
  }
  observers_.flow_stop();
  start_errors_.clear();
  started_ = false;
}

void Flow::Impl::route(const std::vector<Edge>& outputs, RequestPtr request) {
  for (std::size_t i = 0; i + 1 < outputs.size(); ++i)
    deliver(outputs[i], std::make_unique<runtime::Request>(*request));
  deliver(outputs.back(), std::move(request));
}

void Flow::Impl::deliver(const Edge& edge, RequestPtr request) {
  runtime::JoinPoint& join = edge.to_sink() ? *sink_join_ : *stages_[edge.target]->join;
  RequestPtr ready = join.arrive(edge.slot, std::move(request));
  if (!ready) return;
  if (!edge.to_sink()) {
    Stage& stage = *stages_[edge.target];
    if (!stage.router) {
      stage.queue->push(ready);
    } else if (ready->failed() || !ready->session->targets(stage.config->name)) {
      route(graph_.nodes[edge.target].outputs, std::move(ready));  // not for the sharded executor: passed on
    } else {
      auto parts = stage.router->scatter(std::move(ready));
      for (std::size_t s = 0; s < parts.size(); ++s) {
        if (parts[s]) stage.shards[s]->queue->push(parts[s]);
      }
    }
  } else {
    runtime::PostSession* session = ready->session;
    session->complete(std::move(ready));
  }
}

void Flow::Impl::enter_post(const char* what) {
  std::lock_guard lock(posts_mutex_);
  if (closing_) throw Error(fmt::format("{}: the flow is closed", what));
  if (!started_) throw Error(fmt::format("{}: the flow is not started", what));
  ++active_posts_;
}

void Flow::Impl::leave_post() {
  {
    std::lock_guard lock(posts_mutex_);
    --active_posts_;
  }
  posts_cv_.notify_all();
}

void Flow::Impl::submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters,
                        std::string target, std::shared_ptr<const Cancellation::Flag> cancel,
                        std::function<void(Response&&)> done) {
  enter_post("submit()");
  auto* session = new runtime::SubmitSession(
      std::string(endpoint), std::move(parameters), std::move(target), [this, done = std::move(done)](RequestPtr r) {
        Response response{0, std::move(r->docs), std::move(r->error), std::move(r->error_executor), r->request_error};
        r.reset();
        try {
          done(std::move(response));
        } catch (const std::exception& e) {
          spdlog::error("submit(): the completion callback threw: {}", e.what());
        } catch (...) {
          spdlog::error("submit(): the completion callback threw");
        }
        leave_post();
      });
  session->cancel = std::move(cancel);
  auto request = std::make_unique<runtime::Request>();
  request->session = session;
  request->docs = std::move(docs);
  route(graph_.entries, std::move(request));
}

PostSummary Flow::Impl::post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                             const PostOptions& options) {
  enter_post("post()");
  struct Leave {
    Impl& impl;
    ~Leave() { impl.leave_post(); }
  } leave{*this};

  runtime::PostSession session(std::string(endpoint), options.parameters);
  const std::size_t request_size = options.request_size > 0 ? options.request_size : config_.options.request_size;
  const std::size_t max_in_flight = std::max<std::size_t>(config_.options.max_in_flight, 1);
  const auto started = Clock::now();
  runtime::Poster poster(session, source, request_size);
  bool input_done = false;
  while (true) {
    while (!input_done && poster.in_flight() < max_in_flight) {
      RequestPtr request = poster.read();
      if (!request) {
        input_done = true;
        break;
      }
      route(graph_.entries, std::move(request));
    }
    if (poster.in_flight() == 0) break;
    if (!poster.deliver_next(on_response, options, started)) input_done = true;
  }
  poster.summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (poster.failure) std::rethrow_exception(poster.failure);
  return poster.summary;
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

Flow& Flow::attach(std::shared_ptr<FlowObserver> observer) {
  if (impl_->started_) throw Error("Flow::attach(): the flow has started");
  if (!observer) throw Error("Flow::attach(): no observer");
  impl_->observers_.add(std::move(observer));
  return *this;
}

void Flow::start() { impl_->start(); }
bool Flow::started() const noexcept { return impl_->started_; }
void Flow::close(RunOutcome outcome) { impl_->close(outcome); }
const FlowConfig& Flow::config() const noexcept { return impl_->config_; }

FlowStats Flow::stats() const {
  // try_to_lock: while start() or close() holds the flow, the figures without its stages rather than a wait.
  std::unique_lock lock(impl_->lifecycle_mutex_, std::try_to_lock);
  return impl_->figures_.snapshot(impl_->started_ ? &impl_->stages_ : nullptr, lock.owns_lock());
}

PostSummary Flow::post(std::string_view endpoint, DocumentSource& source, const ResponseCallback& on_response,
                       const PostOptions& options) {
  if (!impl_->started_) start();
  return impl_->post(endpoint, source, on_response, options);
}

void Flow::submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters, std::string target,
                  std::function<void(Response&&)> done) {
  impl_->submit(endpoint, std::move(docs), std::move(parameters), std::move(target), nullptr, std::move(done));
}

void Flow::submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters, std::string target,
                  std::shared_ptr<const Cancellation::Flag> cancel, std::function<void(Response&&)> done) {
  impl_->submit(endpoint, std::move(docs), std::move(parameters), std::move(target), std::move(cancel),
                std::move(done));
}

DocumentArray Flow::post(std::string_view endpoint, DocumentArray docs, const PostOptions& options) {
  ArraySource source(std::move(docs));
  DocumentArray out;
  std::optional<ExecutorError> first_error;
  post(
      endpoint, source,
      [&](Response&& r) {
        if (!r.ok() && !first_error) first_error.emplace(r.error_executor, r.error);
        out.append(std::move(r.docs));
      },
      options);
  if (first_error) throw *first_error;
  return out;
}

}  // namespace flowline
