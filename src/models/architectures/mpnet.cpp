// MPNet (model_type "mpnet"): BERT's post-LayerNorm layers (PostLayerNormLayers, bert_family.hpp) whose
// attention scores get a relative position bias, T5-style buckets of (key position - query position) looked
// up in one table that all layers share; positions counted from padding_idx + 1; no token types.
#include "../cuda_kernels.hpp"
#include "bert_family.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>

namespace flowline::models::detail {

namespace {

// MPNet's relative buckets are a [positions, positions] table made when it loads: positions are bounded
// tighter than other architectures' (Hugging Face's MPNet checkpoints have 514).
constexpr std::int64_t kMaxMPNetPositions = 4096;

// Hugging Face's MPNetEncoder.relative_position_bucket, op for op (float32 logarithm, truncation), so the
// buckets are the reference's: half the buckets per direction, exact up to num_buckets / 4, logarithmic
// up to max_distance. `relative` holds key position - query position.
at::Tensor buckets_of(const at::Tensor& relative, std::int64_t num_buckets, std::int64_t max_distance) {
  at::Tensor n = -relative;
  const std::int64_t half = num_buckets / 2;
  at::Tensor ret = (n < 0).to(at::kLong) * half;
  n = n.abs();
  const std::int64_t max_exact = half / 2;
  const at::Tensor is_small = n < max_exact;
  at::Tensor large = max_exact + (at::log(n.to(at::kFloat) / static_cast<double>(max_exact)) /
                                  std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                                  static_cast<double>(half - max_exact))
                                     .to(at::kLong);
  large = at::minimum(large, at::full_like(large, half - 1));
  return ret + at::where(is_small, n, large);
}

// [length, length]: the bucket of (key j - query i) at [i, j].
at::Tensor relative_buckets(std::int64_t length, std::int64_t num_buckets, std::int64_t max_distance) {
  const at::Tensor context = at::arange(length, at::kLong).unsqueeze(1);
  const at::Tensor memory = at::arange(length, at::kLong).unsqueeze(0);
  return buckets_of(memory - context, num_buckets, max_distance);
}

// config.json as MPNetConfig reads it, every value in range; shapes() is what the table's check holds it
// against in model.safetensors' header.
struct MPNetConfig {
  std::int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, table = 0, offset = 2, buckets = 32;
  double eps = 1e-5;
  std::string act = "gelu";

  explicit MPNetConfig(const ArchitectureContext& context) {
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    // `offset` stays 2, pad_token_id unread: transformers' MPNetEmbeddings fixes padding_idx at 1 whatever
    // config.json says (real MPNet tokenizers' <pad> is 1), so positions start at 2 in every checkpoint.
    table = context.int_in("max_position_embeddings", 1, kMaxMPNetPositions);
    // Hugging Face looks up 32 buckets whatever the table holds: it needs at least that many rows.
    buckets = context.int_in("relative_attention_num_buckets", 32, 32, kMaxVocab);
    eps = context.number_in("layer_norm_eps", 1e-5, kNormEps);
    act = context.text_or("hidden_act", "gelu");
    if (!known_activation(act)) context.fail("hidden_act", fmt::format("'{}' is not supported", act));
    if (hidden % heads != 0) context.fail("hidden_size", "must be a multiple of num_attention_heads");
    if (table - offset < 1) context.fail("max_position_embeddings", "leaves no position after padding_idx + 1");
  }

  WeightShapes shapes() const {
    return {"num_hidden_layers",
            layers,
            "encoder.layer.",
            {{"embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"hidden_size", hidden}}},
             {"embeddings.position_embeddings.weight", {{"max_position_embeddings", table}, {"hidden_size", hidden}}},
             {"encoder.relative_attention_bias.weight",
              {{"relative_attention_num_buckets", buckets}, {"num_attention_heads", heads}}},
             {"encoder.layer.0.intermediate.dense.weight",
              {{"intermediate_size", intermediate}, {"hidden_size", hidden}}}}};
  }
};

const PostLayerNormNames kMPNetLayers{.stem = "encoder.layer.",
                                      .q = "attention.attn.q",
                                      .k = "attention.attn.k",
                                      .v = "attention.attn.v",
                                      .out = "attention.attn.o",
                                      .norm1 = "attention.LayerNorm",
                                      .up = "intermediate.dense",
                                      .down = "output.dense",
                                      .norm2 = "output.LayerNorm"};

class MPNet final : public Transformer {
 public:
  explicit MPNet(const ArchitectureContext& context) {
    info_.architecture = "MPNet (relative position bias)";
    const MPNetConfig config(context);
    info_.vocab_size = config.vocab;
    info_.hidden_size = config.hidden;
    info_.num_layers = config.layers;
    info_.num_heads = config.heads;
    info_.intermediate_size = config.intermediate;
    position_offset_ = config.offset;
    info_.max_positions = config.table - position_offset_;
    info_.type_vocab_size = 1;
    num_buckets_ = config.buckets;
    eps_ = config.eps;
    act_ = config.act;
    load(context);
  }

  // On a GPU in fp16/bf16 the attention runs as flowline's kernel with the bias by offset (packed, so
  // graphable too); its head dimensions are multiples of 8 up to 128.
  bool uses_packed_attention(const ArchitectureContext& context) const override {
    const std::int64_t head_dim = info_.hidden_size / info_.num_heads;
    return context.packed_attention() && head_dim % 8 == 0 && head_dim <= 128;
  }

  at::Tensor forward(const DeviceBatch& batch) const override {
    const std::int64_t H = info_.hidden_size, heads = info_.num_heads, head_dim = H / heads;
    at::Tensor x = at::embedding(word_, batch.ids) + at::embedding(position_, batch.positions + position_offset_);
    x = at::layer_norm(x, {H}, emb_ln_w_, emb_ln_b_, eps_);
    AttentionOptions attention;
    attention.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    attention.bias_for = [this](std::int64_t length) {
      // [L, L, heads] -> [heads, L, L]
      return at::embedding(bias_table_, buckets_.narrow(0, 0, length).narrow(1, 0, length)).permute({2, 0, 1});
    };
    if (batch.packed) attention.relative_bias = bias_by_offset_;
    prepare_attention(attention, batch, x.scalar_type(), heads);  // one padded mask per pass (GPU, float32)
    return layers_.forward(std::move(x), batch, attention);
  }

 private:
  void load(const ArchitectureContext& context) {
    c10::InferenceMode guard;
    WeightLoader w(context.checkpoint.weights_file(), "embeddings.word_embeddings.weight", context.device,
                   context.dtype);
    const std::int64_t H = info_.hidden_size;
    word_ = w.load("embeddings.word_embeddings.weight", {info_.vocab_size, H});
    position_ = w.load("embeddings.position_embeddings.weight", {info_.max_positions + position_offset_, H});
    emb_ln_w_ = w.load("embeddings.LayerNorm.weight", {H});
    emb_ln_b_ = w.load("embeddings.LayerNorm.bias", {H});
    bias_table_ = w.load("encoder.relative_attention_bias.weight", {num_buckets_, info_.num_heads});
    buckets_ = relative_buckets(info_.max_positions, 32, 128).to(context.device);
    // The bias of every offset -(P - 1) .. P - 1 per head, [heads, 2P - 1] float32, for the GPU kernel:
    // the table's values in the model's dtype, as the padded path adds them.
    const std::int64_t P = info_.max_positions;
    const at::Tensor offsets = at::arange(-(P - 1), P, at::kLong);
    bias_by_offset_ =
        at::embedding(bias_table_, buckets_of(offsets, 32, 128).to(context.device)).to(at::kFloat).t().contiguous();
    layers_.load(w, kMPNetLayers,
                 {info_.num_layers, info_.hidden_size, info_.intermediate_size, info_.num_heads, eps_, act_});
    weight_bytes_ = w.bytes();  // the fused q/k/v copies replace the loaded pieces one for one
  }

  std::int64_t position_offset_ = 2, num_buckets_ = 32;
  double eps_ = 1e-5;
  std::string act_ = "gelu";
  at::Tensor word_, position_, emb_ln_w_, emb_ln_b_, bias_table_, buckets_, bias_by_offset_;
  PostLayerNormLayers layers_;
};

}  // namespace

std::unique_ptr<Transformer> make_mpnet(const ArchitectureContext& context) { return std::make_unique<MPNet>(context); }
void check_mpnet(const ArchitectureContext& context) { check_weight_shapes(context, MPNetConfig(context).shapes()); }

}  // namespace flowline::models::detail
