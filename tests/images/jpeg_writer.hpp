// Test JPEGs made in the test with libjpeg's compressor: RGB with a chosen chroma subsampling (or any sampling
// factors), progressive or not, grayscale, and CMYK (Adobe's inverted convention, as Pillow writes it).
// Header-only, for test_gpu_decode (test_gpu_decode.cpp, test_jpeg_color.cpp).
// The pixels are a deterministic mix of smooth gradients, sharp coloured edges and noise, so both the IDCT and
// the chroma upsampling are exercised.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include <jpeglib.h>

namespace flowline::testing {

enum class JpegKind { rgb420, rgb422, rgb444, progressive420, grayscale, cmyk };

struct JpegSpec {
  JpegKind kind = JpegKind::rgb420;
  int width = 64;
  int height = 48;
  int quality = 90;
  unsigned seed = 1;
};

// The pixels written for a spec: interleaved, 3 components (1 for grayscale, 4 for CMYK).
inline std::vector<std::uint8_t> jpeg_test_pixels(const JpegSpec& s, int components) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(s.width) * s.height * components);
  unsigned state = s.seed * 2654435761u + 12345u;
  for (int y = 0; y < s.height; ++y) {
    for (int x = 0; x < s.width; ++x) {
      state = state * 1664525u + 1013904223u;
      const int noise = static_cast<int>((state >> 24) % 17) - 8;
      const bool block = ((x / 13) + (y / 11)) % 3 == 0;
      for (int c = 0; c < components; ++c) {
        int v = (x * 255 / std::max(1, s.width - 1) * (c + 1) + y * 255 / std::max(1, s.height - 1) * (3 - c)) / 3;
        if (block) v = c % 2 == 0 ? 230 - v / 4 : 20 + v / 5;
        v += noise;
        px[(static_cast<std::size_t>(y) * s.width + x) * components + c] =
            static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
      }
    }
  }
  return px;
}

inline std::vector<std::uint8_t> make_test_jpeg(const JpegSpec& s) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  const int components = s.kind == JpegKind::grayscale ? 1 : (s.kind == JpegKind::cmyk ? 4 : 3);
  cinfo.image_width = static_cast<JDIMENSION>(s.width);
  cinfo.image_height = static_cast<JDIMENSION>(s.height);
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : (components == 4 ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, s.quality, TRUE);
  if (components == 3) {
    const bool h2 = s.kind == JpegKind::rgb420 || s.kind == JpegKind::rgb422 || s.kind == JpegKind::progressive420;
    const bool v2 = s.kind == JpegKind::rgb420 || s.kind == JpegKind::progressive420;
    cinfo.comp_info[0].h_samp_factor = h2 ? 2 : 1;
    cinfo.comp_info[0].v_samp_factor = v2 ? 2 : 1;
  }
  if (s.kind == JpegKind::progressive420) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<std::uint8_t> pixels = jpeg_test_pixels(s, components);
  if (components == 4) {
    for (auto& v : pixels) v = static_cast<std::uint8_t>(255 - v);  // Adobe's inverted CMYK, as Pillow writes
  }
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = pixels.data() + static_cast<std::size_t>(cinfo.next_scanline) * s.width * components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<std::uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

// Sampling factors (across, down) of Y, Cb and Cr for make_sampled_jpeg; grey when cb_h is 0.
struct JpegSampling {
  int y_h, y_v, cb_h, cb_v, cr_h, cr_v;
  const char* name;
};
inline constexpr JpegSampling kSampling420{2, 2, 1, 1, 1, 1, "4:2:0"}, kSampling422{2, 1, 1, 1, 1, 1, "4:2:2"},
    kSampling440{1, 2, 1, 1, 1, 1, "4:4:0"}, kSampling444{1, 1, 1, 1, 1, 1, "4:4:4"},
    kSamplingMixed{2, 2, 1, 1, 2, 1, "Cb 4:2:0, Cr 4:2:2"}, kSamplingGrey{1, 1, 0, 0, 0, 0, "grey"};

// A JPEG of jpeg_test_pixels with the given sampling factors (quality 85), baseline or progressive.
inline std::vector<std::uint8_t> make_sampled_jpeg(const JpegSampling& s, int width, int height, unsigned seed,
                                                   bool progressive = false) {
  const bool grey = s.cb_h == 0;
  const int components = grey ? 1 : 3;
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = components;
  cinfo.in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 85, TRUE);
  if (!grey) {
    const int factors[3][2] = {{s.y_h, s.y_v}, {s.cb_h, s.cb_v}, {s.cr_h, s.cr_v}};
    for (int c = 0; c < 3; ++c) {
      cinfo.comp_info[c].h_samp_factor = factors[c][0];
      cinfo.comp_info[c].v_samp_factor = factors[c][1];
    }
  }
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<std::uint8_t> pixels = jpeg_test_pixels({JpegKind::rgb420, width, height, 90, seed}, components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = pixels.data() + static_cast<std::size_t>(cinfo.next_scanline) * width * components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<std::uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

}  // namespace flowline::testing
