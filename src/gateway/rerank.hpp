// The cross-encoder routes' bodies (rerank.cpp): rerank (TEI's, Jina's/Cohere's) and classification (TEI's,
// Infinity's), as plain functions from text to documents and back; private to flowline::gateway, called on the
// fronts' threads and by tests.
#pragma once

#include "protocols.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace flowline::gateway {

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

}  // namespace flowline::gateway
