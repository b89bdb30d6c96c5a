// DeBERTa-v2 and -v3 (model_type "deberta-v2"), as transformers' modeling_deberta_v2 runs them: BERT-style
// post-LayerNorm layers whose attention scores add disentangled terms — content-to-position (c2p: each query
// against the relative position embedding of its distance to the key) and position-to-content (p2c: each key
// against the one of the query's distance to it) — over relative distances bucketed logarithmically
// (position_buckets, max_relative_positions), the position projections shared with the content ones
// (share_att_key) or their own (pos_key_proj, pos_query_proj), relative embeddings normalized (norm_rel_ebd),
// scores scaled by 1 / sqrt(head_dim * (1 + the number of those terms)). Absolute positions and token types only
// where config.json has them (DeBERTa-v3 has neither). The convolution layer of DeBERTa-v2's larger checkpoints
// (conv_kernel_size) is refused.
//
// The c2p and p2c terms depend on the query's or key's content as well as the distance, so they are tables
// computed per layer from q and k: each token against the relative embeddings its sequence reaches. The pass's
// sequences go in a few segments of similar lengths (the tables' width follows the segment's longest). On a
// GPU in fp16/bf16 with heads of 64, each segment's attention is flowline's packed kernel, which gathers each
// score's two terms from the tables (no padding, no [L, L] bias in memory); elsewhere each segment is padded to
// its longest and run as one scaled_dot_product_attention call with the terms gathered into a bias and the
// padding as its mask. Not the packed kernel of the other architectures' graphs, and so without CUDA graphs.
#include "../cuda_kernels.hpp"
#include "../transformer.hpp"
#include "deberta_v2_config.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

namespace flowline::models::detail {

namespace {

// transformers' make_log_bucket_position, op for op in float32 (so the buckets are the reference's): distances
// under position_buckets / 2 kept, longer ones logarithmic up to max_relative_positions. `relative` holds
// query position - key position.
at::Tensor log_buckets(const at::Tensor& relative, std::int64_t buckets, std::int64_t max_position) {
  const std::int64_t mid = buckets / 2;
  const at::Tensor sign = at::sign(relative);
  const at::Tensor abs_pos =
      at::where((relative < mid) & (relative > -mid), at::scalar_tensor(mid - 1, at::kLong), at::abs(relative));
  const at::Tensor log_base =
      at::log(at::scalar_tensor(static_cast<double>(max_position - 1) / static_cast<double>(mid), at::kFloat));
  const at::Tensor log_pos =
      at::ceil(at::log(abs_pos.to(at::kFloat) / static_cast<double>(mid)) / log_base * static_cast<double>(mid - 1)) +
      static_cast<double>(mid);
  return at::where(abs_pos <= mid, relative.to(at::kFloat), log_pos * sign).to(at::kLong);
}

// The c2p and p2c terms of one layer: the relative embeddings through the layer's projections, [2 * span,
// heads, head_dim] in the model's dtype (made once when the model loads: they depend on weights only).
struct PositionTerms {
  at::Tensor key;    // c2p: the queries against these (undefined without c2p)
  at::Tensor query;  // p2c: the keys against these (undefined without p2c)
};

class DebertaV2 final : public Transformer {
 public:
  explicit DebertaV2(const ArchitectureContext& context) : config_(context) {
    info_.architecture = "DeBERTa-v2/v3 (disentangled attention, relative position buckets)";
    info_.vocab_size = config_.vocab;
    info_.hidden_size = config_.hidden;
    info_.num_layers = config_.layers;
    info_.num_heads = config_.heads;
    info_.intermediate_size = config_.intermediate;
    info_.max_positions = config_.positions;
    // Without a token type table transformers ignores type ids; 1 makes the cross-encoder pass none.
    info_.type_vocab_size = std::max<std::int64_t>(config_.types, 1);
    scale_ = 1.0 / std::sqrt(static_cast<double>(config_.hidden / config_.heads * config_.scale_factor()));
    load(context);
  }

  // The c2p and p2c terms do not fit the packed kernel (its bias is looked up by offset only): attention runs
  // padded by segments (segments_of), so the batch comes unpacked, with its groups.
  bool uses_packed_attention(const ArchitectureContext&) const override { return false; }

  at::Tensor forward(const DeviceBatch& batch) const override {
    const std::int64_t H = info_.hidden_size, heads = info_.num_heads, head_dim = H / heads;
    at::Tensor x = at::embedding(word_, batch.ids);
    if (position_.defined()) x = x + at::embedding(position_, batch.positions);
    if (token_type_.defined()) {
      x = batch.type_ids.defined() ? x + at::embedding(token_type_, batch.type_ids) : x + token_type_[0];
    }
    if (embed_proj_.defined()) x = at::linear(x, embed_proj_);
    x = at::layer_norm(x, {H}, emb_ln_w_, emb_ln_b_, config_.eps);
    const std::int64_t total = batch.ids.size(0);
    const bool fused = fused_attention(x);
    const std::vector<Segment> segments = segments_of(batch, x.scalar_type(), fused);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const Layer& l = layers_[i];
      const at::Tensor qkv = at::linear(x, l.qkv_w, l.qkv_b);  // [T, 3H]
      const at::Tensor q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
      const at::Tensor k = qkv.narrow(1, H, H).view({total, heads, head_dim});
      const at::Tensor v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
      const PositionTerms* terms = terms_.empty() ? nullptr : &terms_[i];
      at::Tensor context;
      if (fused && segments.size() == 1) {
        context = attend_fused(q, k, v, segments.front(), terms);
      } else {
        context = at::empty({total, H}, x.options());
        for (const Segment& segment : segments) {
          if (fused)
            context.narrow(0, segment.token_begin, segment.tokens).copy_(attend_fused(q, k, v, segment, terms));
          else
            attend_segment(q, k, v, segment, terms, context);
        }
      }
      // x is the residual each time; it is no longer needed once added (linear_add_layer_norm writes over it).
      x = linear_add_layer_norm(x, context, l.out_w, l.out_b, l.ln1_w, l.ln1_b, config_.eps, false).second;
      const at::Tensor hidden = activate(at::linear(x, l.up_w, l.up_b), config_.act);
      x = linear_add_layer_norm(x, hidden, l.down_w, l.down_b, l.ln2_w, l.ln2_b, config_.eps, false).second;
    }
    return x;
  }

 private:
  struct Layer {
    at::Tensor qkv_w, qkv_b, out_w, out_b, ln1_w, ln1_b, up_w, up_b, down_w, down_b, ln2_w, ln2_b;
  };

  // Consecutive sequences of a pass padded to one length (a multiple of 8, for the memory-efficient
  // kernel's alignment): tokens [token_begin, + tokens) are sequences [sequence_begin, + count).
  struct Segment {
    std::int64_t token_begin = 0, tokens = 0, sequence_begin = 0, count = 0, length = 0;
    std::int64_t first = 0, rows = 0;  // the position rows the segment reaches: [first, first + rows)
    // Padded (scaled_dot_product_attention):
    at::Tensor slot;   // [tokens] int64: each token's row in the padded [count * length] layout
    at::Tensor mask;   // [count, 1, 1, length] in the model's dtype: 0, or -inf on padding keys
    at::Tensor index;  // [length, length] int64: the position row of query i and key j, less `first`
    // Fused (the packed kernel):
    at::Tensor tiles;          // the segment's work list (write_attention_tiles), its tokens counted from 0
    at::Tensor distance_rows;  // [2 * length - 1] int32: the position row of distance d at d + length - 1, less `first`
  };

  // Whether this pass's attention runs as the packed kernel with the disentangled terms (x: the embeddings).
  bool fused_attention(const at::Tensor& x) const {
    const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    return x.is_cuda() && half && info_.hidden_size / info_.num_heads == 64;
  }

  // The batch's runs of equal-length sequences (DeviceBatch::groups) cut into at most kMaxSegments segments
  // of consecutive runs, each padded to its longest: the cut that costs the least attention work (sequences x
  // padded length², the size of the scores and of the c2p/p2c gathers), each segment charged a fixed
  // kSegmentCost for its calls (a segment is ~25 operations a layer: more of them cost more host time than
  // their padding saves). The planner sorts a request longest first, so the segments are lengths of one
  // range each. Made once per pass; every layer uses them.
  static constexpr std::size_t kMaxSegments = 4;
  static constexpr double kSegmentCost = 64.0 * 64.0 * 64.0;
  static constexpr std::size_t kMaxCutRuns = 1024;

  std::vector<Segment> segments_of(const DeviceBatch& batch, c10::ScalarType dtype, bool fused) const {
    const std::vector<Group>& groups = batch.groups;
    const std::size_t G = groups.size();
    auto padded = [](std::int64_t length) { return (length + 7) / 8 * 8; };
    // The cut is O(segments x runs²): a sorted pass has a run per length (at most max_position_embeddings);
    // an unsorted batch of more runs than kMaxCutRuns (a direct caller's) is one segment.
    if (G > kMaxCutRuns) {
      Segment all;
      std::int64_t longest = 0;
      for (const Group& g : groups) {
        all.count += g.count;
        all.tokens += g.count * g.length;
        longest = std::max(longest, g.length);
      }
      std::vector<Segment> one{finish(batch, std::move(all), padded(longest), dtype, fused)};
      if (fused) add_tiles(batch, one);
      return one;
    }
    // best[k][j]: the least cost of groups [0, j) in k segments; cut[k][j]: where the last one starts.
    constexpr double kNone = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(kMaxSegments + 1, std::vector<double>(G + 1, kNone));
    std::vector<std::vector<std::size_t>> cut(kMaxSegments + 1, std::vector<std::size_t>(G + 1, 0));
    best[0][0] = 0.0;
    for (std::size_t k = 1; k <= kMaxSegments; ++k) {
      for (std::size_t j = 1; j <= G; ++j) {
        std::int64_t longest = 0, count = 0;
        for (std::size_t i = j; i-- > 0;) {  // the last segment is groups [i, j)
          longest = std::max(longest, groups[i].length);
          count += groups[i].count;
          if (best[k - 1][i] == kNone) continue;
          const auto L = static_cast<double>(padded(longest));
          const double cost = best[k - 1][i] + static_cast<double>(count) * L * L + kSegmentCost;
          if (cost < best[k][j]) {
            best[k][j] = cost;
            cut[k][j] = i;
          }
        }
      }
    }
    std::size_t k = 1;
    for (std::size_t m = 2; m <= kMaxSegments; ++m) {
      if (best[m][G] < best[k][G]) k = m;
    }
    std::vector<std::pair<std::size_t, std::size_t>> ranges;  // [first group, end group) per segment
    for (std::size_t j = G; j > 0; j = cut[k][j], --k) ranges.emplace_back(cut[k][j], j);
    std::vector<Segment> out;
    std::int64_t sequence = 0;
    for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
      Segment segment;
      segment.token_begin = groups[r->first].token_begin;
      segment.sequence_begin = sequence;
      std::int64_t longest = 0;
      for (std::size_t g = r->first; g < r->second; ++g) {
        segment.count += groups[g].count;
        segment.tokens += groups[g].count * groups[g].length;
        longest = std::max(longest, groups[g].length);
      }
      sequence += segment.count;
      out.push_back(finish(batch, std::move(segment), padded(longest), dtype, fused));
    }
    if (fused) add_tiles(batch, out);
    return out;
  }

  // Each segment's work list for the packed kernel, its tokens counted from the segment's first: written on the
  // host from the groups' lengths, all segments' in one pinned buffer and one copy.
  static void add_tiles(const DeviceBatch& batch, std::vector<Segment>& segments) {
    std::vector<std::int64_t> lengths;  // every sequence's, in order
    for (const Group& g : batch.groups) lengths.insert(lengths.end(), static_cast<std::size_t>(g.count), g.length);
    std::vector<std::int64_t> slots;
    std::int64_t all = 0;
    for (const Segment& s : segments) all += slots.emplace_back(attention_tiles_bound(s.tokens, s.count));
    const bool gpu = batch.ids.is_cuda();
    at::Tensor host = at::empty({all}, at::TensorOptions().dtype(at::kLong).pinned_memory(gpu));
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      write_attention_tiles(lengths.data() + segments[i].sequence_begin, segments[i].count,
                            host.data_ptr<std::int64_t>() + offset, slots[i]);
      offset += slots[i];
    }
    const at::Tensor device = host.to(batch.ids.device(), /*non_blocking=*/true);
    offset = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      segments[i].tiles = device.narrow(0, offset, slots[i]);
      offset += slots[i];
    }
  }

  Segment finish(const DeviceBatch& batch, Segment s, std::int64_t length, c10::ScalarType dtype, bool fused) const {
    s.length = length;
    if (!terms_.empty()) {
      s.first = index_by_distance_[static_cast<std::size_t>(center_ - (length - 1))];
      s.rows = index_by_distance_[static_cast<std::size_t>(center_ + (length - 1))] - s.first + 1;
    }
    if (fused) {
      if (!terms_.empty()) {
        s.distance_rows = (index_table_.narrow(0, center_ - (length - 1), 2 * length - 1) - s.first).to(at::kInt);
      }
      return s;
    }
    const at::Tensor lengths = batch.lengths.narrow(0, s.sequence_begin, s.count);
    const at::Tensor sequence = at::repeat_interleave(at::arange(s.count, lengths.options()), lengths, 0, s.tokens);
    s.slot = sequence * length + batch.positions.narrow(0, s.token_begin, s.tokens);
    const at::Tensor keys = at::arange(length, lengths.options());
    s.mask = at::zeros({s.count, 1, 1, length}, lengths.options().dtype(dtype))
                 .masked_fill((keys.unsqueeze(0) >= lengths.unsqueeze(1)).view({s.count, 1, 1, length}), -INFINITY);
    if (!terms_.empty()) {
      const at::Tensor distance = keys.unsqueeze(1) - keys.unsqueeze(0) + center_;  // [L, L]: i - j, shifted
      s.index = index_table_.index_select(0, distance.reshape(-1)).view({length, length}) - s.first;
    }
    return s;
  }

  // Attention of one segment, written into its tokens' rows of `context` [T, H]: q, k and v [T, heads,
  // head_dim] padded into the segment's layout, the scores given the padding mask and (with relative
  // attention) the c2p and p2c terms of `terms`.
  void attend_segment(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Segment& s,
                      const PositionTerms* terms, at::Tensor& context) const {
    const std::int64_t heads = q.size(1), head_dim = q.size(2), L = s.length;
    auto pad = [&](const at::Tensor& t) {  // [count, heads, L, head_dim]
      at::Tensor out = at::zeros({s.count * L, heads, head_dim}, t.options());
      out.index_copy_(0, s.slot, t.narrow(0, s.token_begin, s.tokens));
      return out.view({s.count, L, heads, head_dim}).transpose(1, 2);
    };
    const at::Tensor qs = pad(q), ks = pad(k), vs = pad(v);
    const at::Tensor mask = terms != nullptr ? position_bias(qs, ks, *terms, s).add_(s.mask) : s.mask;
    const at::Tensor attended = at::scaled_dot_product_attention(qs, ks, vs, mask, 0.0, false, scale_);
    context.narrow(0, s.token_begin, s.tokens)
        .copy_(attended.transpose(1, 2).reshape({s.count * L, heads * head_dim}).index_select(0, s.slot));
  }

  // Attention of one segment by the packed kernel: [tokens, H] for the segment's tokens. The c2p and p2c tables
  // are each token against the position rows the segment reaches, [heads, tokens, R] (R rounded up to 8, as in
  // position_bias), scaled (the position tables are).
  at::Tensor attend_fused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Segment& s,
                          const PositionTerms* terms) const {
    const at::Tensor qs = q.narrow(0, s.token_begin, s.tokens), ks = k.narrow(0, s.token_begin, s.tokens);
    PackedAttention options;
    options.scale = scale_;
    if (terms != nullptr) {
      const std::int64_t R = (s.rows + 7) / 8 * 8;
      auto against = [&](const at::Tensor& x, const at::Tensor& table) {
        return at::bmm(x.transpose(0, 1), table.narrow(0, s.first, R).permute({1, 2, 0}));
      };
      if (terms->key.defined()) options.c2p = against(qs, terms->key);
      if (terms->query.defined()) options.p2c = against(ks, terms->query);
      options.relative_rows = s.distance_rows;
    }
    return cuda_kernels().attention(qs, ks, v.narrow(0, s.token_begin, s.tokens), s.tiles, s.length, options);
  }

  // The c2p and p2c terms of a segment, [count, heads, L, L] in q's dtype, scaled (the tables are), a fresh
  // tensor: q and k [count, heads, L, head_dim]. Query i and key j share the position row of their distance,
  // idx(i - j); c2p is q_i against the position key at idx, p2c is k_j against the position query at idx
  // (transformers gathers p2c at -idx(j - i), the same row: the buckets are odd in the distance). Only the rows
  // a length of L reaches are used, rounded up to 8 (the tables have 8 rows of zeros past their end): an odd
  // count of rows makes cuBLAS take a kernel for unaligned matrices, twice as slow on an H100
  // (bench/deberta_attention.py).
  at::Tensor position_bias(const at::Tensor& q, const at::Tensor& k, const PositionTerms& terms,
                           const Segment& s) const {
    const std::int64_t L = s.length, count = s.count, heads = q.size(1), head_dim = q.size(3);
    const std::int64_t R = (s.rows + 7) / 8 * 8;
    const at::Tensor index = s.index.unsqueeze(0).unsqueeze(0).expand({count, heads, L, L});
    // [count, heads, L, R]: one product per head over all the segment's rows (a broadcast matmul would copy
    // the table once per sequence).
    auto against = [&](const at::Tensor& x, const at::Tensor& table) {
      const at::Tensor rows = x.permute({1, 0, 2, 3}).reshape({heads, count * L, head_dim});
      return at::bmm(rows, table.narrow(0, s.first, R).permute({1, 2, 0}))
          .view({heads, count, L, R})
          .permute({1, 0, 2, 3});
    };
    at::Tensor bias;
    if (terms.key.defined()) bias = at::gather(against(q, terms.key), 3, index);
    if (terms.query.defined()) {
      const at::Tensor p2c = at::gather(against(k, terms.query), 3, index.transpose(2, 3)).transpose(2, 3);
      bias = bias.defined() ? bias.add_(p2c) : p2c.contiguous();
    }
    return bias;
  }

  void load(const ArchitectureContext& context) {
    c10::InferenceMode guard;
    WeightLoader w(context.checkpoint.weights_file(), "embeddings.word_embeddings.weight", context.device,
                   context.dtype);
    const std::int64_t H = config_.hidden, E = config_.embedding;
    word_ = w.load("embeddings.word_embeddings.weight", {config_.vocab, E});
    if (config_.absolute) position_ = w.load("embeddings.position_embeddings.weight", {config_.positions, E});
    if (config_.types > 0) token_type_ = w.load("embeddings.token_type_embeddings.weight", {config_.types, E});
    if (E != H) embed_proj_ = w.load("embeddings.embed_proj.weight", {H, E});
    emb_ln_w_ = w.load("embeddings.LayerNorm.weight", {H});
    emb_ln_b_ = w.load("embeddings.LayerNorm.bias", {H});
    load_layers(w);
    if (config_.relative) load_position_terms(context, w);
    weight_bytes_ = w.bytes();  // the fused q/k/v copies replace the loaded pieces one for one
  }

  void load_layers(WeightLoader& w) {
    const std::int64_t H = config_.hidden, I = config_.intermediate;
    for (std::int64_t i = 0; i < config_.layers; ++i) {
      const std::string p = fmt::format("encoder.layer.{}.", i);
      const auto t = [&](const char* name, std::vector<std::int64_t> shape) {
        return w.load(p + name, std::move(shape));
      };
      Layer l;
      l.qkv_w = at::cat({t("attention.self.query_proj.weight", {H, H}), t("attention.self.key_proj.weight", {H, H}),
                         t("attention.self.value_proj.weight", {H, H})});
      l.qkv_b = at::cat({t("attention.self.query_proj.bias", {H}), t("attention.self.key_proj.bias", {H}),
                         t("attention.self.value_proj.bias", {H})});
      l.out_w = t("attention.output.dense.weight", {H, H});
      l.out_b = t("attention.output.dense.bias", {H});
      l.ln1_w = t("attention.output.LayerNorm.weight", {H});
      l.ln1_b = t("attention.output.LayerNorm.bias", {H});
      l.up_w = t("intermediate.dense.weight", {I, H});
      l.up_b = t("intermediate.dense.bias", {I});
      l.down_w = t("output.dense.weight", {H, I});
      l.down_b = t("output.dense.bias", {H});
      l.ln2_w = t("output.LayerNorm.weight", {H});
      l.ln2_b = t("output.LayerNorm.bias", {H});
      layers_.push_back(std::move(l));
    }
  }

  // The relative embeddings (normalized where norm_rel_ebd says) through each layer's position projections,
  // in float32, scaled by the scores' scale (the c2p and p2c products then come out scaled), then the model's
  // dtype, with 8 rows of zeros after them (position_bias reads whole groups of 8 rows); and the bucket index of
  // every distance a pass can hold.
  void load_position_terms(const ArchitectureContext& context, WeightLoader& w) {
    const std::int64_t H = config_.hidden, heads = config_.heads, head_dim = H / heads, rows = 2 * config_.span();
    WeightLoader f(context.checkpoint.weights_file(), "embeddings.word_embeddings.weight", context.device, at::kFloat);
    at::Tensor rel = f.load("encoder.rel_embeddings.weight", {rows, H});
    if (config_.norm_rel) {
      rel = at::layer_norm(rel, {H}, f.load("encoder.LayerNorm.weight", {H}), f.load("encoder.LayerNorm.bias", {H}),
                           config_.eps);
    }
    for (std::int64_t i = 0; i < config_.layers; ++i) {
      const std::string p = fmt::format("encoder.layer.{}.attention.self.", i);
      auto project = [&](const char* name) {
        const at::Tensor projected =
            at::linear(rel, f.load(p + name + ".weight", {H, H}), f.load(p + name + ".bias", {H})) * scale_;
        const at::Tensor out = at::cat({projected, at::zeros({8, H}, projected.options())})
                                   .view({rows + 8, heads, head_dim})
                                   .to(context.dtype)
                                   .contiguous();
        w.keep(out);
        return out;
      };
      PositionTerms terms;
      if (config_.c2p) terms.key = project(config_.share_key ? "key_proj" : "pos_key_proj");
      if (config_.p2c) terms.query = project(config_.share_key ? "query_proj" : "pos_query_proj");
      terms_.push_back(std::move(terms));
    }
    // Distances -(D - 1) .. D - 1 for D = positions + 8 (a padded pass rounds its length up to 8), each the
    // index transformers clamps its bucket to: clamp(bucket + span, 0, 2 * span - 1).
    const std::int64_t D = config_.positions + 8, span = config_.span();
    center_ = D - 1;
    at::Tensor distance = at::arange(-(D - 1), D, at::kLong);
    if (config_.buckets > 0) distance = log_buckets(distance, config_.buckets, config_.max_relative);
    const at::Tensor index = at::clamp(distance + span, 0, 2 * span - 1).contiguous();
    index_by_distance_.assign(index.data_ptr<std::int64_t>(), index.data_ptr<std::int64_t>() + index.numel());
    index_table_ = index.to(context.device);
  }

  DebertaConfig config_;
  at::Tensor word_, position_, token_type_, embed_proj_, emb_ln_w_, emb_ln_b_;
  std::vector<Layer> layers_;
  std::vector<PositionTerms> terms_;             // one per layer (relative attention only)
  std::vector<std::int64_t> index_by_distance_;  // on the host: which embeddings a length reaches
  at::Tensor index_table_;                       // the same on the device
  std::int64_t center_ = 0;                      // distance 0's place in both
  double scale_ = 1.0;                           // 1 / sqrt(head_dim * scale_factor)
};

// ContextPooler (pooler.dense + pooler_hidden_act on the first token), then `classifier`, in float32.
class ContextPoolerClassifier final : public Head {
 public:
  ContextPoolerClassifier(at::Tensor dense_w, at::Tensor dense_b, std::string act, at::Tensor out_w, at::Tensor out_b,
                          std::size_t bytes)
      : dense_w_(std::move(dense_w)),
        dense_b_(std::move(dense_b)),
        act_(std::move(act)),
        out_w_(std::move(out_w)),
        out_b_(std::move(out_b)) {
    outputs_ = out_w_.size(0);
    weight_bytes_ = bytes;
  }

  at::Tensor forward(const at::Tensor& states, const DeviceBatch& batch) const override {
    const at::Tensor first = states.index_select(0, batch.offsets.narrow(0, 0, batch.lengths.size(0))).to(at::kFloat);
    return at::linear(activate(at::linear(first, dense_w_, dense_b_), act_), out_w_, out_b_);
  }

 private:
  at::Tensor dense_w_, dense_b_;
  std::string act_;
  at::Tensor out_w_, out_b_;
};

}  // namespace

std::unique_ptr<Transformer> make_deberta_v2(const ArchitectureContext& context) {
  return std::make_unique<DebertaV2>(context);
}
void check_deberta_v2(const ArchitectureContext& context) {
  check_weight_shapes(context, DebertaConfig(context).shapes());
}

std::unique_ptr<Head> make_deberta_pooler_classifier(const HeadContext& context) {
  c10::InferenceMode guard;
  const ArchitectureContext& model = context.model;
  const std::int64_t H = context.info.hidden_size, labels = context.outputs;
  std::string act = DebertaConfig(model).pooler_act;
  WeightLoader w(model.checkpoint.weights_file(), "pooler.dense.weight", model.device, at::kFloat);
  at::Tensor dense_w = w.load("pooler.dense.weight", {H, H});
  at::Tensor dense_b = w.load("pooler.dense.bias", {H});
  at::Tensor out_w = w.load("classifier.weight", {labels, H});
  at::Tensor out_b = w.load("classifier.bias", {labels});
  return std::make_unique<ContextPoolerClassifier>(std::move(dense_w), std::move(dense_b), std::move(act),
                                                   std::move(out_w), std::move(out_b), w.bytes());
}

}  // namespace flowline::models::detail
