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
//
// Discovery (remote.discovery: dns). A `hosts:` entry then names a set of servers: every address its name
// resolves to (a Kubernetes headless Service's ready pods, a Compose service's containers). The group
// holds remote.max_servers × remote.connections RemoteHosts for it from the start — slots, each with its
// remote.in_flight replica threads — and a discovery thread resolves the name every
// remote.discovery_interval: a new address gets free slots (assign()), a vanished one releases its slots
// (release(): no new calls; the connection closes once its calls in flight are answered). A slot without
// a server keeps its replica threads waiting, as a lost host does. A failed lookup keeps the servers
// known before (they fail on their own if they are gone).
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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace flowline::remote {

class RemoteGroup;

// A call whose connection was lost after its request was sent, under remote.requeue_lost = false: the
// request fails with this message instead of going to another replica.
class LostInFlight : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RemoteHost {
 public:
  // `label` names this connection in stats and metrics: the address, or "address#k" when remote.connections
  // opens several to it. An empty `address` makes a discovery slot that waits for assign().
  RemoteHost(std::string executor, std::string address, std::string label, const RemoteOptions& options,
             RemoteGroup& group);
  ~RemoteHost();  // stops the I/O thread, closing the connection
  RemoteHost(const RemoteHost&) = delete;
  RemoteHost& operator=(const RemoteHost&) = delete;

  // Starts the I/O thread and its first connection attempt, and waits for the outcome (bounded by
  // connect_timeout). Returns empty when connected, else why not; the host keeps retrying in either case.
  // An empty slot only starts its I/O thread.
  std::string start();
  // Waits (bounded by connect_timeout) for the first connection attempt since start() or assign() to end.
  std::string wait_attempt();

  // Discovery slots; the group's discovery thread (or start()) calls these, never concurrently.
  // Points a free slot at a server and connects (retrying as any host does); counters start from zero.
  void assign(std::string address, std::string label);
  // Takes the server away: no new calls; the connection closes when the calls in flight are answered.
  void release();
  // Neither assigned nor still answering calls of a released server.
  bool free() const;
  // Has a server: a fixed host always, a slot between assign() and release().
  bool assigned() const;

  enum class Wait { Up, Stop, GiveUp };
  // Blocks until the host is connected (Up), `stop()` returns true (polled every 100 ms), or the group
  // has had no replica reachable for remote.give_up (GiveUp). Replica threads.
  Wait wait_up(const std::function<bool()>& stop);

  // The answer frame to a call, and the protocol version of the connection it came on (decode with it).
  struct Answer {
    std::string frame;
    std::uint16_t version = wire::kVersion;
  };
  // Sends one request frame (its id from next_id()) and waits for the answer frame. Throws
  // runtime::ReplicaUnavailable when the host is or becomes lost, or the answer takes longer than
  // remote.timeout (the host is then lost too). Replica threads, concurrently.
  Answer call(std::uint64_t id, std::string frame);
  std::uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  bool up() const;
  std::string last_error() const;
  RemoteHostStats stats() const;
  std::string address() const;  // host:port, empty for a slot without a server
  std::string label() const;    // as stats() names it
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

  void connected(std::uint64_t generation, std::uint16_t version);  // I/O thread, after the Welcome
  void lost(const std::string& why);                                // I/O thread: fails every waiting call
  void answered(std::uint64_t id, std::string frame);
  void end_drain_locked();  // a released slot whose last call ended: close its connection

  const std::string executor_;
  const RemoteOptions options_;
  RemoteGroup& group_;

  mutable std::mutex mutex_;
  std::string address_;  // host:port; empty for a slot without a server
  std::string label_;
  bool assigned_ = false;
  bool draining_ = false;            // released with calls in flight
  std::condition_variable changed_;  // connected or lost (wait_up, start)
  bool up_ = false;
  bool ever_up_ = false;
  bool attempted_ = false;                  // the first connection attempt has ended
  std::uint64_t generation_ = 0;            // counts connections; a call belongs to the one it was sent on
  std::uint16_t version_ = wire::kVersion;  // the protocol version the server chose on that connection
  std::string last_error_;
  std::unordered_map<std::uint64_t, Pending*> pending_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> reconnects_{0}, requeued_batches_{0}, lost_{0}, requests_{0};

  std::unique_ptr<Io> io_;  // last: its thread is stopped first
};

// How a discovery entry's name becomes addresses: "ip:port" strings ("[ip6]:port"), or throws with why
// not. The default asks the system's resolver (getaddrinfo: DNS, /etc/hosts); tests put their own.
using ResolveServers = std::function<std::vector<std::string>(const std::string& name, const std::string& port)>;
void set_server_resolver(ResolveServers resolve);  // an empty function restores the system's resolver

// The hosts of one executor (a RemoteHost per connection: remote.connections to each `hosts:` entry, or
// the slots of a discovery entry), and whether any of its replicas can take work.
class RemoteGroup {
 public:
  RemoteGroup(const ExecutorConfig& executor);
  ~RemoteGroup();  // stops the discovery thread, then the hosts
  // Connects every host (in parallel; a discovery entry: resolves its name first, then starts the discovery
  // thread); throws flowline::Error naming each unreachable host unless remote.start_degraded.
  void start();
  const std::vector<std::unique_ptr<RemoteHost>>& hosts() const { return hosts_; }
  // Whether the executor has been without any reachable replica for at least remote.give_up.
  bool given_up();
  // The message that fails requests once given up: every host and why it is unreachable.
  std::string unreachable_message() const;
  // The hosts that have a server, and a line for each discovery entry that resolves to none.
  std::vector<RemoteHostStats> stats() const;

 private:
  // A `hosts:` entry under remote.discovery: dns.
  struct Discovery {
    std::string entry, name, port;                            // "name:port" as written, and its parts
    std::vector<RemoteHost*> slots;                           // into hosts_
    std::map<std::string, std::vector<RemoteHost*>> servers;  // address -> its slots (remote.connections)
    std::string error;                                        // the last lookup's failure, if it failed
    bool warned_full = false;
  };
  void refresh(Discovery& d);  // resolves and (re)assigns slots; start() and the discovery thread
  void discover();             // the discovery thread

  const std::string executor_;
  const RemoteOptions options_;
  std::vector<std::unique_ptr<RemoteHost>> hosts_;
  std::vector<Discovery> discoveries_;
  mutable std::mutex mutex_;  // none_up_since_, discoveries_' servers and errors, stopping_
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread discovery_;
  std::chrono::steady_clock::time_point none_up_since_{};  // epoch: some host was up at the last look
};

// A replica thread's view of one host: run() encodes the batch, calls the host and decodes the answer. An
// answer whose status is RequestError (the server's executor threw flowline::RequestError) fails the
// request as the request's own, as a local replica's RequestError does (Response::request_error).
class RemoteReplica final : public runtime::Replica {
 public:
  RemoteReplica(RemoteHost& host, RemoteGroup& group) : host_(host), group_(group) {}
  void open() override {}
  std::string run(const std::string& endpoint, DocumentArray& docs, const boost::json::object& parameters) override;
  bool last_error_is_request_error() const override { return request_error_; }
  // The executor server's own executors close when that server stops; the outcome is not sent there.
  void close(RunOutcome) noexcept override {}
  runtime::Availability wait_available(const std::function<bool()>& stop) override;
  std::string unavailable_message() const override { return group_.unreachable_message(); }

 private:
  RemoteHost& host_;
  RemoteGroup& group_;
  bool request_error_ = false;  // the last run()'s error is the request's own
};

}  // namespace flowline::remote
