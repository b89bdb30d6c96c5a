// Distance kernels (distance.hpp). hnswlib 0.6.2's own kernels add into one register per step, so each step
// waits for the last (a chain of dependent adds); these keep four independent accumulators with fused
// multiply-adds, and read the tail with a mask (AVX-512) or one element at a time.
#include "distance.hpp"

#include <cstdint>

#ifdef __x86_64__  // GCC and Clang, the compilers flowline builds with (target attributes, __builtin_cpu_supports)
#define FLOWLINE_DISTANCE_X86 1
#include <immintrin.h>
#else
#define FLOWLINE_DISTANCE_X86 0
#endif

namespace flowline::vector_index {

namespace {

std::size_t dim_of(const void* param) { return *static_cast<const std::size_t*>(param); }

float dot_portable(const float* a, const float* b, std::size_t n) {
  float s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float l2_portable(const float* a, const float* b, std::size_t n) {
  float s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const float d = a[i + j] - b[i + j];
      s[j] += d * d;
    }
  }
  for (; i < n; ++i) {
    const float d = a[i] - b[i];
    s[0] += d * d;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float ip_distance_portable(const void* a, const void* b, const void* param) {
  return 1.0f - dot_portable(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

float l2_distance_portable(const void* a, const void* b, const void* param) {
  return l2_portable(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

#if FLOWLINE_DISTANCE_X86

// ---- AVX-512: 64 floats a step in four accumulators, then 16 at a time, the tail under a mask.

__attribute__((target("avx512f"))) float dot_avx512(const float* a, const float* b, std::size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
  }
  for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

__attribute__((target("avx512f"))) float l2_avx512(const float* a, const float* b, std::size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    const __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
    const __m512 d3 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
    s0 = _mm512_fmadd_ps(d0, d0, s0);
    s1 = _mm512_fmadd_ps(d1, d1, s1);
    s2 = _mm512_fmadd_ps(d2, d2, s2);
    s3 = _mm512_fmadd_ps(d3, d3, s3);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    s0 = _mm512_fmadd_ps(d, d, s0);
  }
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i));
    s1 = _mm512_fmadd_ps(d, d, s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

__attribute__((target("avx512f"))) float ip_distance_avx512(const void* a, const void* b, const void* param) {
  return 1.0f - dot_avx512(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

__attribute__((target("avx512f"))) float l2_distance_avx512(const void* a, const void* b, const void* param) {
  return l2_avx512(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

// ---- AVX2 + FMA: 32 floats a step in four accumulators, then 8 at a time, the tail one by one.

__attribute__((target("avx2,fma"))) float sum_avx2(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, std::size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float sum = sum_avx2(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) float l2_avx2(const float* a, const float* b, std::size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    const __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    const __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
    s0 = _mm256_fmadd_ps(d0, d0, s0);
    s1 = _mm256_fmadd_ps(d1, d1, s1);
    s2 = _mm256_fmadd_ps(d2, d2, s2);
    s3 = _mm256_fmadd_ps(d3, d3, s3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    s0 = _mm256_fmadd_ps(d, d, s0);
  }
  float sum = sum_avx2(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) {
    const float d = a[i] - b[i];
    sum += d * d;
  }
  return sum;
}

__attribute__((target("avx2,fma"))) float ip_distance_avx2(const void* a, const void* b, const void* param) {
  return 1.0f - dot_avx2(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

__attribute__((target("avx2,fma"))) float l2_distance_avx2(const void* a, const void* b, const void* param) {
  return l2_avx2(static_cast<const float*>(a), static_cast<const float*>(b), dim_of(param));
}

#endif

const DistanceKernels kPortable{ip_distance_portable, l2_distance_portable, "portable"};

DistanceKernels choose() {
#if FLOWLINE_DISTANCE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {ip_distance_avx512, l2_distance_avx512, "avx512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {ip_distance_avx2, l2_distance_avx2, "avx2"};
  }
#endif
  return kPortable;
}

}  // namespace

const DistanceKernels& distance_kernels() {
  static const DistanceKernels chosen = choose();
  return chosen;
}

const DistanceKernels& portable_distance_kernels() { return kPortable; }

}  // namespace flowline::vector_index
