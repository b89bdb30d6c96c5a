// The host side of flowline's CUDA kernels (cuda_kernels.hpp): loading them from libflowline_models_cuda.so,
// and the fused residual add + LayerNorm with its fallback for the CPU and float32.
#include "cuda_kernels.hpp"

#include "graphs.hpp"
#include "flowline/torch_support.hpp"

namespace flowline::models::detail {

namespace {
constexpr const char* kKernelsEntry = "flowline_models_cuda_kernels";
}

const CudaKernels& cuda_kernels() {
  using Entry = const CudaKernels* (*)();
  // Loaded once; a failure throws here and again at the next call (static initialisation is retried).
  static const CudaKernels* const kernels = reinterpret_cast<Entry>(
      load_gpu_part(reinterpret_cast<const void*>(&cuda_kernels), kGraphsLibrary, kKernelsEntry))();
  return *kernels;
}

bool fused_add_layer_norm_fits(const at::Tensor& a, const at::Tensor& weight) {
  const auto dtype = a.scalar_type();
  return a.is_cuda() && (dtype == at::kHalf || dtype == at::kBFloat16) && a.dim() == 2 && a.size(1) % 8 == 0 &&
         a.size(1) <= 2048 && weight.scalar_type() == dtype;
}

at::Tensor add_layer_norm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& weight, const at::Tensor& bias,
                          double eps) {
  if (fused_add_layer_norm_fits(a, weight)) {
    return cuda_kernels().add_layer_norm(a.contiguous(), b.contiguous(), weight, bias, eps, at::Tensor());
  }
  return at::layer_norm(a + b, {a.size(-1)}, weight, bias, eps);
}

}  // namespace flowline::models::detail
