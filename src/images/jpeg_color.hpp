// src/images/jpeg_color.hpp — libjpeg-turbo's last two decoding steps, chroma upsampling and YCbCr→RGB, done on
// tensors so that a JPEG decoded to planes on a GPU (nvJPEG's NVJPEG_OUTPUT_YUV) gets the CPU decoder's pixels.
// Part of what image executors compile (the ClipEncoder's library builds it); LibTorch ops only, so it runs on
// whichever device the planes are on, and the CPU test (tests/images/test_jpeg_color.cpp) checks it against
// libjpeg-turbo itself, bit for bit.
//
// The contract: given the component planes libjpeg-turbo's IDCT gives (its raw_data_out planes, cropped to each
// component's downsampled_width x downsampled_height), the result equals what libjpeg-turbo gives for the same
// JPEG with flowline's CPU settings (src/images/jpeg.cpp: fancy upsampling on, RGB out) — every pixel:
// - upsampling as jdsample.c chooses it per component: a component at full size is taken as it is; 2:1
//   horizontally (h2v1) and 2:1 both ways (h2v2) use the triangle filter ("fancy", with libjpeg's alternating
//   rounding bias and its edge rows and columns repeated) when the plane is wider than 2 samples, else plain
//   replication; 2:1 vertically only (h1v2, 4:4:0) always the triangle filter;
// - colour as jdcolor.c's ycc_rgb_convert: 16-bit fixed point, each channel rounded as its tables round, then
//   clamped to 0..255.
// Other sampling ratios (4:1:1, a luma plane smaller than a chroma one) are not handled: the caller leaves such
// JPEGs to the CPU decoder. Pure functions of their inputs; any thread.
#pragma once

#include <ATen/core/Tensor.h>

namespace flowline::images {

// How much a component is upsampled: the frame's largest sampling factor over the component's, per direction
// (1 or 2).
struct ChromaRatio {
  int horizontal = 1;
  int vertical = 1;
  bool operator==(const ChromaRatio&) const = default;
};

// y: uint8 [N, H, W]; cb, cr: uint8 [N, ceil(H / ratio.vertical), ceil(W / ratio.horizontal)] (any strides, any
// one device). Returns uint8 [N, H, W, 3] RGB, contiguous, on that device. Throws flowline::Error when a shape or
// ratio is not one of the above.
at::Tensor jpeg_ycc_to_rgb(const at::Tensor& y, const at::Tensor& cb, const at::Tensor& cr, ChromaRatio cb_ratio,
                           ChromaRatio cr_ratio);

// A one-component JPEG's luma y [N, H, W] as RGB [N, H, W, 3] with R = G = B (libjpeg's grey, as PIL's
// convert("RGB") gives it).
at::Tensor jpeg_grey_to_rgb(const at::Tensor& y);

// One component plane upsampled as libjpeg-turbo does (see the top): uint8 [N, h, w] to uint8
// [N, h * vertical, w * horizontal] (the caller crops to the image). Exposed for the tests.
at::Tensor jpeg_upsample(const at::Tensor& plane, ChromaRatio ratio);

}  // namespace flowline::images
