// The gateway's routes in the shape of model APIs — OpenAI's /v1/embeddings, TEI's /embed and /rerank,
// Jina's and Cohere's /v1/rerank: each parses its body into a flow call (protocols.hpp, rerank.cpp), posts it
// through call_flow() and shapes the answer. Their failures answer 500 in the gateway's own error shape.
#include "http_front.hpp"

#include <fmt/format.h>

#include <memory>

namespace flowline {

namespace {

std::string executor_failure(const Response& r) {
  if (r.request_error) {
    return gateway::plain_error(422, "invalid_request_error",
                                fmt::format("executor '{}': {}", r.error_executor, r.error))
        .body;
  }
  return gateway::plain_error(500, "server_error", fmt::format("executor '{}' failed: {}", r.error_executor, r.error))
      .body;
}

}  // namespace

void Connection::handle_openai(const gateway::RouteRow& row) {
  const json::value body = gateway::parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<gateway::EmbeddingsCall>(
      gateway::parse_openai(body, gw_.core.options.embeddings_endpoint, gw_.core.limits));
  gateway::Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route,
      [call](const DocumentArray& docs) { return gateway::openai_response(*call, docs); }, executor_failure);
}

void Connection::handle_tei(const gateway::RouteRow& row) {
  const json::value body = gateway::parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<gateway::EmbeddingsCall>(
      gateway::parse_tei(body, gw_.core.options.embeddings_endpoint, gw_.core.limits));
  gateway::Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return gateway::tei_response(*call, docs); },
      executor_failure);
}

// TEI's /rerank, unless the body is Jina's ({"data": ...}): that goes to a flow endpoint /rerank.
void Connection::handle_tei_rerank(const gateway::RouteRow& row) {
  const json::value body = gateway::parse_body(request_.body(), gw_.core.limits, false);
  if (body.is_object() && body.get_object().contains("data")) {
    if (!gw_.core.endpoints.count("/rerank")) {
      route_ = Route::Other;
      return reply(404, R"({"detail":"Not Found"})");
    }
    route_ = Route::Jina;
    return handle_jina("/rerank");
  }
  auto call = std::make_shared<gateway::RerankCall>(gateway::parse_tei_rerank(body, gw_.core.limits));
  gateway::Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route,
      [call](const DocumentArray& docs) { return gateway::tei_rerank_response(*call, docs); }, executor_failure);
}

void Connection::handle_rerank(const gateway::RouteRow& row) {
  const json::value body = gateway::parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<gateway::RerankCall>(gateway::parse_v1_rerank(body, gw_.core.limits));
  gateway::Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route,
      [call](const DocumentArray& docs) { return gateway::v1_rerank_response(*call, docs); }, executor_failure);
}

}  // namespace flowline
