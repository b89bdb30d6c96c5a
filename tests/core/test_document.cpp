// Tests of Document and DocumentArray: ids, tags, embeddings as views, lookup by id, merges and copies.
#include "test_support.hpp"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

using namespace flowline;

TEST_CASE("documents get unique 32-character hex ids", "[document]") {
  std::set<std::string> ids;
  for (int i = 0; i < 10000; ++i) {
    const Document d;
    REQUIRE(d.id.size() == 32);
    REQUIRE(d.id.find_first_not_of("0123456789abcdef") == std::string::npos);
    ids.insert(d.id);
  }
  CHECK(ids.size() == 10000);
}

TEST_CASE("tags keep integers as integers and hold nested lists and maps", "[document]") {
  Document d("hello");
  d.tags["count"] = 3;
  d.tags["ratio"] = 0.5;
  d.tags["name"] = "x";
  d.tags["list"] = boost::json::array{1, "two", nullptr};
  d.tags["map"] = boost::json::object{{"nested", true}};
  CHECK(d.tags["count"].is_int64());
  CHECK(d.tags["ratio"].is_double());
  CHECK(d.tags["list"].as_array()[1].as_string() == "two");
  CHECK(d.tags["map"].as_object()["nested"].as_bool());
}

TEST_CASE("document array gives all texts without copying them", "[document]") {
  DocumentArray docs = testing::numbered_docs(3);
  const auto texts = docs.texts();
  REQUIRE(texts.size() == 3);
  CHECK(texts[2] == "2");
  CHECK(texts[1].data() == docs[1].text.data());
}

TEST_CASE("embeddings are set from one matrix as views and read back as one matrix", "[document]") {
  DocumentArray docs = testing::numbered_docs(4);
  const at::Tensor m = at::rand({4, 8});
  docs.set_embeddings(m);
  CHECK(docs[2].embedding.data_ptr() == m[2].data_ptr());  // a view, no copy
  CHECK(at::equal(docs.embeddings(), m));
  CHECK_THROWS_WITH(docs.set_embeddings(at::rand({3, 8})), testing::contains("expected a tensor with 4 rows"));
  docs[1].embedding = at::Tensor();
  CHECK_THROWS_WITH(docs.embeddings(), testing::contains("document 1"));
}

TEST_CASE("embeddings read back as one matrix from many rows, strided rows, halves and 2-D embeddings", "[document]") {
  DocumentArray docs = testing::numbered_docs(10000);  // more rows than one thread's share of the copy
  const at::Tensor m = at::rand({10000, 16});
  docs.set_embeddings(m);
  const at::Tensor strided = at::rand({16, 3});
  docs[9999].embedding = strided.select(1, 2);  // not contiguous: every third float
  at::Tensor expected = m.clone();
  expected[9999] = strided.select(1, 2);
  CHECK(at::equal(docs.embeddings(), expected));
  const at::Tensor halves = at::rand({10000, 16}).to(at::kHalf);
  docs.set_embeddings(halves);
  CHECK(at::equal(docs.embeddings(), halves));
  DocumentArray multi = testing::numbered_docs(3);
  const at::Tensor vectors = at::rand({3, 2, 5});  // one [2, 5] embedding a document
  multi.set_embeddings(vectors);
  CHECK(at::equal(multi.embeddings(), vectors));
}

TEST_CASE("document array finds documents by id after changes", "[document]") {
  DocumentArray docs = testing::numbered_docs(100);
  const std::string id = docs[42].id;
  REQUIRE(docs.find(id) == &docs[42]);
  docs.take(0, 10);
  REQUIRE(docs.find(id) == &docs[32]);
  docs[5].id = "renamed";
  CHECK(docs.find("renamed") == &docs[5]);
  CHECK(docs.find("missing") == nullptr);
}

TEST_CASE("appending answer after answer moves the documents already held only a few times, in order", "[document]") {
  // Flow::post collects a large input's answers with append: an array grown to each append's exact size moved
  // every document it held on every append (300,000 texts in requests of 1,024: ~44M moves, most of a GPU run).
  DocumentArray all;
  std::vector<std::string> expected;
  const Document* storage = nullptr;
  int moves = 0;  // appends after which the documents sit elsewhere (a new block is taken before the old is freed)
  for (int a = 0; a < 2000; ++a) {
    DocumentArray answer;
    for (int i = 0; i < 4; ++i) {
      expected.push_back(fmt::format("{}-{}", a, i));
      answer.push_back(Document(expected.back()));
    }
    all.append(std::move(answer));
    CHECK(answer.empty());
    if (&*all.begin() != storage) ++moves;
    storage = &*all.begin();
  }
  CHECK(moves <= 16);  // geometric growth: about log2(8,000); grown to the exact size: one move per append
  REQUIRE(all.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) REQUIRE(all[i].text == expected[i]);
  CHECK(all.find(all[7777].id) == &all[7777]);
}

TEST_CASE("erase_if drops the documents a filter rejects, keeps the rest in order and finds them by id", "[document]") {
  DocumentArray docs = testing::numbered_docs(10);
  const std::string kept_id = docs[7].id;
  const std::string dropped_id = docs[3].id;
  REQUIRE(docs.find(dropped_id) != nullptr);  // the id index is built
  CHECK(docs.erase_if([](const Document& d) { return std::stoi(d.text) % 3 == 0; }) == 4);
  REQUIRE(docs.size() == 6);
  std::vector<std::string> texts;
  for (const auto& d : docs) texts.push_back(d.text);
  CHECK(texts == std::vector<std::string>{"1", "2", "4", "5", "7", "8"});
  CHECK(docs.find(dropped_id) == nullptr);
  REQUIRE(docs.find(kept_id) != nullptr);
  CHECK(docs.find(kept_id)->text == "7");
  CHECK(docs.erase_if([](const Document&) { return false; }) == 0);
}

TEST_CASE("merging a document from another branch fills empty fields and unites tags", "[document]") {
  Document a("text");
  a.tags["a"] = 1;
  Document b;
  b.id = a.id;
  b.embedding = at::ones({2});
  b.tags["b"] = 2;
  b.scores["cos"] = 0.5f;
  Document chunk("c");
  b.chunks.push_back(chunk);
  a.merge_from(std::move(b));
  CHECK(a.text == "text");
  CHECK(a.embedding.defined());
  CHECK(a.tags.size() == 2);
  CHECK(a.scores.at("cos") == 0.5f);
  CHECK(a.chunks.size() == 1);
}

TEST_CASE("deep copy clones tensors while a plain copy shares them", "[document]") {
  Document a("x");
  a.embedding = at::zeros({3});
  Document shallow = a;
  Document deep = deep_copy(a);
  a.embedding.fill_(1);
  CHECK(shallow.embedding.sum().item<float>() == 3);
  CHECK(deep.embedding.sum().item<float>() == 0);
}
