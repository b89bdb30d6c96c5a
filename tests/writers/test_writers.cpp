// The document writers (writers.hpp) and the table of Document fields: order with several formatting
// threads, exact floats, .npy and .safetensors read back by numpy and safetensors, and their errors.
#include "test_support.hpp"

#include "flowline/document_fields.hpp"
#include "flowline/writers.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <random>

using namespace flowline;

namespace {

// Documents "0".."n-1" with a [dim] float32 embedding each (fixed seed) and a tag.
DocumentArray embedded_docs(std::size_t n, std::int64_t dim) {
  DocumentArray docs = testing::numbered_docs(n);
  const at::Tensor matrix = at::randn({static_cast<std::int64_t>(n), dim}, at::TensorOptions().dtype(at::kFloat));
  docs.set_embeddings(matrix);
  for (std::size_t i = 0; i < n; ++i) docs[i].tags["row"] = static_cast<std::int64_t>(i);
  return docs;
}

const std::string kPython = FLOWLINE_TEST_PYTHON;

// Reads `path` back with the check script; the expected values are the embeddings in memory as `dtype`.
// Returns false (after a warning) when the venv lacks numpy or safetensors.
bool check_with_python(const std::filesystem::path& path, const DocumentArray& docs, const std::string& dtype) {
  const auto dir = path.parent_path();
  const at::Tensor expected = docs.embeddings().to(dtype == "float16" ? at::kHalf : at::kFloat).contiguous();
  {
    std::ofstream raw(dir / "expected.raw", std::ios::binary);
    raw.write(static_cast<const char*>(expected.data_ptr()), expected.numel() * expected.element_size());
    std::ofstream ids(dir / "ids.txt");
    for (const auto& d : docs) ids << d.id << "\n";
  }
  const auto r = testing::run_process(
      fmt::format("'{}' '{}/tests/writers/check_embeddings.py' '{}' '{}' {} {} {} '{}' '{}'", kPython,
                  FLOWLINE_SOURCE_DIR, path.string(), (dir / "expected.raw").string(), dtype, expected.size(0),
                  expected.size(1), sidecar_path_for(path).string(), (dir / "ids.txt").string()));
  if (r.exit_code == 77) {
    WARN("skipped the python read-back: " << r.err << " (run scripts/setup.sh)");
    return false;
  }
  INFO(r.err);
  CHECK(r.exit_code == 0);
  return true;
}

}  // namespace

TEST_CASE("the table of document fields names each field once, in JSON order", "[writers][fields]") {
  std::vector<std::string> names;
  for_each_document_field([&](DocumentField field, std::string_view name, auto) {
    CHECK(field_name(field) == name);
    CHECK(find_document_field(name) == field);
    names.emplace_back(name);
  });
  CHECK(names == std::vector<std::string>{"id", "text", "blob", "tensor", "embedding", "tags", "mime_type", "uri",
                                          "scores", "chunks", "matches", "parent_id"});
  CHECK_FALSE(find_document_field("txt"));
  CHECK(FieldSet::parse({}) == FieldSet::all());
  const FieldSet some = FieldSet::parse({"text"});
  CHECK(some.contains(DocumentField::id));
  CHECK(some.contains(DocumentField::text));
  CHECK_FALSE(some.contains(DocumentField::tags));
  CHECK_THROWS_WITH(FieldSet::parse({"txt"}),
                    "unknown document field 'txt' (did you mean 'text'?); expected one of id, text, blob, tensor, "
                    "embedding, tags, mime_type, uri, scores, chunks, matches, parent_id");
}

TEST_CASE("an embedding with NaN, infinities and negative zero is written as strings and a signed zero and reads back",
          "[writers][jsonl]") {
  Document d("special");
  const std::vector<float> values = {std::nanf(""), INFINITY, -INFINITY, -0.0f, 0.0f, 2.5f};
  d.embedding = at::tensor(at::ArrayRef<float>(values));
  std::string out;
  append_json(out, d, FieldSet::parse({"embedding"}));
  // The finite values in their shortest exact form: "-0.0,0,2.5", or Dragonbox's "-0E0,0E0,2.5E0".
  CHECK_THAT(out, testing::contains(R"("data":["nan","inf","-inf",-0)"));
  const Document back = document_from_json(out);
  const at::Tensor e = back.embedding;
  REQUIRE(e.numel() == 6);
  CHECK(std::isnan(e[0].item<float>()));
  CHECK(e[1].item<float>() == INFINITY);
  CHECK(e[2].item<float>() == -INFINITY);
  CHECK(std::signbit(e[3].item<float>()));
  CHECK(e[5].item<float>() == 2.5f);
}

TEST_CASE("JSON with chosen fields writes the id and only those fields", "[writers][fields]") {
  Document d("hello");
  d.tags["k"] = 1;
  d.uri = "u";
  std::string out;
  append_json(out, d, FieldSet::parse({"tags"}));
  CHECK(out == fmt::format(R"({{"id":"{}","tags":{{"k":1}}}})", d.id));
}

TEST_CASE("JSONL output keeps the input order with several formatting threads", "[writers][jsonl]") {
  const auto dir = testing::scratch_dir("writers jsonl order");
  WriterOptions options;
  options.threads = 4;
  auto writer = open_jsonl_writer(dir / "out.jsonl", options);
  DocumentArray expected;
  for (int batch = 0; batch < 40; ++batch) {
    DocumentArray docs = embedded_docs(1 + batch * 37 % 300, 8);
    for (auto& d : docs) d.text = fmt::format("batch {} {}", batch, d.text);
    expected.append(deep_copy(docs));
    if (batch % 2) {
      writer->write(std::move(docs));  // taken: formatted after write() returns
    } else {
      writer->write(docs);  // borrowed
    }
  }
  writer->close();
  const DocumentArray back = read_jsonl(dir / "out.jsonl");
  REQUIRE(back.size() == expected.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    REQUIRE(back[i].id == expected[i].id);
    REQUIRE(back[i].text == expected[i].text);
    REQUIRE(at::equal(back[i].embedding, expected[i].embedding));
  }
  const WriterStats stats = writer->stats();
  CHECK(stats.documents == expected.size());
  CHECK(stats.bytes == std::filesystem::file_size(dir / "out.jsonl"));
  CHECK(stats.format_seconds > 0);
}

TEST_CASE("floats written as JSONL read back to the same float32 bits", "[writers][jsonl]") {
  const auto dir = testing::scratch_dir("writers float exact");
  std::mt19937 random(7);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 0.1f, 1e-45f, 1.17549435e-38f, 3.40282347e38f, -2.5e-7f, 123456.79f};
  for (int i = 0; i < 20000; ++i) {
    std::uint32_t bits = random();
    float v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  DocumentArray docs = testing::numbered_docs(1);
  docs[0].embedding = at::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, at::kFloat).clone();
  docs[0].scores["s"] = 0.3f;
  auto writer = open_jsonl_writer(dir / "out.jsonl", {});
  writer->write(docs);
  writer->close();
  const DocumentArray back = read_jsonl(dir / "out.jsonl");
  REQUIRE(back.size() == 1);
  const at::Tensor e = back[0].embedding;
  REQUIRE(e.scalar_type() == at::kFloat);
  REQUIRE(e.numel() == static_cast<std::int64_t>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO(i << ": " << values[i]);
    REQUIRE(std::memcmp(e.data_ptr<float>() + i, &values[i], sizeof(float)) == 0);
  }
  CHECK(back[0].scores.at("s") == 0.3f);
  // Shortest form: 0.1f is written as 0.1 (std::to_chars) or 1E-1 (Dragonbox), not 0.100000001.
  const std::string text = testing::read_text(dir / "out.jsonl");
  CHECK((text.find("[0,-0.0,1,0.1,1e-45,") != std::string::npos ||
         text.find("[0E0,-0E0,1E0,1E-1,1E-45,") != std::string::npos));
}

TEST_CASE(".npy and .safetensors outputs read back with numpy and safetensors equal the embeddings",
          "[writers][binary]") {
  const auto dir = testing::scratch_dir("writers binary round trip");
  for (const std::string name : {"emb.npy", "emb.safetensors"}) {
    for (const std::string dtype : {"float32", "float16"}) {
      DYNAMIC_SECTION(name << " " << dtype) {
        const DocumentArray docs = embedded_docs(3000, 384);
        WriterOptions options;
        options.dtype = dtype;
        auto writer = open_writer(dir / name, options);
        for (std::size_t first = 0; first < docs.size(); first += 700) {
          writer->write(deep_copy(docs).take(first, std::min<std::size_t>(700, docs.size() - first)));
        }
        CHECK_FALSE(std::filesystem::exists(dir / name));  // written under PATH.partial until closed
        writer->close();
        CHECK(std::filesystem::exists(dir / name));
        CHECK_FALSE(std::filesystem::exists(dir / (name + ".partial")));
        const DocumentArray sidecar = read_jsonl(dir / "emb.docs.jsonl");
        REQUIRE(sidecar.size() == docs.size());
        CHECK(sidecar[2999].text == "2999");
        CHECK(sidecar[5].tags.at("row").as_int64() == 5);
        CHECK_FALSE(sidecar[5].embedding.defined());
        CHECK(writer->stats().documents == 3000);
        check_with_python(dir / name, docs, dtype);
      }
    }
  }
}

TEST_CASE("a binary output without an embedding or with another dimension names the document", "[writers][binary]") {
  const auto dir = testing::scratch_dir("writers binary errors");
  auto writer = open_writer(dir / "out.npy");
  DocumentArray docs = embedded_docs(3, 4);
  docs[1].embedding = at::Tensor();
  CHECK_THROWS_WITH(writer->write(docs),
                    fmt::format("'{}': document '{}' has no embedding; every document written to a .npy file needs one",
                                (dir / "out.npy").string(), docs[1].id));
  DocumentArray other = embedded_docs(1, 4);
  writer->write(other);
  DocumentArray wider = embedded_docs(1, 5);
  CHECK_THROWS_WITH(writer->write(wider), fmt::format("'{}': document '{}' has an embedding of 5 values, the first "
                                                      "document's has 4",
                                                      (dir / "out.npy").string(), wider[0].id));
  writer->abandon();
  // The one good row reached the file: it stays as out.npy.partial, its header counting that row, never
  // under the final name.
  CHECK_FALSE(std::filesystem::exists(dir / "out.npy"));
  CHECK_THAT(testing::read_text(dir / "out.npy.partial"), testing::contains("'shape': (1, 4)"));
  CHECK(read_jsonl(dir / "out.docs.jsonl.partial").size() == 1);
  CHECK_THROWS_WITH(open_writer(dir / "out.npy", WriterOptions{.dtype = "int8"}),
                    "dtype: expected float32 or float16, got 'int8'");
}

TEST_CASE("an output is NAME.partial until closed; left incomplete it stays so, or goes when no document reached it",
          "[writers]") {
  const auto dir = testing::scratch_dir("writers partial");
  for (const std::string name : {"out.jsonl", "out.npy", "out.safetensors"}) {
    DYNAMIC_SECTION(name) {
      auto empty = open_writer(dir / name);
      CHECK(std::filesystem::exists(dir / (name + ".partial")));
      CHECK(empty->close_partial().empty());
      CHECK(std::filesystem::is_empty(dir));  // a run that wrote no document leaves nothing
      open_writer(dir / name).reset();        // destroyed unclosed: abandoned, and empty, so removed
      CHECK(std::filesystem::is_empty(dir));
      auto writer = open_writer(dir / name);
      writer->write(embedded_docs(3, 4));
      CHECK(writer->close_partial() == dir / (name + ".partial"));
      CHECK_FALSE(std::filesystem::exists(dir / name));
      const auto docs = dir / (name == "out.jsonl" ? "out.jsonl.partial" : "out.docs.jsonl.partial");
      CHECK(read_jsonl(docs).size() == 3);
      auto complete = open_writer(dir / name);
      complete->write(embedded_docs(2, 4));
      complete->close();
      CHECK(std::filesystem::exists(dir / name));
      CHECK_FALSE(std::filesystem::exists(dir / (name + ".partial")));  // the new run's file was renamed
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
    }
  }
}

TEST_CASE("an unknown output extension or an unwritable path gives a clear error", "[writers]") {
  const auto dir = testing::scratch_dir("writers bad paths");
  CHECK_THROWS_WITH(open_writer(dir / "out.csv"), fmt::format("output '{}': unknown extension '.csv'; known: .jsonl, "
                                                              ".npy, .safetensors",
                                                              (dir / "out.csv").string()));
  testing::write_text(dir / "file", "x");
  CHECK_THROWS_WITH(open_writer(dir / "file" / "out.jsonl"),
                    fmt::format("cannot write '{}': Not a directory", (dir / "file" / "out.jsonl").string()));
  CHECK_THROWS_WITH(open_writer(dir / "file" / "out.safetensors"),
                    fmt::format("cannot write '{}': Not a directory", (dir / "file" / "out.safetensors").string()));
  std::filesystem::create_directories(dir / "folder.jsonl");
  CHECK_THROWS_WITH(open_writer(dir / "folder.jsonl"),
                    fmt::format("cannot write '{}': it is a folder", (dir / "folder.jsonl").string()));
}

TEST_CASE("a stoppable source reports the end of input once its stop flag is set", "[writers][interrupt]") {
  ArraySource inner(testing::numbered_docs(10));
  std::atomic<bool> stop{false};
  StoppableSource source(inner, stop);
  DocumentArray out;
  CHECK(source.read(out, 4) == 4);
  CHECK_FALSE(source.stopped());
  stop = true;
  CHECK(source.read(out, 4) == 0);
  CHECK(source.stopped());
  CHECK(out.size() == 4);
}

TEST_CASE("JsonlWriter formats on several threads and reports its time and bytes in the metrics", "[writers][jsonl]") {
  const auto dir = testing::scratch_dir("writers jsonl executor");
  Flow flow;
  flow.add({.name = "w", .uses = "JsonlWriter", .with = {{"path", (dir / "out.jsonl").string()}, {"threads", 3}}});
  DocumentArray in = embedded_docs(2000, 16);
  const DocumentArray expected = deep_copy(in);
  flow.post("/", std::move(in), PostOptions{.request_size = 33});
  flow.close();
  const DocumentArray back = read_jsonl(dir / "out.jsonl");
  REQUIRE(back.size() == expected.size());
  for (std::size_t i = 0; i < back.size(); ++i) {
    REQUIRE(back[i].id == expected[i].id);
    REQUIRE(at::equal(back[i].embedding, expected[i].embedding));
  }
  const auto stats = flow.stats();
  REQUIRE(stats.replicas.size() == 1);
  const auto& metrics = stats.replicas[0].metrics;
  CHECK(metrics.at("bytes") == static_cast<double>(std::filesystem::file_size(dir / "out.jsonl")));
  CHECK(metrics.at("format_seconds") > 0);
  CHECK(metrics.count("write_seconds") == 1);
  Flow bad;
  bad.add({.name = "w",
           .uses = "JsonlWriter",
           .with = {{"path", (dir / "x.jsonl").string()}, {"fields", boost::json::array{"txt"}}}});
  CHECK_THROWS_WITH(
      bad.start(),
      testing::contains("parameter 'fields': expected each item one of id, text, blob, tensor, embedding, tags, "
                        "mime_type, uri, scores, chunks, matches, parent_id, got 'txt' (did you mean 'text'?)"));
}
