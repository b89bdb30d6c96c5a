// Tests of DocumentSource::skip() and count_left() for every input format: skipping k documents and then
// reading gives exactly what reading gives after the first k, the count is what read() still hands out, and
// `flowline run --resume`'s ResumeSource checks the last skipped document through them.
#include "test_support.hpp"

#include "resume.hpp"

#include "flowline/params.hpp"
#include "flowline/resumable_sink.hpp"
#include "flowline/writers.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

using namespace flowline;

namespace {

// A document's JSON form; the id only where the input gives it (lines, paragraphs, text and images get a
// fresh generated one on every read).
std::string form(const Document& doc, bool with_id) {
  Document copy = doc;
  if (!with_id) copy.id = "-";
  return to_json(copy);
}

// For k at the start, inside, at the end and past the end: skip(k) then read() gives the documents read()
// gives after k, the count before and after the skip says what is left, and a jsonl input's last skipped id
// is the one read() gives.
void check_skips(const std::function<std::unique_ptr<DocumentSource>()>& open, bool with_ids,
                 std::size_t expected_documents) {
  auto whole = open();
  REQUIRE(whole->count_left() == expected_documents);
  const DocumentArray all = testing::read_all(*whole);
  REQUIRE(all.size() == expected_documents);
  CHECK(whole->count_left() == 0u);
  const std::size_t n = all.size();
  for (const std::size_t k : std::vector<std::size_t>{0, 1, n / 2, n - 1, n, n + 3}) {
    INFO("skipping " << k << " of " << n);
    auto source = open();
    const Skipped skipped = source->skip(k);
    CHECK(skipped.documents == std::min(k, n));
    if (with_ids && k > 0 && k <= n) CHECK(skipped.last_id == all[k - 1].id);
    if (!with_ids || k == 0 || k > n) CHECK(skipped.last_id.empty());
    CHECK(source->count_left() == n - std::min(k, n));
    const DocumentArray rest = testing::read_all(*source);
    REQUIRE(rest.size() == n - std::min(k, n));
    for (std::size_t i = 0; i < rest.size(); ++i) CHECK(form(rest[i], with_ids) == form(all[k + i], with_ids));
    CHECK(source->count_left() == 0u);
  }
  // Counting does not move the source: a count between reads, then the rest.
  auto source = open();
  DocumentArray first;
  source->read(first, 2);
  CHECK(source->count_left() == n - first.size());
  const DocumentArray rest = testing::read_all(*source);
  CHECK(first.size() + rest.size() == n);
}

std::function<std::unique_ptr<DocumentSource>()> opener(const std::filesystem::path& path, InputFormat format) {
  return [=] { return open_file_source(path, format); };
}

}  // namespace

TEST_CASE("a lines input skips and counts its documents as read() finds them", "[io][skip]") {
  const auto dir = testing::scratch_dir("skip lines");
  // A BOM, CRLF, blank and whitespace-only lines (a "\r" alone too), and a last line without a newline.
  testing::write_text(dir / "in.txt",
                      "\xEF\xBB\xBF"
                      "first\r\n\n  \r\n\t\nsecond\r\nthird\n\r\n fourth \nfifth");
  check_skips(opener(dir / "in.txt", InputFormat::Lines), false, 5);
  auto source = open_file_source(dir / "in.txt", InputFormat::Lines);
  source->skip(2);
  DocumentArray docs;
  source->read(docs, 1);
  CHECK(docs[0].text == "third");
  CHECK(docs[0].tags.at("line").as_int64() == 6);
  // A file whose first line is a BOM alone, ending in a blank line.
  testing::write_text(dir / "bom.txt", "\xEF\xBB\xBF\nA\nB\n\n");
  check_skips(opener(dir / "bom.txt", InputFormat::Lines), false, 2);
  testing::write_text(dir / "empty.txt", "");
  check_skips(opener(dir / "empty.txt", InputFormat::Lines), false, 0);
}

TEST_CASE("a jsonl input skips by its lines and gives the last skipped document's id as read() does", "[io][skip]") {
  const auto dir = testing::scratch_dir("skip jsonl");
  const std::string embedding = R"("embedding": {"dtype": "float32", "shape": [3], "data": [0.5, -1, 2e-3]})";
  testing::write_text(dir / "in.jsonl",
                      "\xEF\xBB\xBF"
                      R"({"id": "a", "text": "one", )" +
                          embedding +
                          "}\r\n\n"
                          R"({"id": "b", "text": "two", "tags": {"k": 1}})"
                          "\n  \n" +
                          R"({"id": "c", "text": "three"})"
                          "\r\n"
                          R"({"id": "d", )" +
                          embedding +
                          "}\n"
                          R"({"id": "e"})");
  check_skips(opener(dir / "in.jsonl", InputFormat::Jsonl), true, 5);
  // A line without an id gets a generated one, as read() gives it: 32 hex digits, a fresh one each time.
  testing::write_text(dir / "no-id.jsonl", R"({"id": "x"})"
                                           "\n"
                                           R"({"text": "no id"})"
                                           "\n");
  auto source = open_file_source(dir / "no-id.jsonl", InputFormat::Jsonl);
  const Skipped skipped = source->skip(2);
  CHECK(skipped.documents == 2);
  CHECK(skipped.last_id.size() == 32);
  CHECK(skipped.last_id.find_first_not_of("0123456789abcdef") == std::string::npos);
}

TEST_CASE("skipping a jsonl input parses the last skipped line only, and a bad one is named by file:line",
          "[io][skip]") {
  const auto dir = testing::scratch_dir("skip jsonl bad");
  testing::write_text(dir / "in.jsonl", "{\"id\": \"a\"}\nnot json\n{\"id\": \"c\"}\n{\"id\": \"d\"\n");
  // The bad line 2 is passed over unparsed (resume checked the input's hash: its bytes are what was read).
  auto source = open_file_source(dir / "in.jsonl", InputFormat::Jsonl);
  CHECK(source->skip(3).last_id == "c");
  // The last one skipped is parsed as read() parses it, and refused as read() refuses it.
  CHECK_THROWS_WITH(open_file_source(dir / "in.jsonl", InputFormat::Jsonl)->skip(4),
                    testing::starts_with((dir / "in.jsonl").string() + ":4: invalid JSON"));
  DocumentArray docs;
  CHECK_THROWS_WITH(open_file_source(dir / "in.jsonl", InputFormat::Jsonl)->read(docs, 10),
                    testing::starts_with((dir / "in.jsonl").string() + ":2: invalid JSON"));
}

TEST_CASE("a paragraphs or text input skips and counts by its paragraph spans", "[io][skip]") {
  const auto dir = testing::scratch_dir("skip paragraphs");
  // Paragraphs split by empty and whitespace-only lines, CRLF endings, a BOM.
  testing::write_text(dir / "in.txt",
                      "\xEF\xBB\xBF"
                      "Para one\r\nline two\r\n \r\nPara two\n\t\n\n  Para three  \n"
                      "still three\n   \nPara four");
  check_skips(opener(dir / "in.txt", InputFormat::Paragraphs), false, 4);
  check_skips(opener(dir / "in.txt", InputFormat::Text), false, 1);
}

TEST_CASE("a folder input skips across its files and counts what is left in all of them", "[io][skip]") {
  const auto dir = testing::scratch_dir("skip folder");
  testing::write_text(dir / "texts/a.txt", "one\n\ntwo\n");
  testing::write_text(dir / "texts/b.txt", "");  // no documents: skipped over
  testing::write_text(dir / "texts/c.txt", "three\r\n \r\nfour\nfive");
  testing::write_text(dir / "texts/.hidden", "not read\n");
  check_skips(opener(dir / "texts", InputFormat::Lines), false, 5);
  check_skips(opener(dir / "texts", InputFormat::Paragraphs), false, 4);
  check_skips(opener(dir / "texts", InputFormat::Text), false, 3);
  testing::write_text(dir / "jsonl/1.jsonl", "{\"id\": \"a\"}\n\n{\"id\": \"b\"}\n");
  testing::write_text(dir / "jsonl/2.jsonl", "\n");
  testing::write_text(dir / "jsonl/3.jsonl", "{\"id\": \"c\", \"text\": \"x\"}\r\n{\"id\": \"d\"}");
  check_skips(opener(dir / "jsonl", InputFormat::Jsonl), true, 4);
  // The file tag of a document read after a skip names its own file.
  auto source = open_file_source(dir / "texts", InputFormat::Lines);
  source->skip(2);
  DocumentArray docs;
  source->read(docs, 1);
  CHECK(docs[0].tags.at("file").as_string() == "c");
}

TEST_CASE("an images input skips and counts its files without reading them", "[io][skip]") {
  const auto dir = testing::scratch_dir("skip images");
  testing::write_text(dir / "a.png", "not decoded here");
  testing::write_text(dir / "sub/b.JPG", "bytes");
  testing::write_text(dir / "sub/c.webp", "more bytes");
  testing::write_text(dir / "notes.txt", "not an image");
  check_skips(opener(dir, InputFormat::Images), false, 3);
}

TEST_CASE("an npy or safetensors input skips by rows, reading none, and takes the last skipped id from its sidecar",
          "[io][skip]") {
  const auto dir = testing::scratch_dir("skip arrays");
  DocumentArray docs = testing::numbered_docs(9);
  for (std::size_t i = 0; i < docs.size(); ++i) docs[i].embedding = at::full({4}, static_cast<float>(i));
  for (const std::string name : {"emb.npy", "emb.safetensors"}) {
    auto writer = open_writer(dir / name);
    writer->write(docs);
    writer->close();
    const InputFormat format = parse_input_format(default_input_format(dir / name));
    check_skips(opener(dir / name, format), true, 9);
    // Without its sidecar, the rows alone (generated ids): skipped and counted the same way.
    std::filesystem::rename(dir / "emb.docs.jsonl", dir / "moved.jsonl");
    check_skips(opener(dir / name, format), false, 9);
    auto source = open_file_source(dir / name, format);
    source->skip(6);
    DocumentArray rest;
    source->read(rest, 10);
    REQUIRE(rest.size() == 3);
    CHECK(rest[0].tags.at("row").as_int64() == 6);
    CHECK(rest[0].embedding[0].item<float>() == 6.0f);
  }
}

TEST_CASE("a source without skip() of its own skips by reading, and an array source counts", "[io][skip]") {
  const DocumentArray seven = testing::numbered_docs(7);
  check_skips([&] { return std::make_unique<ArraySource>(seven); }, true, 7);
  // The default: reads and drops (StoppableSource passes skip and count through to it).
  const DocumentArray made = testing::numbered_docs(5);
  struct Plain : DocumentSource {
    explicit Plain(DocumentArray docs) : inner(std::move(docs)) {}
    ArraySource inner;
    std::size_t read(DocumentArray& out, std::size_t max) override { return inner.read(out, max); }
  } plain(made);
  const std::atomic<bool> stop{false};
  StoppableSource stoppable(plain, stop);
  const Skipped skipped = stoppable.skip(3);
  CHECK(skipped.documents == 3);
  CHECK(skipped.last_id == made[2].id);
  CHECK(stoppable.count_left() == std::nullopt);
  DocumentArray docs;
  CHECK(stoppable.read(docs, 10) == 2);
  CHECK(docs[0].text == "3");
}

TEST_CASE("a resumed run's source skips to the output's last document and refuses an input that differs",
          "[io][skip][resume]") {
  const auto dir = testing::scratch_dir("skip resume");
  testing::write_text(dir / "in.txt", "a\n\nb\nc\nd\n");
  const std::string hash = "00000000000000ff";
  const auto positional = [&](std::uint64_t i) { return fmt::format("{}{:016x}", hash, i); };
  {
    auto inner = open_file_source(dir / "in.txt", InputFormat::Lines);
    cli::ResumeSource source(*inner, true, hash, 2, positional(1));
    CHECK(source.count_left() == 2u);
    CHECK(source.skipped() == 2u);
    DocumentArray docs;
    CHECK(source.read(docs, 10) == 2);
    CHECK(docs[0].text == "c");
    CHECK(docs[0].id == positional(2));
  }
  {
    auto inner = open_file_source(dir / "in.txt", InputFormat::Lines);
    cli::ResumeSource source(*inner, true, hash, 2, positional(7));
    CHECK_THROWS_WITH(source.skip(), testing::contains("input document 2 has id '" + positional(1) + "'"));
  }
  {
    auto inner = open_file_source(dir / "in.txt", InputFormat::Lines);
    cli::ResumeSource source(*inner, true, hash, 9, positional(8));
    CHECK_THROWS_WITH(source.skip(), testing::contains("the input ended after 4 documents, but the output to "
                                                       "resume holds 9: not this input's output"));
  }
  testing::write_text(dir / "in.jsonl", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n{\"id\": \"c\"}\n");
  auto inner = open_file_source(dir / "in.jsonl", InputFormat::Jsonl);
  cli::ResumeSource source(*inner, false, hash, 2, "b");
  source.skip();
  DocumentArray docs;
  CHECK(source.read(docs, 10) == 1);
  CHECK(docs[0].id == "c");
}

TEST_CASE("a resumed images run's identity covers the files of the folder's subfolders, which it skips by position",
          "[io][skip][resume]") {
  const auto dir = testing::scratch_dir("skip images identity");
  testing::write_text(dir / "flow.yml", "executors: []\n");
  testing::write_text(dir / "in/a.png", "first");
  testing::write_text(dir / "in/sub/b.png", "second");
  const auto identity = [&](const std::string& format) {
    return cli::identify_run((dir / "in").string(), format, (dir / "flow.yml").string(), {}, "/", 64, "").input_hash;
  };
  const std::string images = identity("images"), lines = identity("lines");
  CHECK(identity("images") == images);
  testing::write_text(dir / "in/sub/b.png", "changed");
  CHECK(identity("images") != images);
  // A text format reads the folder's own files only: a subfolder is not its input.
  CHECK(identity("lines") == lines);
  testing::write_text(dir / "in/a.png", "changed too");
  CHECK(identity("lines") != lines);
}

TEST_CASE("an array run's identity covers its sidecar, whose ids a resumed run keeps", "[io][skip][resume]") {
  const auto dir = testing::scratch_dir("skip array identity");
  testing::write_text(dir / "flow.yml", "executors: []\n");
  DocumentArray docs = testing::numbered_docs(4);
  for (auto& doc : docs) doc.embedding = at::ones({2});
  auto writer = open_writer(dir / "emb.npy");
  writer->write(docs);
  writer->close();
  const auto identity = [&] {
    return cli::identify_run((dir / "emb.npy").string(), "npy", (dir / "flow.yml").string(), {}, "/", 64, "")
        .input_hash;
  };
  const std::string first = identity();
  CHECK(identity() == first);
  testing::write_text(dir / "emb.docs.jsonl",
                      testing::read_text(dir / "emb.docs.jsonl").replace(0, 1, " "));  // same rows, other bytes
  CHECK(identity() != first);
  CHECK(open_file_source(dir / "emb.npy", InputFormat::Npy)->carries_ids());
  std::filesystem::remove(dir / "emb.docs.jsonl");
  CHECK(identity() != first);
  CHECK_FALSE(open_file_source(dir / "emb.npy", InputFormat::Npy)->carries_ids());
}

TEST_CASE("a run's identity is its input's part and its flow's, and the input's hashing stops when told",
          "[io][resume]") {
  const auto dir = testing::scratch_dir("identity parts");
  testing::write_text(dir / "flow.yml", "executors: []\n");
  std::string text;
  for (int i = 0; i < 300000; ++i) text += fmt::format("line {}\n", i);  // several of the hash's 1 MiB blocks
  testing::write_text(dir / "in.txt", text);
  const cli::RunIdentity whole =
      cli::identify_run((dir / "in.txt").string(), "lines", (dir / "flow.yml").string(), {"a.b=1"}, "/", 64, "o.npy");
  cli::RunIdentity parts = cli::identify_input((dir / "in.txt").string(), "lines");
  CHECK(parts.input_bytes == text.size());
  CHECK(parts.flow_hash.empty());
  cli::identify_flow(parts, (dir / "flow.yml").string(), {"a.b=1"}, "/", 64, "o.npy");
  CHECK(cli::run_key_of(parts) == cli::run_key_of(whole));
  CHECK(parts.input_hash == whole.input_hash);
  CHECK(parts.flow_hash == whole.flow_hash);
  CHECK(parts.output_format == "npy");
  // Stopped before it began: not one block read (the run stops it when the flow keeps no progress).
  const std::atomic<bool> stop{true};
  CHECK(cli::identify_input((dir / "in.txt").string(), "lines", &stop).input_bytes == 0);
}

TEST_CASE("each replica of a sink publishes its held point once for the run to count, and the smallest is kept",
          "[resume]") {
  const std::string key = "publications-test";
  const Params params(
      "sink", boost::json::object{{"resume", true}, {"run_key", key}, {"sync_every", 0}, {"sync_seconds", 10.0}});
  CHECK(held_sink_publications(key).empty());
  SinkProgress first(params, "sink"), second(params, "sink"), other(params, "other");
  first.held({8, "id8", 0});
  CHECK(held_sink_publications(key) == std::map<std::string, std::size_t>{{"sink", 1}});
  second.held({5, "id5", 0});
  other.held({9, "id9", 0});
  CHECK(held_sink_publications(key) == std::map<std::string, std::size_t>{{"other", 1}, {"sink", 2}});
  CHECK(held_sink_points(key).at("sink").documents == 5);
  CHECK(held_sink_points(key).at("other").last_id == "id9");
  // A replica that keeps no progress publishes nothing: the run then waits for the flow's start to end.
  SinkProgress disabled(params, "sink");
  disabled.disable();
  disabled.held({});
  CHECK(held_sink_publications(key).at("sink") == 2);
}

TEST_CASE("a positional id is the input hash then the position in 16 hex digits each, read back only in that form",
          "[resume]") {
  const std::string id = positional_id("0123456789abcdef", 0x1f);
  CHECK(id == "0123456789abcdef000000000000001f");
  const auto read = read_positional_id(id);
  REQUIRE(read.has_value());
  CHECK(read->input_hash == "0123456789abcdef");
  CHECK(read->position == 31);
  CHECK(read_positional_id(positional_id("ffffffffffffffff", ~std::uint64_t{0}))->position == ~std::uint64_t{0});
  for (const char* other : {"", "0123456789abcdef00000000000001f", "0123456789abcdef000000000000001F",
                            "0123456789abcdef00000000000000x1", "a document's own id"})
    CHECK_FALSE(read_positional_id(other).has_value());
}
