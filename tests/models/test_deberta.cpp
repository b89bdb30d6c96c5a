// DeBERTa-v2/v3 (issue 52 §2) on tiny checkpoints of DeBERTa-v3's layout (scripts/make_tiny_models.py --only
// deberta): token ids and texts end to end against sentence-transformers, the options v3 leaves off
// (deberta-v2-variants), DebertaV2ForSequenceClassification's ContextPooler head against transformers'
// pipeline, the config.json variants refused naming the key, and on a GPU the fp16/bf16 bounds (with heads of 64,
// the packed kernel's disentangled terms).
#include "test_support.hpp"
#include "tiny_goldens.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <boost/json.hpp>

#include <fstream>
#include <map>

using namespace flowline;
using namespace flowline::models;

namespace {

const std::filesystem::path& kTiny = testing::kTinyModels;

using testing::encode_tiny_goldens;
using testing::read_tiny_goldens;
using testing::worst_cosine;

}  // namespace

TEST_CASE(
    "a deberta-v2 checkpoint embeds token ids as sentence-transformers does, in v3's layout and the options v3 leaves "
    "off",
    "[models][deberta]") {
  const auto name = GENERATE(as<std::string>{}, "deberta", "deberta-v2-variants");
  INFO(name);
  const auto g = read_tiny_goldens(name);
  const EmbeddingModel model(kTiny / name, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(model.info().model_type == "deberta-v2");
  CHECK(model.info().max_positions == 512);
  // Sequences up to 200 tokens: far past the 8 buckets (deberta) and the 24 relative positions (variants).
  CHECK(*std::max_element(g.lengths.begin(), g.lengths.end()) == 200);
  for (const std::size_t batch_size : {std::size_t{1}, std::size_t{7}, g.lengths.size()}) {
    INFO("batch size " << batch_size);
    const at::Tensor got = encode_tiny_goldens(model, g, batch_size);
    REQUIRE(got.sizes() == g.expected.sizes());
    CHECK(worst_cosine(got, g.expected) >= 0.99999);
    CHECK((got - g.expected).abs().max().item<double>() < 1e-4);
  }
}

TEST_CASE("a deberta-v2 batch gives each sequence its own embedding, cut into padded segments or padded whole",
          "[models][deberta]") {
  const EmbeddingModel model(kTiny / "deberta", c10::Device(c10::kCPU), c10::kFloat);
  const auto g = read_tiny_goldens("deberta");
  // 1,100 sequences alternating 5 and 37 tokens: a run per sequence, more runs than the segment cut takes, so
  // the batch is padded whole; in batches of 100 the cut makes segments. Both as each sequence alone.
  testing::TinyGoldens mixed;
  for (std::int64_t s = 0; s < 1100; ++s) {
    const std::int64_t length = s % 2 == 0 ? 5 : 37;
    mixed.ids.insert(mixed.ids.end(), g.ids.begin() + s % 2, g.ids.begin() + s % 2 + length);
    mixed.lengths.push_back(length);
  }
  const at::Tensor alone =
      at::cat({model.encode(PackedBatch{std::span(mixed.ids).subspan(0, 5), std::vector<std::int64_t>{5}}),
               model.encode(PackedBatch{std::span(mixed.ids).subspan(5, 37), std::vector<std::int64_t>{37}})});
  for (const std::size_t batch_size : {std::size_t{100}, mixed.lengths.size()}) {
    INFO("batch size " << batch_size);
    const at::Tensor got = encode_tiny_goldens(model, mixed, batch_size);
    REQUIRE(got.size(0) == 1100);
    CHECK((got.narrow(0, 0, 2) - alone).abs().max().item<double>() < 1e-5);
    CHECK((got.narrow(0, 1098, 2) - alone).abs().max().item<double>() < 1e-5);  // the same two, last in the batch
  }
}

TEST_CASE("a deberta-v2 checkpoint of v3's layout embeds texts as sentence-transformers does, through its tokenizer",
          "[models][deberta]") {
  const auto dir = kTiny / "deberta";
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  const auto tokenizer = Tokenizer::from_folder(dir);
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  for (const auto& line : testing::read_json_lines(kTiny / "deberta.texts.jsonl")) {
    const auto encoded = tokenizer->encode(std::string(line.at("text").as_string()),
                                           static_cast<std::size_t>(model.checkpoint().max_seq_length));
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    lengths.push_back(static_cast<std::int64_t>(encoded.size()));
  }
  REQUIRE(lengths.size() == 16);
  CHECK(*std::max_element(lengths.begin(), lengths.end()) == 64);  // two paragraphs cut at max_seq_length
  const at::Tensor want = SafetensorsFile(kTiny / "deberta.texts.safetensors").get("embeddings");
  const at::Tensor got = model.encode(PackedBatch{ids, lengths});
  REQUIRE(got.sizes() == want.sizes());
  CHECK(worst_cosine(got, want) >= 0.99999);
  CHECK((got - want).abs().max().item<double>() < 1e-4);
}

TEST_CASE("a deberta-v2 sequence classifier (ContextPooler) scores texts and pairs as transformers' pipeline does",
          "[models][deberta]") {
  const auto dir = kTiny / "deberta-sequence-classifier";
  CHECK_FALSE(Checkpoint::problem(dir, Checkpoint::Use::CrossEncoder).has_value());
  const CrossEncoderModel model(Checkpoint::read(dir), c10::Device(c10::kCPU), c10::kFloat);
  REQUIRE(model.num_labels() == 3);
  CHECK(model.info().type_vocab_size == 1);  // no token types: pairs go without type ids, as transformers ignores them
  const auto tokenizer = Tokenizer::from_folder(dir);
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  const auto inputs = testing::read_json_lines(kTiny / "deberta-sequence-classifier.texts.jsonl");
  for (const auto& x : inputs) {
    const std::string text(x.at("text").as_string());
    std::size_t n = 0;
    if (const auto* pair = x.if_contains("text_pair")) {
      n = tokenizer->encode_pair_into(text, std::string(pair->as_string()), 128, ids, nullptr);
    } else {
      n = tokenizer->encode_into(text, 128, ids);
    }
    lengths.push_back(static_cast<std::int64_t>(n));
  }
  REQUIRE(lengths.size() == 19);
  const SafetensorsFile want(kTiny / "deberta-sequence-classifier.texts.safetensors");
  const at::Tensor logits = model.score(PackedBatch{ids, lengths}, /*raw=*/true);
  REQUIRE(logits.sizes() == want.get("none").sizes());
  CHECK((logits - want.get("none")).abs().max().item<double>() < 1e-4);
  // Three labels, no problem_type: the pipeline's softmax.
  CHECK((at::softmax(logits, 1) - want.get("scores")).abs().max().item<double>() < 1e-4);
}

TEST_CASE("a deberta-v2 config.json flowline cannot run is refused when the checkpoint is read, naming the key",
          "[models][deberta]") {
  const auto dir = testing::scratch_dir("deberta variants");
  std::filesystem::copy(kTiny / "deberta-sequence-classifier", dir, std::filesystem::copy_options::recursive);
  const auto original = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  const std::string file = (dir / "config.json").string();
  const std::string weights = (dir / "model.safetensors").string();
  auto refused = [&](const char* key, boost::json::value value, const std::string& message) {
    INFO(key);
    auto config = original;
    config[key] = std::move(value);
    testing::write_text(dir / "config.json", boost::json::serialize(config));
    // Each names its file: config.json, or model.safetensors for a tensor config.json implies.
    const std::string named = "'" + (message.starts_with("no tensor") ? weights : file) + "': " + message;
    CHECK_THROWS_WITH(Checkpoint::read(dir), testing::contains(named));
    CHECK(Checkpoint::problem(dir, Checkpoint::Use::CrossEncoder).value_or("").find(named) != std::string::npos);
  };
  refused("conv_kernel_size", 3, "conv_kernel_size: 3: DeBERTa-v2's convolution layer is not supported (only 0)");
  refused("pos_att_type", "p2c|p2p", "pos_att_type: 'p2p' is not supported (c2p, p2c)");
  refused("pos_att_type", 3, "pos_att_type: must be a string or a list of strings");
  refused("norm_rel_ebd", "batch_norm", "norm_rel_ebd: 'batch_norm' is not supported (none, layer_norm)");
  refused("share_att_key", "yes", "share_att_key: must be true or false");
  refused("position_buckets", 1, "position_buckets: 1 leaves no bucket on either side");
  refused("position_buckets", 16, "2 * position_buckets, hidden_size: [32, 32] disagrees with the weights");
  refused("max_relative_positions", 5, "max_relative_positions: 5 must exceed position_buckets / 2 + 1 (5)");
  refused("num_hidden_layers", 2, "num_hidden_layers: 2, but '" + weights + "' holds 3");
  refused("num_attention_heads", 5, "hidden_size: 32 must be a positive multiple of num_attention_heads 5");
  refused("attention_head_size", 16, "attention_head_size: must be hidden_size / num_attention_heads (8)");
  refused("intermediate_size", 65, "intermediate_size, hidden_size: [65, 32] disagrees with the weights");
  refused("layer_norm_eps", 0, "layer_norm_eps: must be");
  refused("hidden_act", "swishy", "hidden_act: 'swishy' is not supported");
  // v3 has neither absolute positions nor token types in its weights: asking for them names the tensor.
  refused("position_biased_input", true, "no tensor 'deberta.embeddings.position_embeddings.weight'");
  refused("type_vocab_size", 2, "no tensor 'deberta.embeddings.token_type_embeddings.weight'");
  // The sequence head's settings too, when the checkpoint is read (so by validation).
  refused("pooler_hidden_size", 16, "pooler_hidden_size: must equal hidden_size (32)");
  refused("pooler_hidden_act", "swishy", "pooler_hidden_act: 'swishy' is not supported");
  testing::write_text(dir / "config.json", boost::json::serialize(original));
  CHECK_FALSE(Checkpoint::problem(dir, Checkpoint::Use::CrossEncoder).has_value());
}

TEST_CASE("on the GPU a deberta-v2 checkpoint stays within the fp16 and bf16 bounds (padded attention, position terms)",
          "[models][deberta][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device gpu(c10::kCUDA, 0);
  for (const char* name : {"deberta", "deberta-v2-variants"}) {
    const auto g = read_tiny_goldens(name);
    for (const auto& [dtype, bound] :
         {std::pair{c10::kFloat, 0.99999}, std::pair{c10::kHalf, 0.999}, std::pair{c10::kBFloat16, 0.995}}) {
      const EmbeddingModel model(kTiny / name, gpu, dtype);
      CHECK_FALSE(model.graphable());  // the content bias runs padded, not as the packed kernel
      const double worst = worst_cosine(encode_tiny_goldens(model, g, 7), g.expected);
      WARN(name << " on the GPU in " << c10::toString(dtype) << ": worst cosine " << worst);
      CHECK(worst >= bound);
    }
  }
}

namespace {

// The tiny deberta checkpoint widened to heads of 64 (hidden 128 in 2 heads, 2 layers) with DeBERTa-v3's 256
// buckets over 512 positions, random weights large enough for the position terms to move the embeddings:
// what runs the packed kernel with the disentangled terms on a GPU (the tiny checkpoints' heads of 8 do not).
// `relative` false writes the same weights without relative attention.
std::filesystem::path deberta_heads_of_64(const std::string& test, bool relative) {
  const auto dir = testing::scratch_dir(test);
  std::filesystem::copy(kTiny / "deberta", dir, std::filesystem::copy_options::recursive);
  const SafetensorsFile tiny(kTiny / "deberta" / "model.safetensors");
  const at::Generator generator = at::detail::createCPUGenerator(52);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& name : tiny.names()) {
    if (name.find("layer.2.") != std::string::npos) continue;
    std::vector<std::int64_t> shape;
    for (const std::int64_t size : tiny.get(name).sizes())
      shape.push_back(size == 32 ? 128 : size == 64 ? 256 : size == 16 ? 512 : size);
    const bool norm = name.find("LayerNorm.weight") != std::string::npos;
    const bool bias = name.ends_with(".bias");
    const at::Tensor noise = at::randn(shape, generator);
    tensors[name] = norm ? 1.0 + 0.1 * noise : bias ? 0.02 * noise : 0.15 * noise;
  }
  save_safetensors(dir / "model.safetensors", tensors);
  auto config = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  config["hidden_size"] = 128;
  config["num_attention_heads"] = 2;
  config["intermediate_size"] = 256;
  config["num_hidden_layers"] = 2;
  config["position_buckets"] = 256;
  config["pooler_hidden_size"] = 128;
  config["relative_attention"] = relative;
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  testing::write_text(dir / "1_Pooling" / "config.json",
                      R"({"embedding_dimension": 128, "pooling_mode": "mean", "include_prompt": true})");
  return dir;
}

}  // namespace

TEST_CASE("on the GPU a deberta-v2 checkpoint with heads of 64 runs the packed kernel within the fp16 and bf16 bounds",
          "[models][deberta][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto dir = deberta_heads_of_64("deberta heads of 64", true);
  // Lengths past the 128 distances the buckets keep exact (log buckets beyond), every tail of a 64-query tile,
  // and many short ones: the segment cut makes several segments of one pass.
  std::vector<std::int64_t> lengths{300, 257, 200, 130, 129, 128, 70, 65, 64, 63, 17, 2, 1};
  for (int i = 0; i < 200; ++i) lengths.push_back(3 + i % 9);
  std::vector<std::int32_t> ids;
  at::Generator generator = at::detail::createCPUGenerator(7);
  for (const std::int64_t length : lengths) {
    const at::Tensor row = at::randint(5, 1600, {length}, generator, at::kInt);
    ids.insert(ids.end(), row.data_ptr<std::int32_t>(), row.data_ptr<std::int32_t>() + length);
  }
  const PackedBatch batch{ids, lengths};
  const at::Tensor want = EmbeddingModel(dir, c10::Device(c10::kCPU), c10::kFloat).encode(batch);
  // The position terms matter at this scale: without them the embeddings are others.
  const auto plain = deberta_heads_of_64("deberta heads of 64 without relative attention", false);
  CHECK(worst_cosine(EmbeddingModel(plain, c10::Device(c10::kCPU), c10::kFloat).encode(batch), want) < 0.99);
  const c10::Device gpu(c10::kCUDA, 0);
  for (const auto& [dtype, bound] : {std::pair{c10::kHalf, 0.999}, std::pair{c10::kBFloat16, 0.995}}) {
    const EmbeddingModel model(dir, gpu, dtype);
    const at::Tensor whole = model.encode(batch).cpu();
    const double worst = worst_cosine(whole, want);
    WARN("heads of 64 on the GPU in " << c10::toString(dtype) << ": worst cosine " << worst);
    CHECK(worst >= bound);
    // Each sequence alone (one segment, one tile list) gives what it gives in the mixed pass.
    for (const std::size_t s : {std::size_t{0}, std::size_t{6}, std::size_t{12}}) {
      std::int64_t begin = 0;
      for (std::size_t i = 0; i < s; ++i) begin += lengths[i];
      const std::vector<std::int64_t> one{lengths[s]};
      const at::Tensor alone = model.encode(PackedBatch{std::span(ids).subspan(begin, lengths[s]), one}).cpu();
      CHECK(worst_cosine(alone, whole.narrow(0, static_cast<std::int64_t>(s), 1)) >= 0.9999);
    }
  }
}
