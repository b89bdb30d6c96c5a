// Jina's readiness, endpoints and version services on the gRPC front, as Jina's Client asks for them:
// jina.JinaGatewayDryRunRPC/dry_run (readiness, as /ready: no token needed),
// jina.JinaDiscoverEndpointsRPC/endpoint_discovery and jina.JinaInfoRPC/_status (with the bearer token when
// the gateway has one). Each takes google.protobuf.Empty as raw bytes: a message that does not parse as one
// is answered INVALID_ARGUMENT naming the method (front_support.hpp). Answers are counted on the metrics'
// route "info". Private to flowline::gateway.
//
// Ownership: the services refer to `core`, which outlives them; the front registers them with its server
// (grpc::ServerBuilder::RegisterService) and keeps them until the server has stopped. Their methods run on
// gRPC's threads.
#pragma once

#include "../core.hpp"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

namespace flowline::gateway {

std::vector<std::unique_ptr<grpc::Service>> make_info_services(Core& core);

}  // namespace flowline::gateway
