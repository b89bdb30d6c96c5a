// GraphedBertEncoder's host side: sizes, buckets and batch checks, in the CPU library. The capturing and
// replaying are in graphed_bert.cpp (libflowline_sentence_encoder_cuda.so), loaded by the constructor.
#include "flowline/sentence_encoder/bert.hpp"

#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"
#include "bert_internal.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace flowline::sentence_encoder {

std::int64_t GraphedBertEncoder::bucket(std::int64_t tokens) noexcept {
  constexpr std::int64_t kSmallest = 256;
  if (tokens <= kSmallest) return kSmallest;
  // Eight sizes per power of two: m * 2^e with 8 <= m < 16, so a pass pads at most 1/8 of its tokens.
  const int shift = std::max(0, static_cast<int>(std::bit_width(static_cast<std::uint64_t>(tokens - 1))) - 4);
  const std::int64_t step = std::int64_t{1} << shift;
  return (tokens + step - 1) / step * step;
}

GraphedBertEncoder::GraphedBertEncoder(std::shared_ptr<const BertEncoder> encoder, std::int64_t max_sequences,
                                       std::int64_t max_tokens, std::int64_t max_length) {
  if (!encoder->uses_flash_attention()) {
    throw Error("CUDA graphs need the encoder on a GPU in fp16 or bf16 (flash attention over packed tokens)");
  }
  if (max_sequences < 1 || max_tokens < 1 || max_length < 1) throw Error("CUDA graphs: sizes must be at least 1");
  const auto make = reinterpret_cast<MakeGraphs>(
      load_gpu_part(reinterpret_cast<const void*>(&GraphedBertEncoder::bucket), kGraphsLibrary, kMakeGraphsEntry));
  const std::int64_t tokens = bucket(max_tokens);
  impl_.reset(make(std::move(encoder), std::min(max_sequences, tokens), tokens, max_length));
}

GraphedBertEncoder::~GraphedBertEncoder() = default;

bool GraphedBertEncoder::fits(const PackedBatch& batch) const noexcept {
  if (static_cast<int64_t>(batch.lengths.size()) > impl_->max_sequences ||
      static_cast<int64_t>(batch.ids.size()) > impl_->max_tokens) {
    return false;
  }
  return std::all_of(batch.lengths.begin(), batch.lengths.end(), [&](int64_t len) { return len <= impl_->max_length; });
}

std::int64_t GraphedBertEncoder::max_tokens() const noexcept { return impl_->max_tokens; }
std::int64_t GraphedBertEncoder::max_sequences() const noexcept { return impl_->max_sequences; }
std::size_t GraphedBertEncoder::graph_count() const noexcept { return impl_->graph_count(); }
double GraphedBertEncoder::capture_seconds() const noexcept { return impl_->capture_seconds(); }

void GraphedBertEncoder::capture_all() {
  c10::InferenceMode guard;
  for (int64_t tokens = bucket(1);; tokens = bucket(tokens + 1)) {
    impl_->capture(std::min(tokens, impl_->max_tokens));
    if (tokens >= impl_->max_tokens) break;
  }
}

at::Tensor GraphedBertEncoder::encode(const PackedBatch& batch) {
  if (!fits(batch)) {
    throw Error(fmt::format(
        "CUDA graphs: a pass of {} sequences and {} tokens is outside the graphs' {} sequences, {} "
        "tokens and {} tokens per sequence",
        batch.lengths.size(), batch.ids.size(), impl_->max_sequences, impl_->max_tokens, impl_->max_length));
  }
  c10::InferenceMode guard;
  const int64_t total = detail::check_batch(batch, impl_->encoder->config().bert).first;
  return impl_->replay(batch, total, bucket(total));
}

}  // namespace flowline::sentence_encoder
