// The vector side of a VectorIndex: where vectors live and how the nearest are found. One interface, and a
// table of backends (backends.cpp), a row each: its name, its `with:` parameters and how it is made. A
// backend is one file that defines its row (exact_backend.cpp: a matrix product on any LibTorch device;
// hnsw_backend.cpp: hnswlib's graph on the CPU) plus that row's line in the table. Private to the VectorIndex.
// A backend may instead keep the documents themselves, in a database (DocumentBackend below: pgvector).
//
// Vectors are addressed by slot: a dense row number that the index (store.hpp) hands out and reuses after
// a delete. Rows come in as float32 on the CPU, already normalised for the cosine metric; a backend stores
// them as it likes. A backend is used by one thread at a time (the index replica's).
#pragma once

#include "flowline/document.hpp"
#include "flowline/params.hpp"

#include <ATen/core/Tensor.h>
#include <boost/json/value.hpp>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::vector_index {

enum class Metric { cosine, inner_product, l2 };

// "cosine", "inner_product", "l2": the name of the metric and of the score a match carries.
const char* metric_name(Metric metric);
// The metric `with.metric` names ("cosine", "inner_product" or "ip", "l2" or "euclidean"; backends.cpp).
Metric parse_metric(const std::string& name);
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

// A backend that keeps the documents itself, in a database other systems may fill too (pgvector_backend.cpp):
// the VectorIndex then keeps no store and no workspace, and hands it every endpoint's documents — /search
// after its own checks (limit within max_limit and max_answer_matches, the filter parsed within its bounds).
// One per replica, used by that replica's thread alone. Errors: flowline::RequestError for what the request
// asked wrongly, flowline::Error for the rest.
class DocumentBackend {
 public:
  virtual ~DocumentBackend() = default;
  // Each query's best `limit` matches, best first: id, text, tags, the score under the metric's name, and
  // the embedding when `with_embeddings`. `filter` (null: none) is a filter Filter::parse accepted.
  virtual void search(DocumentArray& queries, std::size_t limit, const boost::json::value* filter,
                      bool with_embeddings) = 0;
  // "/index", "/update", "/delete", "/clear" or "/status", as the VectorIndex answers them with a store.
  virtual void handle(std::string_view endpoint, DocumentArray& docs) = 0;
};

// What a backend's row reads when the executor starts: the executor's `with:` (checked against its spec,
// defaults filled), its device in the flow and its name (for messages).
struct BackendSettings {
  Params with;
  c10::Device device{c10::kCPU};
  std::string executor;
  int shards = 1;  // the executor's `shards:`
};

// Makes a backend's vectors once their dimension is known (at start with `dim:`, else at the first /index).
using BackendMaker = std::function<std::unique_ptr<VectorBackend>(Metric metric, std::size_t dim)>;

// What a row's `make` gives: the maker, and the device the vectors live on (the index's replicas share one
// store there and search on streams of their own when it is a GPU).
// A row that keeps the documents itself gives `documents` instead (made once per replica, for its metric).
struct BackendPlan {
  BackendMaker make;
  c10::Device device{c10::kCPU};
  std::function<std::unique_ptr<DocumentBackend>(Metric metric)> documents;
};

// One backend as `with.backend` names it.
struct BackendRow {
  std::string name;
  std::string help;                   // one clause: what it is ("hnswlib's graph on the CPU")
  std::vector<ParamSpec> parameters;  // its own `with:` keys, listed in the VectorIndex's spec
  // Reads its parameters when the executor starts, so that a setting it cannot use (or a backend this build
  // lacks) fails the start, naming the parameter. Throws flowline::Error.
  std::function<BackendPlan(const BackendSettings&)> make;
};

// Every backend, in the order the VectorIndex's spec lists them (backends.cpp).
const std::vector<BackendRow>& backend_table();
// The row named `name`. Throws flowline::Error listing the names when there is none.
const BackendRow& backend_row(std::string_view name);

}  // namespace flowline::vector_index
