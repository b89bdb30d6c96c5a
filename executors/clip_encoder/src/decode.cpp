// Decoding image documents: reading their bytes and decoding on ATen's CPU threads (compiled with OpenMP:
// flowline_parallel_sources), the JPEGs nvJPEG takes on the GPU first when the replica has it.
#include "decode.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>

namespace flowline::clip_encoder {

std::optional<Modality> modality_of(const Document& doc) {
  if (!doc.blob.empty()) return Modality::image;
  if (!doc.text.empty()) return Modality::text;
  if (doc.tensor.defined() || images::has_image(doc)) return Modality::image;
  return std::nullopt;
}

at::Tensor pixels_of_tensor(const at::Tensor& tensor, const images::DecodeLimits& limits) {
  const auto shape = [&] {
    return fmt::format("{} [{}]", c10::toString(tensor.scalar_type()), fmt::join(tensor.sizes(), ", "));
  };
  const bool channels_ok =
      tensor.dim() == 2 || (tensor.dim() == 3 && (tensor.size(2) == 1 || tensor.size(2) == 3 || tensor.size(2) == 4));
  if (!channels_ok || tensor.size(0) < 1 || tensor.size(1) < 1) {
    throw InputError({}, fmt::format("its tensor {} is not an image: pixels are [H, W, 3] (RGB), [H, W, 4] (RGBA), "
                                     "or [H, W] / [H, W, 1] (gray), H and W at least 1",
                                     shape()));
  }
  const auto pixels = static_cast<std::uint64_t>(tensor.size(0)) * static_cast<std::uint64_t>(tensor.size(1));
  if (pixels > limits.max_pixels) {
    throw InputError(
        {}, fmt::format("its tensor {} has {} pixels, more than the limit of {}", shape(), pixels, limits.max_pixels));
  }
  at::Tensor t = tensor.to(at::kCPU);
  if (t.scalar_type() != at::kByte) {
    if (t.scalar_type() == at::kBool || c10::isComplexType(t.scalar_type()) ||
        (t.is_floating_point() && !at::equal(t, t.round())) || t.min().item<double>() < 0 ||
        t.max().item<double>() > 255) {
      throw InputError({}, fmt::format("its tensor {} is not pixels: an image's values are whole numbers 0..255 "
                                       "(uint8); a float image scaled to 0..1 is multiplied by 255 and rounded first",
                                       shape()));
    }
    t = t.to(at::kByte);
  }
  if (t.dim() == 2) t = t.unsqueeze(2);
  if (t.size(2) == 1) t = t.expand({t.size(0), t.size(1), 3});
  if (t.size(2) == 4) t = t.narrow(2, 0, 3);  // PIL's convert("RGB") drops alpha
  return t.contiguous();
}

namespace {

// Runs body(i) for i in [0, n) on at most `threads` of ATen's threads, each its own range.
template <class Body>
void on_threads(std::size_t n, std::size_t threads, const Body& body) {
  const std::size_t chunks = std::max<std::size_t>(1, std::min(threads, n));
  const std::size_t per_chunk = n == 0 ? 0 : (n + chunks - 1) / chunks;
  // One task per chunk, grain 1: at most `chunks` threads at once.
  at::parallel_for(0, static_cast<std::int64_t>(chunks), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::size_t first = static_cast<std::size_t>(c) * per_chunk, last = std::min(n, first + per_chunk);
      for (std::size_t i = first; i < last; ++i) body(i);
    }
  });
}

// The document's encoded bytes: its blob, its download (`fetched`, already named in its error), or what
// image_bytes() reads into `read`. Returns the failure text, or "" with `bytes` set.
std::string bytes_of(const Document& doc, const images::FetchedImage& fetched, const DecodeSettings& settings,
                     Bytes& read, std::span<const std::uint8_t>& bytes) {
  bytes = doc.blob;
  if (fetched.fetched) {
    if (!fetched.error.empty()) return fetched.error;
    bytes = fetched.bytes;
  }
  try {
    if (bytes.empty()) {
      read = images::image_bytes(doc, settings.policy);
      bytes = read;
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// A decoded uint8 [H, W, 3] tensor turned as apply_exif_orientation() turns an images::Image.
at::Tensor oriented(const at::Tensor& hwc, int orientation) {
  switch (orientation) {
    case 2:
      return hwc.flip({1}).contiguous();
    case 3:
      return hwc.flip({0, 1}).contiguous();
    case 4:
      return hwc.flip({0}).contiguous();
    case 5:
      return hwc.transpose(0, 1).contiguous();
    case 6:
      return hwc.transpose(0, 1).flip({1}).contiguous();
    case 7:
      return hwc.transpose(0, 1).flip({0, 1}).contiguous();
    case 8:
      return hwc.transpose(0, 1).flip({0}).contiguous();
    default:
      return hwc;
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<at::Tensor> DecodedSlice::pixels() const {
  std::vector<at::Tensor> result(gpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i].defined()) {
      result[i] = gpu[i];
    } else if (given[i].defined()) {
      result[i] = given[i];
    } else {
      const images::Image& image = cpu[i];
      result[i] = at::from_blob(const_cast<std::uint8_t*>(image.rgb.data()),
                                {static_cast<std::int64_t>(image.height), static_cast<std::int64_t>(image.width), 3},
                                at::kByte);
    }
  }
  return result;
}

void decode_slice(std::span<const Document* const> docs, const DecodeSettings& settings, GpuJpegDecoder* gpu,
                  const std::optional<c10::Stream>& stream, DecodedSlice& out) {
  const std::size_t n = docs.size();
  out.cpu.assign(n, images::Image{});
  out.failures.assign(n, std::string());
  out.gpu.assign(n, at::Tensor());
  out.given.assign(n, at::Tensor());
  out.gpu_images = out.cpu_images = out.given_images = 0;
  out.gpu_seconds = out.cpu_seconds = 0;
  // Downloads first, several at once on threads of their own (they wait on the network, not the CPU).
  const std::vector<images::FetchedImage> fetched = images::fetch_http_images(docs, settings.policy);
  std::vector<Bytes> read(n);
  std::vector<std::span<const std::uint8_t>> bytes(n);
  const auto cpu_start = std::chrono::steady_clock::now();
  on_threads(n, settings.threads, [&](std::size_t i) {
    const Document& doc = *docs[i];
    if (!doc.blob.empty() || !doc.tensor.defined()) {
      out.failures[i] = bytes_of(doc, fetched[i], settings, read[i], bytes[i]);
      return;
    }
    try {  // pixels given: nothing to read or decode (bytes[i] stays empty, which no decoder takes)
      out.given[i] = pixels_of_tensor(doc.tensor, settings.limits);
    } catch (const std::exception& e) {
      out.failures[i] = fmt::format("document '{}': {}", doc.id, e.what());
    }
  });
  out.cpu_seconds += seconds_since(cpu_start);
  // Images [first, last) on the CPU threads; those nvJPEG decoded or that failed before are skipped.
  const auto decode_on_cpu = [&](std::size_t first, std::size_t last) {
    const auto start = std::chrono::steady_clock::now();
    on_threads(last - first, settings.threads, [&](std::size_t k) {
      const std::size_t i = first + k;
      if (!out.failures[i].empty() || out.gpu[i].defined() || out.given[i].defined()) return;
      try {
        out.cpu[i] = images::decode_image(bytes[i], settings.limits);
        if (settings.exif_orientation) images::apply_exif_orientation(out.cpu[i], images::exif_orientation(bytes[i]));
      } catch (const std::exception& e) {
        // decode_image() does not know the document; name it.
        out.failures[i] = fmt::format("document '{}': {}", docs[i]->id, e.what());
      }
    });
    return seconds_since(start);
  };
  std::size_t split = n;  // [0, split): nvJPEG's to take; [split, n): the CPU's
  if (gpu != nullptr && stream) {
    split = n - std::min(n, static_cast<std::size_t>(std::llround(static_cast<double>(n) * settings.cpu_share)));
    // The CPU's share starts first, on a thread of its own, so both decoders work at once; out.gpu's entries
    // for [split, n) stay undefined, and nvJPEG writes only [0, split).
    std::future<double> cpu_part;
    if (split < n) cpu_part = std::async(std::launch::async, decode_on_cpu, split, n);
    const auto gpu_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> gpu_out;
    try {
      out.gpu_images = gpu->decode(std::span(bytes).first(split), settings.limits, *stream, gpu_out);
    } catch (...) {
      if (cpu_part.valid()) cpu_part.wait();  // it uses this frame's vectors
      throw;
    }
    out.gpu_seconds = seconds_since(gpu_start);
    for (std::size_t i = 0; i < split; ++i) out.gpu[i] = std::move(gpu_out[i]);
    if (cpu_part.valid()) out.cpu_seconds += cpu_part.get();
  }
  // What nvJPEG did not take (or all, without it) on the CPU threads now.
  out.cpu_seconds += decode_on_cpu(0, split);
  if (settings.exif_orientation) {  // nvJPEG's images (the CPU's were turned on their threads)
    for (std::size_t i = 0; i < n; ++i) {
      if (out.gpu[i].defined()) out.gpu[i] = oriented(out.gpu[i], images::exif_orientation(bytes[i]));
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!out.failures[i].empty() || out.gpu[i].defined()) continue;  // nvJPEG's counted by its call
    ++(out.given[i].defined() ? out.given_images : out.cpu_images);
  }
}

}  // namespace flowline::clip_encoder
