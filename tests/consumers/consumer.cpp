// Links flowline::core, builds a two-executor flow in code and checks the results and the version.
#include <flowline/flowline.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (std::strcmp(FLOWLINE_VERSION_STRING, flowline::version().data()) != 0) {
    std::fprintf(stderr, "header version %s but library version %s\n", FLOWLINE_VERSION_STRING,
                 flowline::version().data());
    return 1;
  }
  flowline::Flow flow;
  flow.add({.name = "split", .uses = "TextSplitter", .with = {{"unit", "sentence"}}})
      .add({.name = "stats", .uses = "TextStats"});
  flowline::DocumentArray docs;
  docs.push_back(flowline::Document("One two three. Four five."));
  const auto out = flow.post("/", std::move(docs));
  if (out.size() != 2 || out[1].tags.at("words").as_int64() != 2) {
    std::fprintf(stderr, "unexpected result\n");
    return 1;
  }
  std::printf("consumer ok: flowline %s, %zu sentences\n", flowline::version().data(), out.size());
  return 0;
}
