// DistilBERT (model_type "distilbert"): BERT's post-LayerNorm layers (PostLayerNormLayers, bert_family.hpp)
// under DistilBERT's names (q_lin/k_lin/v_lin/out_lin, sa_layer_norm, ffn.lin1/lin2, output_layer_norm), no
// token types, positions learned or sinusoidal as config.json's sinusoidal_pos_embds says, LayerNorm eps
// 1e-12 throughout (Hugging Face's DistilBERT fixes it). Checkpoints name their tensors with the
// "distilbert." prefix (DistilBertForSequenceClassification, ...) or without (DistilBertModel).
#include "bert_family.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>

namespace flowline::models::detail {

namespace {

constexpr double kDistilBertEps = 1e-12;  // nn.LayerNorm(dim, eps=1e-12) in Hugging Face's modeling_distilbert

// Hugging Face's create_sinusoidal_embeddings: position / 10000^(2 (j / 2) / dim), sin at even columns and
// cos at odd ones, computed in float64 (numpy) and stored as float32.
at::Tensor sinusoidal_positions(std::int64_t positions, std::int64_t dim) {
  const at::Tensor pos = at::arange(positions, at::kDouble).unsqueeze(1);
  const at::Tensor j = at::arange(dim, at::kLong);
  const at::Tensor exponent = at::floor_divide(j, 2).to(at::kDouble) * 2.0 / static_cast<double>(dim);
  const at::Tensor angles = pos / at::pow(10000.0, exponent).unsqueeze(0);
  const at::Tensor even = (j.remainder(2) == 0).unsqueeze(0);
  return at::where(even, at::sin(angles), at::cos(angles)).to(at::kFloat);
}

// config.json as DistilBertConfig reads it (dim, n_layers, n_heads, hidden_dim, activation), every value in
// range; shapes() is what the table's check holds it against in model.safetensors' header.
struct DistilBertConfig {
  std::int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0;
  bool sinusoidal = false;
  std::string act = "gelu";

  explicit DistilBertConfig(const ArchitectureContext& context) {
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("dim", 1, kMaxHidden);
    layers = context.int_in("n_layers", 1, kMaxLayers);
    heads = context.int_in("n_heads", 1, kMaxHeads);
    intermediate = context.int_in("hidden_dim", 1, kMaxIntermediate);
    positions = context.int_in("max_position_embeddings", 1, kMaxPositions);
    act = context.text_or("activation", "gelu");
    if (act != "gelu" && act != "relu")
      context.fail("activation", fmt::format("'{}' is not supported (gelu, relu)", act));
    if (hidden % heads != 0) {
      context.fail("dim", fmt::format("{} must be a positive multiple of n_heads {}", hidden, heads));
    }
    if (const auto* s = context.checkpoint.config.if_contains("sinusoidal_pos_embds"); s && !s->is_null()) {
      if (!s->is_bool()) context.fail("sinusoidal_pos_embds", "must be true or false");
      sinusoidal = s->get_bool();
    }
  }

  WeightShapes shapes() const {
    return {"n_layers",
            layers,
            "transformer.layer.",
            {{"embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"dim", hidden}}},
             // A sinusoidal table may be left out of the checkpoint: it is made when the model loads.
             {"embeddings.position_embeddings.weight",
              {{"max_position_embeddings", positions}, {"dim", hidden}},
              /*if_present=*/sinusoidal},
             {"transformer.layer.0.ffn.lin1.weight", {{"hidden_dim", intermediate}, {"dim", hidden}}}}};
  }
};

const PostLayerNormNames kDistilBertLayers{.stem = "transformer.layer.",
                                           .q = "attention.q_lin",
                                           .k = "attention.k_lin",
                                           .v = "attention.v_lin",
                                           .out = "attention.out_lin",
                                           .norm1 = "sa_layer_norm",
                                           .up = "ffn.lin1",
                                           .down = "ffn.lin2",
                                           .norm2 = "output_layer_norm"};

class DistilBert final : public Transformer {
 public:
  explicit DistilBert(const ArchitectureContext& context) {
    info_.architecture = "DistilBERT (post-LayerNorm, no token types)";
    const DistilBertConfig config(context);
    info_.vocab_size = config.vocab;
    info_.hidden_size = config.hidden;
    info_.num_layers = config.layers;
    info_.num_heads = config.heads;
    info_.intermediate_size = config.intermediate;
    info_.max_positions = config.positions;
    info_.type_vocab_size = 1;
    load(context, config);
  }

  at::Tensor forward(const DeviceBatch& batch) const override {
    const std::int64_t H = info_.hidden_size, head_dim = H / info_.num_heads;
    at::Tensor x = at::embedding(word_, batch.ids) + at::embedding(position_, batch.positions);
    x = at::layer_norm(x, {H}, emb_ln_w_, emb_ln_b_, kDistilBertEps);
    AttentionOptions attention;
    attention.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    return layers_.forward(std::move(x), batch, attention);
  }

 private:
  void load(const ArchitectureContext& context, const DistilBertConfig& config) {
    c10::InferenceMode guard;
    WeightLoader w(context.checkpoint.weights_file(), "embeddings.word_embeddings.weight", context.device,
                   context.dtype);
    const std::int64_t H = info_.hidden_size;
    word_ = w.load("embeddings.word_embeddings.weight", {info_.vocab_size, H});
    // Hugging Face loads the checkpoint's table where it has one, sinusoidal or not.
    if (config.sinusoidal && !w.contains("embeddings.position_embeddings.weight")) {
      position_ = sinusoidal_positions(info_.max_positions, H).to(context.device, context.dtype);
      w.keep(position_);
    } else {
      position_ = w.load("embeddings.position_embeddings.weight", {info_.max_positions, H});
    }
    emb_ln_w_ = w.load("embeddings.LayerNorm.weight", {H});
    emb_ln_b_ = w.load("embeddings.LayerNorm.bias", {H});
    layers_.load(w, kDistilBertLayers,
                 {info_.num_layers, H, info_.intermediate_size, info_.num_heads, kDistilBertEps, config.act});
    weight_bytes_ = w.bytes();  // the fused q/k/v copies replace the loaded pieces one for one
  }

  at::Tensor word_, position_, emb_ln_w_, emb_ln_b_;
  PostLayerNormLayers layers_;
};

}  // namespace

std::unique_ptr<Transformer> make_distilbert(const ArchitectureContext& context) {
  return std::make_unique<DistilBert>(context);
}
void check_distilbert(const ArchitectureContext& context) {
  check_weight_shapes(context, DistilBertConfig(context).shapes());
}

}  // namespace flowline::models::detail
