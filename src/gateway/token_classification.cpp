// Hugging Face's Inference API token classification (token_classification.hpp): POST /token-classification posts the
// texts to the flow endpoint /token-classification, where a TokenClassifier adds one chunk per entity, and answers each
// text's entities from its chunks in the pipeline's shape.
#include "token_classification.hpp"

#include "flowline/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>

namespace flowline::gateway {

namespace json = boost::json;

namespace {

// The Inference API's TokenClassificationParameters: each goes to the TokenClassifier as its request parameter
// of the same name, checked there against its declaration (a bad value is 422 naming the parameter).
constexpr std::array<std::string_view, 3> kParameters{"aggregation_strategy", "ignore_labels", "stride"};

// A tag of a chunk as an integer (the executor writes start, end and index as integers).
std::int64_t int_tag(const Document& chunk, std::string_view name) {
  const json::value* v = chunk.tags.if_contains(name);
  if (!v || !v->is_int64()) {
    throw plain_error(
        500, "server_error",
        fmt::format("the flow answered an entity of document '{}' without an integer '{}'", chunk.parent_id, name));
  }
  return v->get_int64();
}

// One entity in the pipeline's key order: {"entity_group", "score", "word", "start", "end"}, or for strategy
// none {"entity", "score", "index", "word", "start", "end"}.
void append_entity(std::string& out, const Document& chunk, const json::value& label, bool token) {
  out += token ? "{\"entity\":" : "{\"entity_group\":";
  append_json_text(out, std::string_view(label.get_string()));
  out += ",\"score\":";
  const json::value* score = chunk.tags.if_contains("score");
  const double s = score && score->is_number() ? score->to_number<double>() : NAN;
  // The pipeline's scores are float32: their shortest form (null when not finite, which JSON cannot hold).
  if (std::isfinite(s)) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<float>(s));
  } else {
    out += "null";
  }
  if (token) fmt::format_to(std::back_inserter(out), ",\"index\":{}", int_tag(chunk, "index"));
  out += ",\"word\":";
  append_json_text(out, chunk.text);
  fmt::format_to(std::back_inserter(out), ",\"start\":{},\"end\":{}}}", int_tag(chunk, "start"), int_tag(chunk, "end"));
}

// A document's entities: its chunks that carry a label (entity_group, or entity for strategy none), in the
// order the classifier wrote them (the text's). Other chunks (an earlier executor's) are not entities.
void append_entities(std::string& out, const Document& doc) {
  out += '[';
  bool first = true;
  for (const Document& chunk : doc.chunks) {
    const json::value* group = chunk.tags.if_contains("entity_group");
    const json::value* token = chunk.tags.if_contains("entity");
    const json::value* label = group && group->is_string() ? group : token;
    if (!label || !label->is_string()) continue;
    if (!first) out += ',';
    first = false;
    append_entity(out, chunk, *label, label == token);
  }
  out += ']';
}

}  // namespace

TokenClassificationCall parse_token_classification(const json::value& body, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  const json::value* inputs = field(o, "inputs");
  TokenClassificationCall out;
  out.call.endpoint = kTokenClassificationEndpoint;
  out.call.docs = text_documents(inputs, "inputs", limits);
  out.single = inputs->is_string();
  out.input_ids = ids_of(out.call.docs);
  const json::value* parameters = field(o, "parameters");
  if (!parameters) return out;
  if (!parameters->is_object()) {
    throw plain_error(400, "invalid_request_error",
                      "'parameters': expected an object {\"aggregation_strategy\", \"ignore_labels\", \"stride\"}");
  }
  for (const auto& [key, value] : parameters->get_object()) {
    if (std::find(kParameters.begin(), kParameters.end(), std::string_view(key)) == kParameters.end()) {
      throw plain_error(400, "invalid_request_error",
                        fmt::format("'parameters.{}' is not a token-classification parameter: expected "
                                    "aggregation_strategy, ignore_labels or stride",
                                    std::string_view(key)));
    }
    if (!value.is_null()) out.call.parameters[key] = value;  // null: the tagger's own setting, as when absent
  }
  return out;
}

std::string token_classification_response(const TokenClassificationCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out;
  if (call.single) {
    append_entities(out, *docs[0]);
    return out;
  }
  out += '[';
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i) out += ',';
    append_entities(out, *docs[i]);
  }
  out += ']';
  return out;
}

}  // namespace flowline::gateway
