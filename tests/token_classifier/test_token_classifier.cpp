// Tests of the TokenClassifier executor: every strategy, stride windows and ignore_labels against transformers'
// token-classification pipeline on tiny checkpoints of eight architectures and six tokenizers
// (<name>.entities.jsonl, scripts/tiny_token_classifiers.py), the aggregation functions alone, request
// parameters, bad checkpoints refused at validation, and the shipped flows/ner.yml run by the launcher.
#include "executor_runner.hpp"
#include "test_support.hpp"

#include "flowline/error.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/registry.hpp"
#include "flowline/token_classifier/aggregation.hpp"
#include "flowline/token_classifier/token_classifier.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

using namespace flowline;
using namespace flowline::token_classifier;

namespace {

const std::filesystem::path kTiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
constexpr double kTolerance = 1e-4;
const char* const kCheckpoints[] = {"bert-token-classifier",       "xlm-roberta-token-classifier",
                                    "roberta-token-classifier",    "distilbert-token-classifier",
                                    "modernbert-token-classifier", "mpnet-token-classifier",
                                    "deberta-token-classifier",    "qwen3-token-classifier"};

Registry& tagger_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    register_token_classifier(*r);
    return r;
  }();
  return *registry;
}

DocumentArray docs_of(std::initializer_list<std::string> texts) {
  DocumentArray docs;
  for (const auto& t : texts) docs.push_back(Document(t));
  return docs;
}

struct Golden {
  std::string text;
  boost::json::object results;  // run name: the pipeline's entities
};

std::vector<Golden> read_goldens(const std::string& name) {
  std::ifstream in(kTiny / (name + ".entities.jsonl"));
  REQUIRE(in.good());
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    auto o = boost::json::parse(line).as_object();
    out.push_back({std::string(o.at("text").as_string()), o.at("results").as_object()});
  }
  REQUIRE(out.size() >= 15);
  return out;
}

// The settings of a run named as the script names them: "simple", "first+stride16", "simple+keep_o".
boost::json::object run_parameters(std::string_view run) {
  boost::json::object p;
  const auto plus = run.find('+');
  p["aggregation_strategy"] = std::string(run.substr(0, plus));
  if (plus == std::string_view::npos) return p;
  const std::string_view extra = run.substr(plus + 1);
  if (extra == "keep_o") p["ignore_labels"] = boost::json::array{};
  if (extra.starts_with("stride")) p["stride"] = std::stoi(std::string(extra.substr(6)));
  return p;
}

// One document's chunks against the pipeline's entities: same words, labels, start, end (and index), scores
// within kTolerance. Returns a description of the first difference, empty when equal.
std::string compare(const Document& doc, const boost::json::array& expected) {
  if (doc.chunks.size() != expected.size()) {
    return fmt::format("{} entities, the pipeline {}: {}", doc.chunks.size(), expected.size(),
                       boost::json::serialize(expected));
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& e = expected[i].as_object();
    const Document& c = doc.chunks[i];
    const bool group = e.contains("entity_group");
    const char* label_key = group ? "entity_group" : "entity";
    const auto tag = [&](const char* key) { return boost::json::serialize(c.tags.at(key)); };
    if (c.text != e.at("word").as_string() || tag(label_key) != boost::json::serialize(e.at(label_key)) ||
        tag("start") != boost::json::serialize(e.at("start")) || tag("end") != boost::json::serialize(e.at("end")) ||
        (!group && tag("index") != boost::json::serialize(e.at("index"))) ||
        std::abs(c.tags.at("score").to_number<double>() - e.at("score").to_number<double>()) > kTolerance ||
        c.parent_id != doc.id) {
      return fmt::format("entity {}: flowline '{}' {} {} {}..{}, the pipeline {}", i, c.text, tag(label_key),
                         tag("score"), tag("start"), tag("end"), boost::json::serialize(e));
    }
  }
  return {};
}

}  // namespace

TEST_CASE("a token classifier finds the pipeline's entities for every strategy, window and tokenizer",
          "[token_classifier]") {
  for (const char* name : kCheckpoints) {
    const auto goldens = read_goldens(name);
    testing::ExecutorRunner runner(tagger_registry(), "TokenClassifier",
                                   {{"model", (kTiny / name).string()}, {"batch_size", 4}});
    std::set<std::string> runs;
    for (const Golden& g : goldens) {
      for (const auto& [run, _] : g.results) runs.insert(std::string(run));
    }
    std::size_t compared = 0;
    for (const std::string& run : runs) {
      // Every text of the run in one request: windows and texts packed into the same passes.
      DocumentArray docs;
      std::vector<const boost::json::array*> expected;
      for (const Golden& g : goldens) {
        if (const auto* r = g.results.if_contains(run)) {
          docs.push_back(Document(g.text));
          expected.push_back(&r->as_array());
        }
      }
      const DocumentArray out = runner.post("/token-classification", docs, run_parameters(run));
      REQUIRE(out.size() == docs.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        INFO(name << ", run " << run << ", text " << boost::json::serialize(boost::json::value(out[i].text)));
        CHECK(compare(out[i], *expected[i]) == "");
        compared += expected[i]->size();
      }
    }
    INFO(name);
    CHECK(compared > 100);
    CHECK(runs.count("simple+stride16") == 1);
  }
}

TEST_CASE("a token classifier's aggregation groups words and B-/I- runs as the pipeline does", "[token_classifier]") {
  const std::vector<std::string> labels{"O", "B-PER", "I-PER", "B-LOC"};
  const DecodeTokens join = [](std::span<const std::string_view> tokens) {
    std::string out;
    for (const auto t : tokens) out += (out.empty() ? "" : "|") + std::string(t);
    return out;
  };
  // "Alice Lid dell in Paris": Al ##ice is one word, Lid dell two, the last word one token.
  const std::vector<std::vector<float>> scores{{0.1f, 0.7f, 0.1f, 0.1f},   {0.1f, 0.2f, 0.6f, 0.1f},
                                               {0.2f, 0.1f, 0.6f, 0.1f},   {0.3f, 0.5f, 0.1f, 0.1f},
                                               {0.9f, 0.0f, 0.05f, 0.05f}, {0.1f, 0.0f, 0.1f, 0.8f}};
  const std::vector<PreEntity> tokens{{"Al", scores[0], 0, 2, 1, false},   {"ice", scores[1], 2, 5, 2, true},
                                      {"Lid", scores[2], 6, 9, 3, false},  {"dell", scores[3], 10, 14, 4, false},
                                      {"in", scores[4], 15, 17, 5, false}, {"Paris", scores[5], 18, 23, 6, false}};
  SECTION("none labels each token") {
    const auto e = aggregate(tokens, Strategy::None, labels, join);
    REQUIRE(e.size() == 6);
    CHECK(e[1].label == "I-PER");
    CHECK(e[1].index == std::optional<std::size_t>(2));
  }
  SECTION("simple groups B-PER I-PER I-PER, then a new B-PER") {
    auto e = aggregate(tokens, Strategy::Simple, labels, join);
    drop_ignored(e, std::vector<std::string>{"O"});
    REQUIRE(e.size() == 3);
    CHECK(e[0].label == "PER");
    CHECK(e[0].word == "Al|ice|Lid");
    CHECK(e[0].start == 0);
    CHECK(e[0].end == 9);
    CHECK(std::abs(e[0].score - (0.7 + 0.6 + 0.6) / 3) < 1e-6);
    CHECK(e[1].word == "dell");
    CHECK(e[2].label == "LOC");
    CHECK(!e[2].index);
  }
  SECTION("ignored labels are left out before their words are decoded") {
    std::vector<std::string> decoded;
    const DecodeTokens record = [&](std::span<const std::string_view> words) {
      decoded.push_back(join(words));
      return decoded.back();
    };
    const std::vector<std::string> ignore{"O", "LOC"};
    const auto e = aggregate(tokens, Strategy::Simple, labels, record, ignore);
    REQUIRE(e.size() == 2);
    CHECK(e[0].word == "Al|ice|Lid");
    CHECK(e[1].word == "dell");
    CHECK(decoded == std::vector<std::string>{"Al|ice|Lid", "dell"});  // not "in", not "Paris"
    const auto none = aggregate(tokens, Strategy::None, labels, record, std::vector<std::string>{"O", "B-LOC"});
    REQUIRE(none.size() == 4);  // strategy none matches the tokens' own labels: in (O) and Paris (B-LOC) out
    CHECK(none[3].word == "dell");
  }
  SECTION("first, max and average vote per word") {
    const auto first = aggregate(tokens, Strategy::First, labels, join);
    REQUIRE(first.size() == 4);  // "Al|ice"+"Lid" (PER, I-PER joins), "dell" (B-PER), "in" (O), "Paris" (LOC)
    CHECK(first[0].word == "Al|ice|Lid");
    CHECK(std::abs(first[0].score - (0.7 + 0.6) / 2) < 1e-6);
    const auto max = aggregate(tokens, Strategy::Max, labels, join);
    CHECK(max[0].word == "Al|ice|Lid");  // Al's 0.7 beats ice's 0.6: B-PER
    const auto average = aggregate(tokens, Strategy::Average, labels, join);
    CHECK(std::abs(average[0].score - ((0.7 + 0.2) / 2 + 0.6) / 2) < 1e-6);  // B-PER at 0.45, then I-PER
  }
  SECTION("overlapping windows keep the longer entity, then the higher score") {
    std::vector<Entity> e{{"PER", 0.5, "a", 0, 5, {}},
                          {"PER", 0.9, "b", 10, 12, {}},
                          {"PER", 0.4, "c", 2, 8, {}},
                          {"LOC", 0.6, "d", 10, 12, {}}};
    const auto merged = merge_overlapping(e);
    REQUIRE(merged.size() == 2);
    CHECK(merged[0].word == "c");
    CHECK(merged[1].word == "b");
  }
  CHECK(parse_strategy("SIMPLE") == Strategy::Simple);
  CHECK(!parse_strategy("mean"));
}

TEST_CASE("a token classifier refuses bad settings and checkpoints, and gives empty texts no entities",
          "[token_classifier]") {
  const std::string bert = (kTiny / "bert-token-classifier").string();
  testing::ExecutorRunner runner(tagger_registry(), "TokenClassifier", {{"model", bert}});
  const auto out = runner.post("/", docs_of({"", "  \t "}));
  CHECK(out[0].chunks.empty());
  CHECK(out[1].chunks.empty());
  CHECK_THROWS_WITH(runner.post("/", docs_of({"x"}), {{"aggregation_strategy", "none"}, {"stride", 8}}),
                    testing::contains("other than none"));
  CHECK_THROWS_WITH(runner.post("/", docs_of({"x"}), {{"stride", 62}}),
                    testing::contains("must be less than a window's 62"));
  CHECK_THROWS_AS(runner.post("/", docs_of({"x"}), {{"aggregation_strategy", "mean"}}), RequestError);
  CHECK_THROWS_WITH(testing::ExecutorRunner(tagger_registry(), "TokenClassifier",
                                            {{"model", bert}, {"stride", 8}, {"aggregation_strategy", "none"}}),
                    testing::contains("other than none"));

  // Validation: a sequence classifier, a folder without the head's weights or without id2label.
  const auto problem = [](const std::filesystem::path& folder) {
    return models::Checkpoint::problem(folder, models::Checkpoint::Use::TokenClassifier).value_or("");
  };
  CHECK_THAT(problem(kTiny / "bert-sequence-classifier"), testing::contains("no *ForTokenClassification"));
  CHECK(problem(kTiny / "bert-token-classifier") == "");
  const auto tmp = testing::scratch_dir("token classifier checkpoints");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(kTiny / "bert-token-classifier" / f, tmp / f);
  {  // The checkpoint's weights without the head's classifier.weight.
    std::map<std::string, at::Tensor> tensors;
    const models::SafetensorsFile file(kTiny / "bert-token-classifier/model.safetensors");
    for (const auto& name : file.names()) {
      if (name != "classifier.weight") tensors[name] = file.get(name).clone();
    }
    models::save_safetensors(tmp / "model.safetensors", tensors);
  }
  CHECK_THAT(problem(tmp), testing::contains("model.safetensors") && testing::contains("classifier.weight"));
  std::filesystem::copy_file(kTiny / "bert-token-classifier/model.safetensors", tmp / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto config = boost::json::parse(testing::read_text(tmp / "config.json")).as_object();
  config.erase("id2label");
  config.erase("label2id");
  testing::write_text(tmp / "config.json", boost::json::serialize(config));
  CHECK_THAT(problem(tmp), testing::contains("config.json") && testing::contains("id2label"));
}

TEST_CASE("a token classifier truncates a long text without stride and windows it with", "[token_classifier]") {
  const std::string bert = (kTiny / "bert-token-classifier").string();
  testing::ExecutorRunner runner(tagger_registry(), "TokenClassifier",
                                 {{"model", bert}, {"ignore_labels", boost::json::array{}}});
  std::string text;
  while (text.size() < 1'000'000) text += "Alice went to Paris with the Queen. ";
  const auto cut = runner.post("/", docs_of({text}));
  REQUIRE(!cut[0].chunks.empty());
  CHECK(cut[0].chunks.docs().back().tags.at("end").to_number<std::int64_t>() < 400);
  const auto whole = runner.post("/", docs_of({text}), {{"stride", 16}});
  // Windows to the end (the last window's groups may lose to a longer one of the window before, as the
  // pipeline's merge decides).
  CHECK(whole[0].chunks.docs().back().tags.at("end").to_number<std::int64_t>() > 999'000);
  CHECK(whole[0].chunks.size() > 1000);
}

TEST_CASE("flows/ner.yml runs as shipped on its tiny checkpoint and writes the pipeline's entities as TSV",
          "[token_classifier][launcher]") {
  const auto goldens = read_goldens("bert-token-classifier");
  const auto dir = testing::scratch_dir("shipped ner");
  // Golden texts of one line each, as paragraphs (numbered from 0 by the reader).
  std::vector<const Golden*> used;
  std::string input;
  for (const Golden& g : goldens) {
    if (g.text.empty() || g.text.find_first_of("\n\t") != std::string::npos || g.text.front() == ' ' ||
        g.text.back() == ' ')
      continue;
    used.push_back(&g);
    input += g.text + "\n\n";
  }
  REQUIRE(used.size() >= 10);
  testing::write_text(dir / "in.txt", input);
  const auto r = testing::run_process(fmt::format(
      "cd '{}' && env -u FLOWLINE_NER_MODEL FLOWLINE_OUT_DIR='{}' '{}' run flows/ner.yml --input '{}/in.txt' "
      "--input-format paragraphs --set tagger.device=cpu",
      FLOWLINE_SOURCE_DIR, dir.string(), FLOWLINE_LAUNCHER, dir.string()));
  const std::string said = r.out + r.err;
  INFO(said);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(said, testing::contains("its entities mean nothing"));
  std::string expected = "parent.tags.paragraph\ttext\ttags.entity_group\ttags.start\ttags.end\n";
  for (std::size_t p = 0; p < used.size(); ++p) {
    for (const auto& e : used[p]->results.at("simple").as_array()) {
      const auto& o = e.as_object();
      expected += fmt::format("{}\t{}\t{}\t{}\t{}\n", p, std::string_view(o.at("word").as_string()),
                              std::string_view(o.at("entity_group").as_string()), o.at("start").as_int64(),
                              o.at("end").as_int64());
    }
  }
  CHECK(testing::read_text(dir / "entities.tsv") == expected);
}
