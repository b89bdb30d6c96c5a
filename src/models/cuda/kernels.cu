// flowline's own CUDA kernels (cuda_kernels.hpp says what each computes): attention over packed sequences
// (with a relative position bias, rotary embeddings or DeBERTa's disentangled terms), a residual add fused with
// LayerNorm, rotary embeddings and gated activations
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

// The rotation of one pair (x1, x2) = (x[i], x[i + half]) of rotary embeddings: (x1 cos - x2 sin,
// x2 cos + x1 sin), each product and each sum rounded to T as the separate ATen operations of rotate()
// round them, so the result is the same to the bit (used by the attention and the rotary kernels).
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

// Eight values of T in one 16-byte load or store.
template <typename T>
struct alignas(16) Vec8 {
  T v[8];
};

// ---- attention over packed sequences ---------------------------------------------------------------------
//
// FlashAttention-2's scheme with mma.sync m16n8k16 on tensor cores, everything between the loads and the
// output in registers. One block of 4 warps per entry of the pass's work list (a tile of 64 queries of one
// sequence, cuda_kernels.hpp) and head, so no block is launched for tiles past a sequence's end; each warp
// owns 16 query rows, whose Q fragments it keeps. For each tile of keys (K and V staged in shared memory):
// S = Q K^T into float accumulators (K fetched by ldmatrix); mask, bias and the online softmax in float32
// on the accumulators (each row's values spread over the 4 lanes of a quad, reduced with shuffles); P
// rounded to the input type and repacked in place as the A operand of P V (the accumulator layout of one
// m16n8k16 is the A layout of the next); V read transposed with ldmatrix.trans; the output rows rescaled
// and accumulated in registers. Head dimensions are padded with zeros to DP (16..128) in shared memory,
// which changes no dot product. The fragment layouts are PTX's (mma.m16n8k16): lane = 4 * group + quad
// position.
//
// What a tile of queries sees: a key range (all keys; up to the tile's last query when causal; the
// tile's queries +- window when sliding) and per row the keys lo <= key < hi; grouped-query heads (query
// head h reads key/value head h / group); an optional relative bias (a table by offset, staged in shared
// memory) or DeBERTa's disentangled terms (gathered per score from the c2p and p2c tables by the distance's
// row, which shared memory holds for the sequence). Loads overlap the math: Q and the
// first two tiles of K and V are requested at once with cp.async, and tile j + 2 while tile j + 1 is
// multiplied (two stages of K and V in shared memory), so for the ~70-token sequences of a typical pass
// every load of the block is issued before the first product. The tail of a sequence is multiplied as a
// tile of 32 or 16 keys where that holds it, tiles whose keys every row sees skip the mask, and the output
// rows are staged in the warp's own Q rows and written 16 bytes at a time.
//
// Measured on an H100 (bench/attention_gpu, docs/benchmarks.md): 1.8-2.0x LibTorch's FlashAttention-2 on
// BERT-base's heads over the corpus's passes, 2.8x on ModernBERT's sliding-window layers.

constexpr int kRows = static_cast<int>(kAttentionTile);  // queries per block
constexpr int kKeys = 64;                                // keys per tile
constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kBiasPad = 72;  // zeros each side of a relative bias table in shared memory

// What the scores get before the softmax (PackedAttention): nothing, MPNet's relative bias (a table by key -
// query offset, per head), or DeBERTa's disentangled terms (per token and distance: c2p, p2c).
enum BiasMode : int { kNoBias = 0, kRelativeBias = 1, kDisentangled = 2 };

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

struct PackedParams {
  const void *q, *k, *v;
  std::int64_t q_token, q_head, k_token, k_head, v_token, v_head;  // strides in elements
  int head_dim, group;                                             // group: query heads per key/value head
  const std::int64_t* tiles;  // the work list: one entry per block (write_attention_tiles in cuda_kernels.hpp)
  const float* bias;
  int bias_row, bias_center;
  const void *c2p, *p2c;  // the disentangled terms [heads, tokens, rel_width], or null
  const int* rel_rows;    // their row of distance d (query - key) at rel_center + d
  int rel_center, rel_width;
  std::int64_t tokens;    // T
  const void *cos, *sin;  // rotary tables [positions, head_dim / 2] (head_dim = DP), or null
  int window;             // > 0: keys with |key - query| > window are masked
  bool causal;
  float scale;
  void* out;
  std::int64_t out_token;
};

template <int DP>
struct PackedLayout {
  static constexpr int LD = DP + 8;  // elements per row in shared memory
  static constexpr std::size_t tile_bytes = static_cast<std::size_t>(kRows) * LD * 2;  // one tile of rows
  static constexpr std::size_t qkv_bytes = 5 * tile_bytes;                             // Q, then two stages of K and V
  static std::size_t bytes(std::int64_t longest, int mode) {
    const auto length = static_cast<std::size_t>(longest);
    if (mode == kRelativeBias)
      return qkv_bytes + 2 * 4 * static_cast<std::size_t>(bias_table(static_cast<int>(longest)));
    if (mode == kDisentangled) return qkv_bytes + 4 * 2 * length;  // the rows of distances -(L - 1) .. L - 1
    return qkv_bytes;
  }
  // A sequence of `length` tokens' relative bias, in floats: offsets -(length - 1) .. length - 1 with
  // kBiasPad zeros each side (the loads of masked rows and keys reach up to 64 past either end), even.
  __host__ __device__ static constexpr int bias_table(int length) { return (2 * length - 1 + 2 * kBiasPad + 1) & ~1; }
};

// 16 bytes from global to shared memory without passing through registers; `bytes` 0 writes zeros.
__device__ __forceinline__ void copy16_async(void* shared, const void* global, int bytes) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// Rows first .. first + count - 1 of one head into a tile of kRows rows, columns past head_dim zeros (they
// enter dot products). Rows past count are zeros when `zero_rows` (V: a zero probability times whatever a
// stale row holds could be NaN), else not written (Q, K: their scores are masked, their outputs not
// written). Thread t copies 16-byte piece t % chunks of every (128 / chunks)-th row from row t / chunks.
template <typename T, int DP>
__device__ __forceinline__ void request_rows(T* dst, const T* src, std::int64_t token_stride, int first, int count,
                                             int head_dim, bool zero_rows) {
  constexpr int chunks = DP / 8, step = kWarps * 32 / chunks;
  const int c = static_cast<int>(threadIdx.x) % chunks, r0 = static_cast<int>(threadIdx.x) / chunks;
  const bool column = c * 8 < head_dim;
  const T* from = src + static_cast<std::int64_t>(first + r0) * token_stride + c * 8;
  T* to = dst + r0 * PackedLayout<DP>::LD + c * 8;
#pragma unroll
  for (int i = 0; i < kRows / step; ++i) {
    const int r = r0 + i * step;
    const bool real = column && r < count;
    if (r < count || zero_rows) copy16_async(to, real ? from : src, real ? 16 : 0);
    from += step * token_stride;
    to += step * PackedLayout<DP>::LD;
  }
}

// Four 8 x 8 matrices of 16-bit values from shared memory: lane l names the row address of matrix l / 8,
// row l % 8.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 2^x by the special function unit alone (exp2f adds range scaling around it for results below 2^-126,
// which a softmax's probabilities may as well lose: they flush to zero).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Rotary embeddings applied in shared memory to rows 0 .. count - 1 of a tile, row r at position first + r
// in its sequence, by the block's threads, eight pairs each (head_dim = DP, so half = DP / 2).
template <typename T, int DP>
__device__ __forceinline__ void rotate_rows(T* tile, int first, int count, const T* cos, const T* sin) {
  constexpr int half = DP / 2, chunks = half / 8;
  for (int i = threadIdx.x; i < count * chunks; i += blockDim.x) {
    const int r = i / chunks, c = i % chunks;
    auto* x1 = reinterpret_cast<Vec8<T>*>(tile + r * PackedLayout<DP>::LD + c * 8);
    auto* x2 = reinterpret_cast<Vec8<T>*>(tile + r * PackedLayout<DP>::LD + half + c * 8);
    const std::int64_t at = static_cast<std::int64_t>(first + r) * half + c * 8;
    const Vec8<T> cv = *reinterpret_cast<const Vec8<T>*>(cos + at), sv = *reinterpret_cast<const Vec8<T>*>(sin + at);
    Vec8<T> a = *x1, b = *x2;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const Rotated<T> rotated = rotate_pair(a.v[e], b.v[e], cv.v[e], sv.v[e]);
      a.v[e] = rotated.first;
      b.v[e] = rotated.second;
    }
    *x1 = a;
    *x2 = b;
  }
}

// What one warp keeps between tiles of keys: its 16 queries as A fragments, their output rows and the
// online softmax's running maximum (in log2 units) and sum, for rows group and group + 8 of the 16.
template <int DP>
struct WarpRows {
  std::uint32_t qa[DP / 16][4];
  float o[DP / 8][4];  // columns n * 8 + quad * 2 + {0, 1}
  float row_max[2], row_sum[2];
  int query[2];      // positions in the sequence
  int lo[2], hi[2];  // the keys each row sees: lo <= key < hi (hi 0 for rows past the sequence)
  bool full;         // all 16 rows are queries of the sequence
};

// A lane's view of DeBERTa's disentangled terms (kDisentangled): the c2p rows of its two query rows, the
// head's p2c table from the sequence's first token, and the sequence's row of each distance in shared memory.
// Queries and keys past the sequence read its last token's (their scores are masked).
template <typename T>
struct DisentangledLane {
  const T* c2p[2];  // null without c2p
  const T* p2c;     // null without p2c
  const int* rows;  // rows[d] for d = query - key in -(length - 1) .. length - 1
  int width;        // elements per token row of the tables
  int last;         // length - 1
  float over;       // 1 / the q.k scale: the terms are added to q.k before the scale
};

// The disentangled terms of one score (over the q.k scale): query position `query`, key position `key`.
template <typename T>
__device__ __forceinline__ float disentangled(const DisentangledLane<T>& dl, int r, int query, int key) {
  const int k = min(key, dl.last), row = dl.rows[min(query, dl.last) - k];
  float b = 0.f;
  if (dl.c2p[r] != nullptr) b += Cvt<T>::f(dl.c2p[r][row]);
  if (dl.p2c != nullptr) b += Cvt<T>::f(dl.p2c[static_cast<std::int64_t>(k) * dl.width + row]);
  return b * dl.over;
}

// One tile of KEYS keys (64, 32 or 16; the tail of a sequence takes the smallest that holds it) at
// positions k0.., K and V rows in shared memory. scale: the q.k scale in log2 units; bias (kRelativeBias):
// the lane's bias (divided by the q.k scale) for its row `group` and first column pair, 8-byte aligned: the
// pair of 8-key tile n is at bias + 8n, and row group + 8's at bias + 8n - 8, so KEYS / 8 + 1 loads of two
// floats serve the lane's 2 x KEYS / 4 scores; dl (kDisentangled): where the lane's terms are.
template <typename T, int DP, int KEYS, int MODE>
__device__ __forceinline__ void attend_tile(WarpRows<DP>& w, const T* sk, const T* sv, int k0, bool whole, float scale,
                                            const float* bias, const DisentangledLane<T>& dl, int lane) {
  using L = PackedLayout<DP>;
  const int group = lane >> 2, quad = lane & 3;
  // S = Q K^T: KEYS / 8 tiles of 8 keys; K's rows are B's columns, fetched by ldmatrix two dimension
  // blocks of 16 at a time (lane l: key row l % 8, columns (l / 8) * 8).
  // With a bias, the accumulators start from it (bias / scale, so that s * scale adds it), and the bias costs
  // no arithmetic of its own.
  float s[KEYS / 8][4];
  float2 pairs[MODE == kRelativeBias ? KEYS / 8 + 1 : 1];  // pairs[m]: the bias at bias + 8 (m - 1)
  if constexpr (MODE == kRelativeBias) {
#pragma unroll
    for (int m = 0; m <= KEYS / 8; ++m) pairs[m] = *reinterpret_cast<const float2*>(bias + 8 * (m - 1));
  }
#pragma unroll
  for (int n = 0; n < KEYS / 8; ++n) {
    if constexpr (MODE == kRelativeBias) {
      s[n][0] = pairs[n + 1].x;
      s[n][1] = pairs[n + 1].y;
      s[n][2] = pairs[n].x;
      s[n][3] = pairs[n].y;
    } else if constexpr (MODE == kDisentangled) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = disentangled(dl, i >> 1, w.query[i >> 1], k0 + n * 8 + quad * 2 + (i & 1));
    } else {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    }
    const T* key_row = sk + (n * 8 + (lane & 7)) * L::LD + (lane >> 3) * 8;
#pragma unroll
    for (int d = 0; d < DP / 16; d += 2) {
      if (d + 1 < DP / 16) {
        std::uint32_t b[4];
        ldmatrix_x4(b, key_row + d * 16);
        mma<T>(s[n], w.qa[d], b[0], b[1]);
        mma<T>(s[n], w.qa[d + 1], b[2], b[3]);
      } else {  // DP = 16: one block of dimensions
        const T* row = sk + (n * 8 + group) * L::LD + quad * 2;
        mma<T>(s[n], w.qa[d], *reinterpret_cast<const std::uint32_t*>(row),
               *reinterpret_cast<const std::uint32_t*>(row + 8));
      }
    }
  }
  // Keys a row does not see get -inf (no test at all when the tile is whole: every key real and seen by every
  // row); s * scale is a score in log2 units.
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < KEYS / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i >> 1, key = k0 + n * 8 + quad * 2 + (i & 1);
      const bool seen = whole || (key >= w.lo[r] && key < w.hi[r]);
      const float value = seen ? s[n][i] : -INFINITY;
      s[n][i] = value;
      tile_max[r] = fmaxf(tile_max[r], value);
    }
  }
  float alpha[2], base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    const float new_max = fmaxf(w.row_max[r], tile_max[r] * scale);
    base[r] = new_max == -INFINITY ? 0.f : new_max;  // a row with no key seen yet keeps zeros
    alpha[r] = fast_exp2(w.row_max[r] - base[r]);
    w.row_max[r] = new_max;
  }
  // P = exp2(s * scale - max), rounded to T and packed as the A fragments of P V (one per 16 keys).
  std::uint32_t pa[KEYS / 16][4];
  float tile_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < KEYS / 16; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the 8-key tiles 2j and 2j + 1
      const float* t = s[2 * j + h];
      const float p0 = fast_exp2(fmaf(t[0], scale, -base[0])), p1 = fast_exp2(fmaf(t[1], scale, -base[0]));
      const float p2 = fast_exp2(fmaf(t[2], scale, -base[1])), p3 = fast_exp2(fmaf(t[3], scale, -base[1]));
      pa[j][2 * h] = pack<T>(p0, p1);
      pa[j][2 * h + 1] = pack<T>(p2, p3);
      tile_sum[0] += p0 + p1;
      tile_sum[1] += p2 + p3;
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
    w.row_sum[r] = w.row_sum[r] * alpha[r] + tile_sum[r];
  }
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    w.o[n][0] *= alpha[0];
    w.o[n][1] *= alpha[0];
    w.o[n][2] *= alpha[1];
    w.o[n][3] *= alpha[1];
  }
  // O += P V: V's rows (keys) read transposed as B fragments, two 8-dimension tiles per ldmatrix.
#pragma unroll
  for (int j = 0; j < KEYS / 16; ++j) {
#pragma unroll
    for (int n = 0; n < DP / 16; ++n) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, sv + (j * 16 + (lane & 15)) * L::LD + n * 16 + (lane >> 4) * 8);
      mma<T>(w.o[2 * n], pa[j], b[0], b[1]);
      mma<T>(w.o[2 * n + 1], pa[j], b[2], b[3]);
    }
  }
}

template <typename T, int DP, int MODE>
__global__ void __launch_bounds__(kWarps * 32, DP <= 64 ? 4 : 2) packed_attention_kernel(PackedParams p) {
  using L = PackedLayout<DP>;
  const std::int64_t entry = p.tiles[blockIdx.x];
  if (entry < 0) return;  // past the pass's tiles
  const int head = blockIdx.y, start = static_cast<int>(entry >> 32);
  const int length = static_cast<int>((entry >> kAttentionTileBits) & ((1 << kAttentionLengthBits) - 1));
  const int q0 = static_cast<int>(entry & ((1 << kAttentionTileBits) - 1)) * kRows;
  if (q0 >= length) return;
  // The keys any query of this tile may see.
  int k_begin = 0, k_end = length;
  if (p.causal) k_end = min(k_end, q0 + kRows);
  if (p.window > 0) {
    k_begin = max(0, q0 - p.window);
    k_end = min(k_end, q0 + kRows + p.window);
  }
  const int key_tiles = (k_end - k_begin + kKeys - 1) / kKeys;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* skv = sq + kRows * L::LD;  // stage s: K at skv + 2s tiles, V at skv + (2s + 1) tiles
  float* bias_smem = reinterpret_cast<float*>(smem + L::qkv_bytes);
  const int kv_head = head / p.group;
  const T* q = static_cast<const T*>(p.q) + head * p.q_head;
  const T* k = static_cast<const T*>(p.k) + kv_head * p.k_head;
  const T* v = static_cast<const T*>(p.v) + kv_head * p.v_head;
  auto request_keys = [&](int j) {  // tile j of keys and values into stage j % 2
    T* stage = skv + (j & 1) * 2 * kRows * L::LD;
    const int first = k_begin + j * kKeys;
    request_rows<T, DP>(stage, k, p.k_token, start + first, k_end - first, p.head_dim, false);
    request_rows<T, DP>(stage + kRows * L::LD, v, p.v_token, start + first, k_end - first, p.head_dim, true);
  };
  request_rows<T, DP>(sq, q, p.q_token, start + q0, length - q0, p.head_dim, false);
  request_keys(0);
  commit_async();
  if (key_tiles > 1) request_keys(1);
  commit_async();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane >> 2, quad = lane & 3;  // fragment row (and row + 8), column pair
  const int row0 = q0 + warp * 16;               // the warp's first query position
  // The bias (over the q.k scale) of key - query offsets -(length - 1) .. length - 1, twice: `even` holds o
  // at kBiasPad + o + length - 1, `odd` the same shifted down by one, so that every lane finds its pairs at
  // an even index of one of them (8-byte aligned loads). Zeros around: masked rows and keys load there.
  const int table = PackedLayout<DP>::bias_table(length);
  float* const even = bias_smem;
  float* const odd = bias_smem + table;
  const int lane_bias = quad * 2 - (row0 + group) + length - 1 + kBiasPad;  // + k0: the lane's index, row group
  if constexpr (MODE == kRelativeBias) {
    const float* bias = p.bias + static_cast<std::int64_t>(head) * p.bias_row + p.bias_center - (length - 1);
    const float over = 1.f / p.scale;
    for (int i = threadIdx.x; i < table; i += blockDim.x) {
      const int o = i - kBiasPad;
      even[i] = o >= 0 && o < 2 * length - 1 ? bias[o] * over : 0.f;
      odd[i] = o + 1 >= 0 && o + 1 < 2 * length - 1 ? bias[o + 1] * over : 0.f;
    }
  }
  const bool active = row0 < length;  // the warp has at least one real query
  WarpRows<DP> w;
  w.full = row0 + 16 <= length;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = row0 + group + 8 * r;
    w.query[r] = query;
    w.lo[r] = p.window > 0 ? query - p.window : 0;
    int hi = query < length ? k_end : 0;
    if (p.causal) hi = min(hi, query + 1);
    if (p.window > 0) hi = min(hi, query + p.window + 1);
    w.hi[r] = hi;
  }
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) w.o[n][0] = w.o[n][1] = w.o[n][2] = w.o[n][3] = 0.f;
  w.row_max[0] = w.row_max[1] = -INFINITY;
  w.row_sum[0] = w.row_sum[1] = 0.f;
  // The disentangled terms: each distance's row into shared memory (clamped into the tables), the lane's rows.
  DisentangledLane<T> dl{};
  if constexpr (MODE == kDisentangled) {
    int* rows = reinterpret_cast<int*>(bias_smem);
    const int* from = p.rel_rows + p.rel_center - (length - 1);
    for (int i = threadIdx.x; i < 2 * length - 1; i += blockDim.x) rows[i] = min(max(from[i], 0), p.rel_width - 1);
    const std::int64_t table = static_cast<std::int64_t>(head) * p.tokens * p.rel_width;
    const auto* c2p = static_cast<const T*>(p.c2p);
    const auto* p2c = static_cast<const T*>(p.p2c);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const std::int64_t token = start + min(w.query[r], length - 1);
      dl.c2p[r] = c2p != nullptr ? c2p + table + token * p.rel_width : nullptr;
    }
    dl.p2c = p2c != nullptr ? p2c + table + static_cast<std::int64_t>(start) * p.rel_width : nullptr;
    dl.rows = rows + length - 1;
    dl.width = p.rel_width;
    dl.last = length - 1;
    dl.over = 1.f / p.scale;
  }

  for (int j = 0; j < key_tiles; ++j) {
    wait_async<1>();  // every group but the newest (tile j + 1's) has landed
    __syncthreads();
    const int k0 = k_begin + j * kKeys;
    T* sk = skv + (j & 1) * 2 * kRows * L::LD;
    const T* sv = sk + kRows * L::LD;
    if (p.cos != nullptr) {  // rotary embeddings of this tile's keys (and, first, of the queries)
      const T* cos = static_cast<const T*>(p.cos);
      const T* sin = static_cast<const T*>(p.sin);
      if (j == 0) rotate_rows<T, DP>(sq, q0, min(kRows, length - q0), cos, sin);
      rotate_rows<T, DP>(sk, k0, min(kKeys, k_end - k0), cos, sin);
      __syncthreads();
    }
    if (active) {
      if (j == 0) {
#pragma unroll
        for (int d = 0; d < DP / 16; ++d) {
          const T* base = sq + (warp * 16 + group) * L::LD + d * 16 + quad * 2;
          w.qa[d][0] = *reinterpret_cast<const std::uint32_t*>(base);
          w.qa[d][1] = *reinterpret_cast<const std::uint32_t*>(base + 8 * L::LD);
          w.qa[d][2] = *reinterpret_cast<const std::uint32_t*>(base + 8);
          w.qa[d][3] = *reinterpret_cast<const std::uint32_t*>(base + 8 * L::LD + 8);
        }
      }
      // The last tile takes the smallest width that holds its keys; a tile is whole when every key is real
      // and every row sees it.
      const int keys = k_end - k0;
      const bool whole = keys >= kKeys && w.full && !p.causal && p.window == 0;
      const float scale = p.scale * kLog2e;
      const int at = lane_bias + k0;
      const float* bias = (at & 1) ? odd + at - 1 : even + at;
      if (keys > kKeys / 2)
        attend_tile<T, DP, kKeys, MODE>(w, sk, sv, k0, whole, scale, bias, dl, lane);
      else if (keys > kKeys / 4)
        attend_tile<T, DP, kKeys / 2, MODE>(w, sk, sv, k0, false, scale, bias, dl, lane);
      else
        attend_tile<T, DP, kKeys / 4, MODE>(w, sk, sv, k0, false, scale, bias, dl, lane);
    }
    __syncthreads();  // stage j % 2 is no longer read
    if (j + 2 < key_tiles) request_keys(j + 2);
    commit_async();
  }

  if (!active) return;
  // The warp's rows, normalised, into its own rows of the Q tile (only this warp read them), then out.
  T* staged = sq + warp * 16 * L::LD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inverse = w.row_sum[r] > 0.f ? 1.f / w.row_sum[r] : 0.f;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(staged + (group + 8 * r) * L::LD + n * 8 + quad * 2) =
          pack<T>(w.o[n][2 * r] * inverse, w.o[n][2 * r + 1] * inverse);
    }
  }
  __syncwarp();
  // Lane l writes 16-byte piece l % chunks of every (32 / chunks)-th row from row l / chunks.
  constexpr int chunks = DP / 8, step = 32 / chunks;
  const int c = lane % chunks;
  if (c * 8 >= p.head_dim) return;
  T* out = static_cast<T*>(p.out) + head * p.head_dim + c * 8;
#pragma unroll
  for (int i = 0; i < 16 / step; ++i) {
    const int r = lane / chunks + i * step, position = row0 + r;
    if (position < length) {
      *reinterpret_cast<uint4*>(out + static_cast<std::int64_t>(start + position) * p.out_token) =
          *reinterpret_cast<const uint4*>(staged + r * L::LD + c * 8);
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

bool aligned16(const at::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

template <typename T, int DP, int MODE>
void launch_packed(const PackedParams& p, int blocks, int heads, std::int64_t longest, cudaStream_t stream,
                   int device) {
  const std::size_t bytes = PackedLayout<DP>::bytes(longest, MODE);
  auto kernel = packed_attention_kernel<T, DP, MODE>;
  const int allowed = allow_optin_shared_memory(reinterpret_cast<const void*>(kernel), device);
  TORCH_CHECK(bytes <= static_cast<std::size_t>(allowed), "attention: sequences of ", longest, " tokens need ", bytes,
              " bytes of shared memory per block; the GPU has ", allowed);
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)), kWarps * 32, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether `options` asks for the disentangled terms, checking them (cuda_kernels.hpp's contract) when it does.
bool check_disentangled(const at::Tensor& q, const at::Tensor& k, std::int64_t longest,
                        const PackedAttention& options) {
  const at::Tensor &c2p = options.c2p, &p2c = options.p2c, &rows = options.relative_rows;
  if (!c2p.defined() && !p2c.defined()) return false;
  const std::int64_t T = q.size(0), heads = q.size(1);
  TORCH_CHECK(
      q.size(2) == 64 && k.size(1) == heads && !options.relative_bias.defined() && !options.rotary_cos.defined(),
      "attention: disentangled terms need head_dim 64 and as many key heads as query heads, without a "
      "relative bias or rotary tables");
  const std::int64_t width = (c2p.defined() ? c2p : p2c).size(-1);
  for (const at::Tensor* t : {&c2p, &p2c}) {
    TORCH_CHECK(!t->defined() || (t->is_cuda() && t->scalar_type() == q.scalar_type() && t->dim() == 3 &&
                                  t->size(0) == heads && t->size(1) == T && t->size(2) == width && width >= 1 &&
                                  width < (std::int64_t{1} << 30) && t->is_contiguous()),
                "attention: c2p and p2c must be [heads, T, R] in q's dtype, contiguous, on the GPU");
  }
  TORCH_CHECK(rows.defined() && rows.is_cuda() && rows.scalar_type() == at::kInt && rows.dim() == 1 &&
                  rows.is_contiguous() && rows.size(0) % 2 == 1 && rows.size(0) < (std::int64_t{1} << 30),
              "attention: relative_rows must be [2P - 1] int32 on the GPU");
  TORCH_CHECK(longest <= (rows.size(0) + 1) / 2, "attention: longest is outside relative_rows");
  return true;
}

at::Tensor packed_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& tiles,
                            std::int64_t longest, const PackedAttention& options) {
  TORCH_CHECK(q.is_cuda() && q.dim() == 3 && k.dim() == 3 && v.sizes() == k.sizes() && k.size(0) == q.size(0) &&
                  k.size(2) == q.size(2),
              "attention: q must be [T, heads, head_dim], k and v [T, kv_heads, head_dim], on a GPU");
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16, "attention: fp16 or bf16 only");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "attention: dtypes");
  const std::int64_t T = q.size(0), heads = q.size(1), head_dim = q.size(2), kv_heads = k.size(1);
  TORCH_CHECK(kv_heads >= 1 && heads % kv_heads == 0, "attention: heads must be a multiple of kv_heads");
  TORCH_CHECK(head_dim % 8 == 0 && head_dim >= 8 && head_dim <= 128,
              "attention: head_dim must be a multiple of 8 up to 128");
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->stride(2) == 1 && t->stride(0) % 8 == 0 && t->stride(1) % 8 == 0 && aligned16(*t),
                "attention: rows must be contiguous and 16-byte aligned");
  }
  TORCH_CHECK(tiles.is_cuda() && tiles.scalar_type() == at::kLong && tiles.dim() == 1 && tiles.is_contiguous() &&
                  tiles.size(0) < (std::int64_t{1} << 31),
              "attention: tiles must be a work list of int64 on the GPU (attention_tiles)");
  TORCH_CHECK(longest >= 1 && longest < (std::int64_t{1} << 30), "attention: longest must be at least 1");
  TORCH_CHECK(options.window >= 0 && options.window < (std::int64_t{1} << 30), "attention: window out of range");
  const at::Tensor& bias = options.relative_bias;
  std::int64_t positions = 0;
  if (bias.defined()) {
    TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.dim() == 2 && bias.size(0) == heads &&
                    bias.is_contiguous() && bias.size(1) % 2 == 1,
                "attention: relative_bias must be [heads, 2P - 1] float32");
    positions = (bias.size(1) + 1) / 2;
    TORCH_CHECK(longest <= positions, "attention: longest is outside the bias table");
  }
  const at::Tensor &cos = options.rotary_cos, &sin = options.rotary_sin;
  if (cos.defined()) {
    TORCH_CHECK(head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128,
                "attention: rotary embeddings need head_dim 16, 32, 64 or 128");
    for (const at::Tensor* t : {&cos, &sin}) {
      TORCH_CHECK(t->defined() && t->is_cuda() && t->scalar_type() == q.scalar_type() && t->dim() == 2 &&
                      t->size(1) == head_dim / 2 && t->size(0) >= longest && t->is_contiguous() && aligned16(*t),
                  "attention: rotary tables must be [positions >= longest, head_dim / 2] in q's dtype");
    }
  }
  const bool disentangled = check_disentangled(q, k, longest, options);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty({T, heads * head_dim}, q.options());
  if (tiles.size(0) == 0 || T == 0) return out;
  PackedParams p{};
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
  p.group = static_cast<int>(heads / kv_heads);
  p.tiles = tiles.data_ptr<std::int64_t>();
  if (bias.defined()) {
    p.bias = bias.data_ptr<float>();
    p.bias_row = static_cast<int>(bias.size(1));
    p.bias_center = static_cast<int>(positions - 1);
  }
  if (cos.defined()) {
    p.cos = cos.data_ptr();
    p.sin = sin.data_ptr();
  }
  if (disentangled) {
    const at::Tensor& table = options.c2p.defined() ? options.c2p : options.p2c;
    p.c2p = options.c2p.defined() ? options.c2p.data_ptr() : nullptr;
    p.p2c = options.p2c.defined() ? options.p2c.data_ptr() : nullptr;
    p.rel_rows = options.relative_rows.data_ptr<int>();
    p.rel_center = static_cast<int>((options.relative_rows.size(0) - 1) / 2);
    p.rel_width = static_cast<int>(table.size(2));
    p.tokens = T;
  }
  p.window = static_cast<int>(options.window);
  p.causal = options.causal;
  p.scale = static_cast<float>(options.scale);
  p.out = out.data_ptr();
  p.out_token = out.stride(0);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(q.device().index());
  const int blocks = static_cast<int>(tiles.size(0)), h = static_cast<int>(heads), device = q.device().index();
  auto run = [&](auto tag) {
    using T_ = decltype(tag);
    auto with_mode = [&](auto mode) {
      constexpr int M = decltype(mode)::value;
      if constexpr (M == kDisentangled) {  // head_dim 64 only (check_disentangled)
        launch_packed<T_, 64, M>(p, blocks, h, longest, stream, device);
      } else if (head_dim <= 16) {
        launch_packed<T_, 16, M>(p, blocks, h, longest, stream, device);
      } else if (head_dim <= 32) {
        launch_packed<T_, 32, M>(p, blocks, h, longest, stream, device);
      } else if (head_dim <= 64) {
        launch_packed<T_, 64, M>(p, blocks, h, longest, stream, device);
      } else {
        launch_packed<T_, 128, M>(p, blocks, h, longest, stream, device);
      }
    };
    if (disentangled)
      with_mode(std::integral_constant<int, kDisentangled>{});
    else if (bias.defined())
      with_mode(std::integral_constant<int, kRelativeBias>{});
    else
      with_mode(std::integral_constant<int, kNoBias>{});
  };
  with_type(q.scalar_type(), run);
  return out;
}

// ---- residual add + LayerNorm ---------------------------------------------------------------------------
//
// One warp per row; each lane holds up to CHUNKS pieces of 8 values in registers, so the row is read once:
// the sum rounded to T (as a separate add would round it), mean, then the variance around it (two passes
// over registers), then (x - mean) * rstd * weight + bias in float32. b is a matrix (b_row = width), one
// row added to every row (b_row = 0: a linear's bias), or null (a alone is normalised).

template <typename T, int CHUNKS>
__global__ void __launch_bounds__(128)
    add_layer_norm_kernel(const T* __restrict__ a, const T* __restrict__ b, std::int64_t b_row,
                          const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ out,
                          T* __restrict__ sum_out, std::int64_t rows, int width, float eps) {
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
      const T* ta = reinterpret_cast<const T*>(&ua);
      uint4 us = ua;
      T* ts = reinterpret_cast<T*>(&us);
      if (b != nullptr) {
        const uint4 ub = *reinterpret_cast<const uint4*>(b + row * b_row + column);
        const T* tb = reinterpret_cast<const T*>(&ub);
#pragma unroll
        for (int e = 0; e < 8; ++e) ts[e] = Cvt<T>::t(Cvt<T>::f(ta[e]) + Cvt<T>::f(tb[e]));
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
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
  TORCH_CHECK(a.is_cuda() && a.dim() == 2 && a.is_contiguous(),
              "add_layer_norm: a must be contiguous [rows, H] on a GPU");
  TORCH_CHECK(!b.defined() || (b.is_contiguous() && b.scalar_type() == a.scalar_type() &&
                               (b.sizes() == a.sizes() || (b.dim() == 1 && b.size(0) == a.size(1)))),
              "add_layer_norm: b must be like a, or [H], in a's dtype");
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
    const T* pb = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    const std::int64_t b_row = b.defined() && b.dim() == 2 ? width : 0;
    const T* pw = static_cast<const T*>(weight.data_ptr());
    const T* pbias = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* po = static_cast<T*>(out.data_ptr());
    T* ps = sum.defined() ? static_cast<T*>(sum.data_ptr()) : nullptr;
    const float e = static_cast<float>(eps);
    const int w = static_cast<int>(width);
    if (chunks <= 1)
      add_layer_norm_kernel<T, 1><<<blocks, 128, 0, stream>>>(pa, pb, b_row, pw, pbias, po, ps, rows, w, e);
    else if (chunks <= 2)
      add_layer_norm_kernel<T, 2><<<blocks, 128, 0, stream>>>(pa, pb, b_row, pw, pbias, po, ps, rows, w, e);
    else if (chunks <= 4)
      add_layer_norm_kernel<T, 4><<<blocks, 128, 0, stream>>>(pa, pb, b_row, pw, pbias, po, ps, rows, w, e);
    else
      add_layer_norm_kernel<T, 8><<<blocks, 128, 0, stream>>>(pa, pb, b_row, pw, pbias, po, ps, rows, w, e);
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

const CudaKernels kKernels{&packed_attention, &add_layer_norm, &rotate, &gated};

}  // namespace
}  // namespace flowline::models::detail

extern "C" __attribute__((visibility("default"))) const flowline::models::detail::CudaKernels*
flowline_models_cuda_kernels() {
  return &flowline::models::detail::kKernels;
}
