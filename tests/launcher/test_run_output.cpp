// `flowline run --output` as users see it: the writer picked by the extension, clear errors, and Ctrl-C /
// SIGTERM mid-run (exit 130 / 143, a summary, JSONL with whole lines only, no binary file under its name).
#include "test_support.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <regex>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace flowline;

namespace {

testing::ProcessResult launch(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}

// A launcher process running in the background, its stdout and stderr going to files in `dir`.
struct Child {
  pid_t pid = -1;
  std::filesystem::path err;
};

Child start(const std::filesystem::path& dir, const std::string& args) {
  Child child;
  child.err = dir / "stderr.txt";
  const std::string command = fmt::format("exec '{}' {} >'{}/stdout.txt' 2>'{}' </dev/null", FLOWLINE_LAUNCHER, args,
                                          dir.string(), child.err.string());
  child.pid = ::fork();
  if (child.pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(child.pid > 0);
  return child;
}

// Waits up to `seconds` for the child; kills it (and fails) when it takes longer. Returns its exit code.
int wait_for(const Child& child, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (::waitpid(child.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      FAIL("the launcher did not exit within " << seconds << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A flow of the tiny test encoder on the CPU, and `lines` short lines of input.
void write_encoder_flow(const std::filesystem::path& dir, int lines) {
  // Few requests in flight, so the work left after a signal finishes within the launcher's 10 s grace even on
  // a busy machine.
  testing::write_text(dir / "flow.yml", fmt::format("with: {{max_in_flight: 4, request_size: 50}}\n"
                                                    "executors:\n  - name: encoder\n    uses: SentenceEncoder\n"
                                                    "    with: {{model: '{}/tests/data/tiny-bert'}}\n",
                                                    FLOWLINE_SOURCE_DIR));
  std::string input;
  for (int i = 0; i < lines; ++i) input += fmt::format("line {} of a long input that is interrupted\n", i);
  testing::write_text(dir / "in.txt", input);
}

// Starts the encoder flow writing `output`, waits until its progress line shows documents done, then
// sends `signal`.
std::pair<int, std::string> interrupt_run(const std::filesystem::path& dir, const std::string& output, int signal) {
  write_encoder_flow(dir, 300000);
  const Child child = start(
      dir, fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --progress always -o '{0}/{1}'", dir.string(), output));
  const std::filesystem::path watch = child.err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (std::filesystem::file_size(watch, ec) == 0 || ec) {
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(child.pid, signal);
  const int code = wait_for(child, 30);
  return {code, testing::read_text(child.err)};
}

}  // namespace

TEST_CASE("flowline run --output picks the writer from the extension", "[launcher][output]") {
  const auto dir = testing::scratch_dir("run output formats");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  std::string input;
  for (int i = 0; i < 500; ++i) {
    input += fmt::format(
                 R"({{"id":"d{}","text":"t {}","embedding":{{"dtype":"float32","shape":[3],"data":[{},0.1,-2.5]}}}})",
                 i, i, i) +
             "\n";
  }
  testing::write_text(dir / "in.jsonl", input);
  for (const std::string name : {"out.jsonl", "out.npy", "out.safetensors"}) {
    const auto r =
        launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.jsonl' --input-format jsonl --request-size 7 "
                           "-o '{0}/{1}'",
                           dir.string(), name));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(std::filesystem::exists(dir / name));
  }
  const DocumentArray jsonl = read_jsonl(dir / "out.jsonl");
  REQUIRE(jsonl.size() == 500);
  CHECK(jsonl[499].id == "d499");
  CHECK(jsonl[499].embedding[0].item<float>() == 499.0f);
  const DocumentArray sidecar = read_jsonl(dir / "out.docs.jsonl");
  REQUIRE(sidecar.size() == 500);
  CHECK(sidecar[7].text == "t 7");
  // The first bytes of each binary format, and their size: header + 500 x 3 float32.
  const std::string npy = testing::read_text(dir / "out.npy");
  CHECK(npy.substr(0, 6) == "\x93NUMPY");
  CHECK_THAT(npy.substr(0, 128), testing::contains("'descr': '<f4', 'fortran_order': False, 'shape': (500, 3), }"));
  CHECK(npy.size() == 128 + 500 * 3 * 4);
  CHECK(std::filesystem::file_size(dir / "out.safetensors") == 256 + 500 * 3 * 4);
  const std::string python = FLOWLINE_TEST_PYTHON;
  const auto r = testing::run_process(
      fmt::format("'{0}' -c \"import numpy as np, safetensors.numpy as s; a = np.load('{1}/out.npy'); "
                  "b = s.load_file('{1}/out.safetensors')['embedding']; assert (a == b).all() and a.shape == (500, 3); "
                  "assert a[499, 0] == 499 and a[3, 1] == np.float32(0.1), a[3]\"",
                  python, dir.string()));
  if (r.err.find("No module named") != std::string::npos) {
    WARN("skipped the python read-back: " << r.err);
  } else {
    INFO(r.err);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("flowline run --output with an unknown extension or documents without embeddings fails clearly",
          "[launcher][output]") {
  const auto dir = testing::scratch_dir("run output errors");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: n, uses: NoOp}\n");
  testing::write_text(dir / "in.txt", "one\ntwo\n");
  auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' -o '{0}/out.parquet'", dir.string()));
  CHECK(r.exit_code == 2);
  CHECK(r.err == fmt::format("error: --output: output '{}/out.parquet': unknown extension '.parquet'; known: .jsonl, "
                             ".npy, .safetensors\n",
                             dir.string()));
  r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' --progress never -o '{0}/out.npy'", dir.string()));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, testing::contains("has no embedding; every document written to a .npy file needs one"));
  CHECK_FALSE(std::filesystem::exists(dir / "out.npy"));
  CHECK_FALSE(std::filesystem::exists(dir / "out.npy.partial"));
}

TEST_CASE("Ctrl-C during flowline run exits 130 and leaves JSONL with whole lines only", "[launcher][interrupt]") {
  const auto dir = testing::scratch_dir("run interrupt jsonl");
  const auto [code, err] = interrupt_run(dir, "out.jsonl", SIGINT);
  INFO(err);
  CHECK(code == 130);
  std::smatch m;
  REQUIRE(std::regex_search(err, m,
                            std::regex("interrupted by SIGINT: stopped reading input after (\\d+) documents; "
                                       "wrote (\\d+) documents \\(.* MB\\) to '.*out.jsonl', whole lines only")));
  const std::string text = testing::read_text(dir / "out.jsonl");
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  const DocumentArray docs = read_jsonl(dir / "out.jsonl");  // every line parses
  CHECK(docs.size() == std::stoul(m[2]));
  CHECK(docs.size() == std::stoul(m[1]));
  CHECK(docs.size() < 300000);
  CHECK(docs[0].text == "line 0 of a long input that is interrupted");
  CHECK(docs[0].embedding.defined());
}

TEST_CASE("SIGTERM during flowline run exits 143 and leaves no binary file under its name", "[launcher][interrupt]") {
  for (const std::string name : {"out.npy", "out.safetensors"}) {
    DYNAMIC_SECTION(name) {
      const auto dir = testing::scratch_dir("run interrupt binary");
      const auto [code, err] = interrupt_run(dir, name, SIGTERM);
      INFO(err);
      CHECK(code == 143);
      CHECK_THAT(err, testing::contains(fmt::format("interrupted by SIGTERM: stopped reading input after")));
      CHECK_THAT(err, testing::contains(fmt::format("'{}/{}' was not written (", dir.string(), name)));
      CHECK_FALSE(std::filesystem::exists(dir / name));
      CHECK_FALSE(std::filesystem::exists(dir / (name + ".partial")));
      CHECK_FALSE(std::filesystem::exists(dir / "out.docs.jsonl"));
    }
  }
}
