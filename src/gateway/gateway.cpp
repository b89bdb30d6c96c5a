// flowline::Gateway (include/flowline/gateway.hpp): the gateway core (core.hpp) with its fronts — HTTP
// (http_front.hpp) always, Jina's gRPC (grpc_front.hpp) when asked for and built — and the I/O threads
// that run the core's io_context.
#include "flowline/gateway.hpp"

#include "core.hpp"
#include "grpc_front.hpp"
#include "http_front.hpp"
#include "routes.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

namespace flowline {

class Gateway::Impl {
 public:
  explicit Impl(Flow& flow) : http(core), core(flow) {}

  void start(GatewayOptions o);
  void stop();

  // The HTTP front before the core, which owns the I/O threads and their io_context: members go in
  // reverse, so the io_context goes first, and the connections its queued handlers still hold unregister
  // from the front's listener while it exists (the front's constructor only stores the core's address).
  gateway::HttpFront http;
  gateway::Core core;
  std::unique_ptr<gateway::GrpcFront> grpc;
};

void Gateway::Impl::start(GatewayOptions o) {
  if (!o.http && !o.grpc_port) throw Error("Gateway::start(): serve http, grpc or both");
  core.configure(std::move(o));
  const GatewayOptions& options = core.options;
  // gRPC first: a build without it refuses here, before anything is bound.
  if (options.grpc_port) grpc = gateway::GrpcFront::start(core, options.host, *options.grpc_port);
  core.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  try {
    if (options.http) http.start();
  } catch (...) {
    if (grpc) grpc->stop();
    grpc.reset();
    throw;
  }
  int n = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(n, 1);
  core.io_threads.start(n);
  core.begin_serving();
  if (options.http) {
    spdlog::info("serving on http://{}:{} ({} I/O threads, at most {} requests in the flow)", options.host,
                 http.bound_port, n, core.max_in_flight);
  }
  if (grpc) spdlog::info("serving Jina's gRPC on grpc://{}:{}", options.host, grpc->port());
}

void Gateway::Impl::stop() {
  if (!core.io_threads.running()) return;
  core.begin_draining();
  if (core.options.http) http.stop_accepting();
  // Every request inside the flow is answered before the connections go. The flow's callbacks post to
  // the I/O threads, so they must run until the last one came back, even past request_timeout (whose
  // clients got their timeout answer already).
  core.wait_for_flow();
  if (grpc) grpc->stop();
  if (core.options.http) http.close_connections();
  core.io_threads.stop();
  http.release();
}

void GatewayOptions::apply(const ServeSettings& s) {
  for (const ServeSetting& setting : serve_settings()) {
    std::visit(
        [&](const auto& member) {
          if (const auto& given = s.*member.given) {
            auto& option = this->*member.option;
            using Option = std::decay_t<decltype(option)>;
            if constexpr (std::is_same_v<Option, std::optional<std::uint16_t>>) {
              option = static_cast<std::uint16_t>(*given);
            } else {
              option = static_cast<Option>(*given);
            }
          }
        },
        setting.field);
  }
}

namespace {

// A default as docs/serving.md shows it: 32 MiB, 4,096, 60,000 ms, `127.0.0.1`.
std::string shown_default(const ServeSetting& setting) {
  if (!setting.shown.empty()) return std::string(setting.shown);
  const std::string value = serve_default(setting);
  if (setting.unit == ServeUnit::Text) return fmt::format("`{}`", value);
  const std::uint64_t n = std::stoull(value);
  if (setting.unit == ServeUnit::Bytes && n > 0) {
    if (n % (1u << 30) == 0) return fmt::format("{} GiB", n >> 30);
    if (n % (1u << 20) == 0) return fmt::format("{} MiB", n >> 20);
  }
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return setting.unit == ServeUnit::Millis ? digits + " ms" : digits;
}

// The option as the table names it: "`--max-documents`".
std::string shown_flag(const ServeSetting& setting) {
  return fmt::format("`{}`", setting.flag.substr(0, setting.flag.find(',')));
}

}  // namespace

std::string gateway_limits_table() {
  std::string out = "| option | default | fronts | beyond it |\n| --- | --- | --- | --- |\n";
  // The limits that are no settings: the token (never a flow-file key, so that flow files can be shared)
  // closes the core's rows, the header size the HTTP front's.
  const auto fixed_rows = [&](ServeFront front) {
    if (front == ServeFront::Core) {
      out +=
          "| `--token-file FILE` or `FLOWLINE_TOKEN` | none | both | 401 without `Authorization: Bearer TOKEN` "
          "(compared in constant time); `/health` and `/ready` stay open; gRPC: `UNAUTHENTICATED` without that "
          "metadata |\n";
    }
    if (front == ServeFront::Http) {
      out += fmt::format("| header size | {} KiB | HTTP | 431 |\n", gateway::kMaxHeaderBytes >> 10);
    }
  };
  for (const ServeFront front : {ServeFront::Core, ServeFront::Http, ServeFront::Grpc}) {
    for (const ServeSetting& s : serve_settings()) {
      if (s.front != front || s.beyond.empty() || s.flag.empty()) continue;
      const char* fronts = front == ServeFront::Core ? "both" : front == ServeFront::Http ? "HTTP" : "gRPC";
      fmt::format_to(std::back_inserter(out), "| {} | {} | {} | {} |\n", shown_flag(s), shown_default(s), fronts,
                     s.beyond);
    }
    fixed_rows(front);
  }
  return out;
}

Gateway::Gateway(Flow& flow) : impl_(std::make_unique<Impl>(flow)) {}

std::shared_ptr<Gateway> Gateway::attach_to(Flow& flow) {
  std::shared_ptr<Gateway> gateway(new Gateway(flow));
  flow.attach(gateway->impl_->core.metrics);
  return gateway;
}

Gateway::~Gateway() { stop(); }

void Gateway::start(GatewayOptions options) { impl_->start(std::move(options)); }
std::uint16_t Gateway::port() const noexcept { return impl_->http.bound_port; }
std::uint16_t Gateway::grpc_port() const noexcept { return impl_->grpc ? impl_->grpc->port() : 0; }
bool Gateway::grpc_available() noexcept { return gateway::GrpcFront::available(); }
void Gateway::stop() { impl_->stop(); }

GatewayStats Gateway::stats() const {
  const gateway::Core& c = impl_->core;
  return GatewayStats{c.requests.load(),  c.documents.load(), c.rejected_busy.load(),
                      c.timed_out.load(), c.in_flight.load(), impl_->http.open_connections()};
}

std::string gateway_routes() { return gateway::routes_help(); }

}  // namespace flowline
