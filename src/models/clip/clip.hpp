// Internal to flowline::models: the towers of ClipModel (flowline/models/clip_model.hpp). Not installed.
//
// A CLIP-like checkpoint is two pre-LayerNorm transformer encoders (Encoder, encoder.cpp) with their embeddings
// and pooling: the vision tower (vision.cpp, a ViT over a batch of one image size, so one length: no packing)
// and the text tower (text.cpp). What differs between CLIP, SigLIP and the next such model is a row of
// clip_kinds() (clip_model.cpp): class token or not, pre-LayerNorm, patch bias, how each tower pools and
// projects. Everything here is built once at load and then const: forward passes only enqueue work on the
// current stream and are safe from many threads at once.
#pragma once

#include "flowline/models/safetensors.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::models::clip {

// How a vision tower turns its token states into one vector per image.
enum class VisionPooling {
  class_token,     // CLIP: the class token's state, post_layernorm, then visual_projection (no bias)
  attention_pool,  // SigLIP: post_layernorm over all tokens, then the "MAP" head (a probe attending to them)
};
// How a text tower picks its pooled token and projects it.
enum class TextPooling {
  end_of_text,    // CLIP: the end-of-text token (argmax of the ids when text eos_token_id is 2), text_projection
  last_position,  // SigLIP: the last position of a batch padded to max_length, text_model.head (with bias)
};

// One row of the kinds table: what a model_type's checkpoints hold.
struct ClipKind {
  std::string_view model_type;  // config.json's model_type: "clip", "siglip"
  std::string_view description;
  bool class_token;    // vision_model.embeddings.class_embedding prepended to the patches
  bool pre_layernorm;  // vision_model.pre_layrnorm after the embeddings
  bool patch_bias;     // the patch convolution has a bias
  VisionPooling vision_pooling;
  TextPooling text_pooling;
  std::string_view default_activation;  // hidden_act when config.json names none
  double default_eps;                   // layer_norm_eps when config.json names none
};
std::span<const ClipKind> clip_kinds();
const ClipKind* find_clip_kind(std::string_view model_type);

// config.json's values, each checked as it is read; errors name the file and key ("text_config.hidden_size").
class ConfigReader {
 public:
  ConfigReader(std::filesystem::path file, const boost::json::object& root) : file_(std::move(file)), root_(root) {}
  // `section`.`key` ("" section: the top level): an integer in [min, max]; `fallback` when absent or null.
  std::int64_t int_in(std::string_view section, const char* key, std::optional<std::int64_t> fallback, std::int64_t min,
                      std::int64_t max) const;
  double number_in(std::string_view section, const char* key, double fallback, double min, double max) const;
  std::string text_or(std::string_view section, const char* key, std::string_view fallback) const;
  bool bool_or(std::string_view section, const char* key, bool fallback) const;
  [[noreturn]] void fail(std::string_view section, std::string_view key, const std::string& message) const;
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  const boost::json::value* find(std::string_view section, const char* key) const;
  std::filesystem::path file_;
  const boost::json::object& root_;
};

// The sizes of one tower, from its config section.
struct TowerConfig {
  std::string section;  // "text_config" / "vision_config"
  std::int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0;
  double eps = 1e-5;
  std::string activation;
  // Reads and checks `section`'s sizes (hidden divisible by heads, ...).
  static TowerConfig read(const ConfigReader& config, std::string section, const ClipKind& kind);
};

// Loads tensors from model.safetensors onto the device in the model's dtype, checking their shapes against
// what config.json implies (the error names the tensor, its shape and the keys).
class Weights {
 public:
  Weights(const std::filesystem::path& file, c10::Device device, c10::ScalarType dtype);
  // `name` with `shape`; `keys` names the config.json keys the shape comes from, for the error.
  at::Tensor load(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys);
  at::Tensor load_float(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys);
  bool contains(const std::string& name) const { return file_.contains(name); }
  // The number of numbered blocks `stem`0., `stem`1., ... the file holds.
  std::int64_t count(std::string_view stem) const;
  const SafetensorsFile& file() const noexcept { return file_; }
  std::size_t bytes() const noexcept { return bytes_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }

 private:
  at::Tensor read(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys);
  SafetensorsFile file_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::size_t bytes_ = 0;
};

struct LayerNorm {
  at::Tensor weight, bias;
  double eps = 1e-5;
  static LayerNorm load(Weights& weights, const std::string& name, const TowerConfig& config);
  at::Tensor operator()(const at::Tensor& x) const;
};

// A tower's activation by config.json's name: quick_gelu (CLIP) here, the others as the text models run them.
at::Tensor activate_named(const at::Tensor& x, const std::string& name);
bool known_clip_activation(const std::string& name);

// The pre-LayerNorm encoder both towers run: x + attn(ln1(x)), then x + mlp(ln2(x)), for every layer.
class Encoder {
 public:
  // Loads `prefix`layers.N.* (N < config.layers), refusing a checkpoint with another number of layers.
  Encoder(Weights& weights, const std::string& prefix, const TowerConfig& config);
  // x [N, L, H] in the model's dtype. causal: each token sees those before it; key_mask: [N, L] bool (true: a
  // token the others attend to), or undefined for all.
  at::Tensor forward(at::Tensor x, bool causal, const at::Tensor& key_mask) const;

 private:
  struct Layer {
    LayerNorm ln1, ln2;
    at::Tensor qkv_weight, qkv_bias, out_weight, out_bias, fc1_weight, fc1_bias, fc2_weight, fc2_bias;
  };
  std::vector<Layer> layers_;
  std::int64_t heads_ = 1;
  std::string activation_;
};

// The MLP of a layer (fc1, activation, fc2), shared with SigLIP's attention-pooling head.
at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc1_weight, const at::Tensor& fc1_bias,
               const at::Tensor& fc2_weight, const at::Tensor& fc2_bias, const std::string& activation);

// The vision tower (vision.cpp): pixel_values [N, 3, S, S] in the model's dtype on its device to float32
// embeddings [N, D], projected.
class VisionTower {
 public:
  VisionTower(Weights& weights, const ConfigReader& config, const ClipKind& kind, std::int64_t projection_dim);
  at::Tensor forward(const at::Tensor& pixel_values) const;
  std::int64_t image_size() const noexcept { return image_size_; }
  std::int64_t output_dim() const noexcept { return output_dim_; }

 private:
  at::Tensor pool(const at::Tensor& states) const;
  const ClipKind& kind_;
  TowerConfig config_;
  std::int64_t image_size_ = 0, patch_size_ = 0, output_dim_ = 0;
  at::Tensor patch_weight_, patch_bias_, class_embedding_, positions_;
  std::optional<LayerNorm> pre_norm_;
  LayerNorm post_norm_;
  std::optional<Encoder> encoder_;
  at::Tensor projection_;  // class_token: [D, H]
  // attention_pool: the MAP head
  at::Tensor probe_, head_in_weight_, head_in_bias_, head_out_weight_, head_out_bias_;
  at::Tensor head_fc1_weight_, head_fc1_bias_, head_fc2_weight_, head_fc2_bias_;
  std::optional<LayerNorm> head_norm_;
};

// The text tower (text.cpp): token ids [N, L] (int64, on the device) to float32 embeddings [N, D].
class TextTower {
 public:
  TextTower(Weights& weights, const ConfigReader& config, const ClipKind& kind, std::int64_t projection_dim);
  // `pooled`: [N] int64 positions to pool (end_of_text); `key_mask`: [N, L] bool or undefined.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& pooled, const at::Tensor& key_mask) const;
  std::int64_t vocab_size() const noexcept { return vocab_; }
  std::int64_t max_positions() const noexcept { return max_positions_; }
  std::int64_t output_dim() const noexcept { return output_dim_; }
  std::int64_t eos_token_id() const noexcept { return eos_token_id_; }
  std::int64_t pad_token_id() const noexcept { return pad_token_id_; }

 private:
  const ClipKind& kind_;
  TowerConfig config_;
  std::int64_t vocab_ = 0, max_positions_ = 0, output_dim_ = 0, eos_token_id_ = 2, pad_token_id_ = 1;
  at::Tensor token_embedding_, positions_;
  std::optional<Encoder> encoder_;
  LayerNorm final_norm_;
  at::Tensor projection_, projection_bias_;
};

}  // namespace flowline::models::clip
