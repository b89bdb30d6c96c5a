// nvJPEG for the ClipEncoder (gpu_decode.hpp): finding the library beside LibTorch, screening a slice's
// JPEGs, staging their bytes in pinned memory, decoding them to planes on the replica's stream and turning the
// planes into RGB as libjpeg-turbo does (images/jpeg_color.hpp).
#include "gpu_decode.hpp"

#include "images/jpeg_color.hpp"
#include "images/nvjpeg.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

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

// nvJPEG's device buffers from LibTorch's caching allocator, in the same pool and statistics as the model's memory,
// so that the out-of-memory split and the memory figures see them. Non-zero tells nvJPEG the allocation failed.
// nvJPEG 13 calls these hooks for the default and gpu_hybrid backends' buffers (at the first batches of a size,
// mostly at start), never for the hardware backend's: its ~21 MiB a decoder come from the driver, outside the pool
// (bench/nvjpeg_memory; docs/images.md, "Where nvJPEG's memory comes from").
//
// The hooks stand for cudaMalloc and cudaFree, which synchronise the device: a buffer cudaMalloc returns is used by
// nothing, and cudaFree returns only when no queued work uses it. The caching allocator promises neither (a block it
// hands out may still be read by kernels queued on its stream; a block given back is handed out again at once), so
// both hooks wait for the device to be idle first, as cudaMalloc and cudaFree would. The executor counts these
// waits (metrics nvjpeg_allocator_waits, nvjpeg_allocator_wait_seconds).

// The waits not yet taken (GpuJpegDecoder::take_allocator_waits). nvJPEG's callbacks take no context: the counts
// are the process's, taken by whichever replica asks next.
struct AllocatorWaits {
  std::mutex mutex;
  GpuJpegDecoder::AllocatorWaitCounts counts;
};
AllocatorWaits& allocator_waits() {
  static AllocatorWaits waits;
  return waits;
}

// Waits until the current CUDA device has run everything queued on it, and counts the wait.
void wait_for_device() {
  const auto start = std::chrono::steady_clock::now();
  const auto* cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  cuda->synchronizeDevice(cuda->getDevice().index());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  AllocatorWaits& waits = allocator_waits();
  std::lock_guard lock(waits.mutex);
  ++waits.counts.calls;
  waits.counts.seconds += seconds;
}

int torch_device_allocate(void** pointer, std::size_t size) {
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CUDA);
  try {
    *pointer = allocator->raw_allocate(size);
  } catch (const std::exception&) {
    return 1;
  }
  if (*pointer == nullptr) return size > 0 ? 1 : 0;
  try {
    wait_for_device();  // the block's earlier users (kernels queued on its stream) are done
    return 0;
  } catch (const std::exception&) {
    allocator->raw_deallocate(*pointer);
    return 1;
  }
}

int torch_device_release(void* pointer) {
  try {
    wait_for_device();  // nvJPEG's queued work on the buffer is done before anyone else may get it
    c10::GetAllocator(c10::DeviceType::CUDA)->raw_deallocate(pointer);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

}  // namespace

GpuJpegDecoder::AllocatorWaitCounts GpuJpegDecoder::take_allocator_waits() {
  AllocatorWaits& waits = allocator_waits();
  std::lock_guard lock(waits.mutex);
  return std::exchange(waits.counts, AllocatorWaitCounts{});
}

GpuJpegDecoder::GpuJpegDecoder(c10::Device device, std::string_view backend)
    : device_(device),
      nvjpeg_(std::make_unique<images::NvjpegDecoder>(
          images::NvjpegDeviceAllocator{torch_device_allocate, torch_device_release}, backend)) {}

GpuJpegDecoder::~GpuJpegDecoder() = default;

const std::string& GpuJpegDecoder::backend() const { return nvjpeg_->backend(); }

std::unique_ptr<GpuJpegDecoder> GpuJpegDecoder::make(GpuDecode mode, std::string_view backend,
                                                     const c10::Device& device, std::string& why) {
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
    return std::unique_ptr<GpuJpegDecoder>(new GpuJpegDecoder(device, backend));
  } catch (const Error& e) {
    return refuse(fmt::format("nvJPEG ({} backend) from {} did not start: {}", backend, library.path, e.what()));
  }
}

namespace {

// A JPEG of the slice that nvJPEG decodes: its index, its planes as libjpeg reads them and as nvJPEG writes them.
struct Taken {
  std::size_t index = 0;
  images::JpegPlanes planes;
  std::uint32_t widths[3] = {}, heights[3] = {};  // nvJPEG's plane sizes (>= libjpeg's)
};

// JPEGs whose planes have the same sizes and ratios share one device buffer [N, bytes per image] and go through
// the colour conversion as one batch (a photo collection of one camera is one group per slice).
std::vector<std::uint32_t> group_key(const Taken& t) {
  const auto& p = t.planes;
  return {std::uint32_t(p.components),
          p.width,
          p.height,
          std::uint32_t(p.ratio_across[1]),
          std::uint32_t(p.ratio_down[1]),
          std::uint32_t(p.ratio_across[2]),
          std::uint32_t(p.ratio_down[2]),
          t.widths[0],
          t.heights[0],
          t.widths[1],
          t.heights[1],
          t.widths[2],
          t.heights[2]};
}

std::int64_t plane_bytes(const Taken& t, int c) { return std::int64_t{t.widths[c]} * t.heights[c]; }

// Plane c of every image of a group's buffer [N, bytes], cropped to libjpeg's plane size: uint8 [N, h, w].
at::Tensor plane_view(const at::Tensor& buffer, const Taken& t, int c) {
  std::int64_t offset = 0;
  for (int k = 0; k < c; ++k) offset += plane_bytes(t, k);
  return buffer.narrow(1, offset, plane_bytes(t, c))
      .view({buffer.size(0), t.heights[c], t.widths[c]})
      .narrow(1, 0, t.planes.plane_height[c])
      .narrow(2, 0, t.planes.plane_width[c]);
}

}  // namespace

std::size_t GpuJpegDecoder::decode(std::span<const std::span<const std::uint8_t>> jpegs,
                                   const images::DecodeLimits& limits, const c10::Stream& stream,
                                   std::vector<at::Tensor>& out) {
  out.assign(jpegs.size(), at::Tensor());
  std::vector<Taken> taken;
  std::size_t total = 0;
  for (std::size_t i = 0; i < jpegs.size(); ++i) {
    if (jpegs[i].empty() || !images::nvjpeg_takes(jpegs[i]).empty()) continue;
    Taken t{i, images::jpeg_planes(jpegs[i])};
    // Over the limit: left to the CPU decoder, whose header check refuses it before allocating.
    if (!t.planes.problem.empty() || std::uint64_t{t.planes.width} * t.planes.height > limits.max_pixels) continue;
    if (!nvjpeg_->plane_sizes(jpegs[i], t.planes, t.widths, t.heights)) continue;
    taken.push_back(std::move(t));
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
  std::size_t offset = 0;
  for (const Taken& t : taken) {
    const auto bytes = jpegs[t.index];
    std::memcpy(base + offset, bytes.data(), bytes.size());
    staged.emplace_back(base + offset, bytes.size());
    offset += bytes.size();
  }
  // One device buffer per group of equal layouts, allocated on the current stream (the replica's): the caching
  // allocator orders its reuse after the work queued here.
  std::map<std::vector<std::uint32_t>, std::vector<std::size_t>> groups;  // key -> indexes into taken
  for (std::size_t k = 0; k < taken.size(); ++k) groups[group_key(taken[k])].push_back(k);
  std::vector<at::Tensor> buffers(taken.size());  // each taken JPEG's group buffer
  std::vector<std::int64_t> rows(taken.size());   // and its row in it
  std::vector<images::NvjpegPlanesOut> outputs(taken.size());
  for (const auto& [key, members] : groups) {
    const Taken& first = taken[members.front()];
    const std::int64_t bytes = plane_bytes(first, 0) + plane_bytes(first, 1) + plane_bytes(first, 2);
    const at::Tensor buffer = at::empty({static_cast<std::int64_t>(members.size()), bytes},
                                        at::TensorOptions().dtype(at::kByte).device(device_));
    for (std::size_t row = 0; row < members.size(); ++row) {
      const std::size_t k = members[row];
      buffers[k] = buffer;
      rows[k] = static_cast<std::int64_t>(row);
      std::uint8_t* plane = buffer.data_ptr<std::uint8_t>() + static_cast<std::int64_t>(row) * bytes;
      for (int c = 0; c < first.planes.components; ++c) {
        outputs[k].plane[c] = plane;
        outputs[k].pitch[c] = first.widths[c];
        plane += plane_bytes(first, c);
      }
    }
  }
  std::vector<images::JpegPlanes> planes;
  for (const Taken& t : taken) planes.push_back(t.planes);
  const std::vector<bool> done = nvjpeg_->decode(staged, planes, outputs, stream.native_handle());
  if (!staged_[slot]) staged_[slot].emplace(c10::DeviceType::CUDA);
  staged_[slot]->record(stream);
  // libjpeg-turbo's upsampling and colour conversion, one batch per group, on the current stream.
  std::size_t decoded = 0;
  for (const auto& [key, members] : groups) {
    const Taken& t = taken[members.front()];
    const at::Tensor& buffer = buffers[members.front()];
    const at::Tensor y = plane_view(buffer, t, 0);
    const at::Tensor rgb = t.planes.components == 1
                               ? images::jpeg_grey_to_rgb(y)
                               : images::jpeg_ycc_to_rgb(y, plane_view(buffer, t, 1), plane_view(buffer, t, 2),
                                                         {t.planes.ratio_across[1], t.planes.ratio_down[1]},
                                                         {t.planes.ratio_across[2], t.planes.ratio_down[2]});
    for (const std::size_t k : members) {
      if (!done[k]) continue;  // its planes are garbage: the CPU decodes it
      out[taken[k].index] = rgb.select(0, rows[k]);
      ++decoded;
    }
  }
  return decoded;
}

}  // namespace flowline::clip_encoder
