// A program that links an executor library and registers the executor itself, instead of having it loaded
// from the executor folder as the launcher does: its own Registry holds exactly what it adds.
//
//   client ──► split (TextSplitter: sentences) ──► encoder (SentenceEncoder, linked in) ──► responses
//
//   build/examples/direct_executor [MODEL_DIR]     (default models/all-MiniLM-L6-v2; tests use tests/data/tiny-bert)
#include "flowline/flowline.hpp"
#include "flowline/sentence_encoder/sentence_encoder.hpp"

#include <fmt/format.h>

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "models/all-MiniLM-L6-v2";
  // A plain registry: the built-in executors and SentenceEncoder from flowline::sentence_encoder, linked
  // into this program. No plugin is looked for or loaded.
  flowline::Registry registry;
  flowline::register_builtin_executors(registry);
  flowline::sentence_encoder::register_sentence_encoder(registry);

  flowline::Flow flow(flowline::FlowOptions{}, registry);
  flow.add({.name = "split", .uses = "TextSplitter", .with = {{"unit", "sentence"}}})
      .add({.name = "encoder", .uses = "SentenceEncoder", .with = {{"model", model}}, .device = "cpu"});
  flowline::DocumentArray docs;
  docs.push_back(flowline::Document("The rabbit ran. The queen shouted. Alice followed the rabbit."));
  const auto out = flow.post("/", std::move(docs));
  const auto origin = registry.get("SentenceEncoder").origin;
  std::size_t dims = 0;
  for (const auto& doc : out) {
    if (!doc.embedding.defined()) {
      fmt::print(stderr, "document '{}' has no embedding\n", doc.text);
      return 1;
    }
    dims = static_cast<std::size_t>(doc.embedding.numel());
  }
  fmt::print("{} sentences encoded by SentenceEncoder ({}), {} dimensions each\n", out.size(), origin, dims);
  return out.size() == 3 && dims > 0 ? 0 : 1;
}
