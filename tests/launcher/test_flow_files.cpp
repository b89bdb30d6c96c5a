// Flow files read in bounded time and memory (issue 34): hostile files generated here go through the real
// `flowline validate` process, whose wall time and peak RSS (wait4's rusage) are asserted and printed.
#include "test_support.hpp"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace flowline;

namespace {

struct Finished {
  int exit_code = -1;
  double seconds = 0;
  double max_rss_mb = 0;
  std::string output;
};

// Runs the launcher with `args`, output to a file, killed after 60 s if it has not ended.
Finished run_launcher(const std::vector<std::string>& args, const std::filesystem::path& log) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv{const_cast<char*>(FLOWLINE_LAUNCHER)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(FLOWLINE_LAUNCHER, argv.data());
    _exit(127);
  }
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 600 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done) kill(pid, SIGKILL);
  });
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  Finished f;
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  watchdog.join();
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  f.max_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
  f.output = testing::read_text(log);
  return f;
}

// Nine levels of anchors, each a list of ten aliases of the one before: 10^9 nodes once expanded.
std::string alias_bomb() {
  std::string yaml = "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n";
  yaml += "        a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  const std::string names = "abcdefghi";
  for (std::size_t i = 1; i < names.size(); ++i) {
    yaml += fmt::format("        {0}: &{0} [", names[i]);
    for (int k = 0; k < 10; ++k) yaml += fmt::format("{}*{}", k ? ", " : "", names[i - 1]);
    yaml += "]\n";
  }
  return yaml;
}

std::string plugin_line() {
  return fmt::format("plugins: ['{}/libflowline_testing_executors.so']\n", FLOWLINE_TEST_PLUGIN_DIR);
}

}  // namespace

TEST_CASE("an alias bomb is refused at the alias, within a second's work and bounded memory", "[config][limits]") {
  const auto dir = testing::scratch_dir("alias bomb");
  testing::write_text(dir / "flow.yml", plugin_line() + alias_bomb());
  const auto f = run_launcher({"validate", (dir / "flow.yml").string()}, dir / "log.txt");
  WARN(fmt::format("alias bomb: exit {}, {:.2f} s, peak RSS {:.0f} MB", f.exit_code, f.seconds, f.max_rss_mb));
  CHECK(f.exit_code == 2);
  // The alias whose expansion passes the budget: the sixth *d (11,111 nodes each) in e's list, after the
  // 12,344 nodes of a to d themselves.
  CHECK_THAT(f.output, testing::contains("flow.yml:11:36: alias '*d' would expand to more than 75000 nodes"));
  CHECK(f.max_rss_mb < 300);
  CHECK(f.seconds < 10);  // a sanity bound for a loaded CI machine; docs/testing.md records the figure
}

TEST_CASE("a 99 MB flow file is refused by its size before parsing, and the limit can be raised", "[config][limits]") {
  const auto dir = testing::scratch_dir("huge flow");
  {
    std::ofstream out(dir / "flow.yml");
    out << plugin_line() << "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n        list: [";
    const std::string chunk = std::string(1 << 20, 'x');
    for (int i = 0; i < 99; ++i) out << (i ? ", " : "") << chunk;
    out << "]\n";
  }
  const auto f = run_launcher({"validate", (dir / "flow.yml").string()}, dir / "log.txt");
  WARN(fmt::format("99 MB file: exit {}, {:.2f} s, peak RSS {:.0f} MB", f.exit_code, f.seconds, f.max_rss_mb));
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.output, testing::contains("flow.yml:1:1: the flow file is 99.0 MiB ("));
  CHECK_THAT(f.output, testing::contains("flow files may be at most 2.0 MiB (2097152 bytes; --max-flow-bytes or "
                                         "FLOWLINE_MAX_FLOW_BYTES raises the limit)"));
  CHECK(f.max_rss_mb < 300);
  // A 3 MiB file is refused by default and read once the limit is raised (3 scalars of 1 MiB: few nodes).
  {
    std::ofstream out(dir / "nine.yml");
    out << plugin_line() << "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n        list: [";
    for (int i = 0; i < 3; ++i) out << (i ? ", " : "") << std::string(1 << 20, 'x');
    out << "]\n";
  }
  CHECK(run_launcher({"validate", (dir / "nine.yml").string()}, dir / "log2.txt").exit_code == 2);
  const auto raised =
      run_launcher({"--max-flow-bytes", "4000000", "validate", (dir / "nine.yml").string()}, dir / "log3.txt");
  INFO(raised.output);
  CHECK(raised.exit_code == 0);
}

TEST_CASE("deep nesting is refused naming the depth and where it starts", "[config][limits]") {
  const auto dir = testing::scratch_dir("deep nesting");
  testing::write_text(dir / "flow.yml", plugin_line() +
                                            "executors:\n  - name: tags\n    uses: SetTags\n    with:\n"
                                            "      tags: {deep: " +
                                            std::string(100000, '[') + std::string(100000, ']') + "}\n");
  const auto f = run_launcher({"validate", (dir / "flow.yml").string()}, dir / "log.txt");
  WARN(fmt::format("100,000 brackets: exit {}, {:.2f} s, peak RSS {:.0f} MB", f.exit_code, f.seconds, f.max_rss_mb));
  CHECK(f.exit_code == 2);
  // Where the nesting starts: the outermost flow collection, `{deep: [[[...` on line 6.
  CHECK_THAT(f.output,
             testing::contains("flow.yml:6:13: nesting deeper than 100 levels from here (level 101 at 6:115)"));
  CHECK(f.max_rss_mb < 300);
}

TEST_CASE("a flow with a 70,000-word list parameter still loads, and aliases within the budget expand",
          "[config][limits]") {
  const auto dir = testing::scratch_dir("large parameters");
  std::string yaml = plugin_line() + "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n";
  yaml += "        vocabulary: [";
  for (int i = 0; i < 70000; ++i) yaml += fmt::format("{}w{}", i ? ", " : "", i);
  yaml += "]\n        labels: &labels [positive, negative, neutral]\n        again: *labels\n";
  testing::write_text(dir / "flow.yml", yaml);
  const auto f = run_launcher({"validate", (dir / "flow.yml").string()}, dir / "log.txt");
  WARN(fmt::format("70,000-word list: exit {}, {:.2f} s, peak RSS {:.0f} MB", f.exit_code, f.seconds, f.max_rss_mb));
  CHECK(f.exit_code == 0);
  CHECK(f.max_rss_mb < 300);
}

TEST_CASE("an alias inside the node it names, and a long text aliased many times, are refused", "[config][limits]") {
  const auto dir = testing::scratch_dir("alias cycles");
  const std::string head = plugin_line() + "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n";
  testing::write_text(dir / "cycle.yml", head + "        a: &a [x, *a]\n");
  const auto cycle = run_launcher({"validate", (dir / "cycle.yml").string()}, dir / "log.txt");
  CHECK(cycle.exit_code == 2);
  CHECK_THAT(cycle.output, testing::contains("cycle.yml:7:19: alias '*a' is inside the node it names (a cycle)"));
  // 1 MiB of text, aliased 40 times: 40 MiB once expanded, past twice the 2 MiB file limit.
  std::string text = head + "        t: &t " + std::string(1 << 20, 'y') + "\n        copies: [";
  for (int i = 0; i < 40; ++i) text += i ? ", *t" : "*t";
  testing::write_text(dir / "text.yml", text + "]\n");
  const auto copies = run_launcher({"validate", (dir / "text.yml").string()}, dir / "log2.txt");
  CHECK(copies.exit_code == 2);
  CHECK_THAT(copies.output, testing::contains("alias '*t' would expand to more than 4194304 bytes of text"));
  CHECK(copies.max_rss_mb < 300);
}

TEST_CASE(
    "a scalar of a million digits or an unclosed ${{ ENV. reference of a million characters is read in linear time",
    "[config][limits]") {
  // Each once overflowed the stack (std::regex recursed once per character) and killed the launcher.
  const auto dir = testing::scratch_dir("long scalars");
  const std::string head = plugin_line() + "executors:\n  - name: tags\n    uses: SetTags\n    with:\n      tags:\n";
  testing::write_text(dir / "flow.yml", head + "        digits: " + std::string(1000000, '7') +
                                            "\n        env: \"${{ ENV." + std::string(1000000, 'A') + "\"\n");
  const auto f = run_launcher({"validate", (dir / "flow.yml").string()}, dir / "log.txt");
  WARN(fmt::format("long scalars: exit {}, {:.2f} s, peak RSS {:.0f} MB", f.exit_code, f.seconds, f.max_rss_mb));
  INFO(f.output);
  CHECK(f.exit_code == 0);
  CHECK(f.max_rss_mb < 300);
}
