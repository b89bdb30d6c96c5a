// cuda_api.hpp — what flowline's core needs from CUDA beyond LibTorch's device-generic interfaces (c10
// streams, guards and allocators, which work for any device once LibTorch's CUDA library is loaded).
//
// libflowline_cuda.so implements it and exports flowline_cuda_api(). The core never links that library:
// src/core/cuda_loading.cpp loads LibTorch's CUDA library and then this one with dlopen, the first time a
// flow names a GPU, and calls through the table. Every function is thread-safe; the table lives as long
// as the process.
#pragma once

#include <c10/core/Stream.h>

#include <cstddef>

namespace flowline::detail {

inline constexpr int kCudaApiVersion = 1;

struct CudaApi {
  int version = kCudaApiVersion;
  // Waits until the work queued on a CUDA stream so far has finished, the calling thread asleep
  // (an event with blocking sync) instead of spinning a core.
  void (*wait_for_stream)(const c10::Stream& stream) = nullptr;
  // The GPU's PCI bus id ("0000:3b:00.0"), to match CUDA's numbering with NVML's. False if unknown.
  bool (*pci_bus_id)(int device, char* out, int size) = nullptr;
  // Free and total memory of a GPU as the driver reports them (cudaMemGetInfo). False on error.
  bool (*memory_info)(int device, std::size_t* free_bytes, std::size_t* total_bytes) = nullptr;
  // Caps the caching allocator's share of a GPU's memory in this process (0 < fraction <= 1).
  void (*set_memory_fraction)(int device, double fraction) = nullptr;
};

}  // namespace flowline::detail

// The entry point libflowline_cuda.so exports (C linkage, so dlsym finds it by this name).
extern "C" const flowline::detail::CudaApi* flowline_cuda_api();
