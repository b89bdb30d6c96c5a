// Internal to flowline::models: flowline's own CUDA kernels, for what LibTorch has no single kernel for, and
// attention over packed short sequences (faster there than LibTorch's FlashAttention-2).
// They live in libflowline_models_cuda.so (cuda/kernels.cu, built with nvcc) and are reached through
// cuda_kernels(), which loads that library the first time a model on a GPU asks. Not installed.
//
// The functions enqueue work on the current CUDA stream of the inputs' device and return at once; they
// may be captured into CUDA graphs (no allocation outside the caching allocator, no synchronisation).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>

namespace flowline::models::detail {

// The activations of gated feed-forward layers: GeGLU (gelu, gelu_tanh), SwiGLU (silu), ReGLU (relu).
enum class GatedActivation { gelu, gelu_tanh, silu, relu };
// A config's hidden_act as one of them: gelu and gelu_python exact, relu, silu and swish, and the tanh form
// for the rest (gelu_new, gelu_pytorch_tanh). activate() and gated_activation() both read names this way;
// known_activation() (transformer.hpp) says whether a name is one of these, from the same table.
GatedActivation activation_kind(const std::string& name);

// Packed attention's work list: one int64 per tile of kAttentionTile queries of each sequence, so a pass
// launches blocks for its real tiles only (a grid by the longest sequence a graph allows would be mostly
// empty blocks: 128 per sequence for ModernBERT's 8,192 positions). An entry is the sequence's first token
// << 32 | its length << kAttentionTileBits | the tile's index in it; -1 past the last tile.
constexpr std::int64_t kAttentionTile = 64;
constexpr int kAttentionTileBits = 14, kAttentionLengthBits = 18;  // sequences up to 262,143 tokens
// Entries a pass of `tokens` tokens in at most `sequences` sequences needs at most (sum of ceil(len / 64)).
std::int64_t attention_tiles_bound(std::int64_t tokens, std::int64_t sequences);
// Writes the work list of `count` sequences of these lengths (packed one after another) to out[0, slots),
// -1 after the last tile. Throws flowline::Error when slots are too few or a length or the total is out of
// range. (Pointer and count: nvcc compiles this header as C++17.)
void write_attention_tiles(const std::int64_t* lengths, std::int64_t count, std::int64_t* out, std::int64_t slots);

// What CudaKernels::attention masks and adds to the scores q.k * scale.
struct PackedAttention {
  double scale = 1.0;
  // Undefined, or a bias that depends only on key position - query position (MPNet's relative position
  // bias): [heads, 2P - 1] float32, the bias of d at column d + P - 1, P at least the longest sequence.
  at::Tensor relative_bias;
  // Undefined, or rotary embeddings to apply to q and k first (ModernBERT, Qwen3): the tables [positions,
  // head_dim / 2] of rotary_tables() in q's dtype, row p for the token at position p of its sequence
  // (0-based); head_dim 16, 32, 64 or 128. The same values to the bit as rotate() before the kernel.
  at::Tensor rotary_cos, rotary_sin;
  // Undefined, or DeBERTa's disentangled terms (head_dim 64 only): the score of query token a and key token b
  // of one sequence, d = a's position - b's, gains c2p[head, a, rows[d + P - 1]] + p2c[head, b, rows[d + P - 1]]
  // as given (already scaled). c2p and p2c [heads, T, R] in q's dtype, contiguous (either may be undefined,
  // not both); relative_rows [2P - 1] int32 on the GPU, P at least the longest sequence, each row in [0, R)
  // (others are clamped into it). Not with relative_bias or rotary tables.
  at::Tensor c2p, p2c, relative_rows;
  std::int64_t window = 0;  // > 0: query i sees keys j with |i - j| <= window only (sliding-window layers)
  bool causal = false;      // query i sees keys j <= i only
};

struct CudaKernels {
  // Self-attention over packed sequences in one kernel (no padding, no [L, L] mask or bias in memory), for
  // every architecture: q [T, heads, head_dim], k and v [T, kv_heads, head_dim] (heads a multiple of
  // kv_heads: grouped-query attention), fp16 or bf16, rows 16-byte aligned with the last dimension
  // contiguous, head_dim a multiple of 8 up to 128 (packed_attention_fits()). tiles: the pass's work list
  // on the device (write_attention_tiles(): which tile of kAttentionTile queries of which sequence each
  // block takes; tokens of no sequence are left unwritten). longest: at least every sequence's length.
  // Softmax in float32. Returns [T, heads * head_dim] in q's dtype.
  at::Tensor (*attention)(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& tiles,
                          std::int64_t longest, const PackedAttention& options);
  // layer_norm(a + b) over the last dimension in one pass: a [rows, H] contiguous fp16 or bf16, H a
  // multiple of 8 up to 2048; b like a, or [H] (added to every row), or undefined (a alone is normalised);
  // weight [H] and bias [H] (bias may be undefined) in the same dtype. The sum is rounded to the dtype
  // before it is normalised in float32, as at::layer_norm(a + b) does. When `sum` is defined ([rows, H],
  // same dtype) the rounded sum is written there too (pre-norm layers keep it as their residual).
  at::Tensor (*add_layer_norm)(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight,
                               const at::Tensor& bias, double eps, const at::Tensor& sum);
  // rotate() of transformer.hpp in one kernel, the table rows looked up by each token's position: x
  // [T, heads, head_dim] fp16/bf16 (rows may be strided, last dimension contiguous), cos and sin
  // [positions, head_dim / 2] in x's dtype, positions [T] int64. The same values to the bit.
  at::Tensor (*rotate)(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions);
  // act(up[:, :I]) * up[:, I:] for up [T, 2I] contiguous fp16/bf16, as activate() then a product would
  // compute it. Returns [T, I].
  at::Tensor (*gated)(const at::Tensor& up, GatedActivation activation);
};

// The kernels of libflowline_models_cuda.so, loaded on first use (once per process). Throws
// flowline::Error when the library cannot be loaded (flowline built without CUDA, or no CUDA runtime).
const CudaKernels& cuda_kernels();

// Whether CudaKernels::attention takes q, k and v of these shapes, dtypes and layouts.
bool packed_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Whether add_layer_norm() takes tensors of this shape and dtype on this device.
bool fused_add_layer_norm_fits(const at::Tensor& a, const at::Tensor& weight);

// layer_norm(a + b, {H}, weight, bias, eps), fused on a GPU in fp16/bf16 (add_layer_norm above), else
// at::layer_norm(a + b) — the same values up to the order of float32 sums.
at::Tensor add_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight, const at::Tensor& bias,
                          double eps);
// Pre-norm layers: (a + b, layer_norm(a + b)), in one kernel where add_layer_norm() fuses.
std::pair<at::Tensor, at::Tensor> add_then_layer_norm(const at::Tensor& a, const at::Tensor& b,
                                                      const at::Tensor& weight, const at::Tensor& bias, double eps);
// A sublayer's output projection, residual add and LayerNorm: sum = residual + linear(x, w, b), then
// (sum, layer_norm(sum)) (`sum` undefined unless keep_sum: post-norm layers need only the norm). On a GPU in
// fp16/bf16 the GEMM adds its product onto `residual` in place (cuBLAS with beta = 1), so the sum is no
// separate pass over memory, and b is added in the norm's kernel; `residual` is then overwritten (callers
// pass a residual they no longer need). Elsewhere add_then_layer_norm(residual, linear(x, w, b)). The
// values are those of the separate operations up to where the product is rounded to the dtype.
std::pair<at::Tensor, at::Tensor> linear_add_layer_norm(at::Tensor residual, const at::Tensor& x, const at::Tensor& w,
                                                        const at::Tensor& b, const at::Tensor& weight,
                                                        const at::Tensor& bias, double eps, bool keep_sum);
// The rotary tables of one forward pass, made once per pass by rotary_rows(): on a GPU in fp16/bf16 the
// tables themselves and the tokens' positions (the rotate kernel looks the rows up); elsewhere the rows at
// the tokens' positions, looked up here (positions undefined).
struct RotaryRows {
  at::Tensor cos, sin, positions;
};
RotaryRows rotary_rows(const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions);
// rotate(x, cos rows, sin rows) of transformer.hpp, in one kernel on a GPU in fp16/bf16.
at::Tensor rotate_at(const at::Tensor& x, const RotaryRows& rows);
// activate(up[:, :I], name) * up[:, I:] (GeGLU, SwiGLU), in one kernel on a GPU in fp16/bf16.
at::Tensor gated_activation(const at::Tensor& up, const std::string& name);

}  // namespace flowline::models::detail
