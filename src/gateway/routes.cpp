// The gateway's route table (routes.hpp): every fixed route once, and the metric labels.
#include "routes.hpp"

#include "http_front.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace flowline::gateway {

namespace {

constexpr bool kToken = true, kNoToken = false;

const std::array kRoutes{
    RouteRow{"/health", Method::Get, kNoToken, Route::Health, &Connection::handle_health, "alive: 200 while serving",
             "get_health", "", "object"},
    RouteRow{"/ready", Method::Get, kNoToken, Route::Ready, &Connection::handle_ready,
             "ready: 503 while starting, draining or without a reachable remote host", "get_ready", "", "object"},
    RouteRow{"/metrics", Method::Get, kToken, Route::Metrics, &Connection::handle_metrics,
             "Prometheus metrics (text format)", "get_metrics", "", "string"},
    RouteRow{"/", Method::Get, kToken, Route::Info, &Connection::handle_info, "Jina's health check", "get_root", "",
             "object"},
    RouteRow{"/dry_run", Method::Get, kToken, Route::Info, &Connection::handle_info,
             "Jina's dry run: whether the flow serves", "get_dry_run", "", "object"},
    RouteRow{"/status", Method::Get, kToken, Route::Info, &Connection::handle_info,
             "Jina's status: versions and executors", "get_status", "", "object"},
    RouteRow{"/openapi.json", Method::Get, kToken, Route::Info, &Connection::handle_info, "this API description",
             "get_openapi", "", "object"},
    RouteRow{"/docs", Method::Get, kToken, Route::Info, &Connection::handle_info, "the API description as a page",
             "get_docs", "", "string"},
    RouteRow{"/post", Method::Post, kToken, Route::JinaPost, &Connection::handle_post,
             "Jina's /post: the endpoint named by execEndpoint", "post_post", "PostRequest", "object"},
    RouteRow{"/v1/models", Method::Get, kToken, Route::Info, &Connection::handle_models,
             "OpenAI's model list: the flow's models (each executor's `model` folder)", "list_models", "", "object"},
    RouteRow{"/info", Method::Get, kToken, Route::Info, &Connection::handle_tei_info,
             "TEI's model info: the served model, its type and the gateway's bounds", "get_info", "", "object"},
    RouteRow{"/v1/embeddings", Method::Post, kToken, Route::OpenAI, &Connection::handle_openai, "OpenAI embeddings",
             "embeddings", "EmbeddingsRequest", "object"},
    RouteRow{"/embeddings", Method::Post, kToken, Route::OpenAI, &Connection::handle_openai,
             "OpenAI embeddings (without the version prefix)", "embeddings_unversioned", "EmbeddingsRequest", "object"},
    RouteRow{"/embed", Method::Post, kToken, Route::TEI, &Connection::handle_tei, "TEI embed", "embed", "EmbedRequest",
             "array"},
    RouteRow{"/rerank", Method::Post, kToken, Route::TEIRerank, &Connection::handle_tei_rerank,
             "TEI rerank (a Jina body, {\"data\": ...}, goes to the flow endpoint /rerank)", "rerank", "RerankRequest",
             "array", true},
    RouteRow{"/v1/rerank", Method::Post, kToken, Route::Rerank, &Connection::handle_rerank,
             "Jina's and Cohere's rerank", "v1_rerank", "V1RerankRequest", "object"},
    RouteRow{"/v2/embed", Method::Post, kToken, Route::CohereEmbed, &Connection::handle_cohere_embed,
             "Cohere's embed (ClientV2): texts, or images as data URIs (an image executor: the ClipEncoder)",
             "v2_embed", "CohereEmbedRequest", "object"},
    RouteRow{"/v2/rerank", Method::Post, kToken, Route::Rerank, &Connection::handle_rerank,
             "Cohere's rerank (ClientV2)", "v2_rerank", "V1RerankRequest", "object"},
    RouteRow{"/predict", Method::Post, kToken, Route::TEIPredict, &Connection::handle_tei_predict,
             "TEI predict: a SequenceClassifier's labels, best first", "predict", "PredictRequest", "array"},
    RouteRow{"/classify", Method::Post, kToken, Route::Classify, &Connection::handle_classify,
             "Infinity's classify (a Jina body, {\"data\": ...}, goes to the flow endpoint /classify)", "classify",
             "ClassifyRequest", "object", true},
    RouteRow{"/tokenize", Method::Post, kToken, Route::TEITokenize, &Connection::handle_tei_tokenize,
             "TEI tokenize: the served model's tokens with their UTF-8 byte offsets", "tokenize", "TokenizeRequest",
             "array"},
    RouteRow{"/token-classification", Method::Post, kToken, Route::TokenClassification,
             &Connection::handle_token_classification,
             "Hugging Face's token classification: a TokenClassifier's entities with character offsets (a Jina body, "
             "{\"data\": ...}, goes to the flow endpoint /token-classification)",
             "token_classification", "TokenClassificationRequest", "array", true},
};

constexpr std::array<const char*, static_cast<std::size_t>(Route::kCount)> kRouteNames{"jina",
                                                                                       "jina_post",
                                                                                       "jina_stream",
                                                                                       "openai_embeddings",
                                                                                       "tei_embed",
                                                                                       "tei_rerank",
                                                                                       "rerank",
                                                                                       "tei_predict",
                                                                                       "classify",
                                                                                       "tei_tokenize",
                                                                                       "token_classification",
                                                                                       "cohere_embed",
                                                                                       "health",
                                                                                       "ready",
                                                                                       "metrics",
                                                                                       "info",
                                                                                       "grpc",
                                                                                       "other"};

}  // namespace

const char* route_name(Route route) noexcept {
  const auto i = static_cast<std::size_t>(route);
  return i < kRouteNames.size() ? kRouteNames[i] : "other";
}

const char* front_name(FrontKind front) noexcept { return front == FrontKind::Grpc ? "grpc" : "http"; }

std::span<const RouteRow> route_table() { return kRoutes; }

const RouteRow* find_route(std::string_view path) {
  const auto it = std::find_if(kRoutes.begin(), kRoutes.end(), [&](const RouteRow& r) { return r.path == path; });
  return it == kRoutes.end() ? nullptr : &*it;
}

std::string routes_help() {
  std::string out;
  for (const RouteRow& r : kRoutes) {
    fmt::format_to(std::back_inserter(out), "  {:<4} {:<21} {}{}\n", r.method == Method::Get ? "GET" : "POST", r.path,
                   r.summary, r.needs_token ? "" : " (no token needed)");
  }
  fmt::format_to(std::back_inserter(out), "  {:<4} {:<21} {}\n", "POST", "/<endpoint>",
                 "each endpoint of the flow: Jina's body, or NDJSON with Content-Type application/x-ndjson");
  return out;
}

}  // namespace flowline::gateway
