// Tests of the models room: every architecture of the table against transformers / sentence-transformers
// on tiny checkpoints of its shape (scripts/make_tiny_models.py), from token ids (and Qwen3 from texts, through
// its tokenizer); checkpoint errors.
#include "test_support.hpp"
#include "tiny_goldens.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/token_classifier.hpp"
#include "flowline/models/tokenizer.hpp"

#include "cuda_kernels.hpp"
#include "transformer.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>

using namespace flowline;
using namespace flowline::models;

namespace {

const std::filesystem::path& kTiny = testing::kTinyModels;

using testing::encode_tiny_goldens;
using testing::read_tiny_goldens;
using testing::row_cosines;

}  // namespace

TEST_CASE("every architecture's embeddings equal sentence-transformers' on its tiny checkpoint", "[models]") {
  const auto name = GENERATE(as<std::string>{}, "bert-all-poolings-dense", "bert-prompt-excluded", "xlm-roberta",
                             "mpnet", "modernbert", "qwen3", "distilbert", "distilbert-sinusoidal");
  INFO(name);
  const auto g = read_tiny_goldens(name, "embeddings");
  const EmbeddingModel model(kTiny / name, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(model.dimension() == g.expected.size(1));
  for (const std::size_t batch_size : {std::size_t{1}, std::size_t{7}, g.lengths.size()}) {
    INFO("batch size " << batch_size);
    const at::Tensor got = encode_tiny_goldens(model, g, batch_size);
    REQUIRE(got.sizes() == g.expected.sizes());
    CHECK(row_cosines(got, g.expected).min().item<double>() >= 0.99999);
    CHECK((got - g.expected).abs().max().item<double>() < 1e-4);
  }
}

TEST_CASE("MPNet counts positions from 2 whatever config.json's pad_token_id says, as transformers does", "[models]") {
  // transformers' MPNetEmbeddings fixes padding_idx at 1; a checkpoint naming another pad id embeds the same.
  const auto dir = testing::scratch_dir("mpnet pad_token_id");
  std::filesystem::copy(kTiny / "mpnet", dir, std::filesystem::copy_options::recursive);
  auto config = testing::read_text(dir / "config.json");
  const auto at = config.find("\"pad_token_id\": 1");
  REQUIRE(at != std::string::npos);
  config.replace(at, 17, "\"pad_token_id\": 0");
  testing::write_text(dir / "config.json", config);
  const auto g = read_tiny_goldens("mpnet", "embeddings");
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(row_cosines(encode_tiny_goldens(model, g, g.lengths.size()), g.expected).min().item<double>() >= 0.99999);
}

TEST_CASE("Qwen3 embeds texts as sentence-transformers does: its tokenizer, last-token pooling, the query prompt",
          "[models][qwen3]") {
  // Qwen3-Embedding's layout (scripts/make_tiny_models.py --only qwen3): the tokenizer appends <|endoftext|>
  // (after truncation too), sentence-transformers pads on the left and pools the last token; flowline packs
  // the texts without padding and pools each sequence's last token. All texts in one batch, of 1 to 128
  // tokens (three paragraphs cut at max_seq_length 128), without a prompt and with the "query" one.
  const auto dir = kTiny / "qwen3";
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(model.info().model_type == "qwen3");
  CHECK(model.checkpoint().max_seq_length == 128);
  const auto tokenizer = Tokenizer::from_folder(dir);
  const std::int32_t end_of_text = 0;  // <|endoftext|>
  std::vector<std::string> texts;
  {
    std::ifstream in(kTiny / "qwen3.texts.jsonl");
    for (std::string line; std::getline(in, line);) texts.emplace_back(boost::json::parse(line).at("text").as_string());
  }
  REQUIRE(texts.size() == 20);
  const SafetensorsFile expected(kTiny / "qwen3.texts.safetensors");
  for (const auto& [prompt_name, key] : {std::pair{"", "embeddings"}, std::pair{"query", "query"}}) {
    INFO("prompt " << prompt_name);
    const std::string prompt = *prompt_name ? model.checkpoint().prompt(prompt_name) : "";
    std::vector<std::int32_t> ids;
    std::vector<std::int64_t> lengths;
    for (const auto& t : texts) {
      const auto encoded = tokenizer->encode(prompt + t, static_cast<std::size_t>(model.checkpoint().max_seq_length));
      CHECK(encoded.back() == end_of_text);
      ids.insert(ids.end(), encoded.begin(), encoded.end());
      lengths.push_back(static_cast<std::int64_t>(encoded.size()));
    }
    CHECK(*std::max_element(lengths.begin(), lengths.end()) == 128);
    const at::Tensor got = model.encode(PackedBatch{ids, lengths});
    const at::Tensor want = expected.get(key);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(row_cosines(got, want).min().item<double>() >= 0.99999);
    CHECK((got - want).abs().max().item<double>() < 1e-4);
  }
}

TEST_CASE("a Qwen3 variant flowline does not run is refused when the checkpoint is read, naming file and key",
          "[models][qwen3]") {
  const auto dir = testing::scratch_dir("qwen3 variants");
  std::filesystem::copy(kTiny / "qwen3", dir, std::filesystem::copy_options::recursive);
  const auto original = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  const std::string file = (dir / "config.json").string();
  auto refused = [&](const char* key, boost::json::value value, const std::string& message) {
    auto config = original;
    config[key] = std::move(value);
    std::ofstream(dir / "config.json", std::ios::trunc) << boost::json::serialize(config);
    CHECK_THROWS_WITH(Checkpoint::read(dir), testing::contains("'" + file + "': " + message));
    CHECK(Checkpoint::problem(dir, Checkpoint::Use::Embedding).value_or("").find(message) != std::string::npos);
  };
  refused("use_sliding_window", true, "use_sliding_window: true is not supported");
  refused("layer_types", boost::json::array{"full_attention", "sliding_attention"},
          "layer_types: only 'full_attention' layers are supported");
  refused("attention_bias", true, "attention_bias: true is not supported");
  refused("rope_scaling", boost::json::object{{"rope_type", "yarn"}, {"factor", 4.0}},
          "rope_scaling: only rope_type 'default' is supported");
  refused("num_key_value_heads", 3, "num_key_value_heads: must divide num_attention_heads (4)");
  refused("hidden_act", "tanh", "hidden_act: 'tanh' is not supported");
  // transformers 4's keys (Qwen3-Embedding's config.json): rope_theta beside rope_scaling null.
  auto config = original;
  config.erase("rope_parameters");
  config.erase("layer_types");
  config["rope_theta"] = 1000000.0;
  config["rope_scaling"] = nullptr;
  config["sliding_window"] = nullptr;
  std::ofstream(dir / "config.json", std::ios::trunc) << boost::json::serialize(config);
  const auto g = read_tiny_goldens("qwen3", "embeddings");
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(row_cosines(encode_tiny_goldens(model, g, 7), g.expected).min().item<double>() >= 0.99999);
  config["rope_theta"] = 10000.0;  // another theta: other embeddings (the test sees the rotary positions)
  std::ofstream(dir / "config.json", std::ios::trunc) << boost::json::serialize(config);
  const EmbeddingModel other(dir, c10::Device(c10::kCPU), c10::kFloat);
  CHECK(row_cosines(encode_tiny_goldens(other, g, 7), g.expected).min().item<double>() < 0.999);
}

TEST_CASE("cross-encoders' scores equal transformers' with the CrossEncoder activation", "[models]") {
  const auto name = GENERATE(as<std::string>{}, "bert-cross-encoder", "xlm-roberta-cross-encoder");
  INFO(name);
  const auto g = read_tiny_goldens(name, "scores");
  const CrossEncoderModel model(Checkpoint::read(kTiny / name), c10::Device(c10::kCPU), c10::kFloat);
  CHECK(model.num_labels() == 1);
  CHECK(model.info().model_type == (name == "bert-cross-encoder" ? "bert" : "xlm-roberta"));
  const PackedBatch batch{g.ids, g.lengths,
                          model.info().type_vocab_size > 1 ? std::span(g.type_ids) : std::span<const std::int32_t>{}};
  const at::Tensor scores = model.score(batch);
  REQUIRE(scores.sizes() == g.expected.sizes());
  CHECK((scores - g.expected).abs().max().item<double>() < 1e-5);
  // Raw logits are the activation's inverse.
  CHECK((at::sigmoid(model.score(batch, /*raw=*/true)) - scores).abs().max().item<double>() < 1e-6);
}

TEST_CASE("a checkpoint of an unsupported model_type is refused naming the file and what runs", "[models]") {
  const auto dir = testing::scratch_dir("unsupported model type");
  std::filesystem::copy(kTiny / "mpnet", dir, std::filesystem::copy_options::recursive);
  auto config = testing::read_text(dir / "config.json");
  const auto at = config.find("\"mpnet\"");
  REQUIRE(at != std::string::npos);
  config.replace(at, 7, "\"t5\"");
  std::ofstream(dir / "config.json") << config;
  CHECK_THROWS_WITH(Checkpoint::read(dir),
                    testing::contains("config.json': model_type 't5' is not supported (supported: bert, "
                                      "camembert, deberta-v2, distilbert, modernbert, mpnet, qwen3, roberta, "
                                      "xlm-roberta)"));
}

TEST_CASE("a checkpoint's unknown module or pooling mode is refused naming the file", "[models]") {
  const auto dir = testing::scratch_dir("unknown module");
  std::filesystem::copy(kTiny / "bert-prompt-excluded", dir, std::filesystem::copy_options::recursive);
  std::ofstream(dir / "1_Pooling/config.json") << R"({"pooling_mode": "median"})";
  CHECK_THROWS_WITH(Checkpoint::read(dir), testing::contains("pooling_mode 'median' is not supported"));
  std::ofstream(dir / "modules.json") << R"([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "path": "1_X", "type": "sentence_transformers.models.WeightedLayerPooling"}])";
  CHECK_THROWS_WITH(Checkpoint::read(dir),
                    testing::contains("module type 'sentence_transformers.models.WeightedLayerPooling' is not "
                                      "supported (Transformer, Pooling, Dense, Normalize)"));
}

TEST_CASE("a missing weight is refused naming the file and the tensor", "[models]") {
  const auto dir = testing::scratch_dir("missing weight");
  std::filesystem::copy(kTiny / "modernbert", dir, std::filesystem::copy_options::recursive);
  const SafetensorsFile file(dir / "model.safetensors");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& n : file.names()) {
    if (n.find("layers.1.mlp.Wi") == std::string::npos) tensors[n] = file.get(n).clone();
  }
  save_safetensors(dir / "model.safetensors", tensors);
  CHECK_THROWS_WITH(EmbeddingModel(dir, c10::Device(c10::kCPU), c10::kFloat),
                    testing::contains("no tensor 'layers.1.mlp.Wi.weight'"));
}

TEST_CASE("prompts come from config_sentence_transformers.json and an unknown name lists the known ones", "[models]") {
  const auto dir = testing::scratch_dir("prompts");
  std::filesystem::copy(kTiny / "xlm-roberta", dir, std::filesystem::copy_options::recursive);
  std::ofstream(dir / "config_sentence_transformers.json")
      << R"({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"})";
  const auto checkpoint = Checkpoint::read(dir);
  CHECK(checkpoint.prompt("passage") == "passage: ");
  CHECK(checkpoint.default_prompt_name == "query");
  CHECK_THROWS_WITH(checkpoint.prompt("doc"), testing::contains("prompt_name 'doc': the model '" + dir.string() +
                                                                "' has the prompts passage, query"));
}

TEST_CASE("on the GPU every architecture stays within the fp16 and bf16 bounds, and its CUDA graphs agree",
          "[models][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device gpu(c10::kCUDA, 0);
  const auto stream = replica_stream(gpu);  // CUDA graphs are not captured on the default stream
  c10::StreamGuard on_stream(*stream);
  for (const char* name : {"bert-all-poolings-dense", "bert-prompt-excluded", "xlm-roberta", "mpnet", "modernbert",
                           "qwen3", "distilbert", "distilbert-sinusoidal"}) {
    const auto g = read_tiny_goldens(name, "embeddings");
    for (const auto& [dtype, bound] : {std::pair{c10::kHalf, 0.999}, std::pair{c10::kBFloat16, 0.995}}) {
      const auto model = std::make_shared<const EmbeddingModel>(kTiny / name, gpu, dtype);
      const at::Tensor got = encode_tiny_goldens(*model, g, 7).cpu();
      const double worst = row_cosines(got, g.expected).min().item<double>();
      WARN(name << " on the GPU in " << c10::toString(dtype) << ": worst cosine " << worst << " over "
                << g.lengths.size() << " sequences" << (model->graphable() ? "; graphed" : ""));
      CHECK(worst >= bound);
      if (!model->graphable() || g.prompt_length) continue;
      // The goldens are raw token sequences, some longer than the tokenizer's model_max_length (64 for the
      // tiny checkpoints): graphs for the longest of them.
      const std::int64_t longest = *std::max_element(g.lengths.begin(), g.lengths.end());
      GraphedEmbeddingModel graphs(model, 64, 8192, std::max(longest, model->checkpoint().max_seq_length));
      const PackedBatch batch{g.ids, g.lengths};
      REQUIRE(graphs.fits(batch));
      const at::Tensor graphed = graphs.encode(batch).cpu();
      const at::Tensor eager = model->encode(batch).cpu();
      CHECK(row_cosines(graphed, eager).min().item<double>() >= 0.99999);
    }
  }
  for (const char* name : {"bert-cross-encoder", "xlm-roberta-cross-encoder"}) {
    const auto g = read_tiny_goldens(name, "scores");
    const CrossEncoderModel model(Checkpoint::read(kTiny / name), gpu, c10::kHalf);
    const PackedBatch batch{g.ids, g.lengths,
                            model.info().type_vocab_size > 1 ? std::span(g.type_ids) : std::span<const std::int32_t>{}};
    const double worst = (model.score(batch).cpu() - g.expected).abs().max().item<double>();
    WARN(name << " on the GPU in fp16: largest score difference " << worst);
    CHECK(worst < 5e-3);
  }
}

TEST_CASE("padded passes: a few token counts, eight per power of two, never fewer tokens than the pass", "[models]") {
  namespace d = models::detail;
  CHECK(d::padded_pass_tokens(1) == 256);
  CHECK(d::padded_pass_tokens(256) == 256);
  CHECK(d::padded_pass_tokens(257) == 288);  // steps of 32 between 256 and 512
  CHECK(d::padded_pass_tokens(2400) == 2560);
  std::int64_t sizes = 0;
  for (std::int64_t t = 1; t <= 1 << 16; ++t) {
    const std::int64_t p = d::padded_pass_tokens(t);
    REQUIRE(p >= t);
    REQUIRE(p - t <= std::max<std::int64_t>(255, t / 8));
    if (p == t) ++sizes;
  }
  CHECK(sizes == 1 + 8 * 8);  // 256, then eight per power of two up to 65,536
  CHECK(GraphedEmbeddingModel::bucket(3000) == d::padded_pass_tokens(3000));
}

TEST_CASE(
    "on the GPU a token classifier's padded pass gives one row per token, as the CPU's, and its padding changes "
    "no row",
    "[models][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device gpu(c10::kCUDA, 0);
  const auto stream = replica_stream(gpu);
  c10::StreamGuard on_stream(*stream);
  for (const char* name : {"bert-token-classifier", "roberta-token-classifier", "distilbert-token-classifier",
                           "mpnet-token-classifier", "modernbert-token-classifier", "qwen3-token-classifier"}) {
    const auto checkpoint = Checkpoint::read(kTiny / name);
    const TokenClassifierModel cpu(checkpoint, c10::Device(c10::kCPU), c10::kFloat);
    const TokenClassifierModel half(checkpoint, gpu, c10::kHalf);
    // 37 texts of 1 to 60 tokens: 1,000-odd tokens, padded to the next of padded_pass_tokens' sizes.
    std::vector<std::int64_t> lengths;
    std::vector<std::int32_t> ids;
    for (std::int64_t s = 0; s < 37; ++s) {
      lengths.push_back(1 + (s * 29) % 60);
      for (std::int64_t t = 0; t < lengths.back(); ++t) {
        ids.push_back(static_cast<std::int32_t>((s * 131 + t * 17) % cpu.info().vocab_size));
      }
    }
    const auto T = static_cast<std::int64_t>(ids.size());
    const std::int64_t padded = models::detail::padded_pass_tokens(T);
    REQUIRE(padded > T + 1);
    const at::Tensor expected = cpu.logits(PackedBatch{ids, lengths, {}, {}});
    const at::Tensor got = half.logits(PackedBatch{ids, lengths, {}, {}}).cpu();
    REQUIRE(got.sizes() == expected.sizes());
    // fp16 against fp32 on random weights (no trained model's margins): the figure is shown.
    const double worst = (got.softmax(1) - expected.softmax(1)).abs().max().item<double>();
    WARN(name << " on the GPU in fp16, " << T << " tokens padded to " << padded
              << ": largest probability difference from the CPU's fp32 " << worst);
    CHECK(worst < 5e-2);
    // One more text where the padding was (the same padded size, so the same kernels): the other rows are
    // bit for bit the same — the padding rows reach no real one.
    std::vector<std::int32_t> more = ids;
    std::vector<std::int64_t> more_lengths = lengths;
    more_lengths.push_back(std::min<std::int64_t>(padded - T, 9));
    for (std::int64_t t = 0; t < more_lengths.back(); ++t) more.push_back(static_cast<std::int32_t>(7 + t));
    REQUIRE(models::detail::padded_pass_tokens(static_cast<std::int64_t>(more.size())) == padded);
    const at::Tensor with_more = half.logits(PackedBatch{more, more_lengths, {}, {}}).cpu();
    CHECK(with_more.size(0) == static_cast<std::int64_t>(more.size()));
    CHECK(at::equal(with_more.narrow(0, 0, T), got));
    // The last text alone (a pass of its own, another padded size and kernels) gives its rows of the whole pass.
    const std::span<const std::int32_t> last(ids.end() - lengths.back(), ids.end());
    const std::vector<std::int64_t> one{lengths.back()};
    const at::Tensor alone = half.logits(PackedBatch{last, one, {}, {}}).cpu();
    CHECK((alone - got.narrow(0, T - lengths.back(), lengths.back())).abs().max().item<double>() < 1e-2);
  }
}

TEST_CASE("packed attention's work list names each tile of 64 queries of each sequence once, then -1",
          "[models][attention]") {
  namespace d = models::detail;
  const std::vector<std::int64_t> lengths{1, 64, 65, 130};
  const std::int64_t total = 1 + 64 + 65 + 130, slots = d::attention_tiles_bound(total, 4);
  CHECK(slots >= 1 + 1 + 2 + 3);
  std::vector<std::int64_t> list(static_cast<std::size_t>(slots), 7);
  d::write_attention_tiles(lengths.data(), 4, list.data(), slots);
  auto entry = [](std::int64_t start, std::int64_t length, std::int64_t tile) {
    return start << 32 | length << d::kAttentionTileBits | tile;
  };
  const std::vector<std::int64_t> expected{entry(0, 1, 0),     entry(1, 64, 0),    entry(65, 65, 0),  entry(65, 65, 1),
                                           entry(130, 130, 0), entry(130, 130, 1), entry(130, 130, 2)};
  CHECK(std::vector<std::int64_t>(list.begin(), list.begin() + 7) == expected);
  CHECK(std::all_of(list.begin() + 7, list.end(), [](std::int64_t e) { return e == -1; }));
  // The bound holds however the tokens fall into sequences (each sequence adds at most one partial tile):
  // 64 sequences of one token need 64 tiles, one of 64 tokens needs one.
  const std::vector<std::int64_t> ones(64, 1);
  std::vector<std::int64_t> room(static_cast<std::size_t>(d::attention_tiles_bound(64, 64)));
  CHECK_NOTHROW(d::write_attention_tiles(ones.data(), 64, room.data(), static_cast<std::int64_t>(room.size())));
  std::vector<std::int64_t> few(3);
  CHECK_THROWS_WITH(d::write_attention_tiles(lengths.data(), 4, few.data(), 3), testing::contains("more tiles"));
  const std::int64_t too_long = std::int64_t{1} << d::kAttentionLengthBits;
  CHECK_THROWS_WITH(d::write_attention_tiles(&too_long, 1, list.data(), slots), testing::contains("tokens is over"));
}

TEST_CASE("on the GPU flowline's packed attention and fused add + LayerNorm agree with LibTorch's operations",
          "[models][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device gpu(c10::kCUDA, 0);
  const auto& kernels = models::detail::cuda_kernels();
  at::manual_seed(0);
  const std::vector<std::int64_t> lengths{1, 7, 63, 64, 65, 130, 300, 2};
  std::vector<std::int32_t> starts{0};
  for (const auto len : lengths) starts.push_back(starts.back() + static_cast<std::int32_t>(len));
  const std::int64_t T = starts.back() + 5, heads = 4, positions = 320;  // 5 tokens of no sequence at the end
  // The work list with spare slots (-1), as a CUDA graph's is.
  auto work_list = [&](std::span<const std::int64_t> lens) {
    std::vector<std::int64_t> list(static_cast<std::size_t>(models::detail::attention_tiles_bound(T, 12)));
    models::detail::write_attention_tiles(lens.data(), static_cast<std::int64_t>(lens.size()), list.data(),
                                          static_cast<std::int64_t>(list.size()));
    return at::tensor(list, at::kLong).to(gpu);
  };
  const at::Tensor tiles = work_list(lengths);
  const at::Tensor bias = at::randn({heads, 2 * positions - 1}, at::kFloat).to(gpu);
  struct Mask {
    const char* name;
    std::int64_t kv_heads, window;
    bool causal, bias;
  };
  // Every mask the architectures use: none (BERT, XLM-R), a relative bias (MPNet), a sliding window
  // (ModernBERT), causal with grouped key/value heads (Qwen3), and the combinations.
  const std::vector<Mask> masks{{"none", 4, 0, false, false},
                                {"relative bias", 4, 0, false, true},
                                {"window 40", 4, 40, false, false},
                                {"causal, 2 kv heads", 2, 0, true, false},
                                {"causal, window 70", 1, 70, true, false},
                                {"bias, window 100", 4, 100, false, true}};
  for (const auto& mask : masks) {
    for (const std::int64_t head_dim : {8, 24, 64, 128}) {
      for (const auto& [dtype, tolerance] : {std::pair{c10::kHalf, 1e-2}, std::pair{c10::kBFloat16, 4e-2}}) {
        // q, k, v as views of one [T, (heads + 2 kv_heads) * head_dim] projection, as the architectures make them.
        const std::int64_t kv = mask.kv_heads, group = heads / kv;
        const at::Tensor qkv = (at::randn({T, (heads + 2 * kv) * head_dim}, at::kFloat) * 0.5).to(gpu, dtype);
        const at::Tensor q = qkv.narrow(1, 0, heads * head_dim).view({T, heads, head_dim});
        const at::Tensor k = qkv.narrow(1, heads * head_dim, kv * head_dim).view({T, kv, head_dim});
        const at::Tensor v = qkv.narrow(1, (heads + kv) * head_dim, kv * head_dim).view({T, kv, head_dim});
        models::detail::PackedAttention options;
        options.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
        options.window = mask.window;
        options.causal = mask.causal;
        if (mask.bias) options.relative_bias = bias;
        const at::Tensor got = kernels.attention(q, k, v, tiles, 300, options).to(at::kFloat);
        double worst = 0;
        for (std::size_t s = 0; s < lengths.size(); ++s) {
          const std::int64_t len = lengths[s];
          auto rows = [&](const at::Tensor& t) {  // [heads, len, head_dim] in float32, key/value heads repeated
            return t.narrow(0, starts[s], len).to(at::kFloat).transpose(0, 1).repeat_interleave(heads / t.size(1), 0);
          };
          const at::Tensor offset = at::arange(len, at::kLong).unsqueeze(0) - at::arange(len, at::kLong).unsqueeze(1);
          at::Tensor scores = at::matmul(rows(q), rows(k).transpose(1, 2)) * options.scale;
          if (mask.bias) scores = scores + bias.index({at::indexing::Slice(), (offset + positions - 1).to(gpu)});
          at::Tensor hidden = at::zeros({len, len}, at::kBool);  // key - query offsets the query may not see
          if (mask.window > 0) hidden = hidden | (offset.abs() > mask.window);
          if (mask.causal) hidden = hidden | (offset > 0);
          scores = scores.masked_fill(hidden.to(gpu), -INFINITY);
          const at::Tensor expected = at::matmul(at::softmax(scores, -1), rows(v)).transpose(0, 1).reshape({len, -1});
          worst = std::max(worst, (got.narrow(0, starts[s], len) - expected).abs().max().item<double>());
        }
        INFO(mask.name << ", head_dim " << head_dim << " (" << group << " query heads a key head) in "
                       << c10::toString(dtype) << ": largest difference " << worst);
        CHECK(worst < tolerance);
      }
    }
  }
  // Rotary embeddings applied by the kernel as it loads q and k: the same bits as rotating them first.
  {
    std::vector<std::int64_t> position_list;
    for (const auto len : lengths)
      for (std::int64_t p = 0; p < len; ++p) position_list.push_back(p);
    position_list.resize(static_cast<std::size_t>(T), 0);
    const at::Tensor token_positions = at::tensor(position_list, at::kLong).to(gpu);
    for (const std::int64_t head_dim : {16, 64, 128}) {
      for (const auto dtype : {c10::kHalf, c10::kBFloat16}) {
        const at::Tensor qkv = (at::randn({T, 3 * heads * head_dim}, at::kFloat) * 0.5).to(gpu, dtype);
        auto part = [&](std::int64_t i) {
          return qkv.narrow(1, i * heads * head_dim, heads * head_dim).view({T, heads, head_dim});
        };
        const auto [cos, sin] = models::detail::rotary_tables(10000.0, head_dim, positions, dtype, gpu);
        models::detail::PackedAttention options;
        options.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
        options.window = 50;
        const at::Tensor expected =
            kernels.attention(kernels.rotate(part(0), cos, sin, token_positions),
                              kernels.rotate(part(1), cos, sin, token_positions), part(2), tiles, 300, options);
        options.rotary_cos = cos;
        options.rotary_sin = sin;
        const at::Tensor got = kernels.attention(part(0), part(1), part(2), tiles, 300, options);
        INFO("rotary in the kernel, head_dim " << head_dim << " in " << c10::toString(dtype));
        CHECK(at::equal(got.narrow(0, 0, starts.back()), expected.narrow(0, 0, starts.back())));
      }
    }
  }
  // Replicas launch side by side with different longest sequences (so different shared memory needs).
  std::vector<std::thread> replicas;
  std::atomic<int> failures{0};
  for (const std::int64_t longest : {64, 300}) {
    replicas.emplace_back([&, longest] {
      const auto stream = replica_stream(gpu);
      c10::StreamGuard on_stream(*stream);
      const at::Tensor qkv = at::randn({T, 3 * heads * 64}, at::TensorOptions().dtype(c10::kHalf).device(gpu));
      auto part = [&](std::int64_t i) { return qkv.narrow(1, i * heads * 64, heads * 64).view({T, heads, 64}); };
      const std::vector<std::int64_t> two_of_64{64, 64};
      const at::Tensor short_tiles = work_list(two_of_64);
      models::detail::PackedAttention options;
      options.scale = 0.125;
      options.relative_bias = bias;
      try {
        at::Tensor out;
        for (int i = 0; i < 300; ++i)
          out = kernels.attention(part(0), part(1), part(2), longest == 64 ? short_tiles : tiles, longest, options);
        out.cpu();  // waits for the stream
      } catch (const std::exception& e) {
        UNSCOPED_INFO(e.what());
        ++failures;
      }
    });
  }
  for (auto& t : replicas) t.join();
  CHECK(failures == 0);
  // Rotary embeddings and gated activations: the same values to the bit as the ATen operations, by eight
  // values per thread (head_dim 64, width 1152) and one (head_dim 12, width 20).
  for (const auto dtype : {c10::kHalf, c10::kBFloat16}) {
    const auto options = at::TensorOptions().dtype(dtype).device(gpu);
    for (const std::int64_t head_dim : {64, 12}) {
      const at::Tensor qkv = at::randn({T, 3 * 4 * head_dim}, options) * 2;
      const at::Tensor qk = qkv.narrow(1, 0, 2 * 4 * head_dim).view({T, 8, head_dim});  // rows strided, as ModernBERT's
      const auto [cos, sin] = models::detail::rotary_tables(10000.0, head_dim, 512, dtype, gpu);
      const at::Tensor positions = at::randint(0, 512, {T}, at::TensorOptions().dtype(at::kLong).device(gpu));
      INFO("rotate, head_dim " << head_dim << " in " << c10::toString(dtype));
      CHECK(at::equal(kernels.rotate(qk, cos, sin, positions),
                      models::detail::rotate(qk, cos.index_select(0, positions), sin.index_select(0, positions))));
    }
    for (const std::int64_t width : {1152, 20}) {
      const at::Tensor up = at::randn({T, 2 * width}, options) * 3;
      for (const auto& [kind, name] : {std::pair{models::detail::GatedActivation::gelu, "gelu"},
                                       std::pair{models::detail::GatedActivation::gelu_tanh, "gelu_pytorch_tanh"},
                                       std::pair{models::detail::GatedActivation::silu, "silu"},
                                       std::pair{models::detail::GatedActivation::relu, "relu"}}) {
        const at::Tensor expected = models::detail::activate(up.narrow(1, 0, width), name) * up.narrow(1, width, width);
        const at::Tensor got = kernels.gated(up, kind);
        INFO(name << ", width " << width << " in " << c10::toString(dtype) << ": "
                  << (got.to(at::kFloat) - expected.to(at::kFloat)).abs().max().item<double>());
        CHECK(at::equal(got, expected));
      }
    }
  }
  for (const std::int64_t width : {8, 32, 384, 768, 1024, 2048}) {
    for (const auto dtype : {c10::kHalf, c10::kBFloat16}) {
      const auto options = at::TensorOptions().dtype(dtype).device(gpu);
      const at::Tensor a = at::randn({1000, width}, options) * 3, b = at::randn({1000, width}, options) + 1;
      const at::Tensor weight = at::randn({width}, options), shift = at::randn({width}, options);
      for (const bool with_bias : {true, false}) {
        const at::Tensor bias_or_none = with_bias ? shift : at::Tensor();
        const at::Tensor sum = at::empty_like(a);
        const at::Tensor got = kernels.add_layer_norm(a, b, weight, bias_or_none, 1e-5, sum);
        const at::Tensor expected = at::layer_norm(a + b, {width}, weight, bias_or_none, 1e-5);
        INFO("width " << width << " in " << c10::toString(dtype) << (with_bias ? " with" : " without") << " bias");
        CHECK(at::equal(sum, a + b));
        // One rounding of the dtype apart at most (float32 sums in another order).
        const at::Tensor difference = (got.to(at::kFloat) - expected.to(at::kFloat)).abs();
        const at::Tensor allowed = expected.to(at::kFloat).abs() * (dtype == c10::kHalf ? 1e-3 : 8e-3) + 1e-3;
        CHECK((difference <= allowed).all().item<bool>());
        // b as one row added to every row (a linear's bias), and no b (a alone normalised).
        const at::Tensor row = b[0];
        for (const bool broadcast : {true, false}) {
          const at::Tensor other = broadcast ? row : at::Tensor();
          const at::Tensor one = kernels.add_layer_norm(a, other, weight, bias_or_none, 1e-5, sum);
          const at::Tensor input = broadcast ? a + row : a;
          const at::Tensor reference = at::layer_norm(input, {width}, weight, bias_or_none, 1e-5);
          INFO((broadcast ? "b of one row" : "no b"));
          CHECK(at::equal(sum, input));
          const at::Tensor gap = (one.to(at::kFloat) - reference.to(at::kFloat)).abs();
          CHECK(
              (gap <= reference.to(at::kFloat).abs() * (dtype == c10::kHalf ? 1e-3 : 8e-3) + 1e-3).all().item<bool>());
        }
      }
    }
  }
}
