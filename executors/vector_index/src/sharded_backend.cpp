// The exact backend sharded over several devices (`devices: [cuda:0, cuda:1]`): slot s lives in shard
// s % N as that shard's slot s / N, so the shards stay even as the store hands out and reuses dense slots.
// A search runs on every shard at once (a thread per shard, each on its own device) and merges their
// best k per query; every shard is exact, so the merge is too.
#include "exact_backend.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <future>

namespace flowline::vector_index {

namespace {

class ShardedBackend : public VectorBackend {
 public:
  ShardedBackend(Metric metric, std::size_t dim, const ExactOptions& options) : metric_(metric) {
    for (const auto& device : options.devices) {
      ExactOptions one = options;
      one.device = device;
      one.devices.clear();
      shards_.push_back(make_exact_backend(metric, dim, one));
    }
    devices_ = options.devices;
    half_ = options.half;
  }

  const char* name() const override { return "exact"; }
  std::string where() const override {
    return fmt::format("{} ({} shards), {}", fmt::join(devices_, " + "), shards_.size(), half_ ? "fp16" : "fp32");
  }

  void set(const std::vector<std::uint32_t>& slots, const at::Tensor& rows) override {
    c10::InferenceMode guard;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      std::vector<std::uint32_t> local;
      std::vector<std::int64_t> picked;
      for (std::size_t r = 0; r < slots.size(); ++r) {
        if (slots[r] % shards_.size() != i) continue;
        local.push_back(static_cast<std::uint32_t>(slots[r] / shards_.size()));
        picked.push_back(static_cast<std::int64_t>(r));
      }
      if (local.empty()) continue;
      shards_[i]->set(local, rows.index_select(0, at::tensor(picked, at::kLong)));
    }
  }

  void remove(const std::vector<std::uint32_t>& slots) override {
    const auto split = split_slots(slots);
    for (std::size_t i = 0; i < shards_.size(); ++i) shards_[i]->remove(split[i]);
  }

  void clear() override {
    for (auto& shard : shards_) shard->clear();
  }

  at::Tensor get(const std::vector<std::uint32_t>& slots) const override {
    c10::InferenceMode guard;
    const std::int64_t n = static_cast<std::int64_t>(slots.size());
    const auto split = split_slots(slots);
    at::Tensor out;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      if (split[i].empty()) continue;
      const at::Tensor rows = shards_[i]->get(split[i]);
      if (!out.defined()) out = at::empty({n, rows.size(1)}, at::kFloat);
      std::vector<std::int64_t> at_rows;
      for (std::int64_t r = 0; r < n; ++r) {
        if (slots[static_cast<std::size_t>(r)] % shards_.size() == i) at_rows.push_back(r);
      }
      out.index_copy_(0, at::tensor(at_rows, at::kLong), rows);
    }
    return out.defined() ? out : shards_.front()->get({});
  }

  std::vector<std::vector<Hit>> search(const at::Tensor& queries, std::size_t k, const SlotMask* allowed,
                                       std::size_t allowed_count, std::size_t ef) override {
    (void)allowed_count;  // each shard counts its own part of the mask
    const std::size_t n = shards_.size();
    std::vector<SlotMask> masks(allowed ? n : 0);
    std::vector<std::size_t> counts(n, 0);
    if (allowed) {
      for (std::size_t i = 0; i < n; ++i) masks[i].resize((allowed->size() + n - 1 - i) / n);
      for (std::size_t s = 0; s < allowed->size(); ++s) {
        masks[s % n][s / n] = (*allowed)[s];
        counts[s % n] += (*allowed)[s] ? 1 : 0;
      }
    }
    std::vector<std::future<std::vector<std::vector<Hit>>>> parts;
    for (std::size_t i = 0; i < n; ++i) {
      parts.push_back(std::async(std::launch::async, [&, i] {
        c10::InferenceMode guard;
        return shards_[i]->search(queries, k, allowed ? &masks[i] : nullptr, counts[i], ef);
      }));
    }
    std::vector<std::vector<std::vector<Hit>>> found;
    for (auto& part : parts) found.push_back(part.get());  // rethrows a shard's failure
    std::vector<std::vector<Hit>> hits(static_cast<std::size_t>(queries.size(0)));
    const bool higher = higher_is_better(metric_);
    for (std::size_t q = 0; q < hits.size(); ++q) {
      auto& out = hits[q];
      for (std::size_t i = 0; i < n; ++i) {
        for (const Hit& h : found[i][q]) out.push_back({static_cast<std::uint32_t>(h.slot * n + i), h.score});
      }
      const auto better = [higher](const Hit& a, const Hit& b) {
        if (a.score != b.score) return higher ? a.score > b.score : a.score < b.score;
        return a.slot < b.slot;
      };
      const std::size_t keep = std::min(k, out.size());
      std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep), out.end(), better);
      out.resize(keep);
    }
    return hits;
  }

  std::size_t bytes() const override {
    std::size_t total = 0;
    for (const auto& shard : shards_) total += shard->bytes();
    return total;
  }

 private:
  std::vector<std::vector<std::uint32_t>> split_slots(const std::vector<std::uint32_t>& slots) const {
    std::vector<std::vector<std::uint32_t>> split(shards_.size());
    for (const std::uint32_t s : slots)
      split[s % shards_.size()].push_back(static_cast<std::uint32_t>(s / shards_.size()));
    return split;
  }

  Metric metric_;
  bool half_ = false;
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<VectorBackend>> shards_;
};

}  // namespace

std::unique_ptr<VectorBackend> make_sharded_backend(Metric metric, std::size_t dim, const ExactOptions& options) {
  return std::make_unique<ShardedBackend>(metric, dim, options);
}

}  // namespace flowline::vector_index
