// libjpeg-turbo's chroma upsampling and YCbCr→RGB on tensors (src/images/jpeg_color.hpp), on the CPU: JPEGs made
// here with chosen sampling factors are decoded by libjpeg-turbo twice — to its raw component planes
// (raw_data_out: the IDCT's output, before upsampling) and to RGB with flowline's CPU settings (islow IDCT, fancy
// upsampling) — and the planes put through jpeg_ycc_to_rgb must give that RGB exactly, every pixel. This is what
// makes nvJPEG's planes (NVJPEG_OUTPUT_YUV) come out as PIL's pixels on a GPU, up to nvJPEG's IDCT.
#include "image_files.hpp"
#include "jpeg_writer.hpp"
#include "test_support.hpp"

#include "images/jpeg_color.hpp"
#include "images/nvjpeg.hpp"

#include "flowline/images.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include <jpeglib.h>

using namespace flowline;
using testing::JpegSampling;

namespace {

struct RawPlanes {
  std::vector<at::Tensor> planes;  // uint8 [1, downsampled_height, downsampled_width] per component
  std::vector<images::ChromaRatio> ratios;
};

// libjpeg-turbo's raw_data_out: each component's IDCT output before upsampling and colour conversion (the test
// JPEGs are valid, so libjpeg's default error handler, which exits, is never called).
RawPlanes decode_raw(const Bytes& jpeg) {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.raw_data_out = TRUE;
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  const int n = cinfo.num_components;
  std::vector<std::vector<std::uint8_t>> rows(n);  // each component's rows, width_in_blocks * 8 wide
  std::vector<std::vector<std::uint8_t>> buffers(n);
  std::vector<std::vector<JSAMPROW>> pointers(n);
  std::vector<JSAMPARRAY> arrays(n);
  for (int c = 0; c < n; ++c) {
    const auto& comp = cinfo.comp_info[c];
    const std::size_t stride = std::size_t{comp.width_in_blocks} * DCTSIZE;
    buffers[c].resize(stride * comp.v_samp_factor * DCTSIZE);
    for (int r = 0; r < comp.v_samp_factor * DCTSIZE; ++r) pointers[c].push_back(buffers[c].data() + r * stride);
    arrays[c] = pointers[c].data();
  }
  const JDIMENSION lines = cinfo.max_v_samp_factor * DCTSIZE;
  while (cinfo.output_scanline < cinfo.output_height) {
    REQUIRE(jpeg_read_raw_data(&cinfo, arrays.data(), lines) == lines);
    for (int c = 0; c < n; ++c) rows[c].insert(rows[c].end(), buffers[c].begin(), buffers[c].end());
  }
  RawPlanes raw;
  for (int c = 0; c < n; ++c) {
    const auto& comp = cinfo.comp_info[c];
    const std::int64_t stride = std::int64_t{comp.width_in_blocks} * DCTSIZE;
    const at::Tensor all =
        at::from_blob(rows[c].data(), {static_cast<std::int64_t>(rows[c].size()) / stride, stride}, at::kByte);
    raw.planes.push_back(
        all.narrow(0, 0, comp.downsampled_height).narrow(1, 0, comp.downsampled_width).clone().unsqueeze(0));
    raw.ratios.push_back({cinfo.max_h_samp_factor / comp.h_samp_factor, cinfo.max_v_samp_factor / comp.v_samp_factor});
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return raw;
}

// jpeg_color's RGB from libjpeg-turbo's planes against libjpeg-turbo's RGB (flowline's CPU decoder): the count of
// samples that differ (0 is the contract), with the first one described in `first`.
std::int64_t differences(const Bytes& jpeg, std::string& first) {
  const images::Image cpu = images::decode_image(jpeg);
  const RawPlanes raw = decode_raw(jpeg);
  const at::Tensor rgb = raw.planes.size() == 1 ? images::jpeg_grey_to_rgb(raw.planes[0])
                                                : images::jpeg_ycc_to_rgb(raw.planes[0], raw.planes[1], raw.planes[2],
                                                                          raw.ratios[1], raw.ratios[2]);
  REQUIRE(rgb.sizes() == at::IntArrayRef{1, cpu.height, cpu.width, 3});
  const at::Tensor expected =
      at::from_blob(const_cast<std::uint8_t*>(cpu.rgb.data()), {1, cpu.height, cpu.width, 3}, at::kByte);
  const at::Tensor wrong = rgb.ne(expected);
  const std::int64_t count = wrong.sum().item<std::int64_t>();
  if (count > 0) {
    const at::Tensor at_ = wrong.nonzero()[0];
    const auto y = at_[1].item<std::int64_t>(), x = at_[2].item<std::int64_t>(), c = at_[3].item<std::int64_t>();
    first = fmt::format("first at row {} column {} channel {}: {} against libjpeg's {}", y, x, c,
                        rgb[0][y][x][c].item<int>(), expected[0][y][x][c].item<int>());
  }
  return count;
}

}  // namespace

TEST_CASE("libjpeg-turbo's planes upsampled and converted on tensors are its RGB, every pixel",
          "[images][jpeg_color]") {
  // Sizes: 1xN and Nx1, widths around the 2-sample limit of fancy upsampling (chroma 1, 2, 3 wide), odd ones,
  // sizes not multiples of the MCU (8 or 16), and a photo-like one.
  const std::vector<std::pair<int, int>> sizes{{1, 1},   {1, 37},  {37, 1},  {2, 2},   {3, 5},    {4, 4},   {5, 3},
                                               {6, 7},   {7, 6},   {9, 17},  {17, 9},  {31, 45},  {33, 17}, {40, 30},
                                               {64, 48}, {65, 49}, {127, 1}, {1, 127}, {501, 375}};
  std::int64_t checked = 0;
  unsigned seed = 1;
  for (const JpegSampling& s : {testing::kSampling420, testing::kSampling422, testing::kSampling440,
                                testing::kSampling444, testing::kSamplingMixed, testing::kSamplingGrey}) {
    for (const auto& [width, height] : sizes) {
      for (const bool progressive : {false, true}) {
        if (progressive && (width + height) % 2 == 1) continue;  // progressive for some sizes only
        const Bytes jpeg = testing::make_sampled_jpeg(s, width, height, seed++, progressive);
        INFO(fmt::format("{} {}x{}{}", s.name, width, height, progressive ? " progressive" : ""));
        std::string first;
        CHECK(differences(jpeg, first) == 0);
        if (!first.empty()) INFO(first);
        CHECK(first.empty());
        checked += std::int64_t{width} * height;
      }
    }
  }
  WARN(checked << " pixels compared with libjpeg-turbo's RGB");
}

TEST_CASE("the repository's test JPEGs come out of their planes as the CPU decoder gives them",
          "[images][jpeg_color]") {
  for (const char* name : {"rgb_40x30_q90.jpg", "rgb_31x45_422.jpg", "rgb_33x17_444.jpg", "rgb_64x8_progressive.jpg",
                           "exif_rotated_24x16.jpg", "grey_24x20.jpg"}) {
    INFO(name);
    std::string first;
    CHECK(differences(testing::read_bytes(testing::image_dir() / name), first) == 0);
    CHECK(first == "");
  }
}

TEST_CASE("jpeg_upsample repeats narrow planes, filters wider ones with libjpeg's alternating rounding",
          "[images][jpeg_color]") {
  const auto plane = [](std::vector<std::uint8_t> v, std::int64_t h, std::int64_t w) {
    return at::from_blob(v.data(), {1, h, w}, at::kByte).clone();
  };
  const auto values = [](const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    return std::vector<int>(c.data_ptr<std::uint8_t>(), c.data_ptr<std::uint8_t>() + c.numel());
  };
  // h2v1 over 3 samples: edges kept, 3/4 + 1/4 inside with bias 1 (even outputs) and 2 (odd ones).
  CHECK(values(images::jpeg_upsample(plane({10, 21, 40}, 1, 3), {2, 1})) == std::vector<int>{10, 13, 18, 26, 35, 40});
  // Two samples wide: plain repetition (jdsample.c's h2v1_upsample), not the filter.
  CHECK(values(images::jpeg_upsample(plane({10, 21}, 1, 2), {2, 1})) == std::vector<int>{10, 10, 21, 21});
  // h1v2: rows 3/4 + 1/4, bias 1 for the upper row of each pair and 2 for the lower, edges repeated.
  CHECK(values(images::jpeg_upsample(plane({10, 21}, 2, 1), {1, 2})) == std::vector<int>{10, 13, 18, 21});
  // h2v2 of a 3x1 plane (one row): the row is its own context, so the filter runs along the columns only.
  CHECK(values(images::jpeg_upsample(plane({10, 21, 40}, 1, 3), {2, 2})) ==
        std::vector<int>{10, 13, 18, 26, 35, 40, 10, 13, 18, 26, 35, 40});
  CHECK_THROWS_WITH(images::jpeg_upsample(plane({1}, 1, 1), {4, 1}), testing::contains("a ratio of 4x1"));
  const at::Tensor y = at::zeros({1, 4, 4}, at::kByte), small = at::zeros({1, 1, 2}, at::kByte);
  CHECK_THROWS_WITH(images::jpeg_ycc_to_rgb(y, small, small, {2, 2}, {2, 2}),
                    testing::contains("not the downsampled size of 2x4x4 at 2x2"));
}

TEST_CASE(
    "jpeg_planes reads each component's plane size and ratio as libjpeg does, and names what it leaves to "
    "the CPU",
    "[images][jpeg_color]") {
  const images::JpegPlanes p420 = images::jpeg_planes(testing::make_sampled_jpeg(testing::kSampling420, 501, 375, 1));
  CHECK(p420.problem.empty());
  CHECK(p420.components == 3);
  CHECK((p420.width == 501 && p420.height == 375));
  CHECK((p420.plane_width[0] == 501 && p420.plane_height[0] == 375));
  CHECK((p420.plane_width[1] == 251 && p420.plane_height[1] == 188 && p420.plane_width[2] == 251));
  CHECK((p420.ratio_across[0] == 1 && p420.ratio_down[0] == 1 && p420.ratio_across[2] == 2 && p420.ratio_down[2] == 2));
  const images::JpegPlanes p440 = images::jpeg_planes(testing::make_sampled_jpeg(testing::kSampling440, 31, 45, 2));
  CHECK((p440.plane_width[1] == 31 && p440.plane_height[1] == 23 && p440.ratio_across[1] == 1 &&
         p440.ratio_down[1] == 2));
  const images::JpegPlanes mixed = images::jpeg_planes(testing::make_sampled_jpeg(testing::kSamplingMixed, 9, 5, 3));
  CHECK((mixed.plane_width[1] == 5 && mixed.plane_height[1] == 3 && mixed.plane_width[2] == 9 &&
         mixed.plane_height[2] == 3));
  const images::JpegPlanes grey = images::jpeg_planes(testing::make_sampled_jpeg(testing::kSamplingGrey, 7, 3, 4));
  CHECK((grey.problem.empty() && grey.components == 1 && grey.plane_width[0] == 7 && grey.plane_height[0] == 3));
  constexpr testing::JpegSampling k411{4, 1, 1, 1, 1, 1, "4:1:1"};
  CHECK(images::jpeg_planes(testing::make_sampled_jpeg(k411, 16, 8, 5)).problem ==
        "chroma sampled 1 in 4x1 (flowline upsamples 1 in 2 at most)");
  CHECK(images::jpeg_planes(testing::read_bytes(testing::image_dir() / "rgb_30x20.png")).problem == "not a JPEG");
}
