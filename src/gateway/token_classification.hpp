// Hugging Face's token classification route's bodies (token_classification.cpp), as plain functions from text to
// documents and back; private to flowline::gateway, called on the fronts' threads and by tests.
#pragma once

#include "protocols.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace flowline::gateway {

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

}  // namespace flowline::gateway
