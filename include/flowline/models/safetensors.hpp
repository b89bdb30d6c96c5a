// flowline/models/safetensors.hpp — reading safetensors files (the Hugging Face weights format).
//
// The file is memory-mapped; tensors returned by get() share that mapping (copy-on-write, never written
// back) and keep it alive. Its header is read and checked by flowline/safetensors_header.hpp (the format,
// and every inconsistency it refuses: short file, bad JSON, unknown dtype, offsets outside the data or not
// matching the shape, tensors whose data overlap or leave gaps); each is a flowline::Error naming the file
// and tensor. Opening never blocks (a FIFO is refused, as is anything but a regular file).
// Immutable after construction; get() may be called from several threads.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace flowline::models {

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return path_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // The tensor on the CPU, in its stored dtype. Throws when absent.
  at::Tensor get(const std::string& name) const;
  // What the header says of tensor `name` (nothing is read): its shape, its dtype, and the dtype as the
  // file names it ("F32", "I32", ...). Throw when absent.
  std::vector<int64_t> shape(const std::string& name) const;
  c10::ScalarType dtype(const std::string& name) const;
  std::string dtype_name(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

 private:
  struct Entry {
    c10::ScalarType dtype;
    std::vector<int64_t> shape;
    std::size_t begin = 0, end = 0;  // offsets into the data section
  };
  struct Mapping;
  const Entry& entry(const std::string& name) const;

  std::filesystem::path path_;
  std::shared_ptr<Mapping> mapping_;
  const std::uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (moved to the CPU, made contiguous) as a safetensors file. For tools and tests.
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors);

}  // namespace flowline::models
