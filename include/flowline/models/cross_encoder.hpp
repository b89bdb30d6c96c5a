// flowline/models/cross_encoder.hpp — a cross-encoder (a `*ForSequenceClassification` checkpoint): the
// transformer of the checkpoint's architecture over (query, document) pairs, then its classification head
// on the first token, then sentence-transformers' CrossEncoder activation (sigmoid for one label).
//
// The head's layout is a column of the architecture table (src/models/architectures/table.cpp): BERT's
// (pooler dense + tanh, then classifier) and RoBERTa's / XLM-R's / CamemBERT's (classifier.dense + tanh,
// then classifier.out_proj). An architecture without one is refused when the checkpoint is validated
// (Checkpoint::problem) and when the model is made, naming the file and the model types that have one.
// score() is const and thread-safe, like EmbeddingModel::encode(): replicas on one device share one model.
#pragma once

#include "flowline/models/embedding_model.hpp"

namespace flowline::models {

namespace detail {
class HeadedTransformer;  // src/models/transformer.hpp
}  // namespace detail

class CrossEncoderModel {
 public:
  // Throws flowline::Error when the checkpoint has no classifier head flowline runs.
  CrossEncoderModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype);
  ~CrossEncoderModel();

  // Scores [pairs, num_labels] in float32 on the model's device, in the batch's order: each sequence of
  // the batch is one pair as the tokenizer's pair template made it (type ids in batch.type_ids). With
  // `raw`, the logits before the activation. Enqueues work only, as EmbeddingModel::encode().
  at::Tensor score(const PackedBatch& batch, bool raw = false) const;

  const Checkpoint& checkpoint() const noexcept { return checkpoint_; }
  const ModelInfo& info() const noexcept;
  std::int64_t num_labels() const noexcept;
  c10::Device device() const noexcept { return device_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }
  std::size_t weight_bytes() const noexcept;

 private:
  Checkpoint checkpoint_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<detail::HeadedTransformer> model_;  // the transformer and its head
  Activation activation_ = Activation::Sigmoid;
};

}  // namespace flowline::models
