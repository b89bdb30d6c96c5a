// The gateway's routes in the shape of model APIs — OpenAI's /v1/embeddings, TEI's /embed and /rerank,
// Jina's and Cohere's /v1/rerank: each parses its body into a flow call (protocols.hpp, rerank.cpp), posts it
// through call_flow() and shapes the answer. Their failures answer 500 in the gateway's own error shape.
#include "http_front.hpp"

#include <fmt/format.h>

#include <memory>

namespace flowline {

void Connection::handle_model_route(const json::value& body) {
  auto failure = [](const Response& r) {
    return gateway::plain_error(500, "server_error", fmt::format("executor '{}' failed: {}", r.error_executor, r.error))
        .body;
  };
  const std::string& endpoint = gw_.core.options.embeddings_endpoint;
  switch (route_) {
    case Route::OpenAI: {
      auto call = std::make_shared<gateway::EmbeddingsCall>(gateway::parse_openai(body, endpoint, gw_.core.limits));
      gateway::Call flow_call = std::move(call->call);
      return call_flow(
          std::move(flow_call), route_,
          [call](const DocumentArray& docs) { return gateway::openai_response(*call, docs); }, failure);
    }
    case Route::TEI: {
      auto call = std::make_shared<gateway::EmbeddingsCall>(gateway::parse_tei(body, endpoint, gw_.core.limits));
      gateway::Call flow_call = std::move(call->call);
      return call_flow(
          std::move(flow_call), route_,
          [call](const DocumentArray& docs) { return gateway::tei_response(*call, docs); }, failure);
    }
    default: {
      const bool tei = route_ == Route::TEIRerank;
      auto call = std::make_shared<gateway::RerankCall>(tei ? gateway::parse_tei_rerank(body, gw_.core.limits)
                                                            : gateway::parse_v1_rerank(body, gw_.core.limits));
      gateway::Call flow_call = std::move(call->call);
      return call_flow(
          std::move(flow_call), route_,
          [call, tei](const DocumentArray& docs) {
            return tei ? gateway::tei_rerank_response(*call, docs) : gateway::v1_rerank_response(*call, docs);
          },
          failure);
    }
  }
}

}  // namespace flowline
