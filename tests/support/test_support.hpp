// Helpers shared by the tests: paths to the corpus and a scratch folder, a temporary file, and a
// process runner for launcher tests.
#pragma once

#include "catch.hpp"
#include "flowline/flowline.hpp"
#include "testing_executors.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace flowline::testing {

std::filesystem::path corpus_dir();
std::filesystem::path corpus_file(const std::string& name);  // e.g. "alice-in-wonderland.txt"
// A fresh empty folder for one test, under the build tree.
std::filesystem::path scratch_dir(const std::string& test_name);
// Writes `text` to `path`, creating its folders; throws std::runtime_error when the file cannot be written.
void write_text(const std::filesystem::path& path, const std::string& text);
std::string read_text(const std::filesystem::path& path);

struct ProcessResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs a command line through /bin/sh, capturing stdout and stderr.
ProcessResult run_process(const std::string& command);

// What validation says of `subject` ("device 'cuda:7'" or "devices: all") on a machine without that GPU:
// that it does not exist where LibTorch's CUDA library loads (the full install), else that the library is
// missing (the light install). Starts the message; a GPU machine lists its GPUs after "available: cpu".
std::string without_gpu(const std::string& subject);

// Documents with texts "0", "1", ... "n-1".
DocumentArray numbered_docs(std::size_t n);

// Everything `source` hands out, `per_read` documents a read (few, so that reads cross skip points and blocks).
DocumentArray read_all(DocumentSource& source, std::size_t per_read = 3);

}  // namespace flowline::testing
