// flowline's own CUDA kernels (cuda_kernels.hpp says what each computes): attention with a relative position
// bias over packed sequences, a residual add fused with LayerNorm, rotary embeddings and gated activations
// in one pass each. Built with nvcc into
// libflowline_models_cuda.so; the CPU library reaches them through flowline_models_cuda_kernels().
#include "../cuda_kernels.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

namespace flowline::models::detail {
namespace {

template <typename T>
struct Cvt;
template <>
struct Cvt<__half> {
  static __device__ __forceinline__ float f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half t(float x) { return __float2half_rn(x); }
};
template <>
struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ float f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 t(float x) { return __float2bfloat16_rn(x); }
};

// Calls run(T{}) with T the CUDA type of `type` (fp16 or bf16; the callers have checked which).
template <typename Run>
void with_type(at::ScalarType type, Run&& run) {
  if (type == at::kHalf)
    run(__half{});
  else
    run(__nv_bfloat16{});
}

// ---- attention with a relative position bias -----------------------------------------------------------
//
// FlashAttention-2's scheme with mma.sync m16n8k16 on tensor cores, everything between the loads and the
// output in registers. One block of 4 warps per (sequence, tile of 64 queries, head); each warp owns 16
// query rows, whose Q fragments it keeps. For each tile of 64 keys (K and V staged in shared memory):
// S = Q K^T into float accumulators; scale, bias and the online softmax in float32 on the accumulators
// (each row's values spread over the 4 lanes of a quad, reduced with shuffles); P rounded to the input
// type and repacked in place as the A operand of P V (the accumulator layout of one m16n8k16 is the A
// layout of the next); V read transposed with ldmatrix.trans; the output rows rescaled and accumulated
// in registers. Head dimensions are padded with zeros to DP (16..128) in shared memory, which changes no
// dot product. The fragment layouts are PTX's (mma.m16n8k16): lane = 4 * group + quad position.

constexpr int kRows = 64;  // queries per block
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct AttentionParams {
  const void *q, *k, *v;
  std::int64_t q_token, q_head, k_token, k_head, v_token, v_head;  // strides in elements
  int head_dim;
  const int* cu_seqlens;
  int tiles;  // query tiles per sequence
  const float* bias;
  int bias_row, bias_center;
  float scale;
  void* out;
  std::int64_t out_token;
};

template <int DP>
struct Layout {
  static constexpr int LD = DP + 8;                             // elements per Q/K/V row in shared memory
  static constexpr std::size_t qkv_bytes = 3 * kRows * LD * 2;  // Q, K, V tiles
  static std::size_t bytes(std::int64_t longest) { return qkv_bytes + 4 * (2 * longest); }
};

template <typename T, int DP>
__device__ __forceinline__ void load_rows(T* dst, const T* src, std::int64_t token_stride, int first, int count,
                                          int head_dim) {
  using L = Layout<DP>;
  constexpr int chunks = DP / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kRows * chunks; i += blockDim.x) {
    const int r = i / chunks, c = i % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < count && c * 8 < head_dim)
      value = *reinterpret_cast<const uint4*>(src + static_cast<std::int64_t>(first + r) * token_stride + c * 8);
    *reinterpret_cast<uint4*>(dst + r * L::LD + c * 8) = value;
  }
}

// Two floats as one register of two T (the lower column first).
template <typename T>
__device__ __forceinline__ std::uint32_t pack(float lo, float hi);
template <>
__device__ __forceinline__ std::uint32_t pack<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
template <>
__device__ __forceinline__ std::uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}
template <typename T>
__device__ __forceinline__ float2 unpack(std::uint32_t v);
template <>
__device__ __forceinline__ float2 unpack<__half>(std::uint32_t v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}
template <>
__device__ __forceinline__ float2 unpack<__nv_bfloat16>(std::uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

// d += a b for one m16n8k16 tile: a 4 registers (16 x 16, row-major), b 2 (16 x 8, column-major), d 4 floats.
// TYPE: the PTX name of the inputs' type (f16, bf16).
#define FLOWLINE_MMA_M16N8K16(TYPE)                                           \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE         \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    FLOWLINE_MMA_M16N8K16("f16");
  else
    FLOWLINE_MMA_M16N8K16("bf16");
}
#undef FLOWLINE_MMA_M16N8K16

// Four 8 x 8 matrices of 16-bit values from shared memory, transposed: lane l names the row address of
// matrix l / 8, row l % 8.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

template <typename T, int DP>
__global__ void __launch_bounds__(kWarps * 32) relative_attention_kernel(AttentionParams p) {
  using L = Layout<DP>;
  const int sequence = blockIdx.x / p.tiles, tile = blockIdx.x % p.tiles, head = blockIdx.y;
  const int start = p.cu_seqlens[sequence], length = p.cu_seqlens[sequence + 1] - start;
  const int q0 = tile * kRows;
  if (q0 >= length) return;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + kRows * L::LD;
  T* sv = sk + kKeys * L::LD;
  float* sbias = reinterpret_cast<float*>(smem + L::qkv_bytes);

  const T* q = static_cast<const T*>(p.q) + head * p.q_head;
  const T* k = static_cast<const T*>(p.k) + head * p.k_head;
  const T* v = static_cast<const T*>(p.v) + head * p.v_head;
  load_rows<T, DP>(sq, q, p.q_token, start + q0, length - q0, p.head_dim);
  // This head's bias for key - query offsets -(length - 1) .. length - 1, at sbias[offset + length - 1].
  const float* bias = p.bias + static_cast<std::int64_t>(head) * p.bias_row + p.bias_center - (length - 1);
  for (int i = threadIdx.x; i < 2 * length - 1; i += blockDim.x) sbias[i] = bias[i];
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane >> 2, quad = lane & 3;  // fragment row (and row + 8), column pair
  const int row0 = q0 + warp * 16;               // the warp's first query position
  const bool active = row0 < length;             // the warp has at least one real query
  const int query[2] = {row0 + group, row0 + group + 8};

  // The warp's Q as A fragments, one per 16 dimensions.
  std::uint32_t qa[DP / 16][4];
#pragma unroll
  for (int d = 0; d < DP / 16; ++d) {
    const T* base = sq + (warp * 16 + group) * L::LD + d * 16 + quad * 2;
    qa[d][0] = *reinterpret_cast<const std::uint32_t*>(base);
    qa[d][1] = *reinterpret_cast<const std::uint32_t*>(base + 8 * L::LD);
    qa[d][2] = *reinterpret_cast<const std::uint32_t*>(base + 8);
    qa[d][3] = *reinterpret_cast<const std::uint32_t*>(base + 8 * L::LD + 8);
  }

  float o[DP / 8][4];  // output rows group and group + 8, columns n * 8 + quad * 2 + {0, 1}
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const float scale = p.scale * kLog2e;

  for (int k0 = 0; k0 < length; k0 += kKeys) {
    __syncthreads();  // the previous tile's K and V are no longer read
    load_rows<T, DP>(sk, k, p.k_token, start + k0, length - k0, p.head_dim);
    load_rows<T, DP>(sv, v, p.v_token, start + k0, length - k0, p.head_dim);
    __syncthreads();
    if (!active) continue;

    // S = Q K^T: 8 tiles of 8 keys; K's rows are B's columns, two dimensions per register.
    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      const T* key_row = sk + (n * 8 + group) * L::LD + quad * 2;
#pragma unroll
      for (int d = 0; d < DP / 16; ++d) {
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(key_row + d * 16);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(key_row + d * 16 + 8);
        mma<T>(s[n], qa[d], b0, b1);
      }
    }

    // Scores in log2 units, the bias added, keys past the sequence masked; the online softmax per row.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + n * 8 + quad * 2 + (i & 1), r = i >> 1;
        float value = -INFINITY;
        if (key < length) {
          const float b = query[r] < length ? sbias[key - query[r] + length - 1] : 0.f;
          value = s[n][i] * scale + b * kLog2e;
        }
        s[n][i] = value;
        tile_max[r] = fmaxf(tile_max[r], value);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);  // finite: every tile holds a real key
      alpha[r] = exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
    }
    // P, rounded to T, packed as the A fragments of P V (one per 16 keys).
    std::uint32_t pa[kKeys / 16][4];
    float tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < kKeys / 16; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the 8-key tiles 2j and 2j + 1
        const float* t = s[2 * j + h];
        const std::uint32_t top = pack<T>(exp2f(t[0] - row_max[0]), exp2f(t[1] - row_max[0]));
        const std::uint32_t bottom = pack<T>(exp2f(t[2] - row_max[1]), exp2f(t[3] - row_max[1]));
        pa[j][2 * h] = top;
        pa[j][2 * h + 1] = bottom;
        const float2 a = unpack<T>(top), b = unpack<T>(bottom);
        tile_sum[0] += a.x + a.y;
        tile_sum[1] += b.x + b.y;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
      tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
      row_sum[r] = row_sum[r] * alpha[r] + tile_sum[r];
    }
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P V: V's rows (keys) read transposed as B fragments, two 8-dimension tiles per ldmatrix.
#pragma unroll
    for (int j = 0; j < kKeys / 16; ++j) {
#pragma unroll
      for (int n = 0; n < DP / 16; ++n) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, sv + (j * 16 + (lane & 15)) * L::LD + n * 16 + (lane >> 4) * 8);
        mma<T>(o[2 * n], pa[j], b[0], b[1]);
        mma<T>(o[2 * n + 1], pa[j], b[2], b[3]);
      }
    }
  }

  if (!active) return;
  T* out = static_cast<T*>(p.out) + head * p.head_dim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (query[r] >= length) continue;
    const float inverse = 1.f / row_sum[r];
    T* row = out + static_cast<std::int64_t>(start + query[r]) * p.out_token;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int column = n * 8 + quad * 2;
      if (column < p.head_dim)
        *reinterpret_cast<std::uint32_t*>(row + column) = pack<T>(o[n][2 * r] * inverse, o[n][2 * r + 1] * inverse);
    }
  }
}

// Allows `kernel` the device's largest opt-in shared memory per block, once per kernel and device, and
// returns that size. One constant value per kernel: setting each launch's own need would race between
// replicas launching with different needs. Asked once, not on every launch (the attention runs once a
// layer).
int allow_optin_shared_memory(const void* kernel, int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> allowed;
  const std::lock_guard lock(mutex);
  const auto [it, fresh] = allowed.try_emplace({kernel, device}, 0);
  if (fresh) {
    int bytes = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    it->second = bytes;
  }
  return it->second;
}

template <typename T, int DP>
void launch_attention(const AttentionParams& p, int sequences, int heads, std::int64_t longest, cudaStream_t stream,
                      int device) {
  const std::size_t bytes = Layout<DP>::bytes(longest);
  auto kernel = relative_attention_kernel<T, DP>;
  const int allowed = allow_optin_shared_memory(reinterpret_cast<const void*>(kernel), device);
  TORCH_CHECK(bytes <= static_cast<std::size_t>(allowed), "relative_attention: sequences of ", longest, " tokens need ",
              bytes, " bytes of shared memory per block; the GPU has ", allowed);
  kernel<<<dim3(static_cast<unsigned>(sequences * p.tiles), static_cast<unsigned>(heads)), kWarps * 32, bytes,
           stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

at::Tensor relative_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& cu_seqlens, std::int64_t longest, const at::Tensor& relative_bias,
                              double scale) {
  TORCH_CHECK(q.is_cuda() && q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
              "relative_attention: q, k, v must be [T, heads, head_dim] on a GPU");
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
              "relative_attention: fp16 or bf16 only");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "relative_attention: dtypes");
  const std::int64_t T = q.size(0), heads = q.size(1), head_dim = q.size(2);
  TORCH_CHECK(head_dim % 8 == 0 && head_dim >= 8 && head_dim <= 128,
              "relative_attention: head_dim must be a multiple of 8 up to 128");
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->stride(2) == 1 && t->stride(0) % 8 == 0 && t->stride(1) % 8 == 0 && aligned16(*t),
                "relative_attention: rows must be contiguous and 16-byte aligned");
  }
  TORCH_CHECK(cu_seqlens.is_cuda() && cu_seqlens.scalar_type() == at::kInt && cu_seqlens.dim() == 1 &&
                  cu_seqlens.is_contiguous() && cu_seqlens.size(0) >= 1,
              "relative_attention: cu_seqlens must be [n + 1] int32 on the GPU");
  TORCH_CHECK(relative_bias.scalar_type() == at::kFloat && relative_bias.dim() == 2 && relative_bias.size(0) == heads &&
                  relative_bias.is_contiguous() && relative_bias.size(1) % 2 == 1,
              "relative_attention: relative_bias must be [heads, 2P - 1] float32");
  const std::int64_t positions = (relative_bias.size(1) + 1) / 2;
  TORCH_CHECK(longest >= 1 && longest <= positions, "relative_attention: longest is outside the bias table");
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty({T, heads * head_dim}, q.options());
  const std::int64_t sequences = cu_seqlens.size(0) - 1;
  if (sequences == 0 || T == 0) return out;
  AttentionParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.q_token = q.stride(0);
  p.q_head = q.stride(1);
  p.k_token = k.stride(0);
  p.k_head = k.stride(1);
  p.v_token = v.stride(0);
  p.v_head = v.stride(1);
  p.head_dim = static_cast<int>(head_dim);
  p.cu_seqlens = cu_seqlens.data_ptr<int>();
  p.tiles = static_cast<int>((longest + kRows - 1) / kRows);
  p.bias = relative_bias.data_ptr<float>();
  p.bias_row = static_cast<int>(relative_bias.size(1));
  p.bias_center = static_cast<int>(positions - 1);
  p.scale = static_cast<float>(scale);
  p.out = out.data_ptr();
  p.out_token = out.stride(0);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(q.device().index());
  const int n = static_cast<int>(sequences), h = static_cast<int>(heads), device = q.device().index();
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    if (head_dim <= 16)
      launch_attention<T_, 16>(p, n, h, longest, stream, device);
    else if (head_dim <= 32)
      launch_attention<T_, 32>(p, n, h, longest, stream, device);
    else if (head_dim <= 64)
      launch_attention<T_, 64>(p, n, h, longest, stream, device);
    else
      launch_attention<T_, 128>(p, n, h, longest, stream, device);
  };
  with_type(q.scalar_type(), run);
  return out;
}

// ---- residual add + LayerNorm ---------------------------------------------------------------------------
//
// One warp per row; each lane holds up to CHUNKS pieces of 8 values in registers, so the row is read once:
// the sum rounded to T (as a separate add would round it), mean, then the variance around it (two passes
// over registers), then (x - mean) * rstd * weight + bias in float32.

template <typename T, int CHUNKS>
__global__ void __launch_bounds__(128)
    add_layer_norm_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ weight,
                          const T* __restrict__ bias, T* __restrict__ out, T* __restrict__ sum_out, std::int64_t rows,
                          int width, float eps) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t base = row * width;
  float x[CHUNKS][8];
  float total = 0.f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int column = (lane + 32 * c) * 8;
    if (column < width) {
      const uint4 ua = *reinterpret_cast<const uint4*>(a + base + column);
      const uint4 ub = *reinterpret_cast<const uint4*>(b + base + column);
      const T* ta = reinterpret_cast<const T*>(&ua);
      const T* tb = reinterpret_cast<const T*>(&ub);
      uint4 us;
      T* ts = reinterpret_cast<T*>(&us);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        ts[e] = Cvt<T>::t(Cvt<T>::f(ta[e]) + Cvt<T>::f(tb[e]));
        x[c][e] = Cvt<T>::f(ts[e]);
        total += x[c][e];
      }
      if (sum_out != nullptr) *reinterpret_cast<uint4*>(sum_out + base + column) = us;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
  const float mean = total / static_cast<float>(width);
  float squares = 0.f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    if ((lane + 32 * c) * 8 < width) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float d = x[c][e] - mean;
        squares += d * d;
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float rstd = rsqrtf(squares / static_cast<float>(width) + eps);
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int column = (lane + 32 * c) * 8;
    if (column < width) {
      const uint4 uw = *reinterpret_cast<const uint4*>(weight + column);
      const T* tw = reinterpret_cast<const T*>(&uw);
      uint4 ubias = make_uint4(0, 0, 0, 0);
      if (bias != nullptr) ubias = *reinterpret_cast<const uint4*>(bias + column);
      const T* tbias = reinterpret_cast<const T*>(&ubias);
      uint4 uo;
      T* to = reinterpret_cast<T*>(&uo);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float y = (x[c][e] - mean) * rstd * Cvt<T>::f(tw[e]);
        if (bias != nullptr) y += Cvt<T>::f(tbias[e]);
        to[e] = Cvt<T>::t(y);
      }
      *reinterpret_cast<uint4*>(out + base + column) = uo;
    }
  }
}

at::Tensor add_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight, const at::Tensor& bias,
                          double eps, const at::Tensor& sum) {
  TORCH_CHECK(a.is_cuda() && a.dim() == 2 && b.sizes() == a.sizes() && a.is_contiguous() && b.is_contiguous(),
              "add_layer_norm: a and b must be contiguous [rows, H] on a GPU");
  TORCH_CHECK(a.scalar_type() == at::kHalf || a.scalar_type() == at::kBFloat16, "add_layer_norm: fp16 or bf16 only");
  const std::int64_t rows = a.size(0), width = a.size(1);
  TORCH_CHECK(width % 8 == 0 && width >= 8 && width <= 2048, "add_layer_norm: H must be a multiple of 8 up to 2048");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == width && weight.scalar_type() == a.scalar_type(),
              "add_layer_norm: weight must be [H] in the input's dtype");
  TORCH_CHECK(
      !bias.defined() || (bias.is_contiguous() && bias.numel() == width && bias.scalar_type() == a.scalar_type()),
      "add_layer_norm: bias must be [H] in the input's dtype");
  TORCH_CHECK(
      !sum.defined() || (sum.is_contiguous() && sum.sizes() == a.sizes() && sum.scalar_type() == a.scalar_type()),
      "add_layer_norm: sum must be like a");
  for (const at::Tensor* t : {&a, &b, &weight, &bias, &sum}) {
    TORCH_CHECK(!t->defined() || aligned16(*t), "add_layer_norm: tensors must be 16-byte aligned");
  }
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = at::empty_like(a);
  if (rows == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(a.device().index());
  const unsigned blocks = static_cast<unsigned>((rows + 3) / 4);
  const int chunks = static_cast<int>((width / 8 + 31) / 32);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.data_ptr());
    const T* pb = static_cast<const T*>(b.data_ptr());
    const T* pw = static_cast<const T*>(weight.data_ptr());
    const T* pbias = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* po = static_cast<T*>(out.data_ptr());
    T* ps = sum.defined() ? static_cast<T*>(sum.data_ptr()) : nullptr;
    const float e = static_cast<float>(eps);
    const int w = static_cast<int>(width);
    if (chunks <= 1)
      add_layer_norm_kernel<T, 1><<<blocks, 128, 0, stream>>>(pa, pb, pw, pbias, po, ps, rows, w, e);
    else if (chunks <= 2)
      add_layer_norm_kernel<T, 2><<<blocks, 128, 0, stream>>>(pa, pb, pw, pbias, po, ps, rows, w, e);
    else if (chunks <= 4)
      add_layer_norm_kernel<T, 4><<<blocks, 128, 0, stream>>>(pa, pb, pw, pbias, po, ps, rows, w, e);
    else
      add_layer_norm_kernel<T, 8><<<blocks, 128, 0, stream>>>(pa, pb, pw, pbias, po, ps, rows, w, e);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  with_type(a.scalar_type(), run);
  return out;
}

// ---- rotary position embeddings ---------------------------------------------------------------------
//
// The pair (x1, x2) = (x[i], x[i + half]) becomes (x1 cos - x2 sin, x2 cos + x1 sin), each product and each
// sum rounded to T as the separate ATen operations of rotate() round them, so the result is the same to the
// bit. Eight pairs per thread in 16-byte loads and stores where the rows allow (half a multiple of 8,
// 16-byte aligned rows, a 32-bit count of threads): one element per thread with 64-bit index divisions ran
// at a third of the memory's bandwidth on the H100 (ncu: 48 us for ModernBERT's 8,192-token pass).

template <typename T>
struct Rotated {
  T first, second;
};

template <typename T>
__device__ __forceinline__ Rotated<T> rotate_pair(T x1_, T x2_, T c_, T s_) {
  const float c = Cvt<T>::f(c_), s = Cvt<T>::f(s_);
  const float x1 = Cvt<T>::f(x1_), x2 = Cvt<T>::f(x2_);
  auto r = [](float v) { return Cvt<T>::f(Cvt<T>::t(v)); };
  return {Cvt<T>::t(r(x1 * c) - r(x2 * s)), Cvt<T>::t(r(x2 * c) + r(x1 * s))};
}

// One thread per (token, head, i < half).
template <typename T>
__global__ void rotate_kernel(const T* __restrict__ x, std::int64_t token_stride, std::int64_t head_stride, int heads,
                              int half, const T* __restrict__ cos, const T* __restrict__ sin,
                              const std::int64_t* __restrict__ positions, T* __restrict__ out, std::int64_t count) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const int i = static_cast<int>(index % half);
  const std::int64_t token_head = index / half;
  const int head = static_cast<int>(token_head % heads);
  const std::int64_t token = token_head / heads;
  const T* row = x + token * token_stride + head * head_stride;
  const std::int64_t table = positions[token] * half + i;
  const Rotated<T> r = rotate_pair(row[i], row[i + half], cos[table], sin[table]);
  T* o = out + token_head * 2 * half;
  o[i] = r.first;
  o[i + half] = r.second;
}

// Eight values of T in one 16-byte load or store.
template <typename T>
struct alignas(16) Vec8 {
  T v[8];
};

// One thread per (token, head, eight pairs i..i+7); half % 8 == 0, rows 16-byte aligned.
template <typename T>
__global__ void rotate8_kernel(const T* __restrict__ x, unsigned token_stride, unsigned head_stride, unsigned heads,
                               unsigned half, const T* __restrict__ cos, const T* __restrict__ sin,
                               const std::int64_t* __restrict__ positions, T* __restrict__ out, unsigned count) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const unsigned groups = half / 8;
  const unsigned i = index % groups * 8, token_head = index / groups;
  const unsigned head = token_head % heads, token = token_head / heads;
  const T* row = x + static_cast<std::size_t>(token) * token_stride + static_cast<std::size_t>(head) * head_stride;
  const std::size_t table = static_cast<std::size_t>(positions[token]) * half + i;
  const Vec8<T> x1 = *reinterpret_cast<const Vec8<T>*>(row + i);
  const Vec8<T> x2 = *reinterpret_cast<const Vec8<T>*>(row + i + half);
  const Vec8<T> c = *reinterpret_cast<const Vec8<T>*>(cos + table);
  const Vec8<T> s = *reinterpret_cast<const Vec8<T>*>(sin + table);
  Vec8<T> first, second;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const Rotated<T> r = rotate_pair(x1.v[k], x2.v[k], c.v[k], s.v[k]);
    first.v[k] = r.first;
    second.v[k] = r.second;
  }
  T* o = out + static_cast<std::size_t>(token_head) * 2 * half;
  *reinterpret_cast<Vec8<T>*>(o + i) = first;
  *reinterpret_cast<Vec8<T>*>(o + i + half) = second;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& positions) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.stride(2) == 1 && x.size(2) % 2 == 0,
              "rotate: x must be [T, heads, head_dim] on a GPU, rows contiguous");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, "rotate: fp16 or bf16 only");
  const std::int64_t T = x.size(0), heads = x.size(1), half = x.size(2) / 2;
  TORCH_CHECK(cos.dim() == 2 && cos.size(1) == half && cos.is_contiguous() && sin.sizes() == cos.sizes() &&
                  sin.is_contiguous() && cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type(),
              "rotate: cos and sin must be [positions, head_dim / 2] in x's dtype");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() && positions.numel() == T,
              "rotate: positions must be [T] int64");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({T, heads, 2 * half}, x.options());
  const std::int64_t count = T * heads * half;
  if (count == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index());
  const bool by_eight = half % 8 == 0 && x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && aligned16(x.data_ptr()) &&
                        aligned16(cos.data_ptr()) && aligned16(sin.data_ptr()) && aligned16(out.data_ptr()) &&
                        count / 8 < (std::int64_t{1} << 31) && x.stride(0) < (std::int64_t{1} << 31);
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    const auto* px = static_cast<const T_*>(x.data_ptr());
    const auto* pc = static_cast<const T_*>(cos.data_ptr());
    const auto* ps = static_cast<const T_*>(sin.data_ptr());
    auto* po = static_cast<T_*>(out.data_ptr());
    if (by_eight) {
      const auto threads = static_cast<unsigned>(count / 8);
      rotate8_kernel<T_><<<(threads + 255) / 256, 256, 0, stream>>>(
          px, static_cast<unsigned>(x.stride(0)), static_cast<unsigned>(x.stride(1)), static_cast<unsigned>(heads),
          static_cast<unsigned>(half), pc, ps, positions.data_ptr<std::int64_t>(), po, threads);
    } else {
      rotate_kernel<T_><<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(
          px, x.stride(0), x.stride(1), static_cast<int>(heads), static_cast<int>(half), pc, ps,
          positions.data_ptr<std::int64_t>(), po, count);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  with_type(x.scalar_type(), run);
  return out;
}

// ---- gated activations (GeGLU, SwiGLU) -------------------------------------------------------------------
//
// out = act(up[:, :I]) * up[:, I:], the activation rounded to T before the product as two ATen operations
// would round it; each activation in float32 with ATen's CUDA formula. Eight columns per thread in 16-byte
// loads and stores where I % 8 == 0 (as for rotate above).

template <typename T, GatedActivation kind>
__device__ __forceinline__ T gate(T a_, T b_) {
  const float a = Cvt<T>::f(a_), b = Cvt<T>::f(b_);
  float activated;
  if constexpr (kind == GatedActivation::gelu) {
    activated = a * 0.5f * (1.f + erff(a * static_cast<float>(M_SQRT1_2)));
  } else if constexpr (kind == GatedActivation::gelu_tanh) {
    constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
    constexpr float kKappa = 0.044715f;
    const float cube = a * a * a;
    activated = 0.5f * a * (1.f + tanhf(kBeta * (a + kKappa * cube)));
  } else if constexpr (kind == GatedActivation::silu) {
    activated = a / (1.f + expf(-a));
  } else {
    activated = a > 0.f ? a : 0.f;
  }
  return Cvt<T>::t(Cvt<T>::f(Cvt<T>::t(activated)) * b);
}

template <typename T, GatedActivation kind>
__global__ void gated_kernel(const T* __restrict__ up, std::int64_t width, T* __restrict__ out, std::int64_t count) {
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const std::int64_t row = index / width, column = index % width;
  out[index] = gate<T, kind>(up[row * 2 * width + column], up[row * 2 * width + width + column]);
}

template <typename T, GatedActivation kind>
__global__ void gated8_kernel(const T* __restrict__ up, unsigned width, T* __restrict__ out, unsigned count) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  if (index >= count) return;
  const unsigned groups = width / 8;
  const std::size_t row = index / groups, column = index % groups * 8;
  const Vec8<T> a = *reinterpret_cast<const Vec8<T>*>(up + row * 2 * width + column);
  const Vec8<T> b = *reinterpret_cast<const Vec8<T>*>(up + row * 2 * width + width + column);
  Vec8<T> o;
#pragma unroll
  for (int k = 0; k < 8; ++k) o.v[k] = gate<T, kind>(a.v[k], b.v[k]);
  *reinterpret_cast<Vec8<T>*>(out + row * width + column) = o;
}

at::Tensor gated(const at::Tensor& up, GatedActivation kind) {
  TORCH_CHECK(up.is_cuda() && up.dim() == 2 && up.is_contiguous() && up.size(1) % 2 == 0,
              "gated: up must be contiguous [T, 2I] on a GPU");
  TORCH_CHECK(up.scalar_type() == at::kHalf || up.scalar_type() == at::kBFloat16, "gated: fp16 or bf16 only");
  const std::int64_t T = up.size(0), width = up.size(1) / 2;
  const c10::cuda::CUDAGuard guard(up.device());
  at::Tensor out = at::empty({T, width}, up.options());
  const std::int64_t count = T * width;
  if (count == 0) return out;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(up.device().index());
  const bool by_eight = width % 8 == 0 && aligned16(up.data_ptr()) && aligned16(out.data_ptr()) &&
                        count / 8 < (std::int64_t{1} << 31) && width < (std::int64_t{1} << 31);
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    const T_* in = static_cast<const T_*>(up.data_ptr());
    T_* o = static_cast<T_*>(out.data_ptr());
    // The activation as a template argument: `tag` is a std::integral_constant of it.
    auto launch = [&](auto tag) {
      constexpr GatedActivation K = decltype(tag)::value;
      if (by_eight) {
        const auto threads = static_cast<unsigned>(count / 8);
        gated8_kernel<T_, K><<<(threads + 255) / 256, 256, 0, stream>>>(in, static_cast<unsigned>(width), o, threads);
      } else {
        gated_kernel<T_, K><<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(in, width, o, count);
      }
    };
    using A = GatedActivation;
    switch (kind) {
      case A::gelu:
        launch(std::integral_constant<A, A::gelu>{});
        break;
      case A::gelu_tanh:
        launch(std::integral_constant<A, A::gelu_tanh>{});
        break;
      case A::silu:
        launch(std::integral_constant<A, A::silu>{});
        break;
      case A::relu:
        launch(std::integral_constant<A, A::relu>{});
        break;
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  with_type(up.scalar_type(), run);
  return out;
}

const CudaKernels kKernels{&relative_attention, &add_layer_norm, &rotate, &gated};

}  // namespace
}  // namespace flowline::models::detail

extern "C" __attribute__((visibility("default"))) const flowline::models::detail::CudaKernels*
flowline_models_cuda_kernels() {
  return &flowline::models::detail::kKernels;
}
