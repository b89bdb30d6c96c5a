// The gateway's fixed routes, declared once: a row per route with its path, method, whether the bearer
// token is needed, its metric label, its handler and its OpenAPI operation. The HTTP front dispatches
// through it, the metrics take their route labels from it, /openapi.json lists its rows beside the flow's
// own endpoints, and `flowline serve --help` prints it. A new route is one row here plus its handler.
// Private to flowline::gateway; the table is constant, so any thread may read it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace flowline::gateway {

class Connection;  // the HTTP front's (http_front.hpp)

// What the metrics tell apart (a fixed set, so that clients cannot create series at will): the rows'
// labels, plus the flow's endpoints (Jina), NDJSON streams, gRPC and anything else.
enum class Route {
  Jina,        // POST /<endpoint>, /default: each endpoint of the flow
  JinaPost,    // POST /post
  JinaStream,  // NDJSON on a flow endpoint
  OpenAI,
  TEI,
  TEIRerank,
  Rerank,
  TEIPredict,
  Classify,
  TEITokenize,
  TokenClassification,
  CohereEmbed,
  Health,
  Ready,
  Metrics,
  Info,
  Grpc,  // Jina's gRPC data requests (each request of a stream counts as one)
  Other,
  kCount
};
// The metric label of a route: "jina", "openai_embeddings", ...
const char* route_name(Route route) noexcept;

// Which front answered (the metrics' `front` label: "http", "grpc").
enum class FrontKind { Http, Grpc };
const char* front_name(FrontKind front) noexcept;

enum class Method { Get, Post };

// One fixed route. `handle` runs on the connection's strand with the request read whole.
struct RouteRow {
  std::string_view path;
  Method method;
  bool needs_token;  // probes (/health, /ready) answer without it, as orchestrators call them
  Route route;
  void (Connection::*handle)(const RouteRow& row);
  // The OpenAPI operation: its summary (also `serve --help`'s line), operationId, the request body's
  // schema (a name in components.schemas; empty for GET) and the answer's JSON type ("object", "array").
  std::string_view summary;
  std::string_view operation_id;
  std::string_view request_schema;
  std::string_view answer_type;
  // Whether a Jina body ({"data": ...}) sent here goes to the flow endpoint of the same path (its handler tells
  // them apart): /openapi.json then describes the body as one of both. Other rows win over such an endpoint.
  bool jina_bodies_to_flow = false;
};

// Every row, in the order `serve --help` and docs/serving.md list them.
std::span<const RouteRow> route_table();
// The row of `path`, or nullptr (the flow's endpoints and unknown paths have none).
const RouteRow* find_route(std::string_view path);
// "GET  /health  alive\n" ... for `flowline serve --help`.
std::string routes_help();

}  // namespace flowline::gateway
