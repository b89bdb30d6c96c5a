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

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <thread>
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
  HttpFront http;
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
  core.serving = true;
  if (options.http) {
    spdlog::info("serving on http://{}:{} ({} I/O threads, at most {} requests in the flow)", options.host,
                 http.bound_port, n, core.max_in_flight);
  }
  if (grpc) spdlog::info("serving Jina's gRPC on grpc://{}:{}", options.host, grpc->port());
}

void Gateway::Impl::stop() {
  if (!core.io_threads.running()) return;
  core.serving = false;
  core.draining = true;
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
  if (s.host) host = *s.host;
  if (s.port) port = static_cast<std::uint16_t>(*s.port);
  if (s.http) http = *s.http;
  if (s.grpc_port) grpc_port = static_cast<std::uint16_t>(*s.grpc_port);
  if (s.title) title = *s.title;
  if (s.threads) threads = *s.threads;
  if (s.max_body_bytes) max_body_bytes = *s.max_body_bytes;
  if (s.max_documents) max_documents = *s.max_documents;
  if (s.max_json_depth) max_json_depth = *s.max_json_depth;
  if (s.max_in_flight) max_in_flight = *s.max_in_flight;
  if (s.max_connections) max_connections = *s.max_connections;
  if (s.max_stream_documents) max_stream_documents = *s.max_stream_documents;
  if (s.request_timeout) request_timeout = *s.request_timeout;
  if (s.idle_timeout) idle_timeout = *s.idle_timeout;
  if (s.embeddings_endpoint) embeddings_endpoint = *s.embeddings_endpoint;
  if (s.grpc_memory_bytes) grpc_memory_bytes = *s.grpc_memory_bytes;
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
