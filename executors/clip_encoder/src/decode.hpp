// Private to the ClipEncoder: which documents are images and which texts, and decoding a slice of image
// documents: JPEGs on the GPU with nvJPEG where the replica has it (gpu_decode.hpp), the rest on CPU threads.
#pragma once

#include "gpu_decode.hpp"

#include "flowline/document.hpp"
#include "flowline/images.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace flowline::clip_encoder {

enum class Modality { text, image };

// A blob is an image; else a text is a text (readers set `uri` to the file a text came from); else a tensor is
// an image's pixels (as CLIP-as-service takes them: pixels_of_tensor()); else a `uri` naming an image
// (images::has_image) is one. nullopt: neither.
std::optional<Modality> modality_of(const Document& doc);

// A document's tensor as an image: uint8 [H, W, 3] RGB on the host, from uint8 [H, W, 3] (or, as PIL's
// convert("RGB") takes them, [H, W] / [H, W, 1] gray, replicated, and [H, W, 4] RGBA, its alpha dropped); any
// other integer or floating dtype whose values are whole numbers 0..255 is taken as those bytes. Throws
// flowline::InputError saying what was expected (a float image scaled to 0..1, more pixels than `limits`).
at::Tensor pixels_of_tensor(const at::Tensor& tensor, const images::DecodeLimits& limits);

// What decode_slice() needs, fixed for an executor's life.
struct DecodeSettings {
  images::ImageSourcePolicy policy;
  images::DecodeLimits limits;
  std::size_t threads = 1;  // at most this many of ATen's threads decode one slice
  // With a GPU decoder: the share of each slice's images (its last ones) decoded on the CPU threads while nvJPEG
  // decodes the others, both at once (0: nvJPEG takes every JPEG it can). Which decoder gets an image depends only
  // on its place in the slice.
  double cpu_share = 0;
  bool exif_orientation = false;  // decoded images turned upright by their EXIF Orientation (given pixels never)
};

// A slice's images, one entry of each vector per document.
struct DecodedSlice {
  std::vector<at::Tensor> gpu;        // uint8 [H, W, 3] on the device where nvJPEG decoded it, else undefined
  std::vector<at::Tensor> given;      // uint8 [H, W, 3] on the host where the document gave pixels, else undefined
  std::vector<images::Image> cpu;     // the CPU decoders' pixels where they decoded it, else empty
  std::vector<std::string> failures;  // "document 'ID': why" where it failed, else empty
  std::size_t gpu_images = 0, cpu_images = 0, given_images = 0;
  double gpu_seconds = 0, cpu_seconds = 0;  // wall time of each part (nvJPEG's: until its calls return)

  // Each document's pixels as a uint8 [H, W, 3] tensor: the device one, the given one, or a view of the CPU pixels
  // (valid while this slice is unchanged). Only for a slice without failures.
  std::vector<at::Tensor> pixels() const;
};

// Reads docs[i]'s image and decodes it into `out` for every i (a document without a blob that has a tensor gives
// its pixels: pixels_of_tensor()); http(s) images are downloaded first,
// settings.policy.http_in_flight at once (images::fetch_http_images), and the files are read on up to
// settings.threads threads of ATen's pool. With `gpu` (the replica's, its stream current and passed as `stream`)
// the JPEGs nvJPEG takes among the slice's first (1 - settings.cpu_share) are decoded on the device — while a
// thread started for the call decodes the rest on those CPU threads — and every other image, and every one without
// `gpu`, on the CPU threads. A document that fails has its failures entry set; the others are decoded regardless.
// Called by one replica thread at a time per output (it keeps no state but `gpu`'s).
void decode_slice(std::span<const Document* const> docs, const DecodeSettings& settings, GpuJpegDecoder* gpu,
                  const std::optional<c10::Stream>& stream, DecodedSlice& out);

}  // namespace flowline::clip_encoder
