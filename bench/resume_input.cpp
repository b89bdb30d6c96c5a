// What `flowline run --resume` spends on its input before the first post, without a flow: hashing the input
// (the run's identity), opening it, skipping the documents the output holds and counting those left — the
// way it is done now (DocumentSource::skip and count_left: boundaries only) beside the way it was done before
// (every skipped document read and built, then the input opened again and every document built to count
// them), on the same machine in the same process. docs/benchmarks.md records the figures with the command.
//
//   resume_input --input FILE|FOLDER --input-format paragraphs|lines|jsonl|text|images [--fraction 0.9]
//                [--rounds 3]
#include "resume.hpp"

#include "flowline/io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

using namespace flowline;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A source with read() alone: skip() is DocumentSource's default (read and drop), as ResumeSource did before.
class ReadOnly : public DocumentSource {
 public:
  explicit ReadOnly(DocumentSource& inner) : inner_(inner) {}
  std::size_t read(DocumentArray& out, std::size_t max) override { return inner_.read(out, max); }

 private:
  DocumentSource& inner_;
};

// The count before: the input opened again and every document built (run.cpp's count_documents did this).
std::uint64_t count_by_reading(const std::string& input, InputFormat format) {
  auto source = open_file_source(input, format);
  DocumentArray batch;
  std::uint64_t n = 0;
  for (std::size_t got; (got = source->read(batch, 4096)) > 0; batch.clear()) n += got;
  return n;
}

struct Round {
  double open = 0, skip = 0, count = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("resume_input: the input's cost in a resumed run, before and after skip()/count_left()");
  std::string input, format_name;
  double fraction = 0.9;
  int rounds = 3;
  app.add_option("--input", input, "input file or folder")->required();
  app.add_option("--input-format", format_name, "lines, paragraphs, jsonl, text or images")->required();
  app.add_option("--fraction", fraction, "the part of the input the output holds (skipped)");
  app.add_option("--rounds", rounds, "rounds of each way; the best is printed too");
  CLI11_PARSE(app, argc, argv);
  const InputFormat format = parse_input_format(format_name);

  auto start = std::chrono::steady_clock::now();
  const auto identity = cli::identify_run(input, format_name, "/dev/null", {}, "/", 64, "");
  const double hash_seconds = seconds_since(start);
  const std::uint64_t total = count_by_reading(input, format);
  const auto skip = static_cast<std::uint64_t>(static_cast<double>(total) * fraction);
  fmt::print("input {} ({}, {} bytes, {} documents); skipping {}, {} left\n", input, format_name, identity.input_bytes,
             total, skip, total - skip);
  fmt::print("hashing the input (identify_run): {:.3f} s\n", hash_seconds);
  if (format == InputFormat::Paragraphs || format == InputFormat::Text) {
    // What read_file did before it read in large chunks: a character at a time through a stream iterator.
    start = std::chrono::steady_clock::now();
    std::uint64_t bytes = 0;
    const auto read_old_way = [&](const std::filesystem::path& file) {
      std::ifstream in(file, std::ios::binary);
      bytes += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()).size();
    };
    if (std::filesystem::is_directory(input)) {
      for (const auto& entry : std::filesystem::directory_iterator(input))
        if (entry.is_regular_file()) read_old_way(entry.path());
    } else {
      read_old_way(input);
    }
    fmt::print("reading the input a character at a time (read_file before): {:.3f} s for {} bytes\n",
               seconds_since(start), bytes);
  }

  Round best_before{1e9, 1e9, 1e9}, best_after{1e9, 1e9, 1e9};
  const auto keep_best = [](Round& best, const Round& r) {
    best.open = std::min(best.open, r.open);
    best.skip = std::min(best.skip, r.skip);
    best.count = std::min(best.count, r.count);
  };
  for (int round = 0; round < rounds; ++round) {
    for (const bool after : {false, true}) {
      Round r;
      start = std::chrono::steady_clock::now();
      auto source = open_file_source(input, format);
      r.open = seconds_since(start);
      start = std::chrono::steady_clock::now();
      ReadOnly read_only(*source);
      const Skipped skipped = after ? source->skip(skip) : read_only.skip(skip);
      r.skip = seconds_since(start);
      start = std::chrono::steady_clock::now();
      const std::uint64_t left = after ? source->count_left().value_or(0) : count_by_reading(input, format) - skip;
      r.count = seconds_since(start);
      if (skipped.documents != skip || left != total - skip) {
        fmt::print(stderr, "error: skipped {} and counted {} left, expected {} and {}\n", skipped.documents, left, skip,
                   total - skip);
        return 1;
      }
      fmt::print("round {} {}: open {:.3f} s, skip {:.3f} s, count {:.3f} s, skip + count {:.3f} s\n", round + 1,
                 after ? "after (skip, count_left)" : "before (read and build)", r.open, r.skip, r.count,
                 r.skip + r.count);
      keep_best(after ? best_after : best_before, r);
    }
  }
  for (const bool after : {false, true}) {
    const Round& b = after ? best_after : best_before;
    fmt::print("best {}: open {:.3f} s, skip {:.3f} s, count {:.3f} s, skip + count {:.3f} s\n",
               after ? "after" : "before", b.open, b.skip, b.count, b.skip + b.count);
  }
  return 0;
}
