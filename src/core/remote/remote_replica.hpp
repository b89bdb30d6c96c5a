// Replicas on other machines: RemoteHost, this flow's connection to one executor server, and
// RemoteReplica, the Replica (runtime/replica.hpp) that runs batches through it. Private to flowline::core.
//
// Threads and ownership. A RemoteGroup belongs to the flow's stage of one executor and owns a RemoteHost
// per `hosts:` entry. Each RemoteHost runs its own I/O thread (an io_context): connecting, the handshake,
// writing frames, reading answers, timers and reconnecting all happen there. Replica threads (several per
// host, remote.in_flight) encode their batch, hand the frame to the I/O thread and wait for the answer
// (call()); they decode it themselves, so the I/O thread only moves bytes.
//
// Failure model. A host that refuses the connection, drops it, sends a bad frame or leaves a request
// unanswered past remote.timeout is "lost": its connection is closed, every call waiting on it throws
// ReplicaUnavailable (the worker re-queues those batches for the other replicas) and the I/O thread
// reconnects with exponential backoff (100 ms doubling to remote.retry_max); when the handshake succeeds
// the host's replicas take work again. An error the executor reported (its handler threw) is an answer,
// not a loss: it fails that request as a local replica's error does.
#pragma once

#include "../runtime/replica.hpp"
#include "wire.hpp"

#include "flowline/flow_results.hpp"
#include "flowline/flow_config.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace flowline::remote {

class RemoteGroup;

class RemoteHost {
 public:
  // `label` names this connection in stats and metrics: the address, or "address#k" when remote.connections
  // opens several to it.
  RemoteHost(std::string executor, std::string address, std::string label, const RemoteOptions& options,
             RemoteGroup& group);
  ~RemoteHost();  // stops the I/O thread, closing the connection
  RemoteHost(const RemoteHost&) = delete;
  RemoteHost& operator=(const RemoteHost&) = delete;

  // Starts the I/O thread and its first connection attempt, and waits for the outcome (bounded by
  // connect_timeout). Returns empty when connected, else why not; the host keeps retrying in either case.
  std::string start();

  enum class Wait { Up, Stop, GiveUp };
  // Blocks until the host is connected (Up), `stop()` returns true (polled every 100 ms), or the group
  // has had no replica reachable for remote.give_up (GiveUp). Replica threads.
  Wait wait_up(const std::function<bool()>& stop);

  // Sends one request frame (its id from next_id()) and waits for the answer frame. Throws
  // runtime::ReplicaUnavailable when the host is or becomes lost, or the answer takes longer than
  // remote.timeout (the host is then lost too). Replica threads, concurrently.
  std::string call(std::uint64_t id, std::string frame);
  std::uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  bool up() const;
  std::string last_error() const;
  RemoteHostStats stats() const;
  const std::string& address() const { return address_; }
  void count_requeued() { requeued_batches_.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Io;  // the Asio side: io_context, socket, timers (remote_replica.cpp)
  struct Pending {
    std::string answer;
    std::string lost;  // why the host was lost while this call waited
    bool done = false;
    std::condition_variable ready;  // its own: an answer wakes only the call that waits for it
  };
  friend struct Io;

  void connected(std::uint64_t generation);  // I/O thread
  void lost(const std::string& why);         // I/O thread: fails every waiting call
  void answered(std::uint64_t id, std::string frame);

  const std::string executor_;
  const std::string address_;
  const std::string label_;
  const RemoteOptions options_;
  RemoteGroup& group_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // connected or lost (wait_up, start)
  bool up_ = false;
  bool ever_up_ = false;
  bool attempted_ = false;        // the first connection attempt has ended
  std::uint64_t generation_ = 0;  // counts connections; a call belongs to the one it was sent on
  std::string last_error_;
  std::unordered_map<std::uint64_t, Pending*> pending_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> reconnects_{0}, requeued_batches_{0}, lost_{0}, requests_{0};

  std::unique_ptr<Io> io_;  // last: its thread is stopped first
};

// The hosts of one executor (a RemoteHost per connection: remote.connections to each `hosts:` entry), and
// whether any of its replicas can take work.
class RemoteGroup {
 public:
  RemoteGroup(const ExecutorConfig& executor);
  // Connects every host (in parallel); throws flowline::Error naming each unreachable host unless
  // remote.start_degraded.
  void start();
  const std::vector<std::unique_ptr<RemoteHost>>& hosts() const { return hosts_; }
  // Whether the executor has been without any reachable replica for at least remote.give_up.
  bool given_up();
  // The message that fails requests once given up: every host and why it is unreachable.
  std::string unreachable_message() const;
  std::vector<RemoteHostStats> stats() const;

 private:
  const std::string executor_;
  const int local_replicas_;
  const std::chrono::milliseconds give_up_;
  const bool start_degraded_;
  std::vector<std::unique_ptr<RemoteHost>> hosts_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point none_up_since_{};  // epoch: some host was up at the last look
};

// A replica thread's view of one host: run() encodes the batch, calls the host and decodes the answer.
class RemoteReplica final : public runtime::Replica {
 public:
  RemoteReplica(RemoteHost& host, RemoteGroup& group) : host_(host), group_(group) {}
  void open() override {}
  std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) override;
  // The executor server's own executors close when that server stops; the outcome is not sent there.
  void close(RunOutcome) noexcept override {}
  runtime::Availability wait_available(const std::function<bool()>& stop) override;
  std::string unavailable_message() const override { return group_.unreachable_message(); }

 private:
  RemoteHost& host_;
  RemoteGroup& group_;
};

}  // namespace flowline::remote
