// Remote replicas: the connection to one executor server (connect, handshake, frames in flight, loss and
// reconnection with backoff) and the Replica that runs batches through it. See remote_replica.hpp.
#include "remote_replica.hpp"

#include "frame_body.hpp"

#include "flowline/error.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <future>
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
  explicit Io(RemoteHost& host) : host(host), socket(io), resolver(io), timer(io), retry(io), body(answer_budget()) {}

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
    });
    if (thread.joinable()) thread.join();
  }

  void connect() {
    const std::uint64_t mine = ++attempt;
    close_socket();
    const auto colon = host.address_.rfind(':');
    const std::string name = host.address_.substr(0, colon);
    const std::string port = host.address_.substr(colon + 1);
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
    writes.clear();
    writing = false;
    host.lost(why);
    if (was_connected) {
      spdlog::warn("executor '{}': host {} lost: {}; reconnecting", host.executor_, host.address_, why);
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
          if (welcome.version != wire::kVersion) {
            fail(mine,
                 fmt::format("the server speaks protocol version {}, this flow {}", welcome.version, wire::kVersion));
            return false;
          }
          if (!connected) {
            connected = true;
            timer.cancel();
            backoff = 100ms;
            host.connected(mine);
          }
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
  tcp::socket socket;
  tcp::resolver resolver;
  asio::steady_timer timer;  // connect and handshake
  asio::steady_timer retry;  // the next attempt
  std::thread thread;
  std::uint64_t attempt = 0;
  bool connected = false;
  bool stopping = false;
  std::chrono::milliseconds backoff{100};
  unsigned char prefix[wire::kLengthBytes] = {};
  FrameBody body;
  std::deque<std::shared_ptr<std::string>> writes;
  bool writing = false;
};

RemoteHost::RemoteHost(std::string executor, std::string address, std::string label, const RemoteOptions& options,
                       RemoteGroup& group)
    : executor_(std::move(executor)),
      address_(std::move(address)),
      label_(std::move(label)),
      options_(options),
      group_(group),
      io_(std::make_unique<Io>(*this)) {}

RemoteHost::~RemoteHost() { io_->stop(); }

std::string RemoteHost::start() {
  asio::post(io_->io, [this] { io_->connect(); });
  io_->run();
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, options_.connect_timeout + 1s, [&] { return up_ || attempted_; });
  if (up_) return {};
  return last_error_.empty() ? "no answer" : last_error_;
}

void RemoteHost::connected(std::uint64_t generation) {
  {
    std::lock_guard lock(mutex_);
    up_ = true;
    attempted_ = true;
    generation_ = generation;
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
    for (auto& [id, pending] : pending_) {
      pending->lost = why;
      pending->ready.notify_one();  // under the lock: the call may return and destroy it once unlocked
    }
    pending_.clear();
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

std::string RemoteHost::call(std::uint64_t id, std::string frame) {
  Pending pending;
  std::unique_lock lock(mutex_);
  if (!up_) throw runtime::ReplicaUnavailable(fmt::format("host {} is unreachable: {}", address_, last_error_));
  const std::uint64_t generation = generation_;
  pending_.emplace(id, &pending);
  lock.unlock();
  asio::post(io_->io, [this, generation, f = std::make_shared<std::string>(std::move(frame))]() mutable {
    if (generation == io_->attempt && io_->connected) io_->send(std::move(f));
  });
  lock.lock();
  const bool finished =
      pending.ready.wait_for(lock, options_.timeout, [&] { return pending.done || !pending.lost.empty(); });
  if (pending.done) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    return std::move(pending.answer);
  }
  pending_.erase(id);  // no answer may reach `pending` after this
  if (finished) throw runtime::ReplicaUnavailable(fmt::format("host {} lost: {}", address_, pending.lost));
  lock.unlock();
  const std::string why = fmt::format("no answer within {} ms", options_.timeout.count());
  asio::post(io_->io, [this, generation, why] { io_->fail(generation, why); });
  throw runtime::ReplicaUnavailable(fmt::format("host {}: {}", address_, why));
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
  s.address = label_;
  {
    std::lock_guard lock(mutex_);
    s.connected = up_;
    s.last_error = last_error_;
  }
  s.reconnects = reconnects_.load();
  s.lost = lost_.load();
  s.requeued_batches = requeued_batches_.load();
  s.requests = requests_.load();
  return s;
}

// ---- RemoteGroup ----------------------------------------------------------------------------------------

RemoteGroup::RemoteGroup(const ExecutorConfig& executor)
    : executor_(executor.name),
      local_replicas_(executor.remote.local_replicas),
      give_up_(executor.remote.give_up),
      start_degraded_(executor.remote.start_degraded) {
  const std::size_t connections = std::max<std::size_t>(executor.remote.connections, 1);
  for (const auto& address : executor.hosts) {
    for (std::size_t k = 1; k <= connections; ++k) {
      std::string label = connections == 1 ? address : fmt::format("{}#{}", address, k);
      hosts_.push_back(std::make_unique<RemoteHost>(executor.name, address, std::move(label), executor.remote, *this));
    }
  }
}

void RemoteGroup::start() {
  std::vector<std::future<std::string>> outcomes;
  for (auto& host : hosts_) outcomes.push_back(std::async(std::launch::async, [&host] { return host->start(); }));
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < hosts_.size(); ++i) {
    const std::string error = outcomes[i].get();
    if (!error.empty()) problems.push_back(fmt::format("{} ({})", hosts_[i]->address(), error));
  }
  if (problems.empty()) return;
  if (!start_degraded_) {
    throw Error(
        fmt::format("cannot reach host{} {}; start the executor servers (flowline serve FLOW --executor {} "
                    "--port PORT) or set remote.start_degraded",
                    problems.size() == 1 ? "" : "s", fmt::join(problems, ", "), executor_));
  }
  spdlog::warn("executor '{}': starting without {}; they join when they come up", executor_, fmt::join(problems, ", "));
}

bool RemoteGroup::given_up() {
  if (local_replicas_ > 0) return false;
  const bool any_up = std::any_of(hosts_.begin(), hosts_.end(), [](const auto& h) { return h->up(); });
  std::lock_guard lock(mutex_);
  if (any_up) {
    none_up_since_ = {};
    return false;
  }
  const auto now = Clock::now();
  if (none_up_since_ == Clock::time_point{}) none_up_since_ = now;
  return now - none_up_since_ >= give_up_;
}

std::string RemoteGroup::unreachable_message() const {
  std::vector<std::string> hosts;
  for (const auto& h : hosts_) hosts.push_back(fmt::format("{} ({})", h->address(), h->last_error()));
  return fmt::format("no host reachable for {} ms: {}", give_up_.count(), fmt::join(hosts, ", "));
}

std::vector<RemoteHostStats> RemoteGroup::stats() const {
  std::vector<RemoteHostStats> out;
  for (const auto& h : hosts_) out.push_back(h->stats());
  return out;
}

// ---- RemoteReplica --------------------------------------------------------------------------------------

std::string RemoteReplica::run(const std::string& endpoint, DocumentArray& docs,
                               const boost::json::object& parameters) {
  const std::uint64_t id = host_.next_id();
  std::string answer;
  try {
    answer = host_.call(
        id, wire::encode_request(id, endpoint, parameters.empty() ? "" : boost::json::serialize(parameters), docs));
  } catch (const runtime::ReplicaUnavailable&) {
    host_.count_requeued();
    throw;
  } catch (const wire::WireError& e) {
    return fmt::format("cannot send the batch to {}: {}", host_.address(), e.what());
  }
  wire::ResponseFrame response;
  try {
    response = wire::decode_response(answer);
  } catch (const std::exception& e) {
    return fmt::format("host {} answered with a bad frame: {}", host_.address(), e.what());
  }
  docs = std::move(response.docs);
  if (response.ok) return {};
  return response.error_executor.empty() ? response.error : fmt::format("{} (on {})", response.error, host_.address());
}

runtime::Availability RemoteReplica::wait_available(const std::function<bool()>& stop) {
  switch (host_.wait_up(stop)) {
    case RemoteHost::Wait::Up:
      return runtime::Availability::Ready;
    case RemoteHost::Wait::Stop:
      return runtime::Availability::Stop;
    case RemoteHost::Wait::GiveUp:
      break;
  }
  return runtime::Availability::GiveUp;
}

}  // namespace flowline::remote
