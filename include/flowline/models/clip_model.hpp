// flowline/models/clip_model.hpp — CLIP and SigLIP: a text tower and a vision tower with projections into one
// embedding space, read straight from a Hugging Face CLIPModel / SiglipModel folder (config.json with
// text_config and vision_config, model.safetensors, tokenizer.json, preprocessor_config.json).
//
// Contract. ClipModel::load() runs on any thread and checks config.json's values (ranges, and agreement with
// the weights' shapes, naming the key) as it loads each tower; it throws flowline::Error naming the file and
// what was expected (ConfigError from ImageProcessorConfig::load for preprocessor_config.json) — a folder of
// another model_type, without vision weights, or whose processor gives another image size than the vision tower
// takes, is refused. The model owns its weights on one device (options.device) in options.dtype; the
// tokenizer and image processor config it returns live as long as it does. encode_texts() and
// encode_pixels() are const and thread-safe: replicas on one device may share one ClipModel, each calling
// from its own thread and CUDA stream; on a GPU they enqueue the passes on the current stream and return
// without waiting for them (inputs given on the host are uploaded with a blocking copy first). Callers own
// the tensors they pass in and get back.
//
// The vision transformer runs from src/models/clip/ (docs/models.md, "CLIP and SigLIP"); a new vision
// kind is one row of its table there.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace flowline::models {

class Tokenizer;              // flowline/models/tokenizer.hpp
struct ImageProcessorConfig;  // flowline/models/image_processor.hpp (preprocessor_config.json)

// As EmbeddingModel takes them: the device and the dtype of the weights and activations (kFloat, kHalf or
// kBFloat16). max_text_length: texts are truncated to this many tokens (0: the text tower's
// max_position_embeddings, as transformers' CLIP/SigLIP processors do with truncation on).
struct ClipModelOptions {
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;
  std::size_t max_text_length = 0;
};

class ClipModel {
 public:
  // `folder`: a CLIPModel or SiglipModel folder (config.json's model_type "clip" or "siglip"), or
  // sentence-transformers' CLIP layout (modules.json whose first module is a CLIPModel folder). Throws
  // flowline::Error naming the file and key or tensor.
  static std::unique_ptr<ClipModel> load(const std::filesystem::path& folder, const ClipModelOptions& options);
  ~ClipModel();
  ClipModel(const ClipModel&) = delete;
  ClipModel& operator=(const ClipModel&) = delete;

  std::string_view kind() const;       // "clip" or "siglip"
  std::int64_t embedding_dim() const;  // the projection dimension (CLIP's projection_dim; SigLIP's hidden)
  const ImageProcessorConfig& image_processor() const;
  const Tokenizer& tokenizer() const;

  // Text embeddings [N, D] float32 on the model's device, not normalized, as transformers' get_text_features
  // gives them after its processor: CLIP's texts tokenized and truncated, pooled at the end-of-text token;
  // SigLIP's padded to max_length 64 (its processor's padding="max_length") and pooled at the last position.
  // Throws flowline::InputError for an empty span.
  at::Tensor encode_texts(std::span<const std::string_view> texts) const;
  // Image embeddings [N, D] float32, not normalized, from pixel_values [N, 3, image_size, image_size] (any
  // floating dtype and device; moved to the model's). Throws flowline::InputError naming the expected shape.
  at::Tensor encode_pixels(const at::Tensor& pixel_values) const;

  float logit_scale() const;                // exp() already applied, as transformers multiplies
  std::optional<float> logit_bias() const;  // SigLIP's; none for CLIP

  std::int64_t image_size() const;      // the vision tower's input size (pixels, square)
  std::size_t max_text_length() const;  // tokens, after options
  c10::Device device() const;
  c10::ScalarType dtype() const;
  std::size_t weight_bytes() const;  // on the device

  struct Impl;  // src/models/clip/

 private:
  explicit ClipModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowline::models
