// CPU benchmark of the document writers (writers.hpp): feeds precomputed 384-d embeddings (random, fixed
// seed) with paragraph-length texts to the JSONL writer that JsonlWriter and `run --output` use, and to the
// .npy and .safetensors writers, and prints documents/s and MB/s for each.
//
//   build/bench/jsonl_writer --docs 200000 --batch 1024 --threads 0 --dir /tmp
#include "flowline/flowline.hpp"
#include "flowline/writers.hpp"

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <random>
#include <thread>

using namespace flowline;

namespace {

// Paragraphs of 40 to 160 words drawn from a small vocabulary, with punctuation and a quote to escape.
std::vector<std::string> make_paragraphs(std::size_t count, std::mt19937& random) {
  static const char* kWords[] = {"the",      "river",  "ran",     "quietly", "past",     "houses", "where",
                                 "children", "played", "until",   "evening", "\"said\"", "she,",   "and",
                                 "then",     "turned", "towards", "hill.",   "Ümlaut",   "garden", "whispered",
                                 "of",       "a",      "old",     "stories"};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    std::string p;
    const int words = 40 + static_cast<int>(random() % 121);
    for (int w = 0; w < words; ++w) {
      if (w) p += ' ';
      p += kWords[random() % std::size(kWords)];
    }
    out.push_back(std::move(p));
  }
  return out;
}

struct Result {
  double seconds = 0;
  WriterStats stats;
};

Result run(const std::string& path, const std::vector<DocumentArray>& batches, const WriterOptions& options) {
  auto writer = open_writer(path, options);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& batch : batches) writer->write(batch);  // borrowed, as JsonlWriter hands them over
  writer->close();
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.stats = writer->stats();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark the document writers on the CPU"};
  std::size_t docs = 200000, batch = 1024, threads = 0, dim = 384;
  std::string dir = "/tmp", formats = "jsonl,npy,safetensors";
  app.add_option("--docs", docs, "documents")->capture_default_str();
  app.add_option("--batch", batch, "documents per write() call")->capture_default_str();
  app.add_option("--threads", threads, "formatting threads (0: auto)")->capture_default_str();
  app.add_option("--dim", dim, "embedding dimension")->capture_default_str();
  app.add_option("--dir", dir, "where to write the files (deleted afterwards)")->capture_default_str();
  app.add_option("--formats", formats, "comma-separated: jsonl, npy, safetensors")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::mt19937 random(42);
  const auto paragraphs = make_paragraphs(1000, random);
  std::vector<float> values(docs * dim);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (auto& v : values) v = normal(random);
  const at::Tensor matrix =
      at::from_blob(values.data(), {static_cast<std::int64_t>(docs), static_cast<std::int64_t>(dim)}, at::kFloat);
  std::vector<DocumentArray> batches;
  std::size_t text_bytes = 0;
  for (std::size_t first = 0; first < docs; first += batch) {
    DocumentArray b;
    const std::size_t n = std::min(batch, docs - first);
    for (std::size_t i = 0; i < n; ++i) {
      Document d(paragraphs[(first + i) % paragraphs.size()]);
      text_bytes += d.text.size();
      d.embedding = matrix.select(0, static_cast<std::int64_t>(first + i));
      b.push_back(std::move(d));
    }
    batches.push_back(std::move(b));
  }
  fmt::print(
      "{} documents, {}-d float32 embeddings, texts {:.0f} bytes on average; batches of {}; {} hardware threads\n",
      docs, dim, static_cast<double>(text_bytes) / docs, batch, std::thread::hardware_concurrency());
  for (const std::string format : {"jsonl", "npy", "safetensors"}) {
    if (formats.find(format) == std::string::npos) continue;
    WriterOptions options;
    options.threads = threads;
    const std::string path = fmt::format("{}/flowline-bench-writer.{}", dir, format);
    const Result r = run(path, batches, options);
    fmt::print(
        "{:<12} {:>9.0f} docs/s  {:>7.1f} MB/s  ({:.3f} s, {:.1f} MB; formatting {:.2f} s thread time, "
        "writing {:.2f} s)\n",
        format, docs / r.seconds, r.stats.bytes / 1e6 / r.seconds, r.seconds, r.stats.bytes / 1e6,
        r.stats.format_seconds, r.stats.write_seconds);
    std::filesystem::remove(path);
    std::filesystem::remove(sidecar_path_for(path));
  }
  return 0;
}
