// RemoteHost: this flow's connection to one executor server (connect, the handshake with its protocol
// version, frames in flight, loss and reconnection with backoff), used by the RemoteReplicas of one host.
// Private to flowline::core; remote_replica.hpp says how hosts, groups and replicas fit together (threads,
// ownership, the failure model, discovery).
#pragma once

#include "shared_segment.hpp"
#include "wire.hpp"

#include "flowline/executor.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/flow_results.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

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

  // The answer frame to a call, the protocol version of the connection it came on (decode with it), and
  // the request's region of that connection's shared segment (empty: none), held until the Answer is
  // destroyed: decode the frame with region.view() before that.
  struct Answer {
    std::string frame;
    std::uint16_t version = wire::kVersion;
    SharedSegment::Region region;
  };
  // Makes a request frame for the connection's protocol version. `segment`: the connection's shared segment
  // (version 4 with a local worker that mapped it), else null; the encoder may take a region of it into
  // `region` (wire::SharedRegion) and write the request's tensors there. Called on the replica thread.
  using Encode =
      std::function<std::string(std::uint16_t version, SharedSegment* segment, SharedSegment::Region& region)>;
  // Sends one request frame (its id from next_id(), made by `encode` for the connection's protocol
  // version) and waits for the answer frame. Throws runtime::ReplicaUnavailable when the host is or becomes
  // lost, or the answer takes longer than remote.timeout (the host is then lost too). Once `cancellation`
  // (may be null) is requested, a version 3 connection is sent a Cancel frame for the request (once); the
  // call still waits for its answer, which the server then sends as soon as its executor stops. Replica
  // threads, concurrently.
  Answer call(std::uint64_t id, const Encode& encode, const Cancellation* cancellation = nullptr);
  std::uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  std::chrono::milliseconds request_timeout() const { return options_.timeout; }  // remote.timeout

  bool up() const;
  std::string last_error() const;
  RemoteHostStats stats() const;
  bool shares_memory() const;   // the current connection has a shared segment (tests, logs)
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

  // I/O thread, after the Welcome (and, for a segment offered, the Attached frame).
  void connected(std::uint64_t generation, std::uint16_t version, std::shared_ptr<SharedSegment> segment);
  void lost(const std::string& why);  // I/O thread: fails every waiting call
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
  std::shared_ptr<SharedSegment> segment_;  // that connection's shared segment, when the server mapped one
  std::string last_error_;
  std::unordered_map<std::uint64_t, Pending*> pending_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> reconnects_{0}, requeued_batches_{0}, lost_{0}, requests_{0};

  std::unique_ptr<Io> io_;  // last: its thread is stopped first
};

}  // namespace flowline::remote
