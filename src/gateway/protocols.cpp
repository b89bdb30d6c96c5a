// Jina's, OpenAI's and TEI's request and response bodies (protocols.hpp).
#include "protocols.hpp"

#include "flowline/images.hpp"
#include "flowline/io.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flowline::gateway {

namespace json = boost::json;

HttpError plain_error(int status, std::string_view type, const std::string& message) {
  json::object error{{"message", message}, {"type", type}, {"code", status}};
  return HttpError(status, json::serialize(json::object{{"error", std::move(error)}}), message);
}

HttpError jina_validation_error(std::string_view type, const json::array& loc, const std::string& message,
                                const json::value& input) {
  json::object item{{"type", type}, {"loc", loc}, {"msg", message}, {"input", input}};
  return HttpError(422, json::serialize(json::object{{"detail", json::array{std::move(item)}}}), message);
}

// Where `v` holds a number beyond a double's range (parsed as an infinity, which JSON cannot write back: an
// answer echoing it would not be JSON), as Jina's loc path (appended to `loc`); false when nowhere. Depth is
// bounded by max_json_depth.
static bool find_infinity(const json::value& v, json::array& loc) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) {
    const json::array& items = v.get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      loc.emplace_back(i);
      if (find_infinity(items[i], loc)) return true;
      loc.pop_back();
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      loc.emplace_back(kv.key());
      if (find_infinity(kv.value(), loc)) return true;
      loc.pop_back();
    }
  }
  return false;
}

// "data[0].embedding[1]" for the loc ["body", "data", 0, "embedding", 1].
static std::string loc_text(const json::array& loc) {
  std::string out;
  for (std::size_t i = 1; i < loc.size(); ++i) {
    if (loc[i].is_string()) {
      if (!out.empty()) out += '.';
      out += loc[i].get_string();
    } else {
      out += fmt::format("[{}]", json::serialize(loc[i]));
    }
  }
  return out;
}

json::value parse_body(std::string_view body, const ParseLimits& limits, bool jina) {
  json::parse_options options;
  options.max_depth = limits.max_json_depth;
  json::stream_parser parser({}, options);
  boost::system::error_code ec;
  const std::size_t used = parser.write_some(body.data(), body.size(), ec);
  if (!ec) parser.finish(ec);
  if (!ec) {
    json::value v = parser.release();
    json::array loc{"body"};
    if (!find_infinity(v, loc)) return v;
    const std::string message =
        fmt::format("{}: a number beyond the range of a double (JSON has no infinity)", loc_text(loc));
    if (jina) throw jina_validation_error("json_invalid", loc, message);
    throw plain_error(400, "invalid_request_error", message);
  }
  const std::size_t at = std::min(used, body.size());
  std::string message;
  if (ec == json::error::too_deep) {
    message = fmt::format("JSON nested deeper than {} levels at byte {}", limits.max_json_depth, at);
    throw plain_error(400, "invalid_request_error", message);
  }
  if (body.empty()) {
    message = "the request body is empty: expected a JSON object";
  } else {
    message = fmt::format("invalid JSON at byte {}: {}", at, ec.message());
  }
  if (jina) throw jina_validation_error("json_invalid", json::array{"body", at}, message);
  throw plain_error(400, "invalid_request_error", message);
}

const json::value* field(const json::object& object, std::string_view name) {
  const auto it = object.find(name);
  return it == object.end() || it->value().is_null() ? nullptr : &it->value();
}

void check_count(std::size_t n, const ParseLimits& limits, std::string_view what) {
  if (n > limits.max_documents) {
    throw plain_error(
        413, "request_too_large",
        fmt::format("{} {} in one request; the limit is {} (--max-documents)", n, what, limits.max_documents));
  }
}

namespace {

std::string string_field(const json::object& o, std::string_view name, const json::array& loc_prefix) {
  const json::value* v = field(o, name);
  if (!v) return {};
  if (!v->is_string()) {
    json::array loc = loc_prefix;
    loc.emplace_back(name);
    throw jina_validation_error("string_type", loc, fmt::format("{}: expected a string", name), *v);
  }
  return std::string(v->get_string());
}

void append_jina_header(std::string& out, const Call& call) {
  out += "\"header\":{\"request_id\":";
  append_json_text(out, call.request_id);
  out += ",\"target_executor\":\"\"";
}

// A float embedding's values (cast from any floating dtype; moved to the CPU if needed).
at::Tensor float_row(const at::Tensor& embedding) {
  at::Tensor row = embedding;
  if (!row.device().is_cpu()) row = row.to(at::kCPU);
  if (row.scalar_type() != at::kFloat) row = row.to(at::kFloat);
  return row.contiguous().reshape({-1});
}

// The embedding of an answer with `dimensions` values (0: all of them): Matryoshka truncation, then L2
// normalisation of what is kept (in double), as sentence-transformers' truncate_dim with normalisation and
// TEI's `dimensions` give them. More than the model has is refused.
at::Tensor sized_row(const at::Tensor& embedding, std::size_t dimensions) {
  at::Tensor row = float_row(embedding);
  const auto size = static_cast<std::size_t>(row.numel());
  if (dimensions == 0 || dimensions == size) return row;
  if (dimensions > size) {
    throw plain_error(400, "invalid_request_error",
                      fmt::format("'dimensions' ({}) is larger than the model's embeddings ({})", dimensions, size));
  }
  const at::Tensor kept = row.narrow(0, 0, static_cast<std::int64_t>(dimensions)).to(at::kDouble);
  const double norm = kept.norm().item<double>();
  return (norm > 0 ? kept.div(norm) : kept).to(at::kFloat).contiguous();
}

// `dimensions` of an OpenAI or TEI body: a positive integer (5.0 reads as 5), 0 when absent.
std::size_t dimensions_of(const json::object& o) {
  const json::value* v = field(o, "dimensions");
  if (!v) return 0;
  std::int64_t n = 0;
  if (v->is_int64()) {
    n = v->get_int64();
  } else if (v->is_uint64()) {
    n = v->get_uint64() > (1u << 30) ? -1 : static_cast<std::int64_t>(v->get_uint64());
  } else if (v->is_double() && std::isfinite(v->get_double()) && v->get_double() == std::floor(v->get_double()) &&
             std::abs(v->get_double()) < 1e9) {
    n = static_cast<std::int64_t>(v->get_double());
  } else {
    n = -1;
  }
  if (n < 1 || n > (1 << 30)) {
    throw plain_error(400, "invalid_request_error",
                      fmt::format("'dimensions': expected a positive integer, got {}", json::serialize(*v)));
  }
  return static_cast<std::size_t>(n);
}

// What an answer of `docs`' embeddings takes at most: `per_doc` bytes of names and punctuation each, and
// each value as JSON text (at most 16 bytes with its comma) or as base64 (4 bytes of text for 3 of float),
// so that the answer is written without growing (and copying) its buffer on the way.
std::size_t answer_size(const std::vector<const Document*>& docs, std::size_t per_doc, bool base64) {
  std::size_t n = 64;
  for (const Document* doc : docs) {
    const std::size_t values = doc->embedding.defined() ? static_cast<std::size_t>(doc->embedding.numel()) : 0;
    n += per_doc + (base64 ? (values * 4 + 2) / 3 * 4 : values * 16);
  }
  return n;
}

}  // namespace

void append_float_embedding(std::string& out, const at::Tensor& embedding) {
  const at::Tensor row = float_row(embedding);
  append_json_floats(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
}

// Texts from OpenAI's "input" or TEI's "inputs": a string or a list of strings.
DocumentArray text_documents(const json::value* v, std::string_view name, const ParseLimits& limits) {
  DocumentArray docs;
  if (!v)
    throw plain_error(400, "invalid_request_error",
                      fmt::format("'{}' is missing: expected a string or a list of strings", name));
  if (v->is_string()) {
    docs.push_back(Document(std::string(v->get_string())));
    return docs;
  }
  if (!v->is_array()) {
    throw plain_error(400, "invalid_request_error", fmt::format("'{}': expected a string or a list of strings", name));
  }
  const json::array& items = v->get_array();
  check_count(items.size(), limits, "inputs");
  if (items.empty()) throw plain_error(400, "invalid_request_error", fmt::format("'{}' is an empty list", name));
  docs.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      throw plain_error(400, "invalid_request_error",
                        fmt::format("'{}[{}]': expected a string{}", name, i,
                                    items[i].is_number() || items[i].is_array()
                                        ? " (token ids are not accepted: send text, flowline tokenizes it)"
                                        : ""));
    }
    docs.push_back(Document(std::string(items[i].get_string())));
  }
  return docs;
}

namespace {

// Texts to embed: an empty one has nothing to embed (the encoder passes a document without text through
// without an embedding), so it is refused by name rather than answered with the embedding of "".
DocumentArray texts_to_embed(const json::value* v, std::string_view name, const ParseLimits& limits) {
  DocumentArray docs = text_documents(v, name, limits);
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (!docs[i].text.empty()) continue;
    throw plain_error(400, "invalid_request_error",
                      v->is_string() ? fmt::format("'{}' is an empty string: there is no text to embed", name)
                                     : fmt::format("'{}[{}]' is an empty string: there is no text to embed", name, i));
  }
  return docs;
}

}  // namespace

std::vector<std::string> ids_of(const DocumentArray& docs) {
  std::vector<std::string> ids;
  ids.reserve(docs.size());
  for (const auto& doc : docs) ids.push_back(doc.id);
  return ids;
}

// The flow's answer in input order, matched by id; HttpError 500 naming the inputs without a document.
std::vector<const Document*> by_input(const std::vector<std::string>& ids, const DocumentArray& docs) {
  std::vector<const Document*> out(ids.size(), nullptr);
  bool in_order = docs.size() == ids.size();
  for (std::size_t i = 0; in_order && i < ids.size(); ++i) {
    in_order = docs[i].id == ids[i];
    out[i] = &docs[i];
  }
  if (in_order) return out;
  std::unordered_map<std::string_view, const Document*> answered;
  for (const auto& doc : docs) answered.emplace(doc.id, &doc);
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto it = answered.find(ids[i]);
    out[i] = it == answered.end() ? nullptr : it->second;
    if (!out[i]) missing.push_back(i);
  }
  if (missing.empty()) return out;
  const std::size_t shown = std::min<std::size_t>(missing.size(), 20);
  throw plain_error(500, "server_error",
                    fmt::format("the flow answered {} of {} inputs: no document came back for input{} {}{} (an "
                                "executor dropped or replaced them); this route answers each input at its index, "
                                "so it cannot answer",
                                ids.size() - missing.size(), ids.size(), missing.size() == 1 ? "" : "s",
                                fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                                missing.size() > shown ? fmt::format(" and {} more", missing.size() - shown) : ""));
}

const json::object& body_object(const json::value& body) {
  if (!body.is_object()) throw plain_error(400, "invalid_request_error", "the request body must be a JSON object");
  return body.get_object();
}

Call parse_jina(const json::value& body, std::string endpoint, const ParseLimits& limits) {
  if (!body.is_object()) {
    throw jina_validation_error("model_attributes_type", json::array{"body"}, "the request body must be a JSON object",
                                body);
  }
  const json::object& o = body.get_object();
  Call call;
  const bool named_in_body = endpoint.empty();  // /post
  if (named_in_body) {
    endpoint = string_field(o, "execEndpoint", json::array{"body"});
    if (endpoint.empty()) endpoint = string_field(o, "exec_endpoint", json::array{"body"});
    if (endpoint.empty()) endpoint = "/";
    if (endpoint.front() != '/') endpoint.insert(endpoint.begin(), '/');
  }
  call.endpoint = std::move(endpoint);
  const json::value* data = field(o, "data");
  if (!data) {
    throw jina_validation_error("missing", json::array{"body", "data"},
                                "'data' is missing: expected a list of documents", body);
  }
  if (data->is_array()) {
    const json::array& items = data->get_array();
    check_count(items.size(), limits, "documents");
    call.docs.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) call.docs.push_back(jina_document(items[i], i));
  } else if (data->is_object()) {
    call.docs.push_back(jina_document(*data, 0));
  } else {
    throw jina_validation_error("list_type", json::array{"body", "data"},
                                "'data': expected a list of documents or one document", *data);
  }
  if (const json::value* parameters = field(o, "parameters")) {
    if (!parameters->is_object()) {
      throw jina_validation_error("dict_type", json::array{"body", "parameters"}, "'parameters': expected an object",
                                  *parameters);
    }
    call.parameters = parameters->get_object();
  }
  call.target = string_field(o, "targetExecutor", json::array{"body"});
  if (call.target.empty()) call.target = string_field(o, "target_executor", json::array{"body"});
  if (const json::value* header = field(o, "header")) {
    if (!header->is_object()) {
      throw jina_validation_error("model_attributes_type", json::array{"body", "header"},
                                  "'header': expected an object", *header);
    }
    const json::array loc{"body", "header"};
    call.request_id = string_field(header->get_object(), "request_id", loc);
    // Jina's client names the endpoint in the header too (and never as execEndpoint).
    if (named_in_body && call.endpoint == "/") {
      std::string named = string_field(header->get_object(), "exec_endpoint", loc);
      if (!named.empty() && named.front() != '/') named.insert(named.begin(), '/');
      if (!named.empty()) call.endpoint = std::move(named);
    }
    const std::string target = string_field(header->get_object(), "target_executor", loc);
    if (!target.empty()) call.target = target;
  }
  if (call.request_id.empty()) call.request_id = generate_id();
  return call;
}

std::string jina_response(const Call& call, const DocumentArray& docs) {
  std::string out;
  std::size_t expected = 256;  // room for the answer at once: no regrowth (and copy) of a large string
  for (const Document& doc : docs) expected += jina_size_hint(doc);
  out.reserve(expected);
  out += "{\"data\":[";
  bool first = true;
  for (const Document& doc : docs) {
    if (!first) out += ',';
    first = false;
    append_jina_document(out, doc);
  }
  out += "],\"parameters\":";
  out += json::serialize(call.parameters);
  out += ',';
  append_jina_header(out, call);
  out += "}}";
  return out;
}

std::string jina_failure(const Call& call, const Response& response) {
  json::object exception{{"name", "ExecutorError"},
                         {"args", json::array{response.error}},
                         {"stacks", json::array{}},
                         {"executor", response.error_executor}};
  json::object status{{"code", 1}, {"description", response.error}, {"exception", std::move(exception)}};
  json::object header{{"request_id", call.request_id}, {"target_executor", ""}, {"status", std::move(status)}};
  return json::serialize(
      json::object{{"detail", fmt::format("executor '{}' failed: {}", response.error_executor, response.error)},
                   {"header", std::move(header)}});
}

EmbeddingsCall parse_openai(const json::value& body, std::string endpoint, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  EmbeddingsCall out;
  out.call.endpoint = std::move(endpoint);
  out.call.docs = texts_to_embed(field(o, "input"), "input", limits);
  // Infinity's "modality": "image": each input is an image's address (a data: URI of its bytes; what else the
  // flow's image executor may read, it decides: a served ClipEncoder reads no local path outside its
  // allowed_uri_roots and no http(s) unless allow_http), embedded through the vision tower.
  if (const json::value* modality = field(o, "modality")) {
    const json::string* name = modality->if_string();
    if (!name || (*name != "text" && *name != "image")) {
      throw plain_error(400, "invalid_request_error", "'modality': expected \"text\" or \"image\"");
    }
    if (*name == "image") {
      for (auto& doc : out.call.docs) doc.uri = std::exchange(doc.text, std::string());
    }
  }
  if (const json::value* model = field(o, "model")) {
    if (!model->is_string()) throw plain_error(400, "invalid_request_error", "'model': expected a string");
    out.model = std::string(model->get_string());
  }
  if (const json::value* format = field(o, "encoding_format")) {
    const json::string* name = format->if_string();
    if (!name || (*name != "float" && *name != "base64")) {
      throw plain_error(400, "invalid_request_error", "'encoding_format': expected \"float\" or \"base64\"");
    }
    out.base64 = *name == "base64";
  }
  out.dimensions = dimensions_of(o);
  out.call.parameters[kCountTokens] = true;
  out.input_ids = ids_of(out.call.docs);
  return out;
}

std::string openai_response(const EmbeddingsCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out;
  out.reserve(answer_size(docs, 64, call.base64));
  out += "{\"object\":\"list\",\"data\":[";
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Document& doc = *docs[i];
    if (!doc.embedding.defined()) {
      throw plain_error(
          500, "server_error",
          fmt::format("document {} came out of the flow without an embedding: does the flow end with an encoder?", i));
    }
    if (const auto it = doc.tags.find("tokens"); it != doc.tags.end() && it->value().is_number()) {
      tokens += it->value().to_number<std::int64_t>();
    }
    if (i) out += ',';
    out += "{\"object\":\"embedding\",\"index\":";
    out += std::to_string(i);
    out += ",\"embedding\":";
    const at::Tensor row = sized_row(doc.embedding, call.dimensions);
    if (call.base64) {
      // Little-endian float32, as OpenAI's clients decode it (x86-64 and ARM64 are little-endian).
      append_json_base64(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()) * sizeof(float));
    } else {
      append_json_floats(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
    }
    out += '}';
  }
  out += "],\"model\":";
  append_json_text(out, call.model);
  out += fmt::format(",\"usage\":{{\"prompt_tokens\":{0},\"total_tokens\":{0}}}}}", tokens);
  return out;
}

EmbeddingsCall parse_cohere_embed(const json::value& body, std::string endpoint, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  EmbeddingsCall out;
  out.call.endpoint = std::move(endpoint);
  if (field(o, "inputs")) {
    throw plain_error(400, "invalid_request_error",
                      "'inputs' (mixed text and image content) is not supported: send 'texts' or 'images'");
  }
  const json::value* texts = field(o, "texts");
  const json::value* images = field(o, "images");
  if ((texts != nullptr) == (images != nullptr)) {
    throw plain_error(400, "invalid_request_error", "give one of 'texts' and 'images'");
  }
  if (const json::value* types = field(o, "embedding_types")) {
    const json::array* list = types->if_array();
    const bool floats = list && !list->empty() && std::all_of(list->begin(), list->end(), [](const json::value& t) {
                          return t.is_string() && t.get_string() == "float";
                        });
    if (!floats) throw plain_error(400, "invalid_request_error", "'embedding_types': only [\"float\"] is served");
  }
  if (const json::value* model = field(o, "model")) {
    if (!model->is_string()) throw plain_error(400, "invalid_request_error", "'model': expected a string");
    out.model = std::string(model->get_string());
  }
  out.call.docs = texts_to_embed(texts ? texts : images, texts ? "texts" : "images", limits);
  if (images) {
    // Cohere's API takes data URIs only (and the answer describes each image from its bytes).
    for (std::size_t i = 0; i < out.call.docs.size(); ++i) {
      auto& doc = out.call.docs[i];
      doc.uri = std::exchange(doc.text, std::string());
      if (doc.uri.compare(0, 5, "data:") != 0) {
        throw plain_error(400, "invalid_request_error",
                          fmt::format("'images'[{}]: expected a data URI (data:image/...;base64,...)", i));
      }
    }
    out.cohere_images = true;
  }
  out.call.parameters[kCountTokens] = true;
  out.input_ids = ids_of(out.call.docs);
  return out;
}

namespace {

// Cohere's `images`: each embedded image's width, height, format and bit depth, from its header (the request's
// data URI, decoded again: the flow's documents keep the uri, not the bytes).
void append_cohere_images(std::string& out, const std::vector<const Document*>& docs) {
  out += ",\"images\":[";
  for (std::size_t i = 0; i < docs.size(); ++i) {
    images::ImageInfo info;
    try {
      info = images::image_info(images::image_bytes(*docs[i], images::ImageSourcePolicy{}));
    } catch (const std::exception& e) {
      throw plain_error(500, "server_error", fmt::format("image {} cannot be described: {}", i, e.what()));
    }
    out += fmt::format("{}{{\"width\":{},\"height\":{},\"format\":\"{}\",\"bit_depth\":{}}}", i ? "," : "", info.width,
                       info.height, images::format_name(info.format), info.bit_depth);
  }
  out += ']';
}

}  // namespace

std::string cohere_embed_response(const EmbeddingsCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out;
  out.reserve(answer_size(docs, 64, false));
  out += "{\"id\":";
  append_json_text(out, generate_id());
  out += ",\"response_type\":\"embeddings_by_type\",\"embeddings\":{\"float\":[";
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const Document& doc = *docs[i];
    if (!doc.embedding.defined()) {
      throw plain_error(500, "server_error",
                        fmt::format("input {} came out of the flow without an embedding: does the flow end with an "
                                    "encoder?",
                                    i));
    }
    if (const auto it = doc.tags.find("tokens"); it != doc.tags.end() && it->value().is_number()) {
      tokens += it->value().to_number<std::int64_t>();
    }
    if (i) out += ',';
    const at::Tensor row = sized_row(doc.embedding, 0);
    append_json_floats(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
  }
  out += "]}";
  if (call.cohere_images) append_cohere_images(out, docs);
  if (!call.cohere_images) {
    out += ",\"texts\":[";
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (i) out += ',';
      append_json_text(out, docs[i]->text);
    }
    out += ']';
  }
  out += fmt::format(",\"meta\":{{\"api_version\":{{\"version\":\"2\"}},\"billed_units\":{{\"{}\":{}}}}}}}",
                     call.cohere_images ? "images" : "input_tokens",
                     call.cohere_images ? static_cast<std::int64_t>(docs.size()) : tokens);
  return out;
}

EmbeddingsCall parse_tei(const json::value& body, std::string endpoint, const ParseLimits& limits) {
  const json::object& o = body_object(body);
  EmbeddingsCall out;
  Call& call = out.call;
  call.endpoint = std::move(endpoint);
  call.docs = texts_to_embed(field(o, "inputs"), "inputs", limits);
  out.input_ids = ids_of(call.docs);
  out.dimensions = dimensions_of(o);
  if (const json::value* prompt = field(o, "prompt_name")) {
    if (!prompt->is_string()) throw plain_error(400, "invalid_request_error", "'prompt_name': expected a string");
    call.parameters["prompt_name"] = prompt->get_string();
  }
  for (const char* setting : {"normalize", "truncate", "truncation_direction"}) {
    if (field(o, setting)) {
      throw plain_error(400, "invalid_request_error",
                        fmt::format("'{}' is not supported per request: the flow's encoder settles it (its parameters "
                                    "in the flow YAML)",
                                    setting));
    }
  }
  return out;
}

std::string tei_response(const EmbeddingsCall& call, const DocumentArray& flow_docs) {
  const std::vector<const Document*> docs = by_input(call.input_ids, flow_docs);
  std::string out;
  out.reserve(answer_size(docs, 4, false));
  out += '[';
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (!docs[i]->embedding.defined()) {
      throw plain_error(
          500, "server_error",
          fmt::format("document {} came out of the flow without an embedding: does the flow end with an encoder?", i));
    }
    if (i) out += ',';
    const at::Tensor row = sized_row(docs[i]->embedding, call.dimensions);
    append_json_floats(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
  }
  out += ']';
  return out;
}

}  // namespace flowline::gateway
