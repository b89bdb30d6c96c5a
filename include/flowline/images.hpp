// flowline/images.hpp — images as documents: sniffing and decoding JPEG, PNG and WebP bytes to 8-bit RGB, and
// finding a document's image bytes (its blob, a data: URI, or a local file under allowed roots).
//
// Library flowline::images (src/images/): libjpeg-turbo, libspng and libwebp, no LibTorch of its own (it links
// flowline::core for Document and InputError). Every function here is thread-safe and keeps no state: decoders
// are made per call, so image executors decode on as many CPU threads as they like. The caller owns every input
// and every result; nothing is cached.
//
// Decoding matches Pillow's `Image.open(f).convert("RGB")` pixel for pixel (docs/images.md lists the modes and
// the few places it does not). Bad bytes never crash or exit: they throw flowline::InputError saying what is
// wrong (unknown format, truncated, too many pixels, zero size), before allocating the pixels where the header
// tells the size.
#pragma once

#include "flowline/document.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

namespace flowline::images {

enum class ImageFormat { jpeg, png, webp };

// 8-bit RGB, rows top to bottom, HWC (pixel (x,y) channel c at rgb[(y*width+x)*3+c]), as PIL's convert("RGB").
struct Image {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::uint8_t> rgb;
};

struct DecodeLimits {
  std::uint64_t max_pixels = 89'478'485;  // PIL's MAX_IMAGE_PIXELS
};

// The format the bytes' signature says (JPEG FF D8 FF, PNG's 8-byte signature, RIFF....WEBP), or nullopt.
std::optional<ImageFormat> sniff_format(std::span<const std::uint8_t> bytes);
// Throws flowline::InputError saying what is wrong (format unknown, truncated, too many pixels, ...).
Image decode_image(std::span<const std::uint8_t> bytes, const DecodeLimits& limits = {});

// Where a document's image may come from: its blob, a data: URI, or a local path / file:// URI under one of
// allowed_roots (any local path when any_local_path, as `flowline run` allows; never for a served flow unless
// its YAML names roots). http(s) is refused unless allow_http (bounded by max_bytes and timeout).
struct ImageSourcePolicy {
  std::vector<std::filesystem::path> allowed_roots;
  bool any_local_path = false;
  bool allow_http = false;
  std::size_t max_bytes = 64u << 20;
  std::chrono::milliseconds http_timeout{10'000};
};

bool has_image(const Document& doc);  // blob set, or uri present and not a text URI
// The encoded bytes of the document's image. Throws InputError naming the document id and why.
Bytes image_bytes(const Document& doc, const ImageSourcePolicy& policy);

}  // namespace flowline::images
