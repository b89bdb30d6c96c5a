// The TokenClassifierModel's forward passes alone, as the TokenClassifier runs them for seed 4: the input's
// paragraphs in order, passes of --batch-size texts (cut at the model's maximum), each pass's logits copied to
// the host. Prints each round's per-pass wall times (the first round is a fresh process's first passes, after
// --warmup passes of the largest pass's shape), so that set-up costs and steady-state costs can be told apart.
//
//   build/bench/token_passes --model DIR --input alice-in-wonderland.txt --device cuda --dtype fp16 \
//       --batch-sizes 50,300 [--rounds 3] [--warmup 1]
#include "flowline/device.hpp"
#include "flowline/io.hpp"
#include "flowline/models/token_classifier.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <optional>

using namespace flowline;
using namespace flowline::models;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model, input, format = "paragraphs", device_name = "cuda", dtype_name = "fp16";
  std::vector<std::size_t> batch_sizes{50, 300};
  std::size_t rounds = 3, warmup = 1, bucket = 0;
  bool vary = false;
  CLI::App app{"TokenClassifierModel passes, cold and warm"};
  app.add_option("--model", model)->required();
  app.add_option("--input", input)->required();
  app.add_option("--format", format)->capture_default_str();
  app.add_option("--device", device_name)->capture_default_str();
  app.add_option("--dtype", dtype_name)->capture_default_str();
  app.add_option("--batch-sizes", batch_sizes)->delimiter(',')->capture_default_str();
  app.add_option("--rounds", rounds)->capture_default_str();
  app.add_option("--warmup", warmup, "passes of the largest pass's shape before the first round")
      ->capture_default_str();
  app.add_option("--token-bucket", bucket,
                 "pad each pass with a filler sequence to a multiple of this many tokens (0: none)")
      ->capture_default_str();
  app.add_flag("--vary", vary, "each round drops one more token from each pass's last text: shapes never seen before");
  CLI11_PARSE(app, argc, argv);

  auto source = open_file_source(input, parse_input_format(format));
  DocumentArray docs;
  while (source->read(docs, 4096) > 0) {
  }
  const c10::Device device = resolve_device(device_name);
  set_thread_device(device);
  const c10::ScalarType dtype = parse_dtype(dtype_name);
  const auto tokenizer = Tokenizer::from_folder(model);
  const TokenClassifierModel tagger(Checkpoint::read(model), device, dtype);
  const auto max_len = static_cast<std::size_t>(tagger.checkpoint().max_seq_length);
  std::vector<std::vector<std::int32_t>> ids(docs.size());
  for (std::size_t d = 0; d < docs.size(); ++d) tokenizer->encode_into(docs[d].text, max_len, ids[d]);
  c10::InferenceMode guard;
  std::optional<c10::StreamGuard> on_stream;
  if (auto stream = replica_stream(device)) on_stream.emplace(*stream);

  for (const std::size_t batch : batch_sizes) {
    struct Pass {
      std::vector<std::int32_t> ids;
      std::vector<std::int64_t> lengths;
    };
    std::vector<Pass> passes;
    for (std::size_t b = 0; b < ids.size(); b += batch) {
      Pass p;
      for (std::size_t d = b; d < std::min(ids.size(), b + batch); ++d) {
        p.ids.insert(p.ids.end(), ids[d].begin(), ids[d].end());
        p.lengths.push_back(static_cast<std::int64_t>(ids[d].size()));
      }
      passes.push_back(std::move(p));
    }
    const auto largest = std::max_element(passes.begin(), passes.end(),
                                          [](const Pass& a, const Pass& b) { return a.ids.size() < b.ids.size(); });
    for (std::size_t w = 0; w < warmup; ++w)
      (void)tagger.logits(PackedBatch{largest->ids, largest->lengths, {}, {}}).to(at::kCPU);
    for (std::size_t r = 0; r < rounds; ++r) {
      std::vector<double> ms;
      const auto start = Clock::now();
      for (Pass p : passes) {
        const auto t0 = Clock::now();
        if (vary && p.lengths.back() > static_cast<std::int64_t>(r + 1)) {
          p.lengths.back() -= static_cast<std::int64_t>(r);
          p.ids.resize(p.ids.size() - r);
        }
        if (bucket > 0 && p.ids.size() % bucket != 0) {
          std::size_t pad = bucket - p.ids.size() % bucket;
          while (pad > 0) {
            const std::size_t n = std::min(pad, max_len);
            p.ids.insert(p.ids.end(), n, p.ids.front());
            p.lengths.push_back(static_cast<std::int64_t>(n));
            pad -= n;
          }
        }
        (void)tagger.logits(PackedBatch{p.ids, p.lengths, {}, {}}).to(at::kCPU);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::vector<double> sorted = ms;
      std::sort(sorted.begin(), sorted.end());
      fmt::print(
          "batch {} round {}: {} passes in {:.4f} s ({:.0f} texts/s), pass ms p50 {:.2f} max {:.2f}; first "
          "passes {:.2f}\n",
          batch, r, passes.size(), seconds, ids.size() / seconds, sorted[sorted.size() / 2], sorted.back(),
          fmt::join(std::vector<double>(ms.begin(), ms.begin() + std::min<std::size_t>(6, ms.size())), " "));
    }
  }
  return 0;
}
