// The npy and safetensors inputs (io.hpp's open_file_source): a binary output of flowline read back as the
// documents it was written from, numpy's and safetensors' other layouts and dtypes, and every header, size and
// sidecar that does not fit refused with the file named.
#include "test_support.hpp"

#include "flowline/io.hpp"
#include "flowline/writers.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace flowline;

namespace {

// Seven documents with ids, texts, tags and 5-value embeddings.
DocumentArray written_docs() {
  DocumentArray docs;
  const at::Tensor values = at::randn({7, 5}, at::kFloat);
  for (int i = 0; i < 7; ++i) {
    Document& doc = docs.push_back(Document(Document::WithId{fmt::format("doc-{}", i)}));
    doc.text = fmt::format("text {} with \"quotes\" and é", i);
    doc.tags["k"] = i;
    doc.tags["book"] = "alice";
    doc.embedding = values[i].clone();
  }
  return docs;
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string raw(const void* data, std::size_t bytes) { return std::string(static_cast<const char*>(data), bytes); }

// An .npy file as numpy writes it: version `major`, the dict padded with spaces to a multiple of 64, then the data.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

// A .safetensors file: the JSON header's length (8 bytes, little-endian), the header, the data.
std::string safetensors_file(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return out + json + data;
}

std::string opening_error(const std::filesystem::path& path, InputFormat format) {
  try {
    auto source = open_file_source(path, format);
    DocumentArray docs;
    while (source->read(docs, 100) > 0) {
    }
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("an .npy or .safetensors output read back as input gives the documents it was written from", "[io][arrays]") {
  const auto dir = testing::scratch_dir("array input round trip");
  const DocumentArray docs = written_docs();
  for (const std::string extension : {".npy", ".safetensors"}) {
    for (const std::string dtype : {"float32", "float16"}) {
      INFO(extension << " " << dtype);
      const auto path = dir / (extension.substr(1) + "-" + dtype + extension);  // sidecars of their own
      WriterOptions options;
      options.dtype = dtype;
      auto writer = open_writer(path, options);
      writer->write(docs);
      writer->close();
      REQUIRE(default_input_format(path) == extension.substr(1));
      auto source = open_file_source(path, parse_input_format(extension.substr(1)));
      CHECK(source->carries_ids());
      CHECK(source->count_left() == 7u);
      const DocumentArray back = testing::read_all(*source);
      REQUIRE(back.size() == docs.size());
      for (std::size_t i = 0; i < docs.size(); ++i) {
        CHECK(back[i].id == docs[i].id);
        CHECK(back[i].text == docs[i].text);
        CHECK(back[i].tags == docs[i].tags);
        CHECK(back[i].uri == path.string());
        REQUIRE(back[i].embedding.scalar_type() == at::kFloat);
        const at::Tensor expected =
            dtype == "float16" ? docs[i].embedding.to(at::kHalf).to(at::kFloat) : docs[i].embedding;
        CHECK(at::equal(back[i].embedding, expected));
      }
    }
  }
}

TEST_CASE("an array without a sidecar gives a document per row with a generated id and its row number",
          "[io][arrays]") {
  const auto dir = testing::scratch_dir("array input no sidecar");
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, 5.0f, -0.0f, 1e-30f, 7.0f, 8.0f, 9.0f, 10.0f};
  write_bytes(dir / "rows.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }",
                                         raw(values.data(), values.size() * 4)));
  auto source = open_file_source(dir / "rows.npy", InputFormat::Npy);
  CHECK_FALSE(source->carries_ids());
  const DocumentArray docs = testing::read_all(*source);
  REQUIRE(docs.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(docs[i].tags.at("row").as_int64() == static_cast<std::int64_t>(i));
    CHECK(docs[i].text.empty());
    CHECK(docs[i].uri == (dir / "rows.npy").string());
    CHECK(docs[i].id.size() == 32);
    REQUIRE(docs[i].embedding.sizes() == at::IntArrayRef{3});
    CHECK(std::memcmp(docs[i].embedding.data_ptr<float>(), values.data() + 3 * i, 12) == 0);
  }
  CHECK(docs[0].id != docs[1].id);
  // An empty array is an input of no documents.
  write_bytes(dir / "empty.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", ""));
  CHECK(testing::read_all(*open_file_source(dir / "empty.npy", InputFormat::Npy)).size() == 0);
}

TEST_CASE("numpy's version 2 headers, float64 and float16, and safetensors' BF16 under any one name are read",
          "[io][arrays]") {
  const auto dir = testing::scratch_dir("array input layouts");
  const std::vector<double> doubles = {0.1, -1e-3, 3.0, 1e20, 2.5, -7.0};
  write_bytes(dir / "f8.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
                                       raw(doubles.data(), doubles.size() * 8), 2));
  const DocumentArray f8 = testing::read_all(*open_file_source(dir / "f8.npy", InputFormat::Npy));
  REQUIRE(f8.size() == 2);
  for (int i = 0; i < 6; ++i) CHECK(f8[i / 3].embedding[i % 3].item<float>() == static_cast<float>(doubles[i]));
  // float16 and bfloat16 bits, as numpy and safetensors store them.
  const at::Tensor source = at::randn({3, 4});
  const at::Tensor half = source.to(at::kHalf), bf16 = source.to(at::kBFloat16);
  write_bytes(dir / "f2.npy",
              npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }", raw(half.data_ptr(), 24), 3));
  const DocumentArray f2 = testing::read_all(*open_file_source(dir / "f2.npy", InputFormat::Npy));
  REQUIRE(f2.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(at::equal(f2[i].embedding, half[i].to(at::kFloat)));
  write_bytes(dir / "bf16.safetensors",
              safetensors_file(R"({"__metadata__": {"format": "pt"}, "vectors": {"dtype": "BF16", "shape": [3, 4], )"
                               R"("data_offsets": [0, 24]}})",
                               raw(bf16.data_ptr(), 24)));
  const DocumentArray b = testing::read_all(*open_file_source(dir / "bf16.safetensors", InputFormat::Safetensors));
  REQUIRE(b.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(at::equal(b[i].embedding, bf16[i].to(at::kFloat)));
  // Among several tensors, the one named embedding; its data where data_offsets put it.
  const std::vector<float> values = {1, 2, 3, 4};
  write_bytes(dir / "two.safetensors",
              safetensors_file(R"({"other": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}, )"
                               R"("embedding": {"dtype": "F32", "shape": [1, 2], "data_offsets": [8, 16]}})",
                               raw(values.data(), 16)));
  const DocumentArray two = testing::read_all(*open_file_source(dir / "two.safetensors", InputFormat::Safetensors));
  REQUIRE(two.size() == 1);
  CHECK(two[0].embedding[0].item<float>() == 3.0f);
}

TEST_CASE("an array input whose header, data or sidecar does not fit is refused naming the file and what was expected",
          "[io][arrays]") {
  const auto dir = testing::scratch_dir("array input refusals");
  const std::string twelve(48, '\0');
  const auto npy = [&](const std::string& name, const std::string& dict, const std::string& data) {
    write_bytes(dir / name, npy_file(dict, data));
    return opening_error(dir / name, InputFormat::Npy);
  };
  const auto shaped = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return fmt::format("{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}", descr, order, shape);
  };
  using testing::contains;
  CHECK_THAT(npy("be.npy", shaped(">f4", "False", "(4, 3)"), twelve), contains("be.npy: its values are big-endian"));
  CHECK_THAT(npy("int.npy", shaped("<i8", "False", "(2, 3)"), twelve),
             contains("its values are '<i8': expected floats ('<f2', '<f4' or '<f8')"));
  CHECK_THAT(npy("fortran.npy", shaped("<f4", "True", "(4, 3)"), twelve), contains("Fortran (column-major) order"));
  CHECK_THAT(npy("flat.npy", shaped("<f4", "False", "(12,)"), twelve), contains("has 1 dimensions: expected 2"));
  CHECK_THAT(npy("cube.npy", shaped("<f4", "False", "(2, 2, 3)"), twelve), contains("has 3 dimensions: expected 2"));
  CHECK_THAT(npy("short.npy", shaped("<f4", "False", "(5, 3)"), twelve),
             contains("short.npy: its header declares 5 rows of 3 values (60 bytes of data from byte 128), but the "
                      "file holds 48 bytes there: it is cut short"));
  CHECK_THAT(npy("huge.npy", shaped("<f4", "False", "(18446744073709551615, 3)"), twelve), contains("it is cut short"));
  CHECK_THAT(npy("zero.npy", shaped("<f4", "False", "(4, 0)"), ""), contains("its rows have no values"));
  CHECK_THAT(npy("key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), 'extra': 1, }", twelve),
             contains("unexpected key 'extra'"));
  CHECK_THAT(npy("nodescr.npy", "{'fortran_order': False, 'shape': (4, 3), }", twelve),
             contains("it lacks one of 'descr'"));
  write_bytes(dir / "garbage.npy", "this is not an array at all");
  CHECK_THAT(opening_error(dir / "garbage.npy", InputFormat::Npy), contains("does not start with \\x93NUMPY"));
  std::string long_header = npy_file(shaped("<f4", "False", "(4, 3)"), twelve);
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  write_bytes(dir / "long.npy", long_header);
  CHECK_THAT(opening_error(dir / "long.npy", InputFormat::Npy), contains("runs past the end of the file"));
  // safetensors
  const auto st = [&](const std::string& name, const std::string& json, const std::string& data) {
    write_bytes(dir / name, safetensors_file(json, data));
    return opening_error(dir / name, InputFormat::Safetensors);
  };
  CHECK_THAT(st("json.safetensors", "{not json", ""), contains("the header is not a JSON object"));
  CHECK_THAT(st("many.safetensors",
                R"({"a": {"dtype": "F32", "shape": [1, 1], "data_offsets": [0, 4]}, )"
                R"("b": {"dtype": "F32", "shape": [1, 1], "data_offsets": [4, 8]}})",
                std::string(8, '\0')),
             contains("it holds 2 tensors (a, b) and none named 'embedding'"));
  CHECK_THAT(st("i64.safetensors", R"({"embedding": {"dtype": "I64", "shape": [1, 1], "data_offsets": [0, 8]}})",
                std::string(8, '\0')),
             contains("tensor 'embedding': dtype \"I64\": expected F16, BF16, F32 or F64"));
  CHECK_THAT(st("span.safetensors", R"({"embedding": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 4]}})",
                std::string(8, '\0')),
             contains("tensor 'embedding': 4 bytes of data for shape [1, 2] of F32 (8 expected)"));
  // The model loader's checks of the whole file (flowline/safetensors_header.hpp): bytes no tensor names.
  CHECK_THAT(st("trailing.safetensors", R"({"embedding": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}})",
                std::string(12, '\0')),
             contains("4 bytes of data after the last tensor ('embedding', ending at 8)"));
  write_bytes(dir / "tiny.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  CHECK_THAT(opening_error(dir / "tiny.safetensors", InputFormat::Safetensors), contains("over 100 MB"));
  // A sidecar of another length, or one that brings embeddings of its own.
  const DocumentArray docs = written_docs();
  auto writer = open_writer(dir / "emb.npy");
  writer->write(docs);
  writer->close();
  testing::write_text(dir / "emb.docs.jsonl", testing::read_text(dir / "emb.docs.jsonl") + "{\"id\": \"extra\"}\n");
  CHECK_THAT(opening_error(dir / "emb.npy", InputFormat::Npy),
             contains((dir / "emb.docs.jsonl").string() + ": the sidecar holds 8 documents, but '" +
                      (dir / "emb.npy").string() + "' has 7 rows"));
  std::string lines;
  for (const Document& doc : docs) lines += to_json(doc) + "\n";
  testing::write_text(dir / "emb.docs.jsonl", lines);
  CHECK_THAT(opening_error(dir / "emb.npy", InputFormat::Npy),
             contains("document 'doc-0' has an embedding of its own"));
  // One file: neither a folder nor standard input.
  CHECK_THAT(opening_error(dir, InputFormat::Npy),
             contains("is a folder; --input-format npy and safetensors read one"));
  CHECK_THROWS_WITH(open_stdin_source(InputFormat::Safetensors), contains("read a file, not standard input"));
  CHECK_THAT(opening_error(dir / "missing.npy", InputFormat::Npy), contains("cannot open file"));
}
