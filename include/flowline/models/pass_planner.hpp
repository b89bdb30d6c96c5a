// flowline/models/pass_planner.hpp — one planner of forward passes for every model head: a request's
// tokenized sequences sorted by length, cut into passes within a budget, packed, and each pass's outputs
// put back in the request's order.
//
// A head maps one packed pass (a PackedBatch) to outputs per sequence (an embedding model's Pooling, Dense
// and Normalize; a cross-encoder's classifier; a sequence classifier) or per token (a token classifier).
// Its executor tokenizes a request, then loops over the planner's passes:
//
//   planner.plan({ids, offsets, type_ids, pooling_skip});  // sort, budget, pack: nothing runs yet
//   rows = planner.order() as int64 on the outputs' device  // once a request
//   for (const Pass& pass : planner.passes())
//     scatter_rows(out, rows, pass, head(pass.batch));     // out[input row] = the pass's row
//
// - Order: longest first, stable (sequences of one length keep the request's order), so each pass holds
//   sequences of similar length; passes follow each other in order(), pass.first being where one starts.
// - Budget: at most max_sequences sequences a pass and, when max_tokens is not 0, at most max_tokens tokens
//   (a sequence longer than max_tokens goes alone). The executors' `batch_size` and `max_batch_tokens`;
//   'auto' is calibrate_budget() below, which measures the head's passes on the GPU.
// - Packing: no padding. The pass's ids (and type ids, when the request has them) are copied once into the
//   planner's buffers, which the passes' spans point into until the next plan().
// - Pooling skips: `pooling_skip` tokens at each sequence's start that pooling leaves out (a prompt, when
//   the Pooling module says include_prompt: false), capped at the sequence's length - 1.
// - Out of memory: a pass that runs out of device memory throws c10::OutOfMemoryError out of the handler,
//   and the flow's replica retries the request's documents in halves (src/core/runtime/replica.hpp); the
//   planner holds nothing across plan() calls that a failed request would leave wrong.
//
// A planner belongs to one replica (not thread-safe); it reuses its buffers from request to request.
#pragma once

#include "flowline/models/embedding_model.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace flowline {
class ExecutorMetrics;  // flowline/executor.hpp
}

namespace flowline::models {

// Limits of one forward pass.
struct PassBudget {
  std::size_t max_sequences = 64;  // batch_size
  std::size_t max_tokens = 0;      // max_batch_tokens; 0: no limit
};

// One forward pass of a plan.
struct Pass {
  PackedBatch batch;                       // its sequences, packed, longest first
  std::span<const std::size_t> sequences;  // each of its sequences' index in the request (batch order)
  std::size_t first = 0;                   // where it starts in the plan's order()
  std::size_t first_token = 0;             // where its tokens start among the plan's packed tokens
};

class PassPlanner {
 public:
  // A request's tokenized sequences: sequence i is ids[offsets[i], offsets[i + 1]) (offsets has one more
  // entry than there are sequences, starting at 0), with type_ids[...] the same range when type_ids is not
  // empty.
  struct Sequences {
    std::span<const std::int32_t> ids;
    std::span<const std::size_t> offsets;
    std::span<const std::int32_t> type_ids = {};
    std::int64_t pooling_skip = 0;  // tokens pooling leaves out at each sequence's start; 0: none
  };

  explicit PassPlanner(PassBudget budget = {}) : budget_(budget) {}

  // Plans the passes of `sequences` (see above); the previous plan's passes are gone.
  void plan(const Sequences& sequences);

  std::span<const Pass> passes() const noexcept { return passes_; }
  // Each planned row's index in the request, pass after pass: order()[pass.first + r] == pass.sequences[r].
  std::span<const std::size_t> order() const noexcept { return order_; }
  // Each planned token's index among the request's ids, pass after pass (for per-token outputs: the token
  // t of a pass is its request's token token_order()[pass.first_token + t]).
  std::vector<std::int64_t> token_order() const;
  std::size_t sequence_count() const noexcept { return order_.size(); }
  std::size_t token_count() const noexcept { return ids_.size(); }

  const PassBudget& budget() const noexcept { return budget_; }
  void set_budget(PassBudget budget) noexcept { budget_ = budget; }

 private:
  PassBudget budget_;
  std::vector<std::size_t> order_;
  std::vector<std::int32_t> ids_, type_ids_;
  std::vector<std::int64_t> lengths_, skips_;
  std::vector<std::size_t> token_starts_;  // each planned row's first token in the request's ids
  std::vector<Pass> passes_;
};

// What an executor reports of a request's passes, under the names every model executor shares and `flowline
// profile` reads (its tokens column and per-token memory fit): forward_passes, graph_passes, tokens,
// max_forward_tokens, max_forward_sequences. One a handler call, on the replica's thread: add() each pass run,
// then report() once.
struct PassFigures {
  double passes = 0, graph_passes = 0, tokens = 0, max_tokens = 0, max_sequences = 0;

  void add(const Pass& pass, bool graphed = false);
  void report(ExecutorMetrics& metrics) const;
};

// Per-sequence outputs back in the request's order: out[pass.sequences[r]] = outputs[r] for each row r of
// the pass. `rows` is the plan's order() as an int64 tensor on out's device (moved there once a request).
void scatter_rows(at::Tensor& out, const at::Tensor& rows, const Pass& pass, const at::Tensor& outputs);
// Per-token outputs the same way: `tokens` is token_order() as an int64 tensor on out's device, out has a row
// for each of the request's ids and outputs one for each of the pass's tokens.
void scatter_tokens(at::Tensor& out, const at::Tensor& tokens, const Pass& pass, const at::Tensor& outputs);

// Budgets 'auto' (a GPU): runs passes of max_length-token sequences through `run_pass(sequences)` (which
// returns once the device is done), fits the peak memory of two sizes to bytes per token + a fixed part,
// and sizes the budget's 'auto' parts so that `replicas` such replicas on the device together stay within
// `memory_fraction` of the memory free now. max_tokens: the tokens that fit (at most 2^21); max_sequences:
// those tokens at max_length (1..8192, and at least max_tokens / 16 where max_tokens is set). Throws
// flowline::Error when the budget does not fit one sequence, or the device's free memory cannot be read.
// Callers serialise calibrations on one device (the peak statistics are the device's).
struct AutoBudget {
  bool sequences = false, tokens = false;  // which of the budget's sizes are 'auto'
  std::size_t max_length = 0;              // tokens of the longest sequence
  double memory_fraction = 0.9;
  std::size_t replicas = 1;  // replicas sharing the device's memory
};
struct Calibration {
  double bytes_per_token = 0, fixed_bytes = 0;  // of a pass, measured
  double budget_bytes = 0, free_bytes = 0;      // this replica's share, and the device's free memory
};
Calibration calibrate_budget(PassBudget& budget, const AutoBudget& automatic, c10::Device device,
                             const std::function<void(std::size_t sequences)>& run_pass);

// The passes a head executor runs at start (`warmup: true`: the TokenClassifier, Reranker, SequenceClassifier), so
// that its first requests pay neither for CUDA, cuBLAS and the caching allocator's set-up nor for kernels met for
// the first time. On a GPU: the largest pass a request can make (`max_sequences` sequences of `max_length` tokens,
// at most 2^15 tokens) first, so that the allocator's blocks for it serve the smaller passes, then one pass of every
// power of two of tokens below it down to 256 (the sizes passes are padded to, HeadedTransformer), in sequences of
// up to 128 tokens; cuBLAS picks a GEMM kernel for each new shape, milliseconds for the first of a kind
// (docs/benchmarks.md, seed 4's passes). On the CPU one sequence of up to 16 tokens (the cost there is compute,
// not set-up). Each pass's ids cycle through `text` (real ids of the tokenizer, special tokens too; not empty);
// `run_pass` runs one pass and returns once the device is done, on the caller's thread and stream.
void warm_up_passes(c10::Device device, std::size_t max_sequences, std::size_t max_length,
                    std::span<const std::int32_t> text, const std::function<void(const PackedBatch& pass)>& run_pass);

}  // namespace flowline::models
