// Jina's HTTP bodies from docarray < 0.30's clients (the old DocumentArray, as CLIP-as-service's clip-client
// sends them): blob and uri named "blob" and "uri" are read, and the answer names them so again, matches
// included, while docarray >= 0.30's "bytes_" and "url" stay the default (src/gateway/jina_document.cpp).
#include "protocols.hpp"

#include "test_support.hpp"

#include <boost/json.hpp>

namespace json = boost::json;
namespace gw = flowline::gateway;

namespace {

const gw::ParseLimits kLimits{};

// What docarray 0.21's Document.to_dict() writes: every field, null when unset.
json::object v1_document(const std::string& id) {
  json::object doc;
  for (const char* name :
       {"parent_id", "granularity", "adjacency", "blob", "tensor", "mime_type", "text", "weight", "uri", "tags",
        "offset", "location", "embedding", "modality", "evaluations", "scores", "chunks", "matches"}) {
    doc[name] = nullptr;
  }
  doc["id"] = id;
  return doc;
}

json::object answer_of(const gw::Call& call) { return json::parse(gw::jina_response(call, call.docs)).as_object(); }

}  // namespace

TEST_CASE("a Jina request in docarray < 0.30's names is read, and answered in them, matches included",
          "[gateway][jina]") {
  json::object query = v1_document("q");
  query["blob"] = "/9j/AAEC";  // base64 of ff d8 ff 00 01 02
  json::object path_match = v1_document("m1");
  path_match["uri"] = "/photos/cat.jpg";
  path_match["blob"] = "iVBORw==";
  json::object text_match = v1_document("m2");
  text_match["text"] = "a cat";
  query["matches"] = json::array{path_match, text_match};
  const json::value body = json::object{{"data", json::array{query}}, {"exec_endpoint", "/rank"}};

  const gw::Call call = gw::parse_jina(body, "", kLimits);
  CHECK(call.names == gw::JinaNames::docarray_v1);
  REQUIRE(call.docs.size() == 1);
  const std::string query_bytes(call.docs[0].blob.begin(), call.docs[0].blob.end());
  CHECK(query_bytes == std::string("\xff\xd8\xff\x00\x01\x02", 6));
  REQUIRE(call.docs[0].matches.size() == 2);
  CHECK(call.docs[0].matches[0].uri == "/photos/cat.jpg");
  CHECK(call.docs[0].matches[1].text == "a cat");

  const json::object answer = answer_of(call);
  const json::object& doc = answer.at("data").as_array().at(0).as_object();
  CHECK(doc.at("blob").as_string() == "/9j/AAEC");
  CHECK(doc.at("uri").is_null());
  CHECK_FALSE(doc.contains("bytes_"));
  CHECK_FALSE(doc.contains("url"));
  const json::object& match = doc.at("matches").as_array().at(0).as_object();
  CHECK(match.at("uri").as_string() == "/photos/cat.jpg");
  CHECK(match.at("blob").as_string() == "iVBORw==");
  CHECK_FALSE(match.contains("url"));
  CHECK(doc.at("matches").as_array().at(1).as_object().at("uri").is_null());
}

TEST_CASE(
    "a Jina request in docarray >= 0.30's names, or naming neither blob nor uri, is answered with "
    "bytes_ and url",
    "[gateway][jina]") {
  const json::value v2 =
      json::object{{"data", json::array{json::object{{"url", "data:image/png;base64,iVBORw=="}, {"bytes_", nullptr}}}}};
  const json::value plain = json::object{{"data", json::array{json::object{{"text", "a cat"}}}}};
  const json::value one = json::object{{"data", json::object{{"text", "a cat"}, {"uri", "/a.png"}}}};
  CHECK(gw::parse_jina(plain, "/encode", kLimits).names == gw::JinaNames::docarray_v2);
  CHECK(gw::parse_jina(one, "/encode", kLimits).names == gw::JinaNames::docarray_v1);
  const gw::Call call = gw::parse_jina(v2, "/encode", kLimits);
  CHECK(call.names == gw::JinaNames::docarray_v2);
  const json::object answer = answer_of(call);
  const json::object& doc = answer.at("data").as_array().at(0).as_object();
  CHECK(doc.at("url").as_string() == "data:image/png;base64,iVBORw==");
  CHECK(doc.contains("bytes_"));
  CHECK_FALSE(doc.contains("uri"));
  CHECK_FALSE(doc.contains("blob"));
}
