// Tests of the first-party executors without a model: TextSplitter, JsonlWriter, TsvWriter; and the
// filter executor docs/plugins.md shows (drops documents, reads and sets tags, tensor maths).
#include "test_support.hpp"

#include <ATen/ATen.h>

using namespace flowline;

namespace {

// docs/plugins.md, "Dropping documents, tags, tensor maths", as it is written there.
class KeepLong : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() {
    return {
        "KeepLong",
        "Drop short texts, tag the others, scale embeddings to unit length",
        {flowline::ParamSpec::optional("min_chars", flowline::ParamType::Int, 10, "shorter texts are dropped").min(0)},
        {}};
  }
  explicit KeepLong(const flowline::ExecutorContext& context) : Executor(context) {
    min_chars_ = params().get<std::int64_t>("min_chars");
    bind_default(&KeepLong::filter);
  }

 private:
  void filter(flowline::DocumentArray& docs) {
    docs.erase_if([&](const flowline::Document& d) { return static_cast<std::int64_t>(d.text.size()) < min_chars_; });
    for (auto& d : docs) {
      d.tags["chars"] = static_cast<std::int64_t>(d.text.size());  // set a tag
      if (const auto* lang = d.tags.if_contains("lang"); lang && lang->is_string()) {
        d.tags["english"] = lang->get_string() == "en";  // read one
      }
      if (d.embedding.defined()) d.embedding = d.embedding / d.embedding.norm();
    }
  }
  std::int64_t min_chars_ = 10;
};

}  // namespace

TEST_CASE("the filter executor of docs/plugins.md drops short texts, tags the others and scales embeddings",
          "[executors]") {
  Registry registry;
  registry.add<KeepLong>();
  Flow flow(FlowOptions{}, registry);
  flow.add({.name = "keep", .uses = "KeepLong", .with = {{"min_chars", 5}}});
  DocumentArray in;
  for (const std::string text : {"tiny", "long enough", "no", "also long"}) {
    Document doc(text);
    doc.tags["lang"] = text == "also long" ? "de" : "en";
    doc.embedding = at::full({2}, 3.0f);
    in.push_back(std::move(doc));
  }
  const DocumentArray out = flow.post("/", std::move(in));
  REQUIRE(out.size() == 2);
  CHECK(out[0].text == "long enough");
  CHECK(out[0].tags.at("chars").as_int64() == 11);
  CHECK(out[0].tags.at("english").as_bool());
  CHECK_FALSE(out[1].tags.at("english").as_bool());
  CHECK(std::abs(out[1].embedding[0].item<float>() - std::sqrt(0.5f)) < 1e-6f);
}

TEST_CASE("text splitter replaces documents with paragraphs linked to their parent", "[executors]") {
  Flow flow;
  flow.add({.name = "split", .uses = "TextSplitter"});
  Document source("One.\n\nTwo.\n\nThree.");
  const std::string parent = source.id;
  DocumentArray in;
  in.push_back(std::move(source));
  const DocumentArray out = flow.post("/", std::move(in));
  REQUIRE(out.size() == 3);
  CHECK(out[1].text == "Two.");
  CHECK(out[1].parent_id == parent);
  CHECK(out[1].tags.at("start").as_int64() == 6);
  CHECK(out[1].tags.at("end").as_int64() == 10);
}

TEST_CASE("text splitter can attach sentences as chunks", "[executors]") {
  Flow flow;
  flow.add({.name = "split", .uses = "TextSplitter", .with = {{"unit", "sentence"}, {"output", "chunks"}}});
  DocumentArray in;
  in.push_back(Document("A b. C d! E f?"));
  const DocumentArray out = flow.post("/", std::move(in));
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].chunks.size() == 3);
  CHECK(out[0].chunks[2].text == "E f?");
}

TEST_CASE("JSONL writer writes the chosen fields of every document in order", "[executors]") {
  const auto dir = testing::scratch_dir("jsonl writer");
  {
    Flow flow;
    flow.add({.name = "w",
              .uses = "JsonlWriter",
              .with = {{"path", (dir / "sub" / "out.jsonl").string()}, {"fields", boost::json::array{"text"}}}});
    DocumentArray in = testing::numbered_docs(250);
    in[0].tags["dropped"] = 1;
    flow.post("/", std::move(in), PostOptions{.request_size = 7});
    flow.close();
  }
  const DocumentArray back = read_jsonl(dir / "sub" / "out.jsonl");
  REQUIRE(back.size() == 250);
  for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i].text == std::to_string(i));
  CHECK(back[0].tags.empty());
}

TEST_CASE("TSV writer writes chunk rows with parent fields and escapes tabs", "[executors]") {
  const auto dir = testing::scratch_dir("tsv writer");
  {
    Flow flow;
    flow.add({.name = "split", .uses = "TextSplitter", .with = {{"unit", "sentence"}, {"output", "chunks"}}});
    flow.add({.name = "tsv",
              .uses = "TsvWriter",
              .with = {{"path", (dir / "out.tsv").string()},
                       {"rows", "chunks"},
                       {"columns", boost::json::array{"parent.tags.n", "text", "tags.start", "tags.end"}}}});
    DocumentArray in;
    in.push_back(Document("Tab\there. Second one."));
    in[0].tags["n"] = 7;
    flow.post("/", std::move(in));
    flow.close();
  }
  CHECK(testing::read_text(dir / "out.tsv") ==
        "parent.tags.n\ttext\ttags.start\ttags.end\n7\tTab\\there.\t0\t9\n7\tSecond one.\t10\t21\n");
}

TEST_CASE("a writer cannot run with several replicas", "[executors]") {
  Flow flow;
  flow.add({.name = "w", .uses = "JsonlWriter", .with = {{"path", "x.jsonl"}}, .replicas = 2});
  CHECK_THROWS_WITH(flow.start(), "executor 'w': JsonlWriter runs with at most 1 replica (it owns its output), got 2");
}
