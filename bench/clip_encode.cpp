// ClipModel alone: image embeddings from pixel tensors (random, made on the host: decoding and preprocessing are
// not measured here) and text embeddings from short texts, each batch's embeddings copied to the host. Prints
// images/s and texts/s of the best of --repeats runs (run 0 warms up) and the p50/p99 batch latency.
// bench/clip_encode.py makes random-weight ViT-B/32 and ViT-L/14 folders and runs this beside transformers.
//
//   build/bench/clip_encode --model DIR --device cuda --dtype fp16 --batch-size 256 --images 8192 [--texts 65536]
//
// With --jpeg-dir: from JPEG bytes on disk to embeddings on the host instead, through a flow with the ClipEncoder
// (the folder read as `flowline run --input-format images` reads it, a request window at a time), once for each
// --gpu-decode value (default: on, then off, in the same run); prints images/s and decode's share of the
// executor's image time for each, with how many images nvJPEG and the CPU decoded. --make-jpegs N first fills an
// empty folder with N generated photo-like JPEGs (500x375, 4:2:0, quality 90: gradients, edges and noise).
// --check first encodes the folder once with gpu_decode off, then compares every embedding of every run against
// those (cosine; nvJPEG's IDCT moves them a little) and counts failed requests instead of stopping at the first:
// each run prints its failures and the embeddings below --check-cosine, and the exit status is 1 if any.
// --text-flow N: N short texts through a ClipEncoder flow instead (--check: against one replica's embeddings);
// --mixed-lengths makes them 10 to 70 words, --request-size N posts N a request (default: --batch-size).
//
//   build/bench/clip_encode --model DIR --device cuda --dtype fp16 --batch-size 256 --jpeg-dir /tmp/jpegs \
//     --make-jpegs 10000 [--gpu-decode on --gpu-decode off] [--gpu-decode-backend gpu_hybrid]
#include "jpeg_writer.hpp"

#include "flowline/clip_encoder/clip_encoder.hpp"
#include "flowline/device.hpp"
#include "flowline/flow.hpp"
#include "flowline/io.hpp"
#include "flowline/registry.hpp"
#include "flowline/models/clip_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
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

namespace fs = std::filesystem;

struct JpegRun {
  std::string model, device, dtype, folder;
  std::size_t batch_size = 256, repeats = 1;
  std::vector<std::string> gpu_decode;
  std::string backend = "auto";  // the ClipEncoder's gpu_decode_backend
  int replicas = 1;
  std::size_t decode_threads = 0;  // the ClipEncoder's decode_threads (0: its default)
  double cpu_decode_share = 0;     // the ClipEncoder's cpu_decode_share
  std::size_t text_flow = 0;       // texts through the flow instead of images (0: images)
  bool mixed_lengths = false;      // texts of 2 to 60 words instead of one short caption shape
  std::size_t request_size = 0;    // documents a request (0: batch_size)
  bool check = false;              // compare every run's embeddings with a gpu_decode off run's
  double check_cosine = 0.999;     // an embedding below this cosine to its reference counts as wrong
};

// A document's embedding as floats, by its uri (the file it came from) or, for texts, its id.
using Embeddings = std::map<std::string, std::vector<float>>;

void keep_embeddings(const DocumentArray& docs, Embeddings& into) {
  for (const auto& doc : docs) {
    if (!doc.embedding.defined()) continue;
    const at::Tensor e = doc.embedding.to(at::kCPU, at::kFloat).contiguous();
    into[doc.uri.empty() ? doc.id : doc.uri] = std::vector<float>(e.data_ptr<float>(), e.data_ptr<float>() + e.numel());
  }
}

// How `got` compares with its reference: how many are off (below `min_cosine`, not finite, or missing), the
// lowest cosine, and the first few off by uri.
struct Comparison {
  std::size_t wrong = 0;
  double lowest = 1;
  std::vector<std::string> first_wrong;
};

Comparison compare(const Embeddings& reference, const Embeddings& got, double min_cosine) {
  Comparison c;
  const auto off = [&](const std::string& uri) {
    ++c.wrong;
    if (c.first_wrong.size() < 6) c.first_wrong.push_back(fs::path(uri).filename().string());
  };
  for (const auto& [uri, r] : reference) {
    const auto it = got.find(uri);
    if (it == got.end() || it->second.size() != r.size()) {
      off(uri);
      continue;
    }
    const auto& e = it->second;
    double dot = 0, a = 0, b = 0;
    for (std::size_t k = 0; k < e.size(); ++k) {
      dot += double(e[k]) * r[k];
      a += double(e[k]) * e[k];
      b += double(r[k]) * r[k];
    }
    const double cosine = dot / std::sqrt(a * b);
    if (!(cosine >= min_cosine)) off(uri);  // NaN counts
    if (!(cosine >= c.lowest)) c.lowest = cosine;
  }
  return c;
}

// Writes `count` generated JPEGs into `folder` when it holds no .jpg yet.
void make_jpegs(const std::string& folder, std::size_t count) {
  fs::create_directories(folder);
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".jpg") return;
  }
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto jpeg = testing::make_test_jpeg({testing::JpegKind::rgb420, 500, 375, 90, static_cast<unsigned>(i + 1)});
    std::ofstream(fs::path(folder) / fmt::format("photo-{:05}.jpg", i), std::ios::binary)
        .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    bytes += jpeg.size();
  }
  fmt::print("clip_encode: wrote {} JPEGs of 500x375 ({:.1f} KB each on average) to {}\n", count,
             bytes / 1024.0 / std::max<std::size_t>(count, 1), folder);
}

double metric(const FlowStats& stats, const char* name) {
  double sum = 0;
  for (const auto& replica : stats.replicas) {
    if (const auto it = replica.metrics.find(name); it != replica.metrics.end()) sum += it->second;
  }
  return sum;
}

// Short texts through a ClipEncoder flow (its replicas tokenizing and encoding at once), `repeats` + 1 times.
// With run.check, a one-replica flow first encodes the texts twice (the two must agree) and every run's
// embeddings are compared with its first; the exit status is 1 if any run had a wrong or missing embedding.
int run_text_flow(const JpegRun& run) {
  const std::size_t request_size = run.request_size ? run.request_size : run.batch_size;
  Registry registry;
  clip_encoder::register_clip_encoder(registry);
  const auto make_docs = [&] {
    DocumentArray docs;
    for (std::size_t i = 0; i < run.text_flow; ++i) {
      Document doc;
      doc.id = fmt::format("text-{:07}", i);
      doc.text = fmt::format("a photo of a {} on a table, number {}", i % 97, i);
      // Mixed: 10 to 70 words, lengths scattered over the input (a caption corpus, not one template).
      for (std::size_t w = 0, n = run.mixed_lengths ? (i * 7919) % 31 : 0; w < n; ++w) doc.text += " and more";
      docs.push_back(std::move(doc));
    }
    return docs;
  };
  const auto compared = [&](const Embeddings& reference, const Embeddings& got, const char* what) {
    const Comparison c = compare(reference, got, run.check_cosine);
    fmt::print("clip_encode: check {}: {} of {} below cosine {} (lowest {:.6f}){}{}\n", what, c.wrong, reference.size(),
               run.check_cosine, c.lowest, c.wrong ? ", the first: " : "", fmt::join(c.first_wrong, " "));
    return c.wrong;
  };
  const auto make_flow = [&](int replicas) {
    auto flow = std::make_unique<Flow>(FlowOptions{}, registry);
    flow->add({.name = "clip",
               .uses = "ClipEncoder",
               .with = {{"model", run.model}, {"dtype", run.dtype}, {"batch_size", run.batch_size}},
               .replicas = replicas,
               .device = run.device});
    flow->start();
    return flow;
  };
  std::size_t bad_runs = 0;
  Embeddings reference;
  if (run.check) {
    const auto one = make_flow(1);
    keep_embeddings(one->post("/encode", make_docs(), PostOptions{request_size}), reference);
    Embeddings again;
    keep_embeddings(one->post("/encode", make_docs(), PostOptions{request_size}), again);
    if (compared(reference, again, "one replica again") > 0) ++bad_runs;
    one->close();
  }
  const auto flow = make_flow(run.replicas);
  double best = 0;
  for (std::size_t r = 0; r <= run.repeats; ++r) {
    const auto start = Clock::now();
    const DocumentArray answered = flow->post("/encode", make_docs(), PostOptions{request_size});
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (answered.size() != run.text_flow)
      throw Error(fmt::format("{} of {} texts answered", answered.size(), run.text_flow));
    const double per_s = run.text_flow / seconds;
    if (r > 0) best = std::max(best, per_s);
    fmt::print("clip_encode: text flow ({} replicas) run {}{}: {} texts in {:.3f} s = {:.0f} texts/s\n", run.replicas,
               r, r == 0 ? " (warm-up)" : "", run.text_flow, seconds, per_s);
    if (run.check) {
      Embeddings got;
      keep_embeddings(answered, got);
      if (compared(reference, got, fmt::format("run {}", r).c_str()) > 0) ++bad_runs;
    }
  }
  fmt::print("clip_encode: text flow ({} replicas): best {:.0f} texts/s\n", run.replicas, best);
  flow->close();
  if (run.check) fmt::print("clip_encode: check: {} runs with wrong embeddings\n", bad_runs);
  return bad_runs > 0 ? 1 : 0;
}

// One flow per gpu_decode value; each posts the whole folder `repeats` + 1 times (the first warms up). With
// run.check, a gpu_decode off flow first makes the reference embeddings.
int run_jpeg_folder(const JpegRun& run) {
  Registry registry;
  clip_encoder::register_clip_encoder(registry);
  std::vector<std::string> modes = run.gpu_decode;
  if (run.check) modes.insert(modes.begin(), "reference");
  Embeddings reference;
  std::size_t bad_runs = 0;
  for (const auto& listed : modes) {
    const bool making_reference = listed == "reference";
    const std::string mode = making_reference ? "off" : listed;
    Flow flow(FlowOptions{}, registry);
    flow.add({.name = "clip",
              .uses = "ClipEncoder",
              .with = {{"model", run.model},
                       {"dtype", run.dtype},
                       {"batch_size", run.batch_size},
                       {"gpu_decode", mode},
                       {"gpu_decode_backend", run.backend},
                       {"decode_threads", run.decode_threads},
                       {"cpu_decode_share", run.cpu_decode_share}},
              .replicas = run.replicas,
              .device = run.device});
    flow.start();
    double best = 0;
    // The reference flow runs twice: CPU decoding must agree with itself before nvJPEG is held to it.
    for (std::size_t r = 0; r <= (making_reference ? 1 : run.repeats); ++r) {
      const FlowStats before = flow.stats();
      auto source = open_file_source(run.folder, InputFormat::Images);
      std::string first_error;
      Embeddings got;
      const PostSummary summary = flow.post(
          "/encode", *source,
          [&](Response&& response) {
            if (!response.ok() && first_error.empty()) first_error = response.error;
            if (response.ok() && run.check)
              keep_embeddings(response.docs, making_reference && r == 0 ? reference : got);
          },
          PostOptions{run.batch_size});
      if (summary.failed_requests > 0 && (!run.check || making_reference))
        throw Error(fmt::format("{} requests failed, the first: {}", summary.failed_requests, first_error));
      if (making_reference) {
        if (r == 0) {
          fmt::print("clip_encode: check: {} reference embeddings from gpu_decode off\n", reference.size());
          continue;
        }
        const Comparison c = compare(reference, got, run.check_cosine);
        fmt::print(
            "clip_encode: check: gpu_decode off again: {} of {} below cosine {} against the first (lowest "
            "{:.6f}){}{}\n",
            c.wrong, reference.size(), run.check_cosine, c.lowest, c.wrong ? ", the first: " : "",
            fmt::join(c.first_wrong, " "));
        if (c.wrong > 0) ++bad_runs;
        break;
      }
      const FlowStats after = flow.stats();
      const auto delta = [&](const char* name) { return metric(after, name) - metric(before, name); };
      const double per_s = summary.documents / summary.seconds;
      if (r > 0) best = std::max(best, per_s);
      fmt::print(
          "clip_encode: gpu_decode {} ({} backend, {} replicas, cpu share {}) run {}{}: {} images in {:.3f} s = {:.0f} "
          "images/s; decode {:.1f}% of the executor's image time (nvJPEG {} images, {:.3f} s; CPU {} images, {:.3f} "
          "s); nvJPEG's allocator waited {} times, {:.3f} s\n",
          mode, run.backend, run.replicas, run.cpu_decode_share, r, r == 0 ? " (warm-up)" : "", summary.documents,
          summary.seconds, per_s, 100 * delta("decode_seconds") / std::max(delta("image_seconds"), 1e-9),
          delta("gpu_decode_images"), delta("gpu_decode_seconds"), delta("cpu_decode_images"),
          delta("cpu_decode_seconds"), delta("nvjpeg_allocator_waits"), delta("nvjpeg_allocator_wait_seconds"));
      if (run.check) {
        const Comparison c = compare(reference, got, run.check_cosine);
        fmt::print(
            "clip_encode: check run {}: {} failed requests{}; {} of {} embeddings below cosine {} against "
            "gpu_decode off (lowest {:.6f}){}{}\n",
            r, summary.failed_requests, first_error.empty() ? "" : fmt::format(" (the first: {})", first_error),
            c.wrong, reference.size(), run.check_cosine, c.lowest, c.wrong ? ", the first: " : "",
            fmt::join(c.first_wrong, " "));
        if (summary.failed_requests > 0 || c.wrong > 0) ++bad_runs;
      }
    }
    if (!making_reference) fmt::print("clip_encode: gpu_decode {}: best {:.0f} images/s\n", mode, best);
    flow.close();
  }
  if (run.check) fmt::print("clip_encode: check: {} runs with failures or wrong embeddings\n", bad_runs);
  return bad_runs > 0 ? 1 : 0;
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
  JpegRun jpegs;
  std::size_t make_count = 0;
  app.add_option("--jpeg-dir", jpegs.folder, "encode this folder's JPEGs through a ClipEncoder flow instead");
  app.add_option("--gpu-decode", jpegs.gpu_decode, "gpu_decode values to run, in order (default: on off)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--gpu-decode-backend", jpegs.backend, "the ClipEncoder's gpu_decode_backend")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "hybrid", "gpu_hybrid", "hardware"}));
  app.add_option("--make-jpegs", make_count, "first write this many generated JPEGs into an empty --jpeg-dir");
  app.add_option("--replicas", jpegs.replicas, "the ClipEncoder's replicas (--jpeg-dir, --text-flow)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--decode-threads", jpegs.decode_threads, "the ClipEncoder's decode_threads (0: its default)");
  app.add_option("--cpu-decode-share", jpegs.cpu_decode_share, "the ClipEncoder's cpu_decode_share")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag(
      "--check", jpegs.check,
      "compare every run's embeddings with a gpu_decode off run's (--jpeg-dir) or one replica's (--text-flow)");
  app.add_option("--check-cosine", jpegs.check_cosine, "the lowest cosine --check accepts")->capture_default_str();
  app.add_option("--text-flow", jpegs.text_flow, "instead: this many short texts through a ClipEncoder flow");
  app.add_flag("--mixed-lengths", jpegs.mixed_lengths, "--text-flow: texts of 10 to 70 words, not one short shape");
  app.add_option("--request-size", jpegs.request_size, "--text-flow: documents a request (default: --batch-size)");
  std::string pixels_file, out_file;
  app.add_option("--pixels", pixels_file, "parity instead: encode this safetensors file's pixel_values ...");
  app.add_option("--out", out_file, "... and write image_embeds here")->needs("--pixels");
  CLI11_PARSE(app, argc, argv);
  if (jpegs.text_flow > 0) {
    jpegs.model = model, jpegs.device = device_name, jpegs.dtype = dtype_name;
    jpegs.batch_size = batch_size, jpegs.repeats = repeats;
    return run_text_flow(jpegs);
  }
  if (!jpegs.folder.empty()) {
    if (make_count > 0) make_jpegs(jpegs.folder, make_count);
    if (jpegs.gpu_decode.empty()) jpegs.gpu_decode = {"on", "off"};
    jpegs.model = model, jpegs.device = device_name, jpegs.dtype = dtype_name;
    jpegs.batch_size = batch_size, jpegs.repeats = repeats;
    return run_jpeg_folder(jpegs);
  }

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
