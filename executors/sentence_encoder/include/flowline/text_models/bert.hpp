// flowline/text_models/bert.hpp — a BERT sentence encoder in LibTorch, read straight from a
// sentence-transformers checkpoint folder (config.json, model.safetensors, modules.json, 1_Pooling/...).
//
// The forward pass works on packed tokens: the sequences of a batch are concatenated into one [T, H]
// matrix, so dense layers, layer norms and activations never touch padding; attention runs per group of
// equal-length sequences (a varlen flash-attention kernel on CUDA). Pooling (mean, CLS, max, mean/sqrt(len))
// and Normalize follow the checkpoint's module configs.
//
// A BertEncoder holds its weights on one device. encode() is const and thread-safe: replicas on one device
// may share one encoder (and so one copy of the weights), each calling encode() from its own thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flowline::text_models {

struct BertConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t max_position_embeddings = 0;
  std::int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  std::string hidden_act = "gelu";

  // Reads a Hugging Face config.json. Throws flowline::Error naming the file and the key for anything
  // missing or unsupported (non-BERT model types, relative position embeddings, unknown activations).
  static BertConfig from_file(const std::filesystem::path& config_json);
};

enum class Pooling { Mean, Cls, Max, MeanSqrtLen };

// What the sentence-transformers module configs of a checkpoint say.
struct SentenceModelConfig {
  BertConfig bert;
  Pooling pooling = Pooling::Mean;
  bool normalize = false;
  std::int64_t max_seq_length = 512;

  // Reads config.json, modules.json, the pooling module's config.json, sentence_bert_config.json and
  // tokenizer_config.json (both the sentence-transformers 2.x and 6.x layouts).
  static SentenceModelConfig from_folder(const std::filesystem::path& folder);
};

std::string to_string(Pooling pooling);

// One batch for BertEncoder::encode(): token ids of several sequences, concatenated.
struct PackedBatch {
  std::span<const std::int32_t> ids;      // all tokens, sequence after sequence
  std::span<const std::int64_t> lengths;  // tokens per sequence (each >= 1)
};

class BertEncoder {
 public:
  // Loads weights from `folder` onto `device` in `dtype` (kFloat, kHalf or kBFloat16).
  BertEncoder(const std::filesystem::path& folder, c10::Device device, c10::ScalarType dtype);
  ~BertEncoder();

  // Sentence embeddings [sequences, hidden] in float32 on the encoder's device, in the batch's order.
  // On a GPU the ids go up in one non-blocking copy from pinned host memory and the work is only
  // enqueued on the current stream: the call returns before the GPU is done (no synchronisation).
  at::Tensor encode(const PackedBatch& batch) const;
  // Token states [T, hidden] (packed) in the encoder's dtype; for tests and custom pooling.
  at::Tensor token_states(const PackedBatch& batch) const;

  const SentenceModelConfig& config() const noexcept { return config_; }
  c10::Device device() const noexcept { return device_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }
  // Bytes of weights held on the device.
  std::size_t weight_bytes() const noexcept;

 private:
  struct Weights;
  struct DeviceBatch;
  DeviceBatch upload(const PackedBatch& batch) const;
  at::Tensor forward(const DeviceBatch& batch, const PackedBatch& host) const;
  SentenceModelConfig config_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<Weights> weights_;
};

}  // namespace flowline::text_models
