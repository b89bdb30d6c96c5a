// Building a Flow in code and posting documents with a callback per response.
//
//   client ──(requests of 4)──► split (TextSplitter, sentences) ──► stats (TextStats, 2 replicas)
//                                                                        │
//   callback(Response) ◄── in input order ◄──────────────────────────────┘
#include <flowline/flowline.hpp>

#include <fmt/format.h>

int main() {
  flowline::Flow flow(flowline::FlowOptions{.request_size = 4});
  flow.add({.name = "split", .uses = "TextSplitter", .with = {{"unit", "sentence"}}})
      .add({.name = "stats", .uses = "TextStats", .replicas = 2});

  flowline::DocumentArray docs;
  for (int i = 0; i < 10; ++i)
    docs.push_back(flowline::Document(fmt::format("Text {}. It has {} words here.", i, 4 + i % 3)));
  flowline::ArraySource source(std::move(docs));

  std::size_t sentences = 0;
  const auto summary = flow.post("/", source, [&](flowline::Response&& response) {
    if (!response.ok()) {
      fmt::print("request {} failed in {}: {}\n", response.index, response.error_executor, response.error);
      return;
    }
    sentences += response.docs.size();
    fmt::print("request {}: {} sentences, first has {} words\n", response.index, response.docs.size(),
               response.docs[0].tags.at("words").as_int64());
  });
  fmt::print("done: {} requests, {} sentences\n", summary.requests, sentences);
  return sentences == 20 ? 0 : 1;
}
