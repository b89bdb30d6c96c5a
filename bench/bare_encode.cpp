// The encoder without the framework: read texts, tokenize them all, sort by length, run packed forward
// passes of --batch-size sequences, copy the embeddings to the host. The reference that flowline's encode
// flow is compared with ("within 5% of a bare LibTorch loop"). Prints docs/s (text to host, model load
// excluded) and the p50/p99 forward-pass latency.
//
//   build/bench/bare_encode --model models/all-MiniLM-L6-v2 --input ../shared/data/corpus \
//       --format paragraphs --device cuda --dtype fp16 --batch-size 256 [--repeats 3] [--cuda-graph-max-tokens 16384]
#include "flowline/device.hpp"
#include "flowline/torch_support.hpp"
#include "flowline/io.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>

using namespace flowline;
using namespace flowline::models;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model, input, format = "paragraphs", device_name = "cpu", dtype_name = "fp32";
  std::size_t batch_size = 128, repeats = 3, copies = 1, graph_tokens = 0;
  CLI::App app{"bare LibTorch encode loop"};
  app.add_option("--model", model)->required();
  app.add_option("--input", input)->required();
  app.add_option("--format", format)->capture_default_str();
  app.add_option("--device", device_name)->capture_default_str();
  app.add_option("--dtype", dtype_name)->capture_default_str();
  app.add_option("--batch-size", batch_size)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--copies", copies, "encode the input this many times over (steady state)")->capture_default_str();
  app.add_option("--cuda-graph-max-tokens", graph_tokens,
                 "replay passes of up to this many tokens from CUDA graphs (GPU, fp16/bf16; 0: eager)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto source = open_file_source(input, parse_input_format(format));
  DocumentArray docs;
  while (source->read(docs, 4096) > 0) {
  }
  std::vector<std::string_view> texts;
  for (std::size_t c = 0; c < copies; ++c) {
    for (auto t : docs.texts()) texts.push_back(t);
  }
  const c10::Device device = resolve_device(device_name);
  set_thread_device(device);
  const c10::ScalarType dtype = dtype_name == "fp16" ? c10::kHalf : dtype_name == "bf16" ? c10::kBFloat16 : c10::kFloat;
  const auto tokenizer = flowline::models::Tokenizer::from_folder(model);
  const auto shared = std::make_shared<const EmbeddingModel>(model, device, dtype);
  const EmbeddingModel& encoder = *shared;
  const auto max_len = static_cast<std::size_t>(encoder.checkpoint().max_seq_length);
  c10::InferenceMode guard;
  // A stream of its own (CUDA graphs cannot be captured on the default stream).
  std::optional<c10::StreamGuard> on_stream;
  if (auto stream = replica_stream(device)) on_stream.emplace(*stream);
  std::unique_ptr<GraphedEmbeddingModel> graphs;
  if (graph_tokens > 0) {
    graphs = std::make_unique<GraphedEmbeddingModel>(shared, static_cast<int64_t>(batch_size),
                                                     static_cast<int64_t>(graph_tokens), static_cast<int64_t>(max_len));
    graphs->capture_all();
    fmt::print("bare_encode: {} CUDA graphs captured in {:.2f} s\n", graphs->graph_count(), graphs->capture_seconds());
  }

  double best = 0, best_tokenize_s = 0, best_model_s = 0;
  std::vector<double> latencies;
  for (std::size_t run = 0; run <= repeats; ++run) {  // run 0 warms up
    const auto start = Clock::now();
    std::vector<std::int32_t> ids;
    std::vector<std::size_t> offsets{0};
    for (auto text : texts) {
      tokenizer->encode_into(text, max_len, ids);
      offsets.push_back(ids.size());
    }
    const double tokenize_s = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<std::size_t> order(texts.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](auto a, auto b) { return offsets[a + 1] - offsets[a] > offsets[b + 1] - offsets[b]; });
    at::Tensor host = at::empty({static_cast<int64_t>(texts.size()), encoder.dimension()});
    std::vector<std::int32_t> packed;
    std::vector<int64_t> lengths;
    for (std::size_t b = 0; b < order.size(); b += batch_size) {
      const auto t0 = Clock::now();
      packed.clear();
      lengths.clear();
      const std::size_t e = std::min(order.size(), b + batch_size);
      for (std::size_t i = b; i < e; ++i) {
        packed.insert(packed.end(), ids.begin() + offsets[order[i]], ids.begin() + offsets[order[i] + 1]);
        lengths.push_back(static_cast<int64_t>(offsets[order[i] + 1] - offsets[order[i]]));
      }
      const PackedBatch batch{packed, lengths};
      at::Tensor out = (graphs && graphs->fits(batch) ? graphs->encode(batch) : encoder.encode(batch)).to(at::kCPU);
      std::vector<int64_t> rows(order.begin() + b, order.begin() + e);
      host.index_copy_(0, at::tensor(rows), out);
      if (run > 0) latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (run > 0 && texts.size() / seconds > best) best_tokenize_s = tokenize_s, best_model_s = seconds - tokenize_s;
    if (run > 0) {
      best = std::max(best, texts.size() / seconds);
      fmt::print("run {}: {} docs in {:.3f} s = {:.0f} docs/s\n", run, texts.size(), seconds, texts.size() / seconds);
    }
  }
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return latencies.empty() ? 0.0 : latencies[static_cast<std::size_t>(p * (latencies.size() - 1))];
  };
  fmt::print(
      "bare_encode: of the best run, tokenizing (one thread) took {:.3f} s and the forward passes with copies "
      "{:.3f} s ({:.0f} docs/s without tokenizing)\n",
      best_tokenize_s, best_model_s, texts.size() / best_model_s);
  fmt::print("bare_encode: best {:.0f} docs/s, batch p50 {:.2f} ms, p99 {:.2f} ms ({} docs, {}, {}, batch {}{})\n",
             best, pct(0.5), pct(0.99), texts.size(), device.str(), dtype_name, batch_size,
             graphs ? fmt::format(", CUDA graphs up to {} tokens", graphs->max_tokens()) : "");
  return 0;
}
