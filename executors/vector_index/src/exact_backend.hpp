// The exact backend's options and makers, shared by its two files: exact_backend.cpp (one device) and
// sharded_backend.cpp (the rows spread over several). Private to the VectorIndex.
#pragma once

#include "backend.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace flowline::vector_index {

struct ExactOptions {
  std::string device = "cpu";        // a LibTorch device: "cpu", "cuda", "cuda:1"
  std::vector<std::string> devices;  // two or more: the vectors sharded over them (replaces `device`)
  bool half = false;                 // store fp16 (GPU) instead of fp32
};
// One device, or sharded over `devices` when there are two or more (sharded_backend.cpp).
std::unique_ptr<VectorBackend> make_exact_backend(Metric metric, std::size_t dim, const ExactOptions& options);
std::unique_ptr<VectorBackend> make_sharded_backend(Metric metric, std::size_t dim, const ExactOptions& options);

}  // namespace flowline::vector_index
