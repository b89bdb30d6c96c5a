// /openapi.json and /docs (openapi.hpp).
#include "openapi.hpp"

#include "routes.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/registry.hpp"
#include "flowline/version.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

namespace flowline::gateway {

namespace json = boost::json;

namespace {

json::object nullable(json::value schema) {
  return json::object{{"anyOf", json::array{std::move(schema), json::object{{"type", "null"}}}}};
}

json::object schema_ref(std::string_view name) {
  return json::object{{"$ref", fmt::format("#/components/schemas/{}", name)}};
}

json::object json_content(json::value schema) {
  return json::object{{"application/json", json::object{{"schema", std::move(schema)}}}};
}

json::object operation(std::string summary, std::string id, json::value request, json::value response) {
  json::object op{{"summary", std::move(summary)}, {"operationId", std::move(id)}};
  if (!request.is_null())
    op["requestBody"] = json::object{{"content", json_content(std::move(request))}, {"required", true}};
  op["responses"] = json::object{
      {"200", json::object{{"description", "Successful Response"}, {"content", json_content(std::move(response))}}},
      {"422", json::object{{"description", "Validation Error"},
                           {"content", json_content(schema_ref("HTTPValidationError"))}}}};
  return op;
}

// A request parameter's JSON schema: its type, bounds, choices and default, and which executor reads it.
json::object param_schema(const ParamSpec& p, const std::string& executor) {
  json::object out;
  switch (p.type) {
    case ParamType::Bool:
      out["type"] = "boolean";
      break;
    case ParamType::Int:
      out["type"] = "integer";
      break;
    case ParamType::Double:
      out["type"] = "number";
      break;
    case ParamType::String:
    case ParamType::Path:
      out["type"] = "string";
      break;
    case ParamType::StringList:
      out["type"] = "array";
      out["items"] = json::object{{"type", "string"}};
      break;
    case ParamType::IntOrAuto:
    case ParamType::Json:
      break;
  }
  if (p.minimum) out["minimum"] = *p.minimum;
  if (p.maximum) out["maximum"] = *p.maximum;
  if (!p.choices.empty()) out["enum"] = json::array(p.choices.begin(), p.choices.end());
  if (!p.default_value.is_null()) out["default"] = p.default_value;
  out["description"] = fmt::format("{} ({})", p.help, executor);
  return out;
}

// The `parameters` of a request to `endpoint`: what the flow's executors declare for it (flowline/params.hpp).
// Names no executor declares are allowed too (Jina sends one dict to every executor).
json::object parameters_schema(const FlowConfig* flow, const std::string& endpoint) {
  json::object out{{"type", "object"}, {"additionalProperties", true}};
  if (!flow) return out;
  json::object properties;
  for (const ExecutorConfig& e : flow->executors) {
    const Registry::Entry* entry = Registry::global().find_registered(e.uses);
    if (!entry) continue;
    for (const ParamSpec* p : request_params_of(entry->request_params, endpoint)) {
      if (!properties.contains(p->name)) properties[p->name] = param_schema(*p, e.name);
    }
  }
  if (!properties.empty()) out["properties"] = std::move(properties);
  return out;
}

json::object data_model(std::string title, json::object parameters = {{"type", "object"}}) {
  return json::object{
      {"properties",
       json::object{{"data", json::object{{"anyOf", json::array{json::object{{"items", schema_ref("TextDoc")},
                                                                             {"type", "array"}},
                                                                schema_ref("TextDoc")}},
                                          {"title", "Data"}}},
                    {"parameters", nullable(std::move(parameters))},
                    {"header", nullable(schema_ref("Header"))}}},
      {"type", "object"},
      {"required", json::array{"data"}},
      {"title", std::move(title)}};
}

// Hugging Face's token-classification request: {"inputs": str | [str], "parameters"?: {...}}.
json::object token_classification_schema() {
  const json::object string{{"type", "string"}};
  const json::object strings{{"items", string}, {"type", "array"}};
  json::object token_parameters{
      {"properties", json::object{{"aggregation_strategy",
                                   json::object{{"enum", json::array{"none", "simple", "first", "average", "max"}}}},
                                  {"ignore_labels", strings},
                                  {"stride", json::object{{"type", "integer"}, {"minimum", 0}}}}},
      {"type", "object"}};
  json::object token_request{
      {"properties", json::object{{"inputs", json::object{{"anyOf", json::array{string, strings}}}},
                                  {"parameters", std::move(token_parameters)}}},
      {"type", "object"},
      {"required", json::array{"inputs"}},
      {"title", "TokenClassificationRequest"}};
  return token_request;
}

// OpenAI's (and Infinity's, with "modality") and Cohere v2's embedding requests.
json::object embeddings_request_schema() {
  const json::object string{{"type", "string"}};
  return json::object{
      {"properties",
       json::object{
           {"input", json::object{{"anyOf", json::array{string, json::object{{"items", string}, {"type", "array"}}}}}},
           {"model", string},
           {"encoding_format", json::object{{"enum", json::array{"float", "base64"}}}},
           {"modality", json::object{{"enum", json::array{"text", "image"}}}}}},
      {"type", "object"},
      {"required", json::array{"input"}},
      {"title", "EmbeddingsRequest"}};
}

json::object cohere_embed_request_schema() {
  const json::object string{{"type", "string"}};
  const json::object strings{{"items", string}, {"type", "array"}};
  return json::object{
      {"properties",
       json::object{{"model", string},
                    {"texts", strings},
                    {"images", strings},
                    {"input_type", string},
                    {"embedding_types",
                     json::object{{"items", json::object{{"enum", json::array{"float"}}}}, {"type", "array"}}}}},
      {"type", "object"},
      {"title", "CohereEmbedRequest"}};
}

json::object schemas() {
  const json::object string{{"type", "string"}};
  const json::object number{{"type", "number"}};
  json::object text_doc{
      {"properties",
       json::object{
           {"id", nullable(string)},
           {"text", nullable(string)},
           {"bytes_", nullable(json::object{{"type", "string"}, {"format", "binary"}})},
           {"embedding", nullable(json::object{{"items", json::object{{"type", "number"}}}, {"type", "array"}})},
           {"url", nullable(string)},
           {"tags", nullable(json::object{{"type", "object"}})},
           // Set by executors (an index's matches and scores, a splitter's chunks):
           {"tensor", json::object{{"type", "object"}}},
           {"mime_type", string},
           {"scores",
            json::object{{"type", "object"},
                         {"additionalProperties",
                          json::object{{"type", "object"}, {"properties", json::object{{"value", number}}}}}}},
           {"chunks", json::object{{"items", schema_ref("TextDoc")}, {"type", "array"}}},
           {"matches", json::object{{"items", schema_ref("TextDoc")}, {"type", "array"}}},
           {"parent_id", string}}},
      {"type", "object"},
      {"title", "TextDoc"}};
  json::object header{
      {"properties", json::object{{"request_id", nullable(string)}, {"target_executor", nullable(string)}}},
      {"type", "object"},
      {"title", "Header"}};
  json::object validation_error{
      {"properties", json::object{{"loc", json::object{{"type", "array"}}}, {"msg", string}, {"type", string}}},
      {"type", "object"},
      {"required", json::array{"loc", "msg", "type"}},
      {"title", "ValidationError"}};
  json::object http_validation_error{
      {"properties",
       json::object{{"detail", json::object{{"items", schema_ref("ValidationError")}, {"type", "array"}}}}},
      {"type", "object"},
      {"title", "HTTPValidationError"}};
  json::object embed_request{
      {"properties",
       json::object{{"inputs", json::object{{"anyOf", json::array{string, json::object{{"items", string},
                                                                                       {"type", "array"}}}}}}}},
      {"type", "object"},
      {"required", json::array{"inputs"}},
      {"title", "EmbedRequest"}};
  json::object rerank_request{{"properties", json::object{{"query", string},
                                                          {"texts", json::object{{"items", string}, {"type", "array"}}},
                                                          {"raw_scores", json::object{{"type", "boolean"}}},
                                                          {"return_text", json::object{{"type", "boolean"}}}}},
                              {"type", "object"},
                              {"required", json::array{"query", "texts"}},
                              {"title", "RerankRequest"}};
  const json::object text_object{{"type", "object"}, {"properties", json::object{{"text", string}}}};
  json::object v1_rerank_request{
      {"properties",
       json::object{{"model", string},
                    {"query", json::object{{"anyOf", json::array{string, text_object}}}},
                    {"documents", json::object{{"items", json::object{{"anyOf", json::array{string, text_object}}}},
                                               {"type", "array"}}},
                    {"top_n", json::object{{"type", "integer"}, {"minimum", 1}}},
                    {"return_documents", json::object{{"type", "boolean"}}}}},
      {"type", "object"},
      {"required", json::array{"query", "documents"}},
      {"title", "V1RerankRequest"}};
  const json::object texts{{"anyOf", json::array{string, json::object{{"items", json::object{}}, {"type", "array"}}}}};
  const json::object flag{{"type", "boolean"}};
  json::object predict_request{
      {"properties", json::object{{"inputs", texts}, {"raw_scores", flag}, {"truncate", flag}}},
      {"type", "object"},
      {"required", json::array{"inputs"}},
      {"title", "PredictRequest"}};
  json::object classify_request{{"properties", json::object{{"input", texts}, {"raw_scores", flag}, {"model", string}}},
                                {"type", "object"},
                                {"required", json::array{"input"}},
                                {"title", "ClassifyRequest"}};
  json::object tokenize_request{{"properties", json::object{{"inputs", texts}, {"add_special_tokens", flag}}},
                                {"type", "object"},
                                {"required", json::array{"inputs"}},
                                {"title", "TokenizeRequest"}};
  return json::object{{"TextDoc", std::move(text_doc)},
                      {"Header", std::move(header)},
                      {"ValidationError", std::move(validation_error)},
                      {"HTTPValidationError", std::move(http_validation_error)},
                      {"EmbeddingsRequest", embeddings_request_schema()},
                      {"EmbedRequest", std::move(embed_request)},
                      {"RerankRequest", std::move(rerank_request)},
                      {"V1RerankRequest", std::move(v1_rerank_request)},
                      {"PredictRequest", std::move(predict_request)},
                      {"ClassifyRequest", std::move(classify_request)},
                      {"TokenizeRequest", std::move(tokenize_request)},
                      {"CohereEmbedRequest", cohere_embed_request_schema()}};
}

}  // namespace

std::string openapi_document(const std::string& title, const std::set<std::string>& endpoints, const FlowConfig* flow) {
  json::object paths;
  json::object components = schemas();
  components["TokenClassificationRequest"] = token_classification_schema();
  std::set<std::string> routes{"/default"};
  for (const auto& e : endpoints) routes.insert(e == "/" ? "/default" : e);
  for (const auto& route : routes) {
    const std::string name = route.substr(1);
    std::string model = name;
    for (char& c : model) {
      if (c == '/') c = '_';
    }
    components[model + "_input_model"] =
        data_model(model + "_input_model", parameters_schema(flow, route == "/default" ? "/" : route));
    components[model + "_output_model"] = data_model(model + "_output_model");
    paths[route] =
        json::object{{"post", operation(fmt::format("Endpoint {}", route), fmt::format("post_{}_post", model),
                                        schema_ref(model + "_input_model"), schema_ref(model + "_output_model"))}};
  }
  json::object post_model = data_model("PostRequest");
  post_model["properties"].as_object()["execEndpoint"] = json::object{{"type", "string"}};
  components["PostRequest"] = std::move(post_model);
  // The gateway's own routes, from its route table. A flow endpoint of a probe's path keeps its POST (an index's
  // /status beside the GET); where the gateway tells the two apart by the body (jina_bodies_to_flow: a flow's
  // /rerank takes Jina's {"data": ...}, TEI's its own), the operation's body is one of both; else the row's
  // operation is the one the gateway answers.
  for (const RouteRow& r : route_table()) {
    json::value& entry = paths[r.path];
    if (!entry.is_object()) entry = json::object{};
    const char* verb = r.method == Method::Get ? "get" : "post";
    if (json::value* flow_op = entry.as_object().if_contains(verb); flow_op && r.jina_bodies_to_flow) {
      json::value& body = flow_op->at("requestBody").at("content").at("application/json").at("schema");
      body = json::object{{"oneOf", json::array{body, schema_ref(r.request_schema)}}};
      flow_op->as_object()["summary"] = fmt::format("{}; or {}", flow_op->at("summary").as_string(), r.summary);
      continue;
    }
    json::value answer = r.path == "/post" ? json::value(schema_ref("default_output_model"))
                                           : json::value(json::object{{"type", r.answer_type}});
    json::value request = r.request_schema.empty() ? json::value(nullptr) : json::value(schema_ref(r.request_schema));
    entry.as_object()[verb] =
        operation(std::string(r.summary), std::string(r.operation_id), std::move(request), std::move(answer));
  }
  json::object document{{"openapi", "3.1.0"},
                        {"info", json::object{{"title", title}, {"version", FLOWLINE_VERSION_STRING}}},
                        {"paths", std::move(paths)},
                        {"components", json::object{{"schemas", std::move(components)}}}};
  return json::serialize(document);
}

std::string docs_page(const std::string& title) {
  return fmt::format(R"(<!DOCTYPE html>
<html>
<head>
<title>{0} - API</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({{url: '/openapi.json', dom_id: '#swagger-ui'}});</script>
<noscript>The API is described in <a href="/openapi.json">/openapi.json</a>.</noscript>
</body>
</html>
)",
                     title);
}

}  // namespace flowline::gateway
