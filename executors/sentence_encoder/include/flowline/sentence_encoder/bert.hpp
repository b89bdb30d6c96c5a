// flowline/sentence_encoder/bert.hpp — a BERT sentence encoder in LibTorch, read straight from a
// sentence-transformers checkpoint folder (config.json, model.safetensors, modules.json, 1_Pooling/...).
//
// The forward pass works on packed tokens: the sequences of a batch are concatenated into one [T, H]
// matrix, so dense layers, layer norms and activations never touch padding; attention runs per group of
// equal-length sequences (a varlen flash-attention kernel on CUDA). Pooling (mean, CLS, max, mean/sqrt(len))
// and Normalize follow the checkpoint's module configs.
//
// A BertEncoder holds its weights on one device. encode() is const and thread-safe: replicas on one device
// may share one encoder (and so one copy of the weights), each calling encode() from its own thread and
// CUDA stream. A GraphedBertEncoder (one per replica) replays the same passes from CUDA graphs.
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

namespace flowline::sentence_encoder {

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

namespace detail {
struct GraphAccess;
}

class BertEncoder {
 public:
  // Loads weights from `folder` onto `device` in `dtype` (kFloat, kHalf or kBFloat16).
  BertEncoder(const std::filesystem::path& folder, c10::Device device, c10::ScalarType dtype);
  ~BertEncoder();

  // Sentence embeddings [sequences, hidden] in float32 on the encoder's device, in the batch's order.
  // On a GPU the ids go up in one non-blocking copy from pinned host memory and the work is only
  // enqueued on the current stream: the call returns before the GPU is done and never waits for it.
  at::Tensor encode(const PackedBatch& batch) const;
  // Token states [T, hidden] (packed) in the encoder's dtype; for tests and custom pooling.
  at::Tensor token_states(const PackedBatch& batch) const;

  const SentenceModelConfig& config() const noexcept { return config_; }
  c10::Device device() const noexcept { return device_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }
  // Bytes of weights held on the device.
  std::size_t weight_bytes() const noexcept;
  // Whether attention runs as one variable-length flash-attention kernel over the packed tokens (a GPU
  // in fp16 or bf16). Only then is a pass's work independent of its sequence lengths on the host, which
  // is what GraphedBertEncoder needs.
  bool uses_flash_attention() const noexcept;

 private:
  friend struct detail::GraphAccess;  // GraphedBertEncoder's CUDA side runs forward() and pool()
  struct Weights;
  struct Group {
    std::int64_t token_begin, count, length;
  };
  struct DeviceBatch;
  DeviceBatch upload(const PackedBatch& batch) const;
  at::Tensor forward(const DeviceBatch& batch) const;
  at::Tensor pool(const at::Tensor& states, const DeviceBatch& batch) const;
  SentenceModelConfig config_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<Weights> weights_;
};

// BertEncoder::encode() replayed from CUDA graphs: each forward pass is launched as one graph instead of
// about ten kernels per layer, which matters when passes are short (the GPU finishes a kernel faster
// than the host launches the next). Passes are padded up to one of eight token counts per power of two
// (at most 1/8 more tokens; the padding belongs to no sequence and changes no result), and each size is
// captured the first time it is needed, or all at once by capture_all().
//
// One GraphedBertEncoder per replica: it is not thread-safe, and every call must come from the same
// CUDA stream (the graphs share one memory pool, which is safe because their replays never overlap).
// The weights stay in the shared BertEncoder. Needs uses_flash_attention().
//
// The capturing and replaying live in libflowline_sentence_encoder_cuda.so, beside this library, which
// the constructor loads (with LibTorch's CUDA library, see load_gpu_part()): the encoder on the CPU maps
// no CUDA library.
class GraphedBertEncoder {
 public:
  // Graphs for passes of up to `max_sequences` sequences, `max_tokens` tokens (rounded up to a bucket)
  // and sequences of up to `max_length` tokens. Allocates the inputs' device buffer; captures nothing yet.
  GraphedBertEncoder(std::shared_ptr<const BertEncoder> encoder, std::int64_t max_sequences, std::int64_t max_tokens,
                     std::int64_t max_length);
  ~GraphedBertEncoder();
  GraphedBertEncoder(const GraphedBertEncoder&) = delete;
  GraphedBertEncoder& operator=(const GraphedBertEncoder&) = delete;

  // Whether `batch` is within the graphs' sizes (otherwise use BertEncoder::encode()).
  bool fits(const PackedBatch& batch) const noexcept;
  // As BertEncoder::encode(), enqueued on the current stream. The result is a view of the graph's output:
  // read it (in stream order) before the next encode() call.
  at::Tensor encode(const PackedBatch& batch);
  // Captures every size now, so no pass pays for a capture later.
  void capture_all();

  // The token count a pass of `tokens` tokens is padded to.
  static std::int64_t bucket(std::int64_t tokens) noexcept;
  std::int64_t max_tokens() const noexcept;
  std::int64_t max_sequences() const noexcept;
  std::size_t graph_count() const noexcept;
  double capture_seconds() const noexcept;  // spent capturing so far

  struct Impl;  // the CUDA side (src/bert_internal.hpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowline::sentence_encoder
