// GraphedEmbeddingModel's host side: sizes, buckets and batch checks, in the CPU library. The capturing and
// replaying are in cuda/graphed_model.cpp (libflowline_models_cuda.so), loaded by the constructor.
#include "graphs.hpp"

#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>

namespace flowline::models {

std::int64_t GraphedEmbeddingModel::bucket(std::int64_t tokens) noexcept { return detail::padded_pass_tokens(tokens); }

GraphedEmbeddingModel::GraphedEmbeddingModel(std::shared_ptr<const EmbeddingModel> model, std::int64_t max_sequences,
                                             std::int64_t max_tokens, std::int64_t max_length) {
  if (!model->graphable()) {
    throw Error(fmt::format(
        "CUDA graphs need a model whose attention runs over packed tokens in one kernel (a GPU in fp16 or bf16; "
        "not {} in {})",
        model->device().str(), c10::toString(model->dtype())));
  }
  if (max_sequences < 1 || max_tokens < 1 || max_length < 1) throw Error("CUDA graphs: sizes must be at least 1");
  const auto make = reinterpret_cast<MakeGraphs>(
      load_gpu_part(reinterpret_cast<const void*>(&GraphedEmbeddingModel::bucket), kGraphsLibrary, kMakeGraphsEntry));
  const std::int64_t tokens = bucket(max_tokens);
  impl_.reset(make(std::move(model), std::min(max_sequences, tokens), tokens, max_length));
}

GraphedEmbeddingModel::~GraphedEmbeddingModel() = default;

bool GraphedEmbeddingModel::fits(const PackedBatch& batch) const noexcept {
  if (!batch.type_ids.empty() || !batch.pooling_skip.empty()) return false;
  if (static_cast<std::int64_t>(batch.lengths.size()) > impl_->max_sequences ||
      static_cast<std::int64_t>(batch.ids.size()) > impl_->max_tokens) {
    return false;
  }
  return std::all_of(batch.lengths.begin(), batch.lengths.end(),
                     [&](std::int64_t len) { return len <= impl_->max_length; });
}

std::int64_t GraphedEmbeddingModel::max_tokens() const noexcept { return impl_->max_tokens; }
std::int64_t GraphedEmbeddingModel::max_sequences() const noexcept { return impl_->max_sequences; }
std::size_t GraphedEmbeddingModel::graph_count() const noexcept { return impl_->graph_count(); }
double GraphedEmbeddingModel::capture_seconds() const noexcept { return impl_->capture_seconds(); }

void GraphedEmbeddingModel::capture_all() {
  c10::InferenceMode guard;
  for (std::int64_t tokens = bucket(1);; tokens = bucket(tokens + 1)) {
    impl_->capture(std::min(tokens, impl_->max_tokens));
    if (tokens >= impl_->max_tokens) break;
  }
}

at::Tensor GraphedEmbeddingModel::encode(const PackedBatch& batch) {
  if (!fits(batch)) {
    throw Error(fmt::format(
        "CUDA graphs: a pass of {} sequences and {} tokens is outside the graphs' {} sequences, {} "
        "tokens and {} tokens per sequence (and type ids and pooling skips are not graphed)",
        batch.lengths.size(), batch.ids.size(), impl_->max_sequences, impl_->max_tokens, impl_->max_length));
  }
  c10::InferenceMode guard;
  const std::int64_t total = detail::check_batch(batch, impl_->model->info()).first;
  return impl_->replay(batch, total, bucket(total));
}

}  // namespace flowline::models
