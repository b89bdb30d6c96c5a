// RemoteHost (remote_host.hpp): the connection to one executor server — connect, handshake, frames in
// flight, loss and reconnection with backoff — on its own I/O thread.
#include "remote_host.hpp"

#include "remote_replica.hpp"

#include "frame_body.hpp"

#include "flowline/error.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <thread>

namespace flowline::remote {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Everything that runs on the host's I/O thread. Handlers check `attempt` (connection attempts) so that a
// late completion of a closed connection changes nothing.
struct RemoteHost::Io {
  explicit Io(RemoteHost& host)
      : host(host), work(io.get_executor()), socket(io), resolver(io), timer(io), retry(io), body(answer_budget()) {}

  // Answers are read as they arrive, never sized by their declared length up front (frame_body.hpp). The
  // client's in-flight bound (remote.in_flight) bounds how many there are, so the budget is unlimited.
  static PartialFrameBudget& answer_budget() {
    static PartialFrameBudget budget(std::numeric_limits<std::size_t>::max() / 2);
    return budget;
  }

  void run() {
    thread = std::thread([this] { io.run(); });
  }
  void stop() {
    asio::post(io, [this] {
      stopping = true;
      close_socket();
      retry.cancel();
      timer.cancel();
      resolver.cancel();
      work.reset();
    });
    if (thread.joinable()) thread.join();
  }

  // Forgets the connection (if any) without counting a loss: a slot given another server, or released.
  void reset() {
    ++attempt;
    close_socket();
    timer.cancel();
    retry.cancel();
    connected = false;
    offered.reset();
    writes.clear();
    writing = false;
    backoff = 100ms;
  }

  void connect() {
    const std::uint64_t mine = ++attempt;
    close_socket();
    std::string address = host.address();
    if (address.empty()) return;  // a released slot
    const auto colon = address.rfind(':');
    std::string name = address.substr(0, colon);
    const std::string port = address.substr(colon + 1);
    if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
    timer.expires_after(host.options_.connect_timeout);
    timer.async_wait([this, mine](const boost::system::error_code& ec) {
      if (ec || mine != attempt || connected) return;
      fail(mine, fmt::format("no connection and handshake within {} ms", host.options_.connect_timeout.count()));
    });
    resolver.async_resolve(
        name, port, [this, mine](const boost::system::error_code& ec, tcp::resolver::results_type r) {
          if (mine != attempt) return;
          if (ec) return fail(mine, fmt::format("cannot resolve: {}", ec.message()));
          asio::async_connect(socket, r, [this, mine](const boost::system::error_code& ec2, const tcp::endpoint&) {
            if (mine != attempt) return;
            if (ec2) return fail(mine, ec2.message());
            socket.set_option(tcp::no_delay(true));
            wire::Hello hello;
            hello.max_version = wire::kSharedVersion;
            hello.token = host.options_.token;
            send(std::make_shared<std::string>(wire::encode_hello(hello)));
            read_frame(mine);
          });
        });
  }

  // A connection attempt or a connection ended: close, fail what waits, retry after the backoff.
  void fail(std::uint64_t mine, const std::string& why) {
    if (mine != attempt || stopping) return;
    ++attempt;  // every handler of this connection is now stale
    close_socket();
    timer.cancel();
    const bool was_connected = connected;
    connected = false;
    offered.reset();
    writes.clear();
    writing = false;
    host.lost(why);
    if (!host.assigned()) return;  // a released slot: no retry
    if (was_connected) {
      spdlog::warn("executor '{}': host {} lost: {}; reconnecting", host.executor_, host.address(), why);
      backoff = 100ms;
    }
    retry.expires_after(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, host.options_.retry_max);
    retry.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !stopping) connect();
    });
  }

  void read_frame(std::uint64_t mine) {
    asio::async_read(socket, asio::buffer(prefix), [this, mine](const boost::system::error_code& ec, std::size_t) {
      if (mine != attempt) return;
      if (ec) return fail(mine, ec == asio::error::eof ? "the server closed the connection" : ec.message());
      std::uint32_t length = 0;
      try {
        length = wire::read_length(prefix, host.options_.max_frame_bytes);
      } catch (const wire::WireError& e) {
        return fail(mine, e.what());
      }
      body.start(length);
      read_body(mine);
    });
  }

  void read_body(std::uint64_t mine) {
    socket.async_read_some(*body.next(), [this, mine](const boost::system::error_code& ec, std::size_t n) {
      if (mine != attempt) return;
      if (ec) return fail(mine, ec == asio::error::eof ? "the server closed the connection" : ec.message());
      if (!body.arrived(n)) return read_body(mine);
      if (!handle(mine)) return;
      body.finish();
      read_frame(mine);
    });
  }

  // One frame from the server. Returns false when it ended the connection.
  bool handle(std::uint64_t mine) {
    try {
      switch (wire::frame_type(body.frame())) {
        case wire::FrameType::Welcome: {
          const wire::Welcome welcome = wire::decode_welcome(body.frame());
          if (welcome.version < wire::kMinVersion || welcome.version > wire::kSharedVersion) {
            fail(mine, fmt::format("the server chose protocol version {}, this flow speaks {}..{}", welcome.version,
                                   wire::kMinVersion, wire::kSharedVersion));
            return false;
          }
          if (connected || offered) throw wire::WireError("a second Welcome");
          version = welcome.version;
          const std::size_t shared = welcome.version >= wire::kSharedVersion ? shared_memory_for(host.address()) : 0;
          if (shared > 0) {
            try {
              offered = SharedSegment::create(shared);
              send(std::make_shared<std::string>(wire::encode_segment(offered->offer())));
              return true;  // up once the server says whether it mapped it
            } catch (const std::runtime_error& e) {
              spdlog::warn("executor '{}': no shared memory for {}: {}; tensors cross in the frames", host.executor_,
                           host.address(), e.what());
            }
          }
          up(mine, nullptr);
          return true;
        }
        case wire::FrameType::Attached: {
          if (!offered || connected) throw wire::WireError("an Attached frame without a Segment offered");
          const wire::SegmentReply reply = wire::decode_attached(body.frame());
          if (!reply.accepted)
            spdlog::warn("executor '{}': {} did not map the shared segment ({}); tensors cross in the frames",
                         host.executor_, host.address(), reply.reason);
          up(mine, reply.accepted ? std::move(offered) : nullptr);
          offered.reset();
          return true;
        }
        case wire::FrameType::Response: {
          if (!connected) throw wire::WireError("an answer before the handshake");
          const std::uint64_t id = wire::frame_id(body.frame());
          host.answered(id, body.take());
          return true;
        }
        case wire::FrameType::Error:
          fail(mine, fmt::format("the server refused: {}", wire::decode_error(body.frame())));
          return false;
        case wire::FrameType::Ping:
          send(
              std::make_shared<std::string>(wire::encode_ping(wire::FrameType::Pong, wire::decode_ping(body.frame()))));
          return true;
        case wire::FrameType::Pong:
          return true;
        default:
          throw wire::WireError(
              fmt::format("unexpected frame type {} from a server", static_cast<int>(body.frame()[0])));
      }
    } catch (const std::exception& e) {  // a WireError, or anything else a bad frame provokes
      fail(mine, e.what());
      return false;
    }
  }

  void up(std::uint64_t mine, std::shared_ptr<SharedSegment> segment) {
    connected = true;
    timer.cancel();
    backoff = 100ms;
    host.connected(mine, version, std::move(segment));
  }

  void send(std::shared_ptr<std::string> frame) {
    writes.push_back(std::move(frame));
    if (!writing) write_next(attempt);
  }
  void write_next(std::uint64_t mine) {
    if (writes.empty()) {
      writing = false;
      return;
    }
    writing = true;
    std::shared_ptr<std::string> frame = writes.front();
    writes.pop_front();
    asio::async_write(socket, asio::buffer(*frame),
                      [this, mine, frame](const boost::system::error_code& ec, std::size_t) {
                        if (mine != attempt) return;
                        if (ec) return fail(mine, ec.message());
                        write_next(mine);
                      });
  }

  void close_socket() {
    boost::system::error_code ignored;
    if (socket.is_open()) {
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    }
  }

  RemoteHost& host;
  asio::io_context io;
  // Keeps run() going while a discovery slot waits for a server (it has no connection to wait on).
  asio::executor_work_guard<asio::io_context::executor_type> work;
  tcp::socket socket;
  tcp::resolver resolver;
  asio::steady_timer timer;  // connect and handshake
  asio::steady_timer retry;  // the next attempt
  std::thread thread;
  std::uint64_t attempt = 0;
  bool connected = false;
  bool stopping = false;
  std::uint16_t version = wire::kVersion;  // the connection's, from its Welcome
  std::shared_ptr<SharedSegment> offered;  // a segment sent in a Segment frame, awaiting its Attached
  std::chrono::milliseconds backoff{100};
  unsigned char prefix[wire::kLengthBytes] = {};
  FrameBody body;
  std::deque<std::shared_ptr<std::string>> writes;
  bool writing = false;
};

RemoteHost::RemoteHost(std::string executor, std::string address, std::string label, const RemoteOptions& options,
                       RemoteGroup& group)
    : executor_(std::move(executor)),
      options_(options),
      group_(group),
      address_(std::move(address)),
      label_(std::move(label)),
      assigned_(!address_.empty()),
      io_(std::make_unique<Io>(*this)) {}

RemoteHost::~RemoteHost() { io_->stop(); }

std::string RemoteHost::start() {
  if (assigned()) asio::post(io_->io, [this] { io_->connect(); });
  io_->run();
  return assigned() ? wait_attempt() : std::string();
}

std::string RemoteHost::wait_attempt() {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, options_.connect_timeout + 1s, [&] { return up_ || attempted_; });
  if (up_) return {};
  return last_error_.empty() ? "no answer" : last_error_;
}

void RemoteHost::assign(std::string address, std::string label) {
  {
    std::lock_guard lock(mutex_);
    address_ = std::move(address);
    label_ = std::move(label);
    assigned_ = true;
    draining_ = false;
    up_ = ever_up_ = attempted_ = false;
    last_error_.clear();
    for (auto* counter : {&reconnects_, &requeued_batches_, &lost_, &requests_}) counter->store(0);
  }
  asio::post(io_->io, [this] {
    io_->reset();
    io_->connect();
  });
}

void RemoteHost::release() {
  std::lock_guard lock(mutex_);
  assigned_ = false;
  up_ = false;  // no new calls; those in flight still get their answers
  draining_ = true;
  if (pending_.empty()) end_drain_locked();
}

void RemoteHost::end_drain_locked() {
  if (!draining_ || !pending_.empty()) return;
  draining_ = false;
  address_.clear();
  asio::post(io_->io, [this] { io_->reset(); });
}

bool RemoteHost::free() const {
  std::lock_guard lock(mutex_);
  return !assigned_ && !draining_;
}

bool RemoteHost::assigned() const {
  std::lock_guard lock(mutex_);
  return assigned_;
}

std::string RemoteHost::address() const {
  std::lock_guard lock(mutex_);
  return address_;
}

std::string RemoteHost::label() const {
  std::lock_guard lock(mutex_);
  return label_;
}

void RemoteHost::connected(std::uint64_t generation, std::uint16_t version, std::shared_ptr<SharedSegment> segment) {
  {
    std::lock_guard lock(mutex_);
    if (!assigned_) return;  // released while connecting: the reset that follows closes it
    up_ = true;
    attempted_ = true;
    generation_ = generation;
    version_ = version;
    segment_ = std::move(segment);
    if (ever_up_) reconnects_.fetch_add(1, std::memory_order_relaxed);
    if (ever_up_) spdlog::info("executor '{}': host {} is back", executor_, address_);
    ever_up_ = true;
  }
  changed_.notify_all();
}

void RemoteHost::lost(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (up_) lost_.fetch_add(1, std::memory_order_relaxed);
    up_ = false;
    attempted_ = true;
    last_error_ = why;
    segment_.reset();  // a new connection gets a new one: a region the old server may still write is not reused
    for (auto& [id, pending] : pending_) {
      pending->lost = why;
      pending->ready.notify_one();  // under the lock: the call may return and destroy it once unlocked
    }
    pending_.clear();
    if (draining_) {
      draining_ = false;
      address_.clear();
    }
  }
  changed_.notify_all();
}

void RemoteHost::answered(std::uint64_t id, std::string frame) {
  std::lock_guard lock(mutex_);
  const auto it = pending_.find(id);
  if (it == pending_.end()) return;  // a call that timed out has gone: its answer is dropped
  it->second->answer = std::move(frame);
  it->second->done = true;
  it->second->ready.notify_one();  // under the lock: the call may return and destroy it once unlocked
  pending_.erase(it);
  end_drain_locked();
}

RemoteHost::Wait RemoteHost::wait_up(const std::function<bool()>& stop) {
  std::unique_lock lock(mutex_);
  while (!up_) {
    if (stop()) return Wait::Stop;
    lock.unlock();
    const bool give_up = group_.given_up();
    lock.lock();
    if (give_up && !up_) return Wait::GiveUp;
    changed_.wait_for(lock, 100ms);
  }
  return Wait::Up;
}

RemoteHost::Answer RemoteHost::call(std::uint64_t id, const Encode& encode, const Cancellation* cancellation) {
  // A flow's own worker (requeue_lost false) that is down is being restarted: wait for it (bounded by
  // remote.give_up) rather than hand the batch on, or a merged batch that crashed it would be merged and
  // crash a worker again and again; alone on the new worker, only the request that crashes fails.
  if (!options_.requeue_lost) wait_up([] { return false; });
  const auto unavailable = [this] {
    return runtime::ReplicaUnavailable(assigned_ ? fmt::format("host {} is unreachable: {}", address_, last_error_)
                                                 : fmt::format("{} has no server now", label_));
  };
  Pending pending;
  std::unique_lock lock(mutex_);
  if (!up_) throw unavailable();
  const std::uint64_t generation = generation_;
  const std::uint16_t version = version_;  // an answer comes on the connection its request went out on
  const std::shared_ptr<SharedSegment> segment = segment_;
  lock.unlock();
  // Encoded for this connection's version, outside the lock (a batch's tensors are copied here: into the
  // frame, or into a region of the connection's segment that this call holds until its answer is decoded).
  SharedSegment::Region region;
  auto frame = std::make_shared<std::string>(encode(version, segment.get(), region));
  lock.lock();
  if (!up_ || generation_ != generation) throw unavailable();  // lost (or replaced) while encoding
  const std::string address = address_;
  pending_.emplace(id, &pending);
  lock.unlock();
  asio::post(io_->io, [this, generation, f = std::move(frame)]() mutable {
    if (generation == io_->attempt && io_->connected) io_->send(std::move(f));
  });
  lock.lock();
  const auto answered = [&] { return pending.done || !pending.lost.empty(); };
  const auto give_up_at = Clock::now() + options_.timeout;
  bool finished = false;
  if (cancellation && version >= 3) {
    // The flag is polled: a Cancellation has no way to wake a waiter. Every 20 ms costs nothing beside a
    // remote request's own time, and bounds how late the server learns of it.
    bool cancel_sent = false;
    while (!(finished = answered()) && Clock::now() < give_up_at) {
      if (!cancel_sent && cancellation->requested()) {
        cancel_sent = true;
        asio::post(io_->io, [this, generation, id] {
          if (generation == io_->attempt && io_->connected)
            io_->send(std::make_shared<std::string>(wire::encode_cancel(id)));
        });
      }
      pending.ready.wait_for(lock, std::min<Clock::duration>(20ms, give_up_at - Clock::now()));
    }
  } else {
    finished = pending.ready.wait_until(lock, give_up_at, answered);
  }
  if (pending.done) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    return Answer{std::move(pending.answer), version, std::move(region)};
  }
  pending_.erase(id);  // no answer may reach `pending` after this
  if (finished && !options_.requeue_lost)
    throw LostInFlight(
        fmt::format("the worker at {} went away during this request ({}): it crashed or exited, "
                    "and is restarted",
                    address, pending.lost));
  if (finished) throw runtime::ReplicaUnavailable(fmt::format("host {} lost: {}", address, pending.lost));
  // The server may still write this request's answer into its region: the connection's segment is given to
  // no later call (the connection is closed below, and the next one gets a new segment).
  if (generation_ == generation) segment_.reset();
  lock.unlock();
  const std::string why = fmt::format("no answer within {} ms", options_.timeout.count());
  asio::post(io_->io, [this, generation, why] { io_->fail(generation, why); });
  throw runtime::ReplicaUnavailable(fmt::format("host {}: {}", address, why));
}

bool RemoteHost::shares_memory() const {
  std::lock_guard lock(mutex_);
  return segment_ != nullptr;
}

bool RemoteHost::up() const {
  std::lock_guard lock(mutex_);
  return up_;
}

std::string RemoteHost::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

RemoteHostStats RemoteHost::stats() const {
  RemoteHostStats s;
  s.executor = executor_;
  {
    std::lock_guard lock(mutex_);
    s.address = label_;
    s.connected = up_;
    s.last_error = last_error_;
  }
  s.reconnects = reconnects_.load();
  s.lost = lost_.load();
  s.requeued_batches = requeued_batches_.load();
  s.requests = requests_.load();
  return s;
}

}  // namespace flowline::remote
