// The embeddings routes' bodies (embeddings.cpp): OpenAI's, Cohere's and TEI's, as plain functions from text to
// documents and back; private to flowline::gateway, called on the fronts' threads and by tests.
#pragma once

#include "protocols.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace flowline::gateway {

// OpenAI: POST /v1/embeddings {"input": str | [str], "model", "encoding_format": "float" | "base64",
// "dimensions", "user"}. Token arrays as input are refused (400): flowline tokenizes itself.
// Both embeddings routes answer by position: each input's embedding at its index. The flow's documents are
// matched to the inputs by id (input_ids, kept when `call` moves into the flow), so a flow that drops or
// reorders documents cannot shift an embedding to another input's index: an input without its document
// is HttpError 500 naming the inputs.
struct EmbeddingsCall {
  Call call;
  std::vector<std::string> input_ids;  // the inputs' document ids, in request order
  std::string model;
  bool base64 = false;
  std::size_t dimensions = 0;  // `dimensions`: the first N values, normalised again (0: the model's all)
  bool cohere_images = false;  // Cohere's /v2/embed with "images"
};
EmbeddingsCall parse_openai(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}. Every
// document must carry a float embedding (else HttpError 500 naming the document). prompt_tokens sums the
// documents' "tokens" tags, which the SentenceEncoder sets when the request has parameter count_tokens
// (parse_openai sets it).
std::string openai_response(const EmbeddingsCall& call, const DocumentArray& docs);
// Cohere v2's POST /v2/embed: {"model"?, "texts": [str] | "images": [data URI], "input_type"?, "embedding_types"?:
// ["float"]} (one of texts and images; mixed "inputs" and other embedding types are refused with 400). Images go
// to the flow as documents whose uri is the data URI (an image executor decodes them: the ClipEncoder).
EmbeddingsCall parse_cohere_embed(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
// {"id", "response_type": "embeddings_by_type", "embeddings": {"float": [[...], ...]}, "texts": [...] (for texts),
// "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens" | "images"}}}. Every document must carry
// a float embedding (else HttpError 500).
std::string cohere_embed_response(const EmbeddingsCall& call, const DocumentArray& docs);

// TEI: POST /embed {"inputs": str | [str], "prompt_name"?} -> [[floats], ...]. prompt_name goes to the
// encoder as a request parameter; TEI's other per-request settings (normalize, truncate, ...) are refused
// with 400: the flow's encoder parameters settle them.
EmbeddingsCall parse_tei(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
std::string tei_response(const EmbeddingsCall& call, const DocumentArray& docs);

}  // namespace flowline::gateway
