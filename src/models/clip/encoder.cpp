// The pieces both towers of a CLIP-like model share: config.json's checked values, the weights, LayerNorm,
// activations and the pre-LayerNorm encoder (clip.hpp).
#include "clip.hpp"

#include "flowline/error.hpp"

#include "../model_file.hpp"
#include "../transformer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace flowline::models::clip {

namespace json = boost::json;

namespace {

constexpr double kQuickGeluScale = 1.702;

std::string dotted(std::string_view section, std::string_view key) {
  return section.empty() ? std::string(key) : fmt::format("{}.{}", section, key);
}

}  // namespace

// ---- config.json ------------------------------------------------------------------------------------------

const json::value* ConfigReader::find(std::string_view section, const char* key) const {
  const json::object* object = &root_;
  if (!section.empty()) {
    const json::value* s = root_.if_contains(section);
    if (s == nullptr || s->is_null()) return nullptr;
    if (!s->is_object()) fail("", section, "must be an object");
    object = &s->get_object();
  }
  const json::value* v = object->if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

void ConfigReader::fail(std::string_view section, std::string_view key, const std::string& message) const {
  throw Error(fmt::format("'{}': {}: {}", file_.string(), dotted(section, key), message));
}

std::int64_t ConfigReader::int_in(std::string_view section, const char* key, std::optional<std::int64_t> fallback,
                                  std::int64_t min, std::int64_t max) const {
  const json::value* v = find(section, key);
  if (v == nullptr) {
    if (!fallback) fail(section, key, fmt::format("missing; must be an integer in {}..{}", min, max));
    return *fallback;
  }
  std::int64_t n = 0;
  if (v->is_int64()) {
    n = v->get_int64();
  } else if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(max)) {
    n = static_cast<std::int64_t>(v->get_uint64());
  } else {
    fail(section, key, fmt::format("must be an integer in {}..{}, got {}", min, max, json_excerpt(*v)));
  }
  if (n < min || n > max) fail(section, key, fmt::format("must be an integer in {}..{}, got {}", min, max, n));
  return n;
}

double ConfigReader::number_in(std::string_view section, const char* key, double fallback, double min,
                               double max) const {
  const json::value* v = find(section, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) fail(section, key, fmt::format("must be a number, got {}", json_excerpt(*v)));
  const double x = v->to_number<double>();
  if (!std::isfinite(x) || x <= min || x >= max) {
    fail(section, key, fmt::format("must be a finite number in ({}, {}), got {}", min, max, x));
  }
  return x;
}

std::string ConfigReader::text_or(std::string_view section, const char* key, std::string_view fallback) const {
  const json::value* v = find(section, key);
  if (v == nullptr) return std::string(fallback);
  if (!v->is_string()) fail(section, key, fmt::format("must be a string, got {}", json_excerpt(*v)));
  return std::string(v->get_string());
}

bool ConfigReader::bool_or(std::string_view section, const char* key, bool fallback) const {
  const json::value* v = find(section, key);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) fail(section, key, fmt::format("must be true or false, got {}", json_excerpt(*v)));
  return v->get_bool();
}

TowerConfig TowerConfig::read(const ConfigReader& config, std::string section, const ClipKind& kind) {
  using namespace models::detail;
  TowerConfig t;
  t.section = std::move(section);
  t.hidden = config.int_in(t.section, "hidden_size", std::nullopt, 1, kMaxHidden);
  t.intermediate = config.int_in(t.section, "intermediate_size", std::nullopt, 1, kMaxIntermediate);
  t.layers = config.int_in(t.section, "num_hidden_layers", std::nullopt, 1, kMaxLayers);
  t.heads = config.int_in(t.section, "num_attention_heads", std::nullopt, 1, kMaxHeads);
  if (t.hidden % t.heads != 0 || t.hidden / t.heads > kMaxHeadDim) {
    config.fail(
        t.section, "num_attention_heads",
        fmt::format("{} does not divide hidden_size {} into heads of at most {}", t.heads, t.hidden, kMaxHeadDim));
  }
  t.eps = config.number_in(t.section, "layer_norm_eps", kind.default_eps, 0.0, 1.0);
  t.activation = config.text_or(t.section, "hidden_act", kind.default_activation);
  if (!known_clip_activation(t.activation)) {
    config.fail(
        t.section, "hidden_act",
        fmt::format("'{}' is not supported (quick_gelu, gelu, gelu_new, gelu_pytorch_tanh, relu, silu)", t.activation));
  }
  return t;
}

// ---- weights ------------------------------------------------------------------------------------------------

Weights::Weights(const std::filesystem::path& file, c10::Device device, c10::ScalarType dtype)
    : file_(file), device_(device), dtype_(dtype) {}

at::Tensor Weights::read(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys) {
  if (!file_.contains(name)) {
    throw Error(fmt::format("'{}': no tensor '{}' (config.json implies it)", file_.path().string(), name));
  }
  if (!c10::isFloatingType(file_.dtype(name))) {
    throw Error(fmt::format("'{}': tensor '{}' holds {}, and a weight must be floating point", file_.path().string(),
                            name, file_.dtype_name(name)));
  }
  const std::vector<std::int64_t> found = file_.shape(name);
  if (found != shape) {
    throw Error(fmt::format("'{}': tensor '{}' has shape [{}], config.json's {} imply [{}]", file_.path().string(),
                            name, fmt::join(found, ", "), keys, fmt::join(shape, ", ")));
  }
  return file_.get(name);
}

at::Tensor Weights::load(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys) {
  at::Tensor t = read(name, shape, keys).to(device_, dtype_).contiguous();
  bytes_ += t.numel() * t.element_size();
  return t;
}

at::Tensor Weights::load_float(const std::string& name, const std::vector<std::int64_t>& shape, std::string_view keys) {
  at::Tensor t = read(name, shape, keys).to(device_, at::kFloat).contiguous();
  bytes_ += t.numel() * t.element_size();
  return t;
}

std::int64_t Weights::count(std::string_view stem) const {
  std::int64_t n = 0;
  for (const auto& name : file_.names()) {
    if (name.compare(0, stem.size(), stem) != 0) continue;
    const std::size_t dot = name.find('.', stem.size());
    if (dot == std::string::npos || dot == stem.size()) continue;
    const std::string number = name.substr(stem.size(), dot - stem.size());
    if (number.find_first_not_of("0123456789") != std::string::npos || number.size() > 6) continue;
    n = std::max<std::int64_t>(n, std::stoll(number) + 1);
  }
  return n;
}

LayerNorm LayerNorm::load(Weights& weights, const std::string& name, const TowerConfig& config) {
  const std::string keys = config.section + ".hidden_size";
  return LayerNorm{weights.load(name + ".weight", {config.hidden}, keys),
                   weights.load(name + ".bias", {config.hidden}, keys), config.eps};
}

at::Tensor LayerNorm::operator()(const at::Tensor& x) const {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

// ---- activations --------------------------------------------------------------------------------------------

bool known_clip_activation(const std::string& name) {
  return name == "quick_gelu" || models::detail::known_activation(name);
}

at::Tensor activate_named(const at::Tensor& x, const std::string& name) {
  // transformers' QuickGELUActivation: x * sigmoid(1.702 x), what OpenAI's CLIP was trained with.
  if (name == "quick_gelu") return x * at::sigmoid(kQuickGeluScale * x);
  return models::detail::activate(x, name);
}

at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc1_weight, const at::Tensor& fc1_bias,
               const at::Tensor& fc2_weight, const at::Tensor& fc2_bias, const std::string& activation) {
  return at::linear(activate_named(at::linear(x, fc1_weight, fc1_bias), activation), fc2_weight, fc2_bias);
}

// ---- the encoder ----------------------------------------------------------------------------------------------

Encoder::Encoder(Weights& weights, const std::string& prefix, const TowerConfig& config)
    : heads_(config.heads), activation_(config.activation) {
  const std::string stem = prefix + "layers.";
  const std::int64_t found = weights.count(stem);
  if (found != config.layers) {
    throw Error(fmt::format("'{}': {}.num_hidden_layers is {}, but '{}' holds {} layers ({}N.*)",
                            weights.file().path().string(), config.section, config.layers,
                            weights.file().path().filename().string(), found, stem));
  }
  const std::int64_t h = config.hidden, i = config.intermediate;
  const std::string hk = config.section + ".hidden_size", ik = config.section + ".intermediate_size";
  for (std::int64_t n = 0; n < config.layers; ++n) {
    const std::string p = fmt::format("{}{}.", stem, n);
    Layer layer{LayerNorm::load(weights, p + "layer_norm1", config),
                LayerNorm::load(weights, p + "layer_norm2", config)};
    // q, k and v in one matrix: one GEMM per layer instead of three.
    std::vector<at::Tensor> w, b;
    for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
      w.push_back(weights.load(fmt::format("{}self_attn.{}.weight", p, part), {h, h}, hk));
      b.push_back(weights.load(fmt::format("{}self_attn.{}.bias", p, part), {h}, hk));
    }
    layer.qkv_weight = at::cat(w, 0).contiguous();
    layer.qkv_bias = at::cat(b, 0).contiguous();
    layer.out_weight = weights.load(p + "self_attn.out_proj.weight", {h, h}, hk);
    layer.out_bias = weights.load(p + "self_attn.out_proj.bias", {h}, hk);
    layer.fc1_weight = weights.load(p + "mlp.fc1.weight", {i, h}, hk + ", " + ik);
    layer.fc1_bias = weights.load(p + "mlp.fc1.bias", {i}, ik);
    layer.fc2_weight = weights.load(p + "mlp.fc2.weight", {h, i}, hk + ", " + ik);
    layer.fc2_bias = weights.load(p + "mlp.fc2.bias", {h}, hk);
    if (activation_ == "quick_gelu") {
      // x sigmoid(1.702 x) = silu(1.702 x) / 1.702: fc1 scaled by 1.702 and fc2's weight by 1 / 1.702 make the
      // activation one SiLU kernel instead of three elementwise passes over [N, L, intermediate].
      layer.fc1_weight.mul_(kQuickGeluScale);
      layer.fc1_bias.mul_(kQuickGeluScale);
      layer.fc2_weight.div_(kQuickGeluScale);
    }
    layers_.push_back(std::move(layer));
  }
  if (activation_ == "quick_gelu") activation_ = "silu";
}

at::Tensor Encoder::forward(at::Tensor x, bool causal, const at::Tensor& key_mask) const {
  const std::int64_t n = x.size(0), length = x.size(1), hidden = x.size(2), head_dim = hidden / heads_;
  // A batch of one length: scaled_dot_product_attention over [N, heads, L, head_dim] (FlashAttention or the
  // memory-efficient kernel on a GPU), the padding of a text batch masked out as keys.
  std::optional<at::Tensor> mask;
  if (key_mask.defined()) {
    mask = key_mask.view({n, 1, 1, length});
    if (causal) mask = *mask & at::ones({length, length}, key_mask.options()).tril();
  }
  for (const Layer& layer : layers_) {
    const at::Tensor qkv = at::linear(layer.ln1(x), layer.qkv_weight, layer.qkv_bias)
                               .view({n, length, 3, heads_, head_dim})
                               .permute({2, 0, 3, 1, 4});
    const at::Tensor attended =
        at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], mask, 0.0, causal && !mask.has_value())
            .transpose(1, 2)
            .reshape({n, length, hidden});
    x = x + at::linear(attended, layer.out_weight, layer.out_bias);
    x = x + mlp(layer.ln2(x), layer.fc1_weight, layer.fc1_bias, layer.fc2_weight, layer.fc2_bias, activation_);
  }
  return x;
}

}  // namespace flowline::models::clip
