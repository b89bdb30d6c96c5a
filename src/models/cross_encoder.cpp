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
  // The head's layout is the architecture table's column: an architecture without one is refused before
  // its transformer loads.
  const detail::MakeHead make_head = detail::head_layout(detail::HeadKind::SequenceClassification, checkpoint);
  const detail::ArchitectureContext context{checkpoint_, device, dtype};
  transformer_ = detail::make_transformer(context);
  packed_ = transformer_->uses_packed_attention(context);
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, transformer_->info().max_positions);
  head_ = make_head({context, transformer_->info(), checkpoint.classifier->num_labels});
  activation_ = checkpoint.classifier->activation;
}

CrossEncoderModel::~CrossEncoderModel() = default;

const ModelInfo& CrossEncoderModel::info() const noexcept { return transformer_->info(); }
std::int64_t CrossEncoderModel::num_labels() const noexcept { return head_->outputs(); }
std::size_t CrossEncoderModel::weight_bytes() const noexcept {
  return transformer_->weight_bytes() + head_->weight_bytes();
}

at::Tensor CrossEncoderModel::score(const PackedBatch& batch, bool raw) const {
  c10::InferenceMode guard;
  const detail::DeviceBatch device_batch = detail::upload(batch, info(), device_, packed_);
  at::Tensor logits = head_->forward(transformer_->forward(device_batch), device_batch);
  return raw ? logits : detail::apply_activation(activation_, logits);
}

}  // namespace flowline::models
