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
  model_ = std::make_unique<detail::HeadedTransformer>(
      checkpoint_, device, dtype, detail::HeadKind::TokenClassification, static_cast<std::int64_t>(labels().size()));
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, model_->info().max_positions);
}

TokenClassifierModel::~TokenClassifierModel() = default;

const ModelInfo& TokenClassifierModel::info() const noexcept { return model_->info(); }
std::size_t TokenClassifierModel::weight_bytes() const noexcept { return model_->weight_bytes(); }

at::Tensor TokenClassifierModel::logits(const PackedBatch& batch) const { return model_->forward(batch); }

}  // namespace flowline::models
