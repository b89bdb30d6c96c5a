// The request and response bodies of the gateway's APIs — Jina's, OpenAI's embeddings and TEI's embed —
// as plain functions from text to documents and back. No sockets here: the server (gateway.cpp) calls
// them on its I/O threads, and tests call them directly. Private to flowline::gateway.
#pragma once

#include "flowline/document.hpp"
#include "flowline/flow.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flowline::gateway {

// A request the gateway refuses: the HTTP status and the JSON body that says why.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string body, const std::string& what)
      : std::runtime_error(what), status(status), body(std::move(body)) {}
  int status;
  std::string body;
};

// The JSON body of an error in the gateway's own shape: {"error": {"message", "type", "code"}} (OpenAI's,
// which TEI's and flowline's routes share).
HttpError plain_error(int status, std::string_view type, const std::string& message);
// Jina's (FastAPI's) validation error: 422 {"detail": [{"type", "loc": ["body", ...], "msg", "input"}]}.
HttpError jina_validation_error(std::string_view type, const boost::json::array& loc, const std::string& message,
                                const boost::json::value& input = nullptr);

struct ParseLimits {
  std::size_t max_documents = 4096;
  std::size_t max_json_depth = 64;
};

// Parses a JSON body within the limits. Errors name the byte offset: 400 (`jina`: 422 as Jina answers).
boost::json::value parse_body(std::string_view body, const ParseLimits& limits, bool jina);

// What a client asked the flow to do, whatever the API.
struct Call {
  std::string endpoint;  // the flow endpoint ("/encode")
  DocumentArray docs;
  boost::json::object parameters;
  std::string target;      // Jina's target_executor: only that executor runs the request
  std::string request_id;  // Jina's header.request_id, echoed (generated when the client sent none)
};

// Jina: POST /<endpoint> (endpoint given) or POST /post (endpoint from "execEndpoint"/"exec_endpoint").
// Throws HttpError (422 in Jina's shape, 413 beyond max_documents).
Call parse_jina(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
// Jina's answer: {"data": [docs], "parameters", "header": {"request_id", "target_executor": ""}}.
std::string jina_response(const Call& call, const DocumentArray& docs);
// One document of Jina's request (`data[index]`, named so in messages) and of its answer (appended to `out`
// as one JSON object). Throws HttpError 422 as parse_jina does.
Document jina_document(const boost::json::value& value, std::size_t index);
void append_jina_document(std::string& out, const Document& doc);
// A request the flow failed, in Jina's shape (500): the header carries status code 1 and the exception.
std::string jina_failure(const Call& call, const Response& response);

// OpenAI: POST /v1/embeddings {"input": str | [str], "model", "encoding_format": "float" | "base64",
// "dimensions", "user"}. Token arrays as input are refused (400): flowline tokenizes itself.
struct EmbeddingsCall {
  Call call;
  std::string model;
  bool base64 = false;
};
EmbeddingsCall parse_openai(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}. Every
// document must carry a float embedding (else HttpError 500 naming the document). prompt_tokens sums the
// documents' "tokens" tags, which the SentenceEncoder sets when the request has parameter count_tokens
// (parse_openai sets it).
std::string openai_response(const EmbeddingsCall& call, const DocumentArray& docs);

// TEI: POST /embed {"inputs": str | [str], "prompt_name"?} -> [[floats], ...]. prompt_name goes to the
// encoder as a request parameter; TEI's other per-request settings (normalize, truncate, ...) are refused
// with 400: the flow's encoder parameters settle them.
Call parse_tei(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
std::string tei_response(const DocumentArray& docs);

// The request parameter that asks the SentenceEncoder to count each document's tokens (tags["tokens"]).
inline constexpr const char* kCountTokens = "count_tokens";

}  // namespace flowline::gateway
