// libflowline_cuda.so: the CUDA calls of flowline's core (waiting on streams asleep, PCI bus ids, memory
// info, the allocator's memory fraction), loaded by src/core/cuda_loading.cpp only when a flow names a GPU.
#include "cuda_api.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace {

void wait_for_stream(const c10::Stream& stream) {
  at::cuda::CUDAEvent done(cudaEventDisableTiming | cudaEventBlockingSync);
  done.record(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream));
  done.synchronize();
}

bool pci_bus_id(int device, char* out, int size) {
  if (cudaDeviceGetPCIBusId(out, size, device) == cudaSuccess) return true;
  cudaGetLastError();  // clear the error state
  return false;
}

bool memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  if (cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

void set_memory_fraction(int device, double fraction) {
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
}

const flowline::detail::CudaApi kApi{flowline::detail::kCudaApiVersion, &wait_for_stream, &pci_bus_id, &memory_info,
                                     &set_memory_fraction};

}  // namespace

extern "C" __attribute__((visibility("default"))) const flowline::detail::CudaApi* flowline_cuda_api() { return &kApi; }
