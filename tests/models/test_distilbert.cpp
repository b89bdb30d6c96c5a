// DistilBERT (issue 52 §2): msmarco-distilbert-base-tas-b's layout at tiny sizes (scripts/make_tiny_models.py
// --only distilbert): texts end to end through the checkpoint's WordPiece tokenizer against
// sentence-transformers, learned and sinusoidal positions, the "distilbert." prefix, and the config.json
// variants refused naming the key. The token-id goldens are rows of test_models.cpp's parity test.
#include "test_support.hpp"
#include "tiny_goldens.hpp"

#include "flowline/error.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <fstream>
#include <map>

using namespace flowline;
using namespace flowline::models;

namespace {

const std::filesystem::path& kTiny = testing::kTinyModels;

std::vector<std::string> read_texts(const std::filesystem::path& file) {
  std::vector<std::string> texts;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) texts.emplace_back(boost::json::parse(line).at("text").as_string());
  return texts;
}

using testing::worst_cosine;

}  // namespace

TEST_CASE("DistilBERT embeds texts as sentence-transformers does, with learned or sinusoidal positions",
          "[models][distilbert]") {
  const auto name = GENERATE(as<std::string>{}, "distilbert", "distilbert-sinusoidal");
  INFO(name);
  const auto dir = kTiny / name;
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(model.info().model_type == "distilbert");
  CHECK(model.info().num_layers == 6);
  CHECK(model.info().type_vocab_size == 1);
  CHECK((model.checkpoint().modules.pooling == std::vector<Pooling>{Pooling::Cls}));
  CHECK_FALSE(model.checkpoint().modules.normalize);  // tas-b scores by dot product
  const auto tokenizer = Tokenizer::from_folder(dir);
  const auto texts = read_texts(kTiny / (name + ".texts.jsonl"));
  REQUIRE(texts.size() == 16);
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  for (const auto& t : texts) {
    const auto encoded = tokenizer->encode(t, static_cast<std::size_t>(model.checkpoint().max_seq_length));
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    lengths.push_back(static_cast<std::int64_t>(encoded.size()));
  }
  CHECK(*std::max_element(lengths.begin(), lengths.end()) == 64);  // two paragraphs cut at max_seq_length
  const at::Tensor want = SafetensorsFile(kTiny / (name + ".texts.safetensors")).get("embeddings");
  const at::Tensor got = model.encode(PackedBatch{ids, lengths});
  REQUIRE(got.sizes() == want.sizes());
  CHECK(worst_cosine(got, want) >= 0.99999);
  CHECK((got - want).abs().max().item<double>() < 1e-4);
}

TEST_CASE("a DistilBERT config.json flowline cannot run is refused when the checkpoint is read, naming the key",
          "[models][distilbert]") {
  const auto dir = testing::scratch_dir("distilbert variants");
  std::filesystem::copy(kTiny / "distilbert", dir, std::filesystem::copy_options::recursive);
  const auto original = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  const std::string file = (dir / "config.json").string();
  auto refused = [&](const char* key, boost::json::value value, const std::string& message) {
    INFO(key);
    auto config = original;
    config[key] = std::move(value);
    testing::write_text(dir / "config.json", boost::json::serialize(config));
    CHECK_THROWS_WITH(Checkpoint::read(dir), testing::contains("'" + file + "': " + message));
    CHECK(Checkpoint::problem(dir, Checkpoint::Use::Embedding).value_or("").find(message) != std::string::npos);
  };
  refused("n_heads", 0, "n_heads: must be an integer in 1..1024, got 0");
  refused("n_heads", 5, "dim: 32 must be a positive multiple of n_heads 5");
  refused("n_layers", 5, "n_layers: 5, but '" + (dir / "model.safetensors").string() + "' holds 6");
  refused("dim", 64, "vocab_size, dim: [1600, 64] disagrees with the weights");
  refused("hidden_dim", 65, "hidden_dim, dim: [65, 32] disagrees with the weights");
  refused("max_position_embeddings", 128, "max_position_embeddings, dim: [128, 32] disagrees with the weights");
  refused("activation", "tanh", "activation: 'tanh' is not supported (gelu, relu)");
  refused("sinusoidal_pos_embds", "yes", "sinusoidal_pos_embds: must be true or false");
  testing::write_text(dir / "config.json", boost::json::serialize(original));
  CHECK_FALSE(Checkpoint::problem(dir, Checkpoint::Use::Embedding).has_value());
}

TEST_CASE(
    "a DistilBERT checkpoint without learned positions is refused, and sinusoidal ones are made as "
    "transformers makes them",
    "[models][distilbert]") {
  const auto dir = testing::scratch_dir("distilbert without positions");
  std::filesystem::copy(kTiny / "distilbert", dir, std::filesystem::copy_options::recursive);
  const SafetensorsFile file(dir / "model.safetensors");
  std::map<std::string, at::Tensor> tensors;
  at::Tensor learned;
  for (const auto& n : file.names()) {
    if (n == "embeddings.position_embeddings.weight")
      learned = file.get(n).clone();
    else
      tensors["distilbert." + n] = file.get(n).clone();  // as DistilBertFor* checkpoints name them
  }
  REQUIRE(learned.defined());
  save_safetensors(dir / "model.safetensors", tensors);
  CHECK_THROWS_WITH(Checkpoint::read(dir), testing::contains("no tensor 'distilbert.embeddings.position_embeddings"));
  // Sinusoidal: the table is made, so other embeddings than with the learned table.
  auto config = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  config["sinusoidal_pos_embds"] = true;
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  const EmbeddingModel sinusoidal(dir, c10::Device(c10::kCPU), c10::kFloat);
  const EmbeddingModel original(kTiny / "distilbert", c10::Device(c10::kCPU), c10::kFloat);
  const std::vector<std::int32_t> ids{2, 100, 200, 300, 3};
  const std::vector<std::int64_t> lengths{5};
  const PackedBatch batch{ids, lengths};
  CHECK(worst_cosine(sinusoidal.encode(batch), original.encode(batch)) < 0.999);
  // The sinusoidal table put back as a tensor: the same embeddings as when it is made.
  const at::Tensor j = at::arange(32, at::kDouble), pos = at::arange(512, at::kDouble).unsqueeze(1);
  const at::Tensor angles = pos / at::pow(10000.0, at::floor_divide(j, 2) * 2.0 / 32.0).unsqueeze(0);
  tensors["distilbert.embeddings.position_embeddings.weight"] =
      at::where((j.remainder(2) == 0).unsqueeze(0), at::sin(angles), at::cos(angles)).to(at::kFloat);
  save_safetensors(dir / "model.safetensors", tensors);
  const EmbeddingModel stored(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK((stored.encode(batch) - sinusoidal.encode(batch)).abs().max().item<double>() < 1e-6);
}
