// Format sniffing and the decode_image entry point (flowline/images.hpp); the decoders are in jpeg.cpp,
// png.cpp and webp.cpp.
#include "decoders.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace flowline::images {

namespace detail {

void fail(std::string_view format, std::string_view problem) {
  throw InputError({}, fmt::format("{} image: {}", format, problem));
}

void check_size(std::string_view format, std::uint64_t width, std::uint64_t height, const DecodeLimits& limits) {
  if (width == 0 || height == 0) fail(format, fmt::format("zero size ({}x{} pixels)", width, height));
  if (width * height > limits.max_pixels)
    fail(format, fmt::format("{}x{} is {} pixels, more than the limit of {} (a decompression bomb?)", width, height,
                             width * height, limits.max_pixels));
}

}  // namespace detail

std::optional<ImageFormat> sniff_format(std::span<const std::uint8_t> bytes) {
  static constexpr std::uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return ImageFormat::jpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), png_signature, 8) == 0) return ImageFormat::png;
  if (bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 && std::memcmp(bytes.data() + 8, "WEBP", 4) == 0)
    return ImageFormat::webp;
  return std::nullopt;
}

Image decode_image(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) {
  const auto format = sniff_format(bytes);
  if (!format) {
    std::string head;
    for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) head += fmt::format("{:02x}", bytes[i]);
    throw InputError({}, bytes.empty() ? std::string("image: no bytes (expected a JPEG, PNG or WebP file)")
                                       : fmt::format("image: unknown format (expected JPEG, PNG or WebP; the {} "
                                                     "bytes start with {})",
                                                     bytes.size(), head));
  }
  switch (*format) {
    case ImageFormat::jpeg:
      return detail::decode_jpeg(bytes, limits);
    case ImageFormat::png:
      return detail::decode_png(bytes, limits);
    case ImageFormat::webp:
      return detail::decode_webp(bytes, limits);
  }
  throw InputError({}, "image: unknown format");
}

}  // namespace flowline::images
