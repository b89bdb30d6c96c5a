// nvJPEG decoding (src/images/nvjpeg.hpp, the ClipEncoder's gpu_decode.hpp): which JPEGs it is given, the
// gpu_decode parameter on a machine without a GPU, and — on a GPU with libnvjpeg — its pixels against the CPU
// decoder's on JPEGs made here, and ClipEncoder embeddings of GPU-decoded images against CPU-decoded ones.
#include "image_files.hpp"
#include "jpeg_writer.hpp"
#include "test_support.hpp"

#include "gpu_decode.hpp"
#include "images/nvjpeg.hpp"

#include "flowline/clip_encoder/clip_encoder.hpp"
#include "flowline/device.hpp"
#include "flowline/flow.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/images.hpp"
#include "flowline/registry.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace flowline;
using testing::JpegKind;
using testing::JpegSpec;
using testing::make_test_jpeg;

namespace {

namespace fs = std::filesystem;

Registry& gpu_decode_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    clip_encoder::register_clip_encoder(*r);
    return r;
  }();
  return *registry;
}

struct Encoded {
  at::Tensor embeddings;
  double gpu_images = 0, cpu_images = 0;
};

// With warmup the replicas start by decoding grey JPEGs (through nvJPEG on a GPU with gpu_decode): not counted.
Encoded encode_jpegs(const std::vector<Bytes>& jpegs, const std::string& device, const std::string& gpu_decode,
                     bool warmup = false, double cpu_decode_share = 0) {
  Flow flow(FlowOptions{}, gpu_decode_registry());
  flow.add({.name = "clip",
            .uses = "ClipEncoder",
            .with = {{"model", (fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models/clip").string()},
                     {"gpu_decode", gpu_decode},
                     {"cpu_decode_share", cpu_decode_share},
                     {"warmup", warmup}},
            .device = device});
  DocumentArray docs;
  for (const auto& bytes : jpegs) {
    Document d;
    d.blob = bytes;
    docs.push_back(std::move(d));
  }
  const DocumentArray out = flow.post("/encode", std::move(docs));
  Encoded e{out.embeddings().to(at::kCPU)};
  for (const auto& replica : flow.stats().replicas) {
    if (auto it = replica.metrics.find("gpu_decode_images"); it != replica.metrics.end()) e.gpu_images += it->second;
    if (auto it = replica.metrics.find("cpu_decode_images"); it != replica.metrics.end()) e.cpu_images += it->second;
  }
  return e;
}

// The JPEGs both decoders should agree on: sizes odd and even, small and photo-like, every subsampling.
std::vector<JpegSpec> gpu_specs() {
  return {{JpegKind::rgb420, 64, 48, 90, 1},        {JpegKind::rgb420, 501, 375, 85, 2},
          {JpegKind::rgb420, 33, 17, 95, 3},        {JpegKind::rgb422, 31, 45, 85, 4},
          {JpegKind::rgb444, 40, 30, 95, 5},        {JpegKind::rgb444, 375, 500, 90, 6},
          {JpegKind::progressive420, 64, 8, 80, 7}, {JpegKind::progressive420, 320, 241, 75, 8},
          {JpegKind::grayscale, 24, 20, 90, 9},     {JpegKind::grayscale, 257, 129, 90, 10},
          {JpegKind::rgb420, 1, 1, 90, 11},         {JpegKind::rgb420, 2048, 1536, 80, 12}};
}

}  // namespace

TEST_CASE("nvJPEG is given baseline and progressive JPEGs and the CPU everything else", "[images][gpu_decode]") {
  CHECK(images::nvjpeg_takes(make_test_jpeg({JpegKind::rgb420, 40, 30})).empty());
  CHECK(images::nvjpeg_takes(make_test_jpeg({JpegKind::rgb444, 41, 31})).empty());
  CHECK(images::nvjpeg_takes(make_test_jpeg({JpegKind::progressive420, 64, 8})).empty());
  CHECK(images::nvjpeg_takes(make_test_jpeg({JpegKind::grayscale, 24, 20})).empty());
  CHECK(images::nvjpeg_takes(make_test_jpeg({JpegKind::cmyk, 20, 16})) == "4 components (CMYK or YCCK)");
  CHECK(images::nvjpeg_takes(testing::read_bytes(testing::image_dir() / "cmyk_20x16.jpg")) ==
        "4 components (CMYK or YCCK)");
  Bytes cut = make_test_jpeg({JpegKind::rgb420, 40, 30});
  cut.resize(cut.size() / 2);
  CHECK(images::nvjpeg_takes(cut) == "no EOI marker at the end");
  CHECK(images::nvjpeg_takes(testing::read_bytes(testing::image_dir() / "rgb_30x20.png")) == "not a JPEG");
  CHECK(images::nvjpeg_takes(Bytes{}) == "not a JPEG");
  // An arithmetic-coded frame (SOF9): libjpeg-turbo decodes it, nvJPEG does not.
  Bytes arithmetic = make_test_jpeg({JpegKind::rgb420, 16, 16});
  for (std::size_t i = 2; i + 1 < arithmetic.size(); ++i) {
    if (arithmetic[i] == 0xff && arithmetic[i + 1] == 0xc0) {
      arithmetic[i + 1] = 0xc9;
      break;
    }
  }
  CHECK(images::nvjpeg_takes(arithmetic) == "arithmetic coding");
  // The executor's warm-up JPEG: one nvJPEG takes, uniform grey as the CPU decodes it.
  const Bytes grey = images::grey_jpeg(33, 17);
  CHECK(images::nvjpeg_takes(grey).empty());
  const images::Image decoded = images::decode_image(grey);
  CHECK(decoded.width == 33);
  CHECK(decoded.height == 17);
  CHECK(std::all_of(decoded.rgb.begin(), decoded.rgb.end(), [](std::uint8_t v) { return v == 128; }));
  CHECK_THROWS_WITH(images::grey_jpeg(0, 5), testing::contains("0x5 is not a JPEG size"));
}

TEST_CASE("libnvjpeg is found beside torch or where FLOWLINE_NVJPEG says, else the places looked at are named",
          "[images][gpu_decode]") {
  const auto folders = clip_encoder::nvjpeg_folders();
  REQUIRE(!folders.empty());
  const images::NvjpegLibrary& library = images::load_nvjpeg(folders);
  const char* env = std::getenv("FLOWLINE_NVJPEG");
  const fs::path beside_torch = folders.back().parent_path().parent_path() / "cu13/lib/libnvjpeg.so.13";
  if (library.loaded) {
    CHECK(library.problem.empty());
    CHECK(fs::path(library.path).filename() == "libnvjpeg.so.13");
    if (env == nullptr && fs::exists(beside_torch)) CHECK(fs::equivalent(library.path, beside_torch));
  } else {
    CHECK_THAT(library.problem, testing::contains("libnvjpeg.so.13"));
    if (env == nullptr) CHECK_THAT(library.problem, testing::contains(folders.back().string()));
    if (env == nullptr) CHECK(!fs::exists(beside_torch));
  }
  WARN("nvJPEG: " << (library.loaded ? "loaded from " + library.path : library.problem));
}

TEST_CASE("an nvJPEG decoder that cannot start says why", "[images][gpu_decode]") {
  CHECK_THROWS_WITH(images::NvjpegDecoder({}, "fastest"),
                    testing::contains("backend 'fastest' is not auto, default, hybrid, gpu_hybrid or hardware"));
  const images::NvjpegLibrary& library = images::load_nvjpeg(clip_encoder::nvjpeg_folders());
  if (!library.loaded) FLOWLINE_SKIP("libnvjpeg.so.13 is not installed here: " + library.problem);
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH(images::NvjpegDecoder(), testing::contains("nvjpegCreateEx for the default backend failed"));
}

TEST_CASE("gpu_decode: on without a CUDA device is an error at start; auto decodes on the CPU",
          "[images][gpu_decode][clip_encoder]") {
  const std::vector<Bytes> jpegs{make_test_jpeg({JpegKind::rgb420, 40, 30}), make_test_jpeg({JpegKind::grayscale})};
  try {
    encode_jpegs(jpegs, "cpu", "on");
    FAIL("gpu_decode: on started on the CPU");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("parameter 'gpu_decode': on, but nvJPEG decodes on a CUDA "
                                                        "device and this one is cpu"));
  }
  const Encoded automatic = encode_jpegs(jpegs, "cpu", "auto");
  CHECK(automatic.cpu_images == 2);
  CHECK(automatic.gpu_images == 0);
  const Encoded off = encode_jpegs(jpegs, "cpu", "off");
  CHECK((automatic.embeddings - off.embeddings).abs().max().item<double>() == 0);
  try {
    encode_jpegs(jpegs, "cpu", "sometimes");
    FAIL("gpu_decode: sometimes was accepted");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("gpu_decode"));
  }
}

TEST_CASE("gpu_decode_backend: a backend nvJPEG lacks is a validation error at its line naming the five",
          "[images][gpu_decode][clip_encoder]") {
  const std::string model = (fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models/clip").string();
  const auto yaml = [&](const std::string& backend) {
    return fmt::format(
        "executors:\n  - name: clip\n    uses: ClipEncoder\n    with:\n      model: {}\n      gpu_decode: auto\n"
        "      gpu_decode_backend: {}\n",
        model, backend);
  };
  try {
    load_flow_config_text(yaml("fastest"), "flow.yml", gpu_decode_registry());
    FAIL("gpu_decode_backend: fastest was accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) ==
          "flow.yml:7:7: executor 'clip': parameter 'gpu_decode_backend': expected one of auto, default, hybrid, "
          "gpu_hybrid, hardware, got 'fastest'");
  }
  for (const char* backend : {"auto", "default", "hybrid", "gpu_hybrid", "hardware"}) {
    const FlowConfig config = load_flow_config_text(yaml(backend), "flow.yml", gpu_decode_registry());
    CHECK(config.executors.at(0).with.at("gpu_decode_backend").as_string() == backend);
  }
  // On the CPU the backend changes nothing: the images are decoded there.
  const std::vector<Bytes> jpegs{make_test_jpeg({JpegKind::rgb420, 40, 30})};
  Flow flow(FlowOptions{}, gpu_decode_registry());
  flow.add({.name = "clip",
            .uses = "ClipEncoder",
            .with = {{"model", model}, {"gpu_decode", "auto"}, {"gpu_decode_backend", "hardware"}, {"warmup", false}},
            .device = "cpu"});
  Document doc;
  doc.blob = jpegs[0];
  DocumentArray docs;
  docs.push_back(std::move(doc));
  CHECK(flow.post("/encode", std::move(docs)).embeddings().size(0) == 1);
}

namespace {

struct GpuCase {
  Bytes bytes;
  std::string label;
  bool subsampled = true;
  bool grey = false;
};

// Each JPEG nvJPEG should take, with whether its chroma is subsampled: generated ones of every kind, sizes odd and
// even (two 64x48 4:2:0 ones share a layout, so they go through the colour conversion as one batch), and the
// repository's test JPEGs.
std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> cases;
  for (const auto& spec : gpu_specs()) {
    const bool grey = spec.kind == JpegKind::grayscale;
    cases.push_back({make_test_jpeg(spec),
                     fmt::format("generated kind {} {}x{}", static_cast<int>(spec.kind), spec.width, spec.height),
                     spec.kind != JpegKind::rgb444 && !grey, grey});
  }
  cases.push_back({make_test_jpeg({JpegKind::rgb420, 64, 48, 90, 13}), "4:2:0 64x48, second of its layout"});
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{1, 37}, {37, 1}, {3, 5}, {5, 3}, {65, 49}})
    cases.push_back(
        {testing::make_sampled_jpeg(testing::kSampling420, w, h, 20 + w), fmt::format("4:2:0 {}x{}", w, h)});
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{4, 9}, {33, 17}})
    cases.push_back(
        {testing::make_sampled_jpeg(testing::kSampling422, w, h, 30 + w), fmt::format("4:2:2 {}x{}", w, h)});
  cases.push_back({testing::make_sampled_jpeg(testing::kSampling440, 31, 45, 40), "4:4:0 31x45"});
  for (const char* name :
       {"rgb_40x30_q90.jpg", "rgb_31x45_422.jpg", "rgb_64x8_progressive.jpg", "exif_rotated_24x16.jpg"})
    cases.push_back({testing::read_bytes(testing::image_dir() / name), name, true, false});
  cases.push_back({testing::read_bytes(testing::image_dir() / "rgb_33x17_444.jpg"), "rgb_33x17_444.jpg", false, false});
  cases.push_back({testing::read_bytes(testing::image_dir() / "grey_24x20.jpg"), "grey_24x20.jpg", false, true});
  return cases;
}

}  // namespace

TEST_CASE(
    "nvJPEG's planes made RGB as libjpeg does are the CPU decoder's pixels within the IDCT's few levels, with every "
    "backend, and the rest is left to the CPU",
    "[images][gpu_decode][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device device(c10::kCUDA, 0);
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
  c10::StreamGuard on_stream(stream);
  const std::vector<GpuCase> cases = gpu_cases();
  std::vector<Bytes> jpegs;
  for (const auto& c : cases) jpegs.push_back(c.bytes);
  const std::size_t gpu_count = jpegs.size();
  Bytes cut = jpegs[1];
  cut.resize(cut.size() / 2);
  Bytes garbage = jpegs[0];
  for (std::size_t i = garbage.size() / 3; i + 2 < garbage.size(); i += 7) garbage[i] = 0xff;
  jpegs.push_back(make_test_jpeg({JpegKind::cmyk, 20, 16}));
  jpegs.push_back(cut);
  jpegs.push_back(testing::read_bytes(testing::image_dir() / "rgb_30x20.png"));
  jpegs.push_back(testing::make_sampled_jpeg(testing::kSamplingMixed, 20, 16, 50));  // Cb and Cr sampled unlike
  jpegs.push_back(make_test_jpeg({JpegKind::rgb420, 1600, 2000}));  // over the limit below: left to the CPU
  images::DecodeLimits limits;
  limits.max_pixels = 2048 * 1536;
  std::vector<images::Image> cpu;
  for (std::size_t i = 0; i < gpu_count; ++i) cpu.push_back(images::decode_image(jpegs[i], limits));

  for (const char* backend : {"default", "hybrid", "gpu_hybrid", "hardware", "auto"}) {
    std::string why;
    auto decoder = clip_encoder::GpuJpegDecoder::make(clip_encoder::GpuDecode::automatic, backend, device, why);
    if (!decoder) {
      // The default backend (and auto, which falls back to gpu_hybrid) must start where nvJPEG loads; another may be
      // missing on this GPU.
      if (std::string(backend) == "default") FLOWLINE_SKIP("nvJPEG is not available: " + why);
      if (std::string(backend) == "auto") FAIL("nvJPEG's auto backend did not start: " << why);
      WARN("nvJPEG's " << backend << " backend did not start: " << why);
      continue;
    }
    INFO("backend " << backend << " (" << decoder->backend() << ")");
    // auto is the fastest backend the GPU has: its JPEG engines, else the GPU's Huffman decoding.
    if (std::string(backend) == "auto") CHECK((decoder->backend() == "hardware" || decoder->backend() == "gpu_hybrid"));
    std::vector<std::span<const std::uint8_t>> views(jpegs.begin(), jpegs.end());
    std::vector<at::Tensor> out;
    const std::size_t decoded = decoder->decode(views, limits, stream, out);
    const std::size_t over = jpegs.size() - 1;
    CHECK(!out[over].defined());
    CHECK_THROWS_WITH(images::decode_image(jpegs[over], limits), testing::contains("a decompression bomb?"));
    for (std::size_t i = gpu_count; i < over; ++i) CHECK(!out[i].defined());  // CMYK, truncated, PNG, mixed chroma
    CHECK(decoded == gpu_count);
    stream.synchronize();

    double worst[2] = {0, 0}, worst_mean[2] = {0, 0};  // [subsampled]
    for (std::size_t i = 0; i < gpu_count; ++i) {
      const GpuCase& c = cases[i];
      INFO(c.label);
      REQUIRE(out[i].defined());
      const at::Tensor gpu = out[i].to(at::kCPU);
      REQUIRE(gpu.size(0) == cpu[i].height);
      REQUIRE(gpu.size(1) == cpu[i].width);
      const at::Tensor expected =
          at::from_blob(const_cast<std::uint8_t*>(cpu[i].rgb.data()), {cpu[i].height, cpu[i].width, 3}, at::kByte);
      const at::Tensor diff = (gpu.to(at::kInt) - expected.to(at::kInt)).abs();
      const double max = diff.max().item<double>(), mean = diff.to(at::kDouble).mean().item<double>();
      worst[c.subsampled] = std::max(worst[c.subsampled], max);
      worst_mean[c.subsampled] = std::max(worst_mean[c.subsampled], mean);
      INFO("max difference " << max << ", mean " << mean);
      // nvJPEG's IDCT is not libjpeg's islow one: with nvJPEG's own colour conversion (NVJPEG_OUTPUT_RGBI), on an
      // H100 (2026-11-28), 4:4:4 and grey JPEGs were at most 3 levels from the CPU's (mean 0.04), subsampled ones
      // up to 87 (its chroma upsampling is not libjpeg's fancy one). Its planes now go through libjpeg's own
      // upsampling and conversion (images/jpeg_color.hpp, bit-exact on libjpeg's planes: test_jpeg_color.cpp), so
      // every JPEG is held to the bounds 4:4:4 had.
      CHECK(mean <= 1.0);
      CHECK(max <= 6);
      if (c.grey) {  // R = G = B, as PIL's convert("RGB")
        CHECK(at::equal(gpu.select(2, 0), gpu.select(2, 1)));
        CHECK(at::equal(gpu.select(2, 0), gpu.select(2, 2)));
      }
    }
    WARN("nvJPEG (" << backend << " backend) against libjpeg-turbo over " << gpu_count << " JPEGs: largest difference "
                    << worst[0] << " levels (4:4:4 and grey; largest mean " << worst_mean[0] << "), " << worst[1]
                    << " levels (subsampled; largest mean " << worst_mean[1] << ")");
    // A corrupt JPEG: nvJPEG (strict) refuses it or decodes it; either way nothing crashes, and a refusal leaves it
    // to the CPU decoder.
    std::vector<std::span<const std::uint8_t>> bad{garbage};
    std::vector<at::Tensor> bad_out;
    const std::size_t bad_decoded = decoder->decode(bad, limits, stream, bad_out);
    stream.synchronize();
    CHECK(bad_decoded == (bad_out[0].defined() ? 1u : 0u));
  }
}

TEST_CASE("ClipEncoder embeddings of GPU-decoded JPEGs match the CPU-decoded ones",
          "[images][gpu_decode][clip_encoder][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  std::vector<Bytes> jpegs;
  for (const auto& spec : gpu_specs()) jpegs.push_back(make_test_jpeg(spec));
  jpegs.push_back(make_test_jpeg({JpegKind::cmyk, 20, 16}));  // falls back to the CPU in the same slice
  const Encoded gpu = encode_jpegs(jpegs, "cuda", "auto", true);
  if (gpu.gpu_images == 0) FLOWLINE_SKIP("nvJPEG is not available (libnvjpeg.so.13 not found: set FLOWLINE_NVJPEG)");
  CHECK(gpu.gpu_images == static_cast<double>(jpegs.size() - 1));
  CHECK(gpu.cpu_images == 1);
  const Encoded cpu = encode_jpegs(jpegs, "cuda", "off");
  CHECK(cpu.gpu_images == 0);
  const at::Tensor cos = at::cosine_similarity(gpu.embeddings.to(at::kDouble), cpu.embeddings.to(at::kDouble), 1);
  const double worst = cos.min().item<double>();
  WARN("ClipEncoder fp32, nvJPEG against CPU decode: lowest cosine " << worst);
  // Measured on an H100 (2026-11-28) with nvJPEG's own RGB: 0.99822, from the subsampled JPEGs' chroma through the
  // tiny random CLIP, whose embeddings move far more with its pixels than a trained model's. The planar path leaves
  // only the IDCT's few levels: 0.999998 on an H200 (2026-12-02, session 35).
  CHECK(worst >= 0.9999);
}

TEST_CASE("cpu_decode_share: the last images of a pass are decoded on the CPU while nvJPEG decodes the first",
          "[images][gpu_decode][clip_encoder][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  std::vector<Bytes> jpegs;
  for (const auto& spec : gpu_specs()) jpegs.push_back(make_test_jpeg(spec));
  jpegs.push_back(make_test_jpeg({JpegKind::cmyk, 20, 16}));
  const Encoded all_gpu = encode_jpegs(jpegs, "cuda", "auto", false, 0.0);
  if (all_gpu.gpu_images == 0)
    FLOWLINE_SKIP("nvJPEG is not available (libnvjpeg.so.13 not found: set FLOWLINE_NVJPEG)");
  // 13 images in one pass: the last round(13 * 0.5) = 7 go to the CPU threads (the CMYK one among them), the first
  // 6 to nvJPEG, at the same time.
  const Encoded split = encode_jpegs(jpegs, "cuda", "auto", false, 0.5);
  CHECK(split.gpu_images == 6);
  CHECK(split.cpu_images == 7);
  const Encoded cpu = encode_jpegs(jpegs, "cuda", "off");
  const at::Tensor cos = at::cosine_similarity(split.embeddings.to(at::kDouble), cpu.embeddings.to(at::kDouble), 1);
  CHECK(cos.min().item<double>() >= 0.995);
  // The CPU's share has the CPU's pixels, so its rows are the CPU run's.
  CHECK(at::allclose(split.embeddings.slice(0, 6), cpu.embeddings.slice(0, 6), 1e-5, 1e-6));
  // All on the CPU by share 1.
  const Encoded none = encode_jpegs(jpegs, "cuda", "auto", false, 1.0);
  CHECK(none.gpu_images == 0);
  CHECK(none.cpu_images == static_cast<double>(jpegs.size()));
}

TEST_CASE("nvJPEG's default and gpu_hybrid backends take their buffers from LibTorch's pool; hardware needs none",
          "[images][gpu_decode][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  if (!images::load_nvjpeg(clip_encoder::nvjpeg_folders()).loaded) FLOWLINE_SKIP("nvJPEG is not available");
  const c10::Device device(c10::kCUDA, 0);
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
  c10::StreamGuard on_stream(stream);
  std::vector<Bytes> jpegs;
  for (unsigned seed = 1; seed <= 64; ++seed) jpegs.push_back(make_test_jpeg({JpegKind::rgb420, 500, 375, 90, seed}));
  const std::vector<std::span<const std::uint8_t>> views(jpegs.begin(), jpegs.end());
  for (const char* backend : {"default", "gpu_hybrid", "hardware"}) {
    INFO("backend " << backend);
    std::string why;
    clip_encoder::GpuJpegDecoder::take_allocator_waits();  // what came before is not this backend's
    auto decoder = clip_encoder::GpuJpegDecoder::make(clip_encoder::GpuDecode::automatic, backend, device, why);
    if (!decoder) {
      if (std::string(backend) == "default") FAIL("nvJPEG's default backend did not start: " << why);
      WARN("nvJPEG's " << backend << " backend did not start: " << why);
      continue;
    }
    std::vector<at::Tensor> out;
    CHECK(decoder->decode(views, images::DecodeLimits{}, stream, out) == jpegs.size());
    stream.synchronize();
    // Each of the hooks' calls waits for the device once (gpu_decode.cpp): the count is the hooks' calls.
    const auto waits = clip_encoder::GpuJpegDecoder::take_allocator_waits();
    if (std::string(backend) == "hardware") {
      CHECK(waits.calls == 0);  // its ~21 MiB come from the driver (docs/images.md)
    } else {
      CHECK(waits.calls > 0);
    }
  }
}

TEST_CASE("nvJPEG writes each image's planes and nothing past them, with every backend", "[images][gpu_decode][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const images::NvjpegLibrary& library = images::load_nvjpeg(clip_encoder::nvjpeg_folders());
  if (!library.loaded) FLOWLINE_SKIP("nvJPEG is not available: " + library.problem);
  const c10::Device device(c10::kCUDA, 0);
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device);
  c10::StreamGuard on_stream(stream);
  // Sizes that are not whole MCUs (a 4:2:0 MCU is 16x16), so an engine writing whole MCUs would show.
  std::vector<Bytes> jpegs;
  for (unsigned seed = 1; seed <= 6; ++seed)
    jpegs.push_back(make_test_jpeg({JpegKind::rgb420, 500 + int(seed % 3), 375 - int(seed % 2), 90, seed}));
  jpegs.push_back(make_test_jpeg({JpegKind::rgb422, 33, 17, 90, 7}));
  jpegs.push_back(make_test_jpeg({JpegKind::rgb444, 41, 23, 90, 8}));
  constexpr std::int64_t kGuard = 64 * 1024;  // bytes after every plane that must keep their pattern
  constexpr std::uint8_t kPattern = 0xa5;
  for (const char* backend : images::kNvjpegBackends) {
    std::optional<images::NvjpegDecoder> decoder;
    try {
      decoder.emplace(images::NvjpegDeviceAllocator{}, backend);
    } catch (const Error& e) {
      if (std::string(backend) == "default") FAIL("nvJPEG's default backend did not start: " << e.what());
      WARN("nvJPEG's " << backend << " backend did not start: " << e.what());
      continue;
    }
    INFO("backend " << backend);
    std::vector<images::JpegPlanes> planes;
    std::vector<std::array<std::int64_t, 3>> at_byte(jpegs.size()), sizes(jpegs.size());
    std::vector<std::array<std::uint32_t, 3>> pitch(jpegs.size());
    std::int64_t total = 0;
    for (std::size_t i = 0; i < jpegs.size(); ++i) {
      planes.push_back(images::jpeg_planes(jpegs[i]));
      std::uint32_t widths[3] = {}, heights[3] = {};
      REQUIRE(decoder->plane_sizes(jpegs[i], planes.back(), widths, heights));
      for (int c = 0; c < 3; ++c) {
        at_byte[i][c] = total;
        sizes[i][c] = std::int64_t{widths[c]} * heights[c];
        pitch[i][c] = widths[c];
        total += sizes[i][c] + kGuard;
      }
    }
    at::Tensor buffer = at::full({total}, kPattern, at::TensorOptions().dtype(at::kByte).device(device));
    std::vector<images::NvjpegPlanesOut> outputs(jpegs.size());
    for (std::size_t i = 0; i < jpegs.size(); ++i) {
      for (int c = 0; c < 3; ++c) {
        outputs[i].plane[c] = buffer.data_ptr<std::uint8_t>() + at_byte[i][c];
        outputs[i].pitch[c] = pitch[i][c];
      }
    }
    std::vector<std::span<const std::uint8_t>> views(jpegs.begin(), jpegs.end());
    const std::vector<bool> done = decoder->decode(views, planes, outputs, stream.native_handle());
    stream.synchronize();
    const at::Tensor host = buffer.to(at::kCPU);
    const std::uint8_t* bytes = host.data_ptr<std::uint8_t>();
    for (std::size_t i = 0; i < jpegs.size(); ++i) {
      CHECK(done[i]);
      for (int c = 0; c < 3; ++c) {
        const std::uint8_t* guard = bytes + at_byte[i][c] + sizes[i][c];
        const auto touched = std::count_if(guard, guard + kGuard, [](std::uint8_t b) { return b != kPattern; });
        INFO("image " << i << " (" << planes[i].width << "x" << planes[i].height << ") plane " << c << ": " << touched
                      << " of the " << kGuard << " bytes after it written");
        CHECK(touched == 0);
      }
    }
  }
}

TEST_CASE("nvJPEG at four replicas and changing pass sizes gives every image the embedding CPU decoding gives",
          "[images][gpu_decode][clip_encoder][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  if (!images::load_nvjpeg(clip_encoder::nvjpeg_folders()).loaded) FLOWLINE_SKIP("nvJPEG is not available");
  // Four replicas on one GPU with pass sizes that change from request to request: where whole requests once came
  // back with other rows' embeddings or NaN (the handler's copy ran off the replica's stream: docs/benchmarks.md,
  // session 35). This tiny model leaves the GPU too idle to show that reliably; test_clip_encoder's busy-GPU case
  // does.
  DocumentArray docs;
  for (unsigned i = 0; i < 300; ++i) {
    Document d;
    d.id = fmt::format("image-{}", i);
    d.blob = make_test_jpeg({JpegKind::rgb420, 160 + int(i % 5) * 16, 120 + int(i % 3) * 8, 90, i + 1});
    docs.push_back(std::move(d));
  }
  const auto encode = [&](const std::string& gpu_decode, const std::string& backend) {
    Flow flow(FlowOptions{}, gpu_decode_registry());
    flow.add({.name = "clip",
              .uses = "ClipEncoder",
              .with = {{"model", (fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models/clip").string()},
                       {"gpu_decode", gpu_decode},
                       {"gpu_decode_backend", backend},
                       {"batch_size", 64}},
              .replicas = 4,
              .device = "cuda"});
    at::Tensor all;
    for (const std::size_t request_size : {64, 13, 50, 7, 64}) {
      const DocumentArray out = flow.post("/encode", DocumentArray(docs), PostOptions{request_size});
      REQUIRE(out.size() == docs.size());
      const at::Tensor e = out.embeddings().to(at::kCPU, at::kDouble);
      all = all.defined() ? at::cat({all, e}) : e;
    }
    return all;
  };
  const at::Tensor cpu = encode("off", "default");
  for (const char* backend : {"hardware", "default"}) {
    at::Tensor gpu;
    try {
      gpu = encode("on", backend);
    } catch (const Error& e) {
      WARN("nvJPEG's " << backend << " backend did not start: " << e.what());
      continue;
    }
    const at::Tensor cos = at::cosine_similarity(gpu, cpu, 1);
    INFO("backend " << backend << ": lowest cosine " << cos.min().item<double>());
    CHECK(at::isfinite(gpu).all().item<bool>());
    CHECK(cos.min().item<double>() >= 0.995);
  }
}
