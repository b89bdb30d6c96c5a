// Helpers shared by the tests: corpus and scratch paths, files, running a process, numbered documents.
#include "test_support.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace flowline::testing {

std::filesystem::path corpus_dir() { return FLOWLINE_CORPUS_DIR; }
std::filesystem::path corpus_file(const std::string& name) { return corpus_dir() / name; }

std::filesystem::path scratch_dir(const std::string& test_name) {
  std::string safe;
  for (char c : test_name) safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const auto dir = std::filesystem::path(FLOWLINE_BINARY_DIR) / "test-scratch" / safe;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ProcessResult run_process(const std::string& command) {
  static int counter = 0;
  const auto dir = std::filesystem::path(FLOWLINE_BINARY_DIR) / "test-scratch" / "processes";
  std::filesystem::create_directories(dir);
  const auto out = dir / fmt::format("{}-{}.out", ::getpid(), counter);
  const auto err = dir / fmt::format("{}-{}.err", ::getpid(), counter++);
  const int status =
      std::system(fmt::format("{} >'{}' 2>'{}' </dev/null", command, out.string(), err.string()).c_str());
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_text(out);
  result.err = read_text(err);
  return result;
}

DocumentArray numbered_docs(std::size_t n) {
  DocumentArray docs;
  for (std::size_t i = 0; i < n; ++i) docs.push_back(Document(std::to_string(i)));
  return docs;
}

}  // namespace flowline::testing
