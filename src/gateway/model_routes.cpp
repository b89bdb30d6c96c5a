// The gateway's routes in the shape of model APIs — OpenAI's /v1/embeddings, TEI's /embed, /rerank and /predict,
// Jina's and Cohere's /v1/rerank, Infinity's /classify, Hugging Face's /token-classification: each parses its
// body into a flow call (protocols.hpp, embeddings.hpp, rerank.hpp, token_classification.hpp), posts it
// through call_flow() and shapes the answer. Their failures answer 500 in the gateway's own error shape.
// Also what those APIs answer about the served models: OpenAI's GET /v1/models and TEI's GET /info.
#include "embeddings.hpp"
#include "http_front.hpp"
#include "rerank.hpp"
#include "token_classification.hpp"

#include "flowline/flow_config.hpp"
#include "flowline/io.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/registry.hpp"
#include "flowline/version.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <memory>

namespace flowline::gateway {

namespace {

std::string executor_failure(const Response& r) {
  if (r.request_error) {
    return plain_error(422, "invalid_request_error", fmt::format("executor '{}': {}", r.error_executor, r.error)).body;
  }
  return plain_error(500, "server_error", fmt::format("executor '{}' failed: {}", r.error_executor, r.error)).body;
}

}  // namespace

void Connection::handle_openai(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  auto call =
      std::make_shared<EmbeddingsCall>(parse_openai(body, gw_.core.options.embeddings_endpoint, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return openai_response(*call, docs); },
      executor_failure);
}

void Connection::handle_cohere_embed(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  auto call =
      std::make_shared<EmbeddingsCall>(parse_cohere_embed(body, gw_.core.options.embeddings_endpoint, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return cohere_embed_response(*call, docs); },
      executor_failure);
}

void Connection::handle_tei(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<EmbeddingsCall>(parse_tei(body, gw_.core.options.embeddings_endpoint, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return tei_response(*call, docs); },
      executor_failure);
}

// TEI's /rerank, unless the body is Jina's ({"data": ...}): that goes to a flow endpoint /rerank.
void Connection::handle_tei_rerank(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  if (body.is_object() && body.get_object().contains("data")) {
    if (!gw_.core.endpoints.count("/rerank")) {
      route_ = Route::Other;
      return reply(404, R"({"detail":"Not Found"})");
    }
    route_ = Route::Jina;
    return handle_jina("/rerank");
  }
  auto call = std::make_shared<RerankCall>(parse_tei_rerank(body, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return tei_rerank_response(*call, docs); },
      executor_failure);
}

void Connection::handle_rerank(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<RerankCall>(parse_v1_rerank(body, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return v1_rerank_response(*call, docs); },
      executor_failure);
}

void Connection::handle_tei_predict(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  auto call = std::make_shared<ClassifyCall>(parse_tei_predict(body, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route, [call](const DocumentArray& docs) { return tei_predict_response(*call, docs); },
      executor_failure);
}

// Infinity's /classify, unless the body is Jina's ({"data": ...}): that goes to the flow endpoint /classify.
void Connection::handle_classify(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  if (body.is_object() && body.get_object().contains("data")) {
    if (!gw_.core.endpoints.count(kClassifyEndpoint)) {
      route_ = Route::Other;
      return reply(404, R"({"detail":"Not Found"})");
    }
    route_ = Route::Jina;
    return handle_jina(kClassifyEndpoint);
  }
  auto call = std::make_shared<ClassifyCall>(parse_infinity_classify(body, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route,
      [call](const DocumentArray& docs) { return infinity_classify_response(*call, docs); }, executor_failure);
}

// Hugging Face's POST /token-classification, unless the body is Jina's ({"data": ...}): that goes to the flow
// endpoint /token-classification. Served by the flow endpoint of that name (a TokenClassifier's); a flow
// without one answers 422 saying so, since another executor's default handler would answer without entities.
void Connection::handle_token_classification(const RouteRow& row) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  const bool served = gw_.core.endpoints.count(kTokenClassificationEndpoint) > 0;
  if (body.is_object() && body.get_object().contains("data")) {
    if (!served) {
      route_ = Route::Other;
      return reply(404, R"({"detail":"Not Found"})");
    }
    route_ = Route::Jina;
    return handle_jina(kTokenClassificationEndpoint);
  }
  if (!served) {
    std::string executors;
    for (const auto& e : gw_.core.flow.config().executors) {
      executors += fmt::format("{}{} ({})", executors.empty() ? "" : ", ", e.name, e.uses);
    }
    throw plain_error(422, "invalid_request_error",
                      fmt::format("POST /token-classification needs a flow with a TokenClassifier (the flow endpoint "
                                  "{}); this flow's executors are {}",
                                  kTokenClassificationEndpoint, executors));
  }
  auto call = std::make_shared<TokenClassificationCall>(parse_token_classification(body, gw_.core.limits));
  Call flow_call = std::move(call->call);
  call_flow(
      std::move(flow_call), row.route,
      [call](const DocumentArray& docs) { return token_classification_response(*call, docs); }, executor_failure);
}

namespace {

// A served model's name: the folder (or hub name) its executor's `model` parameter gives; empty when the
// executor has none.
std::string model_id(const ExecutorConfig& e) {
  const auto* model = e.with.if_contains("model");
  if (!model || !model->is_string()) return {};
  std::string id = std::filesystem::path(std::string(model->get_string())).filename().string();
  return id.empty() ? std::string(model->get_string()) : id;
}

// A parameter of `e` as the flow gives it, else its type's default (null when neither has it).
json::value param_of(const ExecutorConfig& e, std::string_view name) {
  if (const auto* given = e.with.if_contains(name)) return *given;
  if (const auto* entry = Registry::global().find(e.uses)) {
    for (const ParamSpec& p : entry->spec.params) {
      if (p.name == name) return p.default_value;
    }
  }
  return nullptr;
}

// A JSON file of the model's folder (config.json, ...), or an empty object when it cannot be read.
json::object model_file(const ExecutorConfig& e, const char* file) {
  try {
    const json::value model = param_of(e, "model");
    if (!model.is_string()) return {};
    json::value v = json::parse(read_file(std::filesystem::path(std::string(model.get_string())) / file));
    return v.is_object() ? std::move(v.get_object()) : json::object{};
  } catch (const std::exception&) {
    return {};
  }
}

std::size_t positive(const json::value& v) { return v.is_int64() && v.get_int64() > 0 ? v.get_int64() : 0; }

// TEI's model_type: {"reranker": {id2label, label2id}} for a Reranker and {"classifier": {...}} for a
// SequenceClassifier (from its config.json), else {"embedding": {"pooling"}} as its sentence-transformers
// Pooling module says (TEI's names). TEI has no token classification (it declined NER, its issue #282), so no
// name of its fits a TokenClassifier: {"token_classifier": {...}} is flowline's own, in TEI's form, rather
// than "classifier", which would promise TEI's /predict.
json::object tei_model_type(const ExecutorConfig& e) {
  if (e.uses == "Reranker" || e.uses == "SequenceClassifier" || e.uses == "TokenClassifier") {
    const json::object config = model_file(e, "config.json");
    const json::value* id2label = config.if_contains("id2label");
    const json::value* label2id = config.if_contains("label2id");
    const char* type = e.uses == "Reranker"          ? "reranker"
                       : e.uses == "TokenClassifier" ? "token_classifier"
                                                     : "classifier";
    return {{type, json::object{{"id2label", id2label ? *id2label : json::object{{"0", "LABEL_0"}}},
                                {"label2id", label2id ? *label2id : json::object{{"LABEL_0", 0}}}}}};
  }
  const json::object pooling = model_file(e, "1_Pooling/config.json");
  const auto mode = [&](const char* key) { return pooling.contains(key) && pooling.at(key) == true; };
  const char* name = mode("pooling_mode_cls_token")    ? "cls"
                     : mode("pooling_mode_lasttoken")  ? "last_token"
                     : mode("pooling_mode_max_tokens") ? "max"
                                                       : "mean";
  return {{"embedding", json::object{{"pooling", name}}}};
}

std::string tei_dtype(const json::value& dtype) {
  const std::string_view d = dtype.is_string() ? std::string_view(dtype.get_string()) : "fp32";
  if (d == "fp16" || d == "float16") return "float16";
  if (d == "bf16" || d == "bfloat16") return "bfloat16";
  return "float32";
}

}  // namespace

// TEI's GET /info, in TEI's shape: the model of the flow's first executor with a `model` parameter (the
// encoder behind /embed, or a reranker), else its last executor by name; the gateway's bounds as TEI's
// router parameters.
void Connection::handle_tei_info(const RouteRow&) {
  const auto& executors = gw_.core.flow.config().executors;
  auto e =
      std::find_if(executors.begin(), executors.end(), [](const ExecutorConfig& x) { return !model_id(x).empty(); });
  if (e == executors.end()) e = std::prev(executors.end());  // a flow has at least one executor
  const std::string id = e->with.contains("model") ? model_id(*e) : e->name;
  std::size_t max_input = positive(param_of(*e, "max_seq_length"));
  if (!max_input) max_input = positive(model_file(*e, "sentence_bert_config.json")["max_seq_length"]);
  if (!max_input) {
    // The checkpoint's, as the executors take it: its positions, capped by tokenizer_config.json's
    // model_max_length where that is a number (transformers writes 1e30 for none).
    max_input = positive(model_file(*e, "config.json")["max_position_embeddings"]);
    const std::size_t tokenizer_max = positive(model_file(*e, "tokenizer_config.json")["model_max_length"]);
    if (tokenizer_max && (!max_input || tokenizer_max < max_input)) max_input = tokenizer_max;
  }
  std::size_t batch_tokens = positive(param_of(*e, "max_batch_tokens"));
  if (!batch_tokens) batch_tokens = positive(param_of(*e, "batch_size")) * max_input;
  json::value batch_requests = nullptr;
  if (e->batching.max_batch_size > 0) batch_requests = e->batching.max_batch_size;
  reply(200, json::serialize(json::object{{"model_id", id},
                                          {"model_sha", nullptr},
                                          {"model_dtype", tei_dtype(param_of(*e, "dtype"))},
                                          {"model_type", tei_model_type(*e)},
                                          {"max_concurrent_requests", gw_.core.max_in_flight},
                                          {"max_input_length", max_input},
                                          {"max_batch_tokens", batch_tokens},
                                          {"max_batch_requests", batch_requests},
                                          {"max_client_batch_size", gw_.core.options.max_documents},
                                          {"auto_truncate", true},
                                          {"tokenization_workers", e->replicas},
                                          {"version", version()},
                                          {"sha", nullptr},
                                          {"docker_label", nullptr}}));
}

namespace {

// TEI's /tokenize answer for `text`: [{"id", "text", "special", "start", "stop"}], start and stop the UTF-8
// byte positions of the token in the text (null for a special token, as TEI gives them). A special token's
// text is its token, as TEI gives it ("[CLS]": the tokenizer's id_to_token). The encoding and its byte offsets go
// into this connection thread's own buffers, reused request after request (nothing of them outlives the call; they
// keep the capacity of the longest text so far, which the body limits bound).
void append_tokens(std::string& out, const models::Tokenizer& tokenizer, std::string_view text, std::size_t max_length,
                   bool add_special) {
  thread_local models::Encoding e;
  thread_local std::vector<models::TokenOffsets> bytes;
  tokenizer.encode_with_offsets_into(text, max_length, e);
  models::byte_offsets_into(text, e.offsets, bytes);
  out += '[';
  bool first = true;
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    const bool special = e.special[i] != 0;
    if (special && !add_special) continue;
    if (!first) out += ',';
    first = false;
    fmt::format_to(std::back_inserter(out), "{{\"id\":{},\"text\":", e.ids[i]);
    if (special) {
      append_json_text(out, tokenizer.id_to_token(e.ids[i]));
      out += ",\"special\":true,\"start\":null,\"stop\":null}";
      continue;
    }
    const std::size_t start = std::min<std::size_t>(bytes[i].start, text.size());
    const std::size_t stop = std::clamp<std::size_t>(bytes[i].end, start, text.size());
    append_json_text(out, text.substr(start, stop - start));
    fmt::format_to(std::back_inserter(out), ",\"special\":false,\"start\":{},\"stop\":{}}}", start, stop);
  }
  out += ']';
}

}  // namespace

// TEI's POST /tokenize {"inputs": str | [str], "add_special_tokens"? (default true)} -> one token list per
// input, by the tokenizer of the flow's first executor with a `model` folder (the flow's own configuration,
// never a path from the client), loaded once.
void Connection::handle_tei_tokenize(const RouteRow&) {
  const json::value body = parse_body(request_.body(), gw_.core.limits, false);
  const json::object& o = body_object(body);
  DocumentArray texts = text_documents(field(o, "inputs"), "inputs", gw_.core.limits);
  bool add_special = true;
  if (const json::value* v = field(o, "add_special_tokens")) {
    if (!v->is_bool()) throw plain_error(400, "invalid_request_error", "'add_special_tokens': expected true or false");
    add_special = v->get_bool();
  }
  if (field(o, "prompt_name")) {
    throw plain_error(400, "invalid_request_error",
                      "'prompt_name' is not supported on /tokenize: the tokens are the text's as given");
  }
  std::call_once(gw_.tokenizer_once, [this] {
    const auto& executors = gw_.core.flow.config().executors;
    const auto e = std::find_if(executors.begin(), executors.end(),
                                [](const ExecutorConfig& x) { return param_of(x, "model").is_string(); });
    if (e == executors.end()) {
      gw_.tokenizer_error = "the flow has no executor with a `model` folder, so no tokenizer";
      return;
    }
    try {
      gw_.tokenizer = models::Tokenizer::from_folder(std::string(param_of(*e, "model").get_string()));
      gw_.tokenizer_max_length = positive(param_of(*e, "max_seq_length"));
    } catch (const std::exception& error) {
      gw_.tokenizer_error = fmt::format("executor '{}': no tokenizer: {}", e->name, error.what());
    }
  });
  if (!gw_.tokenizer) throw plain_error(422, "invalid_request_error", gw_.tokenizer_error);
  std::string out = "[";
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (i) out += ',';
    append_tokens(out, *gw_.tokenizer, texts[i].text, gw_.tokenizer_max_length, add_special);
  }
  out += ']';
  documents_ = texts.size();
  reply(200, std::move(out));
}

// OpenAI's model list, as its SDK's models.list() reads it: one entry per executor of the flow with a
// `model` parameter, named by the model folder (or hub name) it was given.
void Connection::handle_models(const RouteRow&) {
  json::array data;
  for (const auto& e : gw_.core.flow.config().executors) {
    std::string id = model_id(e);
    if (id.empty()) continue;
    data.push_back(json::object{{"id", std::move(id)},
                                {"object", "model"},
                                {"created", gw_.core.started_unix},
                                {"owned_by", "flowline"},
                                {"executor", e.name}});
  }
  reply(200, json::serialize(json::object{{"object", "list"}, {"data", std::move(data)}}));
}

}  // namespace flowline::gateway
