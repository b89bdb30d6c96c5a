// BERT (model_type "bert"): post-LayerNorm encoder layers, learned absolute positions, token types.
// The RoBERTa family runs the same stack with positions offset by padding_idx + 1 (roberta.cpp); the layers
// (PostLayerNormLayers) serve MPNet and DistilBERT too.
#include "bert_family.hpp"

#include "../cuda_kernels.hpp"

#include "flowline/error.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>

namespace flowline::models::detail {

namespace {

// config.json as BertConfig / RobertaConfig read it, every value in range; shapes() is what the table's check
// holds it against in model.safetensors' header.
struct BertConfig {
  std::int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, table = 0, types = 2;
  std::int64_t positions = 0;  // the table's rows past the offset
  double eps = 1e-12;
  std::string act = "gelu";

  BertConfig(const ArchitectureContext& context, std::int64_t position_offset) {
    const std::string position = context.text_or("position_embedding_type", "absolute");
    if (position != "absolute")
      context.fail("position_embedding_type", fmt::format("'{}' is not supported (only 'absolute')", position));
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    table = context.int_in("max_position_embeddings", 1, kMaxPositions);
    positions = table - position_offset;
    types = context.int_in("type_vocab_size", 2, 1, kMaxVocab);
    eps = context.number_in("layer_norm_eps", 1e-12, kNormEps);
    act = context.text_or("hidden_act", "gelu");
    if (!known_activation(act) || act == "silu" || act == "swish") {
      context.fail("hidden_act", fmt::format("'{}' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)", act));
    }
    if (hidden % heads != 0) {
      context.fail("hidden_size",
                   fmt::format("{} must be a positive multiple of num_attention_heads {}", hidden, heads));
    }
    if (positions < 1) {
      context.fail("max_position_embeddings",
                   fmt::format("{} leaves no position after the offset {}", table, position_offset));
    }
  }

  WeightShapes shapes() const {
    return {"num_hidden_layers",
            layers,
            "encoder.layer.",
            {{"embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"hidden_size", hidden}}},
             {"embeddings.position_embeddings.weight", {{"max_position_embeddings", table}, {"hidden_size", hidden}}},
             {"embeddings.token_type_embeddings.weight", {{"type_vocab_size", types}, {"hidden_size", hidden}}},
             {"encoder.layer.0.intermediate.dense.weight",
              {{"intermediate_size", intermediate}, {"hidden_size", hidden}}}}};
  }
};

const PostLayerNormNames kBertLayers{.stem = "encoder.layer.",
                                     .q = "attention.self.query",
                                     .k = "attention.self.key",
                                     .v = "attention.self.value",
                                     .out = "attention.output.dense",
                                     .norm1 = "attention.output.LayerNorm",
                                     .up = "intermediate.dense",
                                     .down = "output.dense",
                                     .norm2 = "output.LayerNorm"};

class BertStack final : public Transformer {
 public:
  BertStack(const ArchitectureContext& context, const BertFamilyOptions& options);
  at::Tensor forward(const DeviceBatch& batch) const override;

 private:
  void load(const ArchitectureContext& context, const PostLayerNormLayers::Sizes& sizes);

  std::int64_t position_offset_ = 0;
  double layer_norm_eps_ = 1e-12;
  at::Tensor word_, position_, token_type_, token_type0_;  // token_type0_: row 0 of token_type_
  at::Tensor emb_ln_w_, emb_ln_b_;
  PostLayerNormLayers layers_;
};

BertStack::BertStack(const ArchitectureContext& context, const BertFamilyOptions& options)
    : position_offset_(options.position_offset) {
  info_.architecture = std::string(options.description);
  const BertConfig config(context, position_offset_);
  info_.vocab_size = config.vocab;
  info_.hidden_size = config.hidden;
  info_.num_layers = config.layers;
  info_.num_heads = config.heads;
  info_.intermediate_size = config.intermediate;
  info_.max_positions = config.positions;
  info_.type_vocab_size = config.types;
  layer_norm_eps_ = config.eps;
  load(context, {config.layers, config.hidden, config.intermediate, config.heads, config.eps, config.act});
}

void BertStack::load(const ArchitectureContext& context, const PostLayerNormLayers::Sizes& sizes) {
  c10::InferenceMode guard;
  WeightLoader w(context.checkpoint.weights_file(), "embeddings.word_embeddings.weight", context.device, context.dtype);
  const std::int64_t H = info_.hidden_size;
  word_ = w.load("embeddings.word_embeddings.weight", {info_.vocab_size, H});
  position_ = w.load("embeddings.position_embeddings.weight", {info_.max_positions + position_offset_, H});
  token_type_ = w.load("embeddings.token_type_embeddings.weight", {info_.type_vocab_size, H});
  token_type0_ = token_type_[0].contiguous();
  emb_ln_w_ = w.load("embeddings.LayerNorm.weight", {H});
  emb_ln_b_ = w.load("embeddings.LayerNorm.bias", {H});
  layers_.load(w, kBertLayers, sizes);
  // The separate q/k/v tensors were concatenated: count what is kept, not the loaded pieces.
  auto bytes = [](const at::Tensor& t) { return static_cast<std::size_t>(t.numel() * t.element_size()); };
  weight_bytes_ =
      bytes(word_) + bytes(position_) + bytes(token_type_) + bytes(emb_ln_w_) + bytes(emb_ln_b_) + layers_.bytes();
}

// The transformer over packed tokens. Enqueues work only: nothing here waits for the device.
at::Tensor BertStack::forward(const DeviceBatch& batch) const {
  const std::int64_t H = info_.hidden_size, head_dim = H / info_.num_heads;
  const at::Tensor positions = position_offset_ == 0 ? batch.positions : batch.positions + position_offset_;
  at::Tensor x = at::embedding(word_, batch.ids) + at::embedding(position_, positions);
  x = batch.type_ids.defined() ? x + at::embedding(token_type_, batch.type_ids) : x + token_type0_;
  x = at::layer_norm(x, {H}, emb_ln_w_, emb_ln_b_, layer_norm_eps_);
  AttentionOptions attention;
  attention.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return layers_.forward(std::move(x), batch, attention);
}

}  // namespace

void PostLayerNormLayers::load(WeightLoader& w, const PostLayerNormNames& names, const Sizes& sizes) {
  c10::InferenceMode guard;
  sizes_ = sizes;
  const std::int64_t H = sizes.hidden, I = sizes.intermediate;
  const auto name = [](const std::string& prefix, std::string_view part, const char* kind) {
    return fmt::format("{}{}.{}", prefix, part, kind);
  };
  layers_.clear();
  for (std::int64_t i = 0; i < sizes.layers; ++i) {
    const std::string p = fmt::format("{}{}.", names.stem, i);
    const auto weight = [&](std::string_view part, std::vector<std::int64_t> shape) {
      return w.load(name(p, part, "weight"), std::move(shape));
    };
    const auto bias = [&](std::string_view part, std::int64_t size) { return w.load(name(p, part, "bias"), {size}); };
    Layer l;
    l.qkv_w = at::cat({weight(names.q, {H, H}), weight(names.k, {H, H}), weight(names.v, {H, H})});
    l.qkv_b = at::cat({bias(names.q, H), bias(names.k, H), bias(names.v, H)});
    l.out_w = weight(names.out, {H, H});
    l.out_b = bias(names.out, H);
    l.ln1_w = weight(names.norm1, {H});
    l.ln1_b = bias(names.norm1, H);
    l.up_w = weight(names.up, {I, H});
    l.up_b = bias(names.up, I);
    l.down_w = weight(names.down, {H, I});
    l.down_b = bias(names.down, H);
    l.ln2_w = weight(names.norm2, {H});
    l.ln2_b = bias(names.norm2, H);
    layers_.push_back(std::move(l));
  }
}

at::Tensor PostLayerNormLayers::forward(at::Tensor x, const DeviceBatch& batch,
                                        const AttentionOptions& attention) const {
  const std::int64_t H = sizes_.hidden, heads = sizes_.heads, head_dim = H / heads;
  const std::int64_t total = batch.ids.size(0);
  const double eps = sizes_.eps;
  for (const auto& l : layers_) {
    at::Tensor qkv = at::linear(x, l.qkv_w, l.qkv_b);  // [T, 3H]
    auto q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
    auto k = qkv.narrow(1, H, H).view({total, heads, head_dim});
    auto v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
    at::Tensor context = attend(q, k, v, batch, attention);
    // x is the residual each time; it is no longer needed once added (linear_add_layer_norm writes over it).
    x = linear_add_layer_norm(x, context, l.out_w, l.out_b, l.ln1_w, l.ln1_b, eps, false).second;
    at::Tensor hidden = activate(at::linear(x, l.up_w, l.up_b), sizes_.activation);
    x = linear_add_layer_norm(x, hidden, l.down_w, l.down_b, l.ln2_w, l.ln2_b, eps, false).second;
  }
  return x;
}

std::size_t PostLayerNormLayers::bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& l : layers_) {
    for (const auto* t : {&l.qkv_w, &l.qkv_b, &l.out_w, &l.out_b, &l.ln1_w, &l.ln1_b, &l.up_w, &l.up_b, &l.down_w,
                          &l.down_b, &l.ln2_w, &l.ln2_b}) {
      total += static_cast<std::size_t>(t->numel() * t->element_size());
    }
  }
  return total;
}

std::unique_ptr<Transformer> make_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options) {
  return std::make_unique<BertStack>(context, options);
}

void check_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options) {
  check_weight_shapes(context, BertConfig(context, options.position_offset).shapes());
}

namespace {
const BertFamilyOptions kBert{.description = "BERT (post-LayerNorm, absolute positions)"};
}  // namespace

std::unique_ptr<Transformer> make_bert(const ArchitectureContext& context) { return make_bert_family(context, kBert); }
void check_bert(const ArchitectureContext& context) { check_bert_family(context, kBert); }

}  // namespace flowline::models::detail
