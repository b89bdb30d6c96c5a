// The shipped flows (flows/*.yml) as a new user meets them: validated and run from the repository root with
// no FLOWLINE_* variables set, and parameter choices and bounds rejected by `flowline validate`.
#include "test_support.hpp"

#include "flowline/device.hpp"

#include <fmt/format.h>

#include <cstring>

extern char** environ;

using namespace flowline;

namespace {

// "env -u FLOWLINE_X -u FLOWLINE_Y": the command prefix that unsets every FLOWLINE_* variable.
std::string without_flowline_variables() {
  std::string out = "env";
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("FLOWLINE_", 0) == 0) out += " -u " + entry.substr(0, entry.find('='));
  }
  return out;
}

// Runs the launcher in `cwd` with no FLOWLINE_* variables, plus `assignments` ("NAME=VALUE ...").
testing::ProcessResult launch_in(const std::filesystem::path& cwd, const std::string& args,
                                 const std::string& assignments = "") {
  return testing::run_process(fmt::format("cd '{}' && {} {} '{}' {}", cwd.string(), without_flowline_variables(),
                                          assignments, FLOWLINE_LAUNCHER, args));
}

bool uses_all_devices(const std::string& yaml) { return yaml.find("devices: all") != std::string::npos; }

}  // namespace

TEST_CASE("every shipped flow validates from the repository root with no FLOWLINE variables set", "[launcher][flows]") {
  const std::filesystem::path root(FLOWLINE_SOURCE_DIR);
  int flows = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root / "flows")) {
    if (entry.path().extension() != ".yml") continue;
    ++flows;
    const std::string name = "flows/" + entry.path().filename().string();
    const auto r = launch_in(root, "validate " + name);
    INFO(name << "\n" << r.out << r.err);
    if (uses_all_devices(testing::read_text(entry.path())) && cuda_device_count() == 0) {
      // Without a GPU such a flow says so, and nothing else is wrong with it.
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, testing::contains(testing::without_gpu("devices: all")));
      CHECK_THAT(r.err, testing::ends_with("\n1 error in the flow configuration\n"));
    } else {
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.out, testing::starts_with(name + ": OK"));
    }
  }
  CHECK(flows >= 4);
}

TEST_CASE("flows/paragraphs.yml runs from the repository root, its output folder overridden by ENV",
          "[launcher][flows]") {
  const auto dir = testing::scratch_dir("shipped paragraphs");
  const auto r = launch_in(FLOWLINE_SOURCE_DIR,
                           fmt::format("run flows/paragraphs.yml --input '{}' --input-format text",
                                       testing::corpus_file("alice-in-wonderland.txt").string()),
                           fmt::format("FLOWLINE_OUT_DIR='{}'", dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_jsonl(dir / "paragraphs.jsonl").size() == 881);
}

TEST_CASE("a flow's relative output path is relative to the flow file, not to the current directory",
          "[launcher][flows]") {
  const auto dir = testing::scratch_dir("shipped paragraphs elsewhere");
  std::filesystem::create_directories(dir / "flows");
  std::filesystem::create_directories(dir / "cwd");
  std::filesystem::copy_file(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "flows" / "paragraphs.yml",
                             dir / "flows" / "paragraphs.yml");
  testing::write_text(dir / "in.txt", "One paragraph.\n\nAnother one.\n");
  const auto r = launch_in(dir / "cwd", "run ../flows/paragraphs.yml --input ../in.txt --input-format text");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_jsonl(dir / "out" / "paragraphs.jsonl").size() == 2);  // ../out from flows/, as shipped
  CHECK_FALSE(std::filesystem::exists(dir / "cwd" / "out"));
}

TEST_CASE("flows/encode.yml finds models/ and runs from the repository root with no variables set",
          "[launcher][flows]") {
  const std::filesystem::path root(FLOWLINE_SOURCE_DIR);
  if (!std::filesystem::exists(root / "models" / "all-MiniLM-L6-v2" / "config.json")) {
    FLOWLINE_SKIP("models/all-MiniLM-L6-v2 is not there (scripts/setup.sh puts it there)");
  }
  const auto dir = testing::scratch_dir("shipped encode");
  testing::write_text(dir / "in.txt", "The first paragraph.\n\nThe second one.\n\nAnd a third.\n");
  const auto r = launch_in(root, fmt::format("run flows/encode.yml --input '{0}/in.txt' --input-format paragraphs "
                                             "--set encoder.device=cpu --set encoder.warmup=false "
                                             "--set writer.path='{0}/e.jsonl'",
                                             dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const DocumentArray docs = read_jsonl(dir / "e.jsonl");
  REQUIRE(docs.size() == 3);
  CHECK(docs[0].embedding.numel() == 384);
}

TEST_CASE("flowline validate rejects a choice or a bound with the allowed values and exit 2", "[launcher][flows]") {
  const auto dir = testing::scratch_dir("validate choices");
  testing::write_text(dir / "flow.yml",
                      "executors:\n"
                      "  - name: split\n"
                      "    uses: TextSplitter\n"
                      "    with:\n"
                      "      unit: word\n"
                      "  - name: torch\n"
                      "    uses: TorchModule\n"
                      "    with:\n"
                      "      path: m.pt\n"
                      "      dtype: fp64\n"
                      "      batch_size: 0\n"
                      "  - name: tsv\n"
                      "    uses: TsvWriter\n"
                      "    with: {path: t.tsv, columns: [text], rows: lines}\n");
  const auto r = launch_in(dir, "validate flow.yml");
  CHECK(r.exit_code == 2);
  CHECK(r.err ==
        "flow.yml:5:7: executor 'split': parameter 'unit': expected one of paragraph, sentence, got 'word'\n"
        "flow.yml:10:7: executor 'torch': parameter 'dtype': expected one of fp32, fp16, bf16, float32, "
        "float16, bfloat16, got 'fp64' (did you mean 'fp32'?)\n"
        "flow.yml:11:7: executor 'torch': parameter 'batch_size': expected an integer ≥ 1, got 0\n"
        "flow.yml:14:42: executor 'tsv': parameter 'rows': expected one of documents, chunks, got 'lines'\n"
        "4 errors in the flow configuration\n");
}

TEST_CASE("flows/rerank.yml on its tiny random cross-encoder says at start that its scores mean nothing",
          "[launcher][flows]") {
  const auto dir = testing::scratch_dir("shipped rerank random");
  testing::write_text(dir / "in.txt", "a query\n");
  const auto r = launch_in(FLOWLINE_SOURCE_DIR, fmt::format("run flows/rerank.yml --input '{}/in.txt' --set "
                                                            "reranker.device=cpu",
                                                            dir.string()));
  const std::string said = r.out + r.err;  // the log goes to standard output
  INFO(said);
  CHECK_THAT(said, testing::contains("executor 'reranker': the model "));
  CHECK_THAT(said, testing::contains("holds random weights (a test checkpoint: it has a RANDOM_WEIGHTS file), so "
                                     "its scores mean nothing; give it a real checkpoint with --set "
                                     "reranker.model=DIR"));
}
