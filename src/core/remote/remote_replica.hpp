// Replicas on other machines: RemoteHost (remote_host.hpp), this flow's connection to one executor server;
// RemoteGroup, the hosts of one executor; and RemoteReplica, the Replica (runtime/replica.hpp) that runs
// batches through a host. Private to flowline::core.
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
#include "remote_host.hpp"
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
