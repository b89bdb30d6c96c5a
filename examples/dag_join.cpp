// A DAG with a join: two branches work on the same documents, and their results are merged by id.
//
//                 ┌──► stats (TextStats: chars, words, lines) ──┐
//   client ──► start                                             ├──► join (NoOp) ──► responses
//                 └──► label (SetTags: source = "dag example") ──┘
#include <flowline/flowline.hpp>

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

int main() {
  flowline::Flow flow;
  flow.add({.name = "start", .uses = "NoOp"})
      .add({.name = "stats", .uses = "TextStats", .needs = std::vector<std::string>{"start"}})
      .add({.name = "label", .uses = "SetTags", .with = {{"tags", boost::json::object{{"source", "dag example"}}}},
            .needs = std::vector<std::string>{"start"}})
      .add({.name = "join", .uses = "NoOp", .needs = std::vector<std::string>{"stats", "label"}});
  flowline::DocumentArray docs;
  docs.push_back(flowline::Document("Down the rabbit hole"));
  const auto out = flow.post("/", std::move(docs));
  fmt::print("{} document(s); tags after the join: {}\n", out.size(), boost::json::serialize(out[0].tags));
  return out.size() == 1 && out[0].tags.contains("words") && out[0].tags.contains("source") ? 0 : 1;
}
