// Self-attention over packed tokens, shared by every architecture: one varlen flash-attention kernel on a
// GPU in fp16/bf16, otherwise scaled_dot_product_attention per group of equal-length sequences.
#include "transformer.hpp"

#include "flowline/error.hpp"

namespace flowline::models::detail {

namespace {

// [L, L] true where query i may see key j: |i - j| <= window (and j <= i when causal).
at::Tensor window_mask(std::int64_t length, std::int64_t window, bool causal, c10::Device device) {
  const at::Tensor i = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(1);
  const at::Tensor j = i.transpose(0, 1);
  at::Tensor mask = (i - j).abs() <= window;
  if (causal) mask = mask & (j <= i);
  return mask;
}

at::Tensor attend_flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DeviceBatch& batch,
                        const AttentionOptions& options) {
  std::optional<std::int64_t> left, right;
  if (options.window > 0) {
    left = options.window;
    right = options.causal ? 0 : options.window;
  }
  // Tokens past the last offset (a graph's padding) belong to no sequence and are left alone.
  auto out = at::_flash_attention_forward(q, k, v, batch.cu_seqlens, batch.cu_seqlens, batch.longest, batch.longest,
                                          0.0, options.causal, /*return_debug_mask=*/false, options.scale, left, right);
  return std::get<0>(out).reshape({q.size(0), q.size(1) * q.size(2)});
}

}  // namespace

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DeviceBatch& batch,
                  const AttentionOptions& options) {
  if (batch.flash) {
    if (options.bias_for) throw Error("attention with a score bias cannot run as flash attention");
    return attend_flash(q, k, v, batch, options);
  }
  const std::int64_t total = q.size(0), heads = q.size(1), head_dim = q.size(2), kv_heads = k.size(1);
  at::Tensor context = at::empty({total, heads * head_dim}, q.options());
  for (const auto& g : batch.groups) {
    const std::int64_t tokens = g.count * g.length;
    auto group = [&](const at::Tensor& t, std::int64_t h) {
      return t.narrow(0, g.token_begin, tokens).view({g.count, g.length, h, head_dim}).transpose(1, 2);
    };
    std::optional<at::Tensor> mask;
    bool causal = options.causal;
    if (options.bias_for) {
      at::Tensor bias = options.bias_for(g.length).to(q.scalar_type());  // [heads, L, L]
      if (causal) {
        bias = bias.masked_fill(~window_mask(g.length, g.length, true, q.device()), -INFINITY);
        causal = false;
      }
      mask = bias.unsqueeze(0);
    } else if (options.window > 0 && g.length > options.window + 1) {
      mask = window_mask(g.length, options.window, causal, q.device());
      causal = false;
    }
    auto attended = at::scaled_dot_product_attention(group(q, heads), group(k, kv_heads), group(v, kv_heads), mask, 0.0,
                                                     causal, options.scale, /*enable_gqa=*/kv_heads != heads);
    context.narrow(0, g.token_begin, tokens).view({g.count, g.length, heads, head_dim}).copy_(attended.transpose(1, 2));
  }
  return context;
}

}  // namespace flowline::models::detail
