// Packed batches on their way to the device: the checks every batch gets, its int64 layout, and the one
// copy that moves it up.
#include "cuda_kernels.hpp"
#include "transformer.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace flowline::models::detail {

std::pair<std::int64_t, std::int64_t> check_batch(const PackedBatch& batch, const ModelInfo& info) {
  std::int64_t total = 0, longest = 0;
  for (auto len : batch.lengths) {
    if (len < 1 || len > info.max_positions) {
      throw Error(fmt::format("sequence length {} outside 1..{}", len, info.max_positions));
    }
    total += len;
    longest = std::max(longest, len);
  }
  if (total != static_cast<std::int64_t>(batch.ids.size())) {
    throw Error(fmt::format("packed batch: {} ids but lengths add up to {}", batch.ids.size(), total));
  }
  for (const auto id : batch.ids) {
    if (id < 0 || id >= info.vocab_size) throw Error(fmt::format("token id {} outside the vocabulary", id));
  }
  if (!batch.type_ids.empty()) {
    if (batch.type_ids.size() != batch.ids.size()) {
      throw Error(fmt::format("packed batch: {} type ids for {} ids", batch.type_ids.size(), batch.ids.size()));
    }
    for (const auto t : batch.type_ids) {
      if (t < 0 || t >= info.type_vocab_size) {
        throw Error(fmt::format("token type id {} outside 0..{}", t, info.type_vocab_size - 1));
      }
    }
  }
  if (!batch.pooling_skip.empty()) {
    if (batch.pooling_skip.size() != batch.lengths.size()) {
      throw Error(fmt::format("packed batch: {} pooling skips for {} sequences", batch.pooling_skip.size(),
                              batch.lengths.size()));
    }
    for (std::size_t s = 0; s < batch.lengths.size(); ++s) {
      if (batch.pooling_skip[s] < 0 || batch.pooling_skip[s] >= batch.lengths[s]) {
        throw Error(
            fmt::format("sequence {}: pooling skips {} of its {} tokens", s, batch.pooling_skip[s], batch.lengths[s]));
      }
    }
  }
  return {total, longest};
}

void write_layout(const PackedBatch& batch, std::int64_t* ids, std::int64_t* positions, std::int64_t* lengths,
                  std::int64_t* offsets, std::int64_t slots) {
  const auto n = static_cast<std::int64_t>(batch.lengths.size());
  std::int64_t t = 0;
  offsets[0] = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t len = batch.lengths[static_cast<std::size_t>(s)];
    lengths[s] = len;
    offsets[s + 1] = offsets[s] + len;
    for (std::int64_t k = 0; k < len; ++k, ++t) {
      ids[t] = batch.ids[static_cast<std::size_t>(t)];
      positions[t] = k;
    }
  }
  for (std::int64_t s = n; s < slots; ++s) {
    lengths[s] = 0;
    offsets[s + 1] = t;
  }
}

std::int64_t padded_pass_tokens(std::int64_t tokens) noexcept {
  constexpr std::int64_t kSmallest = 256;
  if (tokens <= kSmallest) return kSmallest;
  // Eight sizes per power of two: m * 2^e with 8 <= m < 16.
  const int shift = std::max(0, static_cast<int>(std::bit_width(static_cast<std::uint64_t>(tokens - 1))) - 4);
  const std::int64_t step = std::int64_t{1} << shift;
  return (tokens + step - 1) / step * step;
}

// On a GPU the host side is pinned memory from the caching host allocator, which does not hand the block
// out again before the copy has completed, so the copy is asynchronous and safe.
DeviceBatch upload(const PackedBatch& batch, const ModelInfo& info, c10::Device device, bool packed,
                   std::int64_t pad_to) {
  const auto n = static_cast<std::int64_t>(batch.lengths.size());
  DeviceBatch out;
  std::tie(out.total, out.longest) = check_batch(batch, info);
  const std::int64_t real = out.total;
  const std::int64_t total = packed ? std::max(real, pad_to) : real;
  out.total = total;
  const bool cuda = device.is_cuda();
  const bool typed = !batch.type_ids.empty(), skips = !batch.pooling_skip.empty();
  // Layout: ids [T] | positions [T] | lengths [n] | offsets [n + 1] | type ids [T]? | pooling skips [n]? |
  // packed attention's work list?
  const std::int64_t tiles = packed ? attention_tiles_bound(total, n) : 0;
  const std::int64_t size = 2 * total + 2 * n + 1 + (typed ? total : 0) + (skips ? n : 0) + tiles;
  at::Tensor host = at::empty({size}, at::TensorOptions().dtype(at::kLong).pinned_memory(cuda));
  auto* ids = host.data_ptr<std::int64_t>();
  write_layout(batch, ids, ids + total, ids + 2 * total, ids + 2 * total + n, n);
  std::fill(ids + real, ids + total, 0);              // padding ids
  std::fill(ids + total + real, ids + 2 * total, 0);  // padding positions
  std::int64_t next = 2 * total + 2 * n + 1;
  if (typed) {
    std::copy(batch.type_ids.begin(), batch.type_ids.end(), ids + next);
    std::fill(ids + next + real, ids + next + total, 0);  // padding type ids
  }
  if (skips) std::copy(batch.pooling_skip.begin(), batch.pooling_skip.end(), ids + next + (typed ? total : 0));
  const std::int64_t tiles_at = size - tiles;
  if (packed) write_attention_tiles(batch.lengths.data(), n, ids + tiles_at, tiles);
  at::Tensor on_device = cuda ? host.to(device, /*non_blocking=*/true) : host;
  out.ids = on_device.narrow(0, 0, total);
  out.positions = on_device.narrow(0, total, total);
  out.lengths = on_device.narrow(0, 2 * total, n);
  out.offsets = on_device.narrow(0, 2 * total + n, n + 1);
  if (typed) out.type_ids = on_device.narrow(0, next, total);
  if (skips) out.pool_skip = on_device.narrow(0, next + (typed ? total : 0), n);
  out.packed = packed;
  if (packed) {
    out.cu_seqlens = out.offsets.to(at::kInt);
    out.attention_tiles = on_device.narrow(0, tiles_at, tiles);
  } else {
    std::int64_t t = 0;
    for (std::int64_t s = 0; s < n;) {
      std::int64_t e = s;
      while (e < n && batch.lengths[e] == batch.lengths[s]) ++e;
      out.groups.push_back(Group{t, e - s, batch.lengths[s]});
      t += (e - s) * batch.lengths[s];
      s = e;
    }
  }
  return out;
}

}  // namespace flowline::models::detail
