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

void check_finite(const at::Tensor& outputs, std::string_view what) {
  auto rows = nonfinite_rows(outputs);
  if (!rows.empty()) throw NonFiniteOutput(std::move(rows), what, static_cast<std::size_t>(outputs.size(0)));
}

// x / max(|x|, eps) as y / max(|y|, eps / m) with y = x / m, m the row's largest magnitude: |y| is in
// [1, sqrt(d)], so nothing overflows; a zero row (m = 0) is divided by 1 and stays zero. NaN and infinity
// propagate through m (x / inf is NaN for an infinite x).
at::Tensor normalize_rows(const at::Tensor& x) {
  constexpr double kEps = 1e-12;
  const at::Tensor m = x.abs().amax({1}, /*keepdim=*/true);
  const at::Tensor scale = at::where(m > 0, m, at::ones_like(m));
  const at::Tensor y = x / scale;
  const at::Tensor norm = y.norm(2, {1}, /*keepdim=*/true);
  return y / at::maximum(norm, kEps / scale);
}

}  // namespace flowline::models
