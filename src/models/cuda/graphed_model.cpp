// libflowline_models_cuda.so: an embedding model's forward passes captured as CUDA graphs, one
// per token bucket, and replayed on padded copies of each batch's layout. GraphedEmbeddingModel (graphs.cpp,
// in the CPU library) loads this the first time a replica on a GPU sets up graphs.
#include "../cuda_kernels.hpp"
#include "../graphs.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>

namespace flowline::models {
namespace {

using detail::DeviceBatch;

class CudaGraphs final : public GraphedEmbeddingModel::Impl {
 public:
  CudaGraphs(std::shared_ptr<const EmbeddingModel> shared, int64_t sequences, int64_t tokens, int64_t length) {
    c10::InferenceMode guard;
    model = std::move(shared);
    max_sequences = sequences;
    max_tokens = tokens;
    max_length = length;
    const c10::Device device = model->device();
    c10::cuda::CUDAGuard device_guard(device);
    // Zeros: valid ids and positions for the padding of every bucket.
    inputs_ = at::zeros({size()}, at::TensorOptions().dtype(at::kLong).device(device));
    for (auto& slot : staging_)
      slot.host = at::empty({size()}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    pool_ = at::cuda::graph_pool_handle();
  }

  void capture(int64_t tokens) override { graph_for(tokens); }

  at::Tensor replay(const PackedBatch& batch, int64_t total, int64_t tokens) override {
    const int64_t T = max_tokens, S = max_sequences;
    Graph& graph = graph_for(tokens);
    // The inputs in pinned memory, laid out as on the device, then one asynchronous copy.
    auto& slot = staging_[next_staging_++ % staging_.size()];
    if (slot.pending) slot.copied.synchronize();  // almost always long done
    auto* data = slot.host.data_ptr<int64_t>();
    detail::write_layout(batch, data, data + T, data + 2 * T, data + 2 * T + S, S);
    detail::write_attention_tiles(batch.lengths.data(), static_cast<int64_t>(batch.lengths.size()),
                                  data + 2 * T + 2 * S + 1, detail::attention_tiles_bound(tokens, S));
    std::fill(data + total, data + tokens, 0);          // padding ids
    std::fill(data + T + total, data + T + tokens, 0);  // padding positions
    inputs_.copy_(slot.host, /*non_blocking=*/true);
    slot.copied.record();
    slot.pending = true;
    graph.graph.replay();
    return graph.pooled.narrow(0, 0, static_cast<int64_t>(batch.lengths.size()));
  }

  std::size_t graph_count() const noexcept override { return graphs_.size(); }
  double capture_seconds() const noexcept override { return capture_seconds_; }

 private:
  struct Graph {
    at::cuda::CUDAGraph graph;
    at::Tensor pooled;  // [sequences, hidden] float32, written by each replay
  };
  // Pinned host copies of the inputs, used in turn: a pass writes its slot while earlier passes' copies
  // may still be queued on the stream; the slot's event says when its last copy has been done. Allocated
  // once, so no pass pays for pinning memory (cudaHostAlloc is slow and takes a driver-wide lock).
  struct Staging {
    at::Tensor host;
    at::cuda::CUDAEvent copied{cudaEventDisableTiming | cudaEventBlockingSync};  // waited on asleep
    bool pending = false;
  };

  int64_t size() const {
    return 2 * max_tokens + 2 * max_sequences + 1 + detail::attention_tiles_bound(max_tokens, max_sequences);
  }

  // The inputs as a DeviceBatch over `tokens` tokens (views of `inputs_`).
  DeviceBatch views(int64_t tokens) const {
    DeviceBatch b;
    b.ids = inputs_.narrow(0, 0, tokens);
    b.positions = inputs_.narrow(0, max_tokens, tokens);
    b.lengths = inputs_.narrow(0, 2 * max_tokens, max_sequences);
    b.offsets = inputs_.narrow(0, 2 * max_tokens + max_sequences, max_sequences + 1);
    b.attention_tiles =
        inputs_.narrow(0, 2 * max_tokens + 2 * max_sequences + 1, detail::attention_tiles_bound(tokens, max_sequences));
    b.total = tokens;
    b.longest = max_length;  // the bias table of packed attention covers this
    return b;
  }

  at::Tensor run(const DeviceBatch& b) const {
    DeviceBatch batch = b;
    batch.cu_seqlens = batch.offsets.to(at::kInt);
    batch.packed = true;
    return detail::GraphAccess::forward_and_pool(*model, batch);
  }

  Graph& graph_for(int64_t tokens) {
    auto& slot = graphs_[tokens];
    if (slot) return *slot;
    const auto start = std::chrono::steady_clock::now();
    const DeviceBatch batch = views(tokens);
    // Before the first capture, one eager pass on this thread and stream: library handles, workspaces
    // and kernels are set up outside the capture, where allocating and synchronising are allowed.
    if (graphs_.size() == 1) run(batch);
    auto graph = std::make_unique<Graph>();
    graph->graph.capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    graph->pooled = run(batch);
    graph->graph.capture_end();
    // The first launch of a graph uploads it to the device (milliseconds); do that now, not in a request.
    graph->graph.replay();
    capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    slot = std::move(graph);
    return *slot;
  }

  // Inputs every graph reads, at fixed addresses: ids [max_tokens] | positions [max_tokens] |
  // lengths [max_sequences] | offsets [max_sequences + 1] | packed attention's work list (as long as the
  // largest graph needs; each graph reads its own bucket's bound), int64.
  at::Tensor inputs_;
  at::cuda::MempoolId_t pool_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;  // by token bucket
  double capture_seconds_ = 0;
  std::array<Staging, 4> staging_;
  std::size_t next_staging_ = 0;
};

}  // namespace
}  // namespace flowline::models

extern "C" __attribute__((visibility("default"))) flowline::models::GraphedEmbeddingModel::Impl*
flowline_models_make_graphs(std::shared_ptr<const flowline::models::EmbeddingModel> model, int64_t max_sequences,
                            int64_t max_tokens, int64_t max_length) {
  return new flowline::models::CudaGraphs(std::move(model), max_sequences, max_tokens, max_length);
}
