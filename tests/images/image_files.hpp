// The image tests' files: tests/data/images (made by scripts/make_test_images.py) and reading one whole.
// Header-only, for test_images, test_image_input and test_image_processor.
#pragma once

#include "flowline/document.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace flowline::testing {

inline std::filesystem::path image_dir() { return std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/images"; }

// The file's bytes; throws when it cannot be opened (a missing test file fails the test that reads it).
inline Bytes read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace flowline::testing
