// Model heads over a transformer's token states: the kinds of heads, their layouts in checkpoints, and the
// lookup of an architecture's layout of a kind in the architecture table's column.
#include "transformer.hpp"

#include "flowline/error.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace flowline::models::detail {

std::span<const HeadKindInfo> head_kinds() {
  static const HeadKindInfo kinds[] = {
      {HeadKind::SequenceClassification, "sequence classification", "ForSequenceClassification"},
  };
  static_assert(std::size(kinds) == kHeadKinds, "one row per HeadKind");
  return kinds;
}

namespace {

// A sequence classifier on each sequence's first token: a dense layer + tanh, then the labels' layer, in
// float32 (BERT's pooler and classifier, RoBERTa's classification head).
class FirstTokenClassifier final : public Head {
 public:
  FirstTokenClassifier(at::Tensor dense_w, at::Tensor dense_b, at::Tensor out_w, at::Tensor out_b, std::size_t bytes)
      : dense_w_(std::move(dense_w)), dense_b_(std::move(dense_b)), out_w_(std::move(out_w)), out_b_(std::move(out_b)) {
    outputs_ = out_w_.size(0);
    weight_bytes_ = bytes;
  }

  at::Tensor forward(const at::Tensor& states, const DeviceBatch& batch) const override {
    const at::Tensor first = states.index_select(0, batch.offsets.narrow(0, 0, batch.lengths.size(0))).to(at::kFloat);
    return at::linear(at::tanh(at::linear(first, dense_w_, dense_b_)), out_w_, out_b_);
  }

 private:
  at::Tensor dense_w_, dense_b_, out_w_, out_b_;
};

}  // namespace

std::unique_ptr<Head> make_pooler_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const auto file = context.model.checkpoint.weights_file();
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  WeightLoader pooler(file, "pooler.dense.weight", context.model.device, at::kFloat);
  WeightLoader w(file, "classifier.weight", context.model.device, at::kFloat);
  at::Tensor dense_w = pooler.load("pooler.dense.weight", {H, H});
  at::Tensor dense_b = pooler.load("pooler.dense.bias", {H});
  at::Tensor out_w = w.load("classifier.weight", {labels, H});
  at::Tensor out_b = w.load("classifier.bias", {labels});
  return std::make_unique<FirstTokenClassifier>(std::move(dense_w), std::move(dense_b), std::move(out_w),
                                                std::move(out_b), pooler.bytes() + w.bytes());
}

std::unique_ptr<Head> make_dense_out_proj_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  WeightLoader w(context.model.checkpoint.weights_file(), "classifier.out_proj.weight", context.model.device,
                 at::kFloat);
  at::Tensor dense_w = w.load("classifier.dense.weight", {H, H});
  at::Tensor dense_b = w.load("classifier.dense.bias", {H});
  at::Tensor out_w = w.load("classifier.out_proj.weight", {labels, H});
  at::Tensor out_b = w.load("classifier.out_proj.bias", {labels});
  return std::make_unique<FirstTokenClassifier>(std::move(dense_w), std::move(dense_b), std::move(out_w),
                                                std::move(out_b), w.bytes());
}

std::vector<std::string_view> model_types_with(HeadKind kind) {
  std::vector<std::string_view> out;
  for (const auto& a : architectures()) {
    if (a.heads[static_cast<std::size_t>(kind)] != nullptr)
      out.insert(out.end(), a.model_types.begin(), a.model_types.end());
  }
  return out;
}

MakeHead head_layout(HeadKind kind, const Checkpoint& checkpoint) {
  const auto* architecture = find_architecture(checkpoint.model_type);
  const MakeHead make = architecture ? architecture->heads[static_cast<std::size_t>(kind)] : nullptr;
  if (make == nullptr) {
    throw Error(fmt::format("'{}': a {} {} head is not supported ({} heads)", checkpoint.config_file.string(),
                            checkpoint.model_type, head_kinds()[static_cast<std::size_t>(kind)].name,
                            fmt::join(model_types_with(kind), ", ")));
  }
  return make;
}

}  // namespace flowline::models::detail

namespace flowline::models {

std::vector<std::string> supported_architectures(Checkpoint::Use use) {
  std::vector<std::string> out;
  for (const auto& a : detail::architectures()) {
    if (use == Checkpoint::Use::Embedding ||
        a.heads[static_cast<std::size_t>(detail::HeadKind::SequenceClassification)] != nullptr) {
      out.emplace_back(a.name);
    }
  }
  return out;
}

}  // namespace flowline::models
