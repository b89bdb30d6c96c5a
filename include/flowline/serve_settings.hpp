// flowline/serve_settings.hpp — how a flow file asks to be served: the gateway's settings that `flowline
// serve` reads from the flow file's `with:` keys (port, host, protocol, title, gateway: {...}).
//
// Plain data, kept apart from the Flow's options: the flow file parser (flow_config.hpp) fills FlowConfig::serve, and
// the gateway applies it (GatewayOptions::apply in gateway.hpp), after which the command line's options override it. A
// Flow run in process (`flowline run`, Flow::post) never reads it.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace flowline {

// Unset fields leave the gateway's defaults (GatewayOptions); the command line overrides what is set here.
struct ServeSettings {
  std::optional<std::string> host;
  std::optional<int> port;       // HTTP's, 0..65535
  std::optional<bool> http;      // serve HTTP (with.protocol lists http, or lists no protocol)
  std::optional<int> grpc_port;  // serve Jina's gRPC on this port (with.protocol lists grpc; --grpc-port)
  std::optional<std::string> title;
  std::optional<int> threads;
  std::optional<std::size_t> max_body_bytes;
  std::optional<std::size_t> max_documents;
  std::optional<std::size_t> max_json_depth;
  std::optional<std::size_t> max_in_flight;  // requests inside the flow at once (not FlowOptions::max_in_flight)
  std::optional<std::size_t> max_connections;
  std::optional<std::size_t> max_stream_documents;
  std::optional<std::chrono::milliseconds> request_timeout;
  std::optional<std::chrono::milliseconds> idle_timeout;
  std::optional<std::string> embeddings_endpoint;
  std::optional<std::size_t> grpc_memory_bytes;
};

}  // namespace flowline
