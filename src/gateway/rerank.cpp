// The cross-encoder routes' bodies. Rerank: TEI's POST /rerank and Jina's/Cohere's POST /v1/rerank post one
// query document, its candidates as matches, to the flow's /rerank endpoint and answer from the sorted
// matches. Classification: TEI's POST /predict and Infinity's POST /classify post the texts to the flow's
// /classify endpoint and answer from each document's tags["labels"].
#include "rerank.hpp"

#include "flowline/io.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iterator>

namespace flowline::gateway {

namespace json = boost::json;

namespace {

bool bool_field(const json::object& o, std::string_view name, bool fallback) {
  const json::value* v = field(o, name);
  if (!v) return fallback;
  if (!v->is_bool()) throw plain_error(400, "invalid_request_error", fmt::format("'{}': expected true or false", name));
  return v->get_bool();
}

// A text given as a string or as {"text": string} (Jina's and Cohere's document objects).
std::string text_of(const json::value& v, const std::string& where) {
  if (v.is_string()) return std::string(v.get_string());
  if (const json::object* o = v.if_object()) {
    if (const json::value* text = field(*o, "text"); text && text->is_string()) return std::string(text->get_string());
  }
  throw plain_error(400, "invalid_request_error",
                    fmt::format("'{}': expected a string or {{\"text\": string}}", where));
}

// The query document with the candidates as its matches.
RerankCall rerank_call(std::string query, DocumentArray candidates) {
  RerankCall out;
  out.candidates = candidates.size();
  out.call.endpoint = kRerankEndpoint;
  Document doc(std::move(query));
  doc.matches = std::move(candidates);
  out.call.docs.push_back(std::move(doc));
  return out;
}

// The query's matches, checked: each scored by the flow's Reranker and carrying its index in the request.
struct Ranked {
  std::size_t index;
  float score;
  const Document* match;
};

std::vector<Ranked> ranked(const DocumentArray& docs, std::size_t candidates) {
  auto missing = [] {
    return plain_error(500, "server_error",
                       fmt::format("the flow answered without relevance scores: does it run a Reranker on its {} "
                                   "endpoint?",
                                   kRerankEndpoint));
  };
  if (docs.size() != 1) throw missing();
  std::vector<Ranked> out;
  for (const Document& match : docs[0].matches) {
    const auto score = match.scores.find("relevance_score");
    const auto* index = match.tags.if_contains("index");
    if (score == match.scores.end() || !index || !index->is_int64()) throw missing();
    const auto i = index->get_int64();
    if (i < 0 || static_cast<std::size_t>(i) >= candidates) throw missing();
    out.push_back({static_cast<std::size_t>(i), score->second, &match});
  }
  return out;
}

// A score as a JSON number in its shortest exact form (null if not finite, which JSON cannot hold).
void append_score(std::string& out, float score) {
  if (std::isfinite(score)) {
    fmt::format_to(std::back_inserter(out), "{}", score);
  } else {
    out += "null";
  }
}

}  // namespace

RerankCall parse_tei_rerank(const json::value& body, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  const json::value* query = field(o, "query");
  if (!query || !query->is_string()) throw plain_error(400, "invalid_request_error", "'query': expected a string");
  RerankCall out = rerank_call(std::string(query->get_string()), text_documents(field(o, "texts"), "texts", limits));
  out.return_text = bool_field(o, "return_text", false);
  if (bool_field(o, "raw_scores", false)) out.call.parameters["raw_scores"] = true;
  // The reranker always truncates each pair, from the end of its longer text, to its max_seq_length: what
  // TEI does with truncate: true and truncation_direction Right.
  if (!bool_field(o, "truncate", true)) {
    throw plain_error(400, "invalid_request_error",
                      "'truncate': false is not supported: the flow's reranker truncates every pair to its "
                      "max_seq_length (a parameter in the flow YAML)");
  }
  if (const json::value* direction = field(o, "truncation_direction")) {
    const json::string* name = direction->if_string();
    if (!name || (*name != "Right" && *name != "right")) {
      throw plain_error(400, "invalid_request_error",
                        "'truncation_direction': only \"Right\" is supported (pairs lose the end of their longer "
                        "text)");
    }
  }
  return out;
}

std::string tei_rerank_response(const RerankCall& call, const DocumentArray& docs) {
  const auto results = ranked(docs, call.candidates);
  std::string out = "[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("{{\"index\":{},\"score\":", results[i].index);
    append_score(out, results[i].score);
    if (call.return_text) {
      out += ",\"text\":";
      append_json_text(out, results[i].match->text);
    }
    out += '}';
  }
  out += ']';
  return out;
}

RerankCall parse_v1_rerank(const json::value& body, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  const json::value* model = field(o, "model");
  if (model && !model->is_string()) throw plain_error(400, "invalid_request_error", "'model': expected a string");
  const json::value* query = field(o, "query");
  if (!query) throw plain_error(400, "invalid_request_error", "'query' is missing: expected a string");
  const json::value* documents = field(o, "documents");
  if (!documents || !documents->is_array() || documents->get_array().empty()) {
    throw plain_error(400, "invalid_request_error",
                      "'documents': expected a non-empty list of strings or {\"text\": string} objects");
  }
  const json::array& items = documents->get_array();
  check_count(items.size(), limits, "documents");
  DocumentArray candidates;
  candidates.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    candidates.push_back(Document(text_of(items[i], fmt::format("documents[{}]", i))));
  }
  RerankCall out = rerank_call(text_of(*query, "query"), std::move(candidates));
  if (model) out.model = std::string(model->get_string());
  if (const json::value* top_n = field(o, "top_n")) {
    if (!top_n->is_int64() || top_n->get_int64() < 1) {
      throw plain_error(400, "invalid_request_error", "'top_n': expected an integer >= 1");
    }
    out.call.parameters["top_n"] = top_n->get_int64();
  }
  out.return_text = bool_field(o, "return_documents", true);
  out.call.parameters[kCountTokens] = true;
  out.request_id = generate_id();
  return out;
}

std::string v1_rerank_response(const RerankCall& call, const DocumentArray& docs) {
  const auto results = ranked(docs, call.candidates);
  std::string out = "{\"id\":";
  append_json_text(out, call.request_id);
  out += ",\"model\":";
  append_json_text(out, call.model);
  out += ",\"results\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i) out += ',';
    out += fmt::format("{{\"index\":{},\"relevance_score\":", results[i].index);
    append_score(out, results[i].score);
    if (call.return_text) {
      out += ",\"document\":{\"text\":";
      append_json_text(out, results[i].match->text);
      out += '}';
    }
    out += '}';
  }
  std::int64_t tokens = 0;
  if (const auto* t = docs[0].tags.if_contains("tokens"); t && t->is_number()) tokens = t->to_number<std::int64_t>();
  out += fmt::format("],\"usage\":{{\"total_tokens\":{0},\"prompt_tokens\":{0}}}}}", tokens);
  return out;
}

namespace {

// One input of TEI's /predict: a string (or [a]), or a pair [a, b] (the second text as tags["text_pair"]).
Document predict_input(const json::value& v, const std::string& where) {
  if (v.is_string()) return Document(std::string(v.get_string()));
  const json::array* pair = v.if_array();
  if (pair && pair->size() == 1 && (*pair)[0].is_string()) return Document(std::string((*pair)[0].get_string()));
  if (pair && pair->size() == 2 && (*pair)[0].is_string() && (*pair)[1].is_string()) {
    Document doc(std::string((*pair)[0].get_string()));
    doc.tags["text_pair"] = (*pair)[1].get_string();
    return doc;
  }
  throw plain_error(400, "invalid_request_error", fmt::format("'{}': expected a string, [a] or a pair [a, b]", where));
}

ClassifyCall classify_call(DocumentArray docs) {
  ClassifyCall out;
  out.call.endpoint = kClassifyEndpoint;
  out.call.docs = std::move(docs);
  out.input_ids = ids_of(out.call.docs);
  out.call.parameters["top_k"] = 0;  // every label, best first
  return out;
}

// A document's labels as [{"score", "label"}], best first as the classifier wrote them.
void append_labels(std::string& out, const Document& doc) {
  const auto* labels = doc.tags.if_contains("labels");
  if (!labels || !labels->is_array()) {
    throw plain_error(500, "server_error",
                      fmt::format("the flow answered document '{}' without labels: does it run a SequenceClassifier "
                                  "on its {} endpoint?",
                                  doc.id, kClassifyEndpoint));
  }
  out += '[';
  bool first = true;
  for (const json::value& entry : labels->get_array()) {
    const json::object* o = entry.if_object();
    const json::value* label = o ? o->if_contains("label") : nullptr;
    const json::value* score = o ? o->if_contains("score") : nullptr;
    if (!label || !label->is_string() || !score || !score->is_number()) continue;
    if (!first) out += ',';
    first = false;
    out += "{\"score\":";
    append_score(out, static_cast<float>(score->to_number<double>()));
    out += ",\"label\":";
    append_json_text(out, std::string(label->get_string()));
    out += '}';
  }
  out += ']';
}

}  // namespace

ClassifyCall parse_tei_predict(const json::value& body, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  const json::value* inputs = field(o, "inputs");
  if (!inputs) throw plain_error(400, "invalid_request_error", "'inputs' is missing: expected a string or a list");
  DocumentArray docs;
  const json::array* items = inputs->if_array();
  // As TEI reads it: a string, or a list of exactly two strings, is one input (a pair); any other list is a
  // batch of strings and pairs.
  const bool single = !items || (items->size() == 2 && (*items)[0].is_string() && (*items)[1].is_string());
  if (single) {
    docs.push_back(predict_input(*inputs, "inputs"));
  } else {
    check_count(items->size(), limits, "inputs");
    if (items->empty()) throw plain_error(400, "invalid_request_error", "'inputs' is an empty list");
    docs.reserve(items->size());
    for (std::size_t i = 0; i < items->size(); ++i) {
      docs.push_back(predict_input((*items)[i], fmt::format("inputs[{}]", i)));
    }
  }
  ClassifyCall out = classify_call(std::move(docs));
  out.single = single;
  if (bool_field(o, "raw_scores", false)) out.call.parameters["raw_scores"] = true;
  if (!bool_field(o, "truncate", true)) {
    throw plain_error(400, "invalid_request_error",
                      "'truncate': false is not supported: the flow's classifier truncates every input to its "
                      "max_seq_length (a parameter in the flow YAML)");
  }
  return out;
}

std::string tei_predict_response(const ClassifyCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out;
  if (call.single) {
    append_labels(out, *docs[0]);
    return out;
  }
  out += '[';
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i) out += ',';
    append_labels(out, *docs[i]);
  }
  out += ']';
  return out;
}

ClassifyCall parse_infinity_classify(const json::value& body, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  const json::value* model = field(o, "model");
  if (model && !model->is_string()) throw plain_error(400, "invalid_request_error", "'model': expected a string");
  ClassifyCall out = classify_call(text_documents(field(o, "input"), "input", limits));
  if (model) out.model = std::string(model->get_string());
  if (bool_field(o, "raw_scores", false)) out.call.parameters["raw_scores"] = true;
  out.call.parameters[kCountTokens] = true;
  return out;
}

std::string infinity_classify_response(const ClassifyCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out = "{\"object\":\"list\",\"data\":[";
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i) out += ',';
    append_labels(out, *docs[i]);
    if (const auto* t = docs[i]->tags.if_contains("tokens"); t && t->is_number())
      tokens += t->to_number<std::int64_t>();
  }
  out += "],\"model\":";
  append_json_text(out, call.model);
  out += fmt::format(",\"usage\":{{\"prompt_tokens\":{0},\"total_tokens\":{0}}}}}", tokens);
  return out;
}

}  // namespace flowline::gateway
