// The VectorIndex's backend table (backend.hpp): one row per backend, each defined in its own file. A new
// backend is that file plus its line here.
#include "backend.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

namespace flowline::vector_index {

BackendRow exact_backend_row();     // exact_backend.cpp
BackendRow hnsw_backend_row();      // hnsw_backend.cpp
BackendRow pgvector_backend_row();  // pgvector_backend.cpp

Metric parse_metric(const std::string& name) {
  if (name == "cosine") return Metric::cosine;
  if (name == "inner_product" || name == "ip") return Metric::inner_product;
  return Metric::l2;  // "l2", "euclidean" (the spec's choices allow nothing else)
}

const std::vector<BackendRow>& backend_table() {
  static const std::vector<BackendRow> table{
      exact_backend_row(),
      hnsw_backend_row(),
      pgvector_backend_row(),
  };
  return table;
}

const BackendRow& backend_row(std::string_view name) {
  std::string names;
  for (const BackendRow& row : backend_table()) {
    if (row.name == name) return row;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", row.name);
  }
  throw Error(fmt::format("backend '{}': expected one of {}", name, names));
}

}  // namespace flowline::vector_index
