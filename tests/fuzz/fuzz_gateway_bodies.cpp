// Fuzz target: the HTTP gateway's request bodies — Jina's /post and /<endpoint>, OpenAI's /v1/embeddings,
// TEI's /embed, one line of an NDJSON stream, TEI's /rerank and Jina's/Cohere's /v1/rerank — as the server
// parses them after Beast has read the HTTP message. The first byte picks the API, the rest is the body. Properties: a
// bad body is an HttpError with a 4xx status and a JSON body; a good one yields at most max_documents documents and an
// answer that is valid JSON with one entry per document.
#include "embeddings.hpp"
#include "protocols.hpp"
#include "rerank.hpp"

#include "fuzz_support.hpp"

#include <ATen/ATen.h>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gw = flowline::gateway;

namespace {

constexpr gw::ParseLimits kLimits{.max_documents = 64, .max_json_depth = 32};

// Answers echo the request (documents, Jina's validation errors echo the input), a few levels deeper than
// the body itself: read them back without Boost.JSON's default depth limit of 32.
boost::json::value parse_answer(std::string_view text, boost::system::error_code& ec) {
  boost::json::parse_options options;
  options.max_depth = 1000;
  return boost::json::parse(text, ec, {}, options);
}

void check_answer(const std::string& answer, std::size_t docs) {
  boost::system::error_code ec;
  const boost::json::value v = parse_answer(answer, ec);
  if (ec) flowline::fuzz::broken(fmt::format("an answer that is not JSON: {}", answer));
  const boost::json::array* entries = nullptr;
  if (v.is_array())
    entries = &v.get_array();  // TEI
  else if (const auto* data = v.as_object().if_contains("data"))
    entries = &data->as_array();
  if (entries == nullptr || entries->size() != docs) flowline::fuzz::broken("an answer without one entry per document");
}

void with_embeddings(flowline::DocumentArray& docs) {
  for (auto& doc : docs) doc.embedding = at::ones({3});
}

// What a Reranker leaves: every candidate scored and numbered, in reverse order.
void check_rerank(gw::RerankCall& call, bool tei) {
  if (call.call.docs.size() != 1 || call.call.docs[0].matches.size() != call.candidates) {
    flowline::fuzz::broken("a rerank call that is not one query with its candidates");
  }
  if (call.candidates > kLimits.max_documents) flowline::fuzz::broken("more candidates than max_documents");
  flowline::DocumentArray docs = std::move(call.call.docs);
  auto& matches = docs[0].matches;
  for (std::size_t i = 0; i < matches.size(); ++i) {
    matches[i].scores["relevance_score"] = static_cast<float>(i) / 3.0f;
    matches[i].tags["index"] = static_cast<std::int64_t>(i);
  }
  std::reverse(matches.docs().begin(), matches.docs().end());
  const std::string answer = tei ? gw::tei_rerank_response(call, docs) : gw::v1_rerank_response(call, docs);
  boost::system::error_code ec;
  const boost::json::value v = parse_answer(answer, ec);
  if (ec) flowline::fuzz::broken(fmt::format("a rerank answer that is not JSON: {}", answer));
  const auto& results = tei ? v.as_array() : v.at("results").as_array();
  if (results.size() != call.candidates) flowline::fuzz::broken("a rerank answer without one entry per candidate");
}

void parse(unsigned api, std::string_view body) {
  switch (api) {
    case 0: {  // Jina: POST /post, the endpoint in the body
      gw::Call call = gw::parse_jina(gw::parse_body(body, kLimits, true), "", kLimits);
      if (call.docs.size() > kLimits.max_documents) flowline::fuzz::broken("more documents than max_documents");
      check_answer(gw::jina_response(call, call.docs), call.docs.size());
      break;
    }
    case 1: {  // OpenAI
      gw::EmbeddingsCall call = gw::parse_openai(gw::parse_body(body, kLimits, false), "/encode", kLimits);
      if (call.call.docs.size() > kLimits.max_documents) flowline::fuzz::broken("more documents than max_documents");
      with_embeddings(call.call.docs);
      check_answer(gw::openai_response(call, call.call.docs), call.call.docs.size());
      break;
    }
    case 2: {  // TEI
      gw::EmbeddingsCall call = gw::parse_tei(gw::parse_body(body, kLimits, false), "/encode", kLimits);
      with_embeddings(call.call.docs);
      check_answer(gw::tei_response(call, call.call.docs), call.call.docs.size());
      break;
    }
    case 4: {  // TEI's /rerank
      gw::RerankCall call = gw::parse_tei_rerank(gw::parse_body(body, kLimits, false), kLimits);
      check_rerank(call, true);
      break;
    }
    case 5: {  // Jina's and Cohere's /v1/rerank
      gw::RerankCall call = gw::parse_v1_rerank(gw::parse_body(body, kLimits, false), kLimits);
      check_rerank(call, false);
      break;
    }
    default: {  // 3: one line of an NDJSON stream, a Jina document or a string
      const boost::json::value v = gw::parse_body(body, kLimits, false);
      flowline::Document doc;
      if (v.is_string())
        doc.text = std::string(v.get_string());
      else
        doc = gw::jina_document(v, 0);
      std::string out;
      gw::append_jina_document(out, doc);
      boost::system::error_code ec;
      (void)parse_answer(out, ec);
      if (ec) flowline::fuzz::broken(fmt::format("a streamed document that is not JSON: {}", out));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  try {
    parse(data[0] % 6, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  } catch (const gw::HttpError& e) {
    if (e.status < 400 || e.status > 499) flowline::fuzz::broken(fmt::format("status {}: {}", e.status, e.what()));
    boost::system::error_code ec;
    (void)parse_answer(e.body, ec);
    if (ec) flowline::fuzz::broken(fmt::format("an error body that is not JSON: {}", e.body));
  }
  return 0;
}
