// Internal to flowline::models: the interface between GraphedEmbeddingModel (graphs.cpp, in the CPU
// library) and its CUDA side (cuda/graphed_model.cpp, built as libflowline_models_cuda.so). Not installed.
#pragma once

#include "transformer.hpp"

namespace flowline::models {

// What GraphedEmbeddingModel's CUDA side may use of EmbeddingModel's internals.
struct detail::GraphAccess {
  static at::Tensor forward_and_pool(const EmbeddingModel& model, const DeviceBatch& batch);
  static const ModelInfo& info(const EmbeddingModel& model) { return model.info(); }
};

// GraphedEmbeddingModel's CUDA side. It sets the fields below when made; GraphedEmbeddingModel checks
// batches against them before any call. Calls come from the replica's thread, on its stream.
struct GraphedEmbeddingModel::Impl {
  virtual ~Impl() = default;
  // Captures the graph for passes of `tokens` tokens (a bucket) unless it exists.
  virtual void capture(std::int64_t tokens) = 0;
  // Replays the graph of `tokens` tokens (a bucket of the batch's `total`) on the batch; the result is a
  // view of the graph's output.
  virtual at::Tensor replay(const PackedBatch& batch, std::int64_t total, std::int64_t tokens) = 0;
  virtual std::size_t graph_count() const noexcept = 0;
  virtual double capture_seconds() const noexcept = 0;

  std::shared_ptr<const EmbeddingModel> model;
  std::int64_t max_sequences = 0, max_tokens = 0, max_length = 0;
};

// The entry point of libflowline_models_cuda.so (C linkage, found with dlsym): graphs for `model` with
// these sizes (max_tokens already a bucket), none captured yet. The caller owns the result.
using MakeGraphs = GraphedEmbeddingModel::Impl* (*)(std::shared_ptr<const EmbeddingModel> model,
                                                    std::int64_t max_sequences, std::int64_t max_tokens,
                                                    std::int64_t max_length);
inline constexpr const char* kMakeGraphsEntry = "flowline_models_make_graphs";
inline constexpr const char* kGraphsLibrary = "libflowline_models_cuda.so";

}  // namespace flowline::models
