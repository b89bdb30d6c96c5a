// HTTP load generator for flowline's gateway (`flowline serve`), for machines without wrk or hey: N keep-alive
// HTTP/1.1 connections (Boost.Beast, async, one io_context per thread, connections dealt round-robin) POST one
// fixed body to one URL for a fixed time, closed loop or at a fixed offered rate, and print requests/s, docs/s,
// latency quantiles, bytes received and errors. With --report-every and --rss-pid it is a soak driver: a line
// per interval, and the server's resident memory after warm-up, at the end and its growth.
//
//   build/bench/http_load --url http://127.0.0.1:8080/encode --body-file req.json [--connections 64]
//       [--threads T] [--duration 10] [--warmup 1] [--rate R] [--docs-per-request 32] [--expect-status 200]
//       [--header "K: V"]... [--timeout-ms 30000] [--connect-timeout-ms 5000] [--report-every S]
//       [--rss-pid PID] [--json out.json]
//
// Contract:
// - Timeline: every connection opens at start; the first --warmup seconds are warm-up, the next --duration
//   seconds are measured. An answer counts in the figures when it arrives inside the measured window; what is
//   still in flight at the end is dropped uncounted. Errors count in both phases (warm-up's are shown apart).
// - Closed loop (--rate 0): a connection sends its next request as soon as it has read the previous answer;
//   latency runs from the send to the answer's last byte.
// - Open loop (--rate R): connection c of N sends its k-th request at start + (c/N + k) * N/R, never sooner; a
//   connection behind its timetable sends at once. Latency runs from the scheduled time, so the time a request
//   waited for its connection counts (coordinated omission accounted for, as in wrk2).
// - "requests" are answers with --expect-status; only they enter requests/s, docs/s (requests/s times
//   --docs-per-request) and the latency histogram: log-linear, exact below 256 us, 128 buckets per power of
//   two above (a quantile is within 0.4%), a fixed 35 KB per thread whatever the run's length. Answers with
//   another status are counted by status code, and are errors.
// - The request, serialized once: POST PATH HTTP/1.1 with Host, User-Agent, Content-Type application/json,
//   Content-Length and keep-alive, then each --header (replacing a default header of the same name).
// - Each response is read whole (up to 256 MiB) and thrown away; its bytes, header included, are counted.
// - Errors: connect (refused, unreachable, or no connection within --connect-timeout-ms; retried every
//   100 ms), timeout (no whole answer --timeout-ms after the send), socket (reset, closed by the server
//   mid-request), protocol (malformed HTTP, body over the limit). After one the connection reconnects. A server
//   closing a connection after an answer (Connection: close) is a reconnect, counted, not an error.
// - --rss-pid: VmRSS sampled before the start, when warm-up ends, at each report and when the window ends (before
//   the connections close); growth is end over after-warm-up. A process gone reads "gone" and fails nothing.
// - Every wait is bounded: connect and request timeouts; at the end every connection is closed, and a thread
//   that has not finished 5 s later is stopped. SIGINT or SIGTERM ends the run early, with its summary.
// - Exit status: 0 when no error happened, 1 when any did (in warm-up too) or no request was answered with
//   --expect-status in the measured window (a hung server fails too), 2 on a bad argument (also: an unresolvable
//   host, an unreadable body file, no process --rss-pid, an unwritable --json file).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kBodyLimit = 256ull << 20;
constexpr std::size_t kReadSize = 64 << 10;  // Beast reads at most what the buffer holds free (512 bytes at first)
constexpr auto kConnectRetry = std::chrono::milliseconds(100);
constexpr auto kStopGrace = std::chrono::seconds(5);
constexpr std::size_t kStatuses = 600;  // status codes counted one by one; larger ones count as 599

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

struct BadArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- latency histogram ---------------------------------------------------------------------------------------

// Microseconds, log-linear: exact below 256, then 128 buckets per power of two up to 2^40 us (12 days), so a
// bucket is at most 1/128 of its values wide and its middle within 0.4% of any of them.
class Histogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr int kMaxExp = 40;
  static constexpr std::uint64_t kExact = 2u << kSubBits;
  static constexpr std::size_t kBuckets = kExact + (kMaxExp - kSubBits - 1) * (1u << kSubBits);

  void record(std::uint64_t us) {
    us = std::min(us, (std::uint64_t{1} << kMaxExp) - 1);
    ++counts_[index(us)];
    ++total_;
    sum_ += us;
    max_ = std::max(max_, us);
  }
  void merge(const Histogram& o) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    total_ += o.total_;
    sum_ += o.sum_;
    max_ = std::max(max_, o.max_);
  }
  std::uint64_t total() const { return total_; }
  double max_ms() const { return static_cast<double>(max_) / 1e3; }
  double mean_ms() const { return total_ ? static_cast<double>(sum_) / static_cast<double>(total_) / 1e3 : 0; }
  // The q-quantile (0 < q <= 1) in milliseconds: the middle of the bucket holding it, at most the maximum.
  double quantile_ms(double q) const {
    if (total_ == 0) return 0;
    const auto rank =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total_))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(middle(i), static_cast<double>(max_)) / 1e3;
    }
    return max_ms();
  }

 private:
  static std::size_t index(std::uint64_t v) {
    if (v < kExact) return v;
    const int e = std::bit_width(v) - 1;  // >= kSubBits + 1
    const int shift = e - kSubBits;
    return kExact + static_cast<std::size_t>(e - kSubBits - 1) * (1u << kSubBits) + ((v >> shift) - (1u << kSubBits));
  }
  static double middle(std::size_t i) {
    if (i < kExact) return static_cast<double>(i);
    const std::size_t j = i - kExact;
    const int shift = static_cast<int>(j >> kSubBits) + 1;
    const std::uint64_t low = ((j & ((1u << kSubBits) - 1)) + (1u << kSubBits)) << shift;
    return static_cast<double>(low) + static_cast<double>((std::uint64_t{1} << shift) - 1) / 2;
  }

  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t total_ = 0, sum_ = 0, max_ = 0;
};

// ---- counters ------------------------------------------------------------------------------------------------

enum Field : std::size_t {
  kOk,
  kOtherStatus,
  kConnectErrors,
  kTimeouts,
  kSocketErrors,
  kProtocolErrors,
  kReconnects,
  kBytes,
  kFields
};

// One phase's counts of one io thread: written by that thread only, read by the reporting thread (relaxed).
struct Counters {
  std::array<std::atomic<std::uint64_t>, kFields> field{};
  std::array<std::atomic<std::uint64_t>, kStatuses> status{};
  void bump(Field f, std::uint64_t n = 1) { field[f].fetch_add(n, std::memory_order_relaxed); }
};

// Counters summed over threads (a snapshot).
struct Totals {
  std::array<std::uint64_t, kFields> field{};
  std::array<std::uint64_t, kStatuses> status{};
  void add(const Counters& c) {
    for (std::size_t i = 0; i < kFields; ++i) field[i] += c.field[i].load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < kStatuses; ++i) status[i] += c.status[i].load(std::memory_order_relaxed);
  }
  std::uint64_t errors() const {
    return field[kOtherStatus] + field[kConnectErrors] + field[kTimeouts] + field[kSocketErrors] +
           field[kProtocolErrors];
  }
};

struct WorkerStats {
  Counters warmup, measured;
  Histogram latency;                                 // measured answers with the expected status
  std::map<std::string, std::uint64_t> error_kinds;  // "connect: Connection refused" -> count; own thread only
  std::uint64_t in_flight_at_end = 0;                // requests sent and not answered when the run ended
};

// ---- what every connection shares ----------------------------------------------------------------------------

struct Plan {
  std::string request;  // the whole request, serialized once
  std::vector<tcp::endpoint> endpoints;
  std::size_t connections = 0;
  double rate = 0;  // requests/s over all connections; 0 = closed loop
  unsigned expect_status = 200;
  Clock::duration timeout{}, connect_timeout{};
  Clock::time_point t0, measure_start;
  std::atomic<Clock::rep> end_ticks{0};  // lowered by the main thread on a signal

  Clock::time_point end() const {
    return Clock::time_point(Clock::duration(end_ticks.load(std::memory_order_relaxed)));
  }
  void end_at(Clock::time_point t) { end_ticks.store(t.time_since_epoch().count(), std::memory_order_relaxed); }
};

// A response body that is read and thrown away, its size kept.
struct DiscardBody {
  using value_type = std::uint64_t;
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& size) : size_(size) {}
    void init(const boost::optional<std::uint64_t>&, beast::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      const std::size_t n = beast::buffer_bytes(buffers);
      size_ += n;
      ec = {};
      return n;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& size_;
  };
};

// ---- one connection ------------------------------------------------------------------------------------------

// A keep-alive connection sending the plan's request over and over; lives on one io_context's thread.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& ioc, const Plan& plan, WorkerStats& stats, std::size_t index)
      : plan_(plan), stats_(stats), stream_(ioc), timer_(ioc) {
    buffer_.reserve(kReadSize);
    if (plan.rate > 0) {
      const double n = static_cast<double>(plan.connections);
      interval_ns_ = 1e9 * n / plan.rate;
      first_ = plan.t0 + std::chrono::nanoseconds(std::llround(interval_ns_ * static_cast<double>(index) / n));
    }
  }
  void start() { connect(); }
  void stop() {
    if (!stopping_ && in_flight_) ++stats_.in_flight_at_end;
    stopping_ = true;
    timer_.cancel();
    stream_.close();
  }

 private:
  Counters& counters(Clock::time_point t) { return t < plan_.measure_start ? stats_.warmup : stats_.measured; }
  // Whether the run is over for this connection (and if so closes it).
  bool ended(Clock::time_point now) {
    if (!stopping_ && now < plan_.end()) return false;
    stop();
    return true;
  }
  void count_error(Clock::time_point now, Field kind, const char* what, const beast::error_code& ec) {
    counters(now).bump(kind);
    ++stats_.error_kinds[fmt::format("{}: {}", what, ec.message())];
  }

  void connect() {
    if (stopping_) return;
    stream_.expires_after(plan_.connect_timeout);
    stream_.async_connect(plan_.endpoints, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      self->on_connect(ec);
    });
  }
  void on_connect(beast::error_code ec) {
    const auto now = Clock::now();
    if (ended(now)) return;
    if (ec) {
      count_error(now, kConnectErrors, "connect", ec);
      stream_.close();
      timer_.expires_after(kConnectRetry);
      timer_.async_wait([self = shared_from_this()](beast::error_code e) {
        if (!e) self->connect();
      });
      return;
    }
    if (connected_before_) counters(now).bump(kReconnects);
    connected_before_ = true;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    next_request();
  }
  void reconnect() {
    stream_.close();
    buffer_.clear();
    connect();
  }

  void next_request() {
    if (plan_.rate <= 0) return send(Clock::now());
    const auto at = first_ + std::chrono::nanoseconds(std::llround(interval_ns_ * static_cast<double>(sent_)));
    if (at <= Clock::now()) return send(at);
    timer_.expires_at(at);
    timer_.async_wait([self = shared_from_this(), at](beast::error_code ec) {
      if (!ec) self->send(at);
    });
  }
  void send(Clock::time_point scheduled) {
    const auto now = Clock::now();
    if (ended(now)) return;
    scheduled_ = scheduled;
    ++sent_;
    in_flight_ = true;
    stream_.expires_at(now + plan_.timeout);  // covers the write and the read of the answer
    asio::async_write(stream_, asio::buffer(plan_.request),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
  }
  void on_write(beast::error_code ec) {
    if (ec) return fail("write", ec);
    parser_.emplace();
    parser_->body_limit(kBodyLimit);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code e, std::size_t n) { self->on_read(e, n); });
  }
  void on_read(beast::error_code ec, std::size_t bytes) {
    const auto now = Clock::now();
    if (ec) return fail("read", ec);
    if (ended(now)) return;
    in_flight_ = false;
    Counters& c = counters(now);
    c.bump(kBytes, bytes);
    const unsigned status = parser_->get().result_int();
    c.status[std::min<std::size_t>(status, kStatuses - 1)].fetch_add(1, std::memory_order_relaxed);
    if (status == plan_.expect_status) {
      c.bump(kOk);
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - scheduled_).count();
      if (&c == &stats_.measured) stats_.latency.record(static_cast<std::uint64_t>(std::max<std::int64_t>(us, 0)));
    } else {
      c.bump(kOtherStatus);
    }
    if (parser_->keep_alive()) return next_request();
    reconnect();  // the server closes this connection: counted as a reconnect when the new one opens
  }
  void fail(const char* what, const beast::error_code& ec) {
    const auto now = Clock::now();
    if (ended(now)) return;
    in_flight_ = false;
    count_error(now, error_kind(ec), what, ec);
    reconnect();
  }
  static Field error_kind(const beast::error_code& ec) {
    if (ec == beast::error::timeout) return kTimeouts;
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return kSocketErrors;  // closed
    if (ec.category() == http::make_error_code(http::error::bad_version).category()) return kProtocolErrors;
    return kSocketErrors;
  }

  const Plan& plan_;
  WorkerStats& stats_;
  beast::tcp_stream stream_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<DiscardBody>> parser_;
  double interval_ns_ = 0;  // between this connection's sends, with a rate
  Clock::time_point first_, scheduled_;
  std::uint64_t sent_ = 0;
  bool stopping_ = false, connected_before_ = false, in_flight_ = false;
};

// ---- io threads ----------------------------------------------------------------------------------------------

struct Worker {
  asio::io_context ioc{1};
  WorkerStats stats;
  std::vector<std::shared_ptr<Connection>> connections;
  std::thread thread;
  std::atomic<bool> done{false};
};

// The connections, dealt round-robin over `threads` io_contexts, each run by a thread of its own.
class Load {
 public:
  Load(const Plan& plan, std::size_t threads) {
    for (std::size_t i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>());
    for (std::size_t i = 0; i < plan.connections; ++i) {
      Worker& w = *workers_[i % threads];
      w.connections.push_back(std::make_shared<Connection>(w.ioc, plan, w.stats, i));
    }
  }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;
  ~Load() { stop(); }

  void start() {
    for (auto& w : workers_) {
      for (auto& c : w->connections) asio::post(w->ioc, [c] { c->start(); });
      w->thread = std::thread([w = w.get()] {
        try {
          w->ioc.run();
        } catch (const std::exception& e) {
          fmt::print(stderr, "http_load: io thread: {}\n", e.what());
        }
        w->done = true;
      });
    }
  }
  // Closes every connection and joins the threads; a thread still busy after kStopGrace is stopped.
  void stop() {
    for (auto& w : workers_) {
      if (!w->thread.joinable()) continue;
      asio::post(w->ioc, [w = w.get()] {
        for (auto& c : w->connections) c->stop();
      });
    }
    const auto deadline = Clock::now() + kStopGrace;
    for (auto& w : workers_) {
      while (!w->done && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!w->done) w->ioc.stop();
      if (w->thread.joinable()) w->thread.join();
    }
  }

  Totals totals(bool measured) const {
    Totals t;
    for (const auto& w : workers_) t.add(measured ? w->stats.measured : w->stats.warmup);
    return t;
  }
  // After stop() only.
  Histogram latency() const {
    Histogram h;
    for (const auto& w : workers_) h.merge(w->stats.latency);
    return h;
  }
  std::uint64_t in_flight_at_end() const {
    std::uint64_t n = 0;
    for (const auto& w : workers_) n += w->stats.in_flight_at_end;
    return n;
  }
  std::map<std::string, std::uint64_t> error_kinds() const {
    std::map<std::string, std::uint64_t> all;
    for (const auto& w : workers_)
      for (const auto& [k, n] : w->stats.error_kinds) all[k] += n;
    return all;
  }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
};

// ---- options and the plan ------------------------------------------------------------------------------------

struct Options {
  std::string url, body, body_file, json;
  std::vector<std::string> headers;
  std::size_t connections = 64;
  std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  double duration = 10, warmup = 1, rate = 0, docs_per_request = 1, report_every = 0;
  unsigned expect_status = 200;
  int rss_pid = 0;
  unsigned timeout_ms = 30000, connect_timeout_ms = 5000;
};

// Reads the command line into `o`: nothing to go on, else the exit status (0 after --help, 2 on a bad argument).
std::optional<int> parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"HTTP load generator: keep-alive HTTP/1.1 POSTs of one body to one URL (see bench/http_load.cpp)"};
  app.add_option("--url", o.url, "http://HOST[:PORT]/PATH (http only; HOST an IP or a resolvable name)")->required();
  auto* body = app.add_option("--body", o.body, "the request body (POSTed as application/json)");
  auto* file = app.add_option("--body-file", o.body_file, "a file holding the request body");
  body->excludes(file);
  file->excludes(body);
  app.add_option("--connections", o.connections, "concurrent keep-alive connections")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "io threads (at most one per connection)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--duration", o.duration, "measured seconds")->check(CLI::Range(0.001, 1e7))->capture_default_str();
  app.add_option("--warmup", o.warmup, "seconds before the measured ones; their answers are not counted")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  app.add_option("--rate", o.rate, "requests/s offered over all connections, on a fixed timetable (0: closed loop)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--docs-per-request", o.docs_per_request, "documents in the body, for docs/s")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--expect-status", o.expect_status, "the status of a good answer")
      ->check(CLI::Range(100, 599))
      ->capture_default_str();
  app.add_option("--header", o.headers, "an extra request header \"K: V\" (repeatable; replaces a default one)");
  app.add_option("--timeout-ms", o.timeout_ms, "per request, from its send to its answer's last byte")
      ->check(CLI::Range(1u, 86400000u))
      ->capture_default_str();
  app.add_option("--connect-timeout-ms", o.connect_timeout_ms, "per connection attempt")
      ->check(CLI::Range(1u, 86400000u))
      ->capture_default_str();
  app.add_option("--json", o.json, "also write the figures to this file as JSON");
  app.add_option("--report-every", o.report_every, "print the last interval's rate and errors every S seconds (0: off)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  app.add_option("--rss-pid", o.rss_pid, "sample VmRSS of this process (/proc/PID/status): start, reports, end")
      ->check(CLI::Range(1, 1 << 30));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (body->count() == 0 && file->count() == 0) {
    fmt::print(stderr, "http_load: one of --body and --body-file is required\n");
    return 2;
  }
  if (o.report_every > 0 && o.report_every < 0.01) {
    fmt::print(stderr, "http_load: --report-every must be 0 (off) or at least 0.01 seconds\n");
    return 2;
  }
  o.threads = std::min(o.threads, o.connections);
  return std::nullopt;
}

struct Target {
  std::string host, port, path, authority;
};

// Splits http://HOST[:PORT][/PATH] (HOST may be [IPv6]); throws BadArgument for anything else.
Target parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) throw BadArgument("https is not supported (http only): " + url);
  if (url.rfind(scheme, 0) != 0) throw BadArgument("--url must start with http://: " + url);
  const std::string rest = url.substr(scheme.size(), url.find('#') - scheme.size());
  const auto slash = rest.find_first_of("/?");
  Target t;
  t.authority = rest.substr(0, slash);
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (t.path[0] == '?') t.path.insert(0, "/");
  if (t.authority.find('@') != std::string::npos) throw BadArgument("user info in --url is not supported: " + url);
  std::string port;
  if (!t.authority.empty() && t.authority[0] == '[') {
    const auto close = t.authority.find(']');
    if (close == std::string::npos) throw BadArgument("unclosed [ in --url: " + url);
    t.host = t.authority.substr(1, close - 1);
    const std::string after = t.authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') throw BadArgument("bad host in --url: " + url);
    if (!after.empty()) port = after.substr(1);
  } else {
    const auto colon = t.authority.rfind(':');
    t.host = t.authority.substr(0, colon);
    if (colon != std::string::npos) port = t.authority.substr(colon + 1);
  }
  if (t.host.empty()) throw BadArgument("no host in --url: " + url);
  t.port = port.empty() ? "80" : port;
  const bool digits =
      t.port.size() <= 5 && std::all_of(t.port.begin(), t.port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoul(t.port) == 0 || std::stoul(t.port) > 65535) throw BadArgument("bad port in --url: " + url);
  return t;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The request as it goes on the wire: POST, keep-alive, Content-Type application/json, then --header's.
std::string serialize_request(const Options& o, const Target& t, std::string body) {
  http::request<http::string_body> req{http::verb::post, t.path, 11};
  req.set(http::field::host, t.authority);
  req.set(http::field::user_agent, "flowline-http_load");
  req.set(http::field::content_type, "application/json");
  for (const std::string& h : o.headers) {
    const auto colon = h.find(':');
    const std::string name = colon == std::string::npos ? std::string() : trim(h.substr(0, colon));
    if (name.empty() || name.find_first_of(" \t\r\n") != std::string::npos)
      throw BadArgument("bad --header (want \"K: V\"): " + h);
    const std::string value = trim(h.substr(colon + 1));
    if (value.find_first_of("\r\n") != std::string::npos) throw BadArgument("bad --header value: " + h);
    req.set(name, value);
  }
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  std::ostringstream out;
  out << req;
  return out.str();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadArgument("cannot read --body-file " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Fills `plan` from the options (the timeline is set at start); throws BadArgument.
void make_plan(const Options& o, Plan& plan) {
  const Target target = parse_url(o.url);
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto results = resolver.resolve(target.host, target.port, ec);
  if (ec || results.empty()) throw BadArgument(fmt::format("cannot resolve {}: {}", target.host, ec.message()));
  for (const auto& r : results) plan.endpoints.push_back(r.endpoint());
  plan.request = serialize_request(o, target, o.body_file.empty() ? o.body : read_file(o.body_file));
  plan.connections = o.connections;
  plan.rate = o.rate;
  plan.expect_status = o.expect_status;
  plan.timeout = std::chrono::milliseconds(o.timeout_ms);
  plan.connect_timeout = std::chrono::milliseconds(o.connect_timeout_ms);
}

// ---- watching the run ----------------------------------------------------------------------------------------

// VmRSS of /proc/PID/status in bytes; nothing when the process is gone.
std::optional<std::uint64_t> rss_bytes(int pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmRSS:   1234 kB"
  return std::nullopt;
}

struct Rss {
  int pid = 0;
  std::optional<std::uint64_t> start, after_warmup, end, peak;
  std::optional<std::uint64_t> sample() {
    const auto v = rss_bytes(pid);
    if (v) peak = std::max(peak.value_or(0), *v);
    return v;
  }
};

struct Interval {
  double t_s = 0, requests_per_s = 0, mb_per_s = 0;
  std::uint64_t errors = 0, errors_in_all = 0;
  std::optional<std::uint64_t> rss;
};

struct Watch {
  Rss rss;
  std::vector<Interval> intervals;
  int signal = 0;  // that ended the run early
  Totals last;     // measured, at the last report
  Clock::time_point last_t;
};

std::string mib(std::optional<std::uint64_t> bytes) {
  return bytes ? fmt::format("{:.1f} MiB", static_cast<double>(*bytes) / 1048576.0) : std::string("gone");
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Prints the interval since the last report: the rate of good answers, the errors (measured; in all: warm-up's too).
void report_interval(const Load& load, const Options& o, const Plan& plan, Watch& w, Clock::time_point now) {
  const Totals m = load.totals(true);
  const double secs = std::max(seconds(now - w.last_t), 1e-9);
  Interval iv;
  iv.t_s = seconds(now - plan.measure_start);
  iv.requests_per_s = static_cast<double>(m.field[kOk] - w.last.field[kOk]) / secs;
  iv.mb_per_s = static_cast<double>(m.field[kBytes] - w.last.field[kBytes]) / secs / 1e6;
  iv.errors = m.errors() - w.last.errors();
  iv.errors_in_all = m.errors() + load.totals(false).errors();
  if (w.rss.pid) iv.rss = w.rss.sample();
  fmt::print("[{:8.1f} s] {:10.0f} req/s {:12.0f} docs/s {:9.2f} MB/s   errors +{} ({} in all){}\n", iv.t_s,
             iv.requests_per_s, iv.requests_per_s * o.docs_per_request, iv.mb_per_s, iv.errors, iv.errors_in_all,
             w.rss.pid ? "   rss " + mib(iv.rss) : std::string());
  std::fflush(stdout);
  w.intervals.push_back(iv);
  w.last = m;
  w.last_t = now;
}

// Sleeps in short steps until the run's end or a signal, sampling RSS after warm-up and reporting intervals.
void watch(Plan& plan, const Load& load, const Options& o, Watch& w) {
  const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.report_every));
  auto next = plan.measure_start + every;
  w.last_t = plan.measure_start;
  bool warm = false;
  for (;;) {
    const auto now = Clock::now();
    if (const int sig = g_signal.load(); sig != 0) {
      plan.end_at(now);
      w.signal = sig;
      return;
    }
    if (!warm && now >= plan.measure_start) {
      warm = true;
      if (w.rss.pid) w.rss.after_warmup = w.rss.sample();
    }
    if (o.report_every > 0 && now >= next && next <= plan.end()) {
      report_interval(load, o, plan, w, now);
      next += every;
    }
    if (now >= plan.end()) return;
    auto wake = std::min(now + std::chrono::milliseconds(20), plan.end());
    if (o.report_every > 0) wake = std::min(wake, next);
    if (!warm) wake = std::min(wake, plan.measure_start);
    std::this_thread::sleep_until(wake);
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return tv(u.ru_utime) + tv(u.ru_stime);
}

// ---- the figures ---------------------------------------------------------------------------------------------

struct Result {
  Totals measured, warmup;
  Histogram latency;
  std::map<std::string, std::uint64_t> error_kinds;  // both phases
  std::uint64_t in_flight_at_end = 0;
  double window_s = 0;   // the measured seconds
  double cpu_cores = 0;  // this program's CPU time over its wall time
  double requests_per_s() const { return window_s > 0 ? static_cast<double>(measured.field[kOk]) / window_s : 0; }
  double mb_per_s() const { return window_s > 0 ? static_cast<double>(measured.field[kBytes]) / window_s / 1e6 : 0; }
  std::uint64_t errors() const { return measured.errors() + warmup.errors(); }
  // Exit status 1: an error, or no good answer in the measured window (a server that hangs fails too).
  bool failed() const { return errors() != 0 || measured.field[kOk] == 0; }
};

// "503: 12, 504: 1" for the statuses other than the expected one (or all with `all`).
std::string statuses(const Totals& t, unsigned expected, bool all) {
  std::string out;
  for (std::size_t s = 0; s < kStatuses; ++s) {
    if (t.status[s] == 0 || (!all && s == expected)) continue;
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", s, t.status[s]);
  }
  return out;
}

std::optional<double> growth_pct(const Rss& rss) {
  if (!rss.after_warmup || !rss.end || *rss.after_warmup == 0) return std::nullopt;
  return (static_cast<double>(*rss.end) / static_cast<double>(*rss.after_warmup) - 1) * 100;
}

void print_errors(const Result& r, const Options& o) {
  const Totals& m = r.measured;
  if (m.errors() == 0) {
    fmt::print("  errors       none\n");
  } else {
    const std::string other = statuses(m, o.expect_status, false);
    fmt::print("  errors       {}: status {}, connect {}, timeout {}, socket {}, protocol {}\n", m.errors(),
               other.empty() ? "-" : other, m.field[kConnectErrors], m.field[kTimeouts], m.field[kSocketErrors],
               m.field[kProtocolErrors]);
  }
  if (!r.error_kinds.empty()) fmt::print("  by kind      (warm-up included)\n");
  for (const auto& [kind, n] : r.error_kinds) fmt::print("               {} x {}\n", n, kind);
}

void print_summary(const Result& r, const Options& o, const Watch& w) {
  const Histogram& h = r.latency;
  const double rps = r.requests_per_s();
  fmt::print("\nhttp_load: POST {}  {} connections, {} threads, {}\n", o.url, o.connections, o.threads,
             o.rate > 0 ? fmt::format("offered {:g} req/s", o.rate) : std::string("closed loop"));
  if (w.signal) fmt::print("  stopped early by signal {}\n", w.signal);
  fmt::print("  window       {:.2f} s measured after {:g} s warm-up\n", r.window_s, o.warmup);
  fmt::print("  requests     {} answered {}   {:.1f} req/s   {:.0f} docs/s ({:g} docs/request)\n",
             r.measured.field[kOk], o.expect_status, rps, rps * o.docs_per_request, o.docs_per_request);
  fmt::print("  latency ms   p50 {:.3f}  p90 {:.3f}  p99 {:.3f}  p99.9 {:.3f}  max {:.3f}  mean {:.3f}{}\n",
             h.quantile_ms(0.5), h.quantile_ms(0.9), h.quantile_ms(0.99), h.quantile_ms(0.999), h.max_ms(), h.mean_ms(),
             o.rate > 0 ? "  (from the scheduled send)" : "");
  fmt::print("  received     {:.2f} MB   {:.2f} MB/s\n", static_cast<double>(r.measured.field[kBytes]) / 1e6,
             r.mb_per_s());
  if (o.rate > 0)
    fmt::print("  rate         offered {:g} req/s, achieved {:.1f} req/s ({:.1f}%)\n", o.rate, rps, rps / o.rate * 100);
  const std::string all = statuses(r.measured, o.expect_status, true);
  fmt::print("  statuses     {}\n", all.empty() ? "-" : all);
  print_errors(r, o);
  fmt::print("  reconnects   {}   in flight at the end (dropped, not counted): {}\n", r.measured.field[kReconnects],
             r.in_flight_at_end);
  fmt::print("  warm-up      {} answered {} (not counted), {} errors, {} reconnects\n", r.warmup.field[kOk],
             o.expect_status, r.warmup.errors(), r.warmup.field[kReconnects]);
  fmt::print("  client cpu   {:.2f} cores (this program)\n", r.cpu_cores);
  if (w.rss.pid) {
    const auto g = growth_pct(w.rss);
    fmt::print("  server rss   pid {}: after warm-up {}, end {}, growth {} (start {}, peak {})\n", w.rss.pid,
               mib(w.rss.after_warmup), mib(w.rss.end), g ? fmt::format("{:+.2f}%", *g) : std::string("-"),
               mib(w.rss.start), mib(w.rss.peak));
  }
  const std::string failure =
      r.errors() ? fmt::format("FAILED: {} errors", r.errors()) : std::string("FAILED: no answer in the window");
  fmt::print("  result       {}\n", r.failed() ? failure : std::string("ok"));
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + '"';
}

std::string json_number(std::optional<std::uint64_t> v) { return v ? std::to_string(*v) : "null"; }

std::string json_errors(const Result& r) {
  const Totals& m = r.measured;
  std::string by_status, kinds;
  for (std::size_t s = 0; s < kStatuses; ++s)
    if (m.status[s]) by_status += fmt::format("{}\"{}\": {}", by_status.empty() ? "" : ", ", s, m.status[s]);
  for (const auto& [kind, n] : r.error_kinds)
    kinds += fmt::format("{}{}: {}", kinds.empty() ? "" : ", ", json_string(kind), n);
  return fmt::format(
      "\"statuses\": {{{}}},\n  \"errors\": {{\"total\": {}, \"other_status\": {}, \"connect\": {}, \"timeout\": {}, "
      "\"socket\": {}, \"protocol\": {}, \"kinds\": {{{}}}}},\n  \"reconnects\": {},\n  \"in_flight_at_end\": {},\n"
      "  \"warmup\": {{\"requests\": {}, \"errors\": {}}},\n  \"failed\": {},\n",
      by_status, m.errors(), m.field[kOtherStatus], m.field[kConnectErrors], m.field[kTimeouts], m.field[kSocketErrors],
      m.field[kProtocolErrors], kinds, m.field[kReconnects], r.in_flight_at_end, r.warmup.field[kOk], r.warmup.errors(),
      r.failed());
}

std::string json_watch(const Watch& w) {
  std::string out;
  if (w.rss.pid) {
    const auto g = growth_pct(w.rss);
    out += fmt::format(
        "  \"rss_bytes\": {{\"pid\": {}, \"start\": {}, \"after_warmup\": {}, \"end\": {}, \"peak\": {}, "
        "\"growth_pct\": {}}},\n",
        w.rss.pid, json_number(w.rss.start), json_number(w.rss.after_warmup), json_number(w.rss.end),
        json_number(w.rss.peak), g ? fmt::format("{:.3f}", *g) : "null");
  }
  out += "  \"intervals\": [";
  for (std::size_t i = 0; i < w.intervals.size(); ++i) {
    const Interval& iv = w.intervals[i];
    out += fmt::format(
        "{}\n    {{\"t_s\": {:.3f}, \"requests_per_s\": {:.1f}, \"mb_per_s\": {:.3f}, \"errors\": {}, "
        "\"errors_in_all\": {}, \"rss_bytes\": {}}}",
        i ? "," : "", iv.t_s, iv.requests_per_s, iv.mb_per_s, iv.errors, iv.errors_in_all, json_number(iv.rss));
  }
  return out + (w.intervals.empty() ? "]\n" : "\n  ]\n");
}

// Writes the figures to o.json; false (and a message) when the file cannot be written.
bool write_json(const Result& r, const Options& o, const Watch& w) {
  const Histogram& h = r.latency;
  const double rps = r.requests_per_s();
  std::string text = fmt::format(
      "{{\n  \"url\": {},\n  \"connections\": {},\n  \"threads\": {},\n  \"rate_offered\": {},\n  \"warmup_s\": {},\n"
      "  \"window_s\": {:.3f},\n  \"stopped_by_signal\": {},\n  \"docs_per_request\": {},\n  \"expect_status\": {},\n"
      "  \"requests\": {},\n  \"requests_per_s\": {:.1f},\n  \"docs_per_s\": {:.1f},\n  \"bytes_received\": {},\n"
      "  \"mb_per_s\": {:.3f},\n  \"latency_ms\": {{\"p50\": {:.3f}, \"p90\": {:.3f}, \"p99\": {:.3f}, \"p999\": "
      "{:.3f}, "
      "\"max\": {:.3f}, \"mean\": {:.3f}, \"from\": \"{}\"}},\n  \"client_cpu_cores\": {:.3f},\n",
      json_string(o.url), o.connections, o.threads, o.rate, o.warmup, r.window_s, w.signal, o.docs_per_request,
      o.expect_status, r.measured.field[kOk], rps, rps * o.docs_per_request, r.measured.field[kBytes], r.mb_per_s(),
      h.quantile_ms(0.5), h.quantile_ms(0.9), h.quantile_ms(0.99), h.quantile_ms(0.999), h.max_ms(), h.mean_ms(),
      o.rate > 0 ? "scheduled_send" : "send", r.cpu_cores);
  text += "  " + json_errors(r) + json_watch(w) + "}\n";
  std::ofstream out(o.json, std::ios::binary);
  out << text;
  out.close();
  if (!out) fmt::print(stderr, "http_load: cannot write {}\n", o.json);
  return static_cast<bool>(out);
}

// ---- main ----------------------------------------------------------------------------------------------------

// Resolves, reads the body, checks --rss-pid: false (and a message) on a bad argument.
bool prepare(const Options& o, Plan& plan, Watch& w) {
  try {
    make_plan(o, plan);
    if (o.rss_pid) {
      w.rss.pid = o.rss_pid;
      w.rss.start = w.rss.sample();
      if (!w.rss.start)
        throw BadArgument(fmt::format("--rss-pid {}: no VmRSS in /proc/{}/status", o.rss_pid, o.rss_pid));
    }
    return true;
  } catch (const BadArgument& e) {
    fmt::print(stderr, "http_load: {}\n", e.what());
    return false;
  }
}

Clock::duration from_seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const auto rc = parse_options(argc, argv, o)) return *rc;
  Plan plan;
  Watch w;
  if (!prepare(o, plan, w)) return 2;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  fmt::print("http_load: POST {} ({} bytes of request), {} connections on {} threads, {:g} s warm-up + {:g} s, {}\n",
             o.url, plan.request.size(), o.connections, o.threads, o.warmup, o.duration,
             o.rate > 0 ? fmt::format("{:g} req/s offered", o.rate) : std::string("closed loop"));
  std::fflush(stdout);

  const double cpu0 = cpu_seconds();
  plan.t0 = Clock::now();
  plan.measure_start = plan.t0 + from_seconds(o.warmup);
  plan.end_at(plan.measure_start + from_seconds(o.duration));
  Result r;
  {
    Load load(plan, o.threads);
    load.start();
    watch(plan, load, o, w);
    if (w.rss.pid) w.rss.end = w.rss.sample();  // still under load, as after warm-up
    load.stop();
    r.measured = load.totals(true);
    r.warmup = load.totals(false);
    r.latency = load.latency();
    r.error_kinds = load.error_kinds();
    r.in_flight_at_end = load.in_flight_at_end();
  }
  r.window_s = std::max(0.0, seconds(plan.end() - plan.measure_start));
  r.cpu_cores = (cpu_seconds() - cpu0) / std::max(seconds(Clock::now() - plan.t0), 1e-9);
  print_summary(r, o, w);
  const bool json_ok = o.json.empty() || write_json(r, o, w);
  return r.failed() ? 1 : json_ok ? 0 : 2;
}
