// Attention alone on one GPU: flowline's packed attention kernel (src/models/cuda_kernels.hpp) beside
// FlashAttention-2 as LibTorch ships it (at::_flash_attention_forward, what the architectures ran before
// session 22), on the passes a SentenceEncoder runs: the corpus's paragraphs tokenized by a model folder's
// tokenizer and truncated to --max-length, one pass of --sequences of them in corpus order, q, k and v
// views of one [T, 3 * heads * head_dim] projection as the architectures make them. Flash launches a
// grid by its max_seqlen: --max-length (what a CUDA graph passes), the pass's own longest sequence where
// that differs, and each --grid; flowline launches the pass's work list (its real tiles, and spare
// entries as a graph's), the same for every grid, whose longest only sizes the bias table. Prints
// microseconds per call (CUDA events over --iterations calls, best of 3), the bytes of q, k, v and the
// output per second, and the largest difference between the two kernels' results (both fp16; the tests
// check each against float32 references).
//
//   build-gpu/bench/attention_gpu --model .device/tok --corpus .device/corpus [--sequences 512]
//       [--max-length 256] [--iterations 100] [--shapes minilm,base,base-bias,local,base-rotary,local-rotary,qwen3]
//       [--grid 1024 ...]
//
// Shapes: minilm (12 heads of 32), base (12 of 64: BERT, XLM-R, ModernBERT's global layers), base-bias
// (MPNet: base plus a relative position bias, which flash cannot add: compared with flash on base, for
// what the bias costs), local (ModernBERT's sliding layers: base, |query - key| <= 64), base-rotary and
// local-rotary (ModernBERT's global and sliding layers, q and k rotated in the kernel; flash without the
// rotation), qwen3 (16 heads of 128, 8 key/value heads, causal).
#include "cuda_kernels.hpp"

#include "flowline/device.hpp"
#include "flowline/io.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

using namespace flowline;

namespace {

struct Shape {
  std::string name;
  std::int64_t heads, kv_heads, head_dim, window;
  bool causal, bias, rotary;
};

const std::vector<Shape> kShapes{
    {"minilm", 12, 12, 32, 0, false, false, false},     {"base", 12, 12, 64, 0, false, false, false},
    {"base-bias", 12, 12, 64, 0, false, true, false},   {"local", 12, 12, 64, 64, false, false, false},
    {"base-rotary", 12, 12, 64, 0, false, false, true}, {"local-rotary", 12, 12, 64, 64, false, false, true},
    {"qwen3", 16, 8, 128, 0, true, false, false},
};

// Microseconds per call of `run`, best of three rounds of `iterations` calls.
template <typename Run>
double time_us(Run&& run, int iterations) {
  run();
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    at::cuda::CUDAEvent begin(cudaEventDefault), end(cudaEventDefault);
    const auto stream = c10::cuda::getCurrentCUDAStream();
    begin.record(stream);
    for (int i = 0; i < iterations; ++i) run();
    end.record(stream);
    end.synchronize();
    best = std::min(best, static_cast<double>(begin.elapsed_time(end)) * 1000.0 / iterations);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, corpus, shape_list = "minilm,base,base-bias,local,base-rotary,local-rotary,qwen3";
  std::int64_t sequences = 512, max_length = 256;
  int iterations = 100;
  std::vector<std::int64_t> extra_grids;
  CLI::App app{"flowline's packed attention beside FlashAttention-2"};
  app.add_option("--model", model, "a model folder whose tokenizer cuts the corpus")->required();
  app.add_option("--corpus", corpus, "a folder or file of paragraphs")->required();
  app.add_option("--sequences", sequences, "sequences per pass")->capture_default_str();
  app.add_option("--max-length", max_length, "tokens per sequence at most (the graphs' grid)")->capture_default_str();
  app.add_option("--iterations", iterations)->capture_default_str();
  app.add_option("--grid", extra_grids, "also time with this max_seqlen (flash's grid; what its empty blocks cost)");
  app.add_option("--shapes", shape_list)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cuda_device_count() == 0) {
    fmt::print(stderr, "attention_gpu: no GPU visible\n");
    return 1;
  }
  c10::InferenceMode guard;
  const c10::Device gpu(c10::kCUDA, 0);

  // The corpus's token counts, one pass of `sequences` of them.
  auto source = open_file_source(corpus, parse_input_format("paragraphs"));
  DocumentArray docs;
  while (source->read(docs, 4096) > 0) {
  }
  const auto tokenizer = models::Tokenizer::from_folder(model);
  std::vector<std::int32_t> starts{0}, ids;
  std::vector<std::int64_t> lengths;
  std::int64_t longest = 0;
  for (auto text : docs.texts()) {
    if (static_cast<std::int64_t>(starts.size()) > sequences) break;
    const auto n = static_cast<std::int64_t>(tokenizer->encode_into(text, static_cast<std::size_t>(max_length), ids));
    starts.push_back(starts.back() + static_cast<std::int32_t>(n));
    lengths.push_back(n);
    longest = std::max(longest, n);
  }
  const std::int64_t T = starts.back(), n = static_cast<std::int64_t>(starts.size()) - 1;
  const at::Tensor cu = at::tensor(starts, at::kInt).to(gpu);
  // flowline's work list: the pass's real tiles only (what a graph of `sequences` slots launches is its
  // bound, the rest -1; --grid does not change it).
  std::vector<std::int64_t> list(static_cast<std::size_t>(models::detail::attention_tiles_bound(T, n)));
  models::detail::write_attention_tiles(lengths.data(), n, list.data(), static_cast<std::int64_t>(list.size()));
  const at::Tensor tiles = at::tensor(list, at::kLong).to(gpu);
  fmt::print("attention_gpu: one pass of {} sequences, {} tokens ({:.1f} a sequence, longest {}), fp16\n", n, T,
             static_cast<double>(T) / static_cast<double>(n), longest);
  fmt::print("{:<12} {:>8} {:>12} {:>12} {:>12} {:>8} {:>10}\n", "shape", "grid", "flash us", "flowline us",
             "flowline GB/s", "x", "max diff");

  const auto& kernels = models::detail::cuda_kernels();
  std::stringstream wanted(shape_list);
  for (std::string name; std::getline(wanted, name, ',');) {
    const auto it = std::find_if(kShapes.begin(), kShapes.end(), [&](const Shape& s) { return s.name == name; });
    if (it == kShapes.end()) {
      fmt::print(stderr, "attention_gpu: no shape '{}'\n", name);
      return 2;
    }
    const Shape& s = *it;
    at::manual_seed(0);
    const std::int64_t width = (s.heads + 2 * s.kv_heads) * s.head_dim;
    const at::Tensor qkv = at::randn({T, width}, at::TensorOptions().dtype(at::kHalf).device(gpu));
    const at::Tensor q = qkv.narrow(1, 0, s.heads * s.head_dim).view({T, s.heads, s.head_dim});
    const at::Tensor k = qkv.narrow(1, s.heads * s.head_dim, s.kv_heads * s.head_dim).view({T, s.kv_heads, s.head_dim});
    const at::Tensor v =
        qkv.narrow(1, (s.heads + s.kv_heads) * s.head_dim, s.kv_heads * s.head_dim).view({T, s.kv_heads, s.head_dim});
    models::detail::PackedAttention options;
    options.scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    options.window = s.window;
    options.causal = s.causal;
    std::vector<std::int64_t> grids{max_length};
    if (longest != max_length) grids.push_back(longest);
    grids.insert(grids.end(), extra_grids.begin(), extra_grids.end());
    const std::int64_t widest = *std::max_element(grids.begin(), grids.end());
    if (s.bias) options.relative_bias = at::randn({s.heads, 2 * widest - 1}, at::kFloat).to(gpu);
    if (s.rotary) {  // ModernBERT's local theta; q and k rotated in the kernel (flash is timed without it)
      const at::Tensor inverse = at::pow(10000.0, -at::arange(0, s.head_dim, 2, at::kDouble) / s.head_dim);
      const at::Tensor angles = at::outer(at::arange(widest, at::kDouble), inverse);
      options.rotary_cos = at::cos(angles).to(gpu, at::kHalf).contiguous();
      options.rotary_sin = at::sin(angles).to(gpu, at::kHalf).contiguous();
    }
    const bool exact = !s.bias && !s.rotary;  // flash computes the same (else it only gives a time to beat)
    const double bytes = static_cast<double>(T) * static_cast<double>(width + s.heads * s.head_dim) * 2.0;
    for (const std::int64_t grid : grids) {
      at::Tensor ours, theirs;
      const double us_ours = time_us([&] { ours = kernels.attention(q, k, v, tiles, grid, options); }, iterations);
      std::optional<std::int64_t> left, right;
      if (s.window > 0) {
        left = s.window;
        right = s.causal ? 0 : s.window;
      }
      const double us_theirs = time_us(
          [&] {
            theirs = std::get<0>(at::_flash_attention_forward(q, k, v, cu, cu, grid, grid, 0.0, s.causal, false,
                                                              options.scale, left, right))
                         .reshape({T, s.heads * s.head_dim});
          },
          iterations);
      const std::string diff =
          !exact ? "-"
                 : fmt::format("{:.2e}", (ours.to(at::kFloat) - theirs.to(at::kFloat)).abs().max().item<double>());
      fmt::print("{:<12} {:>8} {:>12.1f} {:>12.1f} {:>12.0f} {:>8.2f} {:>10}{}\n", s.name, grid, us_theirs, us_ours,
                 bytes / us_ours / 1e3, us_theirs / us_ours, diff,
                 s.bias     ? "   (flash without the bias)"
                 : s.rotary ? "   (flash without the rotation)"
                            : "");
    }
  }
  return 0;
}
