// The gateway's POST /token-classification (Hugging Face's Inference API shape) in one process over loopback:
// the tiny bert-token-classifier's entities exactly as transformers' token-classification pipeline gives them
// (tests/data/tiny-models/bert-token-classifier.entities.jsonl, scripts/tiny_token_classifiers.py) for every
// strategy, ignore_labels and stride passed to the TokenClassifier, the refusals, TEI's /info and /openapi.json
// for it, and requests of several clients sharing the tagger's batches.
#include "gateway_fixtures.hpp"

#include "routes.hpp"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

using namespace gateway_test;

namespace {

const std::filesystem::path kTiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
constexpr double kTolerance = 1e-4;  // the goldens' scores are rounded to 6 places

struct Golden {
  std::string text;
  json::object results;  // run name ("simple", "first+stride16", "simple+keep_o"): the pipeline's entities
};

std::vector<Golden> read_goldens() {
  std::ifstream in(kTiny / "bert-token-classifier.entities.jsonl");
  REQUIRE(in.good());
  std::vector<Golden> out;
  for (std::string line; std::getline(in, line);) {
    json::object o = json::parse(line).as_object();
    out.push_back({std::string(o.at("text").as_string()), o.at("results").as_object()});
  }
  REQUIRE(out.size() >= 15);
  return out;
}

// The request parameters of a run as the script names it.
json::object run_parameters(std::string_view run) {
  json::object p;
  const auto plus = run.find('+');
  p["aggregation_strategy"] = std::string(run.substr(0, plus));
  if (plus == std::string_view::npos) return p;
  const std::string_view extra = run.substr(plus + 1);
  if (extra == "keep_o") p["ignore_labels"] = json::array{};
  if (extra.starts_with("stride")) p["stride"] = std::stoi(std::string(extra.substr(6)));
  return p;
}

// The tagger of flows/ner.yml on the tiny checkpoint (nine labels, texts cut at 64 tokens), on the CPU.
Flow tagger_flow(BatchingOptions batching = {}) {
  Flow flow(FlowOptions{});
  flow.add({.name = "tagger",
            .uses = "TokenClassifier",
            .with = {{"model", (kTiny / "bert-token-classifier").string()}},
            .batching = batching});
  return flow;
}

// One answered entity list against the pipeline's: the same keys (the pipeline's, no more), labels, words,
// offsets and indices; scores within kTolerance. Returns the first difference, empty when equal.
std::string compare(const json::value& answer, const json::array& expected) {
  if (!answer.is_array()) return "not a list: " + json::serialize(answer);
  const json::array& got = answer.get_array();
  if (got.size() != expected.size()) {
    return fmt::format("{} entities, the pipeline {}: got {}, want {}", got.size(), expected.size(),
                       json::serialize(got), json::serialize(expected));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const json::object& g = got[i].as_object();
    const json::object& e = expected[i].as_object();
    std::set<std::string> got_keys, want_keys;
    for (const auto& kv : g) got_keys.emplace(kv.key());
    for (const auto& kv : e) want_keys.emplace(kv.key());
    bool same = got_keys == want_keys;
    for (const auto& kv : e) {
      if (!same) break;
      if (kv.key() == "score") {
        same = std::abs(g.at("score").to_number<double>() - kv.value().to_number<double>()) <= kTolerance;
      } else {
        same = g.at(kv.key()) == kv.value();
      }
    }
    if (!same) return fmt::format("entity {}: got {}, the pipeline {}", i, json::serialize(g), json::serialize(e));
  }
  return {};
}

std::string body_of(const json::value& inputs, const json::object* parameters) {
  json::object body{{"inputs", inputs}};
  if (parameters) body["parameters"] = *parameters;
  return json::serialize(body);
}

}  // namespace

TEST_CASE("POST /token-classification answers the pipeline's entities for every strategy, one string or a list",
          "[gateway][token]") {
  const std::vector<Golden> goldens = read_goldens();
  Served served(tagger_flow());
  Client client(served.port());
  std::set<std::string> runs;
  for (const Golden& g : goldens) {
    for (const auto& kv : g.results) runs.emplace(kv.key());
  }
  REQUIRE(runs.count("none") == 1);
  REQUIRE(runs.count("simple+stride16") == 1);
  REQUIRE(runs.count("simple+keep_o") == 1);
  std::size_t compared = 0;
  for (const std::string& run : runs) {
    const json::object parameters = run_parameters(run);
    // A list: every text of the run in one request, answered one list per text in input order.
    json::array texts;
    std::vector<const json::array*> expected;
    for (const Golden& g : goldens) {
      if (const json::value* r = g.results.if_contains(run)) {
        texts.emplace_back(g.text);
        expected.push_back(&r->as_array());
      }
    }
    const Reply list = client.post("/token-classification", body_of(texts, &parameters));
    INFO("run " << run << ": " << list.body.substr(0, 400));
    REQUIRE(list.status == 200);
    const json::value answer = list.json();
    REQUIRE(answer.as_array().size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      INFO("text " << json::serialize(texts[i]));
      CHECK(compare(answer.as_array()[i], *expected[i]) == "");
      compared += expected[i]->size();
    }
    // One string: its entity list alone. The Inference API's default strategy (simple) is the tagger's too, so
    // a request without parameters answers the run "simple".
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const Reply one =
          client.post("/token-classification", body_of(texts[i], run == "simple" ? nullptr : &parameters));
      INFO("run " << run << ", one string " << json::serialize(texts[i]) << ": " << one.body.substr(0, 400));
      REQUIRE(one.status == 200);
      CHECK(compare(one.json(), *expected[i]) == "");
    }
  }
  CHECK(compared > 150);
  // Strategy none gives each token's entity and index; the groups give entity_group.
  const Reply none = client.post("/token-classification",
                                 R"({"inputs":"Alice and the Duchess","parameters":{"aggregation_strategy":"none"}})");
  REQUIRE(none.status == 200);
  const json::value tokens = none.json();
  REQUIRE_FALSE(tokens.as_array().empty());
  for (const auto& e : tokens.as_array()) {
    CHECK(e.as_object().contains("entity"));
    CHECK(e.as_object().contains("index"));
    CHECK_FALSE(e.as_object().contains("entity_group"));
  }
  // An empty text has no entities; null parameters are the tagger's own settings.
  const Reply empty = client.post("/token-classification", R"({"inputs":["", "   "],"parameters":{"stride":null}})");
  REQUIRE(empty.status == 200);
  CHECK(empty.json() == json::parse("[[],[]]"));
  const std::string metrics = client.get("/metrics").body;
  CHECK_THAT(metrics, testing::contains(R"(route="token_classification")"));
}

TEST_CASE("POST /token-classification refuses bad parameters and bodies by name, and flows without a tagger",
          "[gateway][token]") {
  Served served(tagger_flow(), GatewayOptions{.max_documents = 3});
  Client client(served.port());
  const auto refused = [&](const std::string& body, int status, const std::string& says) {
    const Reply r = client.post("/token-classification", body);
    INFO(body << " -> " << r.status << " " << r.body);
    CHECK(r.status == status);
    CHECK_THAT(r.body, testing::contains(says));
  };
  // The TokenClassifier's request-parameter checks, answered 422 with their message.
  refused(R"({"inputs":"x","parameters":{"aggregation_strategy":"biggest"}})", 422,
          "parameter 'aggregation_strategy': ");
  refused(R"({"inputs":"x","parameters":{"stride":-1}})", 422, "parameter 'stride': ");
  refused(R"({"inputs":"x","parameters":{"stride":1.5}})", 422, "parameter 'stride': ");
  refused(R"({"inputs":"x","parameters":{"ignore_labels":"O"}})", 422, "parameter 'ignore_labels': ");
  refused(R"({"inputs":"x","parameters":{"aggregation_strategy":"none","stride":8}})", 422,
          "parameter 'stride': windows need an aggregation_strategy other than none");
  refused(R"({"inputs":"x","parameters":{"stride":62}})", 422, "parameter 'stride': 62 must be less than");
  // The gateway's own: the body's shape and its bounds.
  refused(R"({"inputs":"x","parameters":{"top_k":1}})", 400,
          "'parameters.top_k' is not a token-classification parameter");
  refused(R"({"inputs":"x","parameters":"simple"})", 400, "'parameters': expected an object");
  refused(R"({"parameters":{}})", 400, "'inputs' is missing");
  refused(R"({"inputs":[]})", 400, "'inputs' is an empty list");
  refused(R"({"inputs":["a",7]})", 400, "'inputs[1]': expected a string");
  refused(R"({"inputs":["a","b","c","d"]})", 413, "");
  // A Jina body goes to the tagger's own endpoint, answered in Jina's shape with the entities as chunks.
  const Reply jina =
      client.post("/token-classification",
                  R"({"data":[{"text":"Alice and the Duchess"}],"parameters":{"aggregation_strategy":"none"}})");
  REQUIRE(jina.status == 200);
  CHECK_FALSE(jina.json().at("data").at(0).at("chunks").as_array().empty());
  // TEI has no token classification: /info says token_classifier (flowline's name) with the labels, and the
  // tagger's maximum (tokenizer_config.json's 64, not the positions' 512).
  const json::value info = client.get("/info").json();
  CHECK(info.at("model_type").at("token_classifier").at("id2label").as_object().size() == 9);
  CHECK(info.at("max_input_length") == 64);

  // A flow without a TokenClassifier: 422 naming what it needs (its default handler would answer no entities).
  Served plain(fake_encoder_flow());
  Client other(plain.port());
  const Reply wrong = other.post("/token-classification", R"({"inputs":"Alice"})");
  CHECK(wrong.status == 422);
  CHECK_THAT(wrong.body, testing::contains("needs a flow with a TokenClassifier"));
  CHECK_THAT(wrong.body, testing::contains("encoder (FakeEncoder)"));
  CHECK(other.post("/token-classification", R"({"data":[{"text":"x"}]})").status == 404);
  // /openapi.json lists the route with its request schema (on the tagger's flow its endpoint keeps Jina's).
  const json::value openapi = other.get("/openapi.json").json();
  const json::value& op = openapi.at("paths").at("/token-classification").at("post");
  CHECK(op.at("requestBody").at("content").at("application/json").at("schema").at("$ref") ==
        "#/components/schemas/TokenClassificationRequest");
  const json::value& schema = openapi.at("components").at("schemas").at("TokenClassificationRequest");
  CHECK(schema.at("properties").at("parameters").at("properties").as_object().contains("aggregation_strategy"));
  // On the tagger's flow the path answers both bodies (Jina's {"data": ...} goes to its endpoint): one of both.
  const json::value tagger_api = client.get("/openapi.json").json();
  const json::value& both = tagger_api.at("paths").at("/token-classification").at("post").at("requestBody");
  const json::array& one_of = both.at("content").at("application/json").at("schema").at("oneOf").as_array();
  REQUIRE(one_of.size() == 2);
  CHECK(one_of[0].at("$ref") == "#/components/schemas/token-classification_input_model");
  CHECK(one_of[1].at("$ref") == "#/components/schemas/TokenClassificationRequest");
}

TEST_CASE("requests of several clients to /token-classification share the tagger's batches", "[gateway][token]") {
  const std::vector<Golden> goldens = read_goldens();
  Served served(tagger_flow(BatchingOptions{.max_batch_size = 64, .max_delay = 100ms}));
  constexpr int kClients = 8, kEach = 4;
  std::atomic<int> right{0};
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Client client(served.port());
      for (int i = 0; i < kEach; ++i) {
        const Golden& g = goldens[static_cast<std::size_t>(c * kEach + i) % goldens.size()];
        const Reply r = client.post("/token-classification", body_of(json::value(g.text), nullptr));
        const std::string diff = r.status == 200 ? compare(r.json(), g.results.at("simple").as_array())
                                                 : fmt::format("HTTP {}: {}", r.status, r.body);
        if (diff.empty()) {
          ++right;
        } else {
          failures[static_cast<std::size_t>(c)] = diff;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  for (const auto& f : failures) CHECK(f == "");
  CHECK(right == kClients * kEach);
  std::uint64_t batches = 0, documents = 0;
  for (const ReplicaStats& r : served.flow.stats().replicas) {
    if (r.executor != "tagger") continue;
    batches += r.batches;
    documents += r.documents;
  }
  CHECK(documents == kClients * kEach);
  // Each request is one text: fewer batches than requests means requests of different clients shared one.
  CHECK(batches < static_cast<std::uint64_t>(kClients * kEach));
  CHECK(batches > 0);
}
