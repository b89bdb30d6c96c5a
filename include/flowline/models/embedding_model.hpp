// flowline/models/embedding_model.hpp — transformer models in LibTorch, read straight from a checkpoint
// folder: sentence embeddings (EmbeddingModel) and pair scores (CrossEncoderModel, cross_encoder.hpp).
//
// The architectures (BERT, RoBERTa/XLM-R/CamemBERT, MPNet, ModernBERT, ...) are a table in
// src/models/architectures/ (docs/models.md: adding one is one file and one line). Every one runs on
// packed tokens: the sequences of a batch are concatenated into one [T, H] matrix, so dense layers, norms
// and activations never touch padding, and attention runs per sequence (one kernel over the packed
// sequences on a GPU in fp16/bf16, equal-length groups elsewhere). The sentence-transformers modules after the
// transformer (Pooling, Dense, Normalize) follow the checkpoint (checkpoint.hpp).
//
// An EmbeddingModel holds its weights on one device. encode() is const and thread-safe: replicas on one
// device may share one model (and so one copy of the weights), each calling encode() from its own thread
// and CUDA stream. A GraphedEmbeddingModel (one per replica) replays the same passes from CUDA graphs.
#pragma once

#include "flowline/models/checkpoint.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flowline::models {

// One batch: token ids of several sequences, concatenated. Borrowed by the model call that takes it
// (EmbeddingModel::encode, CrossEncoderModel::score, TokenClassifierModel::logits, the graphed models): the
// spans are copied into the model's own host memory before the call returns, even when the device work is
// still queued, so the caller may reuse or free them then.
struct PackedBatch {
  std::span<const std::int32_t> ids;       // all tokens, sequence after sequence
  std::span<const std::int64_t> lengths;   // tokens per sequence (each >= 1)
  std::span<const std::int32_t> type_ids;  // token type (segment) per token, or empty for all 0
  // Tokens at the start of each sequence that pooling leaves out (a prompt, when the Pooling module says
  // include_prompt: false); empty for none. Never the whole sequence.
  std::span<const std::int64_t> pooling_skip;
};

// What the transformer of a loaded model is.
struct ModelInfo {
  std::string model_type;    // "bert", "mpnet", ...
  std::string architecture;  // the table's description, e.g. "BERT (post-LayerNorm, absolute positions)"
  std::int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, num_heads = 0, intermediate_size = 0;
  std::int64_t max_positions = 0;  // the longest sequence the position scheme allows
  std::int64_t type_vocab_size = 1;
};

namespace detail {
class Transformer;  // src/models/transformer.hpp
struct GraphAccess;
}  // namespace detail

class EmbeddingModel {
 public:
  // Loads `checkpoint`'s weights onto `device` in `dtype` (kFloat, kHalf or kBFloat16). Throws
  // flowline::Error naming the file and tensor for a missing or misshapen weight.
  EmbeddingModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype);
  EmbeddingModel(const std::filesystem::path& folder, c10::Device device, c10::ScalarType dtype);
  ~EmbeddingModel();

  // Sentence embeddings [sequences, dimension()] in float32 on the model's device, in the batch's order.
  // On a GPU the ids go up in one non-blocking copy from pinned host memory and the work is only enqueued
  // on the current stream: the call returns before the GPU is done and never waits for it.
  at::Tensor encode(const PackedBatch& batch) const;
  // Token states [T, hidden] (packed) in the model's dtype; for tests and custom pooling.
  at::Tensor token_states(const PackedBatch& batch) const;

  const Checkpoint& checkpoint() const noexcept { return checkpoint_; }
  const ModelInfo& info() const noexcept;
  std::int64_t dimension() const noexcept;  // of the embeddings, after Pooling and Dense
  c10::Device device() const noexcept { return device_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }
  std::size_t weight_bytes() const noexcept;  // on the device
  // Whether a pass's work is independent of its sequence lengths on the host (one attention kernel over
  // the packed tokens on a GPU in fp16/bf16, no host-side grouping): what GraphedEmbeddingModel needs.
  bool graphable() const noexcept;

 private:
  friend struct detail::GraphAccess;  // the CUDA graphs run the pass on their own inputs
  struct Modules;
  Checkpoint checkpoint_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<detail::Transformer> transformer_;
  std::unique_ptr<Modules> modules_;
  bool packed_ = false;  // the transformer's attention runs as one kernel over the packed sequences
};

// The model types the table knows, e.g. {"bert", "camembert", "modernbert", "mpnet", ...}.
std::vector<std::string> supported_model_types();
// The table's architectures that run for `use`, by their short names in the table's order: every one for
// embeddings ("BERT", "RoBERTa/XLM-R/CamemBERT", "MPNet", ...), those with a sequence-classification head
// for cross-encoders. The executors' descriptions list them.
std::vector<std::string> supported_architectures(Checkpoint::Use use);

// EmbeddingModel::encode() replayed from CUDA graphs: each forward pass is launched as one graph instead of
// about ten kernels per layer, which matters when passes are short (the GPU finishes a kernel faster
// than the host launches the next). Passes are padded up to one of eight token counts per power of two
// (at most 1/8 more tokens; the padding belongs to no sequence and changes no result), and each size is
// captured the first time it is needed, or all at once by capture_all().
//
// One GraphedEmbeddingModel per replica: it is not thread-safe, and every call must come from the same
// CUDA stream (the graphs share one memory pool, which is safe because their replays never overlap).
// The weights stay in the shared EmbeddingModel. Needs graphable().
//
// The capturing and replaying live in libflowline_models_cuda.so, beside this library, which the
// constructor loads (with LibTorch's CUDA library): a model on the CPU maps no CUDA library.
class GraphedEmbeddingModel {
 public:
  // Graphs for passes of up to `max_sequences` sequences, `max_tokens` tokens (rounded up to a bucket)
  // and sequences of up to `max_length` tokens. Allocates the inputs' device buffer; captures nothing yet.
  GraphedEmbeddingModel(std::shared_ptr<const EmbeddingModel> model, std::int64_t max_sequences,
                        std::int64_t max_tokens, std::int64_t max_length);
  ~GraphedEmbeddingModel();
  GraphedEmbeddingModel(const GraphedEmbeddingModel&) = delete;
  GraphedEmbeddingModel& operator=(const GraphedEmbeddingModel&) = delete;

  // Whether `batch` is within the graphs' sizes and shape (otherwise use EmbeddingModel::encode()).
  bool fits(const PackedBatch& batch) const noexcept;
  // As EmbeddingModel::encode(), enqueued on the current stream. The result is a view of the graph's
  // output: read it (in stream order) before the next encode() call.
  at::Tensor encode(const PackedBatch& batch);
  // Captures every size now, so no pass pays for a capture later.
  void capture_all();

  // The token count a pass of `tokens` tokens is padded to.
  static std::int64_t bucket(std::int64_t tokens) noexcept;
  std::int64_t max_tokens() const noexcept;
  std::int64_t max_sequences() const noexcept;
  std::size_t graph_count() const noexcept;
  double capture_seconds() const noexcept;  // spent capturing so far

  struct Impl;  // the CUDA side (src/models/graphs.hpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowline::models
