// The VectorIndex's behaviours, the same for every backend (exact on the CPU, hnsw, and exact on a GPU when
// there is one): add, search against brute force, filter, update, delete, clear, restart on a workspace; and
// its workspace's guarantees: damaged files named with their offset, a torn log tail cut, one writer.
#include "../gateway/gateway_fixtures.hpp"
#include "backend.hpp"
#include "distance.hpp"
#include "filter.hpp"
#include "index_fixtures.hpp"

#include "flowline/flow_config.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

using namespace flowline;
using namespace index_test;
using flowline::testing::contains;
using flowline::testing::starts_with;
namespace fs = std::filesystem;
namespace json = boost::json;

TEST_CASE("every backend finds the true nearest documents, best first, with the metric's score", "[index]") {
  const Backend backend = GENERATE(from_range(backends()));
  const Corpus corpus(2000, 32);
  IndexFlow index(backend);
  index.post("/index", corpus.documents());
  const DocumentArray queries = corpus.queries(20);
  const DocumentArray out = index.post("/search", queries, json::object{{"limit", 10}});
  REQUIRE(out.size() == 20);
  std::size_t found = 0;
  for (std::size_t q = 0; q < out.size(); ++q) {
    const std::vector<std::string> truth = corpus.nearest(queries[q].embedding, 10);
    REQUIRE(out[q].matches.size() == 10);
    float previous = 2;
    for (const Document& match : out[q].matches) {
      const float score = match.scores.at("cosine");
      CHECK(score <= previous + 1e-6f);  // best first
      previous = score;
      found += std::count(truth.begin(), truth.end(), match.id);
      // The stored text and tags come back with the match.
      const std::size_t i = std::stoul(match.id.substr(4));
      CHECK(match.text == corpus.text(i));
      CHECK(match.tags.at("group").as_int64() == static_cast<std::int64_t>(i % 5));
    }
  }
  const double recall = static_cast<double>(found) / (10.0 * out.size());
  INFO(backend.name << " recall@10 " << recall);
  CHECK(recall >= (backend.exact ? 1.0 : 0.95));
}

TEST_CASE("a /search answer carries embeddings, the query's own and the matches', only when return_embeddings asks",
          "[index]") {
  // A served search is answered with its matches: the query's embedding (the encoder's row, on a GPU) would be
  // copied out and written as numbers in every answer, about half its bytes (issue 49 §3).
  const Backend backend = GENERATE(from_range(backends()));
  const Corpus corpus(300, 32);
  IndexFlow index(backend);
  index.post("/index", corpus.documents());
  const DocumentArray queries = corpus.queries(3);
  const DocumentArray plain = index.post("/search", queries, json::object{{"limit", 4}});
  REQUIRE(plain.size() == 3);
  for (const Document& q : plain) {
    CHECK_FALSE(q.embedding.defined());
    REQUIRE(q.matches.size() == 4);
    for (const Document& match : q.matches) CHECK_FALSE(match.embedding.defined());
  }
  const DocumentArray asked = index.post("/search", queries, json::object{{"limit", 4}, {"return_embeddings", true}});
  REQUIRE(asked.size() == 3);
  for (std::size_t i = 0; i < asked.size(); ++i) {
    INFO(backend.name << " query " << i);
    REQUIRE(asked[i].embedding.defined());
    CHECK(at::allclose(asked[i].embedding.to(at::kCPU, at::kFloat), queries[i].embedding.to(at::kCPU, at::kFloat)));
    REQUIRE(asked[i].matches.size() == 4);
    for (const Document& match : asked[i].matches) {
      REQUIRE(match.embedding.defined());
      CHECK(match.embedding.numel() == 32);
    }
  }
}

TEST_CASE("the exact backend's top matches over many rows are brute force's, deleted rows excluded", "[index]") {
  // 100,000 rows: enough chunks of rows for the two-step top-k (exact_backend.cpp, chunked_topk), in fp16 too.
  const Backend backend = GENERATE(from_range(backends()));
  if (!backend.exact) return;
  const Corpus corpus(100000, 8);
  // fp32: fp16 storage rounds these close neighbours' scores into ties (its recall is measured by bench/).
  IndexFlow index(backend, json::object{{"dtype", "fp32"}});
  for (std::size_t first = 0; first < 100000; first += 10000) index.post("/index", corpus.documents(first, 10000));
  const DocumentArray queries = corpus.queries(30);
  const auto check_against_truth = [&](const std::function<bool(std::size_t)>& allowed) {
    const DocumentArray out = index.post("/search", queries, json::object{{"limit", 20}});
    for (std::size_t q = 0; q < out.size(); ++q) {
      const std::vector<std::string> truth = corpus.nearest(queries[q].embedding, 20, allowed);
      REQUIRE(out[q].matches.size() == 20);
      std::size_t found = 0;
      for (const Document& match : out[q].matches) found += std::count(truth.begin(), truth.end(), match.id);
      CHECK(found >= 19);  // a tie at the 20th place may pick another document of the same score
      CHECK(out[q].matches[0].id == truth[0]);
    }
  };
  check_against_truth({});
  DocumentArray gone;
  for (std::size_t i = 0; i < 100000; i += 3) gone.push_back(Document()).id = fmt::format("doc-{}", i);
  index.post("/delete", gone);
  check_against_truth([](std::size_t i) { return i % 3 != 0; });
}

TEST_CASE("an fp16 GPU index finds brute force's matches through its fp32 copy while small and by rescoring once large",
          "[index][gpu]") {
  // exact_backend.cpp: fp16 storage of up to 2^25 numbers (capacity x dim) scores an fp32 copy of its rows; past that
  // it scores in fp16 and rescores its candidates in fp32. 60,000 rows of 512 (capacity 60,000: 30.7M numbers) take
  // the first path; 10,000 more (capacity doubled to 120,000: 61M) the second.
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no CUDA device");
  const Corpus corpus(70000, 512);
  IndexFlow index(Backend{"exact-cuda-fp16", {{"backend", "exact"}, {"device", "cuda"}}, true},
                  json::object{{"dtype", "fp16"}});
  const DocumentArray queries = corpus.queries(30);
  const auto check = [&](std::size_t stored) {
    const DocumentArray out = index.post("/search", queries, json::object{{"limit", 20}});
    for (std::size_t q = 0; q < out.size(); ++q) {
      const std::vector<std::string> truth =
          corpus.nearest(queries[q].embedding, 20, [&](std::size_t i) { return i < stored; });
      REQUIRE(out[q].matches.size() == 20);
      std::size_t found = 0;
      for (const Document& match : out[q].matches) found += std::count(truth.begin(), truth.end(), match.id);
      CHECK(found >= 18);  // fp16's rounding of the stored rows may swap neighbours of nearly the same score
      CHECK(out[q].matches[0].id == truth[0]);
      for (std::size_t m = 1; m < out[q].matches.size(); ++m) {
        CHECK(out[q].matches[m].scores.at("cosine") <= out[q].matches[m - 1].scores.at("cosine"));
      }
    }
  };
  for (std::size_t first = 0; first < 60000; first += 10000) index.post("/index", corpus.documents(first, 10000));
  check(60000);
  index.post("/index", corpus.documents(60000, 10000));
  check(70000);
}

TEST_CASE("a filter on tags returns only the documents it matches, on every backend", "[index]") {
  const Backend backend = GENERATE(from_range(backends()));
  const Corpus corpus(2000, 32);
  IndexFlow index(backend);
  index.post("/index", corpus.documents());
  const json::value filter = json::parse(R"({"group": {"$in": [1, 3]}, "$or": [{"even": true}, {"n": {"$lt": 100}}]})");
  const auto allowed = [](std::size_t i) { return (i % 5 == 1 || i % 5 == 3) && (i % 2 == 0 || i < 100); };
  const DocumentArray queries = corpus.queries(10);
  const DocumentArray out = index.post("/search", queries, json::object{{"limit", 5}, {"filter", filter}});
  for (std::size_t q = 0; q < out.size(); ++q) {
    const auto truth = corpus.nearest(queries[q].embedding, 5, allowed);
    REQUIRE(out[q].matches.size() == 5);
    std::size_t found = 0;
    for (const Document& match : out[q].matches) {
      CHECK(allowed(std::stoul(match.id.substr(4))));
      found += std::count(truth.begin(), truth.end(), match.id);
    }
    CHECK(found >= (backend.exact ? 5u : 4u));
  }
  // A narrow filter (one document) and one that matches nothing.
  const DocumentArray one = index.post("/search", queries, json::object{{"filter", json::object{{"tags.n", 7}}}});
  REQUIRE(one[0].matches.size() == 1);
  CHECK(one[0].matches[0].id == "doc-7");
  const DocumentArray none = index.post("/search", queries, json::object{{"filter", json::object{{"n", -1}}}});
  CHECK(none[0].matches.empty());
}

TEST_CASE("update, delete and clear change what a search finds, on every backend", "[index]") {
  const Backend backend = GENERATE(from_range(backends()));
  const Corpus corpus(500, 16);
  IndexFlow index(backend);
  index.post("/index", corpus.documents());
  DocumentArray query = corpus.queries(1);
  // Move doc-3 onto the query: it becomes the best match.
  Document moved("moved text");
  moved.id = "doc-3";
  moved.embedding = query[0].embedding.clone();
  index.post("/update", one_document(moved));
  DocumentArray out = index.post("/search", query, json::object{{"limit", 3}});
  REQUIRE(!out[0].matches.empty());
  CHECK(out[0].matches[0].id == "doc-3");
  CHECK(out[0].matches[0].text == "moved text");
  CHECK(std::abs(out[0].matches[0].scores.at("cosine") - 1.0f) < 1e-3f);
  CHECK(out[0].matches[0].tags.at("group").as_int64() == 3);  // tags not sent: kept
  // Tags alone: the vector stays.
  Document retagged;
  retagged.id = "doc-3";
  retagged.tags["group"] = 42;
  index.post("/update", one_document(retagged));
  out = index.post("/search", query, json::object{{"limit", 1}, {"filter", json::object{{"group", 42}}}});
  REQUIRE(out[0].matches.size() == 1);
  CHECK(out[0].matches[0].id == "doc-3");
  CHECK(out[0].matches[0].text == "moved text");
  // An update of an unknown id changes nothing.
  Document unknown;
  unknown.id = "nope";
  CHECK_THROWS_WITH(index.post("/update", one_document(unknown)),
                    contains("not in the index (ids nope); nothing was changed"));
  // Delete: gone from searches, and each document says whether it was there.
  DocumentArray doomed;
  for (const char* id : {"doc-3", "never-indexed"}) {
    doomed.push_back(Document()).id = id;
  }
  const DocumentArray deleted = index.post("/delete", doomed);
  CHECK(deleted[0].tags.at("deleted").as_bool());
  CHECK_FALSE(deleted[1].tags.at("deleted").as_bool());
  out = index.post("/search", query, json::object{{"limit", 500}});
  CHECK(out[0].matches.size() == 499);
  for (const Document& m : out[0].matches) CHECK(m.id != "doc-3");
  CHECK(index.status().at("count").as_uint64() == 499);
  // Re-indexing a deleted id brings it back, once.
  index.post("/index", one_document(moved));
  out = index.post("/search", query, json::object{{"limit", 500}});
  CHECK(out[0].matches.size() == 500);
  CHECK(out[0].matches[0].id == "doc-3");
  // Indexing an id again replaces it: still one document per id.
  index.post("/index", corpus.documents());
  CHECK(index.status().at("count").as_uint64() == 500);
  index.post("/clear", one_document(Document()));
  CHECK(index.status().at("count").as_uint64() == 0);
  CHECK(index.post("/search", query)[0].matches.empty());
}

TEST_CASE("/status reports count, dimension, metric and backend; other endpoints pass through", "[index]") {
  const Corpus corpus(100, 8);
  IndexFlow index(backends().front(), json::object{{"metric", "l2"}});
  index.post("/index", corpus.documents());
  const json::object status = index.status();
  CHECK(status.at("count").as_uint64() == 100);
  CHECK(status.at("dimension").as_uint64() == 8);
  CHECK(status.at("metric").as_string() == "l2");
  CHECK(status.at("backend").as_string() == "exact");
  CHECK(status.at("bytes").as_uint64() >= 100 * 8 * 4);
  // l2: the score is a distance, smallest first; the nearest of a stored vector is itself at distance 0.
  const DocumentArray out = index.post("/search", one_document(corpus.documents()[5]), json::object{{"limit", 3}});
  CHECK(out[0].matches[0].id == "doc-5");
  CHECK(out[0].matches[0].scores.at("l2") < 1e-3f);
  CHECK(out[0].matches[1].scores.at("l2") >= out[0].matches[0].scores.at("l2"));
  const DocumentArray passed = index.post("/encode", corpus.queries(2));
  CHECK(passed.size() == 2);
  CHECK(passed[0].matches.empty());
}

TEST_CASE("devices shards the exact backend's vectors: /status says where, results are the unsharded ones", "[index]") {
  const Corpus corpus(1000, 16);
  IndexFlow one(backends().front(), json::object{{"metric", "l2"}});
  IndexFlow sharded({"sharded", {{"backend", "exact"}, {"devices", json::array{"cpu", "cpu", "cpu"}}}},
                    json::object{{"metric", "l2"}});
  one.post("/index", corpus.documents());
  sharded.post("/index", corpus.documents());
  const json::object status = sharded.status();
  CHECK(status.at("count").as_uint64() == 1000);
  CHECK(status.at("where").as_string() == "cpu + cpu + cpu (3 shards), fp32");
  CHECK(status.at("bytes").as_uint64() >= 1000 * 16 * 4);
  const json::object limit{{"limit", 7}};
  const DocumentArray a = one.post("/search", corpus.queries(20), limit);
  const DocumentArray b = sharded.post("/search", corpus.queries(20), limit);
  REQUIRE(a.size() == b.size());
  for (std::size_t q = 0; q < a.size(); ++q) {
    REQUIRE(a[q].matches.size() == 7);
    REQUIRE(b[q].matches.size() == 7);
    for (std::size_t m = 0; m < 7; ++m) {
      CHECK(a[q].matches[m].id == b[q].matches[m].id);
      CHECK(std::abs(a[q].matches[m].scores.at("l2") - b[q].matches[m].scores.at("l2")) < 1e-4f);
    }
  }
  try {
    IndexFlow both({"both", {{"device", "cpu"}, {"devices", json::array{"cpu", "cpu"}}}});
    FAIL("an index with both device and devices started");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), testing::contains("give either device or devices, not both"));
  }
}

TEST_CASE("an index's replicas are copies of one store: searches spread over them, changes seen by all", "[index]") {
  const Corpus corpus(2000, 16);
  for (const Backend& backend : backends()) {
    SECTION(backend.name) {
      // One workspace for four replicas: were each to open its own store, the second would meet the lock.
      const fs::path w = fresh_workspace("replicas-" + backend.name);
      IndexFlow one(backend);
      IndexFlow four(backend, json::object{{"workspace", w.string()}}, 4);
      one.post("/index", corpus.documents());
      four.post("/index", corpus.documents(), {}, 100);  // 20 requests, taken by whichever replica is free
      CHECK(four.status().at("count").as_uint64() == 2000);
      // 300 queries in requests of 5: many in flight at once over the four replicas, each answered as one
      // replica alone answers it.
      const DocumentArray a = one.post("/search", corpus.queries(300));
      const DocumentArray b = four.post("/search", corpus.queries(300), {}, 5);
      REQUIRE(a.size() == b.size());
      for (std::size_t q = 0; q < a.size(); ++q) {
        REQUIRE(a[q].matches.size() == b[q].matches.size());
        for (std::size_t m = 0; m < a[q].matches.size(); ++m) CHECK(a[q].matches[m].id == b[q].matches[m].id);
      }
      // Which replica takes a request is up to the scheduler: on a loaded machine one replica can take a whole
      // round. More rounds of the same queries until a second replica has searched (bounded).
      const auto replicas_searched = [&four] {
        int searched = 0;
        for (const auto& r : four.flow().stats().replicas) searched += r.metrics.count("queries") ? 1 : 0;
        return searched;
      };
      for (int round = 0; round < 20 && replicas_searched() < 2; ++round)
        four.post("/search", corpus.queries(300), {}, 5);
      CHECK(replicas_searched() >= 2);
      // A delete made through one replica is gone for every replica's search.
      DocumentArray doomed;
      for (std::size_t i = 0; i < 2000; i += 2) doomed.push_back(Document(Document::WithId{fmt::format("doc-{}", i)}));
      four.post("/delete", std::move(doomed), {}, 50);
      CHECK(four.status().at("count").as_uint64() == 1000);
      for (const Document& query : four.post("/search", corpus.queries(100), {}, 5)) {
        for (const Document& m : query.matches) CHECK(std::stoi(m.id.substr(4)) % 2 == 1);
      }
    }
  }
}

TEST_CASE("an index in shards keeps each document in one shard and answers as one index, restarts included",
          "[index]") {
  const Corpus corpus(1500, 16);
  for (const Backend& backend : backends()) {
    SECTION(backend.name) {
      const fs::path w = fresh_workspace("shards-" + backend.name);
      IndexFlow one(backend);
      one.post("/index", corpus.documents());
      const DocumentArray expected = one.post("/search", corpus.queries(40), json::object{{"limit", 10}});
      {
        // Three shards of two replicas each, on one workspace: a folder per shard.
        IndexFlow sharded(backend, json::object{{"workspace", w.string()}, {"limit", 7}}, 2, 3);
        sharded.post("/index", corpus.documents(), {}, 100);
        const json::object status = sharded.status();
        CHECK(status.at("count").as_uint64() == 1500);
        CHECK(status.at("shards").as_uint64() == 3);
        for (int s = 0; s < 3; ++s) CHECK(fs::exists(w / fmt::format("shard-{}-of-3", s) / "LOCK"));
        // Each query's matches are the best over all shards: the unsharded index's, best first; the request's
        // limit, else the executor's (7).
        const DocumentArray got = sharded.post("/search", corpus.queries(40), json::object{{"limit", 10}}, 8);
        REQUIRE(got.size() == expected.size());
        std::size_t same = 0;
        for (std::size_t q = 0; q < got.size(); ++q) {
          CHECK(got[q].text == expected[q].text);  // answers in request order
          REQUIRE(got[q].matches.size() == 10);
          for (std::size_t m = 0; m < 10; ++m) {
            same += got[q].matches[m].id == expected[q].matches[m].id;
            if (m > 0) CHECK(got[q].matches[m].scores.at("cosine") <= got[q].matches[m - 1].scores.at("cosine"));
          }
        }
        CHECK(same >= (backend.exact ? 400u : 380u));
        for (const Document& q : sharded.post("/search", corpus.queries(5))) CHECK(q.matches.size() == 7);
        // Deletes and updates reach the shard holding the document; answers come back in request order.
        DocumentArray doomed;
        for (const char* id : {"doc-3", "missing", "doc-4", "doc-5"}) doomed.push_back(Document(Document::WithId{id}));
        const DocumentArray deleted = sharded.post("/delete", std::move(doomed));
        REQUIRE(deleted.size() == 4);
        CHECK(deleted[0].id == "doc-3");
        CHECK(deleted[0].tags.at("deleted").as_bool());
        CHECK(deleted[1].id == "missing");
        CHECK_FALSE(deleted[1].tags.at("deleted").as_bool());
        CHECK(deleted[3].id == "doc-5");
        DocumentArray changed;
        changed.push_back(Document(Document::WithId{"doc-97"})).text = "a changed paragraph";
        sharded.post("/update", std::move(changed));
        CHECK(sharded.status().at("count").as_uint64() == 1497);
      }
      // Started again on its workspace with the same shards: the same documents, the changes kept.
      IndexFlow again(backend, json::object{{"workspace", w.string()}}, 1, 3);
      CHECK(again.status().at("count").as_uint64() == 1497);
      const DocumentArray near97 = again.post("/search", one_document(corpus.documents(97, 1)[0]));
      REQUIRE_FALSE(near97[0].matches.empty());
      CHECK(near97[0].matches[0].id == "doc-97");
      CHECK(near97[0].matches[0].text == "a changed paragraph");
    }
  }
}

TEST_CASE("an index's workspace opened with another number of shards is refused, naming both", "[index]") {
  const Backend backend{"exact-cpu", {{"backend", "exact"}, {"device", "cpu"}}, true};
  const fs::path w = fresh_workspace("reshard");
  { IndexFlow(backend, json::object{{"workspace", w.string()}}, 1, 2).post("/index", Corpus(10, 8).documents()); }
  CHECK_THROWS_WITH(IndexFlow(backend, json::object{{"workspace", w.string()}}, 1, 3),
                    contains("shard-0-of-2, shard-1-of-2") && contains("shards: 3"));
  CHECK_THROWS_WITH(IndexFlow(backend, json::object{{"workspace", w.string()}}), contains("no shards"));
  const fs::path plain = fresh_workspace("reshard-plain");
  { IndexFlow(backend, json::object{{"workspace", plain.string()}}).post("/index", Corpus(10, 8).documents()); }
  CHECK_THROWS_WITH(IndexFlow(backend, json::object{{"workspace", plain.string()}}, 1, 2), contains("not sharded"));
  // Only a type that says how its requests spread can be sharded; remote shards are one host each.
  Registry& registry = index_registry();
  CHECK_THROWS_WITH(
      load_flow_config_text("executors:\n  - {name: s, uses: TextSplitter, shards: 2}\n", "f.yml", registry),
      contains("f.yml:2") && contains("TextSplitter cannot be sharded"));
  CHECK_THROWS_WITH(load_flow_config_text("executors:\n  - {name: i, uses: VectorIndex, shards: 2, hosts: "
                                          "['127.0.0.1:1']}\n",
                                          "f.yml", registry),
                    contains("give 2 hosts (got 1)"));
}

TEST_CASE("bad requests to the index fail naming the document or the filter, and store nothing", "[index]") {
  const Corpus corpus(10, 8);
  IndexFlow index(backends().front());
  DocumentArray docs = corpus.documents();
  docs[4].embedding = at::Tensor();
  CHECK_THROWS_WITH(index.post("/index", docs), contains("document 4 ('doc-4') has no embedding"));
  CHECK(index.status().at("count").as_uint64() == 0);
  docs = corpus.documents();
  docs[2].id = docs[1].id;
  CHECK_THROWS_WITH(index.post("/index", docs), contains("'doc-1' appears twice in one request"));
  index.post("/index", corpus.documents());
  CHECK_THROWS_WITH(index.post("/index", one_document(Corpus(1, 9).documents()[0])),
                    contains("vectors of 9 dimensions in an index of 8"));
  const auto search_with = [&](const char* filter) {
    index.post("/search", corpus.queries(1), json::object{{"filter", json::parse(filter)}});
  };
  CHECK_THROWS_WITH(search_with(R"({"group": {"$regex": "a"}})"),
                    contains("parameter 'filter'.group: unknown operator '$regex'; expected one of $eq $ne"));
  CHECK_THROWS_WITH(search_with(R"({"$or": [{"n": 1}, 3]})"),
                    contains("parameter 'filter'.$or[1]: expected an object"));
  CHECK_THROWS_WITH(search_with(R"({"n": {"$in": 3}})"), contains("parameter 'filter'.n.$in: expected a list"));
  CHECK_THROWS_WITH(index.post("/search", corpus.queries(1), json::object{{"limit", 0}}),
                    contains("parameter 'limit': expected an integer from 1"));
  CHECK(index.status().at("count").as_uint64() == 10);
}

TEST_CASE("an index restarted on its workspace answers as before, every change replayed", "[index]") {
  const Backend backend = GENERATE(from_range(backends()));
  const fs::path workspace = fresh_workspace("restart-" + backend.name);
  const Corpus corpus(1500, 256);  // 1.5 MiB of vectors
  const DocumentArray queries = corpus.queries(5);
  DocumentArray before;
  // snapshot_mb 1: the log passes a snapshot on the way, so both the snapshot and the log are replayed.
  const json::object with{{"workspace", workspace.string()}, {"snapshot_mb", 1}};
  {
    IndexFlow index(backend, with);
    for (std::size_t first = 0; first < 1500; first += 100) index.post("/index", corpus.documents(first, 100));
    DocumentArray gone;
    for (int i = 0; i < 50; ++i) gone.push_back(Document()).id = fmt::format("doc-{}", i * 7);
    index.post("/delete", gone);
    Document changed("changed");
    changed.id = "doc-1";
    index.post("/update", one_document(changed));
    before = index.post("/search", queries, json::object{{"limit", 10}});
  }
  CHECK(fs::exists(workspace / "index.snapshot"));
  CHECK_FALSE(fs::exists(workspace / "index.wal.old"));
  IndexFlow again(backend, with);
  CHECK(again.status().at("count").as_uint64() == 1450);
  const DocumentArray after = again.post("/search", queries, json::object{{"limit", 10}});
  for (std::size_t q = 0; q < queries.size(); ++q) {
    REQUIRE(after[q].matches.size() == before[q].matches.size());
    for (std::size_t j = 0; j < after[q].matches.size(); ++j) {
      CHECK(after[q].matches[j].id == before[q].matches[j].id);
      CHECK(after[q].matches[j].text == before[q].matches[j].text);
    }
  }
  const DocumentArray one = again.post("/search", queries, json::object{{"filter", json::object{{"id", "doc-1"}}}});
  REQUIRE(one[0].matches.size() == 1);
  CHECK(one[0].matches[0].text == "changed");
}

TEST_CASE("an index reopened again and again holds every row bit for bit as it was first stored", "[index]") {
  // A restart replays the snapshot and the log; each holds the rows as stored (normalised once under cosine).
  // Normalising them again at every start moved their last bits, so an index resumed five times answered near-ties
  // otherwise than one written in one go (the resume test's index case found it).
  const fs::path workspace = fresh_workspace("reopened-bits");
  const Corpus corpus(400, 48);
  const DocumentArray queries = corpus.queries(4);
  const json::object with{{"workspace", workspace.string()}, {"metric", "cosine"}, {"device", "cpu"}};
  const json::object params{{"limit", 400}, {"return_embeddings", true}};
  auto rows_of = [](const DocumentArray& answer) {
    std::map<std::string, std::pair<at::Tensor, float>> rows;
    for (const Document& match : answer[0].matches) rows[match.id] = {match.embedding, match.scores.at("cosine")};
    return rows;
  };
  std::map<std::string, std::pair<at::Tensor, float>> first;
  {
    IndexFlow index(Backend{"exact-cpu", {{"backend", "exact"}}}, with);
    index.post("/index", corpus.documents(0, 200));
    first = rows_of(index.post("/search", queries, params));
    index.post("/index", corpus.documents(200, 200));  // these stay in the log: the next start replays them
  }
  for (int start = 1; start <= 3; ++start) {
    IndexFlow index(Backend{"exact-cpu", {{"backend", "exact"}}}, with);
    const auto now = rows_of(index.post("/search", queries, params));
    REQUIRE(now.size() == 400);
    std::size_t moved = 0;
    for (const auto& [id, row] : first) moved += at::equal(now.at(id).first, row.first) ? 0 : 1;
    INFO("start " << start);
    CHECK(moved == 0);
    if (start == 1) {
      for (const auto& [id, row] : now) first[id] = row;  // the logged 200 as first replayed
    } else {
      for (const auto& [id, row] : now) CHECK(row.second == first.at(id).second);
    }
  }
}

TEST_CASE("a damaged workspace stops the index's start naming the file and the byte offset", "[index]") {
  const Corpus corpus(300, 8);
  const auto build = [&](const std::string& name) {
    const fs::path workspace = fresh_workspace(name);
    IndexFlow index(backends().front(), json::object{{"workspace", workspace.string()}});
    index.post("/index", corpus.documents(0, 200));  // closed: into the snapshot
    return workspace;
  };
  const auto start_error = [](const fs::path& workspace) -> std::string {
    try {
      IndexFlow index(backends().front(), json::object{{"workspace", workspace.string()}});
    } catch (const std::exception& e) {
      return e.what();
    }
    return "started";
  };
  SECTION("a flipped byte in the snapshot") {
    const fs::path w = build("flipped");
    flip_byte(w / "index.snapshot", 5000);
    CHECK_THAT(start_error(w), contains((w / "index.snapshot").string() + ": a record fails its checksum at byte"));
  }
  SECTION("a snapshot cut short") {
    const fs::path w = build("cut");
    fs::resize_file(w / "index.snapshot", fs::file_size(w / "index.snapshot") - 30);
    CHECK_THAT(start_error(w), contains("index.snapshot: a record cut short at byte"));
  }
  SECTION("a damaged record in the middle of the log") {
    const fs::path w = build("log-middle");
    {
      IndexFlow index(backends().front(), json::object{{"workspace", w.string()}, {"snapshot_mb", 64}});
      index.post("/index", corpus.documents(200, 50));
      index.post("/index", corpus.documents(250, 50));
      // Keep the log: copy it before close() writes a snapshot and empties it.
      fs::copy_file(w / "index.wal", w / "wal.copy");
    }
    fs::rename(w / "wal.copy", w / "index.wal");
    flip_byte(w / "index.wal", 100);
    CHECK_THAT(start_error(w), contains("index.wal: a record fails its checksum at byte"));
  }
  SECTION("a log whose last record was never finished loses that record only") {
    const fs::path w = build("torn");
    {
      IndexFlow index(backends().front(), json::object{{"workspace", w.string()}, {"snapshot_mb", 64}});
      index.post("/index", corpus.documents(200, 50));
      fs::copy_file(w / "index.wal", w / "wal.copy");
    }
    fs::rename(w / "wal.copy", w / "index.wal");
    const auto size = fs::file_size(w / "index.wal");
    std::ofstream(w / "index.wal", std::ios::app) << std::string("\x40\x00\x00\x00garbage", 11);
    IndexFlow index(backends().front(), json::object{{"workspace", w.string()}});
    CHECK(index.status().at("count").as_uint64() == 250);
    CHECK(fs::file_size(w / "index.wal") <= size + 64);  // cut, then the close's snapshot emptied it
  }
}

TEST_CASE("two indexes cannot write one workspace, and the error names the holder", "[index]") {
  const fs::path w = fresh_workspace("locked");
  IndexFlow first(backends().front(), json::object{{"workspace", w.string()}});
  try {
    IndexFlow second(backends().front(), json::object{{"workspace", w.string()}});
    FAIL("the second index started");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()),
               contains(fmt::format("workspace {} is in use by another index (process {}", w.string(), ::getpid())));
  }
}

TEST_CASE("the hnsw distance kernels chosen for this CPU agree with the portable ones at every length", "[index]") {
  const auto& chosen = vector_index::distance_kernels();
  const auto& portable = vector_index::portable_distance_kernels();
  INFO("kernels: " << chosen.isa);
  at::manual_seed(7);
  for (const std::size_t dim : {1, 3, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 384, 385, 768, 1024}) {
    const at::Tensor a = at::randn({static_cast<std::int64_t>(dim)});
    const at::Tensor b = at::randn({static_cast<std::int64_t>(dim)});
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    const double dot = (a.to(at::kDouble) * b.to(at::kDouble)).sum().item<double>();
    const double l2 = (a.to(at::kDouble) - b.to(at::kDouble)).pow(2).sum().item<double>();
    const double tolerance = 1e-5 * static_cast<double>(dim) + 1e-6;
    INFO("dim " << dim);
    CHECK(std::abs(chosen.inner_product_distance(pa, pb, &dim) - (1.0 - dot)) <= tolerance);
    CHECK(std::abs(portable.inner_product_distance(pa, pb, &dim) - (1.0 - dot)) <= tolerance);
    CHECK(std::abs(chosen.l2_squared(pa, pb, &dim) - l2) <= tolerance * 4);
    CHECK(std::abs(portable.l2_squared(pa, pb, &dim) - l2) <= tolerance * 4);
  }
}

TEST_CASE("a /search limit past max_limit is refused, naming the parameter and the bound", "[index][bounds]") {
  const Corpus corpus(100, 8);
  IndexFlow index(backends().front());
  index.post("/index", corpus.documents());
  CHECK_THROWS_WITH(index.post("/search", corpus.queries(1), json::object{{"limit", 10001}}),
                    contains("parameter 'limit': 10001 is more than this index's max_limit (10000)") &&
                        contains("raise max_limit in the index's `with:`"));
  CHECK_THROWS_WITH(index.post("/search", corpus.queries(1), json::object{{"limit", 1000000000}}),
                    contains("max_limit (10000)"));
  CHECK(index.post("/search", corpus.queries(1), json::object{{"limit", 10000}})[0].matches.size() == 100);
  IndexFlow small(backends().front(), json::object{{"max_limit", 50}});
  small.post("/index", corpus.documents());
  CHECK_THROWS_WITH(small.post("/search", corpus.queries(1), json::object{{"limit", 51}}),
                    contains("parameter 'limit': 51 is more than this index's max_limit (50)"));
  CHECK(small.post("/search", corpus.queries(1), json::object{{"limit", 50}})[0].matches.size() == 50);
  // The flow's own limit must be within its max_limit.
  CHECK_THROWS_WITH(IndexFlow(backends().front(), json::object{{"limit", 60}, {"max_limit", 50}}),
                    contains("limit 60 is more than max_limit (50)"));
}

TEST_CASE("a /search of more queries x limit than max_answer_matches is refused before any work", "[index][bounds]") {
  const Corpus corpus(100, 8);
  IndexFlow index(backends().front());
  index.post("/index", corpus.documents());
  CHECK(index.post("/search", corpus.queries(10), json::object{{"limit", 10000}}).size() == 10);
  CHECK_THROWS_WITH(index.post("/search", corpus.queries(11), json::object{{"limit", 10000}}),
                    contains("/search: 11 queries x limit 10000 = 110000 matches, more than this index's "
                             "max_answer_matches (100000)"));
  // Before any work: queries without embeddings (which the search would refuse) meet the bound first.
  DocumentArray bare;
  for (int i = 0; i < 30; ++i) bare.push_back(Document("no embedding"));
  IndexFlow tight(backends().front(), json::object{{"max_answer_matches", 200}});
  tight.post("/index", corpus.documents());
  CHECK_THROWS_WITH(tight.post("/search", bare, json::object{{"limit", 10}}),
                    contains("30 queries x limit 10 = 300 matches, more than this index's max_answer_matches (200)"));
  CHECK(tight.post("/search", corpus.queries(20), json::object{{"limit", 10}}).size() == 20);
}

TEST_CASE("a /search whose matches would take more than max_answer_mb is refused, texts and tags counted",
          "[index][bounds]") {
  // 60 documents: 30 with a 30 KB text, 30 with a 30 KB tag; 1 MiB holds 34 of either.
  DocumentArray docs = Corpus(60, 8).documents();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i < 30) {
      docs[i].text = std::string(30000, 't');
    } else {
      docs[i].tags["note"] = std::string(30000, 'n');
    }
  }
  IndexFlow index(backends().front(), json::object{{"max_answer_mb", 1}});
  index.post("/index", docs);
  const DocumentArray query = Corpus(60, 8).queries(1);
  CHECK_THROWS_WITH(index.post("/search", query, json::object{{"limit", 60}}),
                    contains("/search: the matches would take 1.7 MiB (their ids, texts, uris, tags), more than "
                             "this index's max_answer_mb (1 MiB)"));
  const json::object texts{{"n", json::object{{"$lt", 30}}}}, tags{{"n", json::object{{"$gte", 30}}}};
  CHECK(index.post("/search", query, json::object{{"limit", 30}, {"filter", texts}})[0].matches.size() == 30);
  CHECK(index.post("/search", query, json::object{{"limit", 30}, {"filter", tags}})[0].matches.size() == 30);
  CHECK_THROWS_WITH(index.post("/search", Corpus(60, 8).queries(2), json::object{{"limit", 30}, {"filter", tags}}),
                    contains("the matches would take 1.7 MiB"));
  // Embeddings returned count 4 bytes a number.
  IndexFlow wide(backends().front(), json::object{{"max_answer_mb", 1}});
  const Corpus vectors(300, 1024);  // 4 KiB a vector
  wide.post("/index", vectors.documents());
  CHECK(wide.post("/search", vectors.queries(1), json::object{{"limit", 300}})[0].matches.size() == 300);
  CHECK_THROWS_WITH(
      wide.post("/search", vectors.queries(1), json::object{{"limit", 300}, {"return_embeddings", true}}),
      contains("(their ids, texts, uris, tags and embeddings), more than this index's max_answer_mb (1 MiB)"));
}

TEST_CASE("a filter past max_filter_size or max_filter_conditions is refused naming the bound", "[index][bounds]") {
  const Corpus corpus(200, 8);
  IndexFlow index(backends().front());
  index.post("/index", corpus.documents());
  const auto search = [&](IndexFlow& flow, const json::value& filter) {
    return flow.post("/search", corpus.queries(1), json::object{{"limit", 200}, {"filter", filter}})[0].matches;
  };
  json::array many;
  for (std::int64_t i = 0; i < 10001; ++i) many.push_back(i);
  CHECK_THROWS_WITH(
      search(index, json::object{{"n", json::object{{"$in", many}}}}),
      contains("parameter 'filter': holds more than 10000 values") && contains("this index's max_filter_size"));
  many.resize(9998);  // the filter, the operator's object, the list and 9,998 items: 10,001 values
  CHECK_THROWS_WITH(search(index, json::object{{"n", json::object{{"$in", many}}}}), contains("max_filter_size"));
  many.pop_back();
  CHECK(search(index, json::object{{"n", json::object{{"$in", many}}}}).size() == 200);
  // Conditions on distinct fields are each tested on every document: 101 are refused.
  json::array distinct;
  for (int i = 0; i < 101; ++i) distinct.push_back(json::object{{fmt::format("field{}", i), i}});
  CHECK_THROWS_WITH(search(index, json::object{{"$or", distinct}}),
                    contains("parameter 'filter': 101 conditions, more than this index's max_filter_conditions (100)"));
  distinct.pop_back();
  CHECK(search(index, json::object{{"$or", distinct}}).empty());
  // An $or of equalities on one field is one $in: 3,001 of them are one condition, and match as they say.
  json::array same;
  for (std::int64_t i = 0; i < 3000; ++i) same.push_back(json::object{{"n", i * 3}});
  same.push_back(json::object{{"n", json::object{{"$in", json::array{1, 2}}}}});
  const auto matches = search(index, json::object{{"$or", same}, {"even", true}});
  CHECK(matches.size() == 34 + 1);  // n in {0, 6, ..., 198} and 2
  for (const Document& m : matches) {
    const auto n = m.tags.at("n").as_int64();
    CHECK(n % 2 == 0);
    CHECK((n % 3 == 0 || n == 2));
  }
  // Both bounds are the index's `with:`.
  IndexFlow strict(backends().front(), json::object{{"max_filter_size", 5}, {"max_filter_conditions", 2}});
  strict.post("/index", corpus.documents());
  CHECK_THROWS_WITH(search(strict, json::object{{"n", json::object{{"$in", json::array{1, 2, 3, 4, 5}}}}}),
                    contains("holds more than 5 values") && contains("max_filter_size"));
  CHECK_THROWS_WITH(search(strict, json::object{{"n", 1}, {"even", true}, {"group", 1}}),
                    contains("3 conditions, more than this index's max_filter_conditions (2)"));
  CHECK(search(strict, json::object{{"n", 1}, {"even", false}}).size() == 1);
}

TEST_CASE("an $in list matches what its items' equalities match: numbers by value, strings by bytes, others by kind",
          "[index][filter]") {
  using vector_index::Filter;
  using vector_index::FilterTarget;
  const std::vector<json::value> values{json::value(3),
                                        json::value(3.0),
                                        json::value(std::uint64_t{3}),
                                        json::value(-3),
                                        json::value(0.0),
                                        json::value(-0.0),
                                        json::value(std::uint64_t{1} << 63),
                                        json::value(9007199254740993),  // 2^53 + 1: equals the double 2^53
                                        json::value(9007199254740992.0),
                                        json::value(std::nan("")),
                                        json::value(INFINITY),
                                        json::value(2.5),
                                        json::value("3"),
                                        json::value(""),
                                        json::value("doc-1"),
                                        json::value(true),
                                        json::value(false),
                                        json::value(nullptr),
                                        json::array{1, 2},
                                        json::array{1.0, 2},
                                        json::object{{"a", 1}}};
  const auto eq = [](const json::value& v) { return Filter::parse(json::object{{"x", json::object{{"$eq", v}}}}); };
  for (std::size_t first = 0; first < values.size(); first += 3) {
    // Lists of three items and of every item; their $nin, and the same as an $or of equalities.
    for (const std::size_t count : {std::size_t{3}, values.size()}) {
      json::array items, any;
      for (std::size_t i = 0; i < count; ++i) {
        items.push_back(values[(first + i) % values.size()]);
        any.push_back(json::object{{"x", items.back()}});
      }
      const Filter in = Filter::parse(json::object{{"x", json::object{{"$in", items}}}});
      const Filter nin = Filter::parse(json::object{{"x", json::object{{"$nin", items}}}});
      const Filter either = Filter::parse(json::object{{"$or", any}});
      for (const json::value& v : values) {
        const json::object tags{{"x", v}};
        const FilterTarget doc{"doc-1", "", "", tags};
        bool expected = false;
        for (const json::value& item : items) expected = expected || eq(item).matches(doc);
        INFO("value " << json::serialize(v) << " in " << json::serialize(items));
        CHECK(in.matches(doc) == expected);
        CHECK(nin.matches(doc) == !expected);
        CHECK(either.matches(doc) == expected);
      }
      const json::object none;
      CHECK_FALSE(in.matches(FilterTarget{"doc-1", "", "", none}));  // a missing field: only $nin holds
      CHECK(nin.matches(FilterTarget{"doc-1", "", "", none}));
    }
  }
  // The document's own strings (id, text, uri) against a list.
  const json::object none;
  const Filter ids = Filter::parse(json::parse(R"({"id": {"$in": ["doc-1", 1, "doc-9"]}})"));
  CHECK(ids.matches(FilterTarget{"doc-1", "", "", none}));
  CHECK_FALSE(ids.matches(FilterTarget{"doc-2", "", "", none}));
  CHECK_FALSE(ids.matches(FilterTarget{"1", "", "", none}));
}

TEST_CASE("a bad limit or a filter flowline does not have is a request error, naming the place", "[index][bounds]") {
  IndexAlone index;
  index.post("/index", Corpus(10, 8).documents());
  const DocumentArray query = Corpus(10, 8).queries(1);
  const auto refusal = [&](const json::object& parameters) -> std::string {
    try {
      index.post("/search", query, parameters);
    } catch (const RequestError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not a RequestError: ") + e.what();
    }
    return "answered";
  };
  CHECK_THAT(refusal({{"filter", json::parse(R"({"group": {"$regex": "a"}})")}}),
             starts_with("parameter 'filter'.group: unknown operator '$regex'"));
  CHECK_THAT(refusal({{"filter", json::parse(R"({"$where": "1"})")}}),
             starts_with("parameter 'filter'.$where: unknown operator '$where'"));
  CHECK_THAT(refusal({{"filter", json::parse(R"({"$or": [{"n": 1}, 3]})")}}),
             starts_with("parameter 'filter'.$or[1]: expected an object"));
  CHECK_THAT(refusal({{"limit", 0}}), starts_with("parameter 'limit': expected an integer from 1"));
  CHECK_THAT(refusal({{"limit", 5.5}}), starts_with("parameter 'limit': expected an integer"));
  CHECK_THAT(refusal({{"limit", "5"}}), starts_with("parameter 'limit': expected an integer"));
  CHECK_THAT(refusal({{"limit", 10001}}), starts_with("parameter 'limit': 10001 is more than this index's max_limit"));
  CHECK_THAT(refusal({{"return_embeddings", 1}}), starts_with("parameter 'return_embeddings': expected true or false"));
  CHECK(refusal({{"limit", 5.0}}) == "answered");
}

TEST_CASE(
    "the index's backends come from one table: each row's name is a choice of backend, its parameters the "
    "executor's",
    "[index]") {
  const ExecutorSpec spec = index_registry().get("VectorIndex").spec;
  const auto param = [&](const std::string& name) -> const ParamSpec* {
    for (const ParamSpec& p : spec.params) {
      if (p.name == name) return &p;
    }
    return nullptr;
  };
  const ParamSpec* backend = param("backend");
  REQUIRE(backend != nullptr);
  REQUIRE(backend->choices.size() == vector_index::backend_table().size());
  for (std::size_t i = 0; i < backend->choices.size(); ++i) {
    const vector_index::BackendRow& row = vector_index::backend_table()[i];
    CHECK(backend->choices[i].as_string() == row.name);
    CHECK_THAT(backend->help, contains(row.name + ": " + row.help));
    for (const ParamSpec& own : row.parameters) CHECK(param(own.name) != nullptr);
    CHECK(&vector_index::backend_row(row.name) == &row);
  }
  CHECK(backend->default_value.as_string() == "exact");
  CHECK_THROWS_WITH(vector_index::backend_row("faiss"), contains("backend 'faiss': expected one of exact, hnsw"));
}

// Not a timed test: the figures of docs/benchmarks.md ("Filters with large $in lists"), printed. Run with
//   build/tests/test_vector_index "[.figures]"   (FLOWLINE_FIGURES_DOCUMENTS=N: N documents, default 100,000)
// An index whose spec has max_filter_size gets it raised past the largest filter measured.
TEST_CASE("figures: a filtered search's time by the size of its $in list and of its $or", "[.figures]") {
  const char* env = std::getenv("FLOWLINE_FIGURES_DOCUMENTS");
  const std::size_t n = env ? std::stoul(env) : 100000;
  const Corpus corpus(n, 8);
  json::object with{{"dtype", "fp32"}};
  for (const ParamSpec& p : index_registry().get("VectorIndex").spec.params) {
    if (p.name == "max_filter_size") with["max_filter_size"] = 10000000;
  }
  IndexFlow index(backends().front(), with);
  for (std::size_t first = 0; first < n; first += 10000) index.post("/index", corpus.documents(first, 10000));
  const DocumentArray query = corpus.queries(1);
  const auto timed = [&](const std::string& what, const json::value& filter, int repeats) {
    double best = 1e30;
    std::size_t matches = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto started = std::chrono::steady_clock::now();
      const DocumentArray out = index.post("/search", query, json::object{{"limit", 10}, {"filter", filter}});
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      matches = out[0].matches.size();
    }
    std::printf("%zu documents, %-44s %9.4f s  (%zu matches, best of %d)\n", n, what.c_str(), best, matches, repeats);
  };
  timed("no filter", json::object{}, 3);
  for (const std::size_t items : {100, 1000, 10000, 100000}) {
    json::array numbers, ids;
    for (std::size_t i = 0; i < items; ++i) {
      numbers.push_back(static_cast<std::int64_t>(i * 7));  // a tag every document has, one in 7 listed
      ids.push_back(json::string(fmt::format("doc-{}", i * 7)));
    }
    const int repeats = items >= 10000 ? 1 : 3;
    timed(fmt::format("n $in {} numbers", items), json::object{{"n", json::object{{"$in", numbers}}}}, repeats);
    timed(fmt::format("id $in {} strings", items), json::object{{"id", json::object{{"$in", ids}}}}, repeats);
  }
  for (const std::size_t items : {100, 1000, 10000}) {
    json::array any;
    for (std::size_t i = 0; i < items; ++i) any.push_back(json::object{{"n", static_cast<std::int64_t>(i * 7)}});
    timed(fmt::format("$or of {} conditions", items), json::object{{"$or", any}}, items >= 10000 ? 1 : 3);
  }
  json::array distinct;  // as many conditions as max_filter_conditions allows by default, none merged
  for (std::int64_t i = 0; i < 100; ++i) distinct.push_back(json::object{{fmt::format("f{}", i), i}});
  distinct.back() = json::object{{"n", json::object{{"$lt", 1000}}}};
  timed("$or of 100 conditions on 100 fields", json::object{{"$or", distinct}}, 3);
  // The issue's largest case under the default bounds: refused before a document is looked at.
  IndexFlow bounded(backends().front());
  bounded.post("/index", corpus.documents(0, 1000));
  json::array million;
  for (std::int64_t i = 0; i < 1000000; ++i) million.push_back(i);
  const json::object parameters{{"filter", json::object{{"n", json::object{{"$in", million}}}}}};
  const auto started = std::chrono::steady_clock::now();
  try {
    bounded.post("/search", query, parameters);
  } catch (const std::exception&) {
  }
  std::printf("default bounds, n $in 1000000 numbers: refused in %.4f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

TEST_CASE("a client's mistake in /search is a 422 naming it, never a 500: a limit past max_limit, an unknown operator",
          "[index][bounds][gateway]") {
  // The global registry (the gateway reads the flow's endpoints from it), which finds VectorIndex's plugin.
  Flow flow(FlowOptions{});
  flow.add({.name = "index", .uses = "VectorIndex", .with = {{"dim", 2}}, .device = "cpu"});
  gateway_test::Served served(std::move(flow));
  gateway_test::Client client(served.port());
  REQUIRE(client.post("/index", R"({"data": [{"id": "a", "embedding": [1, 0]}, {"id": "b", "embedding": [0, 1]}]})")
              .status == 200);
  auto r = client.post("/search", R"({"data": [{"embedding": [1, 0]}], "parameters": {"limit": 1000000000}})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("max_limit"));
  r = client.post("/search", R"({"data": [{"embedding": [1, 0]}], "parameters": {"filter": {"id": {"$regex": "a"}}}})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("unknown operator '$regex'"));
  r = client.post("/search", R"({"data": [{"embedding": [1, 0]}], "parameters": {"limit": 1}})");
  REQUIRE(r.status == 200);
  CHECK(r.json().at("data").at(0).at("matches").at(0).at("id").as_string() == "a");
  const std::string metrics = client.get("/metrics").body;
  CHECK_THAT(metrics,
             testing::contains(R"(flowline_requests_total{front="http",outcome="bad_request",route="jina"} 2)"));
}
