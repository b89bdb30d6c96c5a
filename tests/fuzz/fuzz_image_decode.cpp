// Fuzz target: flowline::images::decode_image on any bytes (JPEG through libjpeg-turbo, PNG through libspng, WebP
// through libwebp). Properties: bad bytes are a flowline::InputError (never another exception, a crash or an
// exit); a decoded image has as many RGB bytes as its size says, and no more pixels than the limit; the EXIF
// orientation read from the same bytes is 1..8 and turning the image by it keeps its pixel count.
#include "flowline/error.hpp"
#include "flowline/images.hpp"

#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A small limit keeps each run fast; the header check before allocation is what is exercised.
  const flowline::images::DecodeLimits limits{.max_pixels = 1u << 20};
  try {
    const auto image = flowline::images::decode_image(std::span(data, size), limits);
    const std::uint64_t pixels = std::uint64_t{image.width} * image.height;
    if (pixels == 0 || pixels > limits.max_pixels) flowline::fuzz::broken("an image past the limits decoded");
    if (image.rgb.size() != pixels * 3) flowline::fuzz::broken("RGB bytes not width x height x 3");
    auto turned = image;
    flowline::images::apply_exif_orientation(turned, flowline::images::exif_orientation(std::span(data, size)));
    if (std::uint64_t{turned.width} * turned.height != pixels || turned.rgb.size() != image.rgb.size())
      flowline::fuzz::broken("the EXIF orientation changed the pixel count");
  } catch (const flowline::InputError&) {
  }
  const int orientation = flowline::images::exif_orientation(std::span(data, size));
  if (orientation < 1 || orientation > 8) flowline::fuzz::broken("an EXIF orientation outside 1..8");
  return 0;
}
