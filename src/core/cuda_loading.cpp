// Loading CUDA on demand: LibTorch's CUDA library (which registers LibTorch's CUDA backend as it loads)
// and flowline's own CUDA part, the first time a flow names a GPU. A CPU-only process maps neither.
// load_cuda() (device.cpp) and load_gpu_part() (torch_support.cpp) are the public faces of this.
#include "cuda_loading.hpp"

#include "shared_library.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <typeinfo>

namespace flowline {
namespace {

struct CudaLoad {
  const detail::CudaApi* api = nullptr;
  std::string problem;
};

CudaLoad load() {
  const char* override_dir = std::getenv("FLOWLINE_CUDA_LIBRARY_DIR");
  const std::filesystem::path torch_dir =
      override_dir && *override_dir ? std::filesystem::path(override_dir)
                                    : detail::library_folder(reinterpret_cast<const void*>(&at::globalContext));
  const std::filesystem::path torch_cuda = torch_dir / "libtorch_cuda.so";
  if (!std::filesystem::exists(torch_cuda)) {
    return {nullptr, fmt::format("LibTorch's CUDA library; none in {}", torch_dir.string())};
  }
  // RTLD_GLOBAL: LibTorch's CUDA code and flowline's CUDA parts resolve c10_cuda's symbols through it.
  if (dlopen(torch_cuda.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    return {nullptr, fmt::format("LibTorch's CUDA library, which does not load from {}: {}", torch_cuda.string(),
                                 detail::dl_error_text())};
  }
  // LibTorch looks its CUDA backend up once per process: if something asked before the library was
  // loaded, CUDA stays off in this process however it is loaded later.
  if (typeid(at::detail::getCUDAHooks()) == typeid(at::CUDAHooksInterface)) {
    return {nullptr,
            "LibTorch's CUDA library loaded before LibTorch first looked for its CUDA backend; this process "
            "looked too early (call flowline::load_cuda() before any CUDA use)"};
  }
  const std::filesystem::path part =
      detail::library_folder(reinterpret_cast<const void*>(&detail::cuda_api)) / "libflowline_cuda.so";
  if (!std::filesystem::exists(part)) {
    return {nullptr, fmt::format("flowline's CUDA part; none in {} (flowline was built without CUDA)",
                                 part.parent_path().string())};
  }
  std::string error;
  using Entry = const detail::CudaApi* (*)();
  auto entry = reinterpret_cast<Entry>(detail::open_entry(part, "flowline_cuda_api", RTLD_LOCAL, error));
  if (entry == nullptr) {
    return {nullptr, fmt::format("flowline's CUDA part, which does not load from {}: {}", part.string(), error)};
  }
  const detail::CudaApi* api = entry();
  if (api == nullptr || api->version != detail::kCudaApiVersion) {
    return {nullptr, fmt::format("flowline's CUDA part; {} is not the one built with this flowline", part.string())};
  }
  spdlog::debug("loaded CUDA support: {} and {}", torch_cuda.string(), part.string());
  return {api, {}};
}

const CudaLoad& loaded() {
  static std::once_flag once;
  static CudaLoad result;
  std::call_once(once, [] { result = load(); });
  return result;
}

}  // namespace

namespace detail {

const CudaApi* cuda_api() { return loaded().api; }

const std::string& cuda_problem() { return loaded().problem; }

}  // namespace detail
}  // namespace flowline
