// Per-document outputs before they leave the room: non-finite rows found and named, and an L2
// normalization that neither overflows nor underflows in float32 (flowline/models/outputs.hpp).
#include "flowline/models/outputs.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

namespace flowline::models {

std::vector<std::size_t> nonfinite_rows(const at::Tensor& outputs) {
  if (outputs.numel() == 0) return {};
  // The common case, a request's float32 outputs already on the host: one plain pass over the values, no
  // ATen ops (they would allocate and fan out to the intra-op threads the tokenizers use, per request).
  if (outputs.device().is_cpu() && outputs.scalar_type() == at::kFloat && outputs.is_contiguous()) {
    const auto rows = static_cast<std::size_t>(outputs.size(0));
    const std::size_t per_row = static_cast<std::size_t>(outputs.numel()) / rows;
    const float* v = outputs.const_data_ptr<float>();
    std::vector<std::size_t> bad;
    for (std::size_t r = 0; r < rows; ++r) {
      float sum = 0;  // a NaN or an infinity anywhere in the row makes the sum of v * 0 a NaN
      for (std::size_t j = 0; j < per_row; ++j) sum += v[r * per_row + j] * 0.0f;
      if (sum != 0.0f) bad.push_back(r);
    }
    return bad;
  }
  at::Tensor finite = at::isfinite(outputs);
  if (outputs.dim() > 1) finite = finite.flatten(1).all(1);
  const at::Tensor bad = at::logical_not(finite).nonzero().view({-1}).to(at::kCPU, at::kLong).contiguous();
  const std::int64_t* rows = bad.data_ptr<std::int64_t>();
  return {rows, rows + bad.numel()};
}

std::vector<std::size_t> nonfinite_rows(std::span<const float> values) {
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) rows.push_back(i);
  }
  return rows;
}

namespace {
std::string describe(const std::vector<std::size_t>& rows, std::string_view what, std::size_t total) {
  constexpr std::size_t kListed = 10;
  const std::vector<std::size_t> listed(rows.begin(), rows.begin() + std::min(rows.size(), kListed));
  const std::string more = rows.size() > kListed ? fmt::format(" and {} more", rows.size() - kListed) : "";
  return fmt::format(
      "{} {}{} of {}: {} {} NaN or infinity (the model's output is not a number there: "
      "non-finite weights, or a value past the range of the model's dtype)",
      rows.size() == 1 ? "document" : "documents", fmt::join(listed, ", "), more, total,
      rows.size() == 1 ? "its " + std::string(what) : "their " + std::string(what) + "s",
      rows.size() == 1 ? "holds" : "hold");
}
}  // namespace

NonFiniteOutput::NonFiniteOutput(std::vector<std::size_t> rows, std::string_view what, std::size_t total)
    : Error(describe(rows, what, total)), rows_(std::move(rows)) {}

FiniteCheck::FiniteCheck(const at::Tensor& outputs) {
  if (!outputs.is_cuda() || outputs.numel() == 0) {
    outputs_ = outputs;
    return;
  }
  at::Tensor finite = at::isfinite(outputs);
  if (outputs.dim() > 1) finite = finite.flatten(1).all(1);
  flags_ = at::empty(finite.sizes(), finite.options().device(at::kCPU).pinned_memory(true));
  flags_.copy_(finite, /*non_blocking=*/true);
}

void FiniteCheck::check(std::string_view what) const {
  if (!flags_.defined()) {
    if (outputs_.defined()) check_finite(outputs_, what);
    return;
  }
  const bool* finite = flags_.const_data_ptr<bool>();
  const auto n = static_cast<std::size_t>(flags_.numel());
  std::vector<std::size_t> bad;
  for (std::size_t r = 0; r < n; ++r) {
    if (!finite[r]) bad.push_back(r);
  }
  if (!bad.empty()) throw NonFiniteOutput(std::move(bad), what, n);
}

void check_finite(const at::Tensor& outputs, std::string_view what) {
  auto rows = nonfinite_rows(outputs);
  if (!rows.empty()) throw NonFiniteOutput(std::move(rows), what, static_cast<std::size_t>(outputs.size(0)));
}

// On the host: x / max(|x|, eps) as y / max(|y|, eps / m) with y = x / m, m the row's largest magnitude:
// |y| is in [1, sqrt(d)], so nothing overflows; a zero row (m = 0) is divided by 1 and stays zero. NaN and
// infinity propagate through m (x / inf is NaN for an infinite x).
// On a GPU: x / max(|x|, eps) in x's type, three kernels. The scaled form takes five more, and on one H200
// they cost MiniLM 3.4% of its docs/s (bench/models_gpu.py, docs/benchmarks.md), as did a norm accumulated
// in double (3.6%): a launch-bound model pays for every kernel of a pass. Its limit — a float32 row whose
// squared norm overflows (values past ~1e19) comes out zero — waits for a fused kernel.
at::Tensor normalize_rows(const at::Tensor& x) {
  constexpr double kEps = 1e-12;
  if (x.is_cuda()) return x / x.norm(2, {1}, /*keepdim=*/true).clamp_min(kEps);
  const at::Tensor m = x.abs().amax({1}, /*keepdim=*/true);
  const at::Tensor scale = at::where(m > 0, m, at::ones_like(m));
  const at::Tensor y = x / scale;
  const at::Tensor norm = y.norm(2, {1}, /*keepdim=*/true);
  return y / at::maximum(norm, kEps / scale);
}

}  // namespace flowline::models
