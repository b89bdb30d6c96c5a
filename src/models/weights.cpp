// What every architecture shares when it is made: config.json's keys with errors that name them, and the
// weight loader that finds a checkpoint's tensor prefix and checks each tensor's shape.
#include "transformer.hpp"

#include "cuda_kernels.hpp"
#include "model_file.hpp"

#include "flowline/error.hpp"

#include <c10/util/StringUtil.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace flowline::models::detail {

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string NumberRange::describe() const {
  return fmt::format("a finite number in {}{}, {}{}", min_open ? '(' : '[', min, max, max_open ? ')' : ']');
}

std::int64_t ArchitectureContext::int_in(const char* key, std::int64_t min, std::int64_t max) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) fail(key, fmt::format("missing (an integer in {}..{})", min, max));
  return int_in(key, 0, min, max);
}

std::int64_t ArchitectureContext::int_in(const char* key, std::int64_t fallback, std::int64_t min,
                                         std::int64_t max) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_int64() || v->get_int64() < min || v->get_int64() > max)
    fail(key, fmt::format("must be an integer in {}..{}, got {}", min, max, json_excerpt(*v)));
  return v->get_int64();
}

double ArchitectureContext::number_in(const char* key, double fallback, const NumberRange& range) const {
  return number_in(checkpoint.config.if_contains(key), key, fallback, range);
}

double ArchitectureContext::number_in(const boost::json::value* v, const std::string& key, double fallback,
                                      const NumberRange& range) const {
  if (!v || v->is_null()) return fallback;
  const double x = v->is_number() ? v->to_number<double>() : std::nan("");
  const bool above = range.min_open ? x > range.min : x >= range.min;
  const bool below = range.max_open ? x < range.max : x <= range.max;
  if (!std::isfinite(x) || !above || !below)
    fail(key, fmt::format("must be {}, got {}", range.describe(), json_excerpt(*v)));
  return x;
}

std::string ArchitectureContext::text_or(const char* key, const char* fallback) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_string()) fail(key, "must be a string");
  return std::string(v->get_string());
}

void ArchitectureContext::fail(const std::string& key, const std::string& message) const {
  throw Error(fmt::format("'{}': {}: {}", checkpoint.config_file.string(), key, message));
}

WeightLoader::WeightLoader(const std::filesystem::path& file, std::string_view anchor, c10::Device device,
                           c10::ScalarType dtype)
    : file_(file), device_(device), dtype_(dtype) {
  for (const auto& name : file_.names()) {
    if (ends_with(name, anchor)) {
      prefix_ = name.substr(0, name.size() - anchor.size());
      return;
    }
  }
  throw Error(
      fmt::format("'{}': no tensor named '...{}'; not a checkpoint of this architecture", file.string(), anchor));
}

bool WeightLoader::contains(const std::string& name) const { return file_.contains(prefix_ + name); }

std::string WeightLoader::resolve(const std::string& name) const {
  std::string full = prefix_ + name;
  // Old checkpoints call LayerNorm parameters gamma and beta.
  if (!file_.contains(full)) {
    const auto dot = full.rfind('.');
    const std::string tail = full.substr(dot + 1);
    const std::string alt = full.substr(0, dot + 1) + (tail == "weight" ? "gamma" : tail == "bias" ? "beta" : tail);
    if (file_.contains(alt)) full = alt;
  }
  if (!file_.contains(full)) {
    throw Error(fmt::format("'{}': no tensor '{}' (config.json implies it)", file_.path().string(), full));
  }
  return full;
}

// Weights are floating point; an integer or boolean tensor in their place is a broken checkpoint, never a
// weight to convert.
void WeightLoader::check_float(const std::string& full) const {
  if (!c10::isFloatingType(file_.dtype(full))) {
    throw Error(fmt::format("'{}': tensor '{}' holds {}, and a weight must be floating point (F32, F16, BF16, F64)",
                            file_.path().string(), full, file_.dtype_name(full)));
  }
}

at::Tensor WeightLoader::read(const std::string& name, const std::vector<std::int64_t>& shape) {
  const std::string full = resolve(name);
  check_float(full);
  at::Tensor t = file_.get(full);
  if (t.sizes() != at::IntArrayRef(shape)) {
    throw Error(fmt::format("'{}': tensor '{}' has shape {}, config.json implies [{}]", file_.path().string(), full,
                            c10::str(t.sizes()), fmt::join(shape, ", ")));
  }
  return t;
}

void WeightLoader::check(const ArchitectureContext& context, const std::string& name,
                         const std::vector<Dim>& dims) const {
  const std::string full = resolve(name);
  check_float(full);
  const std::vector<std::int64_t> shape = file_.shape(full);
  std::vector<std::string> keys;
  std::vector<std::int64_t> sizes;
  for (const auto& d : dims) {
    keys.push_back(d.key);
    sizes.push_back(d.size);
  }
  if (shape != sizes) {
    context.fail(fmt::format("{}", fmt::join(keys, ", ")),
                 fmt::format("[{}] disagrees with the weights: '{}' holds tensor '{}' of shape [{}]",
                             fmt::join(sizes, ", "), file_.path().string(), full, fmt::join(shape, ", ")));
  }
}

std::int64_t WeightLoader::count(std::string_view stem) const {
  const std::string start = prefix_ + std::string(stem);
  std::int64_t blocks = 0;
  for (const auto& name : file_.names()) {
    if (name.compare(0, start.size(), start) != 0) continue;
    std::int64_t n = 0;
    std::size_t i = start.size();
    while (i < name.size() && i - start.size() < 9 && name[i] >= '0' && name[i] <= '9') n = 10 * n + (name[i++] - '0');
    if (i > start.size() && i < name.size() && name[i] == '.') blocks = std::max(blocks, n + 1);
  }
  return blocks;
}

void WeightLoader::check_count(const ArchitectureContext& context, const char* key, std::int64_t layers,
                               std::string_view stem) const {
  const std::int64_t held = count(stem);
  if (held == layers) return;
  const std::string blocks = prefix_ + std::string(stem);
  if (held == 0)
    context.fail(key, fmt::format("{}, but '{}' holds no {}N.* tensors", layers, file_.path().string(), blocks));
  context.fail(key, fmt::format("{}, but '{}' holds {} ({}0 to {}{})", layers, file_.path().string(), held, blocks,
                                blocks, held - 1));
}

void check_weight_shapes(const ArchitectureContext& context, const WeightShapes& shapes) {
  const WeightLoader w(context.checkpoint.weights_file(), shapes.tensors.front().name, context.device, context.dtype);
  bool counted = false;
  for (const auto& t : shapes.tensors) {
    if (!counted && t.name.compare(0, shapes.layer_stem.size(), shapes.layer_stem) == 0) {
      w.check_count(context, shapes.layers_key, shapes.layers, shapes.layer_stem);
      counted = true;
    }
    if (!t.if_present || w.contains(t.name)) w.check(context, t.name, t.dims);
  }
  if (!counted) w.check_count(context, shapes.layers_key, shapes.layers, shapes.layer_stem);
}

at::Tensor WeightLoader::load(const std::string& name, std::vector<std::int64_t> shape) {
  at::Tensor on_device = read(name, shape).to(device_, dtype_, /*non_blocking=*/false, /*copy=*/true).contiguous();
  bytes_ += on_device.numel() * on_device.element_size();
  return on_device;
}

at::Tensor WeightLoader::load_float(const std::string& name, std::vector<std::int64_t> shape) {
  at::Tensor on_device = read(name, shape).to(device_, at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();
  bytes_ += on_device.numel() * on_device.element_size();
  return on_device;
}

at::Tensor activate(const at::Tensor& x, const std::string& name) {
  switch (activation_kind(name)) {
    case GatedActivation::gelu:
      return at::gelu(x);
    case GatedActivation::relu:
      return at::relu(x);
    case GatedActivation::silu:
      return at::silu(x);
    case GatedActivation::gelu_tanh:
      break;
  }
  return at::gelu(x, "tanh");
}

const Architecture* find_architecture(std::string_view model_type) {
  for (const auto& a : architectures()) {
    for (const auto t : a.model_types) {
      if (t == model_type) return &a;
    }
  }
  return nullptr;
}

std::unique_ptr<Transformer> make_transformer(const ArchitectureContext& context) {
  const auto* architecture = find_architecture(context.checkpoint.model_type);
  if (!architecture) throw Error(fmt::format("model_type '{}' is not supported", context.checkpoint.model_type));
  // The checks validation ran, again: a Checkpoint may be made by hand, and nothing is allocated before them.
  if (architecture->check) architecture->check({context.checkpoint, c10::Device(c10::kCPU), c10::kFloat});
  auto transformer = architecture->make(context);
  transformer->info_.model_type = context.checkpoint.model_type;
  return transformer;
}

}  // namespace flowline::models::detail

namespace flowline::models {

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& a : detail::architectures()) {
    for (const auto t : a.model_types) out.emplace_back(t);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace flowline::models
