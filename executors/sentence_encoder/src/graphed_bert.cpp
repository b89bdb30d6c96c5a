// GraphedBertEncoder: the BERT encoder's forward passes captured as CUDA graphs, one per token bucket, and
// replayed on padded copies of each batch's layout.
#include "flowline/sentence_encoder/bert.hpp"

#include "flowline/error.hpp"
#include "bert_internal.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <map>

namespace flowline::sentence_encoder {

std::int64_t GraphedBertEncoder::bucket(std::int64_t tokens) noexcept {
  constexpr std::int64_t kSmallest = 256;
  if (tokens <= kSmallest) return kSmallest;
  // Eight sizes per power of two: m * 2^e with 8 <= m < 16, so a pass pads at most 1/8 of its tokens.
  const int shift = std::max(0, static_cast<int>(std::bit_width(static_cast<std::uint64_t>(tokens - 1))) - 4);
  const std::int64_t step = std::int64_t{1} << shift;
  return (tokens + step - 1) / step * step;
}

struct GraphedBertEncoder::Impl {
  struct Graph {
    at::cuda::CUDAGraph graph;
    at::Tensor pooled;  // [sequences, hidden] float32, written by each replay
  };
  std::shared_ptr<const BertEncoder> encoder;
  int64_t max_sequences = 0, max_tokens = 0, max_length = 0;
  // Inputs every graph reads, at fixed addresses: ids [max_tokens] | positions [max_tokens] |
  // lengths [max_sequences] | offsets [max_sequences + 1], int64.
  at::Tensor inputs;
  at::cuda::MempoolId_t pool;
  std::map<int64_t, std::unique_ptr<Graph>> graphs;  // by token bucket
  double capture_seconds = 0;
  // Pinned host copies of the inputs, used in turn: a pass writes its slot while earlier passes' copies
  // may still be queued on the stream; the slot's event says when its last copy has been done. Allocated
  // once, so no pass pays for pinning memory (cudaHostAlloc is slow and takes a driver-wide lock).
  struct Staging {
    at::Tensor host;
    at::cuda::CUDAEvent copied{cudaEventDisableTiming | cudaEventBlockingSync};  // waited on asleep
    bool pending = false;
  };
  std::array<Staging, 4> staging;
  std::size_t next_staging = 0;

  int64_t size() const { return 2 * max_tokens + 2 * max_sequences + 1; }

  // The inputs as a DeviceBatch over `tokens` tokens (views of `inputs`).
  BertEncoder::DeviceBatch views(int64_t tokens) const {
    BertEncoder::DeviceBatch b;
    b.ids = inputs.narrow(0, 0, tokens);
    b.positions = inputs.narrow(0, max_tokens, tokens);
    b.lengths = inputs.narrow(0, 2 * max_tokens, max_sequences);
    b.offsets = inputs.narrow(0, 2 * max_tokens + max_sequences, max_sequences + 1);
    b.total = tokens;
    b.longest = max_length;  // flash attention's grid covers this; shorter sequences end early
    return b;
  }

  at::Tensor run(const BertEncoder::DeviceBatch& b) const {
    BertEncoder::DeviceBatch batch = b;
    batch.cu_seqlens = batch.offsets.to(at::kInt);
    return encoder->pool(encoder->forward(batch), batch);
  }

  Graph& graph_for(int64_t tokens) {
    auto& slot = graphs[tokens];
    if (slot) return *slot;
    const auto start = std::chrono::steady_clock::now();
    const BertEncoder::DeviceBatch batch = views(tokens);
    // Before the first capture, one eager pass on this thread and stream: library handles, workspaces
    // and kernels are set up outside the capture, where allocating and synchronising are allowed.
    if (graphs.size() == 1) run(batch);
    auto graph = std::make_unique<Graph>();
    graph->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    graph->pooled = run(batch);
    graph->graph.capture_end();
    // The first launch of a graph uploads it to the device (milliseconds); do that now, not in a request.
    graph->graph.replay();
    capture_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    slot = std::move(graph);
    return *slot;
  }
};

GraphedBertEncoder::GraphedBertEncoder(std::shared_ptr<const BertEncoder> encoder, std::int64_t max_sequences,
                                       std::int64_t max_tokens, std::int64_t max_length)
    : impl_(std::make_unique<Impl>()) {
  if (!encoder->uses_flash_attention()) {
    throw Error("CUDA graphs need the encoder on a GPU in fp16 or bf16 (flash attention over packed tokens)");
  }
  if (max_sequences < 1 || max_tokens < 1 || max_length < 1) throw Error("CUDA graphs: sizes must be at least 1");
  c10::InferenceMode guard;
  impl_->encoder = std::move(encoder);
  impl_->max_tokens = bucket(max_tokens);
  impl_->max_sequences = std::min(max_sequences, impl_->max_tokens);
  impl_->max_length = max_length;
  const c10::Device device = impl_->encoder->device();
  c10::cuda::CUDAGuard device_guard(device);
  // Zeros: valid ids and positions for the padding of every bucket.
  impl_->inputs = at::zeros({impl_->size()}, at::TensorOptions().dtype(at::kLong).device(device));
  for (auto& slot : impl_->staging)
    slot.host = at::empty({impl_->size()}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  impl_->pool = at::cuda::graph_pool_handle();
}

GraphedBertEncoder::~GraphedBertEncoder() = default;

bool GraphedBertEncoder::fits(const PackedBatch& batch) const noexcept {
  if (static_cast<int64_t>(batch.lengths.size()) > impl_->max_sequences ||
      static_cast<int64_t>(batch.ids.size()) > impl_->max_tokens) {
    return false;
  }
  return std::all_of(batch.lengths.begin(), batch.lengths.end(), [&](int64_t len) { return len <= impl_->max_length; });
}

std::int64_t GraphedBertEncoder::max_tokens() const noexcept { return impl_->max_tokens; }
std::int64_t GraphedBertEncoder::max_sequences() const noexcept { return impl_->max_sequences; }
std::size_t GraphedBertEncoder::graph_count() const noexcept { return impl_->graphs.size(); }
double GraphedBertEncoder::capture_seconds() const noexcept { return impl_->capture_seconds; }

void GraphedBertEncoder::capture_all() {
  c10::InferenceMode guard;
  for (int64_t tokens = bucket(1);; tokens = bucket(tokens + 1)) {
    impl_->graph_for(std::min(tokens, impl_->max_tokens));
    if (tokens >= impl_->max_tokens) break;
  }
}

at::Tensor GraphedBertEncoder::encode(const PackedBatch& batch) {
  if (!fits(batch)) {
    throw Error(fmt::format(
        "CUDA graphs: a pass of {} sequences and {} tokens is outside the graphs' {} sequences, {} "
        "tokens and {} tokens per sequence",
        batch.lengths.size(), batch.ids.size(), impl_->max_sequences, impl_->max_tokens, impl_->max_length));
  }
  c10::InferenceMode guard;
  const int64_t total = detail::check_batch(batch, impl_->encoder->config().bert).first;
  const int64_t tokens = bucket(total), T = impl_->max_tokens, S = impl_->max_sequences;
  Impl::Graph& graph = impl_->graph_for(tokens);
  // The inputs in pinned memory, laid out as on the device, then one asynchronous copy.
  auto& slot = impl_->staging[impl_->next_staging++ % impl_->staging.size()];
  if (slot.pending) slot.copied.synchronize();  // almost always long done
  auto* data = slot.host.data_ptr<int64_t>();
  detail::write_layout(batch, data, data + T, data + 2 * T, data + 2 * T + S, S);
  std::fill(data + total, data + tokens, 0);          // padding ids
  std::fill(data + T + total, data + T + tokens, 0);  // padding positions
  impl_->inputs.copy_(slot.host, /*non_blocking=*/true);
  slot.copied.record();
  slot.pending = true;
  graph.graph.replay();
  return graph.pooled.narrow(0, 0, static_cast<int64_t>(batch.lengths.size()));
}
}  // namespace flowline::sentence_encoder
