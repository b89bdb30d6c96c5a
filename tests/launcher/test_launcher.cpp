// The launcher is run as a real process: exit codes, messages and output files are what users see.
#include "test_support.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <fstream>
#include <map>

using namespace flowline;

namespace {
testing::ProcessResult launch(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}
const std::string kAlice = (std::filesystem::path(FLOWLINE_CORPUS_DIR) / "alice-in-wonderland.txt").string();
// FailIf, Delay and SetTags are not part of the product: flows load them from the test plugin.
const std::string kTestingPlugin =
    fmt::format("plugins: ['{}/libflowline_testing_executors.so']\n", FLOWLINE_TEST_PLUGIN_DIR);
}  // namespace

TEST_CASE("flowline run splits Alice into 881 paragraphs and writes them as JSONL", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher run alice");
  const auto result = testing::run_process(
      fmt::format("FLOWLINE_OUT_DIR='{}' '{}' run '{}/flows/paragraphs.yml' --input '{}' --input-format text -o '{}'",
                  dir.string(), FLOWLINE_LAUNCHER, FLOWLINE_SOURCE_DIR, kAlice, (dir / "final.jsonl").string()));
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.err, testing::starts_with("[/] 881 docs in 1 steps done in"));
  const DocumentArray written = read_jsonl(dir / "paragraphs.jsonl");
  const DocumentArray final_docs = read_jsonl(dir / "final.jsonl");
  REQUIRE(written.size() == 881);
  REQUIRE(final_docs.size() == 881);
  CHECK(written[880].id == final_docs[880].id);
  CHECK(written[0].tags.at("words").as_int64() == 12);
  // Offsets point into the book: the paragraph's text is found at its character offset.
  const std::string book = read_file(kAlice);
  CHECK(book.find(written[100].text) != std::string::npos);
}

TEST_CASE("flowline run reads lines and JSONL and respects the request size", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher formats");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  testing::write_text(dir / "in.txt", "one two\nthree\n");
  auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --request-size 1 -o '{0}/out.jsonl'", dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, testing::starts_with("[/] 2 docs in 2 steps"));
  const DocumentArray out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 2);
  CHECK(out[0].tags.at("words").as_int64() == 2);
  r = launch(
      fmt::format("run '{0}/flow.yml' -i '{0}/out.jsonl' --input-format jsonl -o '{0}/again.jsonl'", dir.string()));
  REQUIRE(r.exit_code == 0);
  CHECK(read_jsonl(dir / "again.jsonl")[1].id == out[1].id);
}

TEST_CASE("flowline run reads a .jsonl input as JSONL without --input-format", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher jsonl by extension");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  testing::write_text(dir / "in.jsonl",
                      "{\"id\": \"a\", \"text\": \"one two\"}\n{\"id\": \"b\", \"text\": \"three\"}\n");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.jsonl' -o '{0}/out.jsonl'", dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const DocumentArray out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 2);
  CHECK(out[0].id == "a");
  CHECK(out[0].text == "one two");
  CHECK(out[1].tags.at("words").as_int64() == 1);
}

TEST_CASE("flowline run reads an .npy or .safetensors output back, with its sidecar, as the documents it holds",
          "[launcher]") {
  const auto dir = testing::scratch_dir("launcher array input");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  std::string lines;
  for (int i = 0; i < 5; ++i) {
    lines += fmt::format(R"({{"id": "d{}", "text": "text {}", "tags": {{"k": {}}}, "embedding": {{"dtype": )"
                         R"("float32", "shape": [3], "data": [{}, -0.1, 3e-{}]}}}})"
                         "\n",
                         i, i, i, i + 0.5, i + 1);
  }
  testing::write_text(dir / "in.jsonl", lines);
  const DocumentArray original = read_jsonl(dir / "in.jsonl");
  for (const std::string extension : {".npy", ".safetensors"}) {
    INFO(extension);
    const std::string array = (dir / ("emb" + extension)).string();
    auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.jsonl' -o '{1}' --overwrite", dir.string(), array));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    // Read by its extension, without --input-format: the rows with the sidecar's ids, texts and tags.
    r = launch(fmt::format("run '{0}/flow.yml' -i '{1}' -o '{0}/back.jsonl' --overwrite", dir.string(), array));
    REQUIRE(r.exit_code == 0);
    const DocumentArray back = read_jsonl(dir / "back.jsonl");
    REQUIRE(back.size() == original.size());
    for (std::size_t i = 0; i < back.size(); ++i) {
      CHECK(back[i].id == original[i].id);
      CHECK(back[i].text == original[i].text);
      CHECK(back[i].tags == original[i].tags);
      CHECK(back[i].uri == array);
      CHECK(at::equal(back[i].embedding, original[i].embedding));
    }
  }
  // Without the sidecar: the rows alone, their ids made of the input's hash and position (the same on a rerun).
  std::filesystem::rename(dir / "emb.docs.jsonl", dir / "moved.jsonl");
  for (const std::string name : {"rows.jsonl", "again.jsonl"}) {
    const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/emb.safetensors' -o '{0}/{1}'", dir.string(), name));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
  }
  const DocumentArray rows = read_jsonl(dir / "rows.jsonl"), again = read_jsonl(dir / "again.jsonl");
  REQUIRE(rows.size() == 5);
  CHECK(rows[3].tags.at("row").as_int64() == 3);
  CHECK(rows[3].text.empty());
  CHECK(at::equal(rows[3].embedding, original[3].embedding));
  CHECK(rows[3].id.size() == 32);
  CHECK(rows[3].id == again[3].id);
  // An array that is not one: exit 2, naming it and what was expected.
  testing::write_text(dir / "bad.npy", "not an array");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/bad.npy'", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK(r.err ==
        fmt::format("error: input: {}/bad.npy: not an .npy file: it does not start with \\x93NUMPY\n", dir.string()));
}

TEST_CASE("flowline run over a folder tags each paragraph with the file it came from", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher file tag");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{1}' --input-format paragraphs -o '{0}/out.jsonl'",
                                    dir.string(), FLOWLINE_CORPUS_DIR));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const DocumentArray out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 6001);
  std::map<std::string, int> per_file;
  for (const auto& d : out) ++per_file[std::string(d.tags.at("file").as_string())];
  CHECK(per_file.size() == 5);
  CHECK(per_file.at("alice-in-wonderland") == 881);
  CHECK(out[0].tags.at("file").as_string() == "alice-in-wonderland");
}

TEST_CASE("flowline validate takes --set as run does", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher validate set");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: split, uses: TextSplitter}\n");
  auto r = launch(fmt::format("validate '{}/flow.yml' --set split.min_chars=many", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("--set split.min_chars=many: executor 'split': parameter 'min_chars'"));
  r = launch(fmt::format("validate '{}/flow.yml' --set split.min_chars=3", dir.string()));
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("a value --set replaces is never checked as the flow file wrote it", "[launcher]") {
  // A flow naming a model folder missing here (flows/*.yml's ../models when FLOWLINE_MODEL_DIR points elsewhere)
  // ran only once --set's folder was checked: the file's value was checked first and refused the run.
  const auto dir = testing::scratch_dir("launcher set replaces");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: split, uses: TextSplitter, with: {min_chars: many}}\n");
  testing::write_text(dir / "in.txt", "a line\nanother line\n");
  auto r = launch(fmt::format("validate '{}/flow.yml'", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("parameter 'min_chars'"));
  r = launch(fmt::format("validate '{}/flow.yml' --set split.min_chars=3", dir.string()));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --set split.min_chars=3", dir.string()));
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("flowline exits with 2 and file:line:column for a bad flow file", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher bad flow");
  testing::write_text(dir / "flow.yml", "executors:\n  - name: s\n    uses: TextSpliter\n");
  const auto r = launch(fmt::format("validate '{}/flow.yml'", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::starts_with(
                        fmt::format("{}/flow.yml:3:11: executor 's': unknown executor type 'TextSpliter' (did you mean "
                                    "'TextSplitter'?)",
                                    dir.string())));
  CHECK_THAT(r.err, testing::ends_with("1 error in the flow configuration\n"));
  const auto run = launch(fmt::format("run '{0}/flow.yml' -i '{0}/flow.yml'", dir.string()));
  CHECK(run.exit_code == 2);
}

TEST_CASE("flowline exits with 2 for bad usage and a missing input file", "[launcher]") {
  CHECK(launch("").exit_code == 2);
  CHECK(launch("run").exit_code == 2);
  CHECK(launch("frobnicate").exit_code == 2);
  const auto dir = testing::scratch_dir("launcher missing input");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/missing.txt'", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK(r.err ==
        fmt::format("error: input: {}/missing.txt: cannot open file: No such file or directory\n", dir.string()));
  CHECK(launch("run '" + (dir / "flow.yml").string() + "' -i x --input-format csv").exit_code == 2);
}

TEST_CASE("flowline exits with 1 when requests fail and reports each failure", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher failures");
  testing::write_text(dir / "flow.yml",
                      kTestingPlugin + "executors:\n  - {name: check, uses: FailIf, with: {contains: BAD}}\n");
  testing::write_text(dir / "in.txt", "fine\nBAD line\nfine too\n");
  const auto r =
      launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --request-size 1 -o '{0}/out.jsonl'", dir.string()));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, testing::contains("request 1 (1 documents) failed in executor 'check': document "));
  // The good documents are written, under a name that says the run did not complete.
  CHECK_FALSE(std::filesystem::exists(dir / "out.jsonl"));
  CHECK(read_jsonl(dir / "out.jsonl.partial").size() == 2);
}

TEST_CASE("flowline exits with 1 for a bad JSONL line in the middle of the input", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher bad jsonl");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  testing::write_text(dir / "in.jsonl", "{\"text\": \"a\"}\n{\"text\": 3}\n");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.jsonl' --input-format jsonl", dir.string()));
  CHECK(r.exit_code == 1);
  CHECK(r.err == fmt::format("error: {}/in.jsonl:2: field 'text': expected a string\n", dir.string()));
}

TEST_CASE("flowline executors lists built-in and plugin executors with their parameters", "[launcher]") {
  const auto r = testing::run_process(
      fmt::format("FLOWLINE_PLUGIN_PATH='{}' '{}' executors", FLOWLINE_TEST_PLUGIN_DIR, FLOWLINE_LAUNCHER));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("TextSplitter       Split text into paragraphs or sentences"));
  CHECK_THAT(r.out, testing::contains("Upper              Upper-case ASCII letters (test plugin)"));
  CHECK_THAT(r.out, testing::contains("    path             path             (required) output file"));
}

TEST_CASE("the production flowline executors lists the first-party executors and no test helper", "[launcher]") {
  const auto r = launch("executors");
  REQUIRE(r.exit_code == 0);
  for (const char* listed : {"SentenceEncoder", "TorchModule", "NoOp", "TextStats"}) {
    CHECK_THAT(r.out, testing::contains(std::string("\n") + listed + " "));
  }
  for (const char* helper : {"Delay", "FailIf", "SetTags"}) {
    CHECK_THAT(r.out, !testing::contains(std::string("\n") + helper + " "));
  }
  CHECK_THAT(r.out, !testing::contains("delay_ms"));
}

TEST_CASE("flowline validate knows SentenceEncoder from its plugin, and the launcher links no executor library",
          "[launcher]") {
  const auto needed = testing::run_process(fmt::format("readelf -d '{}'", FLOWLINE_LAUNCHER));
  REQUIRE(needed.exit_code == 0);
  CHECK_THAT(needed.out, testing::contains("libflowline.so"));
  CHECK_THAT(needed.out, !testing::contains("libflowline_sentence_encoder"));
  CHECK_THAT(needed.out, !testing::contains("libflowline_torch_module"));
  const auto r = testing::run_process(
      fmt::format("cd '{0}' && FLOWLINE_MODEL_DIR='{0}/models' FLOWLINE_OUT_DIR=/tmp '{1}' validate flows/encode.yml",
                  FLOWLINE_SOURCE_DIR, FLOWLINE_LAUNCHER));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("encoder (SentenceEncoder)"));
  // The encoder's spec comes from the plugin: a parameter it does not have is a validation error.
  const auto dir = testing::scratch_dir("launcher validate encoder");
  testing::write_text(dir / "flow.yml",
                      "executors:\n  - name: enc\n    uses: SentenceEncoder\n"
                      "    with: {model: m, delay_ms: 5}\n");
  const auto bad = launch(fmt::format("validate '{}/flow.yml'", dir.string()));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, testing::contains("flow.yml:4:"));
  CHECK_THAT(bad.err, testing::contains("delay_ms"));
}

TEST_CASE("every launcher command has --help", "[launcher]") {
  for (const char* command : {"", "run ", "validate ", "executors ", "schema "}) {
    const auto r = launch(std::string(command) + "--help");
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, testing::contains("Usage:"));
  }
}

TEST_CASE("the YAML reference in docs matches what the validator accepts", "[launcher][docs]") {
  const auto r = launch("schema");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == read_file(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "docs/yaml-reference.md"));
}

TEST_CASE("flowline run --stats reports every replica's work and says GPU figures are not available",
          "[launcher][stats]") {
  const auto dir = testing::scratch_dir("launcher stats");
  testing::write_text(dir / "flow.yml", kTestingPlugin +
                                            "executors:\n  - {name: stats, uses: TextStats, replicas: 2}\n  - {name: "
                                            "check, uses: FailIf, with: {contains: BAD}}\n");
  std::string input;
  for (int i = 0; i < 100; ++i) input += i == 50 ? "BAD line\n" : "a line of words\n";
  testing::write_text(dir / "in.txt", input);
  const auto r = launch(fmt::format(
      "run '{0}/flow.yml' -i '{0}/in.txt' --request-size 10 --stats --stats-json '{0}/stats.json'", dir.string()));
  CHECK(r.exit_code == 1);  // one request failed
  CHECK_THAT(r.err, testing::contains("executor       rep device        docs  batches errors"));
  CHECK_THAT(r.err, testing::contains("GPU figures not available (no executor runs on a GPU)"));
  const auto json = boost::json::parse(read_file(dir / "stats.json")).as_object();
  const auto& replicas = json.at("replicas").as_array();
  REQUIRE(replicas.size() == 3);
  std::int64_t stats_docs = 0;
  for (int i = 0; i < 2; ++i) stats_docs += replicas[i].at("documents").as_int64();
  CHECK(stats_docs == 100);
  CHECK(replicas[2].at("errors").as_int64() == 1);
  CHECK(replicas[2].at("batches").as_int64() == 10);
  CHECK(replicas[2].at("gpu").as_string() == "not available");
  CHECK(json.at("host_peak_rss_mb").as_double() > 1.0);
  CHECK(json.at("failed_requests").as_int64() == 1);
}

TEST_CASE("flowline run --set overrides an executor parameter and names itself in errors", "[launcher]") {
  const auto dir = testing::scratch_dir("launcher set");
  testing::write_text(dir / "flow.yml", kTestingPlugin +
                                            "executors:\n  - {name: check, uses: FailIf, with: {contains: BAD}}\n"
                                            "  - {name: split, uses: TextSplitter}\n");
  testing::write_text(dir / "in.txt", "a line\nanother line\n");
  auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --request-size 1", dir.string()));
  CHECK(r.exit_code == 0);
  r = launch(
      fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --request-size 1 --set check.contains=line", dir.string()));
  CHECK(r.exit_code == 1);  // every request now fails
  CHECK_THAT(r.err, testing::contains("request 1 (1 documents) failed in executor 'check'"));
  r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --set nope.contains=x", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err,
             testing::starts_with("--set nope.contains=x: the flow has no executor 'nope' (executors: check, split)"));
  r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --set check.contains", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::starts_with("--set check.contains: expected EXECUTOR.PARAMETER=VALUE"));
  r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --set split.min_chars=many", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(
      r.err,
      testing::starts_with(
          "--set split.min_chars=many: executor 'split': parameter 'min_chars': expected int, got string \"many\""));
}

TEST_CASE("flowline profile on the CPU reports time and RAM per batch size and recommends one", "[launcher][profile]") {
  const auto dir = testing::scratch_dir("launcher profile");
  testing::write_text(dir / "flow.yml", fmt::format("executors:\n  - name: encoder\n    uses: SentenceEncoder\n"
                                                    "    with: {{model: '{}/tests/data/tiny-bert'}}\n",
                                                    FLOWLINE_SOURCE_DIR));
  const auto r =
      launch(fmt::format("profile '{0}/flow.yml' -i '{1}' --input-format paragraphs --batch-sizes 8,64,128 "
                         "--json '{0}/profile.json' --plot '{0}/profile.png'",
                         dir.string(), kAlice));
  INFO(r.err);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("GPU figures not available: the executor runs on the CPU"));
#ifndef FLOWLINE_SANITIZED
  // Under ASan the freed memory waits in its quarantine, so peak RSS does not follow the batch size and
  // no recommendation can be fitted: the recommendation is checked in the normal build only.
  CHECK_THAT(r.out, testing::contains("largest batch size that fits 90% of the"));
#endif
  const auto json = boost::json::parse(read_file(dir / "profile.json")).as_object();
  const auto& runs = json.at("runs").as_array();
  REQUIRE(runs.size() == 3);
  for (const auto& run : runs) {
    CHECK(run.at("ok").as_bool());
    CHECK(run.at("documents").to_number<std::uint64_t>() == 881);
    CHECK(run.at("total_seconds").as_double() > 0);
    CHECK(run.at("host_peak_rss_mib").as_double() > 10);
    CHECK(run.at("gpu").as_string() == "not available");
  }
  CHECK(runs[0].at("max_forward_sequences").to_number<std::uint64_t>() == 8);
  CHECK(runs[2].at("max_forward_sequences").to_number<std::uint64_t>() == 128);
  CHECK(json.at("fit_per_document").at("mib_per_document").is_double());
#ifndef FLOWLINE_SANITIZED
  CHECK(json.at("recommendation").as_object().contains("budget_mib"));
#endif
  const std::string png = read_file(dir / "profile.png");
  REQUIRE(png.size() > 1000);
  CHECK(png.substr(1, 3) == "PNG");
}

TEST_CASE("flowline profile rejects bad batch sizes and flows without a batch size to vary", "[launcher][profile]") {
  const auto dir = testing::scratch_dir("launcher profile errors");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  testing::write_text(dir / "in.txt", "a\n");
  auto r = launch(fmt::format("profile '{0}/flow.yml' -i '{0}/in.txt' --batch-sizes 8,x", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("--batch-sizes"));
  r = launch(fmt::format("profile '{0}/flow.yml' -i '{0}/in.txt' --batch-sizes 8,0", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("--batch-sizes"));
  r = launch(fmt::format("profile '{0}/flow.yml' -i '{0}/in.txt' --batch-sizes 8", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("no executor of this flow has a batch_size parameter to profile"));
}

TEST_CASE("the launcher allocates with jemalloc and its settings where the build found jemalloc", "[launcher]") {
  if (!FLOWLINE_LAUNCHER_JEMALLOC) FLOWLINE_SKIP("this build's launcher links glibc's malloc (no libjemalloc-dev)");
  // confirm_conf makes jemalloc print where each setting came from as it starts.
  const auto r = testing::run_process(fmt::format("MALLOC_CONF=confirm_conf:true '{}' --version", FLOWLINE_LAUNCHER));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, testing::contains("global variable malloc_conf): \"oversize_threshold:0,background_thread:true\""));
  CHECK_THAT(r.err, testing::contains("Set conf value: background_thread:true"));
}

TEST_CASE("a model given as a Hugging Face name is found in the local cache; one that is not says where it looked",
          "[launcher][models]") {
  const auto dir = testing::scratch_dir("launcher hub model name");
  // The cache as huggingface_hub leaves it: a snapshot per revision (files as links), refs/main naming one.
  const auto repo = dir / "hf" / "hub" / "models--tiny-org--tiny-bert";
  const auto snapshot = repo / "snapshots" / "abc123";
  std::filesystem::create_directories(snapshot);
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests" /
                                                               "data" / "tiny-bert")) {
    std::filesystem::create_symlink(entry.path(), snapshot / entry.path().filename());
  }
  std::filesystem::create_directories(repo / "snapshots" / "zzz-newer-but-empty");  // refs/main decides
  testing::write_text(repo / "refs" / "main", "abc123");
  const std::string env = fmt::format("HF_HUB_CACHE= HF_HOME='{}/hf'", dir.string());
  testing::write_text(
      dir / "flow.yml",
      "executors:\n  - name: encoder\n    uses: SentenceEncoder\n    with: {model: tiny-org/tiny-bert}\n");
  testing::write_text(dir / "in.txt", "The rabbit ran.\nThe queen shouted.\n");
  auto r = testing::run_process(fmt::format("{} '{}' validate '{}/flow.yml'", env, FLOWLINE_LAUNCHER, dir.string()));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  r = testing::run_process(fmt::format("{} '{}' run '{}/flow.yml' -i '{}/in.txt' -o '{}/out.jsonl' --progress never",
                                       env, FLOWLINE_LAUNCHER, dir.string(), dir.string(), dir.string()));
  REQUIRE(r.exit_code == 0);
  const DocumentArray out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 2);
  CHECK(out[1].embedding.numel() == 32);

  testing::write_text(
      dir / "missing.yml",
      "executors:\n  - name: encoder\n    uses: SentenceEncoder\n    with: {model: tiny-org/not-there}\n");
  r = testing::run_process(fmt::format("{} '{}' validate '{}/missing.yml'", env, FLOWLINE_LAUNCHER, dir.string()));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains(fmt::format("{}/missing.yml:4:", dir.string())));
  CHECK_THAT(r.err, testing::contains(fmt::format(
                        "'tiny-org/not-there' is neither a folder (no '{}/tiny-org/not-there')", dir.string())));
  CHECK_THAT(r.err, testing::contains(
                        fmt::format("no snapshot in '{}/hf/hub/models--tiny-org--not-there/snapshots'", dir.string())));
  CHECK_THAT(r.err, testing::contains("hf download tiny-org/not-there"));
}

TEST_CASE(
    "flowline run --resume reads the input again from its start when a sink says what it holds after the "
    "input was begun",
    "[launcher][resume]") {
  const auto dir = testing::scratch_dir("launcher late sink");
  std::string input;
  for (int i = 0; i < 100; ++i) input += fmt::format("{{\"id\": \"d{}\", \"text\": \"text {}\"}}\n", i, i);
  testing::write_text(dir / "in.jsonl", input);
  // The sink says 60 at once (the run begins the input there, beside the start), then 40 while still starting.
  testing::write_text(dir / "flow.yml",
                      kTestingPlugin + fmt::format("executors:\n  - name: sink\n    uses: LateSink\n    with: "
                                                   "{{first: {{documents: 60, last_id: d59}}, then: {{documents: 40, "
                                                   "last_id: d39}}, late_ms: 300, log: '{}'}}\n",
                                                   (dir / "log.jsonl").string()));
  const auto r = launch(
      fmt::format("run '{0}/flow.yml' -i '{0}/in.jsonl' --request-size 10 --resume --progress never", dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err,  // the log's warning (standard output, which is no --output here)
             testing::contains("a sink said what it holds after the input was begun: reading the input again"));
  CHECK_THAT(r.err, testing::contains("resumed: 40 documents skipped"));
  // What the sink was handed: documents 40 to 99 in order, from the resume point 40.
  std::vector<std::string> ids;
  std::ifstream log(dir / "log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const auto request = boost::json::parse(line).as_object();
    CHECK(request.at("resume_from").to_number<std::uint64_t>() == 40);
    for (const auto& id : request.at("ids").as_array()) ids.emplace_back(id.as_string());
  }
  REQUIRE(ids.size() == 60);
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == fmt::format("d{}", 40 + i));
}
