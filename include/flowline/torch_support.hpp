// flowline/torch_support.hpp — what executors that run LibTorch models share: dtype names, weights
// shared by the replicas on one device, and copies back to the host through a reused pinned buffer.
//
// Used by SentenceEncoder and TorchModule, and meant for plugins of the same kind. parse_dtype(),
// executor_device(), replica_stream() and shared_per_device() are thread-safe; a HostStaging belongs to one
// replica (one thread, one stream). Nothing here links CUDA: streams are LibTorch's device-generic
// c10::Stream (use c10::StreamGuard to make one current), and the CUDA calls go through flowline's CUDA
// part, loaded when a flow names a GPU (flowline/device.hpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

namespace flowline {

// "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16". Throws flowline::Error naming parameter 'dtype'.
c10::ScalarType parse_dtype(const std::string& name);

// The device of a model executor: its `device` parameter when set (cpu, cuda, cuda:N or auto), else the one
// the flow gave the replica. Makes it the calling thread's current device. Call from the constructor.
c10::Device executor_device(const std::string& device_parameter, const c10::Device& flow_device);

// A stream of its own for a replica on a GPU, from LibTorch's pool (replicas on one GPU overlap through
// them); nullopt for the CPU.
std::optional<c10::Stream> replica_stream(const c10::Device& device);

// The GPU part of an executor library, loaded on demand so the executor on the CPU maps no CUDA library:
// `file` (e.g. "libflowline_models_cuda.so") from the folder of the library that holds `code`
// (the address of any function of the calling library), after load_cuda(). Returns the address of its
// C-linkage function `entry`. Loaded once per process. Throws flowline::Error naming what is missing.
void* load_gpu_part(const void* code, const std::string& file, const char* entry);

// One object per (file, device, dtype) for as long as someone holds it: the first caller loads it with
// `load` (under a lock, so concurrent replicas load once), later callers get the same object. Entries
// of each T are kept apart.
template <class T>
std::shared_ptr<const T> shared_per_device(const std::filesystem::path& file, c10::Device device, c10::ScalarType dtype,
                                           const std::function<std::shared_ptr<const T>()>& load) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::string, int>, std::weak_ptr<const T>> cache;
  const auto key =
      std::make_tuple(std::filesystem::weakly_canonical(file).string(), device.str(), static_cast<int>(dtype));
  std::lock_guard lock(mutex);
  if (auto existing = cache[key].lock()) return existing;
  std::shared_ptr<const T> loaded = load();
  cache[key] = loaded;
  return loaded;
}

// Waits until the work queued on `stream` so far has finished, with the calling thread asleep rather than
// spinning: CUDA's default is to spin a core per waiting thread, and a flow's GPU replicas spend much of
// their time waiting while tokenizing, launching and posting threads need those cores.
// A CPU stream returns at once.
void wait_for_stream(const c10::Stream& stream);

// `host` (a CPU tensor) on `device`, its copy queued on the calling thread's current stream rather than waited
// for: through pinned memory from LibTorch's caching host allocator, which keeps the buffer until the copy has
// run. A plain `.to(cuda)` from ordinary host memory waits for the whole stream, so a handler that calls it
// between two passes cannot decode or tokenize the next slice while the GPU runs the last one. Not a CUDA
// device, or already there: `host.to(device)`. A `host` already pinned is copied from directly: the caller does not
// write to it until the copy has run.
at::Tensor to_device_queued(const at::Tensor& host, const c10::Device& device);

// A host buffer kept across calls, pinned when made for a GPU, grown when a larger view is asked for, so
// no call pays for pinning memory (cudaHostAlloc is slow and takes a driver-wide lock). The caller makes
// sure copies from an earlier view have completed before asking for another.
class HostStaging {
 public:
  explicit HostStaging(bool pinned) : pinned_(pinned) {}

  // A view of the buffer with this shape and dtype.
  at::Tensor view(at::IntArrayRef shape, at::ScalarType dtype);
  // `t` in ordinary host memory. From a GPU: one asynchronous copy into the buffer on `stream`, a wait
  // on that stream only (asleep, see wait_for_stream), then a copy out (documents never hold pinned
  // memory). A CPU tensor is returned as it is.
  at::Tensor to_host(const at::Tensor& t, const c10::Stream& stream);

 private:
  bool pinned_;
  at::Tensor buffer_;
};

}  // namespace flowline
