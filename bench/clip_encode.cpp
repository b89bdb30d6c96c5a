// ClipModel alone: image embeddings from pixel tensors (random, made on the host: decoding and preprocessing are
// not measured here) and text embeddings from short texts, each batch's embeddings copied to the host. Prints
// images/s and texts/s of the best of --repeats runs (run 0 warms up) and the p50/p99 batch latency.
// bench/clip_encode.py makes random-weight ViT-B/32 and ViT-L/14 folders and runs this beside transformers.
//
//   build/bench/clip_encode --model DIR --device cuda --dtype fp16 --batch-size 256 --images 8192 [--texts 65536]
#include "flowline/device.hpp"
#include "flowline/models/clip_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace flowline;
using namespace flowline::models;
using Clock = std::chrono::steady_clock;

namespace {

struct Figures {
  double best_per_s = 0;
  std::vector<double> latencies_ms;
};

// Runs `pass(begin, end)` over `count` items in batches, repeats + 1 times; the first run warms up.
template <typename Pass>
Figures measure(const char* what, std::size_t count, std::size_t batch_size, std::size_t repeats, Pass pass) {
  Figures f;
  for (std::size_t run = 0; run <= repeats; ++run) {
    const auto start = Clock::now();
    for (std::size_t b = 0; b < count; b += batch_size) {
      const auto t0 = Clock::now();
      pass(b, std::min(count, b + batch_size));
      if (run > 0) f.latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (run > 0) {
      f.best_per_s = std::max(f.best_per_s, count / seconds);
      fmt::print("run {}: {} {} in {:.3f} s = {:.0f}/s\n", run, count, what, seconds, count / seconds);
    }
  }
  std::sort(f.latencies_ms.begin(), f.latencies_ms.end());
  return f;
}

double percentile(const std::vector<double>& sorted, double p) {
  return sorted.empty() ? 0.0 : sorted[static_cast<std::size_t>(p * (sorted.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, device_name = "cpu", dtype_name = "fp32";
  std::size_t batch_size = 256, images = 4096, texts = 0, repeats = 3;
  CLI::App app{"ClipModel images/s and texts/s"};
  app.add_option("--model", model)->required();
  app.add_option("--device", device_name)->capture_default_str();
  app.add_option("--dtype", dtype_name)->capture_default_str();
  app.add_option("--batch-size", batch_size)->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--images", images)->capture_default_str();
  app.add_option("--texts", texts, "short texts to encode through the text tower (0: none)")->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str()->check(CLI::Range(1, 100));
  std::string pixels_file, out_file;
  app.add_option("--pixels", pixels_file, "parity instead: encode this safetensors file's pixel_values ...");
  app.add_option("--out", out_file, "... and write image_embeds here")->needs("--pixels");
  CLI11_PARSE(app, argc, argv);

  const c10::Device device = resolve_device(device_name);
  set_thread_device(device);
  const c10::ScalarType dtype = dtype_name == "fp16" ? c10::kHalf : dtype_name == "bf16" ? c10::kBFloat16 : c10::kFloat;
  const auto clip = ClipModel::load(model, {device, dtype});
  c10::InferenceMode guard;
  std::optional<c10::StreamGuard> on_stream;
  if (auto stream = replica_stream(device)) on_stream.emplace(*stream);
  if (!pixels_file.empty()) {
    const at::Tensor embeds = clip->encode_pixels(SafetensorsFile(pixels_file).get("pixel_values")).cpu();
    save_safetensors(out_file, {{"image_embeds", embeds}});
    fmt::print("clip_encode: {} image embeddings written to {}\n", embeds.size(0), out_file);
    return 0;
  }
  const std::int64_t size = clip->image_size();
  fmt::print("clip_encode: {} ({}), image {}x{}, embedding {}, weights {:.0f} MiB on {} in {}, batch {}\n", model,
             clip->kind(), size, size, clip->embedding_dim(), clip->weight_bytes() / 1048576.0, device.str(),
             dtype_name, batch_size);

  // Pixels as a processor leaves them on the host (float32, normalized), one pinned batch uploaded per pass.
  const at::Tensor host = at::randn({static_cast<std::int64_t>(batch_size), 3, size, size});
  const at::Tensor pixels = device.is_cuda() ? host.pin_memory() : host;
  const Figures image_figures = measure("images", images, batch_size, repeats, [&](std::size_t b, std::size_t e) {
    const at::Tensor batch = pixels.slice(0, 0, static_cast<std::int64_t>(e - b));
    (void)clip->encode_pixels(batch.to(device, dtype, /*non_blocking=*/true)).to(at::kCPU);
  });
  fmt::print("clip_encode: images best {:.0f}/s, batch latency p50 {:.2f} ms p99 {:.2f} ms\n", image_figures.best_per_s,
             percentile(image_figures.latencies_ms, 0.5), percentile(image_figures.latencies_ms, 0.99));
  if (texts == 0) return 0;

  std::vector<std::string> owned;
  for (std::size_t i = 0; i < texts; ++i)
    owned.push_back(fmt::format("a photo of a {} on a table, number {}", i % 97, i));
  const std::vector<std::string_view> views(owned.begin(), owned.end());
  const Figures text_figures = measure("texts", texts, batch_size, repeats, [&](std::size_t b, std::size_t e) {
    (void)clip->encode_texts(std::span(views).subspan(b, e - b)).to(at::kCPU);
  });
  fmt::print(
      "clip_encode: texts best {:.0f}/s (tokenizing on this thread included), batch latency p50 {:.2f} ms "
      "p99 {:.2f} ms\n",
      text_figures.best_per_s, percentile(text_figures.latencies_ms, 0.5), percentile(text_figures.latencies_ms, 0.99));
  return 0;
}
