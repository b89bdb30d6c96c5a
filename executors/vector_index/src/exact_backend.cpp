// The exact backend: every stored row scored against every query with one matrix product per block of
// queries, then top-k — on the CPU (BLAS through LibTorch) or resident on a GPU (cuBLAS, fp16 or fp32).
#include "exact_backend.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

namespace flowline::vector_index {

const char* metric_name(Metric metric) {
  switch (metric) {
    case Metric::cosine:
      return "cosine";
    case Metric::inner_product:
      return "inner_product";
    case Metric::l2:
      return "l2";
  }
  return "?";
}

namespace {

// Scores computed at once per block of queries: queries x rows at most this many elements (2 GiB of fp16
// scores on a GPU, where larger blocks read the stored rows fewer times; 256 MiB on the CPU).
constexpr std::int64_t kGpuBlockElements = std::int64_t{1} << 30;
constexpr std::int64_t kCpuBlockElements = std::int64_t{1} << 26;
// Columns per chunk of the GPU's two-step top-k (chunked_topk).
constexpr std::int64_t kChunk = 512;
// fp16 storage up to this many elements (rows x dim of capacity) keeps an fp32 copy beside it (at most 128 MiB),
// scored directly: one product and one top-k, where the fp16 path's rescoring of its candidates takes about ten
// more kernel launches — most of a served search's time over a small index (issue 49 §3).
constexpr std::int64_t kMirrorElements = std::int64_t{1} << 25;

class ExactBackend : public VectorBackend {
 public:
  ExactBackend(Metric metric, std::size_t dim, const ExactOptions& options)
      : metric_(metric), dim_(static_cast<std::int64_t>(dim)), device_(options.device) {
    if (options.half && device_.is_cpu()) {
      throw Error("the exact backend stores fp16 only on a GPU (on the CPU fp16 products are slow): use fp32");
    }
    dtype_ = options.half ? at::kHalf : at::kFloat;
    c10::InferenceMode guard;
    reserve(1024);
  }

  const char* name() const override { return "exact"; }
  std::string where() const override {
    return fmt::format("{}, {}", device_.str(), dtype_ == at::kHalf ? "fp16" : "fp32");
  }

  void set(const std::vector<std::uint32_t>& slots, const at::Tensor& rows) override {
    if (slots.empty()) return;
    c10::InferenceMode guard;
    const std::uint32_t top = *std::max_element(slots.begin(), slots.end());
    reserve(static_cast<std::int64_t>(top) + 1);
    mark(slots, 1);
    const at::Tensor index = slot_tensor(slots);
    const at::Tensor values = rows.to(device_, dtype_);
    rows_.index_copy_(0, index, values);
    if (mirror_.defined()) mirror_.index_copy_(0, index, values.to(at::kFloat));
    live_.index_fill_(0, index, true);
    if (metric_ == Metric::l2) norms_.index_copy_(0, index, rows.to(device_).pow(2).sum(1));
  }

  void remove(const std::vector<std::uint32_t>& slots) override {
    if (slots.empty()) return;
    c10::InferenceMode guard;
    mark(slots, 0);
    live_.index_fill_(0, slot_tensor(slots), false);
  }

  void clear() override {
    c10::InferenceMode guard;
    live_.zero_();
    live_host_.clear();
    used_ = 0;
    dead_ = 0;
  }

  at::Tensor get(const std::vector<std::uint32_t>& slots) const override {
    c10::InferenceMode guard;
    if (slots.empty()) return at::empty({0, dim_}, at::kFloat);
    return rows_.index_select(0, slot_tensor(slots)).to(at::kCPU, at::kFloat);
  }

  std::vector<std::vector<Hit>> search(const at::Tensor& queries, std::size_t k, const SlotMask* allowed,
                                       std::size_t allowed_count, std::size_t /*ef*/) override {
    c10::InferenceMode guard;
    const std::int64_t n = queries.size(0);
    std::vector<std::vector<Hit>> hits(static_cast<std::size_t>(n));
    const std::int64_t live = used_ - dead_;
    const std::int64_t usable = allowed ? static_cast<std::int64_t>(allowed_count) : live;
    const std::int64_t kk = std::min<std::int64_t>(static_cast<std::int64_t>(k), usable);
    if (kk <= 0 || n == 0) return hits;
    at::Tensor blocked;  // rows a search must not return; undefined when every stored row may be returned
    if (allowed) {
      blocked = live_.narrow(0, 0, used_).logical_and(mask_tensor(*allowed)).logical_not_();
    } else if (dead_ > 0) {
      blocked = live_.narrow(0, 0, used_).logical_not();
    }
    const std::int64_t block =
        std::max<std::int64_t>(1, (device_.is_cpu() ? kCpuBlockElements : kGpuBlockElements) / used_);
    for (std::int64_t first = 0; first < n; first += block) {
      throw_if_cancelled("the exact search");  // between blocks of queries: each a bounded matrix product
      const std::int64_t count = std::min(block, n - first);
      const at::Tensor q = queries.narrow(0, first, count).to(device_, at::kFloat);
      auto [values, indices] = top(q, kk, blocked, usable);
      at::Tensor query_norms;
      if (metric_ == Metric::l2) query_norms = q.pow(2).sum(1);
      to_host({&values, &indices, &query_norms});
      collect(values, indices, query_norms, hits, static_cast<std::size_t>(first));
    }
    return hits;
  }

  std::size_t bytes() const override {
    return static_cast<std::size_t>(rows_.numel() * rows_.element_size() + mirror_.numel() * 4 + live_.numel() +
                                    norms_.numel() * 4);
  }

 private:
  // The best kk rows for each query of `q` (float [count, dim] on the device): their scores (higher is
  // better; l2: 2 q.v - |v|^2) and slots. One matrix product in the storage dtype, then top-k; with fp16
  // storage the top 2 kk are scored again in fp32 (the stored rows against the fp32 query) and cut to kk,
  // so that the order and the scores do not carry fp16's rounding of the products. A small fp16 store scores its
  // fp32 copy (mirror_) instead: the same values as the rescoring, every row exact, in two kernels.
  std::pair<at::Tensor, at::Tensor> top(const at::Tensor& q, std::int64_t kk, const at::Tensor& blocked,
                                        std::int64_t usable) const {
    if (mirror_.defined()) {
      at::Tensor scores = at::mm(q, mirror_.narrow(0, 0, used_).t());
      if (metric_ == Metric::l2) scores.mul_(2).sub_(norms_.narrow(0, 0, used_));
      if (blocked.defined()) scores.masked_fill_(blocked, -std::numeric_limits<float>::infinity());
      auto [values, indices] = chunked_topk(scores, kk);
      return {values, indices};
    }
    const at::Tensor rows = rows_.narrow(0, 0, used_);
    at::Tensor scores = at::mm(q.to(dtype_), rows.t());
    if (metric_ == Metric::l2) scores = scores.to(at::kFloat).mul_(2).sub_(norms_.narrow(0, 0, used_));
    if (blocked.defined()) scores.masked_fill_(blocked, -std::numeric_limits<float>::infinity());
    const bool rescore = dtype_ == at::kHalf;
    const std::int64_t wide = rescore ? std::min(usable, std::max(2 * kk, kk + 8)) : kk;
    auto [values, indices] = chunked_topk(scores, wide);
    if (!rescore) return {values.to(at::kFloat), indices};
    const at::Tensor candidates = rows.index_select(0, indices.reshape({-1})).view({q.size(0), wide, dim_});
    at::Tensor exact = at::bmm(candidates.to(at::kFloat), q.unsqueeze(2)).squeeze(2);
    if (metric_ == Metric::l2) exact = exact.mul_(2).sub_(norms_.index_select(0, indices.reshape({-1})).view_as(exact));
    exact.masked_fill_(values.isneginf(), -std::numeric_limits<float>::infinity());
    auto [best, order] = at::topk(exact, kk, 1, /*largest=*/true, /*sorted=*/true);
    return {best, indices.gather(1, order)};
  }

  // The `k` largest scores of each row of `scores` ([n, used_]) and their columns, sorted. In two
  // steps that read the scores about once: the maximum of each chunk of kChunk columns, the k chunks of
  // the largest maxima, then the top k of those chunks' columns. Exact: if an element of the top k were in
  // another chunk, the k chosen chunks would each hold an element at least as large, so it would not be in
  // the top k (ties aside, which may resolve to another column of the same score). A single top-k over 1M
  // columns reads and sorts far more (at::topk: 7 ms for 1,024 queries over 1M rows on an H100; this: ~1 ms).
  std::tuple<at::Tensor, at::Tensor> chunked_topk(const at::Tensor& scores, std::int64_t k) const {
    const std::int64_t n = scores.size(0), columns = scores.size(1), chunks = columns / kChunk;
    if (chunks < 4 * k) return at::topk(scores, k, 1, /*largest=*/true, /*sorted=*/true);
    const std::int64_t whole = chunks * kChunk;  // the columns of whole chunks; the rest is searched on its own
    const at::Tensor body = scores.narrow(1, 0, whole).view({n, chunks, kChunk});
    const at::Tensor best_chunks = std::get<1>(at::topk(body.amax(2), k, 1, /*largest=*/true, /*sorted=*/false));
    const at::Tensor picked = body.gather(1, best_chunks.unsqueeze(2).expand({n, k, kChunk})).view({n, k * kChunk});
    auto [values, at_picked] = at::topk(picked, k, 1, /*largest=*/true, /*sorted=*/false);
    at::Tensor columns_of =
        best_chunks.gather(1, at::div(at_picked, kChunk, "floor")).mul_(kChunk).add_(at_picked.remainder(kChunk));
    if (whole < columns) {
      const std::int64_t rest = std::min(k, columns - whole);
      auto [tail_values, tail_columns] = at::topk(scores.narrow(1, whole, columns - whole), rest, 1, true, false);
      values = at::cat({values, tail_values}, 1);
      columns_of = at::cat({columns_of, tail_columns.add_(whole)}, 1);
    }
    auto [sorted, order] = at::topk(values, k, 1, /*largest=*/true, /*sorted=*/true);
    return {sorted, columns_of.gather(1, order)};
  }

  // Host-side liveness, so that a search knows without the device whether any stored row is dead.
  void mark(const std::vector<std::uint32_t>& slots, std::uint8_t alive) {
    for (const std::uint32_t slot : slots) {
      if (slot >= live_host_.size()) {
        // New slots beyond the end: any gap between is dead until set.
        dead_ += static_cast<std::int64_t>(slot - live_host_.size());
        live_host_.resize(slot + 1, 0);
        used_ = static_cast<std::int64_t>(live_host_.size());
        dead_ += alive ? 0 : 1;
      } else if (live_host_[slot] != alive) {
        dead_ += alive ? -1 : 1;
      }
      live_host_[slot] = alive;
    }
  }

  // The search's results on the host, contiguous, with one wait for the device: on a GPU each is copied into
  // pinned memory on the current stream without blocking, then the stream is waited for once (a plain
  // .to(kCPU) per tensor would wait for the device each time). The wait is the stream's own synchronize (the
  // CUDA context's scheduling, a spin while the machine has cores to spare), not wait_for_stream's sleep: a
  // served search is latency-bound, and waking from the sleep cost a query ~0.1 ms on an H200.
  // Undefined tensors are left as they are.
  void to_host(std::initializer_list<at::Tensor*> tensors) const {
    if (!device_.is_cuda()) {
      for (at::Tensor* t : tensors) {
        if (t->defined()) *t = t->contiguous();
      }
      return;
    }
    for (at::Tensor* t : tensors) {
      if (!t->defined()) continue;
      at::Tensor host = at::empty(t->sizes(), t->options().device(at::kCPU).pinned_memory(true));
      host.copy_(*t, /*non_blocking=*/true);
      *t = std::move(host);
    }
    c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_).synchronize();
  }

  void collect(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& query_norms,
               std::vector<std::vector<Hit>>& hits, std::size_t first) const {
    const auto* v = values.data_ptr<float>();
    const auto* idx = indices.data_ptr<std::int64_t>();
    const std::int64_t kk = values.size(1);
    for (std::int64_t r = 0; r < values.size(0); ++r) {
      auto& out = hits[first + static_cast<std::size_t>(r)];
      out.reserve(static_cast<std::size_t>(kk));
      for (std::int64_t c = 0; c < kk; ++c) {
        float score = v[r * kk + c];
        if (score == -std::numeric_limits<float>::infinity()) break;  // fewer usable rows than k
        if (metric_ == Metric::l2) score = std::sqrt(std::max(0.0f, query_norms.data_ptr<float>()[r] - score));
        out.push_back({static_cast<std::uint32_t>(idx[r * kk + c]), score});
      }
    }
  }

  at::Tensor slot_tensor(const std::vector<std::uint32_t>& slots) const {
    at::Tensor index = at::empty({static_cast<std::int64_t>(slots.size())}, at::kLong);
    std::copy(slots.begin(), slots.end(), index.data_ptr<std::int64_t>());
    return index.to(device_);
  }

  at::Tensor mask_tensor(const SlotMask& allowed) const {
    at::Tensor mask = at::zeros({used_}, at::kBool);
    const std::int64_t n = std::min<std::int64_t>(used_, static_cast<std::int64_t>(allowed.size()));
    std::copy_n(allowed.data(), n, reinterpret_cast<std::uint8_t*>(mask.data_ptr<bool>()));
    return mask.to(device_);
  }

  // Storage for at least `rows` rows (doubling, so that n inserts copy O(n) rows in all).
  void reserve(std::int64_t rows) {
    const std::int64_t capacity = rows_.defined() ? rows_.size(0) : 0;
    if (rows <= capacity) return;
    const std::int64_t grown = std::max(rows, capacity * 2);
    const auto options = at::TensorOptions().device(device_);
    at::Tensor new_rows = at::zeros({grown, dim_}, options.dtype(dtype_));
    at::Tensor new_live = at::zeros({grown}, options.dtype(at::kBool));
    at::Tensor new_norms = at::zeros({metric_ == Metric::l2 ? grown : 0}, options.dtype(at::kFloat));
    at::Tensor new_mirror;  // fp16 storage while small: its fp32 copy (top())
    if (dtype_ == at::kHalf && grown * dim_ <= kMirrorElements)
      new_mirror = at::zeros({grown, dim_}, options.dtype(at::kFloat));
    if (capacity) {
      new_rows.narrow(0, 0, capacity).copy_(rows_);
      if (new_mirror.defined()) new_mirror.narrow(0, 0, capacity).copy_(mirror_);
      new_live.narrow(0, 0, capacity).copy_(live_);
      if (metric_ == Metric::l2) new_norms.narrow(0, 0, capacity).copy_(norms_);
    }
    rows_ = std::move(new_rows);
    mirror_ = std::move(new_mirror);
    live_ = std::move(new_live);
    norms_ = std::move(new_norms);
  }

  Metric metric_;
  std::int64_t dim_;
  c10::Device device_;
  at::ScalarType dtype_ = at::kFloat;
  at::Tensor rows_, live_, norms_;       // [capacity, dim], [capacity] bool, [capacity] |row|^2 (l2 only)
  at::Tensor mirror_;                    // fp16 storage of at most kMirrorElements: rows_ in fp32, else undefined
  std::vector<std::uint8_t> live_host_;  // live_ of rows [0, used_), on the host
  std::int64_t used_ = 0;                // rows [0, used_) may be live
  std::int64_t dead_ = 0;                // rows of [0, used_) that are not
};

}  // namespace

std::unique_ptr<VectorBackend> make_exact_backend(Metric metric, std::size_t dim, const ExactOptions& options) {
  if (options.devices.size() > 1) return make_sharded_backend(metric, dim, options);
  return std::make_unique<ExactBackend>(metric, dim, options);
}

// The backend table's row (backends.cpp): `device` or `devices`, and `dtype`.
BackendRow exact_backend_row() {
  BackendRow row;
  row.name = "exact";
  row.help = "every vector scored (GPU or CPU)";
  row.parameters = {
      ParamSpec::optional("device", ParamType::String, "",
                          "exact backend: cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
      ParamSpec::optional("devices", ParamType::StringList, boost::json::array{},
                          "exact backend: shard the vectors over these devices (e.g. [cuda:0, cuda:1]; each "
                          "holds every Nth vector, a query searches all at once and their top matches merge); "
                          "replaces device"),
      ParamSpec::choice("dtype", {"auto", "fp32", "fp16"}, "auto",
                        "exact backend: how vectors are stored (auto: fp16 on a GPU, fp32 on the CPU)")};
  row.make = [](const BackendSettings& settings) {
    const auto devices = settings.with.get<std::vector<std::string>>("devices");
    const std::string device_parameter = settings.with.get<std::string>("device");
    if (!devices.empty() && !device_parameter.empty())
      throw Error(fmt::format("executor '{}': give either device or devices, not both", settings.executor));
    const c10::Device device = executor_device(devices.empty() ? device_parameter : devices.front(), settings.device);
    ExactOptions options;
    options.device = device.str();
    for (const auto& d : devices) options.devices.push_back(executor_device(d, settings.device).str());
    if (options.devices.size() == 1) options.devices.clear();
    const std::string dtype = settings.with.get<std::string>("dtype");
    options.half = dtype == "fp16" || (dtype == "auto" && device.is_cuda());
    return BackendPlan{[options](Metric metric, std::size_t dim) { return make_exact_backend(metric, dim, options); },
                       device};
  };
  return row;
}

}  // namespace flowline::vector_index
