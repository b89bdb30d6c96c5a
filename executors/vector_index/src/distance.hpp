// Distance kernels of the hnsw backend, chosen once at run time for the CPU they run on: AVX-512, AVX2 with
// FMA, or portable C++. The file is built for any x86-64 (each kernel carries its own target attribute), so
// one binary runs everywhere at the best speed the CPU offers, with no SIGILL on an older one.
//
// The signature is hnswlib's DISTFUNC: (a, b, param) with `param` pointing at the dimension (a size_t).
// Callers: hnsw_backend.cpp (the graph's distance, and the exact scan of few allowed rows). Thread-safe:
// the kernels are pure functions; the choice is made once, on first use.
#pragma once

#include <cstddef>

namespace flowline::vector_index {

using DistanceFunction = float (*)(const void* a, const void* b, const void* dim);

struct DistanceKernels {
  DistanceFunction inner_product_distance;  // 1 - a.b (hnswlib's InnerProductSpace)
  DistanceFunction l2_squared;              // |a - b|^2 (hnswlib's L2Space)
  const char* isa;                          // "avx512", "avx2" or "portable", for where() and logs
};

// The kernels for this CPU.
const DistanceKernels& distance_kernels();

// The portable kernels (the tests compare the chosen ones against them).
const DistanceKernels& portable_distance_kernels();

}  // namespace flowline::vector_index
