// Tests of the first-party executors without a model: TextSplitter, JsonlWriter, TsvWriter.
#include "test_support.hpp"

using namespace flowline;

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
