// Self-attention over packed tokens, shared by every architecture: on a GPU in fp16/bf16 one kernel over
// the packed sequences — flowline's own (cuda_kernels.hpp) where the head dimension allows, else LibTorch's
// varlen FlashAttention-2 — otherwise scaled_dot_product_attention per group of equal-length sequences.
#include "cuda_kernels.hpp"
#include "transformer.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

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

// The padded layout of a pass: token t of sequence s at position p is row s * longest + p.
struct PaddedPass {
  at::Tensor slot;  // [T] int64
  at::Tensor mask;  // [n, heads, L, L]: the bias, -inf on padded keys (and above the diagonal when causal)
  std::int64_t n = 0, longest = 0;
};

void prepare_attention(AttentionOptions& options, const DeviceBatch& batch, c10::ScalarType dtype, std::int64_t) {
  if (batch.packed || !options.bias_for || !batch.ids.is_cuda()) return;
  auto pass = std::make_shared<PaddedPass>();
  pass->n = batch.lengths.size(0);
  pass->longest = (batch.longest + 7) / 8 * 8;
  const std::int64_t total = batch.ids.size(0), L = pass->longest;
  const at::Tensor sequence =
      at::repeat_interleave(at::arange(pass->n, batch.lengths.options()), batch.lengths, 0, total);
  pass->slot = sequence * L + batch.positions;
  const at::Tensor positions = at::arange(L, batch.lengths.options());
  const at::Tensor padding = (positions.unsqueeze(0) >= batch.lengths.unsqueeze(1)).view({pass->n, 1, 1, L});
  at::Tensor mask = options.bias_for(L).to(dtype).unsqueeze(0).masked_fill(padding, -INFINITY);
  if (options.causal) mask = mask.masked_fill(~window_mask(L, L, true, batch.ids.device()), -INFINITY);
  pass->mask = mask.contiguous();
  options.padded = std::move(pass);
}

namespace {

at::Tensor attend_padded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const PaddedPass& pass,
                         const AttentionOptions& options) {
  const std::int64_t heads = q.size(1), head_dim = q.size(2), kv_heads = k.size(1);
  auto pad = [&](const at::Tensor& t, std::int64_t h) {
    at::Tensor out = at::zeros({pass.n * pass.longest, h, head_dim}, t.options());
    out.index_copy_(0, pass.slot, t);
    return out.view({pass.n, pass.longest, h, head_dim}).transpose(1, 2);
  };
  const at::Tensor attended = at::scaled_dot_product_attention(pad(q, heads), pad(k, kv_heads), pad(v, kv_heads),
                                                               pass.mask, 0.0, false, options.scale, kv_heads != heads);
  return attended.transpose(1, 2).reshape({pass.n * pass.longest, heads * head_dim}).index_select(0, pass.slot);
}

}  // namespace

at::Tensor attend(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v, const DeviceBatch& batch,
                  const AttentionOptions& options) {
  const RotaryRows& rotary = options.rotary;
  const bool packed = batch.packed && packed_attention_fits(q_in, k_in, v);
  const std::int64_t head_dim = q_in.size(2);
  // The packed kernel rotates q and k as it loads them where it has the tables (GPU, same dtype) and the
  // head dimension allows; elsewhere they are rotated here first.
  const bool rotate_in_kernel = packed && rotary.cos.defined() && rotary.positions.defined() &&
                                rotary.cos.scalar_type() == q_in.scalar_type() &&
                                (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128);
  const bool rotate_first = rotary.cos.defined() && !rotate_in_kernel;
  const at::Tensor q = rotate_first ? rotate_at(q_in, rotary) : q_in;
  const at::Tensor k = rotate_first ? rotate_at(k_in, rotary) : k_in;
  if (packed) {
    PackedAttention kernel_options;
    kernel_options.scale = options.scale;
    kernel_options.relative_bias = options.relative_bias;
    kernel_options.window = options.window;
    kernel_options.causal = options.causal;
    if (rotate_in_kernel) {
      kernel_options.rotary_cos = rotary.cos;
      kernel_options.rotary_sin = rotary.sin;
    }
    return cuda_kernels().attention(q, k, v, batch.attention_tiles, batch.longest, kernel_options);
  }
  if (batch.packed) {
    if (options.bias_for) {
      throw Error(
          fmt::format("attention with a score bias runs packed only with head dimensions that are multiples "
                      "of 8 up to 128 (this model's: {})",
                      q.size(2)));
    }
    return attend_flash(q, k, v, batch, options);
  }
  if (options.padded) return attend_padded(q, k, v, *options.padded, options);
  const std::int64_t total = q.size(0), heads = q.size(1), kv_heads = k.size(1);
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
