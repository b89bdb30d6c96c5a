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
// them. The responses, post options and summaries, and the figures of stats() are in flowline/flow_results.hpp.
#pragma once

#include "flowline/document.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/flow_results.hpp"
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

class Flow {
 public:
  // `registry` is borrowed: the flow looks executors up in it until it is destroyed, so it must outlive the
  // flow (Registry::global() does).
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
  // As above, cancellable: once the caller sets `cancel` (its deadline passed, its client went away), the
  // request is dropped before any executor runs it, and a handler running it learns it
  // (RequestInfo::cancelled(), flowline/executor.hpp); `done` is still called, with the error "cancelled ...".
  void submit(std::string_view endpoint, DocumentArray docs, boost::json::object parameters, std::string target,
              std::shared_ptr<const Cancellation::Flag> cancel, std::function<void(Response&&)> done);

  // Waits for posts in flight, closes executors (each on its own thread) and joins all threads.
  // Idempotent. Errors thrown by executors' close() are logged, not thrown. `outcome` is what the executors
  // learn (Executor::run_outcome()): Incomplete when the run did not end well (interrupted, requests
  // failed), so writers leave their files marked partial instead of completing them. A start that fails
  // closes with Incomplete.
  void close(RunOutcome outcome = RunOutcome::Complete);

  const FlowConfig& config() const noexcept;

  // A snapshot of every replica's accounting; thread-safe, callable while posts run and after close().
  FlowStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowline
