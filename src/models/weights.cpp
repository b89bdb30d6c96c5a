// What every architecture shares when it is made: config.json's keys with errors that name them, and the
// weight loader that finds a checkpoint's tensor prefix and checks each tensor's shape.
#include "transformer.hpp"

#include "cuda_kernels.hpp"

#include "flowline/error.hpp"

#include <c10/util/StringUtil.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace flowline::models::detail {

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::int64_t ArchitectureContext::require_int(const char* key) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || !v->is_int64()) fail(key, "must be an integer");
  return v->get_int64();
}

std::int64_t ArchitectureContext::int_or(const char* key, std::int64_t fallback) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_int64()) fail(key, "must be an integer");
  return v->get_int64();
}

double ArchitectureContext::number_or(const char* key, double fallback) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_number()) fail(key, "must be a number");
  return v->to_number<double>();
}

std::string ArchitectureContext::text_or(const char* key, const char* fallback) const {
  const auto* v = checkpoint.config.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_string()) fail(key, "must be a string");
  return std::string(v->get_string());
}

void ArchitectureContext::fail(const char* key, const std::string& message) const {
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

at::Tensor WeightLoader::read(const std::string& name, const std::vector<std::int64_t>& shape) {
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
  at::Tensor t = file_.get(full);
  if (t.sizes() != at::IntArrayRef(shape)) {
    throw Error(fmt::format("'{}': tensor '{}' has shape {}, config.json implies [{}]", file_.path().string(), full,
                            c10::str(t.sizes()), fmt::join(shape, ", ")));
  }
  return t;
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
