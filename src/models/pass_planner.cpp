// PassPlanner: a request's sequences sorted by length, cut into passes within a budget and packed; outputs
// scattered back in the request's order; budgets 'auto' calibrated on the device.
#include "flowline/models/pass_planner.hpp"

#include "flowline/device.hpp"
#include "flowline/executor.hpp"
#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace flowline::models {

void PassPlanner::plan(const Sequences& sequences) {
  const std::size_t n = sequences.offsets.empty() ? 0 : sequences.offsets.size() - 1;
  const auto& offsets = sequences.offsets;
  const bool typed = !sequences.type_ids.empty();
  const auto length = [&](std::size_t s) { return offsets[s + 1] - offsets[s]; };
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return length(a) > length(b); });
  ids_.clear();
  type_ids_.clear();
  lengths_.clear();
  skips_.clear();
  token_starts_.clear();
  passes_.clear();
  ids_.reserve(sequences.ids.size());
  if (typed) type_ids_.reserve(sequences.ids.size());
  // Where each pass lies in the packed buffers; the spans are made once the buffers are complete.
  struct Cut {
    std::size_t first, end, first_token, end_token;
  };
  std::vector<Cut> cuts;
  const std::size_t max_sequences = std::max<std::size_t>(1, budget_.max_sequences);
  for (std::size_t start = 0; start < n;) {
    const std::size_t first_token = ids_.size();
    std::size_t end = start;
    while (end < n && end - start < max_sequences) {
      const std::size_t s = order_[end];
      const std::size_t len = length(s);
      if (budget_.max_tokens != 0 && end > start && ids_.size() - first_token + len > budget_.max_tokens) break;
      const auto from = static_cast<std::ptrdiff_t>(offsets[s]), to = static_cast<std::ptrdiff_t>(offsets[s + 1]);
      ids_.insert(ids_.end(), sequences.ids.begin() + from, sequences.ids.begin() + to);
      if (typed) type_ids_.insert(type_ids_.end(), sequences.type_ids.begin() + from, sequences.type_ids.begin() + to);
      lengths_.push_back(static_cast<std::int64_t>(len));
      token_starts_.push_back(offsets[s]);
      if (sequences.pooling_skip > 0)
        skips_.push_back(std::min<std::int64_t>(sequences.pooling_skip, static_cast<std::int64_t>(len) - 1));
      ++end;
    }
    cuts.push_back({start, end, first_token, ids_.size()});
    start = end;
  }
  for (const Cut& c : cuts) {
    const std::size_t count = c.end - c.first, token_count = c.end_token - c.first_token;
    Pass pass;
    pass.batch.ids = std::span<const std::int32_t>(ids_).subspan(c.first_token, token_count);
    pass.batch.lengths = std::span<const std::int64_t>(lengths_).subspan(c.first, count);
    if (typed) pass.batch.type_ids = std::span<const std::int32_t>(type_ids_).subspan(c.first_token, token_count);
    if (!skips_.empty()) pass.batch.pooling_skip = std::span<const std::int64_t>(skips_).subspan(c.first, count);
    pass.sequences = std::span<const std::size_t>(order_).subspan(c.first, count);
    pass.first = c.first;
    pass.first_token = c.first_token;
    passes_.push_back(pass);
  }
}

std::vector<std::int64_t> PassPlanner::token_order() const {
  std::vector<std::int64_t> out;
  out.reserve(ids_.size());
  for (std::size_t r = 0; r < order_.size(); ++r) {
    const auto start = static_cast<std::int64_t>(token_starts_[r]);
    for (std::int64_t t = 0; t < lengths_[r]; ++t) out.push_back(start + t);
  }
  return out;
}

void scatter_rows(at::Tensor& out, const at::Tensor& rows, const Pass& pass, const at::Tensor& outputs) {
  out.index_copy_(
      0, rows.narrow(0, static_cast<std::int64_t>(pass.first), static_cast<std::int64_t>(pass.sequences.size())),
      outputs);
}

void scatter_tokens(at::Tensor& out, const at::Tensor& tokens, const Pass& pass, const at::Tensor& outputs) {
  out.index_copy_(
      0,
      tokens.narrow(0, static_cast<std::int64_t>(pass.first_token), static_cast<std::int64_t>(pass.batch.ids.size())),
      outputs);
}

void warm_up_passes(c10::Device device, std::size_t max_sequences, std::size_t max_length,
                    std::span<const std::int32_t> text, const std::function<void(const PackedBatch& pass)>& run_pass) {
  constexpr std::size_t kMaxTokens = 1 << 15, kSmallest = 256, kLadderLength = 128, kCpuLength = 16;
  if (text.empty() || max_length == 0) throw Error("warm_up_passes: no text or no length");
  std::vector<std::pair<std::size_t, std::size_t>> passes;  // (tokens, sequence length)
  if (device.is_cuda()) {
    const std::size_t most =
        std::max<std::size_t>(1, std::min(kMaxTokens, std::max<std::size_t>(1, max_sequences) * max_length));
    passes.emplace_back(most, max_length);
    std::size_t tokens = kSmallest;
    while (tokens * 2 < most) tokens *= 2;
    for (; tokens >= kSmallest && tokens < most; tokens /= 2)
      passes.emplace_back(tokens, std::min(kLadderLength, max_length));
  } else {
    passes.emplace_back(std::min(kCpuLength, max_length), max_length);
  }
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  for (const auto [tokens, length] : passes) {
    lengths.assign(tokens / length, static_cast<std::int64_t>(length));
    if (tokens % length != 0) lengths.push_back(static_cast<std::int64_t>(tokens % length));
    ids.clear();
    for (const std::int64_t n : lengths) {
      for (std::int64_t i = 0; i < n; ++i) ids.push_back(text[static_cast<std::size_t>(i) % text.size()]);
    }
    run_pass(PackedBatch{ids, lengths, {}, {}});
  }
}

Calibration calibrate_budget(PassBudget& budget, const AutoBudget& automatic, c10::Device device,
                             const std::function<void(std::size_t sequences)>& run_pass) {
  constexpr std::size_t kMaxAutoSequences = 8192, kMaxAutoTokens = 1 << 21;
  const std::size_t max_length = automatic.max_length;
  auto peak_for = [&](std::size_t sequences) {
    reset_device_peaks(device);
    const auto before = device_memory(device)->allocated;
    run_pass(sequences);
    return static_cast<double>(device_memory(device)->peak_allocated - before);
  };
  const std::size_t small = 16, large = 64;
  peak_for(small);  // the first pass pays for library workspaces; not measured
  const double p_small = peak_for(small), p_large = peak_for(large);
  const double tokens_small = static_cast<double>(small * max_length);
  const double tokens_large = static_cast<double>(large * max_length);
  Calibration c;
  c.bytes_per_token = std::max(1.0, (p_large - p_small) / (tokens_large - tokens_small));
  c.fixed_bytes = std::max(0.0, p_small - c.bytes_per_token * tokens_small);
  // Memory the caching allocator holds but does not use counts as free: it is this process's to reuse.
  release_cached_memory();
  const auto free_total = device_free_total(device);
  if (!free_total) throw Error(fmt::format("batch sizing 'auto': the free memory of {} cannot be read", device.str()));
  c.free_bytes = static_cast<double>(free_total->first);
  c.budget_bytes = automatic.memory_fraction * c.free_bytes / static_cast<double>(automatic.replicas);
  const double tokens = std::max(0.0, (c.budget_bytes - c.fixed_bytes) / c.bytes_per_token);
  const auto tokens_fit = static_cast<std::size_t>(tokens);
  if (tokens_fit < max_length) {
    throw Error(
        fmt::format("batch sizing 'auto': a budget of {:.0f} MiB ({:.0f}% of {:.0f} MiB free, over {} replica(s)) "
                    "does not fit one sequence of {} tokens ({:.0f} bytes per token)",
                    c.budget_bytes / (1 << 20), automatic.memory_fraction * 100, c.free_bytes / double(1 << 20),
                    automatic.replicas, max_length, c.bytes_per_token));
  }
  if (automatic.tokens) budget.max_tokens = std::min(tokens_fit, kMaxAutoTokens);
  if (automatic.sequences) {
    const std::size_t limit = budget.max_tokens != 0 ? std::min(tokens_fit, budget.max_tokens) : tokens_fit;
    budget.max_sequences = std::clamp<std::size_t>(limit / max_length, 1, kMaxAutoSequences);
    if (budget.max_tokens != 0)
      budget.max_sequences = std::min(kMaxAutoSequences, std::max(budget.max_sequences, budget.max_tokens / 16));
  }
  return c;
}

void PassFigures::add(const Pass& pass, bool graphed) {
  const auto pass_tokens = static_cast<double>(pass.batch.ids.size());
  passes += 1;
  graph_passes += graphed ? 1 : 0;
  tokens += pass_tokens;
  max_tokens = std::max(max_tokens, pass_tokens);
  max_sequences = std::max(max_sequences, static_cast<double>(pass.sequences.size()));
}

void PassFigures::report(ExecutorMetrics& metrics) const {
  metrics.add("forward_passes", passes);
  metrics.add("graph_passes", graph_passes);
  metrics.add("tokens", tokens);
  metrics.set_max("max_forward_tokens", max_tokens);
  metrics.set_max("max_forward_sequences", max_sequences);
}

}  // namespace flowline::models
