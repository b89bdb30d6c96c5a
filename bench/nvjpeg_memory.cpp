// Where nvJPEG 13's device memory comes from: the GPU's free memory (cudaMemGetInfo) around each step of one
// handle's life — create, state, batched decodes of N generated 500x375 JPEGs, destroy — with the allocator
// hooks flowline can give it (none: cudaMalloc; v1: nvjpegCreateEx's nvjpegDevAllocator_t, as the ClipEncoder
// gives LibTorch's; v2: nvjpegCreateExV2's stream-ordered nvjpegDevAllocatorV2_t), each hook counting its calls
// and bytes, device and pinned. One configuration a process, so that every figure starts from the same state.
//
//   build/bench/nvjpeg_memory --library libnvjpeg.so.13 --backend hardware|default|gpu_hybrid
//       --allocator none|v1|v2 [--batch 256] [--repeats 3]
//
// The nvJPEG types are declared here as src/images/nvjpeg.cpp declares them (nvjpeg.h 13.0.4).
#include "jpeg_writer.hpp"

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct NvImage {
  unsigned char* channel[4];
  std::size_t pitch[4];
};
struct DevV1 {
  int (*dev_malloc)(void**, std::size_t);
  int (*dev_free)(void*);
};
struct PinnedV1 {
  int (*pinned_malloc)(void**, std::size_t, unsigned);
  int (*pinned_free)(void*);
};
struct DevV2 {
  int (*dev_malloc)(void*, void**, std::size_t, cudaStream_t);
  int (*dev_free)(void*, void*, std::size_t, cudaStream_t);
  void* ctx;
};
struct PinnedV2 {
  int (*pinned_malloc)(void*, void**, std::size_t, cudaStream_t);
  int (*pinned_free)(void*, void*, std::size_t, cudaStream_t);
  void* ctx;
};

struct Counts {
  long device_calls = 0, device_frees = 0, pinned_calls = 0, pinned_frees = 0;
  std::size_t device_bytes = 0, pinned_bytes = 0;
};
Counts counts;

int v1_malloc(void** p, std::size_t n) {
  ++counts.device_calls;
  counts.device_bytes += n;
  return cudaMalloc(p, n) == cudaSuccess ? 0 : 1;
}
int v1_free(void* p) {
  ++counts.device_frees;
  return cudaFree(p) == cudaSuccess ? 0 : 1;
}
int v1_pinned_malloc(void** p, std::size_t n, unsigned flags) {
  ++counts.pinned_calls;
  counts.pinned_bytes += n;
  return cudaHostAlloc(p, n, flags) == cudaSuccess ? 0 : 1;
}
int v1_pinned_free(void* p) {
  ++counts.pinned_frees;
  return cudaFreeHost(p) == cudaSuccess ? 0 : 1;
}
int v2_malloc(void*, void** p, std::size_t n, cudaStream_t stream) {
  ++counts.device_calls;
  counts.device_bytes += n;
  return cudaMallocAsync(p, n, stream) == cudaSuccess ? 0 : 1;
}
int v2_free(void*, void* p, std::size_t, cudaStream_t stream) {
  ++counts.device_frees;
  return cudaFreeAsync(p, stream) == cudaSuccess ? 0 : 1;
}
int v2_pinned_malloc(void*, void** p, std::size_t n, cudaStream_t) {
  ++counts.pinned_calls;
  counts.pinned_bytes += n;
  return cudaHostAlloc(p, n, 0) == cudaSuccess ? 0 : 1;
}
int v2_pinned_free(void*, void* p, std::size_t, cudaStream_t) {
  ++counts.pinned_frees;
  return cudaFreeHost(p) == cudaSuccess ? 0 : 1;
}

double used_mib() {
  cudaDeviceSynchronize();
  std::size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return static_cast<double>(total - free) / (1024.0 * 1024.0);
}

template <typename F>
F bind(void* library, const char* name) {
  auto* f = reinterpret_cast<F>(dlsym(library, name));
  if (f == nullptr) throw std::runtime_error(std::string("libnvjpeg has no ") + name);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string library_path = "libnvjpeg.so.13", backend_name = "hardware", allocator = "none";
  int batch = 256, repeats = 3;
  CLI::App app{"nvJPEG's device memory by step and allocator hook"};
  app.add_option("--library", library_path)->capture_default_str();
  app.add_option("--backend", backend_name)->check(CLI::IsMember({"default", "hybrid", "gpu_hybrid", "hardware"}));
  app.add_option("--allocator", allocator)->check(CLI::IsMember({"none", "v1", "v2"}));
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int backend = backend_name == "default"      ? 0
                      : backend_name == "hybrid"     ? 1
                      : backend_name == "gpu_hybrid" ? 2
                                                     : 3;

  void* library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "cannot open %s: %s\n", library_path.c_str(), dlerror());
    return 1;
  }
  using Create = int (*)(int, void*, void*, unsigned, void**);
  const auto create_ex = bind<Create>(library, "nvjpegCreateEx");
  const auto create_ex_v2 = bind<Create>(library, "nvjpegCreateExV2");
  const auto destroy = bind<int (*)(void*)>(library, "nvjpegDestroy");
  const auto state_create = bind<int (*)(void*, void**)>(library, "nvjpegJpegStateCreate");
  const auto state_destroy = bind<int (*)(void*)>(library, "nvjpegJpegStateDestroy");
  const auto initialize = bind<int (*)(void*, void*, int, int, int)>(library, "nvjpegDecodeBatchedInitialize");
  const auto decode_batched =
      bind<int (*)(void*, void*, const unsigned char* const*, const std::size_t*, NvImage*, cudaStream_t)>(
          library, "nvjpegDecodeBatched");

  // The inputs and the output planes first, so that the figures below are nvJPEG's alone.
  cudaFree(nullptr);  // the context
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  std::vector<std::vector<std::uint8_t>> jpegs;
  std::size_t jpeg_bytes = 0;
  for (int i = 0; i < batch; ++i) {
    jpegs.push_back(flowline::testing::make_test_jpeg(
        {flowline::testing::JpegKind::rgb420, 500, 375, 90, static_cast<unsigned>(i + 1)}));
    jpeg_bytes += jpegs.back().size();
  }
  std::vector<const unsigned char*> data;
  std::vector<std::size_t> lengths;
  for (const auto& j : jpegs) {
    data.push_back(j.data());
    lengths.push_back(j.size());
  }
  // Planar YCbCr 4:2:0 of 500x375: Y 500x375, Cb and Cr 250x188.
  const std::size_t plane_bytes[3] = {500 * 375, 250 * 188, 250 * 188};
  std::vector<NvImage> outputs(static_cast<std::size_t>(batch));
  std::uint8_t* planes = nullptr;
  const std::size_t per_image = plane_bytes[0] + plane_bytes[1] + plane_bytes[2];
  cudaMalloc(reinterpret_cast<void**>(&planes), per_image * static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    std::uint8_t* at = planes + per_image * static_cast<std::size_t>(i);
    outputs[i] = {{at, at + plane_bytes[0], at + plane_bytes[0] + plane_bytes[1], nullptr}, {500, 250, 250, 0}};
  }
  const double base = used_mib();
  std::printf("nvjpeg_memory: backend %s, allocator %s, batch %d JPEGs of 500x375 (%.1f KB on average)\n",
              backend_name.c_str(), allocator.c_str(), batch, jpeg_bytes / 1024.0 / batch);
  std::printf("  before nvJPEG: %.0f MiB used on the device (context, inputs' planes)\n", base);

  DevV1 dev1{v1_malloc, v1_free};
  PinnedV1 pin1{v1_pinned_malloc, v1_pinned_free};
  DevV2 dev2{v2_malloc, v2_free, nullptr};
  PinnedV2 pin2{v2_pinned_malloc, v2_pinned_free, nullptr};
  void* handle = nullptr;
  int status = allocator == "v2"   ? create_ex_v2(backend, &dev2, &pin2, 1u << 2, &handle)
               : allocator == "v1" ? create_ex(backend, &dev1, &pin1, 1u << 2, &handle)
                                   : create_ex(backend, nullptr, nullptr, 1u << 2, &handle);
  if (status != 0) {
    std::fprintf(stderr, "nvjpegCreateEx%s failed: status %d\n", allocator == "v2" ? "V2" : "", status);
    return 1;
  }
  auto step = [&](const std::string& what) {
    std::printf(
        "  %-34s %8.1f MiB more than before nvJPEG; hooks: device %ld allocations (%.1f MiB), %ld "
        "releases; pinned %ld (%.1f MiB), %ld releases\n",
        what.c_str(), used_mib() - base, counts.device_calls, counts.device_bytes / 1048576.0, counts.device_frees,
        counts.pinned_calls, counts.pinned_bytes / 1048576.0, counts.pinned_frees);
    std::fflush(stdout);
  };
  step("handle made");
  void* state = nullptr;
  if (state_create(handle, &state) != 0) {
    std::fprintf(stderr, "nvjpegJpegStateCreate failed\n");
    return 1;
  }
  step("state made");
  for (const int size : {batch, batch / 4}) {
    if (initialize(handle, state, size, 1, 1) != 0) {
      std::fprintf(stderr, "nvjpegDecodeBatchedInitialize(%d) failed\n", size);
      return 1;
    }
    step("initialised for " + std::to_string(size));
    for (int r = 0; r < repeats; ++r) {
      status = decode_batched(handle, state, data.data(), lengths.data(), outputs.data(), stream);
      cudaStreamSynchronize(stream);
      if (status != 0) std::printf("  decode of %d failed: status %d\n", size, status);
      step("decoded " + std::to_string(size) + " (round " + std::to_string(r + 1) + ")");
    }
  }
  state_destroy(state);
  step("state destroyed");
  destroy(handle);
  step("handle destroyed");
  cudaFree(planes);
  return 0;
}
