// RemoteGroup (remote_replica.hpp): an executor's hosts, and remote.discovery: dns — the name looked up
// again and again, its servers given discovery slots as they come and released as they go.
#include "remote_replica.hpp"

#include "flowline/error.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <stdexcept>

namespace flowline::remote {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::mutex resolver_mutex;
ResolveServers custom_resolver;

std::vector<std::string> system_resolve(const std::string& name, const std::string& port) {
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results = resolver.resolve(name, port, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot resolve {}: {}", name, ec.message()));
  std::vector<std::string> out;
  for (const auto& r : results) {
    const tcp::endpoint e = r.endpoint();
    const std::string ip = e.address().to_string();
    out.push_back(e.address().is_v6() ? fmt::format("[{}]:{}", ip, e.port()) : fmt::format("{}:{}", ip, e.port()));
  }
  return out;
}

std::vector<std::string> resolve_servers(const std::string& name, const std::string& port) {
  ResolveServers resolve;
  {
    std::lock_guard lock(resolver_mutex);
    resolve = custom_resolver;
  }
  std::vector<std::string> out = resolve ? resolve(name, port) : system_resolve(name, port);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

void set_server_resolver(ResolveServers resolve) {
  std::lock_guard lock(resolver_mutex);
  custom_resolver = std::move(resolve);
}

RemoteGroup::RemoteGroup(const ExecutorConfig& executor) : executor_(executor.name), options_(executor.remote) {
  const std::size_t connections = std::max<std::size_t>(options_.connections, 1);
  for (const auto& address : executor.hosts) {
    if (options_.discovery == RemoteOptions::Discovery::Dns) {
      Discovery d;
      d.entry = address;
      const auto colon = address.rfind(':');
      d.name = address.substr(0, colon);
      d.port = address.substr(colon + 1);
      for (std::size_t k = 1; k <= options_.max_servers * connections; ++k) {
        hosts_.push_back(
            std::make_unique<RemoteHost>(executor.name, "", fmt::format("{} (slot {})", address, k), options_, *this));
        d.slots.push_back(hosts_.back().get());
      }
      discoveries_.push_back(std::move(d));
      continue;
    }
    for (std::size_t k = 1; k <= connections; ++k) {
      std::string label = connections == 1 ? address : fmt::format("{}#{}", address, k);
      hosts_.push_back(std::make_unique<RemoteHost>(executor.name, address, std::move(label), options_, *this));
    }
  }
}

RemoteGroup::~RemoteGroup() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (discovery_.joinable()) discovery_.join();
}

void RemoteGroup::start() {
  std::vector<RemoteHost*> fixed;
  for (auto& host : hosts_) {
    if (host->assigned()) fixed.push_back(host.get());
  }
  std::vector<std::future<std::string>> outcomes;
  for (auto* host : fixed) outcomes.push_back(std::async(std::launch::async, [host] { return host->start(); }));
  for (auto& host : hosts_) {
    if (!host->assigned()) host->start();  // a slot: its I/O thread only
  }
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < fixed.size(); ++i) {
    const std::string error = outcomes[i].get();
    if (!error.empty()) problems.push_back(fmt::format("{} ({})", fixed[i]->address(), error));
  }
  for (auto& d : discoveries_) {
    refresh(d);
    std::lock_guard lock(mutex_);
    if (!d.error.empty()) problems.push_back(fmt::format("{} ({})", d.entry, d.error));
  }
  // The servers discovery found connect in parallel; wait for each one's first attempt.
  std::vector<std::pair<std::string, std::future<std::string>>> found;
  for (auto& d : discoveries_) {
    for (auto* slot : d.slots) {
      if (slot->assigned())
        found.emplace_back(slot->address(), std::async(std::launch::async, [slot] { return slot->wait_attempt(); }));
    }
  }
  for (auto& [address, outcome] : found) {
    const std::string error = outcome.get();
    if (!error.empty()) problems.push_back(fmt::format("{} ({})", address, error));
  }
  if (!discoveries_.empty()) discovery_ = std::thread([this] { discover(); });
  if (problems.empty()) return;
  if (!options_.start_degraded) {
    throw Error(
        fmt::format("cannot reach host{} {}; start the executor servers (flowline serve FLOW --executor {} "
                    "--port PORT) or set remote.start_degraded",
                    problems.size() == 1 ? "" : "s", fmt::join(problems, ", "), executor_));
  }
  spdlog::warn("executor '{}': starting without {}; they join when they come up", executor_, fmt::join(problems, ", "));
}

void RemoteGroup::refresh(Discovery& d) {
  std::vector<std::string> found;
  std::string error;
  try {
    found = resolve_servers(d.name, d.port);
    if (found.empty()) error = "resolves to no address";
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard lock(mutex_);
  if (error != d.error && !error.empty())
    spdlog::warn("executor '{}': {}: {}; keeping the {} server{} known before", executor_, d.entry, error,
                 d.servers.size(), d.servers.size() == 1 ? "" : "s");
  d.error = error;
  if (!error.empty()) return;  // a failed lookup changes nothing: known servers fail on their own if gone
  if (found.size() > options_.max_servers) {
    if (!d.warned_full)
      spdlog::warn("executor '{}': {} resolves to {} addresses; using {} (remote.max_servers)", executor_, d.entry,
                   found.size(), options_.max_servers);
    d.warned_full = true;
    found.resize(options_.max_servers);
  }
  for (auto it = d.servers.begin(); it != d.servers.end();) {
    if (std::binary_search(found.begin(), found.end(), it->first)) {
      ++it;
      continue;
    }
    spdlog::info("executor '{}': server {} of {} is gone", executor_, it->first, d.entry);
    for (auto* slot : it->second) slot->release();
    it = d.servers.erase(it);
  }
  const std::size_t connections = std::max<std::size_t>(options_.connections, 1);
  for (const auto& address : found) {
    if (d.servers.count(address)) continue;
    std::vector<RemoteHost*> slots;
    for (auto* slot : d.slots) {
      if (slots.size() < connections && slot->free()) slots.push_back(slot);
    }
    if (slots.size() < connections) break;  // slots still answering calls of gone servers: next round
    for (std::size_t k = 0; k < slots.size(); ++k) {
      slots[k]->assign(address, connections == 1 ? fmt::format("{} ({})", address, d.entry)
                                                 : fmt::format("{}#{} ({})", address, k + 1, d.entry));
    }
    d.servers[address] = std::move(slots);
    spdlog::info("executor '{}': server {} of {} joins", executor_, address, d.entry);
  }
}

void RemoteGroup::discover() {
  std::unique_lock lock(mutex_);
  while (!stop_.wait_for(lock, options_.discovery_interval, [this] { return stopping_; })) {
    lock.unlock();
    for (auto& d : discoveries_) refresh(d);
    lock.lock();
  }
}

bool RemoteGroup::given_up() {
  if (options_.local_replicas > 0) return false;
  const bool any_up = std::any_of(hosts_.begin(), hosts_.end(), [](const auto& h) { return h->up(); });
  std::lock_guard lock(mutex_);
  if (any_up) {
    none_up_since_ = {};
    return false;
  }
  const auto now = Clock::now();
  if (none_up_since_ == Clock::time_point{}) none_up_since_ = now;
  return now - none_up_since_ >= options_.give_up;
}

std::string RemoteGroup::unreachable_message() const {
  std::vector<std::string> hosts;
  for (const auto& s : stats()) hosts.push_back(fmt::format("{} ({})", s.address, s.last_error));
  return fmt::format("no host reachable for {} ms: {}", options_.give_up.count(), fmt::join(hosts, ", "));
}

std::vector<RemoteHostStats> RemoteGroup::stats() const {
  std::vector<RemoteHostStats> out;
  for (const auto& h : hosts_) {
    if (h->assigned()) out.push_back(h->stats());
  }
  std::lock_guard lock(mutex_);
  for (const auto& d : discoveries_) {
    if (!d.servers.empty()) continue;
    RemoteHostStats none;
    none.executor = executor_;
    none.address = d.entry;
    none.last_error = d.error.empty() ? "no server" : d.error;
    out.push_back(std::move(none));
  }
  return out;
}

}  // namespace flowline::remote
