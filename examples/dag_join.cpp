// A DAG with a join: two branches work on the same documents, and their results are merged by id.
//
//                 ┌──► stats (TextStats: chars, words, lines) ──┐
//   client ──► start                                             ├──► join (NoOp) ──► responses
//                 └──► label (Label: tag source = "dag example") ┘
#include <flowline/flowline.hpp>

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

namespace {
// Sets the tag "source" on every document: an executor the program defines and registers itself.
class Label : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() {
    return {"Label",
            "Set the tag 'source'",
            {flowline::ParamSpec::required_param("source", flowline::ParamType::String, "the value")},
            {}};
  }
  explicit Label(const flowline::ExecutorContext& context) : Executor(context) {
    source_ = params().get<std::string>("source");
    bind_default([this](flowline::DocumentArray& docs, const flowline::RequestInfo&) {
      for (auto& doc : docs) doc.tags["source"] = source_;
    });
  }

 private:
  std::string source_;
};
}  // namespace

int main() {
  flowline::Registry::global().add<Label>();
  flowline::Flow flow;
  flow.add({.name = "start", .uses = "NoOp"})
      .add({.name = "stats", .uses = "TextStats", .needs = std::vector<std::string>{"start"}})
      .add({.name = "label",
            .uses = "Label",
            .with = {{"source", "dag example"}},
            .needs = std::vector<std::string>{"start"}})
      .add({.name = "join", .uses = "NoOp", .needs = std::vector<std::string>{"stats", "label"}});
  flowline::DocumentArray docs;
  docs.push_back(flowline::Document("Down the rabbit hole"));
  const auto out = flow.post("/", std::move(docs));
  fmt::print("{} document(s); tags after the join: {}\n", out.size(), boost::json::serialize(out[0].tags));
  return out.size() == 1 && out[0].tags.contains("words") && out[0].tags.contains("source") ? 0 : 1;
}
