// nvJPEG for the ClipEncoder (gpu_decode.hpp): finding the library beside LibTorch, screening a slice's
// JPEGs, staging their bytes in pinned memory and decoding them into device tensors on the replica's stream.
#include "gpu_decode.hpp"

#include "images/nvjpeg.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace flowline::clip_encoder {
namespace fs = std::filesystem;

std::vector<fs::path> nvjpeg_folders() {
  std::vector<fs::path> torch_dirs;
  if (const char* dir = std::getenv("FLOWLINE_CUDA_LIBRARY_DIR"); dir && *dir) torch_dirs.emplace_back(dir);
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&at::globalContext), &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    const fs::path library = fs::canonical(info.dli_fname, ec);
    if (!ec) torch_dirs.push_back(library.parent_path());
  }
  std::vector<fs::path> folders;
  for (const auto& dir : torch_dirs) {
    const fs::path site = dir.parent_path().parent_path();
    folders.push_back(site / "nvidia" / "cu13" / "lib");
    folders.push_back(site / "nvidia" / "nvjpeg" / "lib");
  }
  return folders;
}

GpuDecode parse_gpu_decode(std::string_view text) {
  if (text == "on") return GpuDecode::on;
  if (text == "off") return GpuDecode::off;
  if (text == "auto") return GpuDecode::automatic;
  throw Error(fmt::format("parameter 'gpu_decode': '{}' is not auto, on or off", text));
}

namespace {

// nvJPEG's device buffers from LibTorch's caching allocator, on the current device and stream (the replica's while
// it decodes): in the same pool and statistics as the model's memory, so batch_size auto and the out-of-memory
// split see them. Non-zero tells nvJPEG the allocation failed.
int torch_device_allocate(void** pointer, std::size_t size) {
  try {
    *pointer = c10::GetAllocator(c10::DeviceType::CUDA)->raw_allocate(size);
    return *pointer == nullptr && size > 0 ? 1 : 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int torch_device_release(void* pointer) {
  try {
    c10::GetAllocator(c10::DeviceType::CUDA)->raw_deallocate(pointer);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

}  // namespace

GpuJpegDecoder::GpuJpegDecoder(c10::Device device)
    : device_(device),
      nvjpeg_(std::make_unique<images::NvjpegDecoder>(
          images::NvjpegDeviceAllocator{torch_device_allocate, torch_device_release})) {}

GpuJpegDecoder::~GpuJpegDecoder() = default;

const std::string& GpuJpegDecoder::backend() const { return nvjpeg_->backend(); }

std::unique_ptr<GpuJpegDecoder> GpuJpegDecoder::make(GpuDecode mode, const c10::Device& device, std::string& why) {
  const auto refuse = [&](std::string reason) -> std::unique_ptr<GpuJpegDecoder> {
    if (mode == GpuDecode::on) throw Error(fmt::format("parameter 'gpu_decode': on, but {}", reason));
    why = std::move(reason);
    return nullptr;
  };
  if (mode == GpuDecode::off) return refuse("gpu_decode is off");
  if (!device.is_cuda()) return refuse(fmt::format("nvJPEG decodes on a CUDA device and this one is {}", device.str()));
  const images::NvjpegLibrary& library = images::load_nvjpeg(nvjpeg_folders());
  if (!library.loaded) return refuse(library.problem);
  try {
    return std::unique_ptr<GpuJpegDecoder>(new GpuJpegDecoder(device));
  } catch (const Error& e) {
    return refuse(fmt::format("nvJPEG from {} did not start: {}", library.path, e.what()));
  }
}

std::size_t GpuJpegDecoder::decode(std::span<const std::span<const std::uint8_t>> jpegs,
                                   const images::DecodeLimits& limits, const c10::Stream& stream,
                                   std::vector<at::Tensor>& out) {
  out.assign(jpegs.size(), at::Tensor());
  std::vector<std::size_t> taken;
  std::vector<std::uint32_t> widths, heights;
  std::size_t total = 0;
  for (std::size_t i = 0; i < jpegs.size(); ++i) {
    if (jpegs[i].empty() || !images::nvjpeg_takes(jpegs[i]).empty()) continue;
    std::uint32_t w = 0, h = 0;
    // Over the limit: left to the CPU decoder, whose header check refuses it before allocating.
    if (!nvjpeg_->image_size(jpegs[i], w, h) || std::uint64_t{w} * h > limits.max_pixels) continue;
    taken.push_back(i);
    widths.push_back(w);
    heights.push_back(h);
    total += jpegs[i].size();
  }
  if (taken.empty()) return 0;
  // Stage the bytes in pinned memory, in a buffer no queued decode still reads.
  const int slot = next_;
  next_ = 1 - next_;
  if (staged_[slot]) staged_[slot]->synchronize();
  if (!staging_[slot].defined() || static_cast<std::size_t>(staging_[slot].numel()) < total) {
    staging_[slot] = at::empty({static_cast<std::int64_t>(total + total / 4)},
                               at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  }
  auto* base = staging_[slot].data_ptr<std::uint8_t>();
  std::vector<std::span<const std::uint8_t>> staged;
  std::vector<std::uint8_t*> outputs;
  std::size_t offset = 0;
  for (std::size_t k = 0; k < taken.size(); ++k) {
    const auto bytes = jpegs[taken[k]];
    std::memcpy(base + offset, bytes.data(), bytes.size());
    staged.emplace_back(base + offset, bytes.size());
    offset += bytes.size();
    // Allocated on the current stream (the replica's): the caching allocator orders its reuse after it.
    at::Tensor image = at::empty({static_cast<std::int64_t>(heights[k]), static_cast<std::int64_t>(widths[k]), 3},
                                 at::TensorOptions().dtype(at::kByte).device(device_));
    outputs.push_back(image.data_ptr<std::uint8_t>());
    out[taken[k]] = std::move(image);
  }
  const std::vector<bool> done = nvjpeg_->decode(staged, outputs, stream.native_handle());
  if (!staged_[slot]) staged_[slot].emplace(c10::DeviceType::CUDA);
  staged_[slot]->record(stream);
  std::size_t decoded = 0;
  for (std::size_t k = 0; k < taken.size(); ++k) {
    if (done[k]) {
      ++decoded;
    } else {
      out[taken[k]] = at::Tensor();
    }
  }
  return decoded;
}

}  // namespace flowline::clip_encoder
