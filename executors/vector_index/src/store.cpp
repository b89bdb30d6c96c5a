// One index replica's documents, vectors and workspace (store.hpp).
#include "store.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <unordered_set>
#include <vector>

namespace flowline::vector_index {
namespace {

// About the length of `tags`' JSON text (strings and keys by their bytes, a number as 8), without
// serializing it or recursing.
std::size_t json_bytes(const boost::json::object& tags) {
  std::size_t bytes = 2;
  std::vector<const boost::json::value*> pending;
  for (const auto& kv : tags) {
    bytes += kv.key().size() + 4;
    pending.push_back(&kv.value());
  }
  while (!pending.empty()) {
    const boost::json::value* v = pending.back();
    pending.pop_back();
    if (const auto* o = v->if_object()) {
      bytes += 2;
      for (const auto& kv : *o) {
        bytes += kv.key().size() + 4;
        pending.push_back(&kv.value());
      }
    } else if (const auto* a = v->if_array()) {
      bytes += 2 + a->size();
      for (const auto& item : *a) pending.push_back(&item);
    } else if (const auto* text = v->if_string()) {
      bytes += text->size() + 2;
    } else {
      bytes += 8;
    }
  }
  return bytes;
}

std::size_t answer_bytes_of(const Entry& e) {
  return e.id.size() + e.text.size() + e.uri.size() + (e.tags.empty() ? 0 : json_bytes(e.tags));
}

}  // namespace

class Store::Replayer : public Replay {
 public:
  explicit Replayer(Store& store) : store_(store) {}
  void header(std::size_t dim, Metric) override { store_.ensure_backend(dim); }
  void upsert(std::vector<Entry> entries, const at::Tensor& rows) override {
    store_.apply_upsert(std::move(entries), as_stored(rows));
  }
  void remove(const std::vector<std::string>& ids) override { store_.apply_remove(ids); }
  void clear() override { store_.apply_clear(); }

 private:
  // The log and the snapshot hold rows as upsert() prepared them (a workspace of another metric is refused before
  // this): under cosine unit rows, or as near as the backend's dtype kept them (fp16: within ~5e-4). They go in
  // as they are: normalising them again moved their last bits at every start, so a reopened index answered
  // near-ties otherwise than the one that wrote it. A row further from unit length than 1e-2 was not written so
  // (a format-1 workspace made by hand): it is normalised as upsert() would.
  at::Tensor as_stored(const at::Tensor& rows) const {
    at::Tensor out = rows.to(at::kCPU, at::kFloat).contiguous();
    if (store_.metric() != Metric::cosine || out.size(0) == 0) return out;
    const at::Tensor off = (out.norm(2, {1}) - 1).abs() > 1e-2;
    if (off.any().item<bool>()) out.index_put_({off}, store_.prepared(out.index({off})));
    return out;
  }

  Store& store_;
};

Store::Store(StoreOptions options) : options_(std::move(options)) {
  if (!options_.make) throw Error(fmt::format("backend '{}': no maker", options_.backend));
  if (options_.dim) ensure_backend(options_.dim);
  if (!options_.workspace) return;
  const auto started = std::chrono::steady_clock::now();
  workspace_ = std::make_unique<Workspace>(*options_.workspace);
  Replayer replayer(*this);
  workspace_->load(replayer, options_.dim, options_.metric);
  if (workspace_->needs_upgrade()) workspace_->upgrade(state());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info("workspace {}: {} documents of {} dimensions loaded in {:.2f} s", workspace_->folder().string(), size(),
               dim_, s);
}

Store::~Store() = default;

void Store::ensure_backend(std::size_t dim) {
  if (backend_) {
    if (dim != dim_) throw Error(fmt::format("vectors of {} dimensions in an index of {}", dim, dim_));
    return;
  }
  if (dim == 0) throw Error("a vector of 0 dimensions");
  dim_ = dim;
  backend_ = options_.make(options_.metric, dim);
}

at::Tensor Store::prepared(at::Tensor rows) const {
  c10::InferenceMode guard;
  rows = rows.to(at::kCPU, at::kFloat).contiguous();
  if (options_.metric == Metric::cosine) {
    rows = rows / rows.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
  }
  return rows.contiguous();
}

void Store::upsert(std::vector<Entry> entries, at::Tensor rows) {
  if (entries.empty()) return;
  if (rows.dim() != 2 || rows.size(0) != static_cast<std::int64_t>(entries.size())) {
    throw Error("upsert: one row per document expected");
  }
  std::unordered_set<std::string_view> seen;
  for (const Entry& e : entries) {
    if (!seen.insert(e.id).second) {
      throw Error(
          fmt::format("document id '{}' appears twice in one request: an index holds one document per id", e.id));
    }
  }
  rows = prepared(std::move(rows));
  if (!rows.isfinite().all().item<bool>()) throw Error("an embedding holds NaN or infinity: nothing was indexed");
  ensure_backend(static_cast<std::size_t>(rows.size(1)));  // the first valid rows settle the dimension
  if (workspace_) {
    std::vector<const Entry*> logged;
    logged.reserve(entries.size());
    for (const Entry& e : entries) logged.push_back(&e);
    workspace_->log_upsert(logged, rows);
  }
  apply_upsert(std::move(entries), rows);
  maybe_snapshot();
}

void Store::apply_upsert(std::vector<Entry> entries, const at::Tensor& rows) {
  if (!backend_) ensure_backend(static_cast<std::size_t>(rows.size(1)));
  std::vector<std::uint32_t> slots;
  slots.reserve(entries.size());
  for (Entry& e : entries) {
    std::uint32_t slot = 0;
    if (const auto it = by_id_.find(e.id); it != by_id_.end()) {
      slot = it->second;
    } else if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
      answer_bytes_.emplace_back();
    }
    by_id_[e.id] = slot;
    answer_bytes_[slot] = answer_bytes_of(e);
    slots_[slot] = std::make_shared<const Entry>(std::move(e));
    slots.push_back(slot);
  }
  backend_->set(slots, rows);
}

const Entry* Store::find(const std::string& id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : slots_[it->second].get();
}

at::Tensor Store::vector_of(const std::string& id) const { return backend_->get({by_id_.at(id)})[0]; }

std::vector<bool> Store::remove(const std::vector<std::string>& ids) {
  std::vector<bool> found(ids.size());
  std::vector<std::string> present;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    found[i] = by_id_.contains(ids[i]);
    if (found[i]) present.push_back(ids[i]);
  }
  if (present.empty()) return found;
  if (workspace_) workspace_->log_remove(present);
  apply_remove(present);
  maybe_snapshot();
  return found;
}

void Store::apply_remove(const std::vector<std::string>& ids) {
  std::vector<std::uint32_t> slots;
  for (const auto& id : ids) {
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) continue;
    slots.push_back(it->second);
    slots_[it->second].reset();
    free_.push_back(it->second);
    by_id_.erase(it);
  }
  if (backend_) backend_->remove(slots);
}

void Store::clear() {
  if (workspace_) workspace_->log_clear();
  apply_clear();
}

void Store::apply_clear() {
  slots_.clear();
  answer_bytes_.clear();
  free_.clear();
  by_id_.clear();
  if (backend_) backend_->clear();
}

std::vector<std::vector<Match>> Store::search(at::Tensor queries, std::size_t k, const Filter* filter, std::size_t ef) {
  const auto n = static_cast<std::size_t>(queries.size(0));
  std::vector<std::vector<Match>> out(n);
  if (!backend_ || by_id_.empty()) return out;
  if (queries.size(1) != static_cast<std::int64_t>(dim_)) {
    throw Error(fmt::format("a query of {} dimensions; the index holds vectors of {}", queries.size(1), dim_));
  }
  queries = prepared(std::move(queries));
  SlotMask allowed;
  std::size_t allowed_count = 0;
  const bool filtered = filter && !filter->empty();
  if (filtered) {
    allowed.assign(slots_.size(), 0);
    for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
      const auto& e = slots_[slot];
      if (e && filter->matches(FilterTarget{e->id, e->text, e->uri, e->tags})) {
        allowed[slot] = 1;
        ++allowed_count;
      }
    }
    if (allowed_count == 0) return out;
  }
  const auto hits = backend_->search(queries, k, filtered ? &allowed : nullptr, allowed_count, ef);
  for (std::size_t q = 0; q < n; ++q) {
    out[q].reserve(hits[q].size());
    for (const Hit& hit : hits[q]) {
      if (hit.slot < slots_.size() && slots_[hit.slot]) out[q].push_back({slots_[hit.slot].get(), hit.slot, hit.score});
    }
  }
  return out;
}

at::Tensor Store::rows_of(const std::vector<Match>& matches) const {
  std::vector<std::uint32_t> slots;
  slots.reserve(matches.size());
  for (const Match& m : matches) slots.push_back(m.slot);
  return backend_->get(slots);
}

Workspace::State Store::state() const {
  Workspace::State state;
  state.dim = dim_;
  state.metric = options_.metric;
  std::vector<std::uint32_t> slots;
  slots.reserve(by_id_.size());
  state.entries.reserve(by_id_.size());
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    if (!slots_[slot]) continue;
    state.entries.push_back(slots_[slot]);
    slots.push_back(static_cast<std::uint32_t>(slot));
  }
  state.rows = backend_ ? backend_->get(slots) : at::empty({0, static_cast<std::int64_t>(dim_)}, at::kFloat);
  return state;
}

void Store::snapshot(bool wait) {
  if (!workspace_) return;
  if (!wait) {
    if (!workspace_->snapshot_running()) workspace_->begin_snapshot(state(), /*rotate=*/true);
    return;
  }
  // A clean close: the snapshot being written, then one of the whole log unless nothing changed since. A
  // failure is logged by the workspace and loses nothing: the logs keep every change for the next start.
  try {
    workspace_->finish_snapshot();
  } catch (const std::exception&) {
  }
  if (!workspace_->has_changes() || !workspace_->begin_snapshot(state(), /*rotate=*/false, /*now=*/true)) return;
  try {
    workspace_->finish_snapshot();
  } catch (const std::exception&) {
  }
}

// After a change is on disk: a snapshot, when one is due, never fails the change (it was answered durable).
void Store::maybe_snapshot() noexcept {
  if (!workspace_) return;
  try {
    if (workspace_->snapshot_wanted(options_.snapshot_log_bytes)) workspace_->begin_snapshot(state(), true);
  } catch (const std::exception& e) {
    spdlog::error("workspace {}: a snapshot could not start: {}; every change is kept in the log",
                  workspace_->folder().string(), e.what());
  }
}

std::size_t Store::bytes() const {
  std::size_t total = backend_ ? backend_->bytes() : 0;
  for (const auto& e : slots_) {
    if (e) total += sizeof(Entry) + e->id.capacity() + e->text.capacity() + e->uri.capacity() + e->tags.size() * 64;
  }
  return total + by_id_.size() * 64;
}

}  // namespace flowline::vector_index
