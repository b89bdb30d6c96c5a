// Qwen3 (model_type "qwen3"), as Qwen3-Embedding runs it: a decoder stack of pre-RMSNorm layers without
// biases, an RMSNorm over each query and key head before the rotary positions, grouped-query causal
// attention (head_dim need not be hidden / heads), SwiGLU feed-forward, a final RMSNorm. Its embedding is
// the last token's state (the Pooling module's `lasttoken`; the tokenizer's template appends <|endoftext|>).
// Packed tokens need no padding, so the tokenizer's left padding has nothing to do here: rotary positions
// count from each sequence's first real token, which gives the attention scores a left-padded batch gives
// (they depend on the distance between positions only).
#include "../cuda_kernels.hpp"
#include "../transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>
#include <tuple>

namespace flowline::models::detail {

namespace {

constexpr const char* kDescription = "Qwen3 (RMSNorm, rotary, SwiGLU, grouped-query causal attention)";

// config.json as Qwen3Config reads it (transformers 4 and 5), refusing what this file does not run.
struct Qwen3Config {
  std::int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  std::int64_t positions = 0;
  double eps = 1e-6, theta = 10000.0;
  std::string act = "silu";

  explicit Qwen3Config(const ArchitectureContext& context) {
    const auto& config = context.checkpoint.config;
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    positions = context.int_in("max_position_embeddings", 1, kMaxPositions);
    kv_heads = context.int_in("num_key_value_heads", heads, 1, kMaxHeads);
    if (heads % kv_heads != 0)
      context.fail("num_key_value_heads", fmt::format("must divide num_attention_heads ({})", heads));
    if (!config.if_contains("head_dim") && hidden % heads != 0)
      context.fail("hidden_size", "must be a multiple of num_attention_heads (config.json has no head_dim)");
    head_dim = context.int_in("head_dim", hidden / heads, 1, kMaxHeadDim);
    if (head_dim < 2 || head_dim % 2 != 0) context.fail("head_dim", "must be a positive even integer");
    eps = context.number_in("rms_norm_eps", 1e-6, kNormEps);
    act = context.text_or("hidden_act", "silu");
    if (!known_activation(act)) context.fail("hidden_act", fmt::format("'{}' is not supported", act));
    auto is_true = [&](const char* key) {
      const auto* v = config.if_contains(key);
      return v && v->is_bool() && v->get_bool();
    };
    if (is_true("attention_bias"))
      context.fail("attention_bias", "true is not supported (Qwen3 and Qwen3-Embedding have no projection biases)");
    if (is_true("use_sliding_window"))
      context.fail("use_sliding_window",
                   "true is not supported (Qwen3-Embedding attends to the whole sequence; flowline runs Qwen3 "
                   "with full causal attention only)");
    if (const auto* types = config.if_contains("layer_types"); types && !types->is_null()) {
      if (!types->is_array()) context.fail("layer_types", "must be a list");
      for (const auto& t : types->get_array()) {
        if (t != "full_attention")
          context.fail("layer_types", "only 'full_attention' layers are supported (no sliding windows)");
      }
    }
    read_rope(context);
  }

  // transformers 5's rope_parameters, or 4's rope_scaling (which wins when set) and rope_theta beside it:
  // only the default rotary (no scaling, every dimension rotated).
  void read_rope(const ArchitectureContext& context) {
    const auto& config = context.checkpoint.config;
    theta = context.number_in("rope_theta", 10000.0, kRopeTheta);
    const char* key = "rope_parameters";
    const boost::json::value* rope = config.if_contains("rope_parameters");
    if (const auto* scaling = config.if_contains("rope_scaling"); scaling && !scaling->is_null()) {
      rope = scaling;
      key = "rope_scaling";
    }
    if (!rope || rope->is_null()) return;
    if (!rope->is_object()) context.fail(key, "must be an object");
    const auto& o = rope->get_object();
    const auto* type = o.if_contains("rope_type");
    if (!type) type = o.if_contains("type");
    if (type && *type != "default")
      context.fail(key, "only rope_type 'default' is supported (no RoPE scaling; Qwen3-Embedding has none)");
    if (const auto* f = o.if_contains("partial_rotary_factor");
        f && !f->is_null() && !(f->is_number() && f->to_number<double>() == 1.0))
      context.fail(key, "partial_rotary_factor is not supported");
    for (const auto& [name, value] : o) {
      if (name != "rope_type" && name != "type" && name != "rope_theta" && name != "partial_rotary_factor")
        context.fail(key, fmt::format("'{}' is not supported (only rope_type 'default' and rope_theta)",
                                      std::string_view(name)));
    }
    theta = context.number_in(o.if_contains("rope_theta"), fmt::format("{}.rope_theta", key), theta, kRopeTheta);
  }

  // The weights' header against the sizes above.
  WeightShapes shapes() const {
    return {"num_hidden_layers",
            layers,
            "layers.",
            {{"embed_tokens.weight", {{"vocab_size", vocab}, {"hidden_size", hidden}}},
             {"layers.0.self_attn.q_proj.weight",
              {{"num_attention_heads * head_dim", heads * head_dim}, {"hidden_size", hidden}}},
             {"layers.0.self_attn.k_proj.weight",
              {{"num_key_value_heads * head_dim", kv_heads * head_dim}, {"hidden_size", hidden}}},
             {"layers.0.self_attn.q_norm.weight", {{"head_dim", head_dim}}},
             {"layers.0.mlp.gate_proj.weight", {{"intermediate_size", intermediate}, {"hidden_size", hidden}}}}};
  }
};

// Hugging Face's Qwen3RMSNorm: in float32, rounded back to the model's dtype, then times the weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor f = x.to(at::kFloat);
  return weight * (f * at::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

class Qwen3 final : public Transformer {
 public:
  explicit Qwen3(const ArchitectureContext& context) : config_(context) {
    info_.architecture = kDescription;
    info_.vocab_size = config_.vocab;
    info_.hidden_size = config_.hidden;
    info_.num_layers = config_.layers;
    info_.num_heads = config_.heads;
    info_.intermediate_size = config_.intermediate;
    info_.max_positions = config_.positions;
    info_.type_vocab_size = 1;
    std::tie(cos_, sin_) =
        rotary_tables(config_.theta, config_.head_dim, config_.positions, context.dtype, context.device);
    load(context);
  }

  at::Tensor forward(const DeviceBatch& batch) const override {
    const std::int64_t heads = config_.heads, kv_heads = config_.kv_heads, d = config_.head_dim;
    const std::int64_t I = config_.intermediate, total = batch.ids.size(0);
    at::Tensor x = at::embedding(word_, batch.ids);
    AttentionOptions causal;
    causal.scale = 1.0 / std::sqrt(static_cast<double>(d));
    causal.causal = true;
    // Queries and keys are rotated by attend() (on a GPU, as the attention kernel loads them).
    causal.rotary = rotary_rows(cos_, sin_, batch.positions);
    for (const auto& l : layers_) {
      const at::Tensor qkv = at::linear(rms_norm(x, l.input_norm, config_.eps), l.qkv_w);
      const at::Tensor q = rms_norm(qkv.narrow(1, 0, heads * d).view({total, heads, d}), l.q_norm, config_.eps);
      const at::Tensor k =
          rms_norm(qkv.narrow(1, heads * d, kv_heads * d).view({total, kv_heads, d}), l.k_norm, config_.eps);
      const at::Tensor v = qkv.narrow(1, (heads + kv_heads) * d, kv_heads * d).view({total, kv_heads, d});
      x = x + at::linear(attend(q, k, v, batch, causal), l.o_w);
      const at::Tensor gate_up = at::linear(rms_norm(x, l.post_norm, config_.eps), l.gate_up_w);
      x = x + at::linear(gated_activation(gate_up, config_.act), l.down_w);
    }
    return rms_norm(x, final_norm_, config_.eps);
  }

 private:
  struct Layer {
    at::Tensor input_norm, qkv_w, q_norm, k_norm, o_w, post_norm, gate_up_w, down_w;
  };

  void load(const ArchitectureContext& context) {
    c10::InferenceMode guard;
    WeightLoader w(context.checkpoint.weights_file(), "embed_tokens.weight", context.device, context.dtype);
    const std::int64_t H = config_.hidden, I = config_.intermediate, d = config_.head_dim;
    const std::int64_t q_out = config_.heads * d, kv_out = config_.kv_heads * d;
    word_ = w.load("embed_tokens.weight", {config_.vocab, H});
    for (std::int64_t i = 0; i < config_.layers; ++i) {
      const std::string p = fmt::format("layers.{}.", i);
      Layer l;
      l.input_norm = w.load(p + "input_layernorm.weight", {H});
      // Queries, keys and values as one projection, gate and up as another (fused copies; the loaded
      // parts are freed).
      l.qkv_w = at::cat({w.load(p + "self_attn.q_proj.weight", {q_out, H}),
                         w.load(p + "self_attn.k_proj.weight", {kv_out, H}),
                         w.load(p + "self_attn.v_proj.weight", {kv_out, H})});
      l.q_norm = w.load(p + "self_attn.q_norm.weight", {d});
      l.k_norm = w.load(p + "self_attn.k_norm.weight", {d});
      l.o_w = w.load(p + "self_attn.o_proj.weight", {H, q_out});
      l.post_norm = w.load(p + "post_attention_layernorm.weight", {H});
      l.gate_up_w = at::cat({w.load(p + "mlp.gate_proj.weight", {I, H}), w.load(p + "mlp.up_proj.weight", {I, H})});
      l.down_w = w.load(p + "mlp.down_proj.weight", {H, I});
      layers_.push_back(std::move(l));
    }
    final_norm_ = w.load("norm.weight", {H});
    weight_bytes_ = w.bytes();
  }

  Qwen3Config config_;
  at::Tensor word_, final_norm_, cos_, sin_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Transformer> make_qwen3(const ArchitectureContext& context) { return std::make_unique<Qwen3>(context); }

void check_qwen3(const ArchitectureContext& context) { check_weight_shapes(context, Qwen3Config(context).shapes()); }

}  // namespace flowline::models::detail
