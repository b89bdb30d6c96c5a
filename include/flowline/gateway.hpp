// flowline/gateway.hpp — serving a started Flow over HTTP/1.1 (Jina's, OpenAI's and TEI's APIs, health,
// readiness and Prometheus metrics) and, when asked for, Jina's gRPC protocol. Link flowline::gateway.
//
//   flowline::Flow flow = flowline::Flow::from_yaml("flows/encode.yml");
//   auto gateway = flowline::Gateway::attach_to(flow);   // before start(): its metrics observe the flow
//   flow.start();
//   gateway->start({.port = 8080});                       // binds 127.0.0.1:8080 and serves on its threads
//   ...                                                   // until SIGTERM, say
//   gateway->stop();                                      // answers what is in flight, then returns
//   flow.close();
//
// Routes: the gateway's route table (src/gateway/routes.cpp) declares each fixed route once — path,
// method, whether the token is needed, metric label, handler, OpenAPI operation — and gateway_routes()
// prints it (`flowline serve --help`): /health, /ready, /metrics, Jina's /, /dry_run, /status, /post and one
// POST route per flow endpoint (NDJSON too), OpenAI's /v1/embeddings and /v1/models, TEI's /embed, /rerank
// and /info, Jina's and Cohere's /v1/rerank and /v2/rerank, /openapi.json and /docs. docs/serving.md has
// the request and response shapes.
// gRPC (GatewayOptions::grpc_port; Jina's Client(port=...) speaks it by default): jina.JinaRPC/Call (a
//   stream of DataRequestProto, answered in request order), JinaSingleDataRequestRPC/process_single_data,
//   JinaGatewayDryRunRPC/dry_run, JinaDiscoverEndpointsRPC/endpoint_discovery, JinaInfoRPC/_status, and
//   grpc.health.v1.Health; documents as docarray's DocListProto. The same limits, token and metrics (route
//   label "grpc"); refusals are gRPC status codes (RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED,
//   UNAUTHENTICATED, INVALID_ARGUMENT), an executor's failure is Jina's header status ERROR.
//
// Every request's documents go to the flow as one Flow::submit(); requests of the same endpoint and
// parameters from any number of clients share the executors' batches. Limits, each answered with a status
// that names it: body size (413), documents per request (413), JSON nesting depth (400), requests inside the
// flow (503 with Retry-After), time a request may take (504), header size and idle connections (closed),
// bearer token (401). Malformed HTTP or JSON gets 400 (422 on Jina's routes, as Jina answers) naming what
// was wrong.
//
// Threads and ownership. The gateway runs its own I/O threads (GatewayOptions::threads), each with an event
// loop of its own; a connection stays on one of them (given in turn) and every handler of it runs there, and
// the flow's completion callbacks only hand results over to them. start() and stop() are
// called from one controlling thread. The Flow must outlive the Gateway and stay started while it serves;
// close the flow after stop(). The Gateway is not copyable or movable: attach_to() hands out a shared_ptr
// because the flow shares its metrics observer.
#pragma once

#include "flowline/serve_settings.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace flowline {

class Flow;

// GatewayOptions, the options start() takes, and the table of the settings that set them are in
// flowline/serve_settings.hpp.

// What the gateway has answered since start().
struct GatewayStats {
  std::uint64_t requests = 0;  // answered, any status
  std::uint64_t documents = 0;
  std::uint64_t rejected_busy = 0;  // 503 for want of room in the flow
  std::uint64_t timed_out = 0;      // 504
  std::uint64_t in_flight = 0;      // inside the flow now
  std::uint64_t connections = 0;    // open now
};

class Gateway {
 public:
  // A gateway for `flow`, its metrics observer attached to the flow (so call before flow.start()).
  static std::shared_ptr<Gateway> attach_to(Flow& flow);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Binds, listens and starts the I/O threads; returns once requests are being served. The flow must be
  // started. Throws flowline::Error when the address cannot be bound ("127.0.0.1:8080: Address already in
  // use") or an option is out of range.
  void start(GatewayOptions options);
  // The port bound by start() (the chosen one when options.port was 0); 0 when HTTP is not served.
  std::uint16_t port() const noexcept;
  // The gRPC port bound by start(); 0 when gRPC is not served.
  std::uint16_t grpc_port() const noexcept;
  // Whether this build has the gRPC front (an optional component: gRPC C++ must be found at build time).
  static bool grpc_available() noexcept;
  // Graceful stop: /ready turns 503, no new connection is accepted, every request already inside the flow
  // is answered (one the flow takes longer than request_timeout over has had its 504; stop() still waits
  // for the flow to give it back), then idle connections close and the threads are joined. Idempotent.
  void stop();

  // Counters read from atomics: any thread, at any time (before start() all zero). port() and grpc_port()
  // likewise, once start() has returned.
  GatewayStats stats() const;

  class Impl;

 private:
  explicit Gateway(Flow& flow);
  std::unique_ptr<Impl> impl_;
};

// The gateway's fixed routes, one line each ("  POST /v1/embeddings  OpenAI embeddings"), from its route table.
std::string gateway_routes();
// docs/serving.md's limits table (Markdown), from the settings table (serve_settings.hpp).
std::string gateway_limits_table();

}  // namespace flowline
