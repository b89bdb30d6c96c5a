// flowline/torch_support.hpp — what executors that run LibTorch models share: dtype names, weights
// shared by the replicas on one device, and copies back to the host through a reused pinned buffer.
//
// Used by SentenceEncoder and TorchModule, and meant for plugins of the same kind. parse_dtype(),
// executor_device() and shared_per_device() are thread-safe; a HostStaging belongs to one replica (one thread, one
// stream).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAStream.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace flowline {

// "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16". Throws flowline::Error naming parameter 'dtype'.
c10::ScalarType parse_dtype(const std::string& name);

// The device of a model executor: its `device` parameter when set (cpu, cuda, cuda:N or auto), else the one
// the flow gave the replica. Makes it the calling thread's current device. Call from the constructor.
c10::Device executor_device(const std::string& device_parameter, const c10::Device& flow_device);

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
void wait_for_stream(c10::cuda::CUDAStream stream);

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
  at::Tensor to_host(const at::Tensor& t, c10::cuda::CUDAStream stream);

 private:
  bool pinned_;
  at::Tensor buffer_;
};

}  // namespace flowline
