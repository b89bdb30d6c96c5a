// Jina's document codec (src/gateway/jina_document.cpp): every field of the Document table travels, in
// Jina's names and shapes, and a bad nested field is a 422 naming its path.
#include "protocols.hpp"

#include "test_support.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

namespace json = boost::json;
namespace gw = flowline::gateway;
using flowline::Document;

namespace {

Document round_trip(const Document& doc) {
  std::string out;
  gw::append_jina_document(out, doc);
  return gw::jina_document(json::parse(out), 0);
}

Document search_result() {
  Document query("a whale hunt");
  query.id = "q1";
  query.mime_type = "text/plain";
  query.tensor = at::arange(6, at::kLong).reshape({2, 3});
  query.blob = {0, 1, 2, 255};
  query.chunks.push_back(Document("a whale"));
  query.chunks[0].parent_id = "q1";
  for (int i = 0; i < 3; ++i) {
    Document& match = query.matches.push_back(Document(fmt::format("paragraph {}", i)));
    match.id = fmt::format("p{}", i);
    match.scores["cosine"] = 0.9f - 0.1f * static_cast<float>(i);
    match.tags["book"] = "moby-dick";
    match.tags["line"] = i;
    match.embedding = at::tensor({0.25f, -1.5f, 3.0e-8f});
  }
  return query;
}

}  // namespace

TEST_CASE("Jina's codec carries matches, scores, chunks, tensors and every other field both ways", "[gateway]") {
  const Document sent = search_result();
  const Document back = round_trip(sent);
  CHECK(back.id == "q1");
  CHECK(back.text == sent.text);
  CHECK(back.mime_type == "text/plain");
  CHECK(back.blob == sent.blob);
  // A tensor travels as docarray writes one, nested lists of its values (Jina's client reads nothing else), and
  // is read back as float32.
  REQUIRE(back.tensor.defined());
  CHECK(back.tensor.scalar_type() == at::kFloat);
  CHECK(at::equal(back.tensor, sent.tensor.to(at::kFloat)));
  REQUIRE(back.chunks.size() == 1);
  CHECK(back.chunks[0].parent_id == "q1");
  CHECK(back.chunks[0].text == "a whale");
  REQUIRE(back.matches.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back.matches[i].id == sent.matches[i].id);
    CHECK(back.matches[i].text == sent.matches[i].text);
    CHECK(back.matches[i].scores.at("cosine") == sent.matches[i].scores.at("cosine"));  // bit for bit
    CHECK(back.matches[i].tags == sent.matches[i].tags);
    CHECK(at::equal(back.matches[i].embedding, sent.matches[i].embedding));
  }
}

TEST_CASE("Jina's codec writes scores as named scores and keeps TextDoc's fields present", "[gateway]") {
  Document match("x");
  match.id = "m";
  match.scores["cosine"] = 0.5f;
  Document query("q");
  query.id = "q";
  query.matches.push_back(match);
  std::string out;
  gw::append_jina_document(out, query);
  const json::object o = json::parse(out).as_object();
  for (const char* always : {"id", "text", "bytes_", "embedding", "url"}) CHECK(o.contains(always));
  CHECK(o.at("embedding").is_null());
  CHECK_FALSE(o.contains("tensor"));
  CHECK_FALSE(o.contains("scores"));
  const json::value& sent = o.at("matches").at(0);
  CHECK(json::serialize(sent.at("scores")) == R"({"cosine":{"value":5E-1}})");
  // Scores sent as plain numbers are read too.
  const Document plain = gw::jina_document(json::parse(R"({"scores": {"l2": 2}, "uri": "u"})"), 0);
  CHECK(plain.scores.at("l2") == 2.0f);
  CHECK(plain.uri == "u");
  // A nested list of numbers is a float32 tensor; flowline's {"dtype", "shape", "data"} keeps its dtype.
  const Document listed = gw::jina_document(json::parse(R"({"tensor": [[1, 2], [3, 4.5]]})"), 0);
  CHECK(listed.tensor.sizes() == at::IntArrayRef{2, 2});
  CHECK(listed.tensor[1][1].item<float>() == 4.5f);
  const Document typed =
      gw::jina_document(json::parse(R"({"tensor": {"dtype": "uint8", "shape": [1, 2], "data": [[7, 255]]}})"), 0);
  CHECK(typed.tensor.scalar_type() == at::kByte);
  // Written back as docarray writes it: the values, integers as integers.
  Document pixels;
  pixels.tensor = typed.tensor;
  std::string written;
  gw::append_jina_document(written, pixels);
  CHECK(json::serialize(json::parse(written).at("tensor")) == "[[7,255]]");
}

TEST_CASE("a bad field deep in a Jina document is a 422 naming its path", "[gateway]") {
  const auto refusal = [](const char* body) -> std::string {
    try {
      gw::jina_document(json::parse(body), 2);
    } catch (const gw::HttpError& e) {
      CHECK(e.status == 422);
      return json::serialize(json::parse(e.body).at("detail").at(0).at("loc")) + " " + e.what();
    }
    FAIL("no error for " << body);
    return {};
  };
  CHECK(refusal(R"({"matches": [{"id": "a"}, {"scores": {"cosine": "high"}}]})") ==
        R"(["body","data",2,"matches",1,"scores","cosine"] data[2].matches[1].scores.cosine: expected a number or )"
        R"({"value": number})");
  CHECK(refusal(R"({"chunks": {"text": "x"}})") ==
        R"(["body","data",2,"chunks"] data[2].chunks: expected a list of documents)");
  CHECK(refusal(R"({"matches": [{"text": 3}]})") ==
        R"(["body","data",2,"matches",0,"text"] data[2].matches[0].text: expected a string)");
  CHECK(refusal(R"({"tensor": [[1, 2], [3]]})")
            .starts_with(R"(["body","data",2,"tensor"] data[2].tensor: expected a tensor)"));
  CHECK(refusal(R"({"embedding": [1, 1e39]})") ==
        R"(["body","data",2,"embedding",1] data[2].embedding[1]: 1E39 is beyond float32's range (±3.4028235e38))");
  CHECK(refusal(R"({"bytes_": "not base64!"})")
            .starts_with(R"(["body","data",2,"bytes_"] data[2].bytes_: expected base64)"));
}
