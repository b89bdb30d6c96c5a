// The request and response bodies of the gateway's APIs — Jina's, OpenAI's embeddings, TEI's embed, the
// rerank routes (TEI's, Jina's/Cohere's), classification (TEI's, Infinity's) and Hugging Face's token
// classification —
// as plain functions from text to documents and back. No sockets here: the server (gateway.cpp) calls
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

// What a client asked the flow to do, whatever the API.
struct Call {
  std::string endpoint;  // the flow endpoint ("/encode")
  DocumentArray docs;
  boost::json::object parameters;
  std::string target;      // Jina's target_executor: only that executor runs the request
  std::string request_id;  // Jina's header.request_id, echoed (generated when the client sent none)
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
void append_jina_document(std::string& out, const Document& doc);
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
// A float embedding's values as a JSON list (cast from any floating dtype, copied from a GPU if needed).
void append_float_embedding(std::string& out, const at::Tensor& embedding);
// A request the flow failed, in Jina's shape (500): the header carries status code 1 and the exception.
std::string jina_failure(const Call& call, const Response& response);

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

// Reranking: one query and its candidate texts become one document whose matches are the candidates,
// posted to the flow endpoint kRerankEndpoint, where a Reranker scores and sorts them (each match gets
// scores["relevance_score"] and tags["index"], its place in the request). rerank.cpp.
inline constexpr const char* kRerankEndpoint = "/rerank";
struct RerankCall {
  Call call;               // moved into the flow; what the answer needs is kept beside it
  std::string model;       // Jina/Cohere: echoed
  std::string request_id;  // Jina/Cohere: the answer's "id"
  std::size_t candidates = 0;
  bool return_text = false;  // TEI's return_text; Jina's return_documents (default true)
};
// TEI: POST /rerank {"query": str, "texts": [str], "raw_scores"?, "return_text"?, "truncate"?,
// "truncation_direction"?} -> [{"index", "score", "text"?}], best first. Pairs are always truncated from the
// right: truncate false or direction Left is 400.
RerankCall parse_tei_rerank(const boost::json::value& body, const ParseLimits& limits);
std::string tei_rerank_response(const RerankCall& call, const DocumentArray& docs);
// Jina's and Cohere's: POST /v1/rerank (and Cohere's /v2/rerank) {"model", "query": str | {"text"},
// "documents": [str | {"text"}], "top_n"?, "return_documents"? (default true)} -> {"id", "model",
// "results": [{"index", "relevance_score", "document"?: {"text"}}], "usage": {"total_tokens"}}, best first.
RerankCall parse_v1_rerank(const boost::json::value& body, const ParseLimits& limits);
std::string v1_rerank_response(const RerankCall& call, const DocumentArray& docs);

// Classification: the texts (a pair's second text as tags["text_pair"]) posted to the flow endpoint
// kClassifyEndpoint, where a SequenceClassifier writes tags["labels"] = [{"label", "score"}], best first
// (all labels: the routes ask top_k 0). rerank.cpp.
inline constexpr const char* kClassifyEndpoint = "/classify";
struct ClassifyCall {
  Call call;
  std::vector<std::string> input_ids;  // the inputs' document ids, in request order
  bool single = false;                 // TEI: one input (a string or one pair), answered as one list
  std::string model;                   // Infinity: echoed
};
// TEI: POST /predict {"inputs": str | [a, b] (one pair) | [str | [a] | [a, b], ...], "raw_scores"?, "truncate"?}
// -> [{"score", "label"}] for one input, one such list per input for a batch. As TEI reads it, a list of
// exactly two strings is one pair; truncate false is 400 (the classifier always truncates).
ClassifyCall parse_tei_predict(const boost::json::value& body, const ParseLimits& limits);
std::string tei_predict_response(const ClassifyCall& call, const DocumentArray& docs);
// Infinity: POST /classify {"input": str | [str], "raw_scores"?, "model"?} -> {"object": "list", "data":
// [[{"score", "label"}], ...], "model", "usage": {"prompt_tokens", "total_tokens"}}.
ClassifyCall parse_infinity_classify(const boost::json::value& body, const ParseLimits& limits);
std::string infinity_classify_response(const ClassifyCall& call, const DocumentArray& docs);

// Token classification: the texts posted to the flow endpoint kTokenClassificationEndpoint, where a
// TokenClassifier adds one chunk per entity (text: the entity's word; tags: entity_group, or entity and index
// for strategy none, score, start, end in code points of the text). token_classification.cpp.
inline constexpr const char* kTokenClassificationEndpoint = "/token-classification";
struct TokenClassificationCall {
  Call call;
  std::vector<std::string> input_ids;  // the inputs' document ids, in request order
  bool single = false;                 // "inputs" was one string: answered as one list
};
// Hugging Face's Inference API: POST /token-classification {"inputs": str | [str], "parameters"?:
// {"aggregation_strategy", "ignore_labels", "stride"}} -> for one string [{"entity_group", "score", "word",
// "start", "end"}] (strategy none: "entity" and "index" in place of "entity_group"), for a list one such list
// per string, in input order. The parameters become the call's request parameters unchecked (the executor
// checks them: 422 naming one); another name in "parameters" is 400. Other fields of the body are ignored.
TokenClassificationCall parse_token_classification(const boost::json::value& body, const ParseLimits& limits);
std::string token_classification_response(const TokenClassificationCall& call, const DocumentArray& docs);

// The request parameter that asks the SentenceEncoder (and the Reranker) to count each document's tokens
// (tags["tokens"]).
inline constexpr const char* kCountTokens = "count_tokens";

}  // namespace flowline::gateway
