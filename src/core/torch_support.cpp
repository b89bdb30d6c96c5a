// Helpers shared by LibTorch executors: dtype names, pinned host staging, waiting for a stream without spinning.
#include "flowline/torch_support.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"

#include "cuda_loading.hpp"
#include "shared_library.hpp"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

namespace flowline {

void* load_gpu_part(const void* code, const std::string& file, const char* entry) {
  if (auto missing = load_cuda()) throw Error(fmt::format("{} needs {}", file, *missing));
  const std::filesystem::path path = detail::library_folder(code) / file;
  std::string error;
  void* symbol = detail::open_entry(path, entry, RTLD_LOCAL, error);
  if (symbol == nullptr) {
    throw Error(
        fmt::format("GPU part {} does not load ({}); flowline may have been built without CUDA", path.string(), error));
  }
  return symbol;
}

c10::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return c10::kFloat;
  if (name == "fp16" || name == "float16") return c10::kHalf;
  if (name == "bf16" || name == "bfloat16") return c10::kBFloat16;
  throw Error(fmt::format("parameter 'dtype': expected fp32, fp16 or bf16, got '{}'", name));
}

c10::Device executor_device(const std::string& device_parameter, const c10::Device& flow_device) {
  const c10::Device device = device_parameter.empty() ? flow_device : resolve_device(device_parameter);
  set_thread_device(device);
  return device;
}

std::optional<c10::Stream> replica_stream(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

void wait_for_stream(const c10::Stream& stream) {
  if (stream.device_type() != c10::kCUDA) return;
  if (const detail::CudaApi* cuda = detail::cuda_api()) {
    cuda->wait_for_stream(stream);
  } else {
    stream.synchronize();
  }
}

at::Tensor to_device_queued(const at::Tensor& host, const c10::Device& device) {
  if (!device.is_cuda() || host.device() == device) return host.to(device);
  at::Tensor pinned = host;
  if (!host.is_pinned()) {
    pinned = at::empty(host.sizes(), host.options().pinned_memory(true));
    pinned.copy_(host);
  }
  return pinned.to(device, /*non_blocking=*/true);
}

at::Tensor HostStaging::view(at::IntArrayRef shape, at::ScalarType dtype) {
  const int64_t count = c10::multiply_integers(shape);
  if (!buffer_.defined() || buffer_.scalar_type() != dtype || buffer_.numel() < count) {
    const int64_t grown = buffer_.defined() && buffer_.scalar_type() == dtype ? 2 * buffer_.numel() : 0;
    buffer_ = at::empty({std::max(count, grown)}, at::TensorOptions().dtype(dtype).pinned_memory(pinned_));
  }
  return buffer_.narrow(0, 0, count).view(shape);
}

at::Tensor HostStaging::to_host(const at::Tensor& t, const c10::Stream& stream) {
  if (!t.is_cuda()) return t;
  at::Tensor staged = view(t.sizes(), t.scalar_type());
  staged.copy_(t, /*non_blocking=*/true);
  wait_for_stream(stream);
  return staged.clone();
}

}  // namespace flowline
