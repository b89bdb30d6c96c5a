// Tests of the PgVectorWriter against a real PostgreSQL with pgvector: a server from PyPI's pgserver wheel
// (tests/pgvector/pg_server.py) on a Unix socket in a temp folder, started per test case and stopped at its
// end. Rows read back equal what was written (embeddings bit for bit as float4), upserts replace, errors
// name what went wrong (dimension, unreachable server, password, pgvector, a document without embedding),
// indexes are built at close, and flows/index-pg.yml runs through the launcher. Without pgserver (scripts/
// setup.sh installs it into .venv) every case skips, saying so.
#include "executor_runner.hpp"
#include "pg_server.hpp"
#include "test_support.hpp"

#include "flowline/error.hpp"
#include "flowline/writers.hpp"
#include "flowline/pgvector_writer/pgvector_writer.hpp"
#include "flowline/registry.hpp"
#include "flowline/resumable_sink.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

using namespace flowline;

namespace {

using testing::PgServer;

Registry& pg_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    pgvector_writer::register_pgvector_writer(*r);
    return r;
  }();
  return *registry;
}

std::string hex_of(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) s += fmt::format("{:02x}", c);
  return s;
}

// pgvector's binary form of `e` (vector_send): int16 dimensions, int16 0, big-endian float4s.
std::string vector_send_hex(const at::Tensor& e) {
  std::string bytes;
  const auto n = static_cast<std::uint16_t>(e.numel());
  bytes += static_cast<char>(n >> 8);
  bytes += static_cast<char>(n);
  bytes += std::string(2, '\0');
  const float* p = e.data_ptr<float>();
  for (std::int64_t k = 0; k < e.numel(); ++k) {
    std::uint32_t bits;
    std::memcpy(&bits, p + k, 4);
    for (int shift = 24; shift >= 0; shift -= 8) bytes += static_cast<char>(bits >> shift);
  }
  return hex_of(bytes);
}

Document embedded(const std::string& id, const std::string& text, const at::Tensor& embedding) {
  Document d(Document::WithId{id});
  d.text = text;
  d.embedding = embedding;
  return d;
}

boost::json::object with(const PgServer& server, const std::string& table, boost::json::object extra = {}) {
  extra["uri"] = server.uri();
  extra["table"] = table;
  return extra;
}

}  // namespace

TEST_CASE("a PgVectorWriter writes rows equal to its documents, embeddings bit for bit as float4", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  DocumentArray docs;
  at::Tensor m = at::randn({5, 8});
  m[0][0] = -0.0f;
  m[0][1] = 1e-40f;  // a subnormal
  m[0][2] = std::numeric_limits<float>::max();
  const std::vector<std::string> texts = {"plain", "tab\there, newline\nthere", "ünïcødé ✓", "", "quote ' and \""};
  for (int i = 0; i < 5; ++i) {
    Document d = embedded(fmt::format("doc-{}", i), texts[static_cast<std::size_t>(i)], m[i]);
    d.tags["n"] = i;
    d.tags["nested"] = boost::json::object{{"list", boost::json::array{1, "two", 3.5, nullptr}}, {"ok", true}};
    docs.push_back(std::move(d));
  }
  {
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", with(server, "items"));
    const DocumentArray out = runner.post("/index", docs);
    CHECK(out.size() == 5);  // documents pass on
  }
  const auto rows = server.sql(
      "SELECT id, encode(convert_to(text, 'UTF8'), 'hex'), tags::text, "
      "encode(vector_send(embedding), 'hex') FROM items ORDER BY id");
  REQUIRE(rows.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    INFO(rows[i]);
    std::vector<std::string> f;
    std::istringstream in(rows[i]);
    for (std::string part; std::getline(in, part, '|');) f.push_back(part);
    REQUIRE(f.size() == 4);
    CHECK(f[0] == docs[i].id);
    CHECK(f[1] == hex_of(docs[i].text));
    CHECK(boost::json::parse(f[2]) == boost::json::value(docs[i].tags));
    CHECK(f[3] == vector_send_hex(docs[i].embedding.contiguous()));
  }
  CHECK(server.sql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'items'::regclass "
                   "AND attname = 'embedding'") == std::vector<std::string>{"vector(8)"});
}

TEST_CASE("a PgVectorWriter's upsert replaces rows of the same id, the last of a request winning", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                 with(server, "up", {{"fields", {"text", "embedding"}}}));
  DocumentArray first;
  first.push_back(embedded("a", "first a", at::full({4}, 1.0f)));
  first.push_back(embedded("b", "first b", at::full({4}, 2.0f)));
  runner.post("/index", first);
  DocumentArray second;
  second.push_back(embedded("a", "second a", at::full({4}, 3.0f)));
  second.push_back(embedded("c", "c", at::full({4}, 4.0f)));
  second.push_back(embedded("a", "third a", at::full({4}, 5.0f, at::kDouble)));  // any dtype goes in as float4
  runner.post("/index", second);
  CHECK(server.sql("SELECT id || ' ' || text || ' ' || embedding::text FROM up ORDER BY id") ==
        std::vector<std::string>{"a third a [5,5,5,5]", "b first b [2,2,2,2]", "c c [4,4,4,4]"});
  CHECK(server.sql("SELECT count(*) FROM information_schema.columns WHERE table_name = 'up'") ==
        std::vector<std::string>{"3"});  // id, text, embedding: tags left out
}

TEST_CASE("a PgVectorWriter with on_conflict error fails a request repeating an id, leaving none of its rows",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", with(server, "strict", {{"on_conflict", "error"}}));
  DocumentArray first;
  first.push_back(embedded("a", "a", at::ones({3})));
  runner.post("/index", first);
  DocumentArray second;
  second.push_back(embedded("b", "b", at::ones({3})));
  second.push_back(embedded("a", "a again", at::ones({3})));
  CHECK_THROWS_WITH(runner.post("/index", second), testing::contains("duplicate key value"));
  CHECK(server.sql("SELECT id FROM strict ORDER BY id") == std::vector<std::string>{"a"});
  DocumentArray third;
  third.push_back(embedded("c", "c", at::ones({3})));
  runner.post("/index", third);  // the connection survives a failed request
  CHECK(server.sql("SELECT id FROM strict ORDER BY id") == std::vector<std::string>{"a", "c"});
}

TEST_CASE("a PgVectorWriter refuses embeddings whose dimension differs from the table's", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  server.sql(
      "CREATE EXTENSION vector; CREATE TABLE dims (id text PRIMARY KEY, text text, tags jsonb, "
      "embedding vector(8))");
  testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", with(server, "dims"));
  DocumentArray docs;
  docs.push_back(embedded("a", "a", at::ones({4})));
  CHECK_THROWS_WITH(runner.post("/index", docs),
                    testing::contains("table dims's embedding column is vector(8), the documents' embeddings have 4 "
                                      "dimensions"));
  DocumentArray mixed;
  mixed.push_back(embedded("a", "a", at::ones({8})));
  mixed.push_back(embedded("b", "b", at::ones({7})));
  CHECK_THROWS_WITH(runner.post("/index", mixed),
                    testing::contains("document 1 (id 'b') has an embedding of 7 values"));
  DocumentArray bare;
  bare.push_back(Document(Document::WithId{"x"}));
  CHECK_THROWS_WITH(runner.post("/index", bare), testing::contains("document 0 (id 'x') has no embedding"));
  CHECK(server.sql("SELECT count(*) FROM dims") == std::vector<std::string>{"0"});
}

TEST_CASE("a PgVectorWriter names an unreachable server after its bounded retries", "[pgvector]") {
  // No server at all: a socket folder nobody listens in, and a loopback port nobody listens on.
  for (const std::string uri : {std::string("postgresql://postgres@/postgres?host=/nonexistent-flowline-pg"),
                                std::string("postgresql://postgres@127.0.0.1:1/postgres")}) {
    const auto start = std::chrono::steady_clock::now();
    try {
      testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                     {{"uri", uri}, {"table", "t"}, {"connect_attempts", 3}});
      FAIL("connected to " << uri);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), testing::contains("cannot reach PostgreSQL server (host "));
      CHECK_THAT(e.what(), testing::contains("after 3 attempts"));
    }
    // Backoff 0.2 s, then 0.4 s.
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(600));
  }
}

TEST_CASE("a PgVectorWriter says authentication failed for a wrong password, and never shows one", "[pgvector]") {
  PgServer server("right-secret");
  REQUIRE_SERVER(server);
  const boost::json::object params = with(server, "pw");
  ::setenv("PGPASSWORD", "wrong-secret", 1);
  const auto start = std::chrono::steady_clock::now();
  try {
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", params);
    FAIL("connected with a wrong password");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), testing::contains("authentication failed at PostgreSQL server (host " + server.folder()));
    CHECK_THAT(e.what(), !testing::contains("wrong-secret"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // not retried
  ::unsetenv("PGPASSWORD");
  CHECK_THROWS_WITH(testing::ExecutorRunner(pg_registry(), "PgVectorWriter", params),
                    testing::contains("asks for a password and none was given"));
  ::setenv("PGPASSWORD", "right-secret", 1);
  {
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", params);
    DocumentArray docs;
    docs.push_back(embedded("a", "a", at::ones({2})));
    runner.post("/index", docs);
  }
  CHECK(server.sql("SELECT id FROM pw") == std::vector<std::string>{"a"});
  ::unsetenv("PGPASSWORD");
  // A password in the flow is refused before anything connects, and the message hides it.
  boost::json::object in_uri = params;
  in_uri["uri"] = "postgresql://postgres:right-secret@/postgres?host=" + server.folder();
  try {
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", in_uri);
    FAIL("a uri with a password was accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), testing::contains("holds a password: give it through PGPASSWORD or ~/.pgpass"));
    CHECK_THAT(e.what(), testing::contains("postgresql://postgres:***@/postgres"));
    CHECK_THAT(e.what(), !testing::contains("right-secret"));
  }
}

TEST_CASE("a PgVectorWriter reports pgvector missing when it may not create the extension", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  CHECK_THROWS_WITH(testing::ExecutorRunner(pg_registry(), "PgVectorWriter", with(server, "t", {{"create", false}})),
                    testing::contains("pgvector missing on PostgreSQL server (host " + server.folder()));
  server.sql("CREATE EXTENSION vector");
  CHECK_THROWS_WITH(testing::ExecutorRunner(pg_registry(), "PgVectorWriter", with(server, "t", {{"create", false}})),
                    testing::contains("table t does not exist"));
}

TEST_CASE("a PgVectorWriter builds the index it is asked for when the run completes", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  // l2 is IVFFlat's default operator class, which pg_indexes leaves unnamed: ip shows that metric reached it.
  for (const auto& [method, metric] : {std::pair<std::string, std::string>{"hnsw", "l2"}, {"ivfflat", "ip"}}) {
    const std::string table = "idx_" + method;
    {
      testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                     with(server, table, {{"index", method}, {"metric", metric}, {"dimension", 16}}));
      DocumentArray docs;
      const at::Tensor m = at::randn({50, 16});
      for (int i = 0; i < 50; ++i) docs.push_back(embedded(std::to_string(i), "t", m[i]));
      runner.post("/index", docs);
      CHECK(server.sql(fmt::format("SELECT count(*) FROM pg_indexes WHERE tablename = '{}'", table)) ==
            std::vector<std::string>{"1"});  // the primary key only, until close
    }
    const auto defs = server.sql(
        fmt::format("SELECT indexdef FROM pg_indexes WHERE tablename = '{}' AND indexname LIKE '%embedding%'", table));
    REQUIRE(defs.size() == 1);
    CHECK_THAT(defs[0], testing::contains("USING " + method + " (embedding vector_" + metric + "_ops)"));
  }
}

TEST_CASE("flows/index-pg.yml runs through the launcher: corpus, tiny encoder, rows in the server it is given",
          "[pgvector][launcher]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const auto dir = testing::scratch_dir("index-pg flow");
  std::vector<std::string> lines;
  std::ifstream book(testing::corpus_file("alice-in-wonderland.txt"));
  for (std::string line; lines.size() < 300 && std::getline(book, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // the book's byte order mark, which input drops
    if (!line.empty() && line.front() != ' ' && std::find(lines.begin(), lines.end(), line) == lines.end())
      lines.push_back(line);
  }
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  testing::write_text(dir / "in.txt", input);
  const std::string model = std::string(FLOWLINE_SOURCE_DIR) + "/tests/data/tiny-models/bert-all-poolings-dense";
  const auto r = testing::run_process(fmt::format(
      "cd '{}' && '{}' run flows/index-pg.yml --input '{}/in.txt' --set encoder.model='{}' --set encoder.device=cpu "
      "--set db.uri='{}' --set db.table=passages",
      FLOWLINE_SOURCE_DIR, FLOWLINE_LAUNCHER, dir.string(), model, server.uri()));
  INFO(r.out + r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(server.sql("SELECT count(*), count(DISTINCT id), min(vector_dims(embedding)), max(vector_dims(embedding)), "
                   "round(min(vector_norm(embedding))::numeric, 4), round(max(vector_norm(embedding))::numeric, 4) "
                   "FROM passages") ==
        std::vector<std::string>{fmt::format("{}|{}|16|16|1.0000|1.0000", lines.size(), lines.size())});
  std::vector<std::string> sorted = lines;
  std::sort(sorted.begin(), sorted.end());
  CHECK(server.sql("SELECT text FROM passages ORDER BY text COLLATE \\\"C\\\"") == sorted);
  CHECK(server.sql("SELECT indexname FROM pg_indexes WHERE tablename = 'passages' AND indexdef LIKE '%USING hnsw%'") ==
        std::vector<std::string>{"passages_embedding_hnsw_cosine"});
  // A password in the flow file is refused by validation, before anything connects, and not repeated.
  std::string flow = testing::read_text(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "flows/index-pg.yml");
  const std::string shipped = "uri: \"\"";
  REQUIRE(flow.find(shipped) != std::string::npos);
  flow.replace(flow.find(shipped), shipped.size(),
               "uri: \"postgresql://postgres:hunter2@/postgres?host=" + server.folder() + "\"");
  testing::write_text(dir / "with-password.yml", flow);
  const auto v = testing::run_process(fmt::format("'{}' validate '{}/with-password.yml' --set encoder.model='{}'",
                                                  FLOWLINE_LAUNCHER, dir.string(), model));
  INFO(v.out + v.err);
  CHECK(v.exit_code != 0);
  CHECK_THAT(v.out + v.err, testing::contains("parameter 'uri': 'postgresql://postgres:***@/postgres"));
  CHECK_THAT(v.out + v.err, testing::contains("holds a password"));
  CHECK_THAT(v.out + v.err, !testing::contains("hunter2"));
}

TEST_CASE("flows/load-pg.yml loads an .npy and its sidecar through the launcher: rows equal to the array's bits",
          "[pgvector][launcher]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const auto dir = testing::scratch_dir("load-pg flow");
  // 2,500 rows (three requests of the shipped 1,024, split between its two connections) written as a run writes
  // its --output: emb.npy and the sidecar emb.docs.jsonl.
  DocumentArray docs;
  const at::Tensor m = at::randn({2500, 12});
  for (int i = 0; i < 2500; ++i) {
    Document d = embedded(fmt::format("p-{:05}", i), fmt::format("paragraph {}", i), m[i]);
    d.tags["n"] = i;
    docs.push_back(std::move(d));
  }
  auto writer = open_writer(dir / "emb.npy");
  writer->write(docs);
  writer->close();
  const auto r = testing::run_process(
      fmt::format("cd '{}' && '{}' run flows/load-pg.yml --input '{}/emb.npy' --set db.uri='{}' --set db.table=loaded",
                  FLOWLINE_SOURCE_DIR, FLOWLINE_LAUNCHER, dir.string(), server.uri()));
  INFO(r.out + r.err);
  REQUIRE(r.exit_code == 0);
  const auto rows = server.sql(
      "SELECT id, text, tags::text, encode(vector_send(embedding), 'hex') FROM loaded "
      "ORDER BY id");
  REQUIRE(rows.size() == 2500);
  std::size_t equal = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string want = fmt::format("{}|{}|{{\"n\": {}}}|{}", docs[i].id, docs[i].text, i,
                                         vector_send_hex(docs[i].embedding.contiguous()));
    if (rows[i] == want) {
      ++equal;
    } else {
      UNSCOPED_INFO("row " << i << ": " << rows[i] << " instead of " << want);
    }
  }
  CHECK(equal == rows.size());
  CHECK(server.sql("SELECT indexname FROM pg_indexes WHERE tablename = 'loaded' AND indexdef LIKE '%USING hnsw%'") ==
        std::vector<std::string>{"loaded_embedding_hnsw_cosine"});
}

TEST_CASE("a PgVectorWriter whose connection was cut redoes an upsert on a new one; a plain COPY fails once",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const std::string cut =
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = "
      "'flowline'";
  for (const std::string mode : {"update", "error"}) {
    const std::string table = "cut_" + mode;
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter", with(server, table, {{"on_conflict", mode}}));
    DocumentArray first;
    first.push_back(embedded("a", "a", at::ones({2})));
    runner.post("/index", first);
    REQUIRE(server.sql(cut) == std::vector<std::string>{"1"});
    DocumentArray second;
    second.push_back(embedded("b", "b", at::ones({2})));
    if (mode == "update") {
      runner.post("/index", second);
    } else {
      CHECK_THROWS_WITH(runner.post("/index", second), testing::contains("(host " + server.folder()));
      runner.post("/index", second);  // the next request reconnects
    }
    CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) == std::vector<std::string>{"a", "b"});
  }
}

namespace {

// Every row of `table` as text: id, text, tags and the embedding's float4 bytes, in id order.
std::vector<std::string> dump(const PgServer& server, const std::string& table) {
  return server.sql(fmt::format(
      "SELECT id, text, tags::text, encode(vector_send(embedding), 'hex') FROM {} ORDER BY id COLLATE \\\"C\\\"",
      table));
}

// Requests of `sizes` documents, ids repeating across requests (and, for an upsert, within one).
std::vector<DocumentArray> requests_of(const std::vector<int>& sizes, bool repeat_within) {
  std::vector<DocumentArray> requests;
  int n = 0;
  for (int size : sizes) {
    DocumentArray docs;
    const at::Tensor m = at::randn({size, 6});
    for (int i = 0; i < size; ++i, ++n) {
      const int id = repeat_within && i % 5 == 4 ? n - 2 : n % 37;  // ids come back: an upsert replaces them
      Document d = embedded(fmt::format("id-{}", id), fmt::format("text {}", n), m[i]);
      d.tags["n"] = n;
      docs.push_back(std::move(d));
    }
    requests.push_back(std::move(docs));
  }
  return requests;
}

// A table whose deferred constraint trigger refuses the id 'poison' at COMMIT (drop_poison() lifts it).
void poisoned_table(const PgServer& server, const std::string& table) {
  server.sql(fmt::format(
      "CREATE EXTENSION IF NOT EXISTS vector; CREATE TABLE {0} (id text PRIMARY KEY, text text, tags jsonb, "
      "embedding vector(2)); CREATE OR REPLACE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS \\$\\$ BEGIN "
      "IF NEW.id = 'poison' THEN RAISE EXCEPTION 'poisoned row %', NEW.id; END IF; RETURN NULL; END \\$\\$; "
      "CREATE CONSTRAINT TRIGGER poison AFTER INSERT OR UPDATE ON {0} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
      "EXECUTE FUNCTION poison()",
      table));
}

}  // namespace

TEST_CASE("a PgVectorWriter of N connections fills the same table as one connection", "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  // Requests larger and smaller than the connections (a part of none), an upsert with ids repeated within a
  // request and across, and plain COPYs of distinct ids.
  for (const std::string mode : {"update", "error"}) {
    std::vector<DocumentArray> requests;
    if (mode == "update") {
      requests = requests_of({40, 1, 3, 64, 2}, true);
    } else {
      int n = 0;
      for (int size : {40, 1, 3, 64, 2}) {
        DocumentArray docs;
        const at::Tensor m = at::randn({size, 6});
        for (int i = 0; i < size; ++i, ++n) docs.push_back(embedded(fmt::format("id-{}", n), "t", m[i]));
        requests.push_back(std::move(docs));
      }
    }
    std::set<std::string> ids;
    for (const DocumentArray& docs : requests)
      for (const Document& d : docs) ids.insert(d.id);
    std::vector<std::string> one;
    for (const int connections : {1, 2, 3, 4}) {
      const std::string table = fmt::format("same_{}_{}", mode, connections);
      {
        testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                       with(server, table, {{"on_conflict", mode}, {"connections", connections}}));
        for (const DocumentArray& docs : requests) runner.post("/index", docs);
      }
      INFO(mode << ", " << connections << " connections");
      const auto rows = dump(server, table);
      if (connections == 1) one = rows;
      CHECK(rows.size() == ids.size());
      CHECK(rows == one);
    }
  }
}

TEST_CASE(
    "a PgVectorWriter whose request is split loses one part's connection: an upsert redoes that part, a plain "
    "COPY fails whole and leaves nothing",
    "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  // The connection opened last is the writer's second: its part fails at BEGIN, after the first part's COPY.
  const std::string cut_second =
      "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity WHERE application_name = "
      "'flowline' ORDER BY backend_start DESC LIMIT 1) AS last";
  for (const std::string mode : {"update", "error"}) {
    const std::string table = "split_cut_" + mode;
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                   with(server, table, {{"on_conflict", mode}, {"connections", 2}}));
    DocumentArray first;
    for (const std::string id : {"a", "b"}) first.push_back(embedded(id, id, at::ones({2})));
    runner.post("/index", first);
    REQUIRE(server.sql(cut_second) == std::vector<std::string>{"1"});
    DocumentArray second;
    for (const std::string id : {"c", "d", "e", "f"}) second.push_back(embedded(id, id, at::ones({2})));
    if (mode == "update") {
      runner.post("/index", second);
    } else {
      CHECK_THROWS_WITH(runner.post("/index", second), testing::contains("part 2 of 2 (rows 2 to 3 of the request)") &&
                                                           testing::contains("(host " + server.folder()));
      CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
            std::vector<std::string>{"a", "b"});  // the first part, ready to commit, rolled back
      runner.post("/index", second);              // the next request reconnects
    }
    CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
          std::vector<std::string>{"a", "b", "c", "d", "e", "f"});
  }
}

TEST_CASE(
    "a PgVectorWriter's split request that fails at one part's COMMIT: a plain COPY's committed part is "
    "undone, an upsert's says it stayed",
    "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  for (const std::string mode : {"error", "update"}) {
    const std::string table = "commit_fails_" + mode;
    poisoned_table(server, table);  // refuses the id 'poison' at COMMIT, after every part was ready
    testing::ExecutorRunner runner(pg_registry(), "PgVectorWriter",
                                   with(server, table, {{"on_conflict", mode}, {"connections", 2}}));
    DocumentArray first;
    first.push_back(embedded("a", "first a", at::ones({2})));
    runner.post("/index", first);
    DocumentArray second;
    for (const std::string id : {"a", "b", "c", "poison"})
      if (mode == "update" || id != "a") second.push_back(embedded(id, "second " + id, at::ones({2})));
    const std::string part =
        mode == "update" ? "part 2 of 2 (rows 2 to 3 of the request)" : "part 2 of 2 (rows 1 to 2 of the request)";
    if (mode == "error") {
      CHECK_THROWS_WITH(runner.post("/index", second),
                        testing::contains(part) && testing::contains("poisoned row poison") &&
                            testing::contains("the 1 part that had committed was undone: the request left nothing"));
      CHECK(server.sql(fmt::format("SELECT id || ' ' || text FROM {} ORDER BY id", table)) ==
            std::vector<std::string>{"a first a"});
    } else {
      CHECK_THROWS_WITH(runner.post("/index", second), testing::contains(part) &&
                                                           testing::contains("poisoned row poison") &&
                                                           testing::contains("1 of the request's 2 parts committed"));
      CHECK(server.sql(fmt::format("SELECT id || ' ' || text FROM {} ORDER BY id", table)) ==
            std::vector<std::string>{"a second a", "b second b"});
    }
  }
}

TEST_CASE("a PgVectorWriter resuming after a request committed on some connections only repairs it first",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  // What a kill between the COMMITs of a request's two parts leaves: request 1 (a, b) whole, request 2 (c, d)
  // committed by part 1 (c) only. The progress rows say so: part 0 at 4 documents, part 1 at 2.
  for (const std::string mode : {"error", "update"}) {
    const std::string table = "repair_" + mode;
    server.sql(fmt::format(
        "CREATE EXTENSION IF NOT EXISTS vector; CREATE TABLE {0} (id text PRIMARY KEY, text text, tags jsonb, "
        "embedding vector(2)); INSERT INTO {0} VALUES ('a', 'a', '{{}}', '[1,1]'), ('b', 'b', '{{}}', '[1,1]'), "
        "('c', 'c', '{{}}', '[1,1]'); CREATE TABLE IF NOT EXISTS flowline_progress (sink text PRIMARY KEY, run_key "
        "text NOT NULL, documents bigint NOT NULL, last_id text NOT NULL, part_ids text[]); DELETE FROM "
        "flowline_progress; INSERT INTO flowline_progress VALUES ('{0}', 'key-{1}', 4, 'd', '{{c}}'), ('{0}#1', "
        "'key-{1}', 2, 'b', '{{b}}')",
        table, mode));
    const auto resumed = [&](int connections) {
      RuntimeInfo runtime;
      runtime.name = "db";
      return std::make_unique<testing::ExecutorRunner>(
          pg_registry(), "PgVectorWriter",
          with(server, table,
               {{"on_conflict", mode}, {"connections", connections}, {"run_key", "key-" + mode}, {"resume", true}}),
          runtime);
    };
    CHECK_THROWS_WITH(resumed(3), testing::contains("flowline_progress holds 2 of the 3 rows of table " + table));
    const auto runner = resumed(2);
    CHECK(held_sink_points("key-" + mode).at("db").documents == 2);
    CHECK(held_sink_points("key-" + mode).at("db").last_id == "b");
    // A plain COPY's part that committed alone is deleted by the ids its row kept; an upsert's stays, to be
    // written again.
    CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
          (mode == "error" ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{"a", "b", "c"}));
    CHECK(server.sql(fmt::format("SELECT sink || ' ' || documents || ' ' || last_id || ' ' || "
                                 "coalesce(part_ids::text, '-') FROM flowline_progress ORDER BY sink")) ==
          std::vector<std::string>{fmt::format("{} 2 b -", table), fmt::format("{}#1 2 b {{b}}", table)});
  }
  // Rows more than a request apart are no state the writer leaves: refused.
  server.sql(
      "DELETE FROM flowline_progress; INSERT INTO flowline_progress VALUES ('repair_update', 'key-update', 9, "
      "'x', NULL), ('repair_update#1', 'key-update', 4, 'x', NULL), ('repair_update#2', 'key-update', 5, 'x', "
      "NULL)");
  RuntimeInfo runtime;
  runtime.name = "db";
  CHECK_THROWS_WITH(
      testing::ExecutorRunner(
          pg_registry(), "PgVectorWriter",
          with(server, "repair_update", {{"connections", 3}, {"run_key", "key-update"}, {"resume", true}}), runtime),
      testing::contains("more than one request apart"));
}

namespace {

void drop_poison(const PgServer& server, const std::string& table) {
  server.sql(fmt::format("DROP TRIGGER poison ON {}", table));
}

DocumentArray docs_of(const std::vector<std::string>& ids) {
  DocumentArray docs;
  for (const std::string& id : ids) docs.push_back(embedded(id, id, at::ones({2})));
  return docs;
}

// flowline_progress's row of `table`: "documents last_id".
std::vector<std::string> progress_of(const PgServer& server, const std::string& table) {
  return server.sql(fmt::format("SELECT documents || ' ' || last_id FROM flowline_progress WHERE sink = '{}'", table));
}

// A writer under `flowline run` (a run key: progress kept), named `name`.
std::unique_ptr<testing::ExecutorRunner> run_writer(const PgServer& server, const std::string& table,
                                                    const std::string& mode, const std::string& name,
                                                    bool resume = false) {
  RuntimeInfo runtime;
  runtime.name = name;
  return std::make_unique<testing::ExecutorRunner>(
      pg_registry(), "PgVectorWriter",
      with(server, table, {{"on_conflict", mode}, {"run_key", "key-" + table}, {"resume", resume}}), runtime);
}

}  // namespace

TEST_CASE("a PgVectorWriter's progress waits at a failed request and moves on once that request is written",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  for (const std::string mode : {"update", "error"}) {
    INFO(mode);
    const std::string table = "retried_" + mode;
    poisoned_table(server, table);
    const auto writer = run_writer(server, table, mode, "db");
    writer->post("/index", docs_of({"a1", "a2"}));
    CHECK(progress_of(server, table) == std::vector<std::string>{"2 a2"});
    const DocumentArray failing = docs_of({"b1", "poison"});
    CHECK_THROWS_WITH(writer->post("/index", failing),
                      testing::contains("poisoned row poison") &&
                          testing::contains("flowline_progress stays at input document 2 until this request is "
                                            "written"));
    CHECK(progress_of(server, table) == std::vector<std::string>{"2 a2"});
    // The same request again, now that the server takes it: the gap is filled, progress moves on.
    drop_poison(server, table);
    writer->post("/index", failing);
    CHECK(progress_of(server, table) == std::vector<std::string>{"4 poison"});
    writer->post("/index", docs_of({"c1"}));
    CHECK(progress_of(server, table) == std::vector<std::string>{"5 c1"});
    CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
          std::vector<std::string>{"a1", "a2", "b1", "c1", "poison"});
  }
}

TEST_CASE(
    "a PgVectorWriter whose failed request is never written keeps its progress there for the run, a plain COPY "
    "refusing what follows, and --resume completes the table",
    "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  for (const std::string mode : {"update", "error"}) {
    INFO(mode);
    const std::string table = "gap_" + mode;
    poisoned_table(server, table);
    const auto writer = run_writer(server, table, mode, "db");  // kept open: closing it complete clears progress
    writer->post("/index", docs_of({"a1", "a2"}));
    CHECK_THROWS_WITH(writer->post("/index", docs_of({"b1", "poison"})), testing::contains("poisoned row poison"));
    // The next request is another one: b1 and poison are missing for the rest of the run.
    if (mode == "update") {
      writer->post("/index", docs_of({"c1"}));
      CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
            std::vector<std::string>{"a1", "a2", "c1"});
    } else {
      CHECK_THROWS_WITH(writer->post("/index", docs_of({"c1"})),
                        testing::contains("refused: a request failed at input document 2") &&
                            testing::contains("`flowline run --resume` continues from there"));
      CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) == std::vector<std::string>{"a1", "a2"});
    }
    if (mode == "update") {
      writer->post("/index", docs_of({"d1"}));
    } else {
      CHECK_THROWS_WITH(writer->post("/index", docs_of({"d1"})), testing::contains("refused"));
    }
    CHECK(progress_of(server, table) == std::vector<std::string>{"2 a2"});  // never past the missing request
    // flowline run --resume re-reads the input from there: the whole table, nothing refused.
    drop_poison(server, table);
    const auto resumed = run_writer(server, table, mode, "db-resumed", true);
    CHECK(held_sink_points("key-" + table).at("db-resumed").documents == 2);
    for (const auto& ids : std::vector<std::vector<std::string>>{{"a1", "a2"}, {"b1", "poison"}, {"c1"}, {"d1"}})
      resumed->post("/index", docs_of(ids));
    CHECK(progress_of(server, table) == std::vector<std::string>{"6 d1"});
    CHECK(server.sql(fmt::format("SELECT id FROM {} ORDER BY id", table)) ==
          std::vector<std::string>{"a1", "a2", "b1", "c1", "d1", "poison"});
  }
}

namespace {

// Two replicas of one writer under `flowline run` (a run key), sharing their group as a flow's replicas do.
std::vector<std::unique_ptr<testing::ExecutorRunner>> writer_replicas(const PgServer& server, const std::string& table,
                                                                      const std::string& mode, const std::string& name,
                                                                      bool resume) {
  const auto group = std::make_shared<ReplicaGroup>();
  std::vector<std::unique_ptr<testing::ExecutorRunner>> replicas;
  for (int r = 0; r < 2; ++r) {
    RuntimeInfo runtime;
    runtime.name = name;
    runtime.replica = r;
    runtime.replicas = 2;
    runtime.group = group;
    replicas.push_back(std::make_unique<testing::ExecutorRunner>(
        pg_registry(), "PgVectorWriter",
        with(server, table,
             {{"on_conflict", mode}, {"connections", 2}, {"run_key", "key-" + table}, {"resume", resume}}),
        runtime));
  }
  return replicas;
}

constexpr const char* kHash = "00000000000000ab";  // the input hash of the positional ids below

// Input documents [begin, end) with positional ids (as `flowline run` gives a lines input), texts `text` N.
DocumentArray positional_docs(int begin, int end, const std::string& text) {
  DocumentArray docs;
  for (int i = begin; i < end; ++i)
    docs.push_back(
        embedded(fmt::format("{}{:016x}", kHash, i), text + std::to_string(i), at::full({2}, static_cast<float>(i))));
  return docs;
}

std::string positional_id(int i) { return fmt::format("{}{:016x}", kHash, i); }

// flowline_progress as two replicas of two connections leave it when replica 0 committed input documents 0..3
// and replica 1's request 4..5 committed on its first connection (id 4) only: that row says 4..5 too, the others
// do not.
void replicated_rows(const PgServer& server, const std::string& table, const std::string& run_key) {
  const std::string prefix = fmt::format("'{}', 4, '{}', NULL, '[]'", run_key, positional_id(3));
  server.sql(fmt::format(
      "CREATE TABLE IF NOT EXISTS flowline_progress (sink text PRIMARY KEY, run_key text NOT NULL, documents bigint "
      "NOT NULL, last_id text NOT NULL, part_ids text[], ranges jsonb); DELETE FROM flowline_progress; INSERT INTO "
      "flowline_progress VALUES ('{0}#0.0', {1}), ('{0}#0.1', {1}), ('{0}#1.0', '{2}', 4, '{3}', ARRAY['{4}'], "
      "json_build_array(json_build_array(4, 6, '{5}'))::jsonb), ('{0}#1.1', {1})",
      table, prefix, run_key, positional_id(3), positional_id(4), positional_id(5)));
}

}  // namespace

TEST_CASE(
    "two PgVectorWriter replicas keep one progress: the input prefix and the ranges committed past it, which "
    "--resume skips",
    "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  const boost::json::object positional = {{kPositionalIdsParam, kHash}};
  for (const std::string mode : {"update", "error"}) {
    INFO(mode);
    const std::string table = "replicated_" + mode;
    // Replica 1 commits input documents 4..7 and replica 0 8..11 while 0..3 are still on their way: the run stops.
    const auto first = writer_replicas(server, table, mode, "db", false);
    first[1]->post("/index", positional_docs(4, 8, "first "), positional);
    first[0]->post("/index", positional_docs(8, 12, "first "), positional);
    const auto ranges = [&](const std::string& key) {
      return server.sql(fmt::format(
          "SELECT documents || ' ' || last_id || ' ' || ranges::text FROM flowline_progress WHERE sink = '{}'", key));
    };
    CHECK(ranges(table + "#1.0") == std::vector<std::string>{fmt::format("0  [[4, 8, \"{}\"]]", positional_id(7))});
    CHECK(ranges(table + "#1.1") == ranges(table + "#1.0"));
    CHECK(ranges(table + "#0.0") == std::vector<std::string>{fmt::format("0  [[4, 12, \"{}\"]]", positional_id(11))});
    CHECK(ranges(table + "#0.1") == ranges(table + "#0.0"));
    // --resume: the run starts at the prefix (0); what committed past it is not written again (a plain COPY would
    // fail on its ids, an upsert would replace its texts).
    const auto resumed = writer_replicas(server, table, mode, "db-resumed", true);
    CHECK(held_sink_points("key-" + table).at("db-resumed").documents == 0);
    boost::json::object from_start = positional;
    from_start[kResumeFromParam] = 0;
    resumed[0]->post("/index", positional_docs(0, 4, "second "), from_start);
    resumed[1]->post("/index", positional_docs(4, 8, "second "), from_start);
    resumed[0]->post("/index", positional_docs(8, 12, "second "), from_start);
    resumed[1]->post("/index", positional_docs(12, 14, "second "), from_start);
    std::vector<std::string> want;
    for (int i = 0; i < 14; ++i) want.push_back(fmt::format("{} {}", i, i < 4 || i >= 12 ? "second" : "first"));
    CHECK(server.sql(fmt::format("SELECT (embedding::real[])[1]::int || ' ' || split_part(text, ' ', 1) FROM {} "
                                 "ORDER BY (embedding::real[])[1]",
                                 table)) == want);
    CHECK(server.sql(fmt::format("SELECT min(documents) || ' ' || max(documents) FROM flowline_progress WHERE "
                                 "split_part(sink, '#', 1) = '{}'",
                                 table)) == std::vector<std::string>{"12 14"});
  }
}

TEST_CASE("PgVectorWriter replicas resuming after a request committed on some of its connections only repair it first",
          "[pgvector]") {
  PgServer server;
  REQUIRE_SERVER(server);
  // The table holds ids 0..4 (replicated_rows says why).
  for (const std::string mode : {"error", "update"}) {
    INFO(mode);
    const std::string table = "replicated_repair_" + mode;
    std::string rows;
    for (int i = 0; i < 5; ++i) rows += fmt::format("{}('{}', 't', '{{}}', '[1,1]')", i ? ", " : "", positional_id(i));
    server.sql(fmt::format(
        "CREATE EXTENSION IF NOT EXISTS vector; CREATE TABLE {0} (id text PRIMARY KEY, text text, tags jsonb, "
        "embedding vector(2)); INSERT INTO {0} VALUES {1}",
        table, rows));
    replicated_rows(server, table, "key-" + table);
    const auto resumed = writer_replicas(server, table, mode, "db", true);
    CHECK(held_sink_points("key-" + table).at("db").documents == 4);
    CHECK(held_sink_points("key-" + table).at("db").last_id == positional_id(3));
    // A plain COPY's row of the request that committed in part is deleted by the ids its row kept; an upsert's
    // stays, to be written again.
    CHECK(server.sql(fmt::format("SELECT count(*) FROM {}", table)) ==
          std::vector<std::string>{mode == "error" ? "4" : "5"});
    CHECK(server.sql(fmt::format("SELECT DISTINCT documents || ' ' || ranges::text FROM flowline_progress WHERE "
                                 "split_part(sink, '#', 1) = '{}'",
                                 table)) == std::vector<std::string>{"4 []"});
    boost::json::object from = {{kPositionalIdsParam, kHash}, {kResumeFromParam, 4}};
    resumed[1]->post("/index", positional_docs(4, 6, "again "), from);
    CHECK(server.sql(fmt::format("SELECT count(*) FROM {} WHERE text LIKE 'again%'", table)) ==
          std::vector<std::string>{"2"});
  }
  // Rows of another run, or not this writer's replicas and connections: refused, nothing written.
  const std::string table = "replicated_repair_update";
  replicated_rows(server, table, "another-run");
  CHECK_THROWS_WITH(writer_replicas(server, table, "update", "db", true), testing::contains("filled by another run"));
  replicated_rows(server, table, "key-" + table);
  server.sql(fmt::format("DELETE FROM flowline_progress WHERE sink = '{}#1.1'", table));
  CHECK_THROWS_WITH(writer_replicas(server, table, "update", "db", true),
                    testing::contains("flowline_progress holds 3 of the 4 rows of table " + table));
  CHECK(server.sql(fmt::format("SELECT count(*) FROM {} WHERE text LIKE 'again%'", table)) ==
        std::vector<std::string>{"2"});
}
