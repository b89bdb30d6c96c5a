// The vector side of a VectorIndex: where vectors live and how the nearest are found. One interface, one
// file per backend (exact_backend.cpp: a matrix product on any LibTorch device; hnsw_backend.cpp: hnswlib's
// graph on the CPU). Private to the VectorIndex.
//
// Vectors are addressed by slot: a dense row number that the index (store.hpp) hands out and reuses after
// a delete. Rows come in as float32 on the CPU, already normalised for the cosine metric; a backend stores
// them as it likes. A backend is used by one thread at a time (the index replica's).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flowline::vector_index {

enum class Metric { cosine, inner_product, l2 };

// "cosine", "inner_product", "l2": the name of the metric and of the score a match carries.
const char* metric_name(Metric metric);
// Whether a larger score is better (cosine and inner product) or a smaller one (l2, a distance).
inline bool higher_is_better(Metric metric) { return metric != Metric::l2; }

struct Hit {
  std::uint32_t slot = 0;
  float score = 0;  // the metric's value: cosine similarity, inner product, or Euclidean distance
};

// Slots a search may return (1) or not (0), indexed by slot; slots beyond its end are not allowed.
using SlotMask = std::vector<std::uint8_t>;

class VectorBackend {
 public:
  virtual ~VectorBackend() = default;

  virtual const char* name() const = 0;   // "exact" or "hnsw", as the flow YAML names it
  virtual std::string where() const = 0;  // "cuda:0, fp16", for /status and the log

  // Sets the rows at `slots` (growing storage as needed) to `rows`: float32 [slots.size(), dim], CPU.
  virtual void set(const std::vector<std::uint32_t>& slots, const at::Tensor& rows) = 0;
  // Forgets the rows at `slots` (they are no longer returned until set again).
  virtual void remove(const std::vector<std::uint32_t>& slots) = 0;
  virtual void clear() = 0;
  // The stored rows at `slots` as float32 [n, dim] on the CPU (for snapshots and return_embeddings).
  virtual at::Tensor get(const std::vector<std::uint32_t>& slots) const = 0;

  // The best `k` live rows for each query of `queries` (float32 [n, dim], CPU, normalised for cosine), best
  // first; `allowed` (nullptr: every live row; else `allowed_count` rows) restricts them. A query gets fewer
  // than k when fewer match. `ef`: hnsw's candidate list for this search (0: its ef_search); exact ignores it.
  virtual std::vector<std::vector<Hit>> search(const at::Tensor& queries, std::size_t k, const SlotMask* allowed,
                                               std::size_t allowed_count, std::size_t ef) = 0;

  // Memory the vectors and the structure take (device or host), in bytes.
  virtual std::size_t bytes() const = 0;
};

struct ExactOptions {
  std::string device = "cpu";        // a LibTorch device: "cpu", "cuda", "cuda:1"
  std::vector<std::string> devices;  // two or more: the vectors sharded over them (replaces `device`)
  bool half = false;                 // store fp16 (GPU) instead of fp32
};
// One device, or sharded over `devices` when there are two or more (sharded_backend.cpp).
std::unique_ptr<VectorBackend> make_exact_backend(Metric metric, std::size_t dim, const ExactOptions& options);
std::unique_ptr<VectorBackend> make_sharded_backend(Metric metric, std::size_t dim, const ExactOptions& options);

struct HnswOptions {
  std::size_t m = 16;                 // graph degree
  std::size_t ef_construction = 200;  // candidate list while inserting
  std::size_t ef_search = 64;         // candidate list while searching (at least k)
};
// Whether this build has the hnsw backend (hnswlib's headers were found).
bool hnsw_available();
// Throws flowline::Error when the build lacks hnswlib.
std::unique_ptr<VectorBackend> make_hnsw_backend(Metric metric, std::size_t dim, const HnswOptions& options);

}  // namespace flowline::vector_index
