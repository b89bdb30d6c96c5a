// flowline/executor.hpp — the Executor base class and its lifecycle contract.
//
// An Executor is one step of a Flow: it receives batches of Documents for an endpoint ("/encode",
// "/index", ...) and changes them in place.
//
// Lifecycle, as the Flow runs it:
//   1. Declaration. Every executor type has a static `ExecutorSpec spec()` naming it, its parameters and
//      its endpoints. A flow is validated against the specs before any executor exists, so a bad flow
//      fails at load time, never mid-run.
//   2. Construction. The Flow constructs each replica with an ExecutorContext, on the thread that will
//      run it (so thread-local device state set here holds for processing). The constructor reads its
//      parameters, loads models, and binds its endpoints with bind()/bind_default(). Each endpoint the
//      spec declares must be bound and nothing else may be bound: a mismatch fails the flow's start with
//      an error naming the endpoint. A constructor that throws fails the flow's start.
//   3. Processing. Handlers run one batch at a time: one instance is never called concurrently, so an
//      executor needs no locking for its own members. Parallelism comes from replicas, each its own
//      instance on its own thread (state they share goes through RuntimeInfo::group and locks its own).
//      A handler that throws fails the requests of that batch only; the exception's message is reported
//      with the executor's name and the flow keeps serving.
//      GPU work: a handler may enqueue work on its own CUDA stream, but must have finished it (e.g.
//      synchronised that stream) before it returns. Tensors it leaves in documents on a GPU are then
//      complete, and the next executor on that device can read them from its own stream without events.
//   4. Close. close() is called once on the executor's thread after its last batch, then it is destroyed
//      there. Release files, flush output. run_outcome() says whether the run ended well: a writer
//      completes its file (OutputFile::commit(), flowline/output_file.hpp) only then, and otherwise leaves
//      what it wrote marked partial. A replica whose constructor threw is not closed.
//
// Ownership: the Flow owns executor instances. A handler borrows the batch; it may modify, add or remove
// documents. Documents it keeps beyond the call must be copied.
#pragma once

#include "flowline/document.hpp"
#include "flowline/params.hpp"

#include <c10/core/Device.h>
#include <boost/json/object.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <vector>

namespace flowline {

// How a flow's run ended, as the executors learn it in close(): complete, or cut short (the flow could not
// start, it was interrupted, a request failed). Flow::close() says which; a flow closed by its destructor
// ended complete.
enum class RunOutcome { Complete, Incomplete };

// Name of the endpoint handler used when a request's endpoint has no handler of its own.
inline constexpr std::string_view kDefaultEndpoint = "*";

// How an executor's endpoints spread over shards (`shards: N` in a flow: N copies of the executor, each
// holding part of the data, e.g. an index's documents). Set by executor types that can be sharded; the
// runtime routes each request as it says.
struct ShardPlan {
  // Endpoints whose documents each go to one shard, chosen by a stable hash of the document's id (so a
  // document always reaches the shard that holds it); the shards' answers are put back in request order.
  // Every other endpoint goes, whole, to every shard, and `merge` makes one answer of theirs.
  std::vector<std::string> by_id;
  // parts[s]: shard s's answer (its documents, as the handler left them); `parameters`: the request's;
  // `params`: the executor's `with:` in the flow. Runs on the replica thread of the last shard to answer,
  // concurrently with other requests' merges: it must not keep state. Throws to fail the request (the
  // message names what did not merge).
  std::function<DocumentArray(std::string_view endpoint, const boost::json::object& parameters, const Params& params,
                              std::vector<DocumentArray>& parts)>
      merge;
};

// Static description of an executor type: what the registry lists, what the flow validator checks.
struct ExecutorSpec {
  std::string name;                         // the `uses:` name, e.g. "TextSplitter"
  std::string help;                         // one line for `flowline executors`
  std::vector<ParamSpec> params;            // its `with:` parameters
  std::vector<std::string> endpoints;       // endpoints bound besides the default, e.g. {"/encode"}
  bool default_endpoint = true;             // whether bind_default() is used
  int max_replicas = 0;                     // 0: any number; 1 for executors that own a file
  int replicas_per_gpu = 1;                 // what `replicas: auto` gives on each GPU (one on a CPU)
  std::shared_ptr<const ShardPlan> shards;  // null: `shards:` is refused for this type
  // A resumable sink (flowline/resumable_sink.hpp) whose replicas in one process keep one progress between them:
  // `flowline run --resume` accepts it with replicas > 1 (others: one replica, each would count only its share).
  bool replicated_sink = false;
};

// What the replicas of one executor in one flow share: at most one object of each type, made by the first
// replica that asks (under a lock, so replicas constructed at once make it once) and kept for as long as a
// replica holds it. For state that must not be copied per replica, e.g. an index every replica searches.
// Thread-safe; what the object does under concurrent use is its own business (replicas run at once).
class ReplicaGroup {
 public:
  template <class T>
  std::shared_ptr<T> shared(const std::function<std::shared_ptr<T>()>& make) {
    std::lock_guard lock(mutex_);
    std::weak_ptr<void>& slot = objects_[std::type_index(typeid(T))];
    if (auto existing = slot.lock()) return std::static_pointer_cast<T>(existing);
    std::shared_ptr<T> made = make();
    slot = made;
    return made;
  }

 private:
  std::mutex mutex_;
  std::map<std::type_index, std::weak_ptr<void>> objects_;
};

// What an executor replica knows about where it runs. Set by the Flow before construction.
struct RuntimeInfo {
  std::string name;  // the executor's name in the flow, e.g. "encoder"
  std::string type;  // its spec name, e.g. "SentenceEncoder"
  int replica = 0;   // 0 .. replicas - 1
  int replicas = 1;
  c10::Device device{c10::kCPU};   // resolved device ("auto" already decided)
  int replicas_on_device = 1;      // replicas of this executor sharing `device` (for memory budgets)
  std::size_t request_size = 100;  // documents per request the flow posts by default (post() may ask for
                                   // others): for sizing buffers ahead of the first request
  // Shared by this executor's replicas in this process (one per executor per flow); null for an executor
  // constructed outside a flow.
  std::shared_ptr<ReplicaGroup> group;
  // With `shards: N` (ExecutorSpec::shards): which shard this replica serves, 0 .. shards - 1. Each shard
  // has `replicas` replicas and a group of its own; an executor keeps each shard's data apart (e.g. a
  // folder per shard).
  int shard = 0;
  int shards = 1;
  // What each file this executor writes (its ParamSpec::output_file() parameters) may hold, in bytes; 0: no
  // bound. A served flow sets it (`flowline serve --max-output-bytes`): an executor that writes a file
  // refuses a request once the file holds this much, naming the bound, instead of filling the disk.
  std::uint64_t max_output_bytes = 0;
  // True when the documents come from the user who started the flow (`flowline run`'s input, FlowOptions::
  // local_input_files): an executor may then read any local file a document's `uri` names. False for a served
  // flow and by default: a `uri` there is a client's, and only folders the flow names may be read. Added in
  // plugin API 4.2.
  bool local_input_files = false;
};

// Figures an executor reports about its own work ("tokens", "max_forward_tokens", ...), shown per replica
// in Flow::stats(). Written by the executor's thread, read by any thread: every member is thread-safe.
class ExecutorMetrics {
 public:
  void add(std::string_view name, double delta);      // a running total
  void set_max(std::string_view name, double value);  // the largest value seen
  void set(std::string_view name, double value);      // the latest value
  std::map<std::string, double> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, double, std::less<>> values_;
};

// Everything a constructor receives. Borrowed for the duration of the constructor; copy what you keep.
struct ExecutorContext {
  const RuntimeInfo& runtime;
  const Params& params;
};

// Whether the requests of one handler call were given up. The gateway sets a request's flag (a Flag it
// shares with the request, Flow::submit()) when the request's deadline passed or its client went away; the
// runtime then drops the request before it runs, and a handler already running learns it here. A batch that
// merges several requests is cancelled only once every one of them is (the others still want their
// answers). Built by the runtime for each handler call and borrowed for the call; requested() may be called
// from any thread (the flags are atomic), cheaply enough for a loop's every few milliseconds. Added in plugin
// API 4.3.
class Cancellation {
 public:
  using Flag = std::atomic<bool>;
  Cancellation() = default;
  // `flags` must outlive this object (the runtime's requests hold them).
  explicit Cancellation(std::vector<const Flag*> flags) : flags_(std::move(flags)) {}
  bool requested() const noexcept {
    for (const Flag* flag : flags_) {
      if (!flag->load(std::memory_order_relaxed)) return false;
    }
    return !flags_.empty();
  }

 private:
  std::vector<const Flag*> flags_;
};

// The cancellation of the handler call running on this thread (set by Executor::handle for the call's
// duration), or null outside a handler: for code below a handler that is not handed its RequestInfo (a
// filter's evaluation, a backend's search loop). Threads the handler starts (LibTorch's pool) see null.
// Added in plugin API 4.3.
const Cancellation* this_thread_cancellation() noexcept;
// Throws RequestError ("cancelled during WHAT: the request's deadline passed or its client went away")
// when this thread's handler call is cancelled; nothing otherwise. A long loop calls it between steps, so
// that a request nobody waits for any more frees its executor within one step. Added in plugin API 4.3.
void throw_if_cancelled(std::string_view what);

// What a handler knows about the request it serves. Built by the runtime for each handler call; borrowed for
// the call.
struct RequestInfo {
  std::string_view endpoint;
  // The request's parameters as sent with the post (Jina's `parameters`), those the endpoint declares in
  // their checked form (5.0 sent for an int is 5). Names it does not declare are here unchecked.
  const boost::json::object& parameters;
  // The declared request parameters (EndpointParams, flowline/params.hpp), checked by the runtime before the
  // handler runs: present when sent, or when their default is not null. Null when the handler is called
  // outside a flow (Executor::handle without declarations). Added in plugin API 4.1.
  const Params* declared = nullptr;

  // A declared request parameter, typed (T as Params::get). Throws ExecutorError when `name` is not declared
  // for this endpoint or has no value (use param_or for those with a null default).
  template <class T>
  T param(std::string_view name) const {
    return declared ? declared->get<T>(name) : Params("request", parameters).get<T>(name);
  }
  // The parameter, or `fallback` when the request did not send it (nor has it a default).
  template <class T>
  T param_or(std::string_view name, T fallback) const {
    return declared ? declared->get_or<T>(name, std::move(fallback))
                    : Params("request", parameters).get_or<T>(name, std::move(fallback));
  }

  // Whether every request of this call was given up (Cancellation). Null outside a flow, and for handlers
  // of a plugin built before 4.3 (which do not read it). Added in plugin API 4.3: RequestInfo grew at its end.
  const Cancellation* cancellation = nullptr;
  bool cancelled() const noexcept { return cancellation && cancellation->requested(); }
};

class Executor {
 public:
  using Handler = std::function<void(DocumentArray&, const RequestInfo&)>;

  explicit Executor(const ExecutorContext& context);
  virtual ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Called once on the executor's thread after its last batch. Default: nothing.
  virtual void close() {}
  // In close(): how the run ended (Complete before the flow says otherwise).
  RunOutcome run_outcome() const noexcept { return run_outcome_; }

  const RuntimeInfo& runtime() const noexcept { return runtime_; }
  const Params& params() const noexcept { return params_; }
  // This replica's own figures; the executor writes them, Flow::stats() reads them.
  ExecutorMetrics& metrics() noexcept { return *metrics_; }
  std::shared_ptr<const ExecutorMetrics> shared_metrics() const noexcept { return metrics_; }

  // Framework side. Runs the handler for `endpoint` (or the default handler; with neither, the batch
  // passes through unchanged). `declared`: the request parameters check_request_params() made of
  // `parameters` (RequestInfo::declared), or null. Exceptions propagate to the caller.
  void handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters);
  void handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters,
              const Params* declared);
  // As above, the handler also seeing `cancellation` (RequestInfo::cancellation and, on this thread,
  // this_thread_cancellation()); null: never cancelled. Added in plugin API 4.3.
  void handle(std::string_view endpoint, DocumentArray& docs, const boost::json::object& parameters,
              const Params* declared, const Cancellation* cancellation);
  bool has_handler(std::string_view endpoint) const;
  // Endpoints bound so far, default excluded, sorted.
  std::vector<std::string> bound_endpoints() const;
  bool has_default_handler() const noexcept { return static_cast<bool>(default_handler_); }
  // Set by the flow before close().
  void set_run_outcome(RunOutcome outcome) noexcept { run_outcome_ = outcome; }

 protected:
  // Binds a handler to an endpoint name such as "/encode". Binding a name twice is an error.
  void bind(std::string endpoint, Handler handler);
  // Binds a member function: void T::f(DocumentArray&) or void T::f(DocumentArray&, const RequestInfo&).
  template <class Self>
  void bind(std::string endpoint, void (Self::*method)(DocumentArray&)) {
    bind(std::move(endpoint), member_handler(method));
  }
  template <class Self>
  void bind(std::string endpoint, void (Self::*method)(DocumentArray&, const RequestInfo&)) {
    bind(std::move(endpoint), member_handler(method));
  }
  // Binds the handler for requests whose endpoint has no handler of its own.
  void bind_default(Handler handler);
  template <class Self, class Method>
  void bind_default(Method Self::*method) {
    bind_default(member_handler(method));
  }

 private:
  template <class Self>
  Handler member_handler(void (Self::*method)(DocumentArray&)) {
    static_assert(std::is_base_of_v<Executor, Self>, "bind a member function of the executor itself");
    auto* self = static_cast<Self*>(this);
    return [self, method](DocumentArray& docs, const RequestInfo&) { (self->*method)(docs); };
  }
  template <class Self>
  Handler member_handler(void (Self::*method)(DocumentArray&, const RequestInfo&)) {
    static_assert(std::is_base_of_v<Executor, Self>, "bind a member function of the executor itself");
    auto* self = static_cast<Self*>(this);
    return [self, method](DocumentArray& docs, const RequestInfo& req) { (self->*method)(docs, req); };
  }

  RuntimeInfo runtime_;
  Params params_;
  std::shared_ptr<ExecutorMetrics> metrics_ = std::make_shared<ExecutorMetrics>();
  std::map<std::string, Handler, std::less<>> handlers_;
  Handler default_handler_;
  RunOutcome run_outcome_ = RunOutcome::Complete;
};

}  // namespace flowline
