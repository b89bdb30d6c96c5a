// Fault injection (issue 16): executors that fail at random or run out of memory, a writer whose disk is
// full, inputs that vanish, shrink or stop mid-line, a plugin whose constructor throws. Each fault must
// fail only what it touches, with a message that says where, and never crash, hang or lose a document
// silently. (A handler that hangs past the gateway's request timeout is tested in tests/gateway:
// "the gateway enforces its limits with a status that names each", 504 section.)
#include "test_support.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <thread>

using namespace flowline;

namespace {

// Fails a batch when one of its documents hashes into `rate` percent (a fixed function of the text, so
// which requests fail is known in advance and the test can check each).
class RandomFail : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"RandomFail",
                        "fails batches holding a document whose text hashes below `percent`",
                        {ParamSpec::optional("percent", ParamType::Int, 10, "share of documents that fail")},
                        {}};
  }
  explicit RandomFail(const ExecutorContext& c) : Executor(c), percent_(params().get<int>("percent")) {
    bind_default([this](DocumentArray& docs, const RequestInfo&) {
      for (auto& doc : docs) {
        if (fails(doc.text, percent_)) throw Error(fmt::format("injected failure on '{}'", doc.text));
        doc.tags["seen"] = true;
      }
    });
  }
  static bool fails(const std::string& text, int percent) {
    return std::hash<std::string>{}(text + "#salt") % 100 < static_cast<std::size_t>(percent);
  }

 private:
  int percent_;
};

// Asks the allocator for a terabyte when a document says "ALLOC": a real std::bad_alloc, no memory used.
class Allocator : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"Allocator", "allocates until out of memory", {}, {}}; }
  explicit Allocator(const ExecutorContext& c) : Executor(c) {
    bind_default([](DocumentArray& docs, const RequestInfo&) {
      for (auto& doc : docs) {
        if (doc.text != "ALLOC") continue;
#if defined(__SANITIZE_ADDRESS__)
        // ASan's operator new reports an allocation it cannot make and ends the program instead of throwing
        // (allocator_may_return_null covers malloc only): throw what operator new throws.
        throw std::bad_alloc();
#else
        // 1 PiB: beyond the 128 TiB a process can address on x86-64, so refused whatever the machine's overcommit
        // setting (1 TiB was granted where overcommit is always on, then zero-filled into the OOM killer).
        std::vector<char> huge(std::size_t{1} << 50);
        doc.tags["size"] = static_cast<std::uint64_t>(huge.size());
#endif
      }
    });
  }
};

Registry& fault_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    testing::register_testing_executors(*r);
    r->add<RandomFail>();
    r->add<Allocator>();
    return r;
  }();
  return *registry;
}

testing::ProcessResult launch(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}

}  // namespace

TEST_CASE("an executor failing at random fails exactly its requests, each once, and the flow keeps serving",
          "[faults]") {
  Flow flow(FlowOptions{.request_size = 7, .max_in_flight = 32}, fault_registry());
  flow.add({.name = "flaky",
            .uses = "RandomFail",
            .with = {{"percent", 5}},
            .replicas = 3,
            .batching = {.max_batch_size = 40, .max_delay = std::chrono::milliseconds(2)}});
  flow.add({.name = "after", .uses = "NoOp"});
  constexpr int kThreads = 4, kDocs = 5000;  // 20,000 documents in requests of 7
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      DocumentArray docs;
      for (int i = 0; i < kDocs; ++i) docs.push_back(Document(fmt::format("t{}-{}", t, i)));
      ArraySource source(std::move(docs));
      std::uint64_t next = 0;
      const PostSummary summary = flow.post("/", source, [&](Response&& r) {
        if (r.index != next++) ++wrong;  // every request answered once, in order
        bool should_fail = false;
        for (std::size_t k = 0; k < r.docs.size(); ++k) {
          const std::string expected = fmt::format("t{}-{}", t, r.index * 7 + k);
          if (r.docs[k].text != expected) ++wrong;
          should_fail |= RandomFail::fails(expected, 5);
        }
        if (r.ok() == should_fail) ++wrong;  // failed exactly when one of its documents fails
        if (!r.ok() && (r.error_executor != "flaky" || r.error.find("injected failure") == std::string::npos)) ++wrong;
        if (r.ok()) {
          for (const auto& d : r.docs)
            if (!d.tags.contains("seen")) ++wrong;
        }
      });
      if (summary.documents != static_cast<std::uint64_t>(kDocs) || next != (kDocs + 6) / 7) ++wrong;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  // Still serving: a request without failing documents comes back whole.
  DocumentArray ok;
  for (int i = 0; i < 50; ++i) {
    const std::string text = fmt::format("after-{}", i);
    if (!RandomFail::fails(text, 5)) ok.push_back(Document(text));
  }
  const std::size_t n = ok.size();
  CHECK(flow.post("/", std::move(ok)).size() == n);
}

TEST_CASE("std::bad_alloc in a handler fails that request, not the process", "[faults]") {
  Flow flow(FlowOptions{.request_size = 1}, fault_registry());
  flow.add({.name = "alloc", .uses = "Allocator"});
  DocumentArray docs;
  for (const char* text : {"a", "ALLOC", "b", "ALLOC", "c"}) docs.push_back(Document(text));
  ArraySource source(std::move(docs));
  std::vector<std::string> outcome;
  flow.post("/", source, [&](Response&& r) {
    outcome.push_back(r.ok() ? r.docs[0].text : fmt::format("failed in {}: {}", r.error_executor, r.error));
  });
  REQUIRE(outcome.size() == 5);
  CHECK(outcome[0] == "a");
  CHECK(outcome[2] == "b");
  CHECK(outcome[4] == "c");
  for (const int i : {1, 3}) {
    CHECK_THAT(outcome[i], testing::starts_with("failed in alloc: "));
    CHECK_THAT(outcome[i], testing::contains("alloc"));
  }
}

TEST_CASE("a writer whose file hits its size limit stops the run with the file and the bytes written",
          "[faults][launcher]") {
  const auto dir = testing::scratch_dir("faults file size limit");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: noop, uses: NoOp}\n");
  std::string lines;
  for (int i = 0; i < 100000; ++i) lines += fmt::format("line number {}\n", i);
  testing::write_text(dir / "in.txt", lines);
  // A file size limit of 100 blocks (sh's blocks: 512 or 1024 bytes); SIGXFSZ ignored, so write() fails
  // with EFBIG instead of killing the process.
  const auto r = testing::run_process(fmt::format(
      "ulimit -f 100; trap '' XFSZ; exec '{}' run '{}/flow.yml' -i '{}/in.txt' --input-format lines -o '{}/out.jsonl'",
      FLOWLINE_LAUNCHER, dir.string(), dir.string(), dir.string()));
  INFO(r.err);
  CHECK(r.exit_code == 1);  // a failure while running, not a signal
  // Incomplete, so never under its name: what was written stays in out.jsonl.partial, as the summary says.
  CHECK_FALSE(std::filesystem::exists(dir / "out.jsonl"));
  const auto size = std::filesystem::file_size(dir / "out.jsonl.partial");
  CHECK((size == 51200 || size == 102400));
  // The message names the file and says how much of it is there.
  const std::string expected = fmt::format(
      "error: writing '{}/out.jsonl' failed after {} bytes had been written: File too large", dir.string(), size);
  CHECK_THAT(r.err, testing::contains(expected));
  CHECK_THAT(r.err, testing::contains(fmt::format("output: '{}/out.jsonl.partial' (partial", dir.string())));
  // Said once, not once per place that notices.
  CHECK(r.err.find("File too large") == r.err.rfind("File too large"));
}

TEST_CASE("an input file removed while it is read is read to its end; one truncated stops with an error saying so",
          "[faults]") {
  const auto dir = testing::scratch_dir("faults vanishing input");
  std::string lines;
  for (int i = 0; i < 20000; ++i) lines += fmt::format("{}\n", i);
  testing::write_text(dir / "gone.txt", lines);
  {
    auto source = open_file_source(dir / "gone.txt", InputFormat::Lines);
    DocumentArray docs;
    REQUIRE(source->read(docs, 10) == 10);
    std::filesystem::remove(dir / "gone.txt");  // the open file lives on until it is closed
    while (source->read(docs, 1000) > 0) {
    }
    REQUIRE(docs.size() == 20000);
    CHECK(docs[19999].text == "19999");
  }
  testing::write_text(dir / "short.txt", lines);
  auto source = open_file_source(dir / "short.txt", InputFormat::Lines);
  DocumentArray docs;
  REQUIRE(source->read(docs, 10) == 10);
  REQUIRE(::truncate((dir / "short.txt").c_str(), 100) == 0);  // cut under the reader
  // What was read before the cut (the stream's buffer holds some lines past it), then an error naming the
  // file: never the fragment of a line the cut left at the end of that buffer as if it were a document (on
  // the GPU machine, Ubuntu 24.04 and GCC 13, the "1" of line "1860" came back as document 1860).
  CHECK_THROWS_WITH(
      [&] {
        while (source->read(docs, 1000) > 0) {
        }
      }(),
      testing::contains("short.txt") && testing::contains("bytes it had when it was opened: it was truncated"));
  CHECK(docs.size() < 20000);
  for (std::size_t i = 0; i < docs.size(); ++i) REQUIRE(docs[i].text == std::to_string(i));
}

TEST_CASE("a FIFO whose writer leaves mid-line ends the run with every line it sent", "[faults][launcher]") {
  const auto dir = testing::scratch_dir("faults fifo");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: noop, uses: NoOp}\n");
  REQUIRE(::mkfifo((dir / "in.fifo").c_str(), 0600) == 0);
  // The writer sends two lines and half a third, then exits; the run must end (bounded by timeout).
  const auto r = testing::run_process(
      fmt::format("(printf 'first\\nsecond\\nthir' > '{0}/in.fifo' &) ; timeout 60 '{1}' run '{0}/flow.yml' -i "
                  "'{0}/in.fifo' --input-format lines -o '{0}/out.jsonl'",
                  dir.string(), FLOWLINE_LAUNCHER));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string out = testing::read_text(dir / "out.jsonl");
  CHECK(std::count(out.begin(), out.end(), '\n') == 3);
  CHECK_THAT(out, testing::contains("\"text\":\"thir\""));
}

TEST_CASE("a plugin executor whose constructor throws stops flowline run naming executor, replica and cause",
          "[faults][launcher]") {
  const auto dir = testing::scratch_dir("faults constructor");
  testing::write_text(
      dir / "flow.yml",
      fmt::format("plugins: ['{}/libflowline_testing_executors.so']\nexecutors:\n"
                  "  - {{name: broken, uses: FailIf, replicas: 2, with: {{fail_in_constructor: true}}}}\n",
                  FLOWLINE_TEST_PLUGIN_DIR));
  testing::write_text(dir / "in.txt", "a\nb\n");
  const auto r = launch(fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' -o '{0}/out.jsonl'", dir.string()));
  INFO(r.err);
  CHECK(r.exit_code == 1);  // the flow file is valid: the failure happens while starting
  CHECK_THAT(r.err, testing::contains("the flow could not start"));
  CHECK_THAT(r.err, testing::contains("executor 'broken' replica 0: asked to fail in the constructor"));
  CHECK_THAT(r.err, testing::contains("executor 'broken' replica 1: asked to fail in the constructor"));
  // Nothing was processed, so nothing is left: no empty file, no NAME.partial.
  CHECK_FALSE(std::filesystem::exists(dir / "out.jsonl"));
  CHECK_FALSE(std::filesystem::exists(dir / "out.jsonl.partial"));
}
