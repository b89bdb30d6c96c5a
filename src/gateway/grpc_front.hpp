// The gRPC front of flowline::Gateway: Jina's gRPC services (jina.JinaRPC/Call and the rest, grpc/README in
// docs/serving.md) over the gateway core (core.hpp). An optional build component: built where gRPC C++ and
// protobuf are found (FLOWLINE_GRPC), otherwise available() is false and start() refuses with a message
// that says so. No gRPC header here, so the rest of the gateway builds without it. Private to
// flowline::gateway.
//
// Threads and ownership: start() and stop() are called from the gateway's controlling thread; the services
// run on gRPC's own threads, and hand every call to the core, whose callbacks come back on replica threads.
// The GrpcFront borrows the core, which outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace flowline::gateway {

class Core;

class GrpcFront {
 public:
  // Whether this build has the gRPC front.
  static bool available() noexcept;
  // Serves Jina's gRPC services on host:port (0: a free port). Throws flowline::Error when the address
  // cannot be bound, or when the build has no gRPC front.
  static std::unique_ptr<GrpcFront> start(Core& core, const std::string& host, std::uint16_t port);

  virtual ~GrpcFront() = default;
  virtual std::uint16_t port() const noexcept = 0;
  // After the core stopped serving and the flow gave every request back: ends open calls (streams get
  // UNAVAILABLE for requests they send from now on) and stops the server, waiting at most a few seconds.
  virtual void stop() = 0;
};

}  // namespace flowline::gateway
