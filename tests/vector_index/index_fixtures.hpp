// Shared by the VectorIndex tests: the backends this machine has, a corpus of clustered random vectors with
// its brute-force nearest neighbours, and a one-executor flow around a VectorIndex.
#pragma once

#include "executor_runner.hpp"
#include "test_support.hpp"

#include "flowline/device.hpp"
#include "flowline/executor.hpp"
#include "flowline/flow.hpp"
#include "flowline/registry.hpp"
#include "flowline/vector_index/vector_index.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace index_test {

using namespace flowline;

// A backend as the flow YAML selects it.
struct Backend {
  std::string name;
  boost::json::object with;
  bool exact = true;
};

// exact on the CPU, and sharded over three CPU "devices" (the merge of sharded_backend.cpp, as on several
// GPUs); hnsw when flowline was built with hnswlib; exact on the GPU when there is one, and sharded twice
// over it.
inline std::vector<Backend> backends() {
  std::vector<Backend> out{
      {"exact-cpu", {{"backend", "exact"}, {"device", "cpu"}}, true},
      {"exact-sharded-cpu", {{"backend", "exact"}, {"devices", boost::json::array{"cpu", "cpu", "cpu"}}}, true}};
#if FLOWLINE_HAVE_HNSWLIB
  out.push_back({"hnsw", {{"backend", "hnsw"}, {"ef_search", 100}}, false});
#endif
  if (cuda_device_count() > 0) {
    out.push_back({"exact-cuda", {{"backend", "exact"}, {"device", "cuda"}}, true});
    const boost::json::array gpus =
        cuda_device_count() > 1 ? boost::json::array{"cuda:0", "cuda:1"} : boost::json::array{"cuda:0", "cuda:0"};
    out.push_back({"exact-sharded-cuda", {{"backend", "exact"}, {"devices", gpus}}, true});
  }
  return out;
}

inline Registry& index_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    vector_index::register_vector_index(*r);
    return r;
  }();
  return *registry;
}

inline DocumentArray one_document(const Document& doc) {
  DocumentArray docs;
  docs.push_back(doc);
  return docs;
}

// A flow of one VectorIndex named "index" (`replicas` per shard, `shards` of them), started; closed (snapshot written)
// on destruction.
class IndexFlow {
 public:
  explicit IndexFlow(const Backend& backend, boost::json::object with = {}, int replicas = 1, int shards = 1)
      : flow_(FlowOptions{}, index_registry()) {
    for (const auto& kv : backend.with) {
      if (!with.contains(kv.key())) with[kv.key()] = kv.value();
    }
    flow_.add({.name = "index",
               .uses = "VectorIndex",
               .with = with,
               .replicas = replicas,
               .shards = shards,
               .device = "cpu"});
    flow_.start();
  }
  DocumentArray post(std::string_view endpoint, DocumentArray docs, boost::json::object parameters = {},
                     std::size_t request_size = 0) {
    return flow_.post(endpoint, std::move(docs),
                      PostOptions{.request_size = request_size, .parameters = std::move(parameters)});
  }
  Flow& flow() { return flow_; }
  boost::json::object status() {
    const DocumentArray out = post("/status", one_document(Document()));
    REQUIRE(out.size() == 1);
    return out[0].tags;
  }

 private:
  Flow flow_;
};

// n documents "doc-i" with texts, tags {group: i % 5, even, n: i} and vectors around 20 random centres.
class Corpus {
 public:
  Corpus(std::size_t n, std::int64_t dim) : n_(n) {
    at::manual_seed(7);
    const at::Tensor centres = at::randn({20, dim});
    const at::Tensor which = at::randint(20, {static_cast<std::int64_t>(n)});
    vectors_ = centres.index_select(0, which) + 0.3 * at::randn({static_cast<std::int64_t>(n), dim});
    normalised_ = vectors_ / vectors_.norm(2, {1}, true);
  }

  std::string text(std::size_t i) const { return fmt::format("paragraph {} of the corpus", i); }

  DocumentArray documents(std::size_t first = 0, std::size_t count = SIZE_MAX) const {
    DocumentArray docs;
    for (std::size_t i = first; i < std::min(n_, first + std::min(count, n_)); ++i) {
      Document& d = docs.push_back(Document(text(i)));
      d.id = fmt::format("doc-{}", i);
      d.tags["group"] = static_cast<std::int64_t>(i % 5);
      d.tags["even"] = i % 2 == 0;
      d.tags["n"] = static_cast<std::int64_t>(i);
      d.embedding = vectors_[static_cast<std::int64_t>(i)].clone();
    }
    return docs;
  }

  // Queries near the corpus (a stored vector plus noise).
  DocumentArray queries(std::size_t count) const {
    DocumentArray docs;
    at::manual_seed(11);
    for (std::size_t q = 0; q < count; ++q) {
      Document& d = docs.push_back(Document(fmt::format("query {}", q)));
      d.embedding = vectors_[static_cast<std::int64_t>((q * 97) % n_)] + 0.2 * at::randn({vectors_.size(1)});
    }
    return docs;
  }

  // The ids of the k stored documents of highest cosine similarity to `query` among those `allowed`.
  std::vector<std::string> nearest(const at::Tensor& query, std::size_t k,
                                   const std::function<bool(std::size_t)>& allowed = {}) const {
    const at::Tensor sims = at::mv(normalised_, query / query.norm()).contiguous();
    const float* s = sims.data_ptr<float>();
    std::vector<std::size_t> order(n_);
    std::iota(order.begin(), order.end(), 0);
    if (allowed)
      order.erase(std::remove_if(order.begin(), order.end(), [&](std::size_t i) { return !allowed(i); }), order.end());
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < std::min(k, order.size()); ++i) ids.push_back(fmt::format("doc-{}", order[i]));
    return ids;
  }

 private:
  std::size_t n_;
  at::Tensor vectors_, normalised_;
};

// A VectorIndex alone, outside a flow (its `with:` defaults from its spec, then `with`), run by the executor
// harness: a request's parameters are checked as a flow checks them, and what the check or the handler
// throws reaches the caller as thrown, where a flow turns it into a failed request's message.
class IndexAlone {
 public:
  explicit IndexAlone(const boost::json::object& with = {})
      : runner_(index_registry(), "VectorIndex", with, RuntimeInfo{"index", "VectorIndex"}) {}
  DocumentArray post(std::string_view endpoint, DocumentArray docs, const boost::json::object& parameters = {}) {
    return runner_.post(endpoint, std::move(docs), parameters);
  }

 private:
  testing::ExecutorRunner runner_;
};

inline std::filesystem::path fresh_workspace(const std::string& name) {
  return testing::scratch_dir("index-" + name) / "workspace";
}

// Flips the bits of one byte of a file (damage that a checksum must catch).
inline void flip_byte(const std::filesystem::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  const char c = static_cast<char>(f.get());
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(~c));
}

}  // namespace index_test
