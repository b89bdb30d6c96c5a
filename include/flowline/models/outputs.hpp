// flowline/models/outputs.hpp — what a model's per-document outputs (embeddings, scores) must be before an
// executor hands them out: finite numbers, and unit vectors computed without overflow.
//
// A model can give one document NaN or infinity while the others of its batch are fine: NaN weights reached
// only by some tokens, an fp16 overflow on one long text, a Dense layer that overflows for some inputs.
// Sequences are packed without padding, so a non-finite value stays in the rows of the documents it came
// from. Such an output is never to be returned as a number (JSON "nan", a NaN query searched, a NaN stored):
//
//   at::Tensor host = ...;                               // the request's outputs [n, d] or [n], in its order
//   const auto bad = models::nonfinite_rows(host);       // the documents whose outputs are not finite
//   if (!bad.empty()) throw models::NonFiniteOutput(bad, "embedding", n);  // or fail only those documents
//
// nonfinite_rows() reads the outputs (on a GPU it waits for the current stream), so call it where the
// outputs are read anyway: after the copy to the host. EmbeddingModel::encode() and CrossEncoderModel::score()
// never check (they only enqueue work, and CUDA graphs replay them).
//
// normalize_rows() is the one L2 normalization of the room: the Normalize module and the SentenceEncoder's
// `normalize: true` use it. A float32 vector can be finite while its squared norm is not ([3e38] x 8): on
// the host each row is scaled by its largest magnitude first, so its norm is computed in range and it comes
// out the unit vector it should, never a zero or NaN vector (on a GPU, see normalize_rows()).
#pragma once

#include "flowline/error.hpp"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::models {

// The rows (positions along dimension 0) of `outputs` — [n] or [n, ...], floating point, any device — that
// hold a NaN or an infinity, in increasing order; empty when every value is finite. Waits for the device.
std::vector<std::size_t> nonfinite_rows(const at::Tensor& outputs);
// The same over values already on the host, one per document (the Reranker's scores by pair).
std::vector<std::size_t> nonfinite_rows(std::span<const float> values);

// Some documents' outputs are not finite. what(): "document 3 of 8: its embedding holds NaN or infinity
// (...)", or "documents 3, 5 of 8: ..." (at most 10 listed, then how many more); rows() lists them all.
class NonFiniteOutput : public Error {
 public:
  // `rows`: as nonfinite_rows() gives them (not empty); `what`: the output's name ("embedding", "score");
  // `total`: the documents of the request.
  NonFiniteOutput(std::vector<std::size_t> rows, std::string_view what, std::size_t total);
  const std::vector<std::size_t>& rows() const noexcept { return rows_; }

 private:
  std::vector<std::size_t> rows_;
};

// Throws NonFiniteOutput when some row of `outputs` is not finite (nonfinite_rows(); waits for the device).
void check_finite(const at::Tensor& outputs, std::string_view what);

// The same check split around a wait the caller makes anyway, for outputs that stay on a GPU: the
// constructor enqueues each row's finiteness on the current stream and its copy into pinned host memory
// (no wait); after the caller has waited for that stream, check() reads the flags and throws as
// check_finite() does. So a request whose embeddings stay on the device waits for it once, not three times
// (nonfinite_rows() waits for a nonzero() and a copy). On the host the constructor does nothing and check()
// is check_finite(). Used on the thread that enqueued the outputs; `outputs` must not change in between.
class FiniteCheck {
 public:
  explicit FiniteCheck(const at::Tensor& outputs);
  void check(std::string_view what) const;

 private:
  at::Tensor outputs_;  // on the host: the outputs themselves
  at::Tensor flags_;    // on a GPU: one bool per row, true where finite, in pinned host memory
};

// Each row of x [n, d] (floating point, any device) divided by its L2 norm, or by 1e-12 where the norm is
// smaller (torch.nn.functional.normalize's eps, as sentence-transformers' Normalize): a zero row stays zero.
// On the host, each row is scaled by its largest magnitude first, so no finite row overflows or underflows in
// float32. On a GPU it is the three-kernel float formula (launch-bound models pay for every kernel): a
// float32 row with values past ~1e19 comes out zero there (a known limit, until a fused kernel). A row
// holding a NaN or an infinity comes out with NaNs (nonfinite_rows() finds it). Enqueues work only (no
// value is read back): usable inside a CUDA graph.
at::Tensor normalize_rows(const at::Tensor& x);

}  // namespace flowline::models
