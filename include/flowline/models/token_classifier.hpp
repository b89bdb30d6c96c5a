// flowline/models/token_classifier.hpp — a token classifier (a `*ForTokenClassification` checkpoint): the
// transformer of the checkpoint's architecture, then its token-classification head over every token's state,
// giving each token's logits over config.json's id2label labels.
//
// The head's layout is a column of the architecture table (src/models/architectures/table.cpp): a linear
// `classifier` (BERT, RoBERTa/XLM-R/CamemBERT, DistilBERT, MPNet, DeBERTa-v2), Qwen3's linear `score`, or
// ModernBERT's `head` (dense, activation, LayerNorm) then `classifier`. An architecture without one, a checkpoint that
// is not *ForTokenClassification or one without id2label is refused when the checkpoint is validated
// (Checkpoint::problem with Use::TokenClassifier) and when the model is made, naming the file and what is missing.
// logits() is const and thread-safe, like CrossEncoderModel::score(): replicas on one device share one model.
#pragma once

#include "flowline/models/embedding_model.hpp"

#include <string>
#include <vector>

namespace flowline::models {

namespace detail {
class HeadedTransformer;  // src/models/transformer.hpp
}  // namespace detail

class TokenClassifierModel {
 public:
  // Loads the transformer and the head onto `device` in `dtype` (the head computes in float32). Throws
  // flowline::Error when the checkpoint has no token-classification head flowline runs.
  TokenClassifierModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype);
  ~TokenClassifierModel();

  // Logits [T, labels] in float32 on the model's device, one row per token of the packed batch in its order
  // (specials included). Enqueues work only, as EmbeddingModel::encode().
  at::Tensor logits(const PackedBatch& batch) const;

  const Checkpoint& checkpoint() const noexcept { return checkpoint_; }
  const ModelInfo& info() const noexcept;
  const std::vector<std::string>& labels() const noexcept { return checkpoint_.token_classifier->labels; }
  c10::Device device() const noexcept { return device_; }
  c10::ScalarType dtype() const noexcept { return dtype_; }
  std::size_t weight_bytes() const noexcept;

 private:
  Checkpoint checkpoint_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::unique_ptr<detail::HeadedTransformer> model_;  // the transformer and its head
};

}  // namespace flowline::models
