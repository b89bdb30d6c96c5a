// Internal to the sentence_encoder library: the device-side batch that BertEncoder and GraphedBertEncoder
// share, and the batch checks and layout both use. Not installed; include only from src/.
#pragma once

#include "flowline/sentence_encoder/bert.hpp"

#include <ATen/ATen.h>

#include <cstdint>
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
}  // namespace flowline::sentence_encoder
