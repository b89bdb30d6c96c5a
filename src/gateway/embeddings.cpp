// The embeddings routes' bodies (embeddings.hpp): OpenAI's /v1/embeddings, Cohere's /v2/embed and TEI's /embed.
#include "embeddings.hpp"

#include "flowline/images.hpp"
#include "flowline/io.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace flowline::gateway {

namespace json = boost::json;

namespace {

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
