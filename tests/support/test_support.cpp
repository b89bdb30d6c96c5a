// Helpers shared by the tests: corpus and scratch paths, files, running a process, numbered documents.
#include "test_support.hpp"

#include "flowline/device.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <ftw.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>

namespace flowline::testing {
namespace {

// Removes `dir` and everything under it, through libc's nftw. Not std::filesystem::remove_all: the PyPI
// LibTorch's libtorch.so exports its own copy of it, which calls a null pointer on a non-empty folder where
// the system's libstdc++ is newer than the one it was built with (the GPU machine), and the dynamic linker
// may bind to it despite src/CMakeLists.txt's link order.
void remove_tree(const std::filesystem::path& dir) {
  // Keeps going past a failure: whatever is left shows up when the test writes there.
  auto remove_one = [](const char* path, const struct stat*, int, struct FTW*) {
    ::remove(path);
    return 0;
  };
  ::nftw(dir.c_str(), remove_one, 64, FTW_DEPTH | FTW_PHYS);
}

}  // namespace

std::filesystem::path corpus_dir() { return FLOWLINE_CORPUS_DIR; }
std::filesystem::path corpus_file(const std::string& name) { return corpus_dir() / name; }

std::filesystem::path scratch_dir(const std::string& test_name) {
  std::string safe;
  for (char c : test_name) safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const auto dir = std::filesystem::path(FLOWLINE_BINARY_DIR) / "test-scratch" / safe;
  remove_tree(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("write_text: cannot write " + path.string());
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

std::string without_gpu(const std::string& subject) {
  if (auto missing = load_cuda()) return fmt::format("{} needs {}", subject, *missing);
  if (subject == "devices: all") return "devices: all, but no GPU is visible; available: cpu";
  return subject + " does not exist; available: cpu";
}

DocumentArray numbered_docs(std::size_t n) {
  DocumentArray docs;
  for (std::size_t i = 0; i < n; ++i) docs.push_back(Document(std::to_string(i)));
  return docs;
}

DocumentArray read_all(DocumentSource& source, std::size_t per_read) {
  DocumentArray docs;
  while (source.read(docs, per_read) > 0) {
  }
  return docs;
}

}  // namespace flowline::testing
