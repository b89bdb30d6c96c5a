// Tests of the SequenceClassifier executor: texts and text pairs against transformers'
// pipeline("text-classification", top_k=None) for a softmax and a sigmoid (multi-label) checkpoint, the
// function_to_apply / raw_scores / top_k parameters of the flow and of a request, id2label and its absence,
// bad checkpoints and bad input refused, non-finite scores failing the request, and the shipped
// flows/classify.yml run by the launcher.
#include "executor_runner.hpp"
#include "test_support.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/registry.hpp"
#include "flowline/sequence_classifier/sequence_classifier.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>

using namespace flowline;

namespace {

const std::filesystem::path kTiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
constexpr double kTolerance = 1e-5;

Registry& classifier_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    sequence_classifier::register_sequence_classifier(*r);
    return r;
  }();
  return *registry;
}

// <name>.texts.jsonl and .texts.safetensors (scripts/make_tiny_models.py, sequence_classifiers()): the
// pipeline's scores in label order under each function, and its order of the labels (best first).
struct Goldens {
  std::vector<std::string> labels;
  std::vector<std::string> texts, pairs;  // pairs[i] empty with has_pair[i] false: a single text
  std::vector<bool> has_pair;
  std::map<std::string, at::Tensor> scores;  // "scores" (the checkpoint's function), "softmax", "sigmoid", "none"
  at::Tensor order;
};

Goldens read_goldens(const std::string& name, std::vector<std::string> labels) {
  Goldens g;
  g.labels = std::move(labels);
  std::ifstream in(kTiny / (name + ".texts.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto o = boost::json::parse(line).as_object();
    g.texts.emplace_back(o.at("text").as_string());
    g.has_pair.push_back(o.contains("text_pair"));
    g.pairs.emplace_back(o.contains("text_pair") ? std::string(o.at("text_pair").as_string()) : "");
  }
  const models::SafetensorsFile file(kTiny / (name + ".texts.safetensors"));
  for (const char* f : {"scores", "softmax", "sigmoid", "none"}) g.scores[f] = file.get(f).clone();
  g.order = file.get("order").clone();
  REQUIRE(g.texts.size() >= 10);
  REQUIRE(g.order.size(0) == static_cast<std::int64_t>(g.texts.size()));
  return g;
}

Goldens bert_goldens() { return read_goldens("bert-sequence-classifier", {"negative", "neutral", "positive"}); }
Goldens xlmr_goldens() { return read_goldens("xlm-roberta-multilabel", {"joy", "anger", "fear", "surprise"}); }

DocumentArray documents_of(const Goldens& g) {
  DocumentArray docs;
  for (std::size_t i = 0; i < g.texts.size(); ++i) {
    Document d(g.texts[i]);
    if (g.has_pair[i]) d.tags["text_pair"] = g.pairs[i];
    docs.push_back(std::move(d));
  }
  return docs;
}

boost::json::object with_model(const std::filesystem::path& folder, boost::json::object with = {}) {
  with["model"] = folder.string();
  with["device"] = "cpu";
  return with;
}

// The largest difference between the documents' tags.labels and the goldens' `function` scores; checks that
// each document lists `kept` labels in the pipeline's order and that scores[label] repeats each one.
double check_labels(const DocumentArray& out, const Goldens& g, const std::string& function, std::size_t kept,
                    bool pipeline_order = true) {
  REQUIRE(out.size() == g.texts.size());
  double worst = 0;
  for (std::size_t d = 0; d < out.size(); ++d) {
    INFO("document " << d << ": '" << g.texts[d] << "'");
    const auto& labels = out[d].tags.at("labels").as_array();
    REQUIRE(labels.size() == kept);
    CHECK(out[d].scores.size() == kept);
    double previous = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < labels.size(); ++k) {
      const auto& entry = labels[k].as_object();
      const std::string label(entry.at("label").as_string());
      const double score = entry.at("score").as_double();
      const auto index =
          static_cast<std::int64_t>(std::find(g.labels.begin(), g.labels.end(), label) - g.labels.begin());
      REQUIRE(index < static_cast<std::int64_t>(g.labels.size()));
      if (pipeline_order)
        CHECK(index == g.order[static_cast<std::int64_t>(d)][static_cast<std::int64_t>(k)].item<std::int64_t>());
      const double expected = g.scores.at(function)[static_cast<std::int64_t>(d)][index].item<double>();
      worst = std::max(worst, std::abs(score - expected));
      CHECK(std::abs(score - expected) < kTolerance);
      CHECK(out[d].scores.at(label) == static_cast<float>(score));
      CHECK(score <= previous);
      previous = score;
    }
  }
  return worst;
}

// A copy of a tiny checkpoint whose config.json `edit` changes.
std::filesystem::path edited_copy(const std::string& name, const std::string& test,
                                  const std::function<void(boost::json::object&)>& edit) {
  const auto dir = testing::scratch_dir(test) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(kTiny / name))
    std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
  auto config = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  edit(config);
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  return dir;
}

}  // namespace

TEST_CASE("the classifier's labels and scores equal transformers' text-classification pipeline, texts and pairs",
          "[sequence_classifier]") {
  // BERT with three labels: softmax; XLM-R multi-label with four: sigmoid (its tokenizer passes no type ids).
  const bool bert = GENERATE(true, false);
  const Goldens g = bert ? bert_goldens() : xlmr_goldens();
  const auto folder = kTiny / (bert ? "bert-sequence-classifier" : "xlm-roberta-multilabel");
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder, {{"batch_size", 4}}));
  const double worst = check_labels(runner.post("/classify", documents_of(g)), g, "scores", g.labels.size());
  WARN((bert ? "softmax" : "sigmoid") << " checkpoint: largest score difference " << worst);
  // The checkpoint's function is the pipeline's: softmax for one, sigmoid for the other.
  CHECK(at::allclose(g.scores.at("scores"), g.scores.at(bert ? "softmax" : "sigmoid")));
}

TEST_CASE("function_to_apply and raw_scores change the scores as the pipeline's function_to_apply does",
          "[sequence_classifier]") {
  const bool bert = GENERATE(true, false);
  const Goldens g = bert ? bert_goldens() : xlmr_goldens();
  const auto folder = kTiny / (bert ? "bert-sequence-classifier" : "xlm-roberta-multilabel");
  const std::size_t all = g.labels.size();
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder));
  for (const std::string function : {"softmax", "sigmoid", "none"}) {
    INFO("function_to_apply " << function << " as a request parameter");
    check_labels(runner.post("/classify", documents_of(g), {{"function_to_apply", function}}), g, function, all, false);
  }
  check_labels(runner.post("/classify", documents_of(g), {{"raw_scores", true}}), g, "none", all, false);
  check_labels(runner.post("/classify", documents_of(g), {{"function_to_apply", "auto"}}), g, "scores", all);
  // The same as the flow's parameters; a request's own override them.
  testing::ExecutorRunner sigmoid(classifier_registry(), "SequenceClassifier",
                                  with_model(folder, {{"function_to_apply", "sigmoid"}}));
  check_labels(sigmoid.post("", documents_of(g)), g, "sigmoid", all, false);
  check_labels(sigmoid.post("", documents_of(g), {{"function_to_apply", "softmax"}}), g, "softmax", all, false);
  testing::ExecutorRunner raw(classifier_registry(), "SequenceClassifier", with_model(folder, {{"raw_scores", true}}));
  check_labels(raw.post("", documents_of(g)), g, "none", all, false);
  check_labels(raw.post("", documents_of(g), {{"raw_scores", false}}), g, "scores", all);
}

TEST_CASE("top_k keeps the best labels of each document, from the flow or from the request", "[sequence_classifier]") {
  const Goldens g = xlmr_goldens();
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier",
                                 with_model(kTiny / "xlm-roberta-multilabel", {{"top_k", 2}}));
  check_labels(runner.post("/classify", documents_of(g)), g, "scores", 2);
  check_labels(runner.post("/classify", documents_of(g), {{"top_k", 1}}), g, "scores", 1);
  check_labels(runner.post("/classify", documents_of(g), {{"top_k", 0}}), g, "scores", 4);  // 0: all
  check_labels(runner.post("/classify", documents_of(g), {{"top_k", 9}}), g, "scores", 4);  // past the labels: all
}

TEST_CASE("count_tokens puts each document's tokens, special ones included, in tags.tokens", "[sequence_classifier]") {
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier",
                                 with_model(kTiny / "bert-sequence-classifier"));
  const auto tokenizer = models::Tokenizer::from_folder(kTiny / "bert-sequence-classifier");
  DocumentArray docs;
  docs.push_back(Document("Alice was tired"));
  docs.push_back(Document(""));
  docs.push_back(Document("a rabbit"));
  docs[2].tags["text_pair"] = "the white rabbit";
  const DocumentArray out = runner.post("/classify", docs, {{"count_tokens", true}});
  std::vector<std::int32_t> pair;
  tokenizer->encode_pair_into("a rabbit", "the white rabbit", 0, pair, nullptr);
  CHECK(out[0].tags.at("tokens").as_int64() == static_cast<std::int64_t>(tokenizer->encode("Alice was tired").size()));
  CHECK(out[1].tags.at("tokens").as_int64() == 2);  // [CLS] [SEP]
  CHECK(out[2].tags.at("tokens").as_int64() == static_cast<std::int64_t>(pair.size()));
  CHECK_FALSE(runner.post("/classify", docs)[0].tags.contains("tokens"));
}

TEST_CASE("a checkpoint without id2label names its labels LABEL_i as transformers does", "[sequence_classifier]") {
  const Goldens g = bert_goldens();
  const auto folder = edited_copy("bert-sequence-classifier", "classifier without id2label", [](auto& config) {
    config.erase("id2label");
    config.erase("label2id");
    config["num_labels"] = 3;
  });
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder));
  Goldens renamed = g;
  renamed.labels = {"LABEL_0", "LABEL_1", "LABEL_2"};
  check_labels(runner.post("", documents_of(g)), renamed, "scores", 3);
}

TEST_CASE("a classifier head of another shape than config.json's labels is refused, naming the tensor",
          "[sequence_classifier]") {
  const auto folder = edited_copy("bert-sequence-classifier", "classifier wrong head", [](auto& config) {
    config["id2label"] = boost::json::object{{"0", "a"}, {"1", "b"}, {"2", "c"}, {"3", "d"}, {"4", "e"}};
    config.erase("label2id");
  });
  try {
    testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder));
    FAIL("the executor started");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK_THAT(std::string(e.what()), testing::contains("classifier.weight"));
  }
}

TEST_CASE("id2label that does not name every label by its index is refused at validate time, naming config.json",
          "[sequence_classifier]") {
  const auto folder = edited_copy("bert-sequence-classifier", "classifier bad id2label", [](auto& config) {
    config["id2label"] = boost::json::object{{"0", "a"}, {"one", "b"}, {"2", "c"}};
  });
  const std::string expected = (folder / "config.json").string() + "': id2label: key 'one' is not a label index 0..2";
  const auto dir = testing::scratch_dir("classifier validate id2label");
  testing::write_text(dir / "flow.yml",
                      "executors:\n  - name: classifier\n    uses: SequenceClassifier\n    with:\n"
                      "      model: " +
                          folder.string() + "\n");
  try {
    load_flow_config(dir / "flow.yml", classifier_registry());
    FAIL("the flow validated");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()),
               testing::contains("flow.yml:5:7: executor 'classifier': parameter 'model': '" + expected));
  }
  try {
    testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder));
    FAIL("the executor started");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), testing::contains(expected));
  }
}

TEST_CASE("a sentence embedding checkpoint given to the SequenceClassifier is refused at validate time",
          "[sequence_classifier]") {
  const auto dir = testing::scratch_dir("classifier validate");
  testing::write_text(dir / "flow.yml",
                      "executors:\n  - name: classifier\n    uses: SequenceClassifier\n    with:\n"
                      "      model: " +
                          (kTiny / "mpnet").string() + "\n");
  try {
    load_flow_config(dir / "flow.yml", classifier_registry());
    FAIL("the flow validated");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()),
               testing::contains("flow.yml:5:7: executor 'classifier': parameter 'model': '" +
                                 (kTiny / "mpnet/config.json").string() + "': not a cross-encoder"));
  }
}

TEST_CASE("bad request parameters and a text_pair that is not a string fail the request clearly",
          "[sequence_classifier]") {
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier",
                                 with_model(kTiny / "bert-sequence-classifier"));
  DocumentArray docs;
  docs.push_back(Document("a text"));
  CHECK_THROWS_AS(runner.post("/classify", docs, {{"top_k", -1}}), RequestError);
  try {
    runner.post("/classify", docs, {{"function_to_apply", "tanh"}});
    FAIL("the request ran");
  } catch (const RequestError& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("auto, none, sigmoid, softmax"));
  }
  docs[0].tags["text_pair"] = 3;
  try {
    runner.post("/classify", docs);
    FAIL("the request ran");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("tags.text_pair must be a string"));
  }
  CHECK(runner.post("/classify", DocumentArray{}).empty());
}

TEST_CASE("a document whose scores are not finite fails the request, named by its position", "[sequence_classifier]") {
  // One word's embedding made NaN (rabbit): only the document holding that word gets NaN scores.
  const auto folder = edited_copy("bert-sequence-classifier", "classifier nonfinite", [](auto&) {});
  const auto tokenizer = models::Tokenizer::from_folder(folder);
  const auto rabbit = tokenizer->encode("rabbit");
  REQUIRE(rabbit.size() == 3);  // [CLS] rabbit [SEP]
  std::map<std::string, at::Tensor> tensors;
  {
    const models::SafetensorsFile file(folder / "model.safetensors");
    for (const auto& name : file.names()) tensors[name] = file.get(name).clone();
  }
  tensors.at("bert.embeddings.word_embeddings.weight")[rabbit[1]].fill_(std::numeric_limits<float>::quiet_NaN());
  models::save_safetensors(folder / "model.safetensors", tensors);
  testing::ExecutorRunner runner(classifier_registry(), "SequenceClassifier", with_model(folder));
  DocumentArray docs;
  for (const char* text : {"Alice was tired", "the white rabbit", "x"}) docs.push_back(Document(text));
  try {
    runner.post("/classify", docs);
    FAIL("the request ran");
  } catch (const models::NonFiniteOutput& e) {
    CHECK(e.rows() == std::vector<std::size_t>{1});
    CHECK_THAT(std::string(e.what()), testing::contains("document 1 of 3"));
  }
  DocumentArray others;  // without it, the others are fine
  others.push_back(Document("Alice was tired"));
  others.push_back(Document("x"));
  CHECK(runner.post("/classify", others).size() == 2);
}

TEST_CASE("flows/classify.yml runs as shipped on its tiny checkpoint and writes the pipeline's labels",
          "[sequence_classifier][launcher]") {
  const Goldens g = bert_goldens();
  const auto dir = testing::scratch_dir("shipped classify");
  // Golden single texts of one line each, one document a line.
  std::vector<std::size_t> rows;
  std::string input;
  for (std::size_t i = 0; i < g.texts.size(); ++i) {
    if (g.has_pair[i] || g.texts[i].empty() || g.texts[i].find_first_of("\n\t") != std::string::npos ||
        g.texts[i].front() == ' ')
      continue;
    rows.push_back(i);
    input += g.texts[i] + "\n";
  }
  REQUIRE(rows.size() >= 8);
  testing::write_text(dir / "in.txt", input);
  const auto r = testing::run_process(fmt::format(
      "cd '{}' && env -u FLOWLINE_CLASSIFIER_MODEL FLOWLINE_OUT_DIR='{}' '{}' run flows/classify.yml --input "
      "'{}/in.txt' --set classifier.device=cpu",
      FLOWLINE_SOURCE_DIR, dir.string(), FLOWLINE_LAUNCHER, dir.string()));
  const std::string said = r.out + r.err;
  INFO(said);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(said, testing::contains("its labels mean nothing; give it a real checkpoint with --set "
                                     "classifier.model=DIR"));
  std::ifstream in(dir / "labels.jsonl");
  std::string line;
  std::size_t n = 0;
  for (; std::getline(in, line); ++n) {
    REQUIRE(n < rows.size());
    const auto o = boost::json::parse(line).as_object();
    const std::size_t row = rows[n];
    INFO(line);
    CHECK(o.at("text").as_string() == g.texts[row]);
    const auto& labels = o.at("tags").as_object().at("labels").as_array();
    REQUIRE(labels.size() == 3);
    for (std::size_t k = 0; k < 3; ++k) {
      const auto index = g.order[static_cast<std::int64_t>(row)][static_cast<std::int64_t>(k)].item<std::int64_t>();
      CHECK(labels[k].at("label").as_string() == g.labels[static_cast<std::size_t>(index)]);
      CHECK(std::abs(labels[k].at("score").to_number<double>() -
                     g.scores.at("scores")[static_cast<std::int64_t>(row)][index].item<double>()) < kTolerance);
    }
  }
  CHECK(n == rows.size());
}
