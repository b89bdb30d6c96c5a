// Loading a YAML flow and running it over a file, as the launcher does.
//
//   flows/paragraphs.yml:  client ──► splitter ──► stats ──► writer (JSONL)
//
//   build/examples/load_yaml_flow flows/paragraphs.yml ../shared/data/corpus/alice-in-wonderland.txt
#include <flowline/flowline.hpp>

#include <fmt/format.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: {} FLOW.yml TEXT_FILE\n", argv[0]);
    return 2;
  }
  try {
    flowline::Flow flow = flowline::Flow::from_yaml(argv[1]);  // validated: errors carry file:line:column
    auto source = flowline::open_file_source(argv[2], flowline::InputFormat::Text);
    std::size_t docs = 0;
    const auto summary = flow.post("/", *source, [&](flowline::Response&& r) { docs += r.docs.size(); });
    fmt::print("{} documents out of {} request(s) in {:.3f} s\n", docs, summary.requests, summary.seconds);
    return summary.failed_requests == 0 ? 0 : 1;
  } catch (const flowline::ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
}
