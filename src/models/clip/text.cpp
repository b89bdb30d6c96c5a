// The text tower of a CLIP-like model: token and position embeddings, the encoder (causal for CLIP), the final
// LayerNorm, the pooled token and its projection (clip.hpp: TextPooling).
#include "clip.hpp"

#include "flowline/error.hpp"

#include "../transformer.hpp"

#include <fmt/format.h>

namespace flowline::models::clip {

TextTower::TextTower(Weights& weights, const ConfigReader& config, const ClipKind& kind, std::int64_t projection_dim)
    : kind_(kind), config_(TowerConfig::read(config, "text_config", kind)) {
  const std::string s = config_.section;
  const std::int64_t h = config_.hidden;
  const std::string hk = s + ".hidden_size";
  vocab_ = config.int_in(s, "vocab_size", std::nullopt, 1, models::detail::kMaxVocab);
  max_positions_ = config.int_in(s, "max_position_embeddings", std::nullopt, 1, models::detail::kMaxPositions);
  eos_token_id_ = config.int_in(s, "eos_token_id", 2, 0, vocab_ - 1);
  pad_token_id_ = config.int_in(s, "pad_token_id", 1, 0, vocab_ - 1);
  const std::string p = "text_model.";
  token_embedding_ = weights.load(p + "embeddings.token_embedding.weight", {vocab_, h}, s + ".vocab_size, " + hk);
  positions_ = weights.load(p + "embeddings.position_embedding.weight", {max_positions_, h},
                            s + ".max_position_embeddings, " + hk);
  encoder_.emplace(weights, p + "encoder.", config_);
  final_norm_ = LayerNorm::load(weights, p + "final_layer_norm", config_);
  if (kind.text_pooling == TextPooling::end_of_text) {
    projection_ = weights.load("text_projection.weight", {projection_dim, h}, "projection_dim, " + hk);
  } else {
    projection_ = weights.load(p + "head.weight", {projection_dim, h}, s + ".projection_size, " + hk);
    projection_bias_ = weights.load(p + "head.bias", {projection_dim}, s + ".projection_size");
  }
  output_dim_ = projection_dim;
}

at::Tensor TextTower::forward(const at::Tensor& ids, const at::Tensor& pooled, const at::Tensor& key_mask) const {
  const std::int64_t n = ids.size(0), length = ids.size(1);
  at::Tensor x = at::embedding(token_embedding_, ids) + positions_.slice(0, 0, length).unsqueeze(0);
  x = encoder_->forward(x, kind_.text_pooling == TextPooling::end_of_text, key_mask);
  at::Tensor chosen;
  if (kind_.text_pooling == TextPooling::end_of_text) {
    chosen = x.index({at::arange(n, pooled.options()), pooled});
  } else {
    chosen = x.select(1, length - 1);
  }
  // The final LayerNorm works per token: on the pooled ones alone it gives the same.
  return at::linear(final_norm_(chosen), projection_, projection_bias_).to(at::kFloat);
}

}  // namespace flowline::models::clip
