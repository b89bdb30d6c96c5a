// ModernBERT (model_type "modernbert"): pre-LayerNorm layers without biases, rotary position embeddings
// (one theta for global layers, another for local ones), GeGLU feed-forward, and attention that
// alternates between global and a sliding window (|query - key| <= local_attention / 2).
#include "../cuda_kernels.hpp"
#include "../transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>
#include <tuple>

namespace flowline::models::detail {

namespace {

// config.json as ModernBertConfig reads it, every value in range; shapes() is what the table's check holds it
// against in model.safetensors' header.
struct ModernBertConfig {
  std::int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0, window = 64;
  double eps = 1e-5, global_theta = 160000.0, local_theta = 10000.0;
  std::string act = "gelu";
  std::vector<bool> sliding;  // per layer

  explicit ModernBertConfig(const ArchitectureContext& context) {
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    positions = context.int_in("max_position_embeddings", 1, kMaxPositions);
    eps = context.number_in("norm_eps", 1e-5, kNormEps);
    act = context.text_or("hidden_activation", "gelu");
    if (!known_activation(act)) context.fail("hidden_activation", fmt::format("'{}' is not supported", act));
    if (hidden % heads != 0) context.fail("hidden_size", "must be a multiple of num_attention_heads");
    if ((hidden / heads) % 2 != 0)
      context.fail("hidden_size", "hidden_size / num_attention_heads must be even (rotary positions rotate halves)");
    // Hugging Face's window is local_attention // 2 each way; under 2 that would be no window at all here.
    window = context.int_in("local_attention", 128, 2, 2 * kMaxPositions) / 2;
    read_layer_types(context);
    read_rope(context);
  }

  void read_layer_types(const ArchitectureContext& context) {
    const auto* types = context.checkpoint.config.if_contains("layer_types");
    if (types && types->is_array()) {
      if (static_cast<std::int64_t>(types->get_array().size()) != layers)
        context.fail("layer_types", fmt::format("must list {} layers", layers));
      for (const auto& t : types->get_array()) {
        if (t == "sliding_attention")
          sliding.push_back(true);
        else if (t == "full_attention")
          sliding.push_back(false);
        else
          context.fail("layer_types", "each must be 'sliding_attention' or 'full_attention'");
      }
      return;
    }
    const std::int64_t every = context.int_in("global_attn_every_n_layers", 3, 1, kMaxLayers);
    for (std::int64_t i = 0; i < layers; ++i) sliding.push_back(i % every != 0);
  }

  // rope_parameters (transformers 5: per layer type) or global_rope_theta / local_rope_theta.
  void read_rope(const ArchitectureContext& context) {
    global_theta = context.number_in("global_rope_theta", 160000.0, kRopeTheta);
    local_theta = context.number_in("local_rope_theta", 10000.0, kRopeTheta);
    if (const auto* rope = context.checkpoint.config.if_contains("rope_parameters"); rope && rope->is_object()) {
      auto theta = [&](const char* type, double& out) {
        const auto* p = rope->get_object().if_contains(type);
        if (!p || !p->is_object()) return;
        if (const auto* kind = p->get_object().if_contains("rope_type"); kind && *kind != "default")
          context.fail("rope_parameters", "only rope_type 'default' is supported");
        out = context.number_in(p->get_object().if_contains("rope_theta"),
                                fmt::format("rope_parameters.{}.rope_theta", type), out, kRopeTheta);
      };
      theta("full_attention", global_theta);
      theta("sliding_attention", local_theta);
    }
  }

  WeightShapes shapes() const {
    return {"num_hidden_layers",
            layers,
            "layers.",
            {{"embeddings.tok_embeddings.weight", {{"vocab_size", vocab}, {"hidden_size", hidden}}},
             {"layers.0.attn.Wqkv.weight", {{"3 * hidden_size", 3 * hidden}, {"hidden_size", hidden}}},
             {"layers.0.mlp.Wi.weight", {{"2 * intermediate_size", 2 * intermediate}, {"hidden_size", hidden}}}}};
  }
};

class ModernBert final : public Transformer {
 public:
  explicit ModernBert(const ArchitectureContext& context) {
    info_.architecture = "ModernBERT (rotary, GeGLU, local/global attention)";
    const ModernBertConfig config(context);
    info_.vocab_size = config.vocab;
    info_.hidden_size = config.hidden;
    info_.num_layers = config.layers;
    info_.num_heads = config.heads;
    info_.intermediate_size = config.intermediate;
    info_.max_positions = config.positions;
    info_.type_vocab_size = 1;
    eps_ = config.eps;
    act_ = config.act;
    window_ = config.window;
    sliding_ = config.sliding;
    const std::int64_t head_dim = info_.hidden_size / info_.num_heads;
    std::tie(global_cos_, global_sin_) =
        rotary_tables(config.global_theta, head_dim, info_.max_positions, context.dtype, context.device);
    std::tie(local_cos_, local_sin_) =
        rotary_tables(config.local_theta, head_dim, info_.max_positions, context.dtype, context.device);
    load(context);
  }

  at::Tensor forward(const DeviceBatch& batch) const override {
    const std::int64_t H = info_.hidden_size, heads = info_.num_heads, head_dim = H / heads;
    const std::int64_t total = batch.ids.size(0);
    // x: the residual stream; normed: its LayerNorm, the next sublayer's input (layer 0's attention norm is
    // the identity: the embeddings were just normed). Each output projection adds onto x, then x is normed.
    at::Tensor x = at::layer_norm(at::embedding(word_, batch.ids), {H}, emb_norm_w_, emb_norm_b_, eps_);
    at::Tensor normed = x;
    AttentionOptions global, local;
    global.scale = local.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    local.window = window_;
    // Queries and keys are rotated by attend() (on a GPU, as the attention kernel loads them).
    global.rotary = rotary_rows(global_cos_, global_sin_, batch.positions);
    local.rotary = rotary_rows(local_cos_, local_sin_, batch.positions);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const auto& l = layers_[i];
      const bool sliding = sliding_[i];
      const at::Tensor qkv = at::linear(normed, l.qkv_w, l.qkv_b);
      const at::Tensor q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
      const at::Tensor k = qkv.narrow(1, H, H).view({total, heads, head_dim});
      const at::Tensor v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
      at::Tensor context = attend(q, k, v, batch, sliding ? local : global);
      std::tie(x, normed) = linear_add_layer_norm(x, context, l.o_w, l.o_b, l.mlp_norm_w, l.mlp_norm_b, eps_, true);
      const at::Tensor up = at::linear(normed, l.wi_w, l.wi_b);
      const bool last = i + 1 == layers_.size();
      std::tie(x, normed) = linear_add_layer_norm(x, gated_activation(up, act_), l.wo_w, l.wo_b,
                                                  last ? final_w_ : layers_[i + 1].attn_norm_w,
                                                  last ? final_b_ : layers_[i + 1].attn_norm_b, eps_, true);
    }
    return normed;
  }

 private:
  struct Layer {
    at::Tensor attn_norm_w, attn_norm_b, qkv_w, qkv_b, o_w, o_b, mlp_norm_w, mlp_norm_b, wi_w, wi_b, wo_w, wo_b;
  };

  void load(const ArchitectureContext& context) {
    c10::InferenceMode guard;
    WeightLoader w(context.checkpoint.weights_file(), "embeddings.tok_embeddings.weight", context.device,
                   context.dtype);
    const std::int64_t H = info_.hidden_size, I = info_.intermediate_size;
    const bool norm_bias =
        context.checkpoint.config.if_contains("norm_bias") && context.checkpoint.config.at("norm_bias") == true;
    const bool attention_bias = context.checkpoint.config.if_contains("attention_bias") &&
                                context.checkpoint.config.at("attention_bias") == true;
    const bool mlp_bias =
        context.checkpoint.config.if_contains("mlp_bias") && context.checkpoint.config.at("mlp_bias") == true;
    auto maybe = [&](bool present, const std::string& name, std::vector<std::int64_t> shape) {
      return present ? w.load(name, std::move(shape)) : at::Tensor();
    };
    word_ = w.load("embeddings.tok_embeddings.weight", {info_.vocab_size, H});
    emb_norm_w_ = w.load("embeddings.norm.weight", {H});
    emb_norm_b_ = maybe(norm_bias, "embeddings.norm.bias", {H});
    for (std::int64_t i = 0; i < info_.num_layers; ++i) {
      const std::string p = fmt::format("layers.{}.", i);
      Layer l;
      if (i != 0) {  // layer 0's attention norm is the identity: the embeddings were just normed
        l.attn_norm_w = w.load(p + "attn_norm.weight", {H});
        l.attn_norm_b = maybe(norm_bias, p + "attn_norm.bias", {H});
      }
      l.qkv_w = w.load(p + "attn.Wqkv.weight", {3 * H, H});
      l.qkv_b = maybe(attention_bias, p + "attn.Wqkv.bias", {3 * H});
      l.o_w = w.load(p + "attn.Wo.weight", {H, H});
      l.o_b = maybe(attention_bias, p + "attn.Wo.bias", {H});
      l.mlp_norm_w = w.load(p + "mlp_norm.weight", {H});
      l.mlp_norm_b = maybe(norm_bias, p + "mlp_norm.bias", {H});
      l.wi_w = w.load(p + "mlp.Wi.weight", {2 * I, H});
      l.wi_b = maybe(mlp_bias, p + "mlp.Wi.bias", {2 * I});
      l.wo_w = w.load(p + "mlp.Wo.weight", {H, I});
      l.wo_b = maybe(mlp_bias, p + "mlp.Wo.bias", {H});
      layers_.push_back(std::move(l));
    }
    final_w_ = w.load("final_norm.weight", {H});
    final_b_ = maybe(norm_bias, "final_norm.bias", {H});
    weight_bytes_ = w.bytes();
  }

  double eps_ = 1e-5;
  std::string act_ = "gelu";
  std::int64_t window_ = 64;
  std::vector<bool> sliding_;
  at::Tensor word_, emb_norm_w_, emb_norm_b_, final_w_, final_b_;
  at::Tensor global_cos_, global_sin_, local_cos_, local_sin_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Transformer> make_modernbert(const ArchitectureContext& context) {
  return std::make_unique<ModernBert>(context);
}

void check_modernbert(const ArchitectureContext& context) {
  check_weight_shapes(context, ModernBertConfig(context).shapes());
}

}  // namespace flowline::models::detail
