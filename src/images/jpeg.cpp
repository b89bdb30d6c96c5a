// JPEG through libjpeg(-turbo), set up as Pillow sets it up: islow IDCT and fancy upsampling (libjpeg's
// defaults), grayscale, RGB or CMYK output chosen by the number of components, CMYK taken in Adobe's inverted
// convention and converted to RGB with Pillow's formula. EXIF orientation is not applied (Image.open does not).
//
// libjpeg reports errors through error_exit, which must not return: it longjmps back to run_libjpeg, whose
// frame holds only trivially destructible locals (a longjmp skips destructors); everything that owns memory
// lives in decode_jpeg's frame and is released however run_libjpeg ends.
#include "decoders.hpp"

#include "flowline/error.hpp"

#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <vector>

#include <jerror.h>
#include <jpeglib.h>

namespace flowline::images::detail {

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings are ignored as Pillow ignores them, except the end of the data before the end of the image: Pillow
// refuses a truncated file ("image file is truncated") where libjpeg would pad it with grey.
void on_message(j_common_ptr cinfo, int level) {
  if (level != -1 || cinfo->err->msg_code != JWRN_JPEG_EOF) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof err->message, "truncated (the data ends before the image does)");
  std::longjmp(err->jump, 1);
}

// Owns libjpeg's state; jpeg_destroy_decompress is safe on a zeroed or half-made struct.
struct Decompressor {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  Decompressor() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }
};

// Pillow's CMYK;I unpacking (255 - sample) followed by its cmyk2rgb: nk - nk * c / 255, rounded as MULDIV255.
std::uint8_t cmyk_channel(std::uint8_t inverted_ink, std::uint8_t inverted_black) {
  const int c = 255 - inverted_ink;
  const int nk = inverted_black;
  const int tmp = c * nk + 128;
  const int v = nk - (((tmp >> 8) + tmp) >> 8);
  return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// A grayscale (1 component) or CMYK (4) row into RGB; the component count chosen once a row, not once a pixel.
void convert_row(const std::uint8_t* row, std::uint8_t* out, std::size_t width, int components) {
  if (components == 1) {
    for (std::size_t x = 0; x < width; ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = row[x];
  } else {
    for (std::size_t x = 0; x < width; ++x) {
      const std::uint8_t* p = row + x * 4;
      std::uint8_t* o = out + x * 3;
      o[0] = cmyk_channel(p[0], p[3]), o[1] = cmyk_channel(p[1], p[3]), o[2] = cmyk_channel(p[2], p[3]);
    }
  }
}

// Returns false with d.err.message set when libjpeg failed. Only trivially destructible locals: see the top.
bool run_libjpeg(Decompressor& d, std::span<const std::uint8_t> bytes, const DecodeLimits& limits, Image& out,
                 std::vector<std::uint8_t>& row) {
  jpeg_decompress_struct& cinfo = d.cinfo;
  if (setjmp(d.err.jump)) return false;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  check_size("JPEG", cinfo.image_width, cinfo.image_height, limits);
  const int components = cinfo.num_components;
  if (components == 1) {
    cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (components == 3) {
    cinfo.out_color_space = JCS_RGB;
  } else if (components == 4) {
    cinfo.out_color_space = JCS_CMYK;  // libjpeg turns YCCK into CMYK
  } else {
    fail("JPEG", "has " + std::to_string(components) + " components (expected 1, 3 or 4, as Pillow does)");
  }
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  const std::size_t width = cinfo.output_width;
  out.width = cinfo.output_width;
  out.height = cinfo.output_height;
  out.rgb.resize(width * out.height * 3);
  // RGB rows go straight into the image; grayscale and CMYK through a row of their own (when RGB went that way
  // too, its copy a pixel took three quarters of libjpeg-turbo's own time: perf, session 37).
  const bool rgb = cinfo.output_components == 3;
  if (!rgb) row.resize(width * static_cast<std::size_t>(cinfo.output_components));
  while (cinfo.output_scanline < cinfo.output_height) {
    const std::size_t y = cinfo.output_scanline;
    std::uint8_t* const target = out.rgb.data() + y * width * 3;
    JSAMPROW rows[1] = {rgb ? target : row.data()};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
      std::snprintf(d.err.message, sizeof d.err.message, "truncated (no data for row %zu)", y);
      return false;
    }
    if (!rgb) convert_row(row.data(), target, width, cinfo.output_components);
  }
  // No jpeg_finish_decompress: every row is read, and a file whose only fault is a missing EOI marker decodes.
  return true;
}

}  // namespace

Image decode_jpeg(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) {
  Decompressor d;
  Image out;
  std::vector<std::uint8_t> row;
  if (!run_libjpeg(d, bytes, limits, out, row)) fail("JPEG", d.err.message);
  return out;
}

}  // namespace flowline::images::detail
