// Device names (syntax, existence), resolution to c10 devices, and the allocator's and NVML's memory figures.
#include "flowline/device.hpp"
#include "flowline/error.hpp"

#include "cuda_loading.hpp"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <dlfcn.h>
#include <sys/resource.h>

#include <array>
#include <charconv>
#include <filesystem>
#include <mutex>

namespace flowline {

std::optional<std::string> load_cuda() {
  if (detail::cuda_api()) return std::nullopt;
  return detail::cuda_problem();
}

int cuda_device_count() {
  if (load_cuda()) return 0;
  try {
    return static_cast<int>(at::detail::getCUDAHooks().deviceCount());
  } catch (const std::exception&) {
    return 0;
  }
}

int auto_gpu_count() {
  std::error_code ec;
  const bool driver = std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/dxg", ec);
  return driver ? cuda_device_count() : 0;
}

std::vector<std::string> available_devices() {
  std::vector<std::string> out{"cpu"};
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) out.push_back(fmt::format("cuda:{}", i));
  return out;
}

std::optional<std::string> check_device_syntax(std::string_view device) {
  if (device == "cpu" || device == "cuda" || device == "auto") return std::nullopt;
  if (device.substr(0, 5) == "cuda:") {
    const auto digits = device.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0 && !digits.empty()) return std::nullopt;
  }
  return fmt::format("invalid device '{}': expected cpu, cuda, cuda:N or auto", device);
}

std::optional<std::string> check_device(std::string_view device) {
  if (auto problem = check_device_syntax(device)) return problem;
  if (device.substr(0, 4) != "cuda") return std::nullopt;
  if (auto missing = load_cuda()) {
    return fmt::format("device '{}' needs {}: set up with GPU support (scripts/setup.sh --gpu), or use cpu", device,
                       *missing);
  }
  const int index = device == "cuda" ? 0 : std::stoi(std::string(device.substr(5)));
  if (index < cuda_device_count()) return std::nullopt;
  return fmt::format("device '{}' does not exist; available: {}", device, fmt::join(available_devices(), ", "));
}

c10::Device resolve_device(std::string_view name) {
  if (auto problem = check_device(name)) throw Error(*problem);
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "auto") {
    const int count = auto_gpu_count();
    if (count > 0) {
      spdlog::info("device 'auto': using cuda:0 ({} GPU{} visible)", count, count == 1 ? "" : "s");
      return c10::Device(c10::kCUDA, 0);
    }
    spdlog::info("device 'auto': no GPU visible, using cpu");
    return c10::Device(c10::kCPU);
  }
  const int index = name == "cuda" ? 0 : std::stoi(std::string(name.substr(5)));
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void set_thread_device(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(device);
}

std::optional<DeviceMemory> device_memory(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  // The caching allocator exists once CUDA is initialised; before that its stats cannot be read.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  const auto stats = c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
  const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  DeviceMemory m;
  m.allocated = stats.allocated_bytes[all].current;
  m.reserved = stats.reserved_bytes[all].current;
  m.peak_allocated = stats.allocated_bytes[all].peak;
  m.peak_reserved = stats.reserved_bytes[all].peak;
  return m;
}

void reset_device_peaks(const c10::Device& device) {
  if (device.is_cuda()) c10::getDeviceAllocator(c10::kCUDA)->resetPeakStats(device.index());
}

void release_cached_memory() {
  if (detail::cuda_api()) c10::getDeviceAllocator(c10::kCUDA)->emptyCache();
}

std::optional<std::pair<std::int64_t, std::int64_t>> device_free_total(const c10::Device& device) {
  const detail::CudaApi* cuda = device.is_cuda() ? detail::cuda_api() : nullptr;
  std::size_t free_bytes = 0, total_bytes = 0;
  if (!cuda || !cuda->memory_info(device.index() < 0 ? 0 : device.index(), &free_bytes, &total_bytes)) {
    return std::nullopt;
  }
  return std::make_pair(static_cast<std::int64_t>(free_bytes), static_cast<std::int64_t>(total_bytes));
}

void limit_device_memory(const c10::Device& device, double fraction) {
  const detail::CudaApi* cuda = device.is_cuda() ? detail::cuda_api() : nullptr;
  if (cuda) cuda->set_memory_fraction(device.index() < 0 ? 0 : device.index(), fraction);
}

namespace {

// The few NVML entry points flowline reads, resolved from libnvidia-ml.so.1 (part of the GPU driver) at
// run time. Their C signatures are NVML's public, versioned ABI (nvml.h).
class Nvml {
 public:
  static Nvml& instance() {
    static Nvml nvml;
    return nvml;
  }
  bool ok() const noexcept { return ok_; }

  std::optional<NvmlMemory> memory(int cuda_index) {
    if (!ok_) return std::nullopt;
    void* handle = device_handle(cuda_index);
    if (!handle) return std::nullopt;
    struct {
      unsigned long long total, free, used;
    } info{};
    if (get_memory_info_(handle, &info) != 0) return std::nullopt;
    return NvmlMemory{static_cast<std::int64_t>(info.total), static_cast<std::int64_t>(info.used),
                      static_cast<std::int64_t>(info.free)};
  }

 private:
  using InitFn = int (*)();
  using HandleByBusFn = int (*)(const char*, void**);
  using MemoryInfoFn = int (*)(void*, void*);

  Nvml() {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library_) return;
    auto init = reinterpret_cast<InitFn>(dlsym(library_, "nvmlInit_v2"));
    handle_by_bus_ = reinterpret_cast<HandleByBusFn>(dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_memory_info_ = reinterpret_cast<MemoryInfoFn>(dlsym(library_, "nvmlDeviceGetMemoryInfo"));
    ok_ = init && handle_by_bus_ && get_memory_info_ && init() == 0;
    if (!ok_) spdlog::debug("NVML is present but could not be initialised; GPU-wide memory figures are not available");
  }

  // NVML numbers GPUs by PCI order, CUDA by its own order and CUDA_VISIBLE_DEVICES: match them by bus id.
  void* device_handle(int cuda_index) {
    std::lock_guard lock(mutex_);
    if (cuda_index < 0 || cuda_index >= static_cast<int>(handles_.size())) return nullptr;
    auto& slot = handles_[static_cast<std::size_t>(cuda_index)];
    if (!slot.resolved) {
      slot.resolved = true;
      std::array<char, 32> bus{};
      const detail::CudaApi* cuda = detail::cuda_api();
      if (cuda && cuda->pci_bus_id(cuda_index, bus.data(), static_cast<int>(bus.size()))) {
        if (handle_by_bus_(bus.data(), &slot.handle) != 0) slot.handle = nullptr;
      }
    }
    return slot.handle;
  }

  struct Slot {
    bool resolved = false;
    void* handle = nullptr;
  };
  void* library_ = nullptr;
  bool ok_ = false;
  HandleByBusFn handle_by_bus_ = nullptr;
  MemoryInfoFn get_memory_info_ = nullptr;
  std::mutex mutex_;
  std::array<Slot, 64> handles_{};
};

}  // namespace

std::optional<NvmlMemory> nvml_memory(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  return Nvml::instance().memory(device.index() < 0 ? 0 : device.index());
}

double host_peak_rss_mb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace flowline
