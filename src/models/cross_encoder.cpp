// CrossEncoderModel: the checkpoint's transformer, then its sequence-classification head (the architecture
// table's column, heads.cpp), then the CrossEncoder activation.
#include "flowline/models/cross_encoder.hpp"

#include "flowline/error.hpp"
#include "transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

namespace flowline::models {

CrossEncoderModel::CrossEncoderModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype)
    : checkpoint_(checkpoint), device_(device), dtype_(dtype) {
  if (!checkpoint.classifier) {
    throw Error(
        fmt::format("'{}': not a cross-encoder (config.json's architectures name no "
                    "*ForSequenceClassification)",
                    checkpoint.config_file.string()));
  }
  model_ = std::make_unique<detail::HeadedTransformer>(
      checkpoint_, device, dtype, detail::HeadKind::SequenceClassification, checkpoint.classifier->num_labels);
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, model_->info().max_positions);
  activation_ = checkpoint.classifier->activation;
}

CrossEncoderModel::~CrossEncoderModel() = default;

const ModelInfo& CrossEncoderModel::info() const noexcept { return model_->info(); }
std::int64_t CrossEncoderModel::num_labels() const noexcept { return model_->outputs(); }
std::size_t CrossEncoderModel::weight_bytes() const noexcept { return model_->weight_bytes(); }

at::Tensor CrossEncoderModel::score(const PackedBatch& batch, bool raw) const {
  c10::InferenceMode guard;
  at::Tensor logits = model_->forward(batch);
  return raw ? logits : detail::apply_activation(activation_, logits);
}

}  // namespace flowline::models
