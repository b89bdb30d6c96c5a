// libjpeg-turbo's fancy upsampling and YCbCr→RGB on tensors (jpeg_color.hpp). Every step is integer arithmetic
// on int32 tensors, written after libjpeg-turbo's jdsample.c and jdcolor.c (what they compute, not their code):
// the same sums, biases and shifts, so the result is theirs exactly on any device.
#include "jpeg_color.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstdint>

namespace flowline::images {
namespace {

// x's neighbour along `dim` one step back (step < 0) or forward, the first or last slice repeated at the edge:
// libjpeg's context rows at the top and bottom of an image repeat its first and last real sample rows, and its
// edge columns' special cases equal the general formula with the edge sample repeated.
at::Tensor neighbour(const at::Tensor& x, std::int64_t dim, int step) {
  const std::int64_t n = x.size(dim);
  if (n == 1) return x;
  if (step < 0) return at::cat({x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)}, dim);
  return at::cat({x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)}, dim);
}

// out[2i] = first[i], out[2i + 1] = second[i] along `dim`.
at::Tensor interleave(const at::Tensor& first, const at::Tensor& second, std::int64_t dim) {
  auto sizes = first.sizes().vec();
  sizes[static_cast<std::size_t>(dim)] *= 2;
  return at::stack({first, second}, dim + 1).reshape(sizes);
}

at::Tensor shift_right(const at::Tensor& x, int bits) { return at::bitwise_right_shift(x, bits); }

// h2v1 and the horizontal half of h2v2: output 2j is 3/4 of sample j and 1/4 of sample j-1, output 2j+1 3/4 of j
// and 1/4 of j+1, rounded with bias `even_bias` and `odd_bias` before the shift (libjpeg alternates them so .5
// rounds down at even columns and up at odd ones). At the edges the repeated sample makes 4x + bias >> shift = x
// (h2v1) or 4x's colsum (h2v2), as libjpeg's special cases give.
at::Tensor fancy_columns(const at::Tensor& x, int even_bias, int odd_bias, int bits) {
  const at::Tensor three = x * 3;
  const at::Tensor even = shift_right(at::add(three, neighbour(x, 2, -1)).add_(even_bias), bits);
  const at::Tensor odd = shift_right(at::add(three, neighbour(x, 2, +1)).add_(odd_bias), bits);
  return interleave(even, odd, 2);
}

// The vertical half: row 2i is 3/4 of row i and 1/4 of row i-1, row 2i+1 3/4 of i and 1/4 of i+1; unrounded
// (h2v2 rounds once, after the columns) or rounded with biases 1 and 2 (h1v2), again alternating.
at::Tensor fancy_rows(const at::Tensor& x, bool round) {
  at::Tensor upper = at::add(neighbour(x, 1, -1), x, 3), lower = at::add(neighbour(x, 1, +1), x, 3);
  if (round) {
    upper = shift_right(upper.add_(1), 2);
    lower = shift_right(lower.add_(2), 2);
  }
  return interleave(upper, lower, 1);
}

// The plane [N, h, w] as int32, upsampled by `ratio` as jdsample.c's method for it does.
at::Tensor upsample_int(const at::Tensor& plane, ChromaRatio ratio) {
  const at::Tensor x = plane.to(at::kInt);
  // jdsample.c uses the triangle filter for h2v1 and h2v2 only on planes wider than 2 samples; h1v2 always.
  const bool fancy = x.size(2) > 2;
  if (ratio == ChromaRatio{1, 1}) return x;
  if (ratio == ChromaRatio{2, 1}) return fancy ? fancy_columns(x, 1, 2, 2) : interleave(x, x, 2);
  if (ratio == ChromaRatio{1, 2}) return fancy_rows(x, true);
  if (ratio == ChromaRatio{2, 2}) {
    if (!fancy) {
      const at::Tensor rows = interleave(x, x, 1);
      return interleave(rows, rows, 2);
    }
    return fancy_columns(fancy_rows(x, false), 8, 7, 4);
  }
  throw Error(
      fmt::format("JPEG upsampling: a ratio of {}x{} is not 1 or 2 each way", ratio.horizontal, ratio.vertical));
}

void check_plane(const at::Tensor& plane, const char* name) {
  if (plane.dim() != 3 || plane.scalar_type() != at::kByte)
    throw Error(fmt::format("JPEG colour: {} must be a uint8 [N, h, w] tensor, not {} of {} dimensions", name,
                            c10::toString(plane.scalar_type()), plane.dim()));
}

// The chroma planes [n, h, w] upsampled and cropped to [n, height, width], after checking they are libjpeg's
// downsampled size.
at::Tensor full_size(const at::Tensor& plane, ChromaRatio ratio, std::int64_t n, std::int64_t height,
                     std::int64_t width, const char* name) {
  check_plane(plane, name);
  const bool ratio_ok = ratio.horizontal >= 1 && ratio.horizontal <= 2 && ratio.vertical >= 1 && ratio.vertical <= 2;
  if (!ratio_ok || plane.size(0) != n || plane.size(1) != (height + ratio.vertical - 1) / ratio.vertical ||
      plane.size(2) != (width + ratio.horizontal - 1) / ratio.horizontal)
    throw Error(fmt::format("JPEG colour: {} is {}x{}x{}, not the downsampled size of {}x{}x{} at {}x{}", name,
                            plane.size(0), plane.size(1), plane.size(2), n, height, width, ratio.horizontal,
                            ratio.vertical));
  return upsample_int(plane, ratio).narrow(1, 0, height).narrow(2, 0, width);
}

// jdcolor.c's fixed point: FIX(x) = x * 2^16 rounded, ONE_HALF = 2^15.
constexpr std::int64_t fix(double x) { return static_cast<std::int64_t>(x * 65536 + 0.5); }
constexpr std::int64_t kHalf = 1 << 15;

}  // namespace

at::Tensor jpeg_upsample(const at::Tensor& plane, ChromaRatio ratio) {
  check_plane(plane, "the plane");
  return upsample_int(plane, ratio).to(at::kByte);
}

at::Tensor jpeg_ycc_to_rgb(const at::Tensor& y, const at::Tensor& cb, const at::Tensor& cr, ChromaRatio cb_ratio,
                           ChromaRatio cr_ratio) {
  check_plane(y, "y");
  const std::int64_t n = y.size(0), height = y.size(1), width = y.size(2);
  at::Tensor cb_full, cr_full;
  if (cb_ratio == cr_ratio && cb.sizes() == cr.sizes()) {  // the usual case: both planes in one pass
    const at::Tensor both = full_size(at::cat({cb, cr}, 0), cb_ratio, 2 * n, height, width, "cb and cr");
    cb_full = both.narrow(0, 0, n);
    cr_full = both.narrow(0, n, n);
  } else {
    cb_full = full_size(cb, cb_ratio, n, height, width, "cb");
    cr_full = full_size(cr, cr_ratio, n, height, width, "cr");
  }
  const at::Tensor luma = y.to(at::kInt);
  const at::Tensor cb0 = cb_full - 128, cr0 = cr_full - 128;
  // Red and blue: each table entry rounded on its own (RIGHT_SHIFT(FIX(k) * x + ONE_HALF, 16)); green: the two
  // products summed with one ONE_HALF, then shifted (jdcolor.c's Cb_g_tab and Cr_g_tab). Arithmetic shifts.
  const at::Tensor red = luma + shift_right(cr0 * fix(1.40200) + kHalf, 16);
  const at::Tensor green = luma + shift_right(at::add(cb0 * -fix(0.34414), cr0, -fix(0.71414)) + kHalf, 16);
  const at::Tensor blue = luma + shift_right(cb0 * fix(1.77200) + kHalf, 16);
  return at::stack({red, green, blue}, 3).clamp_(0, 255).to(at::kByte);
}

at::Tensor jpeg_grey_to_rgb(const at::Tensor& y) {
  check_plane(y, "y");
  return y.unsqueeze(3).expand({y.size(0), y.size(1), y.size(2), 3}).contiguous();
}

}  // namespace flowline::images
