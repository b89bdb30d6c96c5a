// Framework overhead: 1,000,000 text documents through a three-executor no-op flow, in process, with
// request size 100. Prints docs/s for several runs and the best. Target (2-core dev machine): >= 1M docs/s.
//
//   client ──► a (NoOp) ──► b (NoOp) ──► c (NoOp) ──► responses (counted, in order)
//
//   build/bench/flow_overhead [--docs N] [--request-size N] [--runs N]
#include "flowline/flowline.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace {

// Makes documents on the fly, as a reader would: a fresh id and a short text each.
class GeneratedSource : public flowline::DocumentSource {
 public:
  explicit GeneratedSource(std::size_t total) : total_(total) {}
  std::size_t read(flowline::DocumentArray& out, std::size_t max) override {
    const std::size_t n = std::min(max, total_ - made_);
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(flowline::Document("Using a GPU allows you to significantly speed up encoding."));
    made_ += n;
    return n;
  }

 private:
  std::size_t total_;
  std::size_t made_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t docs = 1'000'000, request_size = 100, runs = 3;
  CLI::App app{"flowline framework overhead benchmark"};
  app.add_option("--docs", docs, "documents per run")->capture_default_str();
  app.add_option("--request-size", request_size, "documents per request")->capture_default_str();
  app.add_option("--runs", runs, "runs; the best is reported")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  flowline::Flow flow(flowline::FlowOptions{.request_size = request_size});
  flow.add({.name = "a", .uses = "NoOp"}).add({.name = "b", .uses = "NoOp"}).add({.name = "c", .uses = "NoOp"});
  flow.start();
  double best = 0;
  for (std::size_t run = 0; run < runs; ++run) {
    GeneratedSource source(docs);
    std::size_t received = 0;
    const auto summary = flow.post("/", source, [&](flowline::Response&& r) { received += r.docs.size(); });
    if (received != docs) {
      fmt::print(stderr, "lost documents: {} of {}\n", received, docs);
      return 1;
    }
    fmt::print("run {}: {} docs in {:.3f} s = {:.0f} docs/s\n", run + 1, summary.documents, summary.seconds,
               summary.docs_per_second());
    best = std::max(best, summary.docs_per_second());
  }
  flow.close();
  fmt::print("flow_overhead: best {:.0f} docs/s (3 no-op executors, request size {}, {} docs)\n", best, request_size,
             docs);
  return 0;
}
