// CrossEncoderModel: the checkpoint's transformer, then its sequence-classification head on each pair's
// first token, then the CrossEncoder activation.
#include "flowline/models/cross_encoder.hpp"

#include "flowline/error.hpp"
#include "transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

namespace flowline::models {

struct CrossEncoderModel::Head {
  at::Tensor dense_w, dense_b, out_w, out_b;  // first-token dense + tanh, then the labels
  Activation activation = Activation::Sigmoid;
  std::size_t bytes = 0;
};

CrossEncoderModel::CrossEncoderModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype)
    : checkpoint_(checkpoint), device_(device), dtype_(dtype), head_(std::make_unique<Head>()) {
  if (!checkpoint.classifier) {
    throw Error(
        fmt::format("'{}': not a cross-encoder (config.json's architectures name no "
                    "*ForSequenceClassification)",
                    checkpoint.config_file.string()));
  }
  const bool bert = checkpoint.model_type == "bert";
  const bool roberta = checkpoint.model_type == "roberta" || checkpoint.model_type == "xlm-roberta" ||
                       checkpoint.model_type == "camembert";
  if (!bert && !roberta) {
    throw Error(fmt::format("'{}': a {} cross-encoder is not supported (bert, roberta, xlm-roberta, camembert heads)",
                            checkpoint.config_file.string(), checkpoint.model_type));
  }
  const detail::ArchitectureContext context{checkpoint_, device, dtype};
  transformer_ = detail::make_transformer(context);
  packed_ = transformer_->uses_packed_attention(context);
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, transformer_->info().max_positions);
  c10::InferenceMode guard;
  const std::int64_t H = transformer_->info().hidden_size, labels = checkpoint.classifier->num_labels;
  const auto file = checkpoint.folder / "model.safetensors";
  detail::WeightLoader w(file, bert ? "classifier.weight" : "classifier.out_proj.weight", device, at::kFloat);
  if (bert) {
    // BertForSequenceClassification: the pooler's dense + tanh on [CLS], then the classifier.
    detail::WeightLoader pooler(file, "pooler.dense.weight", device, at::kFloat);
    head_->dense_w = pooler.load("pooler.dense.weight", {H, H});
    head_->dense_b = pooler.load("pooler.dense.bias", {H});
    head_->out_w = w.load("classifier.weight", {labels, H});
    head_->out_b = w.load("classifier.bias", {labels});
    head_->bytes = pooler.bytes() + w.bytes();
  } else {
    head_->dense_w = w.load("classifier.dense.weight", {H, H});
    head_->dense_b = w.load("classifier.dense.bias", {H});
    head_->out_w = w.load("classifier.out_proj.weight", {labels, H});
    head_->out_b = w.load("classifier.out_proj.bias", {labels});
    head_->bytes = w.bytes();
  }
  head_->activation = checkpoint.classifier->activation;
}

CrossEncoderModel::~CrossEncoderModel() = default;

const ModelInfo& CrossEncoderModel::info() const noexcept { return transformer_->info(); }
std::int64_t CrossEncoderModel::num_labels() const noexcept { return head_->out_w.size(0); }
std::size_t CrossEncoderModel::weight_bytes() const noexcept { return transformer_->weight_bytes() + head_->bytes; }

at::Tensor CrossEncoderModel::score(const PackedBatch& batch, bool raw) const {
  c10::InferenceMode guard;
  const detail::DeviceBatch device_batch = detail::upload(batch, info(), device_, packed_);
  const at::Tensor states = transformer_->forward(device_batch);
  const at::Tensor first =
      states.index_select(0, device_batch.offsets.narrow(0, 0, device_batch.lengths.size(0))).to(at::kFloat);
  at::Tensor logits =
      at::linear(at::tanh(at::linear(first, head_->dense_w, head_->dense_b)), head_->out_w, head_->out_b);
  return raw ? logits : detail::apply_activation(head_->activation, logits);
}

}  // namespace flowline::models
