// Tests of documents to and from JSON and JSONL: every field and dtype, round trips, errors with their position.
#include "test_support.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <random>

using namespace flowline;

TEST_CASE("JSON round trip keeps every field, tensor dtype, shape and exact values", "[io]") {
  Document d("héllo \"quoted\"\n\ttab");
  d.blob = {0, 1, 2, 250, 255};
  d.tensor = at::arange(6, at::kLong).reshape({2, 3});
  d.embedding = at::randn({5});
  d.tags["i"] = std::int64_t{1} << 60;
  d.tags["f"] = 0.1;
  d.tags["nested"] = boost::json::object{{"list", boost::json::array{1, 2}}};
  d.mime_type = "text/plain";
  d.uri = "file.txt";
  d.scores["cos"] = 0.25f;
  d.chunks.push_back(Document("chunk"));
  d.matches.push_back(Document("match"));
  d.parent_id = "p";

  const Document back = document_from_json(to_json(d));
  CHECK(back.id == d.id);
  CHECK(back.text == d.text);
  CHECK(back.blob == d.blob);
  CHECK(back.tensor.scalar_type() == at::kLong);
  CHECK(back.tensor.sizes() == d.tensor.sizes());
  CHECK(at::equal(back.tensor, d.tensor));
  CHECK(back.embedding.scalar_type() == at::kFloat);
  CHECK(at::equal(back.embedding, d.embedding));  // bit-exact floats
  CHECK(back.tags.at("i").is_int64());
  CHECK(back.tags.at("i").as_int64() == (std::int64_t{1} << 60));
  CHECK(back.tags.at("nested").as_object().at("list").as_array().size() == 2);
  CHECK(back.scores.at("cos") == 0.25f);
  CHECK(back.chunks[0].text == "chunk");
  CHECK(back.matches[0].text == "match");
  CHECK(back.parent_id == "p");
}

TEST_CASE("scores that overflow float32 or are not numbers are written as strings and read back", "[io]") {
  // Found by tests/fuzz/fuzz_document_json: 5e102 read into a float score became inf, was written as "inf",
  // and reading that back failed with "expected a number".
  const Document d =
      document_from_json(std::string_view(R"({"scores": {"big": 5e102, "neg": -1e300, "n": "nan", "x": 0.5}})"));
  CHECK(std::isinf(d.scores.at("big")));
  const std::string json = to_json(d);
  CHECK_THAT(json, testing::contains(R"("big":"inf")"));
  CHECK_THAT(json, testing::contains(R"("neg":"-inf")"));
  const Document back = document_from_json(json);
  CHECK(back.scores.at("big") == INFINITY);
  CHECK(back.scores.at("neg") == -INFINITY);
  CHECK(std::isnan(back.scores.at("n")));
  CHECK(back.scores.at("x") == 0.5f);
  CHECK(to_json(back) == json);
  CHECK_THROWS_WITH(document_from_json(std::string_view(R"({"scores": {"s": "high"}})")),
                    testing::contains("field 'scores.s': expected a number, \"nan\", \"inf\" or \"-inf\""));
}

TEST_CASE("a tensor whose shape asks for far more values than it has is refused without sizing memory by it", "[io]") {
  // Found by tests/fuzz/fuzz_document_json: shape [36666666663] with three values made the reader reserve
  // 293 GB (std::bad_alloc, not an error naming the field); a shape whose count overflows int64 was
  // undefined behaviour.
  CHECK_THROWS_WITH(document_from_json(std::string_view(
                        R"({"embedding": {"dtype": "float64", "shape": [36666666663], "data": [1, 2, 3]}})")),
                    "field 'embedding.data': shape 36666666663 needs 36666666663 values, got 3");
  CHECK_THROWS_WITH(document_from_json(std::string_view(
                        R"({"tensor": {"dtype": "float32", "shape": [4611686018427387904, 4], "data": []}})")),
                    "field 'tensor.shape': shape 4611686018427387904x4 is too large");
}

TEST_CASE("a number beyond a double's range is an error, not an infinity written back as Infinity", "[io]") {
  // Found by tests/fuzz/fuzz_document_json: a tag of -2e400 read as -inf, and to_json wrote "-Infinity",
  // which is not JSON, into JSONL output.
  CHECK_THROWS_WITH(document_from_json(std::string_view(R"({"tags": {"x": -2e400}})")),
                    testing::starts_with("invalid JSON"));
  CHECK_THROWS_WITH(
      document_from_json(std::string_view(R"({"embedding": {"dtype": "float32", "shape": [1], "data": [1e999]}})")),
      testing::starts_with("invalid JSON"));
  CHECK(document_from_json(std::string_view(R"({"tags": {"x": 1.7e308}})")).tags.at("x").as_double() == 1.7e308);
}

TEST_CASE("an empty tensor must carry the nested lists its shape writes, so a few bytes cannot ask for gigabytes",
          "[io]") {
  // Found by tests/fuzz/fuzz_document_json: shape [8888888885, 0] with data [] was accepted, and writing
  // it back produced 8.9 billion "[]" (a 10 s timeout in the fuzzer; gigabytes of JSONL output).
  CHECK_THROWS_WITH(
      document_from_json(std::string_view(R"({"tensor": {"dtype": "float64", "shape": [8888888885, 0], "data": []}})")),
      "field 'tensor.data': shape 8888888885x0 has no values but 8888888885 nested lists, and data has 1");
  Document d;
  d.tensor = at::empty({3, 0});
  const std::string json = to_json(d);
  CHECK_THAT(json, testing::contains(R"("shape":[3,0],"data":[[],[],[]])"));
  CHECK(document_from_json(json).tensor.sizes() == at::IntArrayRef{3, 0});
  CHECK(document_from_json(std::string_view(R"({"tensor": {"dtype": "float32", "shape": [0, 7], "data": []}})"))
            .tensor.sizes() == at::IntArrayRef{0, 7});
}

TEST_CASE("half and bfloat16 tensors round trip exactly through JSON", "[io]") {
  for (auto dtype : {at::kHalf, at::kBFloat16, at::kDouble}) {
    Document d;
    d.embedding = at::randn({2, 4}).to(dtype);
    const Document back = document_from_json(to_json(d));
    CHECK(back.embedding.scalar_type() == dtype);
    INFO(c10::toString(dtype));
    CHECK(at::equal(back.embedding, d.embedding));
    if (!at::equal(back.embedding, d.embedding)) {
      INFO(to_json(d) << " vs " << to_json(back));
      CHECK(false);
    }
  }
}

TEST_CASE("a row of floats is written in each value's shortest form and reads back to the same float32", "[io]") {
  // Every exponent, denormals and the extremes: 200,000 finite bit patterns, written as one row.
  std::mt19937 random(7);
  std::vector<float> values = {0.0f,    -0.0f,           1.0f,          -1.0f,          0.1f,        1e-45f,
                               -1e-45f, 1.17549435e-38f, 3.4028235e38f, -3.4028235e38f, 16777216.0f, 16777217.0f,
                               1e7f,    1e-7f,           123456.0f};
  while (values.size() < 200'000) {
    const std::uint32_t bits = random();
    float v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  std::string row;
  append_json_floats(row, values.data(), values.size());
  REQUIRE(row.front() == '[');
  REQUIRE(row.back() == ']');

  // Each value's text, read straight into a float, is the same float (sign of zero included), and has no
  // more significant digits than std::to_chars' shortest form.
  auto significant_digits = [](std::string_view text) {
    std::size_t first = text.find_first_of("123456789"), last = text.find_first_of("eE");
    if (first == std::string_view::npos) return std::size_t{1};
    std::string_view mantissa = text.substr(0, last);
    mantissa = mantissa.substr(first, mantissa.find_last_of("123456789") + 1 - first);
    return static_cast<std::size_t>(std::count_if(mantissa.begin(), mantissa.end(), ::isdigit));
  };
  std::size_t i = 0, wrong = 0, longer = 0;
  for (std::size_t start = 1; start < row.size(); ++i) {
    const std::size_t end = std::min(row.find(',', start), row.size() - 1);
    const std::string_view text(row.data() + start, end - start);
    float back = 0;
    const auto parsed = std::from_chars(text.data(), text.data() + text.size(), back);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size() ||
        std::memcmp(&back, &values[i], sizeof back) != 0) {
      if (++wrong <= 5) UNSCOPED_INFO(fmt::format("value {}: {} read back as {}", i, values[i], text));
    }
    char shortest[32];
    const auto made = std::to_chars(shortest, shortest + sizeof shortest, values[i]);
    if (significant_digits(text) > significant_digits(std::string_view(shortest, made.ptr - shortest))) ++longer;
    start = end + 1;
  }
  CHECK(i == values.size());
  CHECK(wrong == 0);
  CHECK(longer == 0);  // (read back through the documents' reader: test_writers, JSONL floats)
}

TEST_CASE("a bad document field is named in the error", "[io]") {
  CHECK_THROWS_WITH(document_from_json(std::string_view(R"({"txt": "x"})")),
                    "unknown field 'txt' (did you mean 'text'?)");
  CHECK_THROWS_WITH(
      document_from_json(std::string_view(R"({"embedding": {"dtype": "float32", "shape": [3], "data": [1, 2]}})")),
      "field 'embedding.data': shape 3 needs 3 values, got 2");
  CHECK_THROWS_WITH(document_from_json(std::string_view(R"({"tags": [1]})")), "field 'tags': expected a JSON object");
}

TEST_CASE("a bad JSONL line is reported with file and line number", "[io]") {
  const auto dir = testing::scratch_dir("jsonl bad line");
  testing::write_text(dir / "in.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n");
  CHECK_THROWS_WITH(read_jsonl(dir / "in.jsonl"),
                    testing::starts_with((dir / "in.jsonl").string() + ":3: invalid JSON"));
}

TEST_CASE("invalid UTF-8 in an input file is reported with line and column", "[io]") {
  const auto dir = testing::scratch_dir("bad utf8");
  testing::write_text(dir / "in.txt", "good line\nbad \xff line\n");
  auto source = open_file_source(dir / "in.txt", InputFormat::Lines);
  DocumentArray docs;
  CHECK_THROWS_WITH(source->read(docs, 10), (dir / "in.txt").string() + ":2:5: invalid UTF-8 (byte 0xff)");
  // Whole-file formats check the file when it is opened.
  CHECK_THROWS_WITH(open_file_source(dir / "in.txt", InputFormat::Paragraphs),
                    (dir / "in.txt").string() + ":2:5: invalid UTF-8 (byte 0xff)");
}

TEST_CASE("a missing input file is an input error naming it", "[io]") {
  CHECK_THROWS_WITH(open_file_source("/nonexistent/in.txt", InputFormat::Paragraphs),
                    "/nonexistent/in.txt: cannot open file: No such file or directory");
  CHECK_THROWS_AS(open_file_source("/nonexistent/in.jsonl", InputFormat::Jsonl), InputError);
}

TEST_CASE("JSONL written by write_jsonl reads back in order", "[io]") {
  const auto dir = testing::scratch_dir("jsonl roundtrip");
  DocumentArray docs = testing::numbered_docs(50);
  write_jsonl(dir / "out.jsonl", docs);
  const DocumentArray back = read_jsonl(dir / "out.jsonl");
  REQUIRE(back.size() == 50);
  for (std::size_t i = 0; i < 50; ++i) CHECK(back[i].id == docs[i].id);
}

TEST_CASE("line sources skip blank lines and record line numbers", "[io]") {
  const auto dir = testing::scratch_dir("lines source");
  testing::write_text(dir / "in.txt", "first\r\n\n  \nsecond\n");
  auto source = open_file_source(dir / "in.txt", InputFormat::Lines);
  DocumentArray docs;
  while (source->read(docs, 1) > 0) {
  }
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].text == "first");
  CHECK(docs[1].text == "second");
  CHECK(docs[1].tags.at("line").as_int64() == 4);
}
