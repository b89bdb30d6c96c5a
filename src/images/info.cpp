// image_info (flowline/images.hpp): a file's format, size and bit depth from its header alone, for answers that
// describe images without decoding them (Cohere's /v2/embed `images`). JPEG: the first start-of-frame marker;
// PNG: IHDR; WebP: libwebp's bitstream features.
#include "decoders.hpp"

#include "flowline/error.hpp"

#include <webp/decode.h>

#include <optional>

namespace flowline::images {

namespace {

using detail::be16;
using detail::be32;

ImageInfo jpeg_info(std::span<const std::uint8_t> b) {
  std::optional<ImageInfo> info;
  const auto end = detail::walk_jpeg_segments(b, [&](std::uint8_t marker, std::size_t at) {
    const bool frame = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (!frame) return true;
    if (at + 10 <= b.size()) {
      info = {ImageFormat::jpeg, be16(b, at + 7), be16(b, at + 5), static_cast<std::uint32_t>(b[at + 4]) * b[at + 9]};
    }
    return false;  // the frame header, or the data ends inside it
  });
  if (info) return *info;
  if (end == detail::JpegWalk::no_marker) detail::fail("JPEG", "corrupt data (no marker where one was expected)");
  if (end == detail::JpegWalk::short_segment) {
    detail::fail("JPEG", "corrupt data (a segment shorter than its length field)");
  }
  detail::fail("JPEG", "truncated (the data ends before the frame header)");
}

ImageInfo png_info(std::span<const std::uint8_t> b) {
  if (b.size() < 26 || b[12] != 'I' || b[13] != 'H' || b[14] != 'D' || b[15] != 'R')
    detail::fail("PNG", "truncated or invalid (no IHDR chunk first)");
  static constexpr std::uint32_t channels[7] = {1, 0, 3, 1, 2, 0, 4};  // by colour type; 1 and 5 do not exist
  const std::uint8_t type = b[25];
  if (type > 6 || channels[type] == 0) detail::fail("PNG", "invalid colour type");
  return {ImageFormat::png, be32(b, 16), be32(b, 20), std::uint32_t{b[24]} * channels[type]};
}

ImageInfo webp_info(std::span<const std::uint8_t> b) {
  WebPBitstreamFeatures features{};
  if (WebPGetFeatures(b.data(), b.size(), &features) != VP8_STATUS_OK) detail::fail("WebP", "invalid or truncated");
  return {ImageFormat::webp, static_cast<std::uint32_t>(features.width), static_cast<std::uint32_t>(features.height),
          features.has_alpha ? 32u : 24u};
}

}  // namespace

std::string_view format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::jpeg:
      return "jpeg";
    case ImageFormat::png:
      return "png";
    case ImageFormat::webp:
      return "webp";
  }
  return "unknown";
}

ImageInfo image_info(std::span<const std::uint8_t> bytes) {
  const auto format = sniff_format(bytes);
  if (!format) throw InputError({}, "image: unknown format (expected JPEG, PNG or WebP)");
  switch (*format) {
    case ImageFormat::jpeg:
      return jpeg_info(bytes);
    case ImageFormat::png:
      return png_info(bytes);
    case ImageFormat::webp:
      return webp_info(bytes);
  }
  throw InputError({}, "image: unknown format");
}

}  // namespace flowline::images
