// The image tests' files: tests/data/images (made by scripts/make_test_images.py) and reading one whole; and the
// message of a refusal. Header-only, for test_images, test_image_http, test_image_input and test_image_processor.
#pragma once

#include "flowline/document.hpp"
#include "flowline/error.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace flowline::testing {

inline std::filesystem::path image_dir() { return std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/images"; }

// The file's bytes; throws when it cannot be opened (a missing test file fails the test that reads it).
inline Bytes read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the InputError `f` throws ("" when it throws none).
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace flowline::testing
