// The request and response bodies of the gateway's APIs as plain functions from text to documents and back:
// what every API shares (errors, limits, the parsed Call) and Jina's; the embeddings routes are in
// embeddings.hpp, the rerank and classification routes in rerank.hpp, token classification in
// token_classification.hpp. No sockets here: the server (gateway.cpp) calls
// them on its I/O threads, and tests call them directly. Private to flowline::gateway.
#pragma once

#include "flowline/document.hpp"
#include "flowline/document_fields.hpp"
#include "flowline/flow.hpp"

#include <ATen/core/Tensor.h>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

// Pieces the OpenAI-shaped routes share (errors are plain_error 400, 413 beyond max_documents):
const boost::json::object& body_object(const boost::json::value& body);  // the body, which must be an object
// The member `name` of `object`, or null when absent or JSON null.
const boost::json::value* field(const boost::json::object& object, std::string_view name);
void check_count(std::size_t n, const ParseLimits& limits, std::string_view what);
// Documents from a string or a non-empty list of strings (OpenAI's "input", TEI's "inputs" and "texts").
DocumentArray text_documents(const boost::json::value* v, std::string_view name, const ParseLimits& limits);

// The documents' ids, in order; and the flow's answer in that order, matched by id (HttpError 500 naming
// the inputs without a document): how the routes that answer by position find each input's document.
std::vector<std::string> ids_of(const DocumentArray& docs);
std::vector<const Document*> by_input(const std::vector<std::string>& ids, const DocumentArray& docs);

// The names a Jina client gives a document's blob and uri: docarray >= 0.30's "bytes_" and "url" (Jina's
// DocList clients, and flowline's default), or docarray < 0.30's "blob" and "uri" (the old DocumentArray, as
// CLIP-as-service's clip-client sends it). An answer uses the names its request used: docarray < 0.30 ignores
// "url" and "bytes_", so a ranked match would come back to such a client without its uri.
enum class JinaNames { docarray_v2, docarray_v1 };

// What a client asked the flow to do, whatever the API.
struct Call {
  std::string endpoint;  // the flow endpoint ("/encode")
  DocumentArray docs;
  boost::json::object parameters;
  std::string target;      // Jina's target_executor: only that executor runs the request
  std::string request_id;  // Jina's header.request_id, echoed (generated when the client sent none)
  // Jina's: the names its answer gives blob and uri, those of the request (parse_jina sets it).
  JinaNames names = JinaNames::docarray_v2;
  // Set when nobody waits for the answer any more: by the core at the call's deadline, by a front when its
  // client went away. The flow then drops the request or stops its handler (Flow::submit()). Made by the
  // core when a front leaves it null.
  std::shared_ptr<Cancellation::Flag> cancel;
};

// Jina: POST /<endpoint> (endpoint given) or POST /post (endpoint from "execEndpoint"/"exec_endpoint").
// Throws HttpError (422 in Jina's shape, 413 beyond max_documents).
Call parse_jina(const boost::json::value& body, std::string endpoint, const ParseLimits& limits);
// Jina's answer: {"data": [docs], "parameters", "header": {"request_id", "target_executor": ""}}.
std::string jina_response(const Call& call, const DocumentArray& docs);
// One document of Jina's request (`data[index]`, named so in messages) and of its answer (appended to `out`
// as one JSON object), every field of the Document table: Jina's "bytes_" and "url" for blob and uri, an
// embedding as a list of numbers, scores as {"name": {"value": number}}, matches and chunks as documents
// (jina_document.cpp). Fields Jina's documents lack are ignored. Throws HttpError 422 as parse_jina does.
Document jina_document(const boost::json::value& value, std::size_t index);
void append_jina_document(std::string& out, const Document& doc, JinaNames names = JinaNames::docarray_v2);
// docarray_v1 when Jina's request documents name blob or uri as docarray < 0.30 does ("blob", "uri": its
// to_dict writes every field, null or not) and never as docarray >= 0.30 does ("bytes_", "url").
JinaNames jina_names_of(const boost::json::value& data);
// About as many bytes as append_jina_document writes for `doc` (a little more where numbers are short), to
// reserve an answer's string once.
std::size_t jina_size_hint(const Document& doc);
// Jina's names of the Document table's fields ("bytes_" for blob, "url" for uri; the others as flowline
// names them), shared by its JSON codec and its gRPC one (docarray's DocProto): the name of a field, the
// field of a name (flowline's own names accepted too; nothing for a name Jina's documents lack), and the
// fields Jina's TextDoc always carries (null, or an empty node, when unset).
std::string_view jina_name(DocumentField field) noexcept;
std::optional<DocumentField> jina_field_named(std::string_view name) noexcept;
bool jina_always_written(DocumentField field) noexcept;
// A float embedding's values as a JSON list (cast from any floating dtype, copied from a GPU if needed), and as
// a contiguous CPU float row.
void append_float_embedding(std::string& out, const at::Tensor& embedding);
at::Tensor float_row(const at::Tensor& embedding);
// A request the flow failed, in Jina's shape (500): the header carries status code 1 and the exception.
std::string jina_failure(const Call& call, const Response& response);

// The request parameter that asks the SentenceEncoder (and the Reranker) to count each document's tokens
// (tags["tokens"]).
inline constexpr const char* kCountTokens = "count_tokens";

}  // namespace flowline::gateway
