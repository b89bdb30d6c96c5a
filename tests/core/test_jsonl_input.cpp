// Tests of the JSONL input's fast path (src/core/input_jsonl.hpp): exact floats, the same documents as the
// general parser, and the general parser's errors (file:line) for whatever the fast path leaves to it.
#include "test_support.hpp"

#include "input_jsonl.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

using namespace flowline;

namespace {

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// What Python's float(text) gives (glibc's strtod rounds correctly too), then float32 rounding.
float python_float32(const std::string& text) { return static_cast<float>(std::strtod(text.c_str(), nullptr)); }

DocumentArray read_all(const std::filesystem::path& path) {
  auto source = open_file_source(path, InputFormat::Jsonl);
  DocumentArray docs;
  while (source->read(docs, 1000) > 0) {
  }
  return docs;
}

}  // namespace

TEST_CASE("a JSONL input reads back every float32 the JSONL writer wrote, and writes the same bytes again",
          "[io][jsonl]") {
  // Random bit patterns (every exponent, subnormals), both zeros, the extremes and the non-finite values.
  std::mt19937 random(55);
  std::vector<float> specials = {0.0f,          -0.0f,          1e-45f,        -1e-45f, 1.17549435e-38f,
                                 3.4028235e38f, -3.4028235e38f, 16777217.0f,   0.1f,    INFINITY,
                                 -INFINITY,     std::nanf(""),  1.1754942e-38f};
  DocumentArray docs;
  for (int d = 0; d < 400; ++d) {
    at::Tensor row = at::empty({384}, at::kFloat);
    float* p = row.data_ptr<float>();
    for (int i = 0; i < 384; ++i) {
      const std::uint32_t bits = random();
      std::memcpy(&p[i], &bits, sizeof bits);
      if (std::isnan(p[i])) p[i] = std::nanf("");  // JSON writes every NaN as "nan"
    }
    if (d == 0) std::copy(specials.begin(), specials.end(), p);
    Document doc(Document::WithId{fmt::format("doc-{}", d)});
    doc.text = fmt::format("text \"{}\"\n\u00e9", d);
    doc.embedding = row;
    docs.push_back(std::move(doc));
  }
  const auto dir = testing::scratch_dir("jsonl fast floats");
  write_jsonl(dir / "a.jsonl", docs);
  DocumentArray back = read_all(dir / "a.jsonl");
  REQUIRE(back.size() == docs.size());
  std::size_t wrong = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    CHECK(back[d].id == docs[d].id);
    CHECK(back[d].text == docs[d].text);
    REQUIRE(back[d].embedding.scalar_type() == at::kFloat);
    REQUIRE(back[d].embedding.sizes() == docs[d].embedding.sizes());
    const float* want = docs[d].embedding.data_ptr<float>();
    const float* got = back[d].embedding.data_ptr<float>();
    for (int i = 0; i < 384; ++i) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : bits_of(want[i]) == bits_of(got[i]);
      if (!same && ++wrong <= 5)
        UNSCOPED_INFO(fmt::format("doc {} value {}: {} read back as {}", d, i, want[i], got[i]));
    }
  }
  CHECK(wrong == 0);
  for (Document& doc : back) doc.uri.clear();  // the reader names the file each document came from
  write_jsonl(dir / "b.jsonl", back);
  CHECK(file_bytes(dir / "a.jsonl") == file_bytes(dir / "b.jsonl"));
}

TEST_CASE("a number in a JSONL input reads as Python's float() then float32 rounding", "[io][jsonl]") {
  // Decimal texts of 1 to 25 significant digits over every exponent a float32 and a double reach: halfway
  // cases, subnormals, values rounding to 0 and to the largest float32, the texts Python's json.dumps writes
  // for float32 values (17 digits).
  std::mt19937_64 random(3);
  std::vector<std::string> texts = {"0",
                                    "-0",
                                    "0.0",
                                    "-0.0",
                                    "1e-46",
                                    "-1e-46",
                                    "1.5e-45",
                                    "7e-46",
                                    "3.4028235677973366e+38",
                                    "3.4028235e38",
                                    "1E+38",
                                    "0.10000000149011612",
                                    "16777217",
                                    "-16777219",
                                    "1e-320",
                                    "2.5e-324"};
  for (int i = 0; i < 20000; ++i) {
    std::string t;
    if (random() % 2) t += '-';
    const int digits = 1 + static_cast<int>(random() % 25);
    t += static_cast<char>('1' + random() % 9);
    if (digits > 1) t += '.';
    for (int k = 1; k < digits; ++k) t += static_cast<char>('0' + random() % 10);
    t += fmt::format("e{}", static_cast<int>(random() % 120) - 60);
    texts.push_back(t);
  }
  for (int i = 0; i < 5000; ++i) {  // json.dumps(float(np.float32(x))): the double of a float32, shortest
    const std::uint32_t bits = static_cast<std::uint32_t>(random());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isfinite(f)) texts.push_back(fmt::format("{}", static_cast<double>(f)));
  }
  for (int i = 0; i < 5000; ++i) {  // at and beside the midpoints between two float32s: the double rounding
    const std::uint32_t bits = static_cast<std::uint32_t>(random()) & 0x7F7FFFFF;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    const double mid = (static_cast<double>(f) + static_cast<double>(std::nextafter(f, INFINITY))) / 2;
    for (const double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, INFINITY)}) {
      texts.push_back(fmt::format("{}", v));
      texts.push_back(fmt::format("{:.15e}", v));
    }
  }
  std::string line =
      fmt::format(R"({{"id": "n", "embedding": {{"dtype": "float32", "shape": [{}], "data": [)", texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) line += (i ? ", " : "") + texts[i];
  line += "]}}";
  Document doc(Document::WithId{});
  REQUIRE(flowline::detail::read_document_fast(line, doc));
  REQUIRE(doc.embedding.numel() == static_cast<int64_t>(texts.size()));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const float got = doc.embedding.data_ptr<float>()[i];
    if (bits_of(got) != bits_of(python_float32(texts[i])) && ++wrong <= 5)
      UNSCOPED_INFO(fmt::format("'{}' read as {}, Python gives {}", texts[i], got, python_float32(texts[i])));
  }
  CHECK(wrong == 0);
  CHECK(std::signbit(doc.embedding.data_ptr<float>()[1]));  // float("-0") is -0.0
}

TEST_CASE("the fast path reads a line as the general parser does, or leaves it to it", "[io][jsonl]") {
  const std::vector<std::string> read_fast = {
      R"({"id": "a", "text": "plain"})",
      R"({"text": "esc \" \\ \/ \b \f \n \r \t \u00e9 \u20ac \ud83d\ude00", "id": "b"})",
      R"( { "id" : "c" , "embedding" : { "data" : [ [1, 2.5], [true, false] ], "shape" : [2, 2], "dtype" : "float32" } } )",
      R"({"id": "d", "tensor": {"dtype": "float32", "shape": [3], "data": ["nan", "inf", "-inf"]}})",
      R"({"id": "e", "tags": {"k": [1, {"x": "}]\""}], "f": 0.1, "big": 12345678901234567890}, "uri": "u"})",
      R"({"id": "f", "blob": "AAEC/w==", "scores": {"cos": 0.25}, "mime_type": "text/plain", "parent_id": "p"})",
      R"({"id": "g", "chunks": [{"id": "c1", "text": "x"}], "matches": []})",
      R"({"id": "", "text": "no id"})",
      R"({})",
  };
  for (const std::string& line : read_fast) {
    INFO(line);
    Document fast(Document::WithId{});
    REQUIRE(flowline::detail::read_document_fast(line, fast));
    const Document general = document_from_json(std::string_view(line));
    const auto id_at = line.find(R"("id": ")");
    if (id_at != std::string::npos && line[id_at + 7] != '"') {
      CHECK(fast.id == general.id);
    } else {
      CHECK_FALSE(fast.id.empty());  // generated, as the general parser does
    }
    Document a = fast, b = general;
    a.id = b.id = "x";
    CHECK(to_json(a) == to_json(b));
  }
  const std::vector<std::string> left = {
      R"({"id": "a", "embedding": {"dtype": "float64", "shape": [1], "data": [0.1]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [2], "data": [1.]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [1], "data": [.5]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [1], "data": [01]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [1], "data": [1e400]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [2], "data": [1]}})",
      R"({"id": "a", "embedding": {"dtype": "float32", "shape": [2, 0], "data": []}})",
      R"({"id": "a", "id": "b"})",
      R"({"id": "a", "txt": "x"})",
      R"({"id": "a", "text": "lone \udc00"})",
      R"({"id": 5})",
      R"({"id": "a"} x)",
      R"({"id": "a",})",
      R"({"id": "a", "tags": [1]})",
  };
  for (const std::string& line : left) {
    INFO(line);
    Document fast(Document::WithId{});
    CHECK_FALSE(flowline::detail::read_document_fast(line, fast));
  }
}

TEST_CASE("a JSONL line the fast path leaves is refused by the general parser with file and line", "[io][jsonl]") {
  const auto dir = testing::scratch_dir("jsonl fast errors");
  const std::string good = R"({"id": "a", "embedding": {"dtype": "float32", "shape": [2], "data": [1, 2]}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"id": "b", "embedding": {"dtype": "float32", "shape": [2], "data": [1.]}})", ":2: invalid JSON"},
      {R"({"id": "b", "embedding": {"dtype": "float32", "shape": [3], "data": [1, 2]}})",
       ":2: field 'embedding.data': shape 3 needs 3 values, got 2"},
      {R"({"id": "b", "txt": "x"})", ":2: unknown field 'txt' (did you mean 'text'?)"},
  };
  for (const auto& [line, message] : cases) {
    INFO(line);
    testing::write_text(dir / "in.jsonl", good + "\n" + line + "\n");
    CHECK_THROWS_WITH(read_all(dir / "in.jsonl"), testing::starts_with((dir / "in.jsonl").string() + message));
  }
}

TEST_CASE("a bad line among many is reported at its own line whichever thread parsed it, after the lines before it",
          "[io][jsonl]") {
  const auto dir = testing::scratch_dir("jsonl two threads");
  // 600 lines read at once are parsed on two threads (lines 1-300 and 301-600): bad lines in either half.
  for (const std::vector<int> bad : {std::vector<int>{450, 500}, std::vector<int>{100, 450}, std::vector<int>{}}) {
    std::string text;
    for (int line = 1; line <= 600; ++line) {
      const bool is_bad = std::find(bad.begin(), bad.end(), line) != bad.end();
      text += is_bad ? fmt::format("{{\"id\": \"d{}\", \"txt\": \"x\"}}\n", line)
                     : fmt::format(
                           "{{\"id\": \"d{}\", \"embedding\": {{\"dtype\": \"float32\", \"shape\": [2], "
                           "\"data\": [{}, 0.5]}}}}\n",
                           line, line);
    }
    testing::write_text(dir / "in.jsonl", text);
    auto source = open_file_source(dir / "in.jsonl", InputFormat::Jsonl);
    DocumentArray docs;
    if (bad.empty()) {
      REQUIRE(source->read(docs, 1000) == 600);
      for (int i = 0; i < 600; ++i) {
        CHECK(docs[i].id == fmt::format("d{}", i + 1));
        CHECK(docs[i].embedding.data_ptr<float>()[0] == static_cast<float>(i + 1));
      }
      continue;
    }
    CHECK_THROWS_WITH(source->read(docs, 1000), fmt::format("{}:{}: unknown field 'txt' (did you mean 'text'?)",
                                                            (dir / "in.jsonl").string(), bad[0]));
    REQUIRE(docs.size() == static_cast<std::size_t>(bad[0] - 1));
    CHECK(docs[docs.size() - 1].id == fmt::format("d{}", bad[0] - 1));
  }
}
