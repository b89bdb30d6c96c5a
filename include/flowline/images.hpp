// flowline/images.hpp — images as documents: sniffing and decoding JPEG, PNG and WebP bytes to 8-bit RGB, and
// finding a document's image bytes (its blob, a data: URI, a local file under allowed roots, or an http(s)
// download when the flow allows it).
//
// Library flowline::images (src/images/): libjpeg-turbo, libspng and libwebp, no LibTorch of its own (it links
// flowline::core for Document and InputError). Every function here is thread-safe and keeps no state: decoders
// are made per call, so image executors decode on as many CPU threads as they like; downloads block the calling
// thread (fetch_http_images runs several on threads of its own). The caller owns every input
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
#include <string>
#include <string_view>
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

// The EXIF Orientation (1..8) of JPEG (APP1 "Exif"), PNG (eXIf) or WebP (EXIF chunk) bytes: 1 when there is none
// or the metadata is malformed (never throws; every read is bounded by the bytes given).
int exif_orientation(std::span<const std::uint8_t> bytes) noexcept;
// Turns decoded pixels upright as Pillow's ImageOps.exif_transpose does for `orientation`: 2 mirrored, 3 turned
// 180°, 4 flipped, 5 transposed, 6 turned 90° clockwise, 7 transversed, 8 turned 90° counter-clockwise (5..8
// swap width and height); 1 or any other value leaves it as it is.
void apply_exif_orientation(Image& image, int orientation);

// What a file's header says, without decoding: bit_depth is bits per pixel as stored (JPEG: precision x
// components, 24 for RGB; PNG: bit depth x channels, 32 for 8-bit RGBA, the index bits for a palette; WebP: 24,
// or 32 with alpha). Throws InputError as decode_image does for an unknown or truncated header.
struct ImageInfo {
  ImageFormat format = ImageFormat::jpeg;
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint32_t bit_depth = 0;
};
ImageInfo image_info(std::span<const std::uint8_t> bytes);
std::string_view format_name(ImageFormat format);  // "jpeg", "png", "webp"

// Where a document's image may come from: its blob, a data: URI, or a local path / file:// URI under one of
// allowed_roots (any local path when any_local_path, as `flowline run` allows; never for a served flow unless
// its YAML names roots), or an http(s) URI when allow_http (docs/images.md, "http(s)").
//
// http(s) fetching is bounded: at most max_bytes of body (refused while reading, never buffered past it),
// http_connect_timeout for name resolution, connect and TLS handshake, http_timeout for everything including
// redirects, at most http_max_redirects redirects. https verifies the server's certificate and host name
// against the system's store. Against server-side request forgery a host that resolves to a loopback, private,
// link-local, multicast or otherwise non-public address is refused unless allow_private_addresses, and the
// connection goes only to the addresses checked (no second lookup).
struct ImageSourcePolicy {
  std::vector<std::filesystem::path> allowed_roots;
  bool any_local_path = false;
  bool allow_http = false;
  bool allow_private_addresses = false;
  std::size_t max_bytes = 64u << 20;
  std::chrono::milliseconds http_timeout{10'000};
  std::chrono::milliseconds http_connect_timeout{5'000};
  int http_max_redirects = 5;
  std::size_t http_in_flight = 8;  // fetch_http_images(): downloads at once
};

// A blob set, or a uri that names an image: data:image/..., an http(s) URI (whatever its path), or a path or
// file:// URI with an image extension or mime_type image/... (a text file's uri, as text readers set it, is not).
bool has_image(const Document& doc);
// The encoded bytes of the document's image. Throws InputError naming the document id and why. An http(s) URI
// is fetched on the calling thread, blocking up to policy.http_timeout.
Bytes image_bytes(const Document& doc, const ImageSourcePolicy& policy);

// True when image_bytes(doc, ...) would fetch over the network: no blob, and an http:// or https:// uri.
bool is_http_image(const Document& doc);

// What fetch_http_images() got for one document: its bytes, or the InputError's message ("document 'ID': ...").
struct FetchedImage {
  bool fetched = false;  // false: the document is not an http(s) one (is_http_image) and was left alone
  Bytes bytes;
  std::string error;
};

// image_bytes() for every document of `docs` that is_http_image(), at most policy.http_in_flight at once on
// threads of its own (downloads wait on the network, not the CPU); the others are left alone. Returns one entry
// per document, in order, once all have ended; never throws for a document's failure. Any thread may call it.
std::vector<FetchedImage> fetch_http_images(std::span<const Document* const> docs, const ImageSourcePolicy& policy);

}  // namespace flowline::images
