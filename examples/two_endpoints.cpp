// Writing an executor with two endpoints and parameters, registered by the program itself.
//
//   client ──"/index"──► store (Store: keeps texts)
//   client ──"/search"─► store (Store: scores the kept texts against the query, top_k matches)
#include <flowline/flowline.hpp>

#include <fmt/format.h>

namespace {

class Store : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() {
    return {"Store",
            "Keep indexed texts; search them by shared words",
            {flowline::ParamSpec::optional("top_k", flowline::ParamType::Int, 2, "matches per query")},
            {"/index", "/search"},
            /*default_endpoint=*/false};
  }
  explicit Store(const flowline::ExecutorContext& context) : Executor(context) {
    top_k_ = params().get<std::size_t>("top_k");
    bind("/index", &Store::index);
    bind("/search", &Store::search);
  }

 private:
  void index(flowline::DocumentArray& docs) {
    for (const auto& d : docs) kept_.push_back(d);
  }
  void search(flowline::DocumentArray& queries) {
    for (auto& q : queries) {
      std::vector<std::pair<float, const flowline::Document*>> scored;
      for (const auto& d : kept_) {
        float shared = 0;
        for (const auto& word : words(q.text)) shared += d.text.find(word) != std::string::npos;
        scored.emplace_back(shared, &d);
      }
      std::sort(scored.begin(), scored.end(), [](auto& a, auto& b) { return a.first > b.first; });
      for (std::size_t i = 0; i < std::min(top_k_, scored.size()); ++i) {
        flowline::Document match = *scored[i].second;
        match.scores["shared_words"] = scored[i].first;
        q.matches.push_back(std::move(match));
      }
    }
  }
  static std::vector<std::string> words(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = std::min(text.find(' ', start), text.size());
      if (end > start) out.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return out;
  }
  std::size_t top_k_;
  std::vector<flowline::Document> kept_;
};

}  // namespace

int main() {
  flowline::Registry::global().add<Store>();
  flowline::Flow flow;
  flow.add({.name = "store", .uses = "Store", .with = {{"top_k", 1}}});
  flowline::DocumentArray corpus;
  for (const char* t : {"the white rabbit ran", "the queen of hearts", "a mad tea party"})
    corpus.push_back(flowline::Document(t));
  flow.post("/index", std::move(corpus));
  flowline::DocumentArray queries;
  queries.push_back(flowline::Document("rabbit ran late"));
  const auto results = flow.post("/search", std::move(queries));
  const auto& best = results[0].matches[0];
  fmt::print("best match for '{}': '{}' ({} shared words)\n", results[0].text, best.text,
             best.scores.at("shared_words"));
  return best.text == "the white rabbit ran" ? 0 : 1;
}
