// Internal to flowline::models: DeBERTa-v2/v3's config.json as DebertaV2Config and the modules read it
// (deberta_v2.cpp's model and sequence head, and the table's check). Not installed.
#pragma once

#include "../transformer.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace flowline::models::detail {

// config.json as DebertaV2Config and the modules read it, every value in range; shapes() is what the table's
// check holds it against in model.safetensors' header.
struct DebertaConfig {
  std::int64_t vocab = 0, hidden = 0, embedding = 0, layers = 0, heads = 0, intermediate = 0, positions = 0;
  std::int64_t types = 0, buckets = -1, max_relative = 0;
  double eps = 1e-7;
  std::string act = "gelu", pooler_act = "gelu";
  bool relative = false, c2p = false, p2c = false, share_key = false, norm_rel = false, absolute = true;

  explicit DebertaConfig(const ArchitectureContext& context) {
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    embedding = context.int_in("embedding_size", hidden, 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    positions = context.int_in("max_position_embeddings", 512, 1, kMaxPositions);
    types = context.int_in("type_vocab_size", 0, 0, kMaxVocab);
    eps = context.number_in("layer_norm_eps", 1e-7, kNormEps);
    act = context.text_or("hidden_act", "gelu");
    if (!known_activation(act)) context.fail("hidden_act", fmt::format("'{}' is not supported", act));
    if (hidden % heads != 0) {
      context.fail("hidden_size",
                   fmt::format("{} must be a positive multiple of num_attention_heads {}", hidden, heads));
    }
    if (context.int_in("attention_head_size", hidden / heads, 1, kMaxHeadDim) != hidden / heads) {
      context.fail("attention_head_size",
                   fmt::format("must be hidden_size / num_attention_heads ({})", hidden / heads));
    }
    if (const std::int64_t conv = context.int_in("conv_kernel_size", 0, 0, kMaxPositions); conv > 0) {
      context.fail("conv_kernel_size",
                   fmt::format("{}: DeBERTa-v2's convolution layer is not supported (only 0)", conv));
    }
    relative = flag(context, "relative_attention", false);
    share_key = flag(context, "share_att_key", false);
    absolute = flag(context, "position_biased_input", true);
    read_attention_types(context);
    read_rel_norm(context);
    // Bucketed: every distance within 2 * positions is looked up (padded passes round lengths up), so both
    // bounds are those of positions.
    buckets = context.int_in("position_buckets", -1, -kMaxPositions, kMaxPositions);
    max_relative = context.int_in("max_relative_positions", -1, -kMaxPositions, kMaxPositions);
    if (max_relative < 1) max_relative = positions;  // as transformers reads it
    // The sequence head's (ContextPooler) settings, checked here so that validation refuses them: transformers
    // sizes the pooler by pooler_hidden_size and the classifier by hidden_size, so the two must agree.
    if (context.int_in("pooler_hidden_size", hidden, 1, kMaxHidden) != hidden) {
      context.fail("pooler_hidden_size", fmt::format("must equal hidden_size ({})", hidden));
    }
    pooler_act = context.text_or("pooler_hidden_act", "gelu");
    if (!known_activation(pooler_act))
      context.fail("pooler_hidden_act", fmt::format("'{}' is not supported", pooler_act));
    if (buckets == 1) context.fail("position_buckets", "1 leaves no bucket on either side (at least 2, or 0 for none)");
    if (buckets > 0 && max_relative - 1 <= buckets / 2) {
      context.fail("max_relative_positions",
                   fmt::format("{} must exceed position_buckets / 2 + 1 ({}) for logarithmic buckets", max_relative,
                               buckets / 2 + 1));
    }
  }

  // Relative embeddings: 2 * span rows (transformers' pos_ebd_size).
  std::int64_t span() const noexcept { return buckets > 0 ? buckets : max_relative; }
  // 1 + the number of position terms: the scores' scale is 1 / sqrt(head_dim * factor).
  std::int64_t scale_factor() const noexcept { return 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }

  WeightShapes shapes() const {
    WeightShapes out{
        "num_hidden_layers",
        layers,
        "encoder.layer.",
        {{"embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"embedding_size", embedding}}},
         {"encoder.layer.0.attention.self.query_proj.weight", {{"hidden_size", hidden}, {"hidden_size", hidden}}},
         {"encoder.layer.0.intermediate.dense.weight",
          {{"intermediate_size", intermediate}, {"hidden_size", hidden}}}}};
    if (absolute) {
      out.tensors.push_back({"embeddings.position_embeddings.weight",
                             {{"max_position_embeddings", positions}, {"embedding_size", embedding}}});
    }
    if (types > 0) {
      out.tensors.push_back(
          {"embeddings.token_type_embeddings.weight", {{"type_vocab_size", types}, {"embedding_size", embedding}}});
    }
    if (relative) {
      const char* key = buckets > 0 ? "2 * position_buckets" : "2 * max_relative_positions";
      out.tensors.push_back({"encoder.rel_embeddings.weight", {{key, 2 * span()}, {"hidden_size", hidden}}});
    }
    return out;
  }

 private:
  static bool flag(const ArchitectureContext& context, const char* key, bool fallback) {
    const auto* v = context.checkpoint.config.if_contains(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_bool()) context.fail(key, "must be true or false");
    return v->get_bool();
  }

  // A list of names or one "a|b" string (DeBERTa's own config.json files write the string), lowercased and
  // trimmed as transformers reads it.
  static std::vector<std::string> names(const ArchitectureContext& context, const char* key, const char* fallback) {
    const auto* v = context.checkpoint.config.if_contains(key);
    std::vector<std::string> out;
    auto add = [&](std::string_view text) {
      std::string name;
      for (const char c : text) {
        if (c == '|') {
          if (!name.empty()) out.push_back(std::exchange(name, {}));
        } else if (c != ' ' && c != '\t') {
          name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
      }
      if (!name.empty()) out.push_back(name);  // "" names nothing, as in transformers
    };
    if (!v || v->is_null()) {
      if (fallback != nullptr) add(fallback);
    } else if (v->is_string()) {
      add(v->get_string());
    } else if (v->is_array()) {
      for (const auto& item : v->get_array()) {
        if (!item.is_string()) context.fail(key, "must be a string or a list of strings");
        add(item.get_string());
      }
    } else {
      context.fail(key, "must be a string or a list of strings");
    }
    return out;
  }

  void read_attention_types(const ArchitectureContext& context) {
    for (const auto& name : names(context, "pos_att_type", nullptr)) {
      if (name == "c2p") {
        c2p = true;
      } else if (name == "p2c") {
        p2c = true;
      } else {
        context.fail("pos_att_type", fmt::format("'{}' is not supported (c2p, p2c)", name));
      }
    }
  }

  void read_rel_norm(const ArchitectureContext& context) {
    for (const auto& name : names(context, "norm_rel_ebd", "none")) {
      if (name == "layer_norm") {
        norm_rel = true;
      } else if (name != "none") {
        context.fail("norm_rel_ebd", fmt::format("'{}' is not supported (none, layer_norm)", name));
      }
    }
  }
};

}  // namespace flowline::models::detail
