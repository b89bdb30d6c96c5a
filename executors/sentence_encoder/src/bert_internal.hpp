// Internal to the sentence_encoder library: the device-side batch that BertEncoder and GraphedBertEncoder
// share, the batch checks and layout both use, and the interface between GraphedBertEncoder and its CUDA
// side (graphed_bert.cpp, built as libflowline_sentence_encoder_cuda.so). Not installed; include only from
// src/.
#pragma once

#include "flowline/sentence_encoder/bert.hpp"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace flowline::sentence_encoder {

// A batch's index tensors on the encoder's device, and what the host knows of its shape.
struct BertEncoder::DeviceBatch {
  at::Tensor ids, positions;  // [T] int64
  at::Tensor lengths;         // [n] int64
  at::Tensor offsets;         // [n + 1] int64: where each sequence starts, then T
  at::Tensor cu_seqlens;      // [n + 1] int32 (GPU flash attention only)
  int64_t total = 0, longest = 0;
  std::vector<Group> groups;  // runs of equal-length sequences (attention outside flash)
};

namespace detail {

// The checks every batch gets before anything is enqueued: lengths in range, ids in the vocabulary, and
// ids and lengths that agree. Returns (total tokens, longest sequence). Throws flowline::Error.
std::pair<int64_t, int64_t> check_batch(const PackedBatch& batch, const BertConfig& b);

// Writes a checked batch into an int64 layout: ids at ids[0, T), positions at positions[0, T), lengths
// at lengths[0, n) and offsets at offsets[0, n]. Slots past the batch (up to `slots` sequences) are
// written as empty sequences, so a graph sized for more sequences reduces them to nothing.
void write_layout(const PackedBatch& batch, int64_t* ids, int64_t* positions, int64_t* lengths, int64_t* offsets,
                  int64_t slots);

}  // namespace detail

// What GraphedBertEncoder's CUDA side may use of BertEncoder's internals.
struct detail::GraphAccess {
  using DeviceBatch = BertEncoder::DeviceBatch;
  static at::Tensor forward_and_pool(const BertEncoder& encoder, const DeviceBatch& batch) {
    return encoder.pool(encoder.forward(batch), batch);
  }
};

// GraphedBertEncoder's CUDA side. It sets the fields below when made; GraphedBertEncoder (in the CPU
// library) checks batches against them before any call. Calls come from the replica's thread, on its stream.
struct GraphedBertEncoder::Impl {
  virtual ~Impl() = default;
  // Captures the graph for passes of `tokens` tokens (a bucket) unless it exists.
  virtual void capture(int64_t tokens) = 0;
  // Replays the graph of `tokens` tokens (a bucket of the batch's `total`) on the batch; the result is a
  // view of the graph's output.
  virtual at::Tensor replay(const PackedBatch& batch, int64_t total, int64_t tokens) = 0;
  virtual std::size_t graph_count() const noexcept = 0;
  virtual double capture_seconds() const noexcept = 0;

  std::shared_ptr<const BertEncoder> encoder;
  int64_t max_sequences = 0, max_tokens = 0, max_length = 0;
};

// The entry point of libflowline_sentence_encoder_cuda.so (C linkage, found with dlsym): graphs for
// `encoder` with these sizes (max_tokens already a bucket), none captured yet. The caller owns the result.
using MakeGraphs = GraphedBertEncoder::Impl* (*)(std::shared_ptr<const BertEncoder> encoder, int64_t max_sequences,
                                                 int64_t max_tokens, int64_t max_length);
inline constexpr const char* kMakeGraphsEntry = "flowline_sentence_encoder_make_graphs";
inline constexpr const char* kGraphsLibrary = "libflowline_sentence_encoder_cuda.so";

}  // namespace flowline::sentence_encoder
