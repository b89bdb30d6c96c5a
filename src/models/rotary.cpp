// Rotary position embeddings, shared by the architectures that rotate queries and keys (modernbert.cpp,
// qwen3.cpp), as Hugging Face's default RoPE computes them.
#include "transformer.hpp"

namespace flowline::models::detail {

std::pair<at::Tensor, at::Tensor> rotary_tables(double theta, std::int64_t head_dim, std::int64_t positions,
                                                c10::ScalarType dtype, c10::Device device) {
  const at::Tensor inv_freq =
      1.0 / at::pow(theta, at::arange(0, head_dim, 2, at::kFloat) / static_cast<double>(head_dim));
  const at::Tensor freqs = at::arange(positions, at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  return {freqs.cos().to(dtype).to(device), freqs.sin().to(dtype).to(device)};
}

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(2) / 2;
  const at::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2);
}

}  // namespace flowline::models::detail
