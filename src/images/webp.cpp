// WebP through libwebp's animation decoder, as Pillow decodes every WebP file (a still image is one frame):
// the first frame on its canvas in RGBA, alpha dropped by convert("RGB") without compositing.
#include "decoders.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <memory>

#include <webp/decode.h>
#include <webp/demux.h>

namespace flowline::images::detail {

namespace {

struct AnimDecoderDeleter {
  void operator()(WebPAnimDecoder* decoder) const { WebPAnimDecoderDelete(decoder); }
};

std::string_view status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "truncated (the data ends before the image does)";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "corrupt data";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "uses a feature libwebp does not support";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    default:
      return "invalid file";
  }
}

}  // namespace

Image decode_webp(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features{};
  if (VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features); status != VP8_STATUS_OK)
    fail("WebP", status_text(status));
  check_size("WebP", static_cast<std::uint32_t>(features.width), static_cast<std::uint32_t>(features.height), limits);
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) fail("WebP", "libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData data{bytes.data(), bytes.size()};
  std::unique_ptr<WebPAnimDecoder, AnimDecoderDeleter> decoder(WebPAnimDecoderNew(&data, &options));
  if (!decoder) fail("WebP", "invalid or truncated file (the demuxer refused it)");
  WebPAnimInfo info{};
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) fail("WebP", "invalid file (no canvas)");
  check_size("WebP", info.canvas_width, info.canvas_height, limits);
  std::uint8_t* canvas = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &canvas, &timestamp) || canvas == nullptr)
    fail("WebP", "invalid or truncated image data");
  Image out;
  out.width = info.canvas_width;
  out.height = info.canvas_height;
  const std::size_t pixels = std::size_t{out.width} * out.height;
  out.rgb.resize(pixels * 3);
  for (std::size_t i = 0; i < pixels; ++i) {
    out.rgb[i * 3] = canvas[i * 4];
    out.rgb[i * 3 + 1] = canvas[i * 4 + 1];
    out.rgb[i * 3 + 2] = canvas[i * 4 + 2];
  }
  return out;
}

}  // namespace flowline::images::detail
