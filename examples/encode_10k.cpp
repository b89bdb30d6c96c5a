// The scenarios' first tutorial in C++: 10,000 copies of one sentence posted to a SentenceEncoder on
// '/encode' with request size 32, with a progress bar ("314 steps done in ...").
//
//   client ──(requests of 32)──► encoder (SentenceEncoder, all-MiniLM-L6-v2, device from argv)
//
//   build/examples/encode_10k [--model models/all-MiniLM-L6-v2] [--device cpu|cuda|auto] [--count 10000]
#include "flowline/flowline.hpp"
#include "flowline/sentence_encoder/sentence_encoder.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

int main(int argc, char** argv) {
  std::string model = "models/all-MiniLM-L6-v2", device = "auto";
  std::size_t count = 10000, request_size = 32;
  CLI::App app{"encode 10,000 sentences with a progress bar"};
  app.add_option("--model", model)->capture_default_str();
  app.add_option("--device", device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  app.add_option("--count", count)->capture_default_str();
  app.add_option("--request-size", request_size)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  flowline::sentence_encoder::register_sentence_encoder(flowline::Registry::global());
  flowline::Flow flow(flowline::FlowOptions{.request_size = request_size});
  flow.add({.name = "encoder", .uses = "SentenceEncoder", .with = {{"model", model}}, .device = device});
  flow.start();  // the model moves to its device once, here

  flowline::DocumentArray docs;
  for (std::size_t i = 0; i < count; ++i)
    docs.push_back(flowline::Document("Using a GPU allows you to significantly speed up encoding."));
  flowline::ArraySource source(std::move(docs));
  const std::size_t steps = (count + request_size - 1) / request_size;
  std::size_t dim = 0;
  flowline::PostOptions options;
  double last_draw = -1;
  options.on_progress = [&](const flowline::Progress& p) {
    if (p.requests != steps && p.seconds - last_draw < 0.1) return;  // redraw at most ten times a second
    last_draw = p.seconds;
    const int width = 30, filled = static_cast<int>(width * p.requests / steps);
    fmt::print(stderr, "\r[{:<{}}] {}/{} steps, {:.1f} step/s", std::string(filled, '#'), width, p.requests, steps,
               p.seconds > 0 ? p.requests / p.seconds : 0.0);
  };
  const auto summary = flow.post(
      "/encode", source,
      [&](flowline::Response&& r) {
        if (!r.ok()) throw flowline::ExecutorError(r.error_executor, r.error);
        dim = static_cast<std::size_t>(r.docs[0].embedding.size(0));
      },
      options);
  fmt::print(stderr,
             "\n{} steps done in {:.2f} seconds ({:.1f} requests/s, {:.0f} docs/s), embeddings of {} dimensions\n",
             summary.requests, summary.seconds, summary.requests / summary.seconds, summary.docs_per_second(), dim);
  return 0;
}
