// PNG through libspng: the samples are decoded as stored (SPNG_FMT_RAW: packed, big-endian, no gamma, no tRNS)
// and converted here the way Pillow's PNG plugin and convert("RGB") do it:
//   grey 1/2/4-bit: scaled to 0..255 (x255, x85, x17); grey 16-bit: Pillow's I;16 -> RGB clips at 255;
//   RGB, grey+alpha and RGBA 16-bit: the high byte of each sample; alpha and tRNS dropped (no compositing);
//   palette: looked up, an index past the palette gives black, transparency dropped.
#include "decoders.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include <spng.h>

namespace flowline::images::detail {

namespace {

struct ContextDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};

[[noreturn]] void spng_fail(int code, std::string_view during) {
  if (code == SPNG_IO_EOF || code == SPNG_EOF)
    fail("PNG", fmt::format("truncated (the data ends while reading the {})", during));
  fail("PNG", fmt::format("{} (while reading the {})", spng_strerror(code), during));
}

// Sample x of a packed row of `depth`-bit samples (1, 2, 4, 8 or 16; 16-bit ones big-endian).
unsigned sample(const std::uint8_t* row, std::size_t x, unsigned depth) {
  switch (depth) {
    case 16:
      return (unsigned{row[2 * x]} << 8) | row[2 * x + 1];
    case 8:
      return row[x];
    default: {
      const std::size_t bit = x * depth;
      const unsigned shift = 8 - depth - static_cast<unsigned>(bit % 8);
      return (row[bit / 8] >> shift) & ((1u << depth) - 1);
    }
  }
}

std::uint8_t grey_to_8bit(unsigned v, unsigned depth) {
  switch (depth) {
    case 1:
      return static_cast<std::uint8_t>(v * 255);
    case 2:
      return static_cast<std::uint8_t>(v * 85);
    case 4:
      return static_cast<std::uint8_t>(v * 17);
    case 8:
      return static_cast<std::uint8_t>(v);
    default:
      return static_cast<std::uint8_t>(std::min(v, 255u));  // Pillow's I;16 -> L clips
  }
}

void convert_row(const std::uint8_t* row, std::uint8_t* out, std::size_t width, const spng_ihdr& ihdr,
                 const spng_plte& plte) {
  const unsigned depth = ihdr.bit_depth;
  // 8- or 16-bit sample s of pixel x, taken as Pillow keeps it (the high byte of a 16-bit one).
  const auto byte_of = [&](std::size_t x, unsigned channels, unsigned s) {
    return depth == 16 ? row[(x * channels + s) * 2] : row[x * channels + s];
  };
  for (std::size_t x = 0; x < width; ++x) {
    std::uint8_t* o = out + x * 3;
    switch (ihdr.color_type) {
      case SPNG_COLOR_TYPE_GRAYSCALE:
        o[0] = o[1] = o[2] = grey_to_8bit(sample(row, x, depth), depth);
        break;
      case SPNG_COLOR_TYPE_TRUECOLOR:
      case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: {
        const unsigned channels = ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR ? 3 : 4;
        o[0] = byte_of(x, channels, 0), o[1] = byte_of(x, channels, 1), o[2] = byte_of(x, channels, 2);
        break;
      }
      case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
        o[0] = o[1] = o[2] = byte_of(x, 2, 0);
        break;
      case SPNG_COLOR_TYPE_INDEXED: {
        const unsigned index = sample(row, x, depth);
        if (index < plte.n_entries) {
          o[0] = plte.entries[index].red, o[1] = plte.entries[index].green, o[2] = plte.entries[index].blue;
        } else {
          o[0] = o[1] = o[2] = 0;
        }
        break;
      }
      default:
        fail("PNG", fmt::format("unknown colour type {}", ihdr.color_type));
    }
  }
}

}  // namespace

Image decode_png(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) {
  std::unique_ptr<spng_ctx, ContextDeleter> ctx(spng_ctx_new(0));
  if (!ctx) throw std::bad_alloc();
  // No chunk can be longer than the file; text and ICC profiles decompressed into the cache stay bounded.
  spng_set_chunk_limits(ctx.get(), std::max<std::size_t>(bytes.size(), 1), std::size_t{32} << 20);
  if (int rc = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size())) spng_fail(rc, "signature");
  spng_ihdr ihdr{};
  if (int rc = spng_get_ihdr(ctx.get(), &ihdr)) spng_fail(rc, "header");
  check_size("PNG", ihdr.width, ihdr.height, limits);
  spng_plte plte{};
  if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
    if (int rc = spng_get_plte(ctx.get(), &plte)) spng_fail(rc, "palette");
  }
  std::size_t raw_size = 0;
  if (int rc = spng_decoded_image_size(ctx.get(), SPNG_FMT_RAW, &raw_size)) spng_fail(rc, "header");
  std::vector<std::uint8_t> raw(raw_size);
  if (int rc = spng_decode_image(ctx.get(), raw.data(), raw.size(), SPNG_FMT_RAW, 0)) spng_fail(rc, "image data");
  Image out;
  out.width = ihdr.width;
  out.height = ihdr.height;
  const std::size_t width = ihdr.width;
  const std::size_t stride = raw_size / ihdr.height;
  out.rgb.resize(width * out.height * 3);
  for (std::size_t y = 0; y < out.height; ++y)
    convert_row(raw.data() + y * stride, out.rgb.data() + y * width * 3, width, ihdr, plte);
  return out;
}

}  // namespace flowline::images::detail
