// The state of one VectorIndex replica: its documents by id, their vectors in a backend, and the workspace
// that makes every change durable. The executor (vector_index.cpp) turns requests into these calls. Private
// to the VectorIndex; used by one thread at a time (the replica's).
//
// Every change is validated whole first, then logged (synced to disk), then applied in memory: a change
// that throws leaves the index as it was, and a change that returned is on disk. A snapshot due after a
// change never fails it: the change is on disk, so it is answered as done.
#pragma once

#include "backend.hpp"
#include "filter.hpp"
#include "workspace.hpp"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace flowline::vector_index {

struct StoreOptions {
  Metric metric = Metric::cosine;
  std::size_t dim = 0;                             // 0: the first vectors indexed settle it
  std::string backend;                             // its name in the backend table (for /status)
  BackendMaker make;                               // its row's maker (backend.hpp)
  std::optional<std::filesystem::path> workspace;  // none: in memory only
  std::uint64_t snapshot_log_bytes = 256u << 20;   // a snapshot once the log has grown this large
};

struct Match {
  const Entry* entry = nullptr;
  std::uint32_t slot = 0;
  float score = 0;
};

class Store {
 public:
  // Opens the workspace (lock, replay) when there is one. Throws flowline::Error / CorruptWorkspace.
  explicit Store(StoreOptions options);
  ~Store();

  // Adds or replaces documents by id: `entries[i]` with row i of `rows` (float [n, dim], CPU). Ids must be
  // distinct within one call.
  void upsert(std::vector<Entry> entries, at::Tensor rows);
  // The stored entry and vector of `id`, or nullptr.
  const Entry* find(const std::string& id) const;
  at::Tensor vector_of(const std::string& id) const;  // float [dim], CPU; `id` must exist
  // Removes the documents of these ids; returns, for each id, whether it was there.
  std::vector<bool> remove(const std::vector<std::string>& ids);
  void clear();

  // The best `k` stored documents for each query row (float [n, dim], CPU), best first; with `filter`, only
  // the documents it matches.
  // `ef`: hnsw's candidate list for this search (0: the index's ef_search).
  std::vector<std::vector<Match>> search(at::Tensor queries, std::size_t k, const Filter* filter, std::size_t ef = 0);
  at::Tensor rows_of(const std::vector<Match>& matches) const;  // their vectors, float [m, dim]
  // What the document at `slot` takes in an answer: its id, text and uri, and its tags as JSON text (about).
  std::size_t answer_bytes(std::uint32_t slot) const { return answer_bytes_[slot]; }

  // Writes a snapshot of the index as it is now (when there is a workspace and it changed since the last):
  // `wait` false starts it in the background (the workspace's thread, with a new log) unless one is being
  // written; `wait` true writes it before returning (close). Never throws for a snapshot that fails: the
  // workspace logs it, and its logs keep every change.
  void snapshot(bool wait);

  std::size_t size() const noexcept { return by_id_.size(); }
  std::size_t dim() const noexcept { return dim_; }
  Metric metric() const noexcept { return options_.metric; }
  const VectorBackend* backend() const noexcept { return backend_.get(); }
  std::string backend_name() const { return options_.backend; }
  std::size_t bytes() const;
  const Workspace* workspace() const noexcept { return workspace_.get(); }

 private:
  class Replayer;  // the workspace's changes on start, applied without logging

  void apply_upsert(std::vector<Entry> entries, const at::Tensor& rows);
  void apply_remove(const std::vector<std::string>& ids);
  void apply_clear();
  void ensure_backend(std::size_t dim);
  at::Tensor prepared(at::Tensor rows) const;  // float, contiguous, normalised for cosine
  void maybe_snapshot() noexcept;
  Workspace::State state() const;  // what a snapshot holds: every document and its vector, now

  StoreOptions options_;
  std::size_t dim_ = 0;
  std::unique_ptr<VectorBackend> backend_;
  std::unique_ptr<Workspace> workspace_;
  std::vector<std::shared_ptr<const Entry>> slots_;  // slot -> entry (null: free); snapshots share them
  std::vector<std::size_t> answer_bytes_;            // slot -> answer_bytes()
  std::vector<std::uint32_t> free_;                  // free slots, reused first
  std::unordered_map<std::string, std::uint32_t> by_id_;
};

}  // namespace flowline::vector_index
