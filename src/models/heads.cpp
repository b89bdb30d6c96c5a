// Model heads over a transformer's token states: the kinds of heads, their layouts in checkpoints, and the
// lookup of an architecture's layout of a kind in the architecture table's column.
#include "transformer.hpp"

#include "flowline/error.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

namespace flowline::models::detail {

std::span<const HeadKindInfo> head_kinds() {
  static const HeadKindInfo kinds[] = {
      {HeadKind::SequenceClassification, "sequence classification", "ForSequenceClassification"},
      {HeadKind::TokenClassification, "token classification", "ForTokenClassification"},
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

// A token classifier: every token's state, in float32, through an optional dense layer + activation +
// LayerNorm (ModernBERT's prediction head), then the labels' layer. Outputs [T, labels].
class PerTokenClassifier final : public Head {
 public:
  struct Dense {
    at::Tensor w, b;         // b undefined: no bias
    std::string activation;  // config.json's name (activate())
    at::Tensor norm_w, norm_b;
    double eps = 1e-5;
  };
  PerTokenClassifier(std::optional<Dense> dense, at::Tensor out_w, at::Tensor out_b, std::size_t bytes)
      : dense_(std::move(dense)), out_w_(std::move(out_w)), out_b_(std::move(out_b)) {
    outputs_ = out_w_.size(0);
    weight_bytes_ = bytes;
  }

  at::Tensor forward(const at::Tensor& states, const DeviceBatch&) const override {
    at::Tensor x = states.to(at::kFloat);
    if (dense_) {
      x = activate(at::linear(x, dense_->w, dense_->b), dense_->activation);
      x = at::layer_norm(x, {x.size(1)}, dense_->norm_w, dense_->norm_b, dense_->eps);
    }
    return at::linear(x, out_w_, out_b_);
  }

 private:
  std::optional<Dense> dense_;
  at::Tensor out_w_, out_b_;
};

bool config_flag(const HeadContext& context, const char* key, bool fallback) {
  const auto* v = context.model.checkpoint.config.if_contains(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_bool()) context.model.fail(key, "must be true or false");
  return v->get_bool();
}

}  // namespace

std::unique_ptr<Head> make_token_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  WeightLoader w(context.model.checkpoint.weights_file(), "classifier.weight", context.model.device, at::kFloat);
  at::Tensor out_w = w.load("classifier.weight", {labels, H});
  at::Tensor out_b = w.load("classifier.bias", {labels});
  return std::make_unique<PerTokenClassifier>(std::nullopt, std::move(out_w), std::move(out_b), w.bytes());
}

std::unique_ptr<Head> make_score_token_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  WeightLoader w(context.model.checkpoint.weights_file(), "score.weight", context.model.device, at::kFloat);
  at::Tensor out_w = w.load("score.weight", {labels, H});
  at::Tensor out_b;
  if (config_flag(context, "token_classification_bias", true)) out_b = w.load("score.bias", {labels});
  return std::make_unique<PerTokenClassifier>(std::nullopt, std::move(out_w), std::move(out_b), w.bytes());
}

std::unique_ptr<Head> make_modernbert_token_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  WeightLoader w(context.model.checkpoint.weights_file(), "head.dense.weight", context.model.device, at::kFloat);
  PerTokenClassifier::Dense dense;
  dense.activation = context.model.text_or("classifier_activation", "gelu");
  if (!known_activation(dense.activation)) {
    context.model.fail("classifier_activation", fmt::format("'{}' is not supported", dense.activation));
  }
  dense.eps = context.model.number_in("norm_eps", 1e-5, kNormEps);
  dense.w = w.load("head.dense.weight", {H, H});
  if (config_flag(context, "classifier_bias", false)) dense.b = w.load("head.dense.bias", {H});
  dense.norm_w = w.load("head.norm.weight", {H});
  if (config_flag(context, "norm_bias", false)) dense.norm_b = w.load("head.norm.bias", {H});
  at::Tensor out_w = w.load("classifier.weight", {labels, H});
  at::Tensor out_b = w.load("classifier.bias", {labels});
  return std::make_unique<PerTokenClassifier>(std::move(dense), std::move(out_w), std::move(out_b), w.bytes());
}

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

void check_head(HeadKind kind, const Checkpoint& checkpoint, std::int64_t outputs) {
  const MakeHead make = head_layout(kind, checkpoint);
  const ArchitectureContext context{checkpoint, c10::Device(c10::kCPU), c10::kFloat};
  ModelInfo info;
  info.hidden_size = checkpoint.config.contains("hidden_size") || !checkpoint.config.contains("dim")
                         ? context.int_in("hidden_size", 1, kMaxHidden)
                         : context.int_in("dim", 1, kMaxHidden);
  try {
    make({context, info, outputs});
  } catch (const Error& e) {
    throw Error(fmt::format("the {} head ({} of config.json's architectures): {}",
                            head_kinds()[static_cast<std::size_t>(kind)].name,
                            head_kinds()[static_cast<std::size_t>(kind)].class_suffix, e.what()));
  }
}

HeadedTransformer::HeadedTransformer(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype,
                                     HeadKind kind, std::int64_t outputs)
    : device_(device), kind_(kind) {
  const MakeHead make_head = head_layout(kind, checkpoint);
  const ArchitectureContext context{checkpoint, device, dtype};
  transformer_ = make_transformer(context);
  packed_ = transformer_->uses_packed_attention(context);
  head_ = make_head({context, transformer_->info(), outputs});
}

at::Tensor HeadedTransformer::forward(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  // Packed attention (a GPU in fp16/bf16): the pass padded to one of a few token counts (padded_pass_tokens), and
  // a per-token head's rows of the padding dropped.
  const DeviceBatch device_batch = upload(
      batch, info(), device_, packed_, packed_ ? padded_pass_tokens(static_cast<std::int64_t>(batch.ids.size())) : 0);
  at::Tensor out = head_->forward(transformer_->forward(device_batch), device_batch);
  if (kind_ == HeadKind::TokenClassification) out = out.narrow(0, 0, static_cast<std::int64_t>(batch.ids.size()));
  return out;
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
    const auto kind = use == Checkpoint::Use::TokenClassifier ? detail::HeadKind::TokenClassification
                                                              : detail::HeadKind::SequenceClassification;
    if (use == Checkpoint::Use::Embedding || a.heads[static_cast<std::size_t>(kind)] != nullptr) {
      out.emplace_back(a.name);
    }
  }
  return out;
}

}  // namespace flowline::models
