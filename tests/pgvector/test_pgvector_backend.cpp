// Tests of the VectorIndex's pgvector backend against a real PostgreSQL with pgvector (tests/pgvector/
// pg_server.hpp; every case skips, saying why, without PyPI's pgserver): a PgVectorWriter fills a table, a
// VectorIndex with `backend: pgvector` searches it, and its matches equal those of an exact VectorIndex holding
// the same documents — ids, order, texts, tags and scores — for each metric and for filters on tags, ids and
// texts. Writes go through to the table; a bad uri, a missing table or pgvector, a query of another dimension
// and a filter SQL cannot answer fail with errors that say so.
#include "executor_runner.hpp"
#include "pg_server.hpp"
#include "test_support.hpp"

#include "flowline/error.hpp"
#include "flowline/flow.hpp"
#include "flowline/pgvector_writer/pgvector_writer.hpp"
#include "flowline/registry.hpp"
#include "flowline/vector_index/vector_index.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <chrono>
#include <cmath>

using namespace flowline;

namespace {

using testing::PgServer;

Registry& registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    pgvector_writer::register_pgvector_writer(*r);
    vector_index::register_vector_index(*r);
    return r;
  }();
  return *registry;
}

// n documents "doc-i" with texts, tags {group: i % 5, even, n: i, name: "item-i"} and random vectors.
DocumentArray corpus(std::size_t n, std::int64_t dim) {
  at::manual_seed(5);
  const at::Tensor vectors = at::randn({static_cast<std::int64_t>(n), dim});
  DocumentArray docs;
  for (std::size_t i = 0; i < n; ++i) {
    Document& d = docs.push_back(Document(Document::WithId{fmt::format("doc-{}", i)}));
    d.text = fmt::format("paragraph {} of the corpus", i);
    d.tags["group"] = static_cast<std::int64_t>(i % 5);
    d.tags["even"] = i % 2 == 0;
    d.tags["n"] = static_cast<std::int64_t>(i);
    d.tags["name"] = fmt::format("item-{}", i);
    if (i % 7 == 0) d.tags["meta"] = boost::json::object{{"level", static_cast<double>(i) / 10}};
    d.embedding = vectors[static_cast<std::int64_t>(i)].clone();
  }
  return docs;
}

DocumentArray queries(std::size_t count, std::int64_t dim) {
  at::manual_seed(9);
  DocumentArray docs;
  for (std::size_t q = 0; q < count; ++q) {
    docs.push_back(Document(Document::WithId{fmt::format("q{}", q)})).embedding = at::randn({dim});
  }
  return docs;
}

boost::json::object pg_index(const PgServer& server, const std::string& table, boost::json::object extra = {}) {
  extra["backend"] = "pgvector";
  extra["uri"] = server.uri();
  extra["table"] = table;
  return extra;
}

// A table `table` filled with `docs` by a flow of one PgVectorWriter (in requests of 64 documents).
void fill(const PgServer& server, const std::string& table, const DocumentArray& docs) {
  Flow flow(FlowOptions{}, registry());
  flow.add({.name = "db", .uses = "PgVectorWriter", .with = {{"uri", server.uri()}, {"table", table}}});
  flow.start();
  flow.post("/index", docs, PostOptions{.request_size = 64});
}

// Whether two JSON values are equal, numbers by value: jsonb keeps a number as a numeric, so a whole double
// (7.0, which Boost.JSON writes as 7E0) comes back from the table as the integer 7.
bool same_json(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_number() && b.is_number()) return a.to_number<double>() == b.to_number<double>();
  if (a.is_object() && b.is_object()) {
    if (a.get_object().size() != b.get_object().size()) return false;
    for (const auto& kv : a.get_object()) {
      const auto* other = b.get_object().if_contains(kv.key());
      if (!other || !same_json(kv.value(), *other)) return false;
    }
    return true;
  }
  if (a.is_array() && b.is_array()) {
    if (a.get_array().size() != b.get_array().size()) return false;
    for (std::size_t i = 0; i < a.get_array().size(); ++i) {
      if (!same_json(a.get_array()[i], b.get_array()[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Both answers hold the same matches per query: ids in order, texts, tags (numbers by value), scores within
// 1e-5.
void check_same_matches(const DocumentArray& got, const DocumentArray& want, const std::string& score) {
  REQUIRE(got.size() == want.size());
  for (std::size_t q = 0; q < got.size(); ++q) {
    INFO("query " << q);
    REQUIRE(got[q].matches.size() == want[q].matches.size());
    for (std::size_t j = 0; j < got[q].matches.size(); ++j) {
      const Document& g = got[q].matches[j];
      const Document& w = want[q].matches[j];
      INFO("match " << j << ": " << g.id << " vs " << w.id);
      CHECK(g.id == w.id);
      CHECK(g.text == w.text);
      INFO(boost::json::serialize(g.tags) << " vs " << boost::json::serialize(w.tags));
      CHECK(same_json(g.tags, w.tags));
      REQUIRE(g.scores.count(score) == 1);
      CHECK(std::abs(g.scores.at(score) - w.scores.at(score)) <= 1e-5f);
    }
  }
}

}  // namespace

TEST_CASE("a pgvector VectorIndex finds what the exact backend finds, for each metric", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const DocumentArray docs = corpus(300, 32);
  fill(server, "items", docs);
  for (const std::string metric : {"cosine", "l2", "inner_product"}) {
    INFO(metric);
    testing::ExecutorRunner pg(registry(), "VectorIndex", pg_index(server, "items", {{"metric", metric}}));
    testing::ExecutorRunner exact(registry(), "VectorIndex", {{"backend", "exact"}, {"metric", metric}});
    exact.post("/index", docs);
    const boost::json::object parameters{{"limit", 12}};
    check_same_matches(pg.post("/search", queries(6, 32), parameters),
                       exact.post("/search", queries(6, 32), parameters), metric);
  }
  // Through a flow, two replicas (a connection each) answering requests of one query each.
  Flow flow(FlowOptions{}, registry());
  flow.add({.name = "index", .uses = "VectorIndex", .with = pg_index(server, "items", {{"limit", 3}}), .replicas = 2});
  flow.start();
  const DocumentArray found =
      flow.post("/search", queries(4, 32), PostOptions{.request_size = 1, .parameters = {{"return_embeddings", true}}});
  REQUIRE(found.size() == 4);
  REQUIRE(found[0].matches.size() == 3);  // the index's limit
  for (const Document& m : found[0].matches) {
    const std::size_t i = std::stoul(m.id.substr(4));
    CHECK(at::equal(m.embedding, docs[i].embedding));  // float4 both ways, bit for bit
  }
  DocumentArray ask;
  ask.push_back(Document(Document::WithId{"status"}));
  const DocumentArray status = flow.post("/status", std::move(ask));
  CHECK(status[0].tags.at("count").to_number<std::int64_t>() == 300);
  CHECK(status[0].tags.at("dimension").to_number<std::int64_t>() == 32);
  CHECK(status[0].tags.at("backend") == "pgvector");
}

TEST_CASE("a pgvector VectorIndex's filters match the exact backend's, with their values bound", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const DocumentArray docs = corpus(200, 16);
  fill(server, "items", docs);
  testing::ExecutorRunner pg(registry(), "VectorIndex", pg_index(server, "items"));
  testing::ExecutorRunner exact(registry(), "VectorIndex", {{"backend", "exact"}});
  exact.post("/index", docs);
  const char* filters[] = {
      R"({"group": 2})",
      R"({"tags.group": {"$ne": 3}, "even": true})",
      R"({"tags__n": {"$gte": 50, "$lt": 120.5}})",
      R"({"$or": [{"group": 1}, {"n": {"$lte": 20}}]})",
      R"({"group": {"$in": [1, 3.0]}})",
      R"({"group": {"$nin": [0, 1, 2]}})",
      R"({"missing": {"$ne": 1}})",
      R"({"missing": {"$nin": [1]}})",
      R"({"missing": 1})",
      R"({"meta.level": {"$gt": 3}})",
      R"({"meta": {"level": 1.4}})",
      R"({"name": {"$gt": "item-5"}})",
      R"({"name": {"$lt": 5}})",
      R"({"n": {"$gt": "a"}})",
      R"({"id": {"$in": ["doc-3", "doc-4", "doc-150"]}})",
      R"({"text": {"$gte": "paragraph 9"}})",
      R"({"$and": [{"even": false}, {"$or": [{"group": 0}, {"name": "item-33"}]}]})",
      R"({"name": "x' OR 1=1 --"})",
      R"({})",
  };
  for (const char* filter : filters) {
    INFO(filter);
    const boost::json::object parameters{{"limit", 8}, {"filter", boost::json::parse(filter)}};
    const DocumentArray want = exact.post("/search", queries(3, 16), parameters);
    check_same_matches(pg.post("/search", queries(3, 16), parameters), want, "cosine");
  }
  CHECK_THROWS_AS(pg.post("/search", queries(1, 16), {{"filter", boost::json::parse(R"({"uri": "x"})")}}),
                  RequestError);
  CHECK_THROWS_WITH(pg.post("/search", queries(1, 16), {{"filter", boost::json::parse(R"({"uri": "x"})")}}),
                    testing::contains("parameter 'filter'.uri: the pgvector backend cannot filter on 'uri'"));
  CHECK_THROWS_WITH(pg.post("/search", queries(1, 16), {{"filter", boost::json::parse(R"({"n": {"$regex": 1}})")}}),
                    testing::contains("unknown operator '$regex'"));  // Filter::parse's refusal, as for any backend
}

TEST_CASE("a pgvector VectorIndex writes /index, /update, /delete and /clear through to its table", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  DocumentArray docs = corpus(10, 8);
  fill(server, "items", DocumentArray(std::vector<Document>(docs.docs().begin(), docs.docs().begin() + 4)));
  testing::ExecutorRunner pg(registry(), "VectorIndex", pg_index(server, "items"));
  pg.post("/index", DocumentArray(std::vector<Document>(docs.docs().begin() + 2, docs.docs().end())));  // 2, 3 again
  CHECK(server.sql("SELECT count(*) FROM items") == std::vector<std::string>{"10"});
  DocumentArray change;
  change.push_back(Document(Document::WithId{"doc-1"})).text = "changed";
  pg.post("/update", change);
  CHECK(server.sql("SELECT text || ' ' || (tags->>'n') FROM items WHERE id = 'doc-1'") ==
        std::vector<std::string>{"changed 1"});  // the tags it did not carry stay
  DocumentArray unknown;
  unknown.push_back(Document(Document::WithId{"doc-1"})).text = "again";
  unknown.push_back(Document(Document::WithId{"nope"})).text = "x";
  CHECK_THROWS_WITH(pg.post("/update", unknown), testing::contains("1 of 2 documents are not in table 'items'"));
  CHECK(server.sql("SELECT text FROM items WHERE id = 'doc-1'") == std::vector<std::string>{"changed"});
  DocumentArray gone;
  gone.push_back(Document(Document::WithId{"doc-5"}));
  gone.push_back(Document(Document::WithId{"nope"}));
  const DocumentArray deleted = pg.post("/delete", gone);
  CHECK(deleted[0].tags.at("deleted") == true);
  CHECK(deleted[1].tags.at("deleted") == false);
  CHECK(pg.post("/status", {})[0].tags.at("count").to_number<std::int64_t>() == 9);
  DocumentArray wrong;
  wrong.push_back(Document(Document::WithId{"w"})).embedding = at::ones({5});
  CHECK_THROWS_WITH(pg.post("/index", wrong),
                    testing::contains("/index: document 0 ('w') has an embedding of 5 dimensions, but column "
                                      "'embedding' of table 'items' is vector(8)"));
  pg.post("/clear", {});
  CHECK(server.sql("SELECT count(*) FROM items") == std::vector<std::string>{"0"});
}

TEST_CASE("a pgvector VectorIndex names a bad uri, a missing table or pgvector, and a query's other dimension",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const auto start = [&](boost::json::object with) { testing::ExecutorRunner runner(registry(), "VectorIndex", with); };
  CHECK_THROWS_WITH(
      start({{"backend", "pgvector"},
             {"uri", "postgresql://postgres@/postgres?host=/nonexistent-flowline-pg"},
             {"table", "items"},
             {"connect_attempts", 2}}),
      testing::contains("cannot reach PostgreSQL server (host ") && testing::contains("after 2 attempts"));
  CHECK_THROWS_WITH(start({{"backend", "pgvector"}, {"uri", "postgresql://postgres:secret@/postgres"}, {"table", "t"}}),
                    testing::contains("holds a password") && !testing::contains("secret@"));
  server.sql("CREATE TABLE plain (id text PRIMARY KEY)");
  CHECK_THROWS_WITH(start(pg_index(server, "plain")), testing::contains("lacks the pgvector extension"));
  fill(server, "items", corpus(5, 8));
  CHECK_THROWS_WITH(start(pg_index(server, "nope")), testing::contains("table 'nope' does not exist in the database"));
  CHECK_THROWS_WITH(start(pg_index(server, "items", {{"embedding_column", "vec"}})),
                    testing::contains("table 'items' has no column 'vec' (its columns: id, text, tags, embedding)"));
  CHECK_THROWS_WITH(start(pg_index(server, "items", {{"dim", 16}})),
                    testing::contains("dim is 16, but column 'embedding' of table 'items' is vector(8)"));
  CHECK_THROWS_WITH(start(pg_index(server, "items", {{"workspace", testing::scratch_dir("pgws").string()}})),
                    testing::contains("leave 'workspace' empty"));
  testing::ExecutorRunner pg(registry(), "VectorIndex", pg_index(server, "items"));
  CHECK_THROWS_AS(pg.post("/search", queries(1, 4)), RequestError);
  CHECK_THROWS_WITH(pg.post("/search", queries(1, 4)),
                    testing::contains("/search: document 0 ('q0') has an embedding of 4 dimensions, but column "
                                      "'embedding' of table 'items' is vector(8)"));
  CHECK(pg.post("/search", queries(1, 8))[0].matches.size() == 5);  // the connection is still good
}

TEST_CASE("a pgvector VectorIndex says authentication failed for a wrong password, never showing it", "[pgvector]") {
  PgServer server("right-secret");
  REQUIRE_SERVER(server);
  ::setenv("PGPASSWORD", "wrong-secret", 1);
  try {
    testing::ExecutorRunner runner(registry(), "VectorIndex", pg_index(server, "items"));
    FAIL("connected with a wrong password");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), testing::contains("authentication failed at PostgreSQL server (host " + server.folder()));
    CHECK_THAT(e.what(), !testing::contains("wrong-secret"));
  }
  ::unsetenv("PGPASSWORD");
}

TEST_CASE(
    "a pgvector VectorIndex connects again when its connection is cut, and stops a statement at "
    "statement_timeout",
    "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  fill(server, "items", corpus(20, 8));
  testing::ExecutorRunner pg(registry(), "VectorIndex", pg_index(server, "items"));
  CHECK(pg.post("/search", queries(1, 8))[0].matches.size() == 10);
  CHECK(server.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'flowline'") ==
        std::vector<std::string>{"t"});
  CHECK(pg.post("/search", queries(1, 8))[0].matches.size() == 10);  // redone on a new connection
  // A view whose every read sleeps 3 s, searched with a statement_timeout of 1 s.
  server.sql("CREATE VIEW slow AS SELECT items.* FROM items, (SELECT pg_sleep(3)) AS s");
  testing::ExecutorRunner slow(registry(), "VectorIndex", pg_index(server, "slow", {{"statement_timeout", 1}}));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      slow.post("/search", queries(1, 8)),
      testing::contains("searching table 'slow'") && testing::contains("canceling statement due to statement timeout"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2500));
}
