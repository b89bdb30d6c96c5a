// flowline/device.hpp — naming and resolving the devices executors run on.
//
// Device names in flows: "cpu", "cuda" (the first GPU), "cuda:N", "auto" (the first GPU when there is one,
// else the CPU). Functions here are thread-safe.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

// Number of CUDA devices this process sees (0 without a GPU or without CUDA support).
int cuda_device_count();

// Names of the devices this process can use: "cpu", "cuda:0", "cuda:1", ...
std::vector<std::string> available_devices();

// Parses "cpu", "cuda", "cuda:N" or "auto". Returns an error text or nullopt.
std::optional<std::string> check_device_syntax(std::string_view device);

// check_device_syntax(), then whether a cuda device exists here. Returns an error text naming the device
// and listing the available ones, or nullopt. Used by flow validation and resolve_device().
std::optional<std::string> check_device(std::string_view device);

// Resolves a device name. Throws flowline::Error for bad syntax or a device that does not exist, naming
// the device and listing the available ones. "auto" is logged with what it picked.
c10::Device resolve_device(std::string_view name);

// Makes `device` the current device of the calling thread (a no-op for the CPU).
void set_thread_device(const c10::Device& device);

// The CUDA caching allocator's figures for a GPU device, in bytes; nullopt for the CPU.
struct DeviceMemory {
  std::int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};
std::optional<DeviceMemory> device_memory(const c10::Device& device);
// Restarts the allocator's peak figures of a GPU device (a no-op for the CPU).
void reset_device_peaks(const c10::Device& device);

// The GPU's own memory figures as NVML reports them, in bytes: what every process together uses, so
// they include the CUDA contexts and memory allocated outside the caching allocator. nullopt for the
// CPU or when NVML is unavailable (no driver). NVML is loaded on first use with dlopen, so binaries run
// on machines without a GPU driver. Reading never creates a CUDA context.
struct NvmlMemory {
  std::int64_t total = 0, used = 0, free = 0;
};
std::optional<NvmlMemory> nvml_memory(const c10::Device& device);

// Peak resident memory of this process so far, in MB (getrusage).
double host_peak_rss_mb();

}  // namespace flowline
