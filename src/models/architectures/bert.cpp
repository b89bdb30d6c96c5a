// BERT (model_type "bert"): post-LayerNorm encoder layers, learned absolute positions, token types.
// The RoBERTa family runs the same stack with positions offset by padding_idx + 1 (roberta.cpp).
#include "bert_family.hpp"

#include "../cuda_kernels.hpp"

#include "flowline/error.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>

namespace flowline::models::detail {

namespace {

// config.json as BertConfig / RobertaConfig read it, every value in range; check_weights() holds it against
// the shapes in model.safetensors' header.
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

  void check_weights(const ArchitectureContext& context) const {
    const WeightLoader w(context.checkpoint.folder / "model.safetensors", "embeddings.word_embeddings.weight",
                         context.device, context.dtype);
    w.check(context, "embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"hidden_size", hidden}});
    w.check(context, "embeddings.position_embeddings.weight",
            {{"max_position_embeddings", table}, {"hidden_size", hidden}});
    w.check(context, "embeddings.token_type_embeddings.weight", {{"type_vocab_size", types}, {"hidden_size", hidden}});
    w.check_count(context, "num_hidden_layers", layers, "encoder.layer.");
    w.check(context, "encoder.layer.0.intermediate.dense.weight",
            {{"intermediate_size", intermediate}, {"hidden_size", hidden}});
  }
};

class BertStack final : public Transformer {
 public:
  BertStack(const ArchitectureContext& context, const BertFamilyOptions& options);
  at::Tensor forward(const DeviceBatch& batch) const override;

 private:
  struct Layer {
    at::Tensor qkv_w, qkv_b;    // fused [3H, H], [3H]
    at::Tensor out_w, out_b;    // attention output dense
    at::Tensor ln1_w, ln1_b;    // attention output LayerNorm
    at::Tensor up_w, up_b;      // intermediate dense
    at::Tensor down_w, down_b;  // output dense
    at::Tensor ln2_w, ln2_b;    // output LayerNorm
  };
  void load(const ArchitectureContext& context);

  std::int64_t position_offset_ = 0;
  double layer_norm_eps_ = 1e-12;
  std::string hidden_act_ = "gelu";
  at::Tensor word_, position_, token_type_, token_type0_;  // token_type0_: row 0 of token_type_
  at::Tensor emb_ln_w_, emb_ln_b_;
  std::vector<Layer> layers_;
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
  hidden_act_ = config.act;
  load(context);
}

void BertStack::load(const ArchitectureContext& context) {
  c10::InferenceMode guard;
  WeightLoader w(context.checkpoint.folder / "model.safetensors", "embeddings.word_embeddings.weight", context.device,
                 context.dtype);
  const std::int64_t H = info_.hidden_size, I = info_.intermediate_size;
  word_ = w.load("embeddings.word_embeddings.weight", {info_.vocab_size, H});
  position_ = w.load("embeddings.position_embeddings.weight", {info_.max_positions + position_offset_, H});
  token_type_ = w.load("embeddings.token_type_embeddings.weight", {info_.type_vocab_size, H});
  token_type0_ = token_type_[0].contiguous();
  emb_ln_w_ = w.load("embeddings.LayerNorm.weight", {H});
  emb_ln_b_ = w.load("embeddings.LayerNorm.bias", {H});
  for (std::int64_t i = 0; i < info_.num_layers; ++i) {
    const std::string p = fmt::format("encoder.layer.{}.", i);
    Layer l;
    l.qkv_w =
        at::cat({w.load(p + "attention.self.query.weight", {H, H}), w.load(p + "attention.self.key.weight", {H, H}),
                 w.load(p + "attention.self.value.weight", {H, H})});
    l.qkv_b = at::cat({w.load(p + "attention.self.query.bias", {H}), w.load(p + "attention.self.key.bias", {H}),
                       w.load(p + "attention.self.value.bias", {H})});
    l.out_w = w.load(p + "attention.output.dense.weight", {H, H});
    l.out_b = w.load(p + "attention.output.dense.bias", {H});
    l.ln1_w = w.load(p + "attention.output.LayerNorm.weight", {H});
    l.ln1_b = w.load(p + "attention.output.LayerNorm.bias", {H});
    l.up_w = w.load(p + "intermediate.dense.weight", {I, H});
    l.up_b = w.load(p + "intermediate.dense.bias", {I});
    l.down_w = w.load(p + "output.dense.weight", {H, I});
    l.down_b = w.load(p + "output.dense.bias", {H});
    l.ln2_w = w.load(p + "output.LayerNorm.weight", {H});
    l.ln2_b = w.load(p + "output.LayerNorm.bias", {H});
    layers_.push_back(std::move(l));
  }
  // The separate q/k/v tensors were concatenated: count what is kept, not the loaded pieces.
  auto bytes = [](const at::Tensor& t) { return static_cast<std::size_t>(t.numel() * t.element_size()); };
  weight_bytes_ = bytes(word_) + bytes(position_) + bytes(token_type_) + bytes(emb_ln_w_) + bytes(emb_ln_b_);
  for (const auto& l : layers_) {
    for (const auto* t : {&l.qkv_w, &l.qkv_b, &l.out_w, &l.out_b, &l.ln1_w, &l.ln1_b, &l.up_w, &l.up_b, &l.down_w,
                          &l.down_b, &l.ln2_w, &l.ln2_b}) {
      weight_bytes_ += bytes(*t);
    }
  }
}

// The transformer over packed tokens. Enqueues work only: nothing here waits for the device.
at::Tensor BertStack::forward(const DeviceBatch& batch) const {
  const std::int64_t H = info_.hidden_size, heads = info_.num_heads, head_dim = H / heads;
  const std::int64_t total = batch.ids.size(0);
  const at::Tensor positions = position_offset_ == 0 ? batch.positions : batch.positions + position_offset_;
  at::Tensor x = at::embedding(word_, batch.ids) + at::embedding(position_, positions);
  x = batch.type_ids.defined() ? x + at::embedding(token_type_, batch.type_ids) : x + token_type0_;
  x = at::layer_norm(x, {H}, emb_ln_w_, emb_ln_b_, layer_norm_eps_);
  AttentionOptions attention;
  attention.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (const auto& l : layers_) {
    at::Tensor qkv = at::linear(x, l.qkv_w, l.qkv_b);  // [T, 3H]
    auto q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
    auto k = qkv.narrow(1, H, H).view({total, heads, head_dim});
    auto v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
    at::Tensor context = attend(q, k, v, batch, attention);
    // x is the residual each time; it is no longer needed once added (linear_add_layer_norm writes over it).
    x = linear_add_layer_norm(x, context, l.out_w, l.out_b, l.ln1_w, l.ln1_b, layer_norm_eps_, false).second;
    at::Tensor hidden = activate(at::linear(x, l.up_w, l.up_b), hidden_act_);
    x = linear_add_layer_norm(x, hidden, l.down_w, l.down_b, l.ln2_w, l.ln2_b, layer_norm_eps_, false).second;
  }
  return x;
}

}  // namespace

std::unique_ptr<Transformer> make_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options) {
  return std::make_unique<BertStack>(context, options);
}

void check_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options) {
  BertConfig(context, options.position_offset).check_weights(context);
}

namespace {
const BertFamilyOptions kBert{.description = "BERT (post-LayerNorm, absolute positions)"};
}  // namespace

std::unique_ptr<Transformer> make_bert(const ArchitectureContext& context) { return make_bert_family(context, kBert); }
void check_bert(const ArchitectureContext& context) { check_bert_family(context, kBert); }

}  // namespace flowline::models::detail
