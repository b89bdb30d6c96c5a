// TokenClassifierModel: the checkpoint's transformer, then its token-classification head (the architecture
// table's column, heads.cpp) over every token.
#include "flowline/models/token_classifier.hpp"

#include "flowline/error.hpp"
#include "transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

namespace flowline::models {

TokenClassifierModel::TokenClassifierModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype)
    : checkpoint_(checkpoint), device_(device), dtype_(dtype) {
  if (!checkpoint.token_classifier) {
    throw Error(
        fmt::format("'{}': not a token classifier (config.json's architectures name no "
                    "*ForTokenClassification)",
                    checkpoint.config_file.string()));
  }
  // An architecture without a token head is refused before its transformer loads.
  const detail::MakeHead make_head = detail::head_layout(detail::HeadKind::TokenClassification, checkpoint);
  const detail::ArchitectureContext context{checkpoint_, device, dtype};
  transformer_ = detail::make_transformer(context);
  packed_ = transformer_->uses_packed_attention(context);
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, transformer_->info().max_positions);
  head_ = make_head({context, transformer_->info(), static_cast<std::int64_t>(labels().size())});
}

TokenClassifierModel::~TokenClassifierModel() = default;

const ModelInfo& TokenClassifierModel::info() const noexcept { return transformer_->info(); }
std::size_t TokenClassifierModel::weight_bytes() const noexcept {
  return transformer_->weight_bytes() + head_->weight_bytes();
}

at::Tensor TokenClassifierModel::logits(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  const detail::DeviceBatch device_batch = detail::upload(batch, info(), device_, packed_);
  return head_->forward(transformer_->forward(device_batch), device_batch);
}

}  // namespace flowline::models
