// Private to the ClipEncoder: decoding a slice's JPEGs on the replica's GPU with nvJPEG (flowline::images'
// src/images/nvjpeg.hpp) to planes, then to RGB with libjpeg-turbo's upsampling and colour conversion
// (src/images/jpeg_color.hpp), straight into device tensors; the rest stays with the CPU decoders (decode.hpp).
//
// One GpuJpegDecoder per replica, made in the replica's constructor and called only from the replica's
// thread (executors are never called concurrently). It owns its nvJPEG handle and two pinned staging buffers.
#pragma once

#include "flowline/images.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::images {
class NvjpegDecoder;
}

namespace flowline::clip_encoder {

// The gpu_decode parameter: auto (nvJPEG when the device is CUDA and libnvjpeg loads), on (must), off.
enum class GpuDecode { automatic, on, off };
GpuDecode parse_gpu_decode(std::string_view text);

// Where pip puts nvidia-nvjpeg beside torch, for images::load_nvjpeg: site-packages/nvidia/cu13/lib (CUDA 13
// wheels) and nvidia/nvjpeg/lib, from LibTorch's folder site-packages/torch/lib and FLOWLINE_CUDA_LIBRARY_DIR.
std::vector<std::filesystem::path> nvjpeg_folders();

class GpuJpegDecoder {
 public:
  // The decoder for `device` with nvJPEG's `backend` for batches (one of images::kNvjpegBackends, as the
  // gpu_decode_backend parameter names it), or nullptr with `why` saying why not (off; not a CUDA device;
  // libnvjpeg not found, naming where it looked; nvJPEG or that backend failing to start). With GpuDecode::on,
  // "why not" is a flowline::Error instead. Call with the device's stream current (the handle's memory is made
  // on that device).
  static std::unique_ptr<GpuJpegDecoder> make(GpuDecode mode, std::string_view backend, const c10::Device& device,
                                              std::string& why);
  ~GpuJpegDecoder();
  // The nvJPEG backend of batched decoding (images::NvjpegDecoder::backend).
  const std::string& backend() const;

  // For every i whose jpegs[i] nvJPEG takes (images::nvjpeg_takes and images::jpeg_planes, its header read by
  // nvJPEG as libjpeg reads it, within limits.max_pixels): out[i] = a uint8 [H, W, 3] tensor on the device (a view
  // into a batch of images of the same layout), decoded on `stream` (the replica's, current), pixels as the CPU
  // decoder's but for nvJPEG's IDCT. The others' out[i] are left undefined for the CPU decoders, which then give their
  // pixels or their error: over max_pixels, garbage or truncated. out is resized to jpegs.size(). Returns how many
  // nvJPEG decoded.
  std::size_t decode(std::span<const std::span<const std::uint8_t>> jpegs, const images::DecodeLimits& limits,
                     const c10::Stream& stream, std::vector<at::Tensor>& out);

  // nvJPEG's own buffers come from LibTorch's caching allocator, and each allocation and release first waits for
  // the device to be idle (gpu_decode.cpp says why). How many such waits and the seconds they took, in the whole
  // process since the last call of this (any replica's): each replica adds what it takes to its metrics.
  struct AllocatorWaitCounts {
    std::uint64_t calls = 0;
    double seconds = 0;
  };
  static AllocatorWaitCounts take_allocator_waits();

 private:
  GpuJpegDecoder(c10::Device device, std::string_view backend);

  c10::Device device_;
  std::unique_ptr<images::NvjpegDecoder> nvjpeg_;
  // The compressed bytes are staged in pinned host memory; two buffers alternate, and one is refilled only
  // after the event recorded behind the decode that read it has passed.
  at::Tensor staging_[2];
  std::optional<c10::Event> staged_[2];
  int next_ = 0;
};

}  // namespace flowline::clip_encoder
