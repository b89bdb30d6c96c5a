// The vision tower of a CLIP-like model: a ViT (patch embedding, an optional class token, positions, an optional
// pre-LayerNorm, the encoder) and its pooling — CLIP's class token + projection, or SigLIP's attention-pooling
// head. Which of these a checkpoint has is its row of clip_kinds() (clip_model.cpp).
#include "clip.hpp"

#include "flowline/error.hpp"

#include "../transformer.hpp"

#include <fmt/format.h>

namespace flowline::models::clip {

VisionTower::VisionTower(Weights& weights, const ConfigReader& config, const ClipKind& kind,
                         std::int64_t projection_dim)
    : kind_(kind), config_(TowerConfig::read(config, "vision_config", kind)), post_norm_{} {
  const std::string s = config_.section;
  const std::int64_t h = config_.hidden;
  const std::string hk = s + ".hidden_size";
  const std::int64_t channels = config.int_in(s, "num_channels", 3, 3, 3);
  image_size_ = config.int_in(s, "image_size", std::nullopt, 1, 1 << 14);
  patch_size_ = config.int_in(s, "patch_size", std::nullopt, 1, image_size_);
  if (image_size_ % patch_size_ != 0) {
    config.fail(s, "patch_size", fmt::format("{} does not divide image_size {}", patch_size_, image_size_));
  }
  const std::int64_t grid = image_size_ / patch_size_;
  const std::int64_t positions = grid * grid + (kind.class_token ? 1 : 0);
  const std::string p = "vision_model.";
  patch_weight_ = weights.load(p + "embeddings.patch_embedding.weight", {h, channels, patch_size_, patch_size_},
                               hk + ", " + s + ".patch_size");
  if (kind.patch_bias) patch_bias_ = weights.load(p + "embeddings.patch_embedding.bias", {h}, hk);
  if (kind.class_token) class_embedding_ = weights.load(p + "embeddings.class_embedding", {h}, hk);
  positions_ = weights.load(p + "embeddings.position_embedding.weight", {positions, h},
                            fmt::format("{}.image_size / patch_size ({} patches{}), {}", s, grid * grid,
                                        kind.class_token ? " + the class token" : "", hk));
  if (kind.pre_layernorm) pre_norm_ = LayerNorm::load(weights, p + "pre_layrnorm", config_);
  encoder_.emplace(weights, p + "encoder.", config_);
  post_norm_ = LayerNorm::load(weights, p + "post_layernorm", config_);
  if (kind.vision_pooling == VisionPooling::class_token) {
    projection_ = weights.load("visual_projection.weight", {projection_dim, h}, "projection_dim, " + hk);
    output_dim_ = projection_dim;
    return;
  }
  if (!config.bool_or(s, "vision_use_head", true)) {
    config.fail(s, "vision_use_head", "false: the model has no pooled image embedding (no attention-pooling head)");
  }
  const std::string head = p + "head.";
  const std::int64_t i = config_.intermediate;
  const std::string ik = s + ".intermediate_size";
  probe_ = weights.load(head + "probe", {1, 1, h}, hk);
  head_in_weight_ = weights.load(head + "attention.in_proj_weight", {3 * h, h}, hk);
  head_in_bias_ = weights.load(head + "attention.in_proj_bias", {3 * h}, hk);
  head_out_weight_ = weights.load(head + "attention.out_proj.weight", {h, h}, hk);
  head_out_bias_ = weights.load(head + "attention.out_proj.bias", {h}, hk);
  head_norm_ = LayerNorm::load(weights, head + "layernorm", config_);
  head_fc1_weight_ = weights.load(head + "mlp.fc1.weight", {i, h}, hk + ", " + ik);
  head_fc1_bias_ = weights.load(head + "mlp.fc1.bias", {i}, ik);
  head_fc2_weight_ = weights.load(head + "mlp.fc2.weight", {h, i}, hk + ", " + ik);
  head_fc2_bias_ = weights.load(head + "mlp.fc2.bias", {h}, hk);
  output_dim_ = h;
}

at::Tensor VisionTower::forward(const at::Tensor& pixel_values) const {
  const std::int64_t n = pixel_values.size(0);
  // The patch embedding: a convolution with stride = kernel = patch, as [N, H, grid, grid] -> [N, patches, H].
  at::Tensor x =
      at::conv2d(pixel_values, patch_weight_, patch_bias_, {patch_size_, patch_size_}).flatten(2).transpose(1, 2);
  if (class_embedding_.defined()) x = at::cat({class_embedding_.view({1, 1, -1}).expand({n, 1, -1}), x}, 1);
  x = x + positions_.unsqueeze(0);
  if (pre_norm_) x = (*pre_norm_)(x);
  x = encoder_->forward(x, false, at::Tensor());
  return pool(x).to(at::kFloat);
}

at::Tensor VisionTower::pool(const at::Tensor& states) const {
  if (kind_.vision_pooling == VisionPooling::class_token) {
    return at::linear(post_norm_(states.select(1, 0)), projection_);
  }
  // SigLIP's "MAP" head (torch.nn.MultiheadAttention with one query, the probe), then its MLP with a residual.
  const at::Tensor x = post_norm_(states);
  const std::int64_t n = x.size(0), length = x.size(1), h = x.size(2), heads = config_.heads;
  const auto w = head_in_weight_.chunk(3, 0);
  const auto b = head_in_bias_.chunk(3, 0);
  const at::Tensor q = at::linear(probe_, w[0], b[0]).view({1, heads, 1, h / heads}).expand({n, heads, 1, h / heads});
  const at::Tensor k = at::linear(x, w[1], b[1]).view({n, length, heads, h / heads}).transpose(1, 2);
  const at::Tensor v = at::linear(x, w[2], b[2]).view({n, length, heads, h / heads}).transpose(1, 2);
  const at::Tensor attended = at::scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape({n, h});
  const at::Tensor pooled = at::linear(attended, head_out_weight_, head_out_bias_);
  return pooled + mlp((*head_norm_)(pooled), head_fc1_weight_, head_fc1_bias_, head_fc2_weight_, head_fc2_bias_,
                      config_.activation);
}

}  // namespace flowline::models::clip
