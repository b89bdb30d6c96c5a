// `flowline run --input DIR --input-format images` through the real launcher, and image documents in JSONL.
#include "image_files.hpp"
#include "test_support.hpp"

#include "flowline/images.hpp"

#include <fmt/format.h>

#include <fstream>

using namespace flowline;

namespace {

using testing::image_dir;
using testing::read_bytes;

testing::ProcessResult launch(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}

}  // namespace

TEST_CASE("flowline run --input-format images makes one document per image file, sorted by path", "[images]") {
  const auto dir = testing::scratch_dir("image input");
  const auto in = dir / "photos";
  std::filesystem::create_directories(in / "b" / "nested");
  std::filesystem::create_directories(in / ".hidden");
  std::filesystem::copy_file(image_dir() / "rgb_40x30_q90.jpg", in / "b" / "nested" / "x.JPEG");
  std::filesystem::copy_file(image_dir() / "rgb_30x20.png", in / "a.png");
  std::filesystem::copy_file(image_dir() / "rgb_40x30_lossy.webp", in / "b" / "c.webp");
  std::filesystem::copy_file(image_dir() / "rgb_30x20.png", in / ".hidden" / "skipped.png");
  testing::write_text(in / "notes.txt", "not an image\n");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  const auto r =
      launch(fmt::format("run '{0}/flow.yml' -i '{0}/photos' --input-format images --request-size 2 -o "
                         "'{0}/out.jsonl'",
                         dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const DocumentArray out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 3);
  CHECK(out[0].uri == (in / "a.png").string());
  CHECK(out[0].mime_type == "image/png");
  CHECK(out[0].blob == read_bytes(image_dir() / "rgb_30x20.png"));
  CHECK(out[1].uri == (in / "b" / "c.webp").string());
  CHECK(out[1].mime_type == "image/webp");
  CHECK(out[2].uri == (in / "b" / "nested" / "x.JPEG").string());
  CHECK(out[2].mime_type == "image/jpeg");
  CHECK(images::decode_image(out[2].blob).width == 40);

  testing::write_text(dir / "empty" / "a.txt", "text\n");
  const auto empty = launch(fmt::format("run '{0}/flow.yml' -i '{0}/empty' --input-format images", dir.string()));
  CHECK(empty.exit_code != 0);
  CHECK_THAT(empty.err, testing::contains("the folder holds no .jpg, .jpeg, .png or .webp files"));
}

TEST_CASE("JSONL documents with a uri or a base64 blob are image documents", "[images]") {
  const auto dir = testing::scratch_dir("image jsonl");
  const Bytes png = read_bytes(image_dir() / "rgb_30x20.png");
  Document with_blob;
  with_blob.id = "blob";
  with_blob.blob = png;
  std::string jsonl = to_json(with_blob) + "\n";
  jsonl += fmt::format("{{\"id\": \"path\", \"uri\": \"{}\"}}\n", (image_dir() / "rgb_30x20.png").string());
  testing::write_text(dir / "in.jsonl", jsonl);
  const DocumentArray docs = read_jsonl(dir / "in.jsonl");
  REQUIRE(docs.size() == 2);
  images::ImageSourcePolicy policy;
  policy.any_local_path = true;
  for (const Document& doc : docs) {
    INFO(doc.id);
    CHECK(images::has_image(doc));
    CHECK(images::image_bytes(doc, policy) == png);
    CHECK(images::decode_image(images::image_bytes(doc, policy)).height == 20);
  }
}

TEST_CASE("the images source reads a file's bytes only when it hands its document out", "[images]") {
  const auto dir = testing::scratch_dir("image input lazy");
  for (const char* name : {"1.png", "2.png", "3.png"})
    std::filesystem::copy_file(image_dir() / "rgb_30x20.png", dir / name);
  auto source = open_file_source(dir, InputFormat::Images);
  DocumentArray batch;
  REQUIRE(source->read(batch, 2) == 2);  // 1.png and 2.png
  // Files are listed up front but not read: one removed after the listing fails when its turn comes, not before.
  std::filesystem::remove(dir / "3.png");
  CHECK(batch[1].uri == (dir / "2.png").string());
  CHECK_THROWS_WITH(source->read(batch, 2), testing::contains("3.png") && testing::contains("cannot open file"));
  CHECK_THROWS_WITH(open_stdin_source(InputFormat::Images), testing::contains("not standard input"));
  CHECK(parse_input_format("images") == InputFormat::Images);
}
