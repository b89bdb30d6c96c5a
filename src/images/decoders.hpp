// src/images/decoders.hpp — the per-format decoders behind flowline::images::decode_image (private to the
// images library). Each takes the whole encoded file, checks the pixel count its header states against the
// limits before allocating the pixels, and returns 8-bit RGB as Pillow's convert("RGB") gives it. Each throws
// flowline::InputError whose message starts with the format's name ("JPEG: truncated ...").
#pragma once

#include "flowline/images.hpp"

#include <cstdint>
#include <span>
#include <string_view>

namespace flowline::images::detail {

// Big-endian 16- and 32-bit fields at b[at] (the caller checks that the bytes are there): JPEG's and PNG's.
inline std::uint32_t be16(std::span<const std::uint8_t> b, std::size_t at) {
  return (std::uint32_t{b[at]} << 8) | b[at + 1];
}
inline std::uint32_t be32(std::span<const std::uint8_t> b, std::size_t at) {
  return (be16(b, at) << 16) | be16(b, at + 2);
}

Image decode_jpeg(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);
Image decode_png(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);
Image decode_webp(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);

// How a walk over a JPEG's marker segments ended (walk_jpeg_segments).
enum class JpegWalk { stopped, no_marker, short_segment, ended };

// Visits the marker segments of a JPEG that carry a length field, from just after SOI: visit(marker, at), `at`
// the index of the segment's 0xFF (its length field at at + 2), fill bytes and markers without a length skipped.
// Every segment visited has its 4 header bytes within `b`; its payload may run past the end (the visitor checks
// what it reads). Returns stopped when visit returned false, no_marker where a byte is not 0xFF, short_segment
// for a length under 2, ended when the bytes end.
template <class Visit>
JpegWalk walk_jpeg_segments(std::span<const std::uint8_t> b, Visit&& visit) {
  std::size_t at = 2;
  while (at + 4 <= b.size()) {
    if (b[at] != 0xff) return JpegWalk::no_marker;
    const std::uint8_t marker = b[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {  // markers without a length
      at += 2;
      continue;
    }
    if (!visit(marker, at)) return JpegWalk::stopped;
    const std::size_t length = (std::size_t{b[at + 2]} << 8) | b[at + 3];
    if (length < 2) return JpegWalk::short_segment;
    at += 2 + length;
  }
  return JpegWalk::ended;
}

// Throws InputError when a width x height image is empty or has more pixels than the limits allow.
void check_size(std::string_view format, std::uint64_t width, std::uint64_t height, const DecodeLimits& limits);
[[noreturn]] void fail(std::string_view format, std::string_view problem);

}  // namespace flowline::images::detail
