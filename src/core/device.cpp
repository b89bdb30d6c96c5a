#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <sys/resource.h>

#include <charconv>

namespace flowline {

int cuda_device_count() {
  try {
    return static_cast<int>(at::detail::getCUDAHooks().deviceCount());
  } catch (const std::exception&) {
    return 0;
  }
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

c10::Device resolve_device(std::string_view name) {
  if (auto problem = check_device_syntax(name)) throw Error(*problem);
  if (name == "cpu") return c10::Device(c10::kCPU);
  const int count = cuda_device_count();
  if (name == "auto") {
    if (count > 0) {
      spdlog::info("device 'auto': using cuda:0 ({} GPU{} visible)", count, count == 1 ? "" : "s");
      return c10::Device(c10::kCUDA, 0);
    }
    spdlog::info("device 'auto': no GPU visible, using cpu");
    return c10::Device(c10::kCPU);
  }
  const int index = name == "cuda" ? 0 : std::stoi(std::string(name.substr(5)));
  if (index >= count) {
    throw Error(fmt::format("device '{}' does not exist; available: {}", name, fmt::join(available_devices(), ", ")));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void set_thread_device(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(device);
}

std::optional<DeviceMemory> device_memory(const c10::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  // The caching allocator exists once CUDA is initialised; before that its stats cannot be read.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  DeviceMemory m;
  m.allocated = stats.allocated_bytes[all].current;
  m.reserved = stats.reserved_bytes[all].current;
  m.peak_allocated = stats.allocated_bytes[all].peak;
  m.peak_reserved = stats.reserved_bytes[all].peak;
  return m;
}

double host_peak_rss_mb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace flowline
