// The gateway's self-description: /openapi.json (OpenAPI 3.1, in the shape Jina's gateway serves, which
// Jina's Python client reads to find the endpoint routes) and the /docs page. Private to flowline::gateway.
#pragma once

#include "flowline/flow_config.hpp"

#include <set>
#include <string>

namespace flowline::gateway {

// The OpenAPI document: one POST route per flow endpoint ("/" is served as "/default"), /post, the
// embedding routes and the operational ones, with their request and response schemas. Each endpoint's input
// model lists, under `parameters`, the request parameters the executors of `flow` declare for it
// (Registry::global()'s entries; flowline/params.hpp). `flow` may be null (no request parameters listed).
std::string openapi_document(const std::string& title, const std::set<std::string>& endpoints, const FlowConfig* flow);

// An HTML page that renders /openapi.json with Swagger UI (loaded by the browser from its CDN).
std::string docs_page(const std::string& title);

}  // namespace flowline::gateway
