// Tests of the Reranker executor: text pairs against sentence-transformers' CrossEncoder, candidates from
// matches or tags, sorting and top_n, a checkpoint that is not a cross-encoder refused at validate time,
// and the gateway's rerank routes (TEI's /rerank, Jina's and Cohere's /v1/rerank) over real sockets.
#include "../gateway/gateway_fixtures.hpp"
#include "executor_runner.hpp"

#include "flowline/flow.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/registry.hpp"
#include "flowline/reranker/reranker.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <fstream>

using namespace flowline;
using gateway_test::Client;
using gateway_test::Reply;
using gateway_test::Served;

namespace {

const std::filesystem::path kTiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";

Registry& reranker_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    reranker::register_reranker(*r);
    return r;
  }();
  return *registry;
}

struct Pairs {
  std::string query;
  std::vector<std::string> documents;
  at::Tensor scores, raw;
};

Pairs read_pairs() {
  Pairs p;
  std::ifstream in(kTiny / "bert-cross-encoder.pairs.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto o = boost::json::parse(line).as_object();
    p.query = std::string(o.at("query").as_string());
    p.documents.emplace_back(o.at("document").as_string());
  }
  const models::SafetensorsFile file(kTiny / "bert-cross-encoder.pairs.safetensors");
  p.scores = file.get("scores").clone();
  p.raw = file.get("raw").clone();
  return p;
}

// One query through a Reranker on the CPU, alone (no Flow: the harness checks the request's parameters as
// a flow's replica does).
DocumentArray rerank(const Document& query, boost::json::object with = {}, boost::json::object parameters = {}) {
  with["model"] = (kTiny / "bert-cross-encoder").string();
  testing::ExecutorRunner runner(reranker_registry(), "Reranker", with, RuntimeInfo{.name = "reranker"});
  DocumentArray docs;
  docs.push_back(query);
  return runner.post("/rerank", std::move(docs), parameters);
}

Document query_with_tags(const Pairs& p) {
  Document q(p.query);
  boost::json::array texts;
  for (const auto& d : p.documents) texts.emplace_back(d);
  q.tags["documents"] = std::move(texts);
  return q;
}

}  // namespace

TEST_CASE("the reranker's scores equal sentence-transformers' CrossEncoder, sorted best first", "[reranker]") {
  const Pairs p = read_pairs();
  const DocumentArray out = rerank(query_with_tags(p));
  REQUIRE(out.size() == 1);
  const auto& matches = out[0].matches;
  REQUIRE(matches.size() == p.documents.size());
  CHECK_FALSE(out[0].tags.contains("documents"));  // they became the matches
  float previous = 2.0f;
  for (const auto& m : matches) {
    const auto index = static_cast<std::size_t>(m.tags.at("index").as_int64());
    INFO("candidate " << index);
    CHECK(m.text == p.documents[index]);
    const float score = m.scores.at("relevance_score");
    CHECK(std::abs(score - p.scores[static_cast<std::int64_t>(index)].item<float>()) < 1e-4);
    CHECK(score <= previous);
    previous = score;
  }
}

TEST_CASE("the reranker takes Jina's matches as candidates, keeps top_n and can give raw scores", "[reranker]") {
  const Pairs p = read_pairs();
  Document q(p.query);
  for (const auto& d : p.documents) q.matches.push_back(Document(d));
  const DocumentArray out = rerank(q, {{"top_n", 2}}, {{"raw_scores", true}});
  const auto& matches = out[0].matches;
  REQUIRE(matches.size() == 2);
  const at::Tensor best = std::get<1>(p.raw.topk(2));
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(matches[i].tags.at("index").as_int64() == best[static_cast<std::int64_t>(i)].item<std::int64_t>());
    CHECK(std::abs(matches[i].scores.at("relevance_score") -
                   p.raw[best[static_cast<std::int64_t>(i)].item<std::int64_t>()].item<float>()) < 1e-4);
  }
  // A request's top_n overrides the executor's.
  CHECK(rerank(q, {{"top_n", 2}}, {{"top_n", 4}})[0].matches.size() == 4);
}

TEST_CASE("a request's top_n is an integer: 5.0 is 5, while 5.5 and \"3\" are refused naming it",
          "[reranker][params]") {
  const Pairs p = read_pairs();
  REQUIRE(p.documents.size() > 5);
  CHECK(rerank(query_with_tags(p), {}, {{"top_n", 5.0}})[0].matches.size() == 5);  // as Jina's clients send 5
  for (const boost::json::value& bad : {boost::json::value(5.5), boost::json::value("3")}) {
    INFO(boost::json::serialize(bad));
    CHECK_THROWS_AS(rerank(query_with_tags(p), {}, {{"top_n", bad}}), RequestError);
    CHECK_THROWS_WITH(rerank(query_with_tags(p), {}, {{"top_n", bad}}),
                      testing::contains("parameter 'top_n': expected an integer"));
  }
}

TEST_CASE("a sentence embedding checkpoint given to the Reranker is refused at validate time", "[reranker]") {
  const auto dir = testing::scratch_dir("reranker validate");
  testing::write_text(dir / "flow.yml", "executors:\n  - name: reranker\n    uses: Reranker\n    with:\n      model: " +
                                            (kTiny / "mpnet").string() + "\n");
  try {
    load_flow_config(dir / "flow.yml", reranker_registry());
    FAIL("the flow validated");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()),
               testing::contains("flow.yml:5:7: executor 'reranker': parameter 'model': '" +
                                 (kTiny / "mpnet/config.json").string() + "': not a cross-encoder"));
  }
}

TEST_CASE("the shipped flows/rerank.yml validates with a cross-encoder folder", "[reranker][config]") {
  ::setenv("FLOWLINE_RERANKER_MODEL", (kTiny / "bert-cross-encoder").string().c_str(), 1);
  const auto config =
      load_flow_config(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "flows/rerank.yml", reranker_registry());
  REQUIRE(config.executors.size() == 1);
  CHECK(config.executors[0].name == "reranker");
  ::unsetenv("FLOWLINE_RERANKER_MODEL");
}

namespace {

Flow reranker_flow() {
  static const bool registered = [] {
    reranker::register_reranker(Registry::global());  // the gateway reads endpoints from the global registry
    return true;
  }();
  (void)registered;
  Flow flow;
  flow.add({.name = "reranker",
            .uses = "Reranker",
            .with = {{"model", (kTiny / "bert-cross-encoder").string()}},
            .device = "cpu"});
  return flow;
}

std::string json_texts(const std::vector<std::string>& texts) {
  boost::json::array a;
  for (const auto& t : texts) a.emplace_back(t);
  return boost::json::serialize(a);
}

}  // namespace

TEST_CASE("TEI's /rerank answers every candidate's index and CrossEncoder's score, best first", "[reranker][gateway]") {
  const Pairs p = read_pairs();
  Served served(reranker_flow());
  Client client(served.port());
  const std::string query = boost::json::serialize(boost::json::value(p.query));
  Reply r = client.post("/rerank", "{\"query\":" + query + ",\"texts\":" + json_texts(p.documents) + "}");
  REQUIRE(r.status == 200);
  const auto answer = r.json();
  const auto& results = answer.as_array();
  REQUIRE(results.size() == p.documents.size());
  double previous = 2.0;
  std::set<std::int64_t> seen;
  for (const auto& item : results) {
    const auto index = item.at("index").as_int64();
    seen.insert(index);
    const double score = item.at("score").to_number<double>();
    CHECK(std::abs(score - p.scores[index].item<float>()) < 1e-4);
    CHECK(score <= previous);
    CHECK_FALSE(item.as_object().contains("text"));
    previous = score;
  }
  CHECK(seen.size() == p.documents.size());
  // raw_scores gives the logits; return_text the candidate's text.
  r = client.post("/rerank", "{\"query\":" + query + ",\"texts\":" + json_texts(p.documents) +
                                 ",\"raw_scores\":true,\"return_text\":true}");
  REQUIRE(r.status == 200);
  const auto raw_answer = r.json();
  const auto& best = raw_answer.at(0);
  const auto index = best.at("index").as_int64();
  CHECK(std::abs(best.at("score").to_number<double>() - p.raw.max().item<float>()) < 1e-4);
  CHECK(best.at("text") == boost::json::value(p.documents[static_cast<std::size_t>(index)]));
  // Bad requests name the field.
  CHECK_THAT(client.post("/rerank", R"({"texts":["a"]})").body, testing::contains("'query': expected a string"));
  CHECK(client.post("/rerank", R"({"query":"q","texts":[]})").status == 400);
  CHECK(
      client.post("/rerank", R"({"query":"q","texts":["a"],"truncate":true,"truncation_direction":"Right"})").status ==
      200);
  CHECK_THAT(client.post("/rerank", R"({"query":"q","texts":["a"],"truncate":false})").body,
             testing::contains("'truncate': false is not supported"));
  CHECK(client.post("/rerank", R"({"query":"q","texts":["a"],"truncation_direction":"Left"})").status == 400);
  CHECK(client.get("/rerank").status == 405);
}

TEST_CASE("/v1/rerank answers in Jina's and Cohere's shape with top_n, documents and token usage",
          "[reranker][gateway]") {
  const Pairs p = read_pairs();
  Served served(reranker_flow());
  Client client(served.port());
  boost::json::array documents;
  for (std::size_t i = 0; i < p.documents.size(); ++i) {
    if (i % 2) {
      documents.emplace_back(boost::json::object{{"text", p.documents[i]}});
    } else {
      documents.emplace_back(p.documents[i]);
    }
  }
  const boost::json::object body{{"model", "tiny-ce"}, {"query", p.query}, {"documents", documents}, {"top_n", 3}};
  Reply r = client.post("/v1/rerank", boost::json::serialize(body));
  REQUIRE(r.status == 200);
  const auto out = r.json().as_object();
  CHECK(out.at("model") == "tiny-ce");
  CHECK_FALSE(out.at("id").as_string().empty());
  CHECK(out.at("usage").at("total_tokens").as_int64() > static_cast<std::int64_t>(p.documents.size()));
  const auto& results = out.at("results").as_array();
  REQUIRE(results.size() == 3);
  const at::Tensor top = std::get<1>(p.scores.topk(3));
  for (std::size_t i = 0; i < 3; ++i) {
    const auto index = results[i].at("index").as_int64();
    CHECK(index == top[static_cast<std::int64_t>(i)].item<std::int64_t>());
    CHECK(std::abs(results[i].at("relevance_score").to_number<double>() - p.scores[index].item<float>()) < 1e-4);
    CHECK(results[i].at("document").at("text") == boost::json::value(p.documents[static_cast<std::size_t>(index)]));
  }
  auto without = body;
  without["return_documents"] = false;
  without.erase("top_n");
  r = client.post("/v1/rerank", boost::json::serialize(without));
  REQUIRE(r.status == 200);
  const auto plain = r.json();
  CHECK(plain.at("results").as_array().size() == p.documents.size());
  CHECK_FALSE(plain.at("results").at(0).as_object().contains("document"));
  CHECK_THAT(client.post("/v1/rerank", R"({"query":"q","documents":["a"],"top_n":0})").body,
             testing::contains("'top_n': expected an integer >= 1"));
  CHECK_THAT(client.post("/v1/rerank", R"({"query":"q","documents":[7]})").body,
             testing::contains("'documents[0]': expected a string or"));
  CHECK(client.post("/v1/rerank", R"({"documents":["a"]})").status == 400);
}

TEST_CASE(
    "the rerank routes of a flow without a Reranker answer 500 saying so, and Jina's body on /rerank reaches "
    "the flow endpoint",
    "[reranker][gateway]") {
  Served plain(gateway_test::fake_encoder_flow());
  Client client(plain.port());
  const Reply r = client.post("/rerank", R"({"query":"q","texts":["a","b"]})");
  CHECK(r.status == 500);
  CHECK_THAT(r.body, testing::contains("does it run a Reranker on its /rerank endpoint?"));
  // A flow whose Reranker serves /rerank: Jina's {"data": [...]} there is Jina's route (answered in Jina's
  // TextDoc shape, which has no matches), not TEI's.
  const Pairs p = read_pairs();
  Served served(reranker_flow());
  Client jina(served.port());
  boost::json::array texts;
  for (const auto& d : p.documents) texts.emplace_back(d);
  const boost::json::object doc{{"text", p.query}, {"tags", boost::json::object{{"documents", texts}}}};
  const Reply answer =
      jina.post("/rerank", boost::json::serialize(boost::json::object{{"data", boost::json::array{doc}}}));
  INFO(answer.body);
  REQUIRE(answer.status == 200);
  const auto data = answer.json();
  CHECK(data.at("data").as_array().size() == 1);
  CHECK(data.at("header").as_object().contains("request_id"));
}

namespace {

// A copy of the tiny cross-encoder with tokenizer_config.json's `key` set to `value`.
std::filesystem::path cross_encoder_with(const std::string& key, const boost::json::value& value) {
  const auto dir = testing::scratch_dir("reranker tokenizer_config " + key);
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kTiny / "bert-cross-encoder", dir, std::filesystem::copy_options::recursive);
  auto config = boost::json::parse(testing::read_text(dir / "tokenizer_config.json")).as_object();
  config[key] = value;
  testing::write_text(dir / "tokenizer_config.json", boost::json::serialize(config));
  return dir;
}

// Each candidate's relevance score, by its index among the candidates.
std::vector<float> scores_by_index(const DocumentArray& out) {
  std::vector<float> scores(out[0].matches.size());
  for (const auto& m : out[0].matches)
    scores[static_cast<std::size_t>(m.tags.at("index").as_int64())] = m.scores.at("relevance_score");
  return scores;
}

DocumentArray rerank_model(const std::filesystem::path& model, const Document& query, boost::json::object with = {}) {
  with["model"] = model.string();
  testing::ExecutorRunner runner(reranker_registry(), "Reranker", with, RuntimeInfo{.name = "reranker"});
  DocumentArray docs;
  docs.push_back(query);
  return runner.post("/rerank", std::move(docs));
}

}  // namespace

TEST_CASE("a cross-encoder whose model_input_names leave out token_type_ids scores with type ids all 0",
          "[reranker][tokenizer_config]") {
  // transformers and sentence-transformers pass no type ids then: the model sees type 0 everywhere.
  const Pairs p = read_pairs();
  const auto dir = cross_encoder_with("model_input_names", boost::json::array{"input_ids", "attention_mask"});
  const std::vector<float> got = scores_by_index(rerank_model(dir, query_with_tags(p)));
  // The expectation from flowline itself: the same pairs through the same model, without type ids.
  const auto tokenizer = models::Tokenizer::from_folder(kTiny / "bert-cross-encoder");
  const models::CrossEncoderModel model(models::Checkpoint::read(kTiny / "bert-cross-encoder"), c10::Device(c10::kCPU),
                                        c10::kFloat);
  std::vector<std::int32_t> ids;
  std::vector<std::size_t> lengths;
  const std::vector<std::string_view> documents(p.documents.begin(), p.documents.end());
  tokenizer->encode_pairs_into(p.query, documents, static_cast<std::size_t>(model.checkpoint().max_seq_length), ids,
                               nullptr, lengths);
  const std::vector<std::int64_t> lens(lengths.begin(), lengths.end());
  const at::Tensor expected = model.score(models::PackedBatch{ids, lens}).select(1, 0).contiguous();
  REQUIRE(got.size() == p.documents.size());
  double differs = 0;  // from the pair template's type ids (the golden scores)
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto row = static_cast<std::int64_t>(i);
    CHECK(std::abs(got[i] - expected[row].item<float>()) < 1e-6);
    differs = std::max(differs, std::abs(static_cast<double>(got[i]) - p.scores[row].item<double>()));
  }
  CHECK(differs > 1e-4);
  // With token_type_ids among the names, the template's type ids, as before.
  const auto typed =
      cross_encoder_with("model_input_names", boost::json::array{"input_ids", "token_type_ids", "attention_mask"});
  const std::vector<float> with_types = scores_by_index(rerank_model(typed, query_with_tags(p)));
  for (std::size_t i = 0; i < with_types.size(); ++i)
    CHECK(std::abs(with_types[i] - p.scores[static_cast<std::int64_t>(i)].item<float>()) < 1e-4);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(typed);
}

TEST_CASE("a cross-encoder's tokenizer_config.json model_max_length truncates its pairs as max_seq_length does",
          "[reranker][tokenizer_config]") {
  const Pairs p = read_pairs();
  const auto dir = cross_encoder_with("model_max_length", 12);
  const std::vector<float> got = scores_by_index(rerank_model(dir, query_with_tags(p)));
  const std::vector<float> bounded =
      scores_by_index(rerank_model(kTiny / "bert-cross-encoder", query_with_tags(p), {{"max_seq_length", 12}}));
  const std::vector<float> unbounded = scores_by_index(rerank_model(kTiny / "bert-cross-encoder", query_with_tags(p)));
  CHECK(got == bounded);
  CHECK(got != unbounded);
  std::filesystem::remove_all(dir);
}
