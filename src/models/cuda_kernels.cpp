// The host side of flowline's CUDA kernels (cuda_kernels.hpp): loading them from libflowline_models_cuda.so,
// and the helpers the architectures call (residual add + LayerNorm, rotation, gated activations), each
// falling back to ATen's operations on the CPU and in float32.
#include "cuda_kernels.hpp"

#include "graphs.hpp"
#include "transformer.hpp"

#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace flowline::models::detail {

namespace {

constexpr const char* kKernelsEntry = "flowline_models_cuda_kernels";

bool half_on_gpu(const at::Tensor& t) {
  return t.is_cuda() && (t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16);
}

}  // namespace

const CudaKernels& cuda_kernels() {
  using Entry = const CudaKernels* (*)();
  // Loaded once; a failure throws here and again at the next call (static initialisation is retried).
  static const CudaKernels* const kernels = reinterpret_cast<Entry>(
      load_gpu_part(reinterpret_cast<const void*>(&cuda_kernels), kGraphsLibrary, kKernelsEntry))();
  return *kernels;
}

std::int64_t attention_tiles_bound(std::int64_t tokens, std::int64_t sequences) {
  return (tokens + kAttentionTile - 1) / kAttentionTile + sequences;
}

void write_attention_tiles(const std::int64_t* lengths, std::int64_t count, std::int64_t* out, std::int64_t slots) {
  std::int64_t start = 0, next = 0;
  for (std::int64_t s = 0; s < count; ++s) {
    const std::int64_t length = lengths[s];
    if (length >= (std::int64_t{1} << kAttentionLengthBits)) {
      throw Error(fmt::format("packed attention: a sequence of {} tokens is over its {}", length,
                              (std::int64_t{1} << kAttentionLengthBits) - 1));
    }
    const std::int64_t tiles = (length + kAttentionTile - 1) / kAttentionTile;
    if (next + tiles > slots) throw Error(fmt::format("packed attention: more tiles than the {} slots", slots));
    for (std::int64_t t = 0; t < tiles; ++t) out[next++] = start << 32 | length << kAttentionTileBits | t;
    start += length;
    if (start >= (std::int64_t{1} << 31)) throw Error("packed attention: a pass of 2^31 tokens or more");
  }
  std::fill(out + next, out + slots, std::int64_t{-1});
}

bool packed_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!half_on_gpu(q) || q.dim() != 3 || k.dim() != 3 || v.sizes() != k.sizes() || k.size(0) != q.size(0) ||
      k.size(2) != q.size(2) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) {
    return false;
  }
  const std::int64_t head_dim = q.size(2);
  if (head_dim % 8 != 0 || head_dim > 128 || k.size(1) < 1 || q.size(1) % k.size(1) != 0) return false;
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (t->stride(2) != 1 || t->stride(0) % 8 != 0 || t->stride(1) % 8 != 0 ||
        reinterpret_cast<std::uintptr_t>(t->data_ptr()) % 16 != 0) {
      return false;
    }
  }
  return true;
}

bool fused_add_layer_norm_fits(const at::Tensor& a, const at::Tensor& weight) {
  return half_on_gpu(a) && a.dim() == 2 && a.size(1) % 8 == 0 && a.size(1) <= 2048 &&
         weight.scalar_type() == a.scalar_type();
}

at::Tensor add_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight, const at::Tensor& bias,
                          double eps) {
  if (fused_add_layer_norm_fits(a, weight)) {
    return cuda_kernels().add_layer_norm(a.contiguous(), b.contiguous(), weight, bias, eps, at::Tensor());
  }
  return at::layer_norm(a + b, {a.size(-1)}, weight, bias, eps);
}

std::pair<at::Tensor, at::Tensor> add_then_layer_norm(const at::Tensor& a, const at::Tensor& b,
                                                      const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (fused_add_layer_norm_fits(a, weight)) {
    at::Tensor sum = at::empty_like(a, at::MemoryFormat::Contiguous);
    at::Tensor normed = cuda_kernels().add_layer_norm(a.contiguous(), b.contiguous(), weight, bias, eps, sum);
    return {std::move(sum), std::move(normed)};
  }
  at::Tensor sum = a + b;
  at::Tensor normed = at::layer_norm(sum, {sum.size(-1)}, weight, bias, eps);
  return {std::move(sum), std::move(normed)};
}

std::pair<at::Tensor, at::Tensor> linear_add_layer_norm(at::Tensor residual, const at::Tensor& x, const at::Tensor& w,
                                                        const at::Tensor& b, const at::Tensor& weight,
                                                        const at::Tensor& bias, double eps, bool keep_sum) {
  const bool fused = fused_add_layer_norm_fits(residual, weight) && residual.is_contiguous() &&
                     x.scalar_type() == residual.scalar_type() && w.scalar_type() == residual.scalar_type() &&
                     (!keep_sum || !b.defined());
  if (!fused) {
    if (keep_sum) return add_then_layer_norm(residual, at::linear(x, w, b), weight, bias, eps);
    return {at::Tensor(), add_layer_norm(at::linear(x, w, b), residual, weight, bias, eps)};
  }
  residual.addmm_(x, w.t());
  at::Tensor normed = cuda_kernels().add_layer_norm(residual, b, weight, bias, eps, at::Tensor());
  return {keep_sum ? std::move(residual) : at::Tensor(), std::move(normed)};
}

RotaryRows rotary_rows(const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions) {
  if (half_on_gpu(cos)) return {cos, sin, positions.contiguous()};
  return {cos.index_select(0, positions), sin.index_select(0, positions), at::Tensor()};
}

at::Tensor rotate_at(const at::Tensor& x, const RotaryRows& rows) {
  if (rows.positions.defined()) return cuda_kernels().rotate(x, rows.cos, rows.sin, rows.positions);
  return rotate(x, rows.cos, rows.sin);
}

namespace {

// Every hidden_act name the architectures run, and what it computes.
struct ActivationName {
  std::string_view name;
  GatedActivation kind;
};
constexpr ActivationName kActivations[] = {
    {"gelu", GatedActivation::gelu},          {"gelu_python", GatedActivation::gelu},
    {"gelu_new", GatedActivation::gelu_tanh}, {"gelu_pytorch_tanh", GatedActivation::gelu_tanh},
    {"relu", GatedActivation::relu},          {"silu", GatedActivation::silu},
    {"swish", GatedActivation::silu},
};

const ActivationName* find_activation(std::string_view name) {
  for (const ActivationName& a : kActivations) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace

bool known_activation(const std::string& name) { return find_activation(name) != nullptr; }

GatedActivation activation_kind(const std::string& name) {
  const ActivationName* a = find_activation(name);
  return a ? a->kind : GatedActivation::gelu_tanh;
}

at::Tensor gated_activation(const at::Tensor& up, const std::string& name) {
  const std::int64_t I = up.size(1) / 2;
  if (half_on_gpu(up) && up.is_contiguous()) return cuda_kernels().gated(up, activation_kind(name));
  return activate(up.narrow(1, 0, I), name) * up.narrow(1, I, I);
}

}  // namespace flowline::models::detail
