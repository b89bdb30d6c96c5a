// EmbeddingModel: the checkpoint's transformer (from the architecture table), then sentence-transformers'
// Pooling, Dense and Normalize over packed token states.
#include "flowline/models/embedding_model.hpp"

#include "flowline/error.hpp"
#include "flowline/models/outputs.hpp"
#include "graphs.hpp"
#include "transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace flowline::models {

namespace {

// Per token: whether pooling counts it (prompt tokens are left out when the batch says so), as float32.
// Never in a CUDA graph (GraphedEmbeddingModel::fits() refuses batches with pooling skips).
at::Tensor pooled_tokens(const detail::DeviceBatch& batch) {
  const at::Tensor sequence =
      at::repeat_interleave(at::arange(batch.lengths.size(0), batch.lengths.options()), batch.lengths, 0, batch.total);
  const at::Tensor skip = batch.pool_skip.index_select(0, sequence);
  return (batch.positions >= skip).to(at::kFloat).unsqueeze(1);
}

}  // namespace

at::Tensor detail::apply_activation(Activation activation, const at::Tensor& x) {
  switch (activation) {
    case Activation::Identity:
      return x;
    case Activation::Tanh:
      return at::tanh(x);
    case Activation::Relu:
      return at::relu(x);
    case Activation::Gelu:
      return at::gelu(x);
    case Activation::Sigmoid:
      return at::sigmoid(x);
  }
  return x;
}

struct EmbeddingModel::Modules {
  struct Dense {
    at::Tensor weight, bias;  // float32 on the device
    Activation activation;
  };
  std::vector<Dense> dense;
  std::int64_t dimension = 0;
};

EmbeddingModel::EmbeddingModel(const std::filesystem::path& folder, c10::Device device, c10::ScalarType dtype)
    : EmbeddingModel(Checkpoint::read(folder), device, dtype) {}

EmbeddingModel::EmbeddingModel(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype)
    : checkpoint_(checkpoint), device_(device), dtype_(dtype), modules_(std::make_unique<Modules>()) {
  if (dtype != c10::kFloat && dtype != c10::kHalf && dtype != c10::kBFloat16) {
    throw Error(fmt::format("model '{}': dtype must be float32, float16 or bfloat16", checkpoint.folder.string()));
  }
  const detail::ArchitectureContext context{checkpoint_, device, dtype};
  transformer_ = detail::make_transformer(context);
  packed_ = transformer_->uses_packed_attention(context);
  checkpoint_.max_seq_length = std::min(checkpoint_.max_seq_length, transformer_->info().max_positions);
  const auto& order = checkpoint_.modules.order;
  if (!order.empty() &&
      static_cast<std::size_t>(std::count(order.begin(), order.end(), SentenceModules::Step::Dense)) !=
          checkpoint_.modules.dense.size()) {
    throw Error(fmt::format(
        "model '{}': the modules' order names {} Dense modules, and {} are listed", checkpoint.folder.string(),
        std::count(order.begin(), order.end(), SentenceModules::Step::Dense), checkpoint_.modules.dense.size()));
  }
  const std::int64_t hidden = transformer_->info().hidden_size;
  std::int64_t dimension = hidden * static_cast<std::int64_t>(checkpoint_.modules.pooling.size());
  c10::InferenceMode guard;
  for (const auto& d : checkpoint_.modules.dense) {
    if (d.in_features != dimension) {
      throw Error(fmt::format("'{}': in_features {} but the module before gives {}",
                              (d.folder / "config.json").string(), d.in_features, dimension));
    }
    const SafetensorsFile file(d.weights_file());
    Modules::Dense dense;
    auto get = [&](const std::string& name, std::vector<std::int64_t> shape) {
      if (!file.contains(name)) throw Error(fmt::format("'{}': no tensor '{}'", file.path().string(), name));
      if (!c10::isFloatingType(file.dtype(name))) {
        throw Error(fmt::format("'{}': tensor '{}' holds {}, and a weight must be floating point (F32, F16, BF16, F64)",
                                file.path().string(), name, file.dtype_name(name)));
      }
      at::Tensor t = file.get(name);
      if (t.sizes() != at::IntArrayRef(shape)) {
        throw Error(fmt::format("'{}': tensor '{}' has shape {}, config.json implies [{}]", file.path().string(), name,
                                c10::str(t.sizes()), fmt::join(shape, ", ")));
      }
      return t.to(device, at::kFloat, false, true).contiguous();
    };
    dense.weight = get("linear.weight", {d.out_features, d.in_features});
    if (d.bias) dense.bias = get("linear.bias", {d.out_features});
    dense.activation = d.activation;
    modules_->dense.push_back(std::move(dense));
    dimension = d.out_features;
  }
  modules_->dimension = dimension;
}

EmbeddingModel::~EmbeddingModel() = default;

const ModelInfo& EmbeddingModel::info() const noexcept { return transformer_->info(); }
std::int64_t EmbeddingModel::dimension() const noexcept { return modules_->dimension; }
bool EmbeddingModel::graphable() const noexcept { return packed_; }

std::size_t EmbeddingModel::weight_bytes() const noexcept {
  std::size_t bytes = transformer_->weight_bytes();
  for (const auto& d : modules_->dense) {
    bytes += d.weight.numel() * d.weight.element_size() + (d.bias.defined() ? d.bias.numel() * 4 : 0);
  }
  return bytes;
}

at::Tensor EmbeddingModel::token_states(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  return transformer_->forward(detail::upload(batch, info(), device_, packed_));
}

at::Tensor EmbeddingModel::encode(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  return detail::GraphAccess::forward_and_pool(*this, detail::upload(batch, info(), device_, packed_));
}

// Pooling, Dense and Normalize over packed token states, driven by the offsets on the device: no value is
// read back to the host (segment_reduce's own checks would wait for the GPU; the lengths were checked on
// the host). Empty sequences (a graph's unused slots) pool to NaN or -inf rows that nobody reads.
at::Tensor detail::GraphAccess::forward_and_pool(const EmbeddingModel& model, const DeviceBatch& batch) {
  const at::Tensor states = model.transformer_->forward(batch);
  const auto& modules = model.checkpoint_.modules;
  const std::int64_t n = batch.lengths.size(0);
  at::Tensor tokens = states.to(at::kFloat);  // pooling, Dense and Normalize in float32
  const bool skipping = batch.pool_skip.defined();
  const at::Tensor kept = skipping ? pooled_tokens(batch) : at::Tensor();
  at::Tensor counts = batch.lengths.to(at::kFloat).unsqueeze(1);
  if (skipping) counts = counts - batch.pool_skip.to(at::kFloat).unsqueeze(1);
  std::vector<at::Tensor> parts;
  for (const Pooling p : modules.pooling) {
    switch (p) {
      case Pooling::Mean:
      case Pooling::MeanSqrtLen: {
        at::Tensor sums =
            at::segment_reduce(skipping ? tokens * kept : tokens, "sum", {}, {}, batch.offsets, 0, /*unsafe=*/true);
        parts.push_back(sums / (p == Pooling::Mean ? counts : counts.sqrt()));
        break;
      }
      case Pooling::Max:
        parts.push_back(at::segment_reduce(skipping ? tokens.masked_fill(kept == 0, -INFINITY) : tokens, "max", {}, {},
                                           batch.offsets, 0, /*unsafe=*/true));
        break;
      case Pooling::Cls: {
        // Clamped: a graph's empty slots start where the tokens end (their rows are never read).
        at::Tensor first = batch.offsets.narrow(0, 0, n);
        if (skipping) first = first + batch.pool_skip;
        parts.push_back(tokens.index_select(0, first.clamp_max(tokens.size(0) - 1)));
        break;
      }
      case Pooling::LastToken:
        // Clamped: an empty slot (a graph's, or every slot of the zeroed inputs it is captured on) has none.
        parts.push_back(tokens.index_select(0, (batch.offsets.narrow(0, 1, n) - 1).clamp_min(0)));
        break;
      case Pooling::WeightedMean: {
        at::Tensor weights = (batch.positions + 1).to(at::kFloat).unsqueeze(1);
        if (skipping) weights = weights * kept;
        at::Tensor sums = at::segment_reduce(tokens * weights, "sum", {}, {}, batch.offsets, 0, true);
        at::Tensor total = at::segment_reduce(weights, "sum", {}, {}, batch.offsets, 0, true);
        parts.push_back(sums / total.clamp_min(1e-9));
        break;
      }
    }
  }
  at::Tensor pooled = parts.size() == 1 ? parts.front() : at::cat(parts, 1);
  // Dense and Normalize in modules.json's order (a SentenceModules made in code: Dense, then Normalize).
  std::size_t next = 0;
  auto dense = [&] {
    const auto& d = model.modules_->dense[next++];
    pooled = detail::apply_activation(d.activation, at::linear(pooled, d.weight, d.bias));
  };
  auto normalize = [&] { pooled = normalize_rows(pooled); };  // without overflow (outputs.hpp)
  if (modules.order.empty()) {
    while (next < model.modules_->dense.size()) dense();
    if (modules.normalize) normalize();
    return pooled;
  }
  for (const auto step : modules.order) {
    if (step == SentenceModules::Step::Dense) {
      dense();
    } else {
      normalize();
    }
  }
  return pooled;
}

}  // namespace flowline::models
