// The hnsw backend: hnswlib's graph (Debian's libhnswlib-dev, header-only) on the CPU, labels = slots.
// Updates re-insert a label (hnswlib updates its vector and links); deletes mark it deleted, so it is never
// returned, and a later set() of the slot revives it.
//
// Filters: hnswlib 0.6 searches without a predicate, so a filter is applied after the search (post-filter),
// widening the search (k x 4 each round) until k allowed rows are found or the whole index was asked for.
// When the filter allows few rows (at most a tenth of the live ones, or fewer than 4,096), those rows are
// scored exactly instead: recall 1 and cheaper than a wide graph search.
//
// Distances are distance.hpp's kernels, chosen for the CPU at run time (AVX-512, AVX2 or portable), given to
// hnswlib as a space of their own: hnswlib 0.6.2 picks its kernels when it is compiled, and they run one
// dependent add per step.
#include "backend.hpp"
#include "distance.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#if FLOWLINE_HAVE_HNSWLIB
#include <hnswlib/hnswlib.h>
#endif

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <queue>

namespace flowline::vector_index {
namespace {

struct HnswOptions {
  std::size_t m = 16;                 // graph degree
  std::size_t ef_construction = 200;  // candidate list while inserting
  std::size_t ef_search = 64;         // candidate list while searching (at least k)
};

}  // namespace

#if FLOWLINE_HAVE_HNSWLIB

namespace {

// hnswlib's space (the size of a stored vector, its distance and the distance's parameter) over the chosen
// kernels.
class KernelSpace final : public hnswlib::SpaceInterface<float> {
 public:
  KernelSpace(Metric metric, std::size_t dim)
      : dim_(dim),
        distance_(metric == Metric::l2 ? distance_kernels().l2_squared : distance_kernels().inner_product_distance) {}
  std::size_t get_data_size() override { return dim_ * sizeof(float); }
  hnswlib::DISTFUNC<float> get_dist_func() override { return distance_; }
  void* get_dist_func_param() override { return &dim_; }

 private:
  std::size_t dim_;
  hnswlib::DISTFUNC<float> distance_;
};

class HnswBackend : public VectorBackend {
 public:
  HnswBackend(Metric metric, std::size_t dim, const HnswOptions& options)
      : metric_(metric), dim_(dim), options_(options), space_(std::make_unique<KernelSpace>(metric, dim)) {
    reset();
  }

  const char* name() const override { return "hnsw"; }
  std::string where() const override {
    return fmt::format("cpu, fp32 ({}), M {}, ef_construction {}, ef_search {}", distance_kernels().isa, options_.m,
                       options_.ef_construction, options_.ef_search);
  }

  void set(const std::vector<std::uint32_t>& slots, const at::Tensor& rows) override {
    const at::Tensor r = rows.contiguous();
    const float* data = r.data_ptr<float>();
    const std::size_t needed = graph_->cur_element_count + slots.size();
    if (needed > graph_->max_elements_) {
      graph_->resizeIndex(std::max(needed, graph_->max_elements_ * 2));
      advise_huge_pages();
    }
    // hnswlib inserts concurrently (per-element locks): the rows are spread over LibTorch's CPU threads.
    const auto n = static_cast<std::int64_t>(slots.size());
    at::parallel_for(0, n, 64, [&](std::int64_t first, std::int64_t end) {
      for (std::int64_t i = first; i < end; ++i) graph_->addPoint(data + i * static_cast<std::int64_t>(dim_), slots[i]);
    });
    for (const std::uint32_t slot : slots) {
      if (slot >= live_.size()) live_.resize(slot + 1, 0);
      live_count_ += live_[slot] ? 0 : 1;
      live_[slot] = 1;
    }
  }

  void remove(const std::vector<std::uint32_t>& slots) override {
    for (const std::uint32_t slot : slots) {
      if (slot >= live_.size() || !live_[slot]) continue;
      graph_->markDelete(slot);
      live_[slot] = 0;
      --live_count_;
    }
  }

  void clear() override { reset(); }

  at::Tensor get(const std::vector<std::uint32_t>& slots) const override {
    at::Tensor out = at::empty({static_cast<std::int64_t>(slots.size()), static_cast<std::int64_t>(dim_)}, at::kFloat);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const std::vector<float> row = graph_->template getDataByLabel<float>(slots[i]);
      std::copy(row.begin(), row.end(), out[static_cast<std::int64_t>(i)].data_ptr<float>());
    }
    return out;
  }

  std::vector<std::vector<Hit>> search(const at::Tensor& queries, std::size_t k, const SlotMask* allowed,
                                       std::size_t allowed_count, std::size_t ef_asked) override {
    const at::Tensor q = queries.contiguous();
    std::vector<std::vector<Hit>> hits(static_cast<std::size_t>(q.size(0)));
    if (live_count_ == 0 || k == 0) return hits;
    const bool few = allowed && (allowed_count * 10 <= live_count_ || allowed_count < 4096);
    const float* data = q.data_ptr<float>();
    const std::size_t ef = std::max(ef_asked ? ef_asked : options_.ef_search, k);
    // Queries are spread over LibTorch's CPU threads, each taking the next query as it finishes one (queries
    // differ in cost: a graph walk is as long as its path); hnswlib's search is safe to run concurrently.
    const std::int64_t n = q.size(0);
    std::atomic<std::int64_t> next{0};
    const auto run = [&](std::int64_t, std::int64_t) {
      for (std::int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
        const float* query = data + i * static_cast<std::int64_t>(dim_);
        hits[static_cast<std::size_t>(i)] = few ? scan(query, k, *allowed) : graph_search(query, k, ef, allowed);
      }
    };
    at::parallel_for(0, std::min<std::int64_t>(n, at::get_num_threads()), 1, run);
    return hits;
  }

  std::size_t bytes() const override {
    // The level-0 block (vectors and links) plus the upper levels' links, as hnswlib allocates them.
    std::size_t total = graph_->max_elements_ * graph_->size_data_per_element_;
    for (std::size_t i = 0; i < graph_->cur_element_count; ++i) {
      if (graph_->element_levels_[i] > 0) {
        total += graph_->size_links_per_element_ * static_cast<std::size_t>(graph_->element_levels_[i]);
      }
    }
    return total + live_.size();
  }

 private:
  float score_of(float distance) const {
    // hnswlib's distances: 1 - q.v for the inner product, the squared distance for l2.
    return metric_ == Metric::l2 ? std::sqrt(std::max(0.0f, distance)) : 1.0f - distance;
  }

  // The `asked` nearest, found with a candidate list of at least `width` (the index's ef_search or more).
  // hnswlib's searchKnn is this walk, but it counts its hops in two atomics every concurrent search shares
  // (its metrics), a cache line the threads pass back and forth at every hop; and it takes the list size
  // from setEf, shared state. Here: the greedy descent through the upper levels, then hnswlib's own
  // base-layer search without the counting.
  std::priority_queue<std::pair<float, hnswlib::labeltype>> search_knn(const float* query, std::size_t asked,
                                                                       std::size_t width) const {
    const hnswlib::HierarchicalNSW<float>& g = *graph_;
    std::priority_queue<std::pair<float, hnswlib::labeltype>> found;
    if (g.cur_element_count == 0) return found;
    const hnswlib::DISTFUNC<float> distance = space_->get_dist_func();
    const void* param = space_->get_dist_func_param();
    hnswlib::tableint current = g.enterpoint_node_;
    float best = distance(query, g.getDataByInternalId(current), param);
    for (int level = g.maxlevel_; level > 0; --level) {
      for (bool closer = true; closer;) {
        closer = false;
        const hnswlib::linklistsizeint* links = g.get_linklist(current, level);
        const auto* neighbours = reinterpret_cast<const hnswlib::tableint*>(links + 1);
        const unsigned short count = g.getListCount(const_cast<hnswlib::linklistsizeint*>(links));
        for (unsigned short i = 0; i < count; ++i) {
          const float d = distance(query, g.getDataByInternalId(neighbours[i]), param);
          if (d < best) {
            best = d;
            current = neighbours[i];
            closer = true;
          }
        }
      }
    }
    const std::size_t ef = std::max(g.ef_, width);
    auto top = g.num_deleted_ ? g.template searchBaseLayerST<true, false>(current, query, ef)
                              : g.template searchBaseLayerST<false, false>(current, query, ef);
    while (top.size() > asked) top.pop();  // the farthest first
    for (; !top.empty(); top.pop()) found.emplace(top.top().first, g.getExternalLabel(top.top().second));
    return found;
  }

  std::vector<Hit> graph_search(const float* query, std::size_t k, std::size_t ef, const SlotMask* allowed) {
    for (std::size_t asked = k;; asked = std::min(asked * 4, live_count_)) {
      auto found = search_knn(query, asked, std::max(ef, asked));
      std::vector<Hit> out;
      out.reserve(found.size());
      for (; !found.empty(); found.pop()) {
        const auto [distance, label] = found.top();
        const auto slot = static_cast<std::uint32_t>(label);
        if (!allowed || (slot < allowed->size() && (*allowed)[slot])) out.push_back({slot, score_of(distance)});
      }
      std::reverse(out.begin(), out.end());  // the queue pops the farthest first
      if (out.size() >= k || asked >= live_count_) {
        if (out.size() > k) out.resize(k);
        return out;
      }
    }
  }

  // Exact scores of the allowed live rows.
  std::vector<Hit> scan(const float* query, std::size_t k, const SlotMask& allowed) const {
    std::vector<Hit> out;
    const auto distance = space_->get_dist_func();
    void* param = space_->get_dist_func_param();
    for (std::size_t slot = 0; slot < std::min(allowed.size(), live_.size()); ++slot) {
      if (!allowed[slot] || !live_[slot]) continue;
      const auto internal = graph_->label_lookup_.at(slot);
      out.push_back(
          {static_cast<std::uint32_t>(slot), score_of(distance(query, graph_->getDataByInternalId(internal), param))});
    }
    const bool higher = higher_is_better(metric_);
    const auto better = [higher](const Hit& a, const Hit& b) { return higher ? a.score > b.score : a.score < b.score; };
    const std::size_t kept = std::min(k, out.size());
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(kept), out.end(), better);
    out.resize(kept);
    return out;
  }

  // The graph's base layer (each vector with its links, ~1.6 KB at 384 dimensions) is read at random by every
  // hop of a search: on 2 MiB pages the TLB covers a million vectors, on 4 KiB pages most hops miss it. Linux's
  // transparent huge pages in `madvise` mode (Debian's default) give them only where asked; the advice is
  // given again after every resize (hnswlib reallocates the block). Failure only means small pages.
  void advise_huge_pages() const {
#ifdef MADV_HUGEPAGE
    constexpr std::uintptr_t kPage = 4096, kHuge = 2u << 20;
    const auto begin = reinterpret_cast<std::uintptr_t>(graph_->data_level0_memory_);
    const std::uintptr_t end = begin + graph_->max_elements_ * graph_->size_data_per_element_;
    const std::uintptr_t first = (begin + kPage - 1) & ~(kPage - 1), last = end & ~(kPage - 1);
    if (last > first + kHuge) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
  }

  void reset() {
    graph_ =
        std::make_unique<hnswlib::HierarchicalNSW<float>>(space_.get(), 1024, options_.m, options_.ef_construction);
    graph_->setEf(options_.ef_search);
    live_.clear();
    live_count_ = 0;
  }

  Metric metric_;
  std::size_t dim_;
  HnswOptions options_;
  std::unique_ptr<KernelSpace> space_;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> graph_;
  SlotMask live_;
  std::size_t live_count_ = 0;
};

std::unique_ptr<VectorBackend> make_hnsw_backend(Metric metric, std::size_t dim, const HnswOptions& options) {
  return std::make_unique<HnswBackend>(metric, dim, options);
}

}  // namespace

#else

namespace {

std::unique_ptr<VectorBackend> make_hnsw_backend(Metric, std::size_t, const HnswOptions&) { return nullptr; }

}  // namespace

#endif

// The backend table's row (backends.cpp): the graph's `m`, `ef_construction` and `ef_search`.
BackendRow hnsw_backend_row() {
  BackendRow row;
  row.name = "hnsw";
  row.help = "hnswlib's graph on the CPU";
  row.parameters = {
      ParamSpec::optional("m", ParamType::Int, 16, "hnsw: graph degree").min(2),
      ParamSpec::optional("ef_construction", ParamType::Int, 200, "hnsw: candidates while inserting").min(1),
      ParamSpec::optional("ef_search", ParamType::Int, 64, "hnsw: candidates while searching (at least limit)").min(1)};
  row.make = [](const BackendSettings& settings) {
    if (!FLOWLINE_HAVE_HNSWLIB) {
      throw Error(
          "backend 'hnsw': this flowline was built without hnswlib (Debian: apt-get install libhnswlib-dev, then "
          "rebuild); use backend 'exact'");
    }
    if (settings.device.is_cuda()) {
      spdlog::warn("executor '{}': the hnsw backend runs on the CPU; its device {} is not used", settings.executor,
                   settings.device.str());
    }
    HnswOptions options;
    options.m = settings.with.get<std::size_t>("m");
    options.ef_construction = settings.with.get<std::size_t>("ef_construction");
    options.ef_search = settings.with.get<std::size_t>("ef_search");
    return BackendPlan{[options](Metric metric, std::size_t dim) { return make_hnsw_backend(metric, dim, options); },
                       c10::Device(c10::kCPU)};
  };
  return row;
}

}  // namespace flowline::vector_index
