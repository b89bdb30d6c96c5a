// flowline/device.hpp — naming and resolving the devices executors run on.
//
// Device names in flows: "cpu", "cuda" (the first GPU), "cuda:N", "auto" (the first GPU when there is one,
// else the CPU). Functions here are thread-safe.
//
// CUDA is loaded on demand: flowline::core links LibTorch's CPU part only. The first function here that
// needs CUDA (a cuda or auto device, a device count) calls load_cuda(), which loads LibTorch's CUDA library
// from LibTorch's own folder (or FLOWLINE_CUDA_LIBRARY_DIR) and flowline's CUDA part (libflowline_cuda.so,
// beside libflowline.so). A flow on the CPU alone maps no CUDA library. LibTorch looks for its CUDA backend
// once per process, so a program that uses CUDA tensors without a flow calls load_cuda() first.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowline {

// Loads CUDA support once per process (later calls return the first answer). nullopt when it is loaded
// (there may still be no GPU), else what is missing, naming the library and the folder searched.
std::optional<std::string> load_cuda();

// Number of CUDA devices this process sees (0 without a GPU or without CUDA support). Loads CUDA.
int cuda_device_count();

// The number of GPUs "auto" may pick from: 0 without an NVIDIA driver on this machine (no /dev/nvidiactl,
// nor WSL's /dev/dxg), without loading CUDA, so that `auto` on a CPU machine maps no CUDA library; else
// cuda_device_count().
int auto_gpu_count();

// Names of the devices this process can use: "cpu", "cuda:0", "cuda:1", ...
std::vector<std::string> available_devices();

// Parses "cpu", "cuda", "cuda:N" or "auto". Returns an error text or nullopt.
std::optional<std::string> check_device_syntax(std::string_view device);

// check_device_syntax(), then whether a cuda device exists here (loading CUDA). Returns an error text naming
// the device and listing the available ones, or what CUDA support is missing, or nullopt. Used by flow validation and
// resolve_device().
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
// Returns the caching allocator's unused cached blocks of every GPU to the driver (a no-op without CUDA).
void release_cached_memory();
// Free and total bytes of a GPU as the driver reports them; nullopt for the CPU or on error.
std::optional<std::pair<std::int64_t, std::int64_t>> device_free_total(const c10::Device& device);
// Caps this process's caching allocator at `fraction` (0 < fraction <= 1) of a GPU's memory; allocations
// beyond it fail as out of memory. A no-op for the CPU.
void limit_device_memory(const c10::Device& device, double fraction);

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
