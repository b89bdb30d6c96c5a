// The gRPC front (grpc_front.hpp): Jina's services on gRPC's callback API, each data request handed to the core.
//
// jina.JinaRPC/Call, a bidirectional stream: requests are read while fewer than kStreamWindow of the stream's
// are unanswered (in the flow, or answered and not yet written) and their messages hold less than twice
// --max-body-bytes, so a client that sends faster than the flow encodes, or does not read, is slowed by HTTP/2
// flow control; answers are written in request order. A request past the core's in-flight bound waits for a
// slot instead of being refused (the window is the stream's backpressure). Over all streams and unary calls,
// the messages read and the answers not yet written count against Core::grpc_held (max_in_flight x
// max_body_bytes); a message read past it ends its stream with RESOURCE_EXHAUSTED, as does running out of
// memory while a request is read or answered. A request the gateway refuses (malformed, too many documents, a
// timeout, draining) ends the stream with that status once the answers before it are written; an executor's
// failure is answered in Jina's way (header status ERROR) and the stream goes on. A client that goes away
// cancels the stream and its requests still in the flow (Call::cancel: the flow drops them or stops their
// handlers; what comes back of them is dropped), and a unary call's its request (unary_reactor.hpp).
// Messages are read and written as bytes (raw callback methods) and parsed here (front_support.hpp): one that
// does not parse is refused INVALID_ARGUMENT naming the method; answers are serialized on the flow's thread.
#include "../grpc_front.hpp"

#include "../answer_window.hpp"
#include "../core.hpp"
#include "front_support.hpp"
#include "info_services.hpp"
#include "jina.grpc.pb.h"
#include "jina_proto.hpp"
#include "unary_reactor.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <chrono>
#include <limits>
#include <new>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

namespace flowline::gateway {

namespace {

using Clock = std::chrono::steady_clock;
using Request = JinaRequest;
using Bytes = grpc::ByteBuffer;  // a message as read from the wire, or an answer serialized

constexpr std::string_view kCallMethod = "jina.JinaRPC/Call";
constexpr std::string_view kSingleMethod = "jina.JinaSingleDataRequestRPC/process_single_data";

// Requests of one stream unanswered at once (and at most twice --max-body-bytes of their messages).
constexpr std::size_t kStreamWindow = 16;

// A message's bytes counted against the front's bound (Core::grpc_held), twice over: the message as read
// and the documents made from it are held at once; an answer is the message refilled, beside the flow's
// documents it is made from.
constexpr std::size_t kHeldPerByte = 2;

std::size_t held_bytes_of(std::size_t message_bytes) {
  return message_bytes > std::numeric_limits<std::size_t>::max() / kHeldPerByte
             ? std::numeric_limits<std::size_t>::max()
             : message_bytes * kHeldPerByte;
}

// Takes a message's bytes from the front's bound; nullopt when they fit, else the refusal that says why.
std::optional<Refused> take_held(Core& core, std::size_t message_bytes) {
  if (core.grpc_held.try_take(held_bytes_of(message_bytes))) return std::nullopt;
  return Refused{Refusal::TooLarge,
                 fmt::format("the gateway holds {} bytes for gRPC messages and answers not yet written; this "
                             "message ({} bytes, counted twice) would pass its bound of {} (--max-in-flight x "
                             "--max-body-bytes): retry later",
                             core.grpc_held.held(), message_bytes, core.grpc_held.bound())};
}

// How long a stream refused at its start drops what the client sends before its status goes out.
constexpr std::chrono::milliseconds kRefusalDrain(2000);

// Fills `answer` with the flow's response (its documents, or Jina's error header when an executor failed)
// and serializes it into `out`. A refusal (Failed) when the answer could not be written (an embedding that
// could not be read back).
std::optional<Refused> fill_answer(Request& answer, const Response& response, Bytes& out) noexcept {
  try {
    if (response.ok()) {
      write_answer(answer, response.docs);
    } else {
      write_failure(answer, response);
    }
    if (auto failed = serialize_message(answer.message(), out))
      return Refused{Refusal::Failed, fmt::format("the answer could not be written: {}", *failed)};
    return std::nullopt;
  } catch (const std::bad_alloc&) {
    return Refused{Refusal::TooLarge, "the answer could not be written: out of memory"};
  } catch (const std::exception& e) {
    return Refused{Refusal::Failed, fmt::format("the answer could not be written: {}", e.what())};
  }
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What a call may take: the request timeout, or less when the client's deadline is nearer.
std::chrono::milliseconds call_timeout(const Core& core, const grpc::CallbackServerContext* context) {
  auto timeout = core.options.request_timeout;
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::system_clock::now());
    timeout = std::max(std::chrono::milliseconds(1), std::min(timeout, left));
  }
  return timeout;
}

// One jina.JinaRPC/Call stream. Every member below mutex_ is guarded by it; the reactor's Start* and
// Finish are called outside it. Finish waits until no request of the stream is in the flow. The stream is
// deleted when gRPC has called OnDone and no thread is inside one of its reactions or flow callbacks
// (refs_: one for gRPC, one per thread inside; a thread may still be in a reaction when another one's
// Finish lets gRPC call OnDone).
class CallStream final : public grpc::ServerBidiReactor<Bytes, Bytes> {
 public:
  CallStream(Core& core, grpc::CallbackServerContext* context) : core_(core), context_(context) {
    Hold hold(this);
    std::unique_lock lock(mutex_);
    if (!authorized(core_, context_)) {
      refuse_at_start(lock, grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                         "missing or wrong bearer token (send metadata \"authorization: Bearer "
                                         "<token>\")"));
    } else if (!core_.serving()) {
      refuse_at_start(lock,
                      grpc::Status(grpc::StatusCode::UNAVAILABLE, "the gateway is draining: try another replica"));
    } else {
      read_next(lock);
    }
  }

  void OnReadDone(bool ok) override {
    Hold hold(this);
    std::unique_lock lock(mutex_);
    reading_ = false;
    if (ok && draining_) {  // refused at its start: what the client sends is dropped
      next_.reset();
      return read_next(lock);
    }
    if (!ok || stopped_) {  // the client's half closed, or the stream ended at a refused request
      reads_done_ = true;
      return end_drain(lock);
    }
    auto message = std::move(next_);
    const std::uint64_t seq = window_.open();
    const std::size_t bytes = message->Length();
    if (auto refused = take_held(core_, bytes)) {  // past the front's bound: the stream ends here
      message.reset();
      lock.unlock();
      refuse(seq, refused->kind, refused->message, Clock::now());
      lock.lock();
      return read_next(lock);
    }
    hold_request(seq, held_bytes_of(bytes));
    lock.unlock();
    handle(seq, std::move(message));
    lock.lock();
    read_next(lock);
  }

  void OnWriteDone(bool ok) override {
    Hold hold(this);
    std::unique_lock lock(mutex_);
    writing_ = false;
    written_.reset();
    drop_request(window_.next_write() - 1);
    if (!ok) stop(std::nullopt);  // the client is gone
    read_next(lock);
  }

  void OnCancel() override {
    Hold hold(this);
    std::unique_lock lock(mutex_);
    stop(std::nullopt);
    // Nobody reads the answers now: the flow drops these requests, or their handlers stop at their next check.
    for (auto& [seq, cancel] : cancels_) cancel->store(true);
    end_drain(lock);
  }

  void OnDone() override { release(); }

  ~CallStream() override { core_.grpc_held.give(held_bytes_); }  // what its requests and answers still held

 private:
  // A thread inside the stream: it stays alive until the thread leaves.
  struct Hold {
    explicit Hold(CallStream* stream) : stream(stream) { stream->refs_++; }
    ~Hold() { stream->release(); }
    CallStream* stream;
  };
  void release() {
    if (--refs_ == 0) delete this;
  }

  // Under the lock: a request read (its message's bytes), and one written or dropped.
  void hold_request(std::uint64_t seq, std::size_t bytes) {
    sizes_.emplace(seq, bytes);
    held_bytes_ += bytes;
  }
  void drop_request(std::uint64_t seq) {
    cancels_.erase(seq);
    const auto it = sizes_.find(seq);
    if (it == sizes_.end()) return;
    held_bytes_ -= it->second;
    core_.grpc_held.give(it->second);
    sizes_.erase(it);
  }
  // Under the lock: request `seq` now holds `bytes` (its answer's, counted as a message's).
  void resize_request(std::uint64_t seq, std::size_t bytes) {
    const auto it = sizes_.find(seq);
    if (it == sizes_.end()) return;
    if (bytes > it->second) {
      core_.grpc_held.take(bytes - it->second);
    } else {
      core_.grpc_held.give(it->second - bytes);
    }
    held_bytes_ = held_bytes_ - it->second + bytes;
    it->second = bytes;
  }

  // Ends the stream: no more reads; `status` is sent once the answers before it are written (nullopt:
  // cancelled, nothing more is written).
  void stop(std::optional<grpc::Status> status) {
    if (stopped_) return;
    stopped_ = true;
    final_ = std::move(status);
    if (!final_) window_.close_at(window_.next_write());  // nothing more is written
  }

  // Under the lock: a stream refused before its first request (no token, a draining gateway) reads and
  // drops what the client sends until it half-closes, or for kRefusalDrain, before `status` goes out. A
  // status sent while the client's first message is still on its way fails that write on the client's
  // side, and Jina's client then reports INTERNAL ("Failed execute_batch SendMessageOperation") instead
  // of the refusal.
  void refuse_at_start(std::unique_lock<std::mutex>& lock, grpc::Status status) {
    stop(std::move(status));
    window_.close_at(0);  // no answer goes before the status
    draining_ = true;
    refs_++;  // the alarm's, released when it has fired or was cancelled
    drain_alarm_.Set(std::chrono::system_clock::now() + kRefusalDrain, [this](bool) {
      {
        std::unique_lock alarm_lock(mutex_);
        draining_ = false;
        settle(alarm_lock);
      }
      release();
    });
    read_next(lock);
  }

  // Under the lock: no more reads to drop (the client half-closed, or the stream was cancelled), then
  // settle(); the lock is released on return.
  void end_drain(std::unique_lock<std::mutex>& lock) {
    const bool was_draining = draining_;
    draining_ = false;
    settle(lock);
    if (lock.owns_lock()) lock.unlock();
    if (was_draining) drain_alarm_.Cancel();  // its callback runs on another thread, later
  }

  // Under the lock: reads the next request when the window has room, else writes or finishes.
  void read_next(std::unique_lock<std::mutex>& lock) {
    const bool room = sizes_.empty() || (sizes_.size() < kStreamWindow && held_bytes_ < max_held_bytes_);
    if (!reading_ && !reads_done_ && (!stopped_ || draining_) && room) {
      reading_ = true;
      starting_read_ = true;  // no Finish before StartRead was called
      next_ = std::make_unique<Bytes>();
      Bytes* target = next_.get();
      lock.unlock();
      StartRead(target);
      lock.lock();
      starting_read_ = false;
      return settle(lock);
    }
    settle(lock);
  }

  // Under the lock: writes the next answer in order, or finishes when nothing is left to do.
  void settle(std::unique_lock<std::mutex>& lock) {
    if (finished_) return;
    if (!writing_ && (final_ || !stopped_)) {
      if (auto next = window_.take_next()) {
        writing_ = true;
        written_ = std::move(*next);
        const Bytes* answer = written_.get();
        lock.unlock();
        StartWrite(answer);
        lock.lock();
        return;
      }
    }
    const bool input_over = reads_done_ || (stopped_ && !draining_);
    const bool answers_over = (window_.empty() || (stopped_ && !final_)) && !writing_;
    if (input_over && answers_over && in_flow_ == 0 && !starting_read_ && (!final_ || window_.all_written())) {
      finished_ = true;
      grpc::Status status = final_ ? *final_ : (stopped_ ? grpc::Status::CANCELLED : grpc::Status::OK);
      lock.unlock();
      Finish(std::move(status));  // the lock stays released: callers return at once
    }
  }

  // The request's message parsed and handed to the flow, or refused.
  void handle(std::uint64_t seq, std::unique_ptr<Bytes> message) {
    const auto started = Clock::now();
    auto request = std::make_unique<Request>();
    Call call;
    try {
      const std::size_t bytes = message->Length();
      request->docarray_v1 = docarray_v1_on_stream(*message, generation_);
      if (!parse_message(*message, request->message()))
        return refuse(seq, Refusal::BadRequest, not_parsed(kCallMethod, request->message(), bytes), started);
      message.reset();
      call = call_from_proto(*request, core_.limits);
    } catch (const RefusedError& e) {
      return refuse(seq, e.kind, e.what(), started);
    } catch (const std::bad_alloc&) {
      return refuse(seq, Refusal::TooLarge, "out of memory while reading the request's documents", started);
    } catch (const std::exception& e) {
      return refuse(seq, Refusal::Failed, e.what(), started);
    }
    const std::size_t documents = call.docs.size();
    call.cancel = std::make_shared<Cancellation::Flag>(false);
    {
      std::lock_guard lock(mutex_);
      ++in_flow_;
      cancels_.emplace(seq, call.cancel);
    }
    auto shared = std::shared_ptr<Request>(std::move(request));
    core_.submit_or_wait(std::move(call), call_timeout(core_, context_),
                         [this, seq, shared, documents, started](Outcome&& outcome) mutable {
                           answered(seq, std::move(shared), documents, started, std::move(outcome));
                         });
  }

  // On a replica thread (the flow's answer) or an I/O thread (a timeout, a refusal).
  void answered(std::uint64_t seq, std::shared_ptr<Request> request, std::size_t documents, Clock::time_point started,
                Outcome&& outcome) {
    Hold hold(this);
    std::optional<Refused> refused = std::move(outcome.refused);
    // Serialized here, on the replica's thread, off the gRPC threads.
    auto answer = std::make_unique<Bytes>();
    if (!refused) refused = fill_answer(*request, outcome.response, *answer);
    request.reset();
    if (refused) {
      refuse(seq, refused->kind, refused->message, started);
    } else {
      const std::size_t answer_bytes = held_bytes_of(answer->Length());
      core_.count_answer(FrontKind::Grpc, Route::Grpc,
                         outcome.response.ok()            ? 200
                         : outcome.response.request_error ? 422
                                                          : 500,
                         std::nullopt, documents, seconds_since(started));
      std::unique_lock lock(mutex_);
      if (!stopped_ || (final_ && window_.accepts(seq))) {
        resize_request(seq, answer_bytes);  // held until written (OnWriteDone drops it)
        window_.put(seq, std::move(answer));
      } else {
        drop_request(seq);
      }
      --in_flow_;
      return read_next(lock);
    }
    std::unique_lock lock(mutex_);
    --in_flow_;
    read_next(lock);
  }

  // The stream ends at request `seq`: the answers before it are written, then `kind`'s status.
  void refuse(std::uint64_t seq, Refusal kind, const std::string& message, Clock::time_point started) {
    core_.count_answer(FrontKind::Grpc, Route::Grpc, http_status(kind), kind, 0, seconds_since(started));
    std::unique_lock lock(mutex_);
    drop_request(seq);
    if (!stopped_ || (final_ && window_.accepts(seq))) {
      stopped_ = true;
      final_ = grpc::Status(grpc_code(kind), fmt::format("request {} of the stream: {}", seq + 1, message));
      window_.close_at(seq, [this](std::uint64_t dropped) { drop_request(dropped); });
    }
    settle(lock);
  }

  Core& core_;
  grpc::CallbackServerContext* context_;
  std::mutex mutex_;
  std::unique_ptr<Bytes> next_;     // the request being read
  std::unique_ptr<Bytes> written_;  // the answer being written
  // The answers in request order (answer_window.hpp, as the HTTP front's NDJSON streams): it ends at the
  // refused request, when one was.
  AnswerWindow<std::unique_ptr<Bytes>> window_;
  // The requests read and not yet written (or dropped), by number: their messages' bytes.
  std::map<std::uint64_t, std::size_t> sizes_;
  std::size_t held_bytes_ = 0;
  // A stream reads on while it holds fewer than kStreamWindow requests and fewer bytes than this (twice
  // the largest message), and always when it holds none.
  std::size_t max_held_bytes_ = 2 * core_.options.max_body_bytes;
  std::size_t in_flow_ = 0;  // requests handed to the core and not yet back
  // The requests' cancellation flags, by number, until written or dropped: set when the client goes away.
  std::map<std::uint64_t, std::shared_ptr<Cancellation::Flag>> cancels_;
  bool reading_ = false, starting_read_ = false, writing_ = false, reads_done_ = false, stopped_ = false,
       finished_ = false;
  bool draining_ = false;     // refused at its start: reads are dropped until the client half-closes
  grpc::Alarm drain_alarm_;   // ends the drain after kRefusalDrain
  std::atomic<int> refs_{1};  // gRPC's, until OnDone
  std::optional<grpc::Status> final_;
  // The docarray generation the stream's requests showed by their documents, for those without (handle(): one
  // request at a time, as the stream's reads come one after another).
  std::optional<bool> generation_;
};

class JinaRpc final : public jina::JinaRPC::WithRawCallbackMethod_Call<jina::JinaRPC::Service> {
 public:
  explicit JinaRpc(Core& core) : core_(core) {}
  grpc::ServerBidiReactor<Bytes, Bytes>* Call(grpc::CallbackServerContext* context) override {
    return new CallStream(core_, context);
  }

 private:
  Core& core_;
};

class SingleRequest final : public jina::JinaSingleDataRequestRPC::WithRawCallbackMethod_process_single_data<
                                jina::JinaSingleDataRequestRPC::Service> {
 public:
  explicit SingleRequest(Core& core) : core_(core) {}
  grpc::ServerUnaryReactor* process_single_data(grpc::CallbackServerContext* context, const Bytes* request,
                                                Bytes* reply) override {
    auto cancel = std::make_shared<Cancellation::Flag>(false);
    auto* reactor = new CancellableUnaryReactor(cancel);  // deletes itself once done
    const auto started = Clock::now();
    auto refuse = [&](Refusal kind, const std::string& message) {
      core_.count_answer(FrontKind::Grpc, Route::Grpc, http_status(kind), kind, 0, seconds_since(started));
      reactor->Finish(grpc::Status(grpc_code(kind), message));
      return reactor;
    };
    if (!authorized(core_, context))
      return refuse(Refusal::Unauthenticated,
                    "missing or wrong bearer token (send metadata \"authorization: Bearer <token>\")");
    // The request (as read, and parsed into the answer, refilled) counted against the front's bound until
    // Finish.
    const std::size_t message_bytes = request->Length();
    if (auto refused = take_held(core_, message_bytes)) return refuse(refused->kind, refused->message);
    auto held = std::shared_ptr<void>(
        nullptr, [&core = core_, bytes = held_bytes_of(message_bytes)](void*) { core.grpc_held.give(bytes); });
    auto answer = std::make_shared<Request>();
    Call call;
    try {
      Bytes bytes(*request);  // shares its slices
      answer->docarray_v1 = docarray_v1_message(bytes);
      if (!parse_message(bytes, answer->message()))
        return refuse(Refusal::BadRequest, not_parsed(kSingleMethod, answer->message(), message_bytes));
      call = call_from_proto(*answer, core_.limits);
    } catch (const RefusedError& e) {
      return refuse(e.kind, e.what());
    } catch (const std::bad_alloc&) {
      return refuse(Refusal::TooLarge, "out of memory while reading the request's documents");
    } catch (const std::exception& e) {
      return refuse(Refusal::Failed, e.what());
    }
    const std::size_t documents = call.docs.size();
    call.cancel = std::move(cancel);
    core_.submit(std::move(call), call_timeout(core_, context),
                 [this, reactor, answer, reply, documents, started, held](Outcome&& outcome) {
                   std::optional<Refused> refused = std::move(outcome.refused);
                   if (!refused) refused = fill_answer(*answer, outcome.response, *reply);
                   if (refused) {
                     core_.count_answer(FrontKind::Grpc, Route::Grpc, http_status(refused->kind), refused->kind, 0,
                                        seconds_since(started));
                     return reactor->Finish(grpc::Status(grpc_code(refused->kind), refused->message));
                   }
                   core_.count_answer(FrontKind::Grpc, Route::Grpc,
                                      outcome.response.ok()            ? 200
                                      : outcome.response.request_error ? 422
                                                                       : 500,
                                      std::nullopt, documents, seconds_since(started));
                   reactor->Finish(grpc::Status::OK);
                 });
    return reactor;
  }

 private:
  Core& core_;
};

class Front final : public GrpcFront {
 public:
  Front(Core& core, const std::string& host, std::uint16_t port)
      : jina_(core), single_(core), info_(make_info_services(core)) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    const std::string address =
        host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
    int bound = 0;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound);
    const GatewayOptions& o = core.options;
    builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(o.max_body_bytes, INT32_MAX)));
    // Jina's Client pings every 10 s, with or without calls; gRPC's default would answer with GOAWAY.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(o.idle_timeout.count()));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 256);
    if (o.grpc_memory_bytes != 0) {
      // gRPC 1.51 bounds no count of connections; its resource quota bounds what they hold.
      grpc::ResourceQuota quota("flowline-gateway-grpc");
      quota.Resize(o.grpc_memory_bytes);
      builder.SetResourceQuota(quota);
    }
    builder.RegisterService(&jina_);
    builder.RegisterService(&single_);
    for (const auto& service : info_) builder.RegisterService(service.get());
    server_ = builder.BuildAndStart();
    if (!server_ || bound == 0)
      throw Error(fmt::format("{}: cannot serve gRPC there (in use, or not an address)", address));
    port_ = static_cast<std::uint16_t>(bound);
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(true);
  }

  ~Front() override { stop(); }

  std::uint16_t port() const noexcept override { return port_; }

  void stop() override {
    if (!server_) return;
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    server_.reset();
  }

 private:
  JinaRpc jina_;
  SingleRequest single_;
  std::vector<std::unique_ptr<grpc::Service>> info_;
  std::unique_ptr<grpc::Server> server_;
  std::uint16_t port_ = 0;
};

}  // namespace

bool GrpcFront::available() noexcept { return true; }

std::unique_ptr<GrpcFront> GrpcFront::start(Core& core, const std::string& host, std::uint16_t port) {
  return std::make_unique<Front>(core, host, port);
}

}  // namespace flowline::gateway
