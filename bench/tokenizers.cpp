// Tokenization speed, one thread: flowline::models::Tokenizer on each tokenizer file given, beside the
// MiniLM model's (WordPiece, what the SentenceEncoder ran first), over the corpus's paragraphs.
// Prints ids/s and paragraphs/s, best of --rounds passes over the corpus (docs/benchmarks.md). --offsets adds
// each tokenizer's encode_with_offsets_into() (one Encoding reused) and encode_with_offsets() (a new Encoding a
// text) beside its encode_into(); --cpu-time times by the thread's CPU clock; --warm times warm caches.
//
//   build/bench/tokenizers_bench --corpus /work/shared/data/corpus --model models/all-MiniLM-L6-v2 \
//     tests/data/tokenizers/wordpiece-cased/tokenizer.json ...
#include "flowline/models/tokenizer.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<std::string> corpus_paragraphs(const fs::path& corpus) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(corpus))
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> paragraphs;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::string line, paragraph;
    const auto flush = [&] {
      if (!paragraph.empty()) paragraphs.push_back(paragraph);
      paragraph.clear();
    };
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty())
        flush();
      else
        paragraph += (paragraph.empty() ? "" : " ") + line;
    }
    flush();
  }
  return paragraphs;
}

using Encode = std::function<std::size_t(std::string_view, std::vector<std::int32_t>&)>;

struct Candidate {
  std::string name;
  Encode encode;
  double best = 1e30;  // seconds of the fastest pass
  std::size_t ids = 0;
};

// Seconds by the wall clock, or (--cpu-time) by this thread's CPU clock: on a machine others share, time
// spent descheduled does not count.
double now(bool cpu_time) {
  if (cpu_time) {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Passes over the corpus taking turns, so that a busy moment of a shared machine falls on every candidate
// alike; the fastest pass of each counts. With `warm`, each timed pass follows an untimed one of the same
// candidate: it finds this thread's caches (the models' word caches) as a served model's thread has them,
// not as the candidate before left them.
void measure(std::vector<Candidate>& candidates, const std::vector<std::string>& texts, int rounds, bool cpu_time,
             bool warm) {
  std::vector<std::int32_t> ids;
  ids.reserve(1 << 16);
  for (int r = 0; r < rounds; ++r)
    for (Candidate& c : candidates) {
      if (warm)
        for (const std::string& text : texts) {
          ids.clear();
          c.encode(text, ids);
        }
      std::size_t total = 0;
      const double start = now(cpu_time);
      for (const std::string& text : texts) {
        ids.clear();
        total += c.encode(text, ids);
      }
      c.best = std::min(c.best, now(cpu_time) - start);
      c.ids = total;
    }
  for (const Candidate& c : candidates)
    fmt::print("{:<44} {:>10} ids {:>12.0f} ids/s {:>10.0f} paragraphs/s\n", c.name, c.ids, c.ids / c.best,
               texts.size() / c.best);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Single-thread tokenization speed of flowline's tokenizers"};
  fs::path corpus, model;
  std::vector<fs::path> files;
  int rounds = 5;
  bool offsets = false, cpu_time = false, warm = false;
  app.add_option("--corpus", corpus, "folder of .txt books")->required();
  app.add_option("--model", model, "a model folder whose tokenizer is the baseline (tokenizer.json or vocab.txt)")
      ->required();
  app.add_option("--rounds", rounds, "passes over the corpus; the best counts");
  app.add_option("tokenizers", files, "more tokenizer.json files");
  app.add_flag("--offsets", offsets,
               "also time encode_with_offsets_into() and encode_with_offsets() (ids and each token's offsets)");
  app.add_flag("--cpu-time", cpu_time, "time passes by the thread's CPU clock, not the wall clock (a shared machine)");
  app.add_flag("--warm", warm,
               "time each pass after an untimed one of the same candidate (warm word caches, as a served model's)");
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> texts = corpus_paragraphs(corpus);
  fmt::print("{} paragraphs, one thread, best of {} ({} time{})\n", texts.size(), rounds, cpu_time ? "CPU" : "wall",
             warm ? ", warm" : "");
  std::vector<std::unique_ptr<flowline::models::Tokenizer>> tokenizers;
  tokenizers.push_back(flowline::models::Tokenizer::from_folder(model));
  for (const fs::path& file : files) tokenizers.push_back(flowline::models::Tokenizer::from_json_file(file));
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < tokenizers.size(); ++i) {
    const auto* tok = tokenizers[i].get();
    const std::string name =
        i == 0 ? model.filename().string() + "/tokenizer.json" : files[i - 1].parent_path().filename().string();
    candidates.push_back({"Tokenizer, " + name, [tok](std::string_view t, std::vector<std::int32_t>& ids) {
                            return tok->encode_into(t, 0, ids);
                          }});
    if (!offsets) continue;
    // Into one Encoding reused, as encode_into() into one vector of ids; and returned anew (five vectors
    // allocated a text).
    candidates.push_back({"  with offsets", [tok](std::string_view t, std::vector<std::int32_t>&) {
                            thread_local flowline::models::Encoding e;
                            tok->encode_with_offsets_into(t, 0, e);
                            return e.ids.size();
                          }});
    candidates.push_back({"  with offsets, returned", [tok](std::string_view t, std::vector<std::int32_t>&) {
                            return tok->encode_with_offsets(t).ids.size();
                          }});
  }
  measure(candidates, texts, rounds, cpu_time, warm);
  return 0;
}
