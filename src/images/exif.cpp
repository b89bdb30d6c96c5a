// EXIF orientation (flowline/images.hpp): the Orientation tag (0x0112) of IFD0 in a JPEG's APP1 "Exif" segment,
// a PNG's eXIf chunk or a WebP's EXIF chunk, and the pixel transform Pillow's ImageOps.exif_transpose applies
// for each value. Every read is bounds-checked against the bytes given: a malformed container or TIFF header
// is "no orientation" (1), never an error.
#include "decoders.hpp"

#include <algorithm>
#include <cstring>

namespace flowline::images {

namespace {

using Span = std::span<const std::uint8_t>;

using detail::be16;
using detail::be32;
std::uint32_t le32(Span b, std::size_t at) {
  return std::uint32_t{b[at]} | (std::uint32_t{b[at + 1]} << 8) | (std::uint32_t{b[at + 2]} << 16) |
         (std::uint32_t{b[at + 3]} << 24);
}

bool starts_with(Span b, std::size_t at, std::string_view text) {
  return at <= b.size() && b.size() - at >= text.size() && std::memcmp(b.data() + at, text.data(), text.size()) == 0;
}

// IFD0's Orientation in a TIFF structure ("II*\0" or "MM\0*", then IFD0's offset); 1 when absent or malformed.
int tiff_orientation(Span tiff) {
  if (tiff.size() < 8) return 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  const auto u16 = [&](std::size_t at) {
    return little ? std::uint32_t{tiff[at]} | (std::uint32_t{tiff[at + 1]} << 8) : be16(tiff, at);
  };
  const auto u32 = [&](std::size_t at) { return little ? le32(tiff, at) : be32(tiff, at); };
  if (u16(2) != 42) return 1;
  const std::size_t ifd = u32(4);
  if (ifd > tiff.size() || tiff.size() - ifd < 2) return 1;
  const std::size_t count = u16(ifd);
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t entry = ifd + 2 + k * 12;
    if (entry > tiff.size() || tiff.size() - entry < 12) return 1;
    if (u16(entry) != 0x0112) continue;
    // SHORT (type 3), one value, held in the first two bytes of the value field.
    if (u16(entry + 2) != 3 || u32(entry + 4) != 1) return 1;
    const std::uint32_t value = u16(entry + 8);
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

// An EXIF block as containers hold it: the TIFF structure, after an optional "Exif\0\0" header.
int exif_block_orientation(Span block) {
  if (starts_with(block, 0, std::string_view("Exif\0\0", 6))) block = block.subspan(6);
  return tiff_orientation(block);
}

int jpeg_orientation(Span b) {
  int orientation = 1;
  detail::walk_jpeg_segments(b, [&](std::uint8_t marker, std::size_t at) {
    if (marker == 0xda || marker == 0xd9) return false;  // start of scan, end of image: no EXIF after them
    const std::size_t length = be16(b, at + 2);
    if (length < 2 || b.size() - at - 2 < length) return false;  // the walk's own end, or cut short
    const Span segment = b.subspan(at + 4, length - 2);
    if (marker != 0xe1 || !starts_with(segment, 0, std::string_view("Exif\0\0", 6))) return true;
    orientation = exif_block_orientation(segment);
    return false;
  });
  return orientation;
}

int png_orientation(Span b) {
  std::size_t at = 8;  // after the signature
  while (at + 8 <= b.size()) {
    const std::size_t length = be32(b, at);
    if (b.size() - at - 8 < length) return 1;
    if (starts_with(b, at + 4, "eXIf")) return exif_block_orientation(b.subspan(at + 8, length));
    if (starts_with(b, at + 4, "IDAT") || starts_with(b, at + 4, "IEND")) return 1;  // eXIf comes before the data
    if (b.size() - at - 8 - length < 4) return 1;
    at += 12 + length;  // length, type, data, CRC
  }
  return 1;
}

int webp_orientation(Span b) {
  std::size_t at = 12;  // "RIFF", size, "WEBP"
  while (at + 8 <= b.size()) {
    const std::size_t size = le32(b, at + 4);
    if (b.size() - at - 8 < size) return 1;
    if (starts_with(b, at, "EXIF")) return exif_block_orientation(b.subspan(at + 8, size));
    at += 8 + size + (size & 1);  // chunks are padded to an even size
  }
  return 1;
}

}  // namespace

int exif_orientation(std::span<const std::uint8_t> bytes) noexcept {
  const auto format = sniff_format(bytes);
  if (!format) return 1;
  switch (*format) {
    case ImageFormat::jpeg:
      return jpeg_orientation(bytes);
    case ImageFormat::png:
      return png_orientation(bytes);
    case ImageFormat::webp:
      return webp_orientation(bytes);
  }
  return 1;
}

void apply_exif_orientation(Image& image, int orientation) {
  if (orientation < 2 || orientation > 8) return;
  const std::size_t w = image.width, h = image.height;
  const bool swaps = orientation >= 5;  // 5..8 exchange width and height
  const std::size_t out_w = swaps ? h : w, out_h = swaps ? w : h;
  std::vector<std::uint8_t> out(image.rgb.size());
  for (std::size_t y = 0; y < out_h; ++y) {
    for (std::size_t x = 0; x < out_w; ++x) {
      // The source pixel of output (x, y), as Pillow's transposes give it: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180,
      // 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90.
      std::size_t sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;
        case 3:
          sx = w - 1 - x, sy = h - 1 - y;
          break;
        case 4:
          sy = h - 1 - y;
          break;
        case 5:
          sx = y, sy = x;
          break;
        case 6:
          sx = y, sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y, sy = h - 1 - x;
          break;
        case 8:
          sx = w - 1 - y, sy = x;
          break;
      }
      std::memcpy(&out[(y * out_w + x) * 3], &image.rgb[(sy * w + sx) * 3], 3);
    }
  }
  image.rgb = std::move(out);
  image.width = static_cast<std::uint32_t>(out_w);
  image.height = static_cast<std::uint32_t>(out_h);
}

}  // namespace flowline::images
