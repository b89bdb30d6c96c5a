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
// The c2p and p2c terms depend on the query's or key's content as well as the distance, so they are a bias
// computed per layer from q and k. Attention runs here, on the CPU and a GPU alike: the pass's sequences in a
// few segments of similar lengths, each padded to its longest and run as one scaled_dot_product_attention call
// with the bias and the padding as its mask — not as the packed kernel, and so without CUDA graphs.
#include "../cuda_kernels.hpp"
#include "../transformer.hpp"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <cctype>
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

// config.json as DebertaV2Config and the modules read it, every value in range; shapes() is what the table's
// check holds it against in model.safetensors' header.
struct DebertaConfig {
  std::int64_t vocab = 0, hidden = 0, embedding = 0, layers = 0, heads = 0, intermediate = 0, positions = 0;
  std::int64_t types = 0, buckets = -1, max_relative = 0;
  double eps = 1e-7;
  std::string act = "gelu", pooler_act = "gelu";
  bool relative = false, c2p = false, p2c = false, share_key = false, norm_rel = false, absolute = true;

  explicit DebertaConfig(const ArchitectureContext& context) {
    vocab = context.int_in("vocab_size", 1, kMaxVocab);
    hidden = context.int_in("hidden_size", 1, kMaxHidden);
    embedding = context.int_in("embedding_size", hidden, 1, kMaxHidden);
    layers = context.int_in("num_hidden_layers", 1, kMaxLayers);
    heads = context.int_in("num_attention_heads", 1, kMaxHeads);
    intermediate = context.int_in("intermediate_size", 1, kMaxIntermediate);
    positions = context.int_in("max_position_embeddings", 512, 1, kMaxPositions);
    types = context.int_in("type_vocab_size", 0, 0, kMaxVocab);
    eps = context.number_in("layer_norm_eps", 1e-7, kNormEps);
    act = context.text_or("hidden_act", "gelu");
    if (!known_activation(act)) context.fail("hidden_act", fmt::format("'{}' is not supported", act));
    if (hidden % heads != 0) {
      context.fail("hidden_size",
                   fmt::format("{} must be a positive multiple of num_attention_heads {}", hidden, heads));
    }
    if (context.int_in("attention_head_size", hidden / heads, 1, kMaxHeadDim) != hidden / heads) {
      context.fail("attention_head_size",
                   fmt::format("must be hidden_size / num_attention_heads ({})", hidden / heads));
    }
    if (const std::int64_t conv = context.int_in("conv_kernel_size", 0, 0, kMaxPositions); conv > 0) {
      context.fail("conv_kernel_size",
                   fmt::format("{}: DeBERTa-v2's convolution layer is not supported (only 0)", conv));
    }
    relative = flag(context, "relative_attention", false);
    share_key = flag(context, "share_att_key", false);
    absolute = flag(context, "position_biased_input", true);
    read_attention_types(context);
    read_rel_norm(context);
    // Bucketed: every distance within 2 * positions is looked up (padded passes round lengths up), so both
    // bounds are those of positions.
    buckets = context.int_in("position_buckets", -1, -kMaxPositions, kMaxPositions);
    max_relative = context.int_in("max_relative_positions", -1, -kMaxPositions, kMaxPositions);
    if (max_relative < 1) max_relative = positions;  // as transformers reads it
    // The sequence head's (ContextPooler) settings, checked here so that validation refuses them: transformers
    // sizes the pooler by pooler_hidden_size and the classifier by hidden_size, so the two must agree.
    if (context.int_in("pooler_hidden_size", hidden, 1, kMaxHidden) != hidden) {
      context.fail("pooler_hidden_size", fmt::format("must equal hidden_size ({})", hidden));
    }
    pooler_act = context.text_or("pooler_hidden_act", "gelu");
    if (!known_activation(pooler_act))
      context.fail("pooler_hidden_act", fmt::format("'{}' is not supported", pooler_act));
    if (buckets == 1) context.fail("position_buckets", "1 leaves no bucket on either side (at least 2, or 0 for none)");
    if (buckets > 0 && max_relative - 1 <= buckets / 2) {
      context.fail("max_relative_positions",
                   fmt::format("{} must exceed position_buckets / 2 + 1 ({}) for logarithmic buckets", max_relative,
                               buckets / 2 + 1));
    }
  }

  // Relative embeddings: 2 * span rows (transformers' pos_ebd_size).
  std::int64_t span() const noexcept { return buckets > 0 ? buckets : max_relative; }
  // 1 + the number of position terms: the scores' scale is 1 / sqrt(head_dim * factor).
  std::int64_t scale_factor() const noexcept { return 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }

  WeightShapes shapes() const {
    WeightShapes out{
        "num_hidden_layers",
        layers,
        "encoder.layer.",
        {{"embeddings.word_embeddings.weight", {{"vocab_size", vocab}, {"embedding_size", embedding}}},
         {"encoder.layer.0.attention.self.query_proj.weight", {{"hidden_size", hidden}, {"hidden_size", hidden}}},
         {"encoder.layer.0.intermediate.dense.weight",
          {{"intermediate_size", intermediate}, {"hidden_size", hidden}}}}};
    if (absolute) {
      out.tensors.push_back({"embeddings.position_embeddings.weight",
                             {{"max_position_embeddings", positions}, {"embedding_size", embedding}}});
    }
    if (types > 0) {
      out.tensors.push_back(
          {"embeddings.token_type_embeddings.weight", {{"type_vocab_size", types}, {"embedding_size", embedding}}});
    }
    if (relative) {
      const char* key = buckets > 0 ? "2 * position_buckets" : "2 * max_relative_positions";
      out.tensors.push_back({"encoder.rel_embeddings.weight", {{key, 2 * span()}, {"hidden_size", hidden}}});
    }
    return out;
  }

 private:
  static bool flag(const ArchitectureContext& context, const char* key, bool fallback) {
    const auto* v = context.checkpoint.config.if_contains(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_bool()) context.fail(key, "must be true or false");
    return v->get_bool();
  }

  // A list of names or one "a|b" string (DeBERTa's own config.json files write the string), lowercased and
  // trimmed as transformers reads it.
  static std::vector<std::string> names(const ArchitectureContext& context, const char* key, const char* fallback) {
    const auto* v = context.checkpoint.config.if_contains(key);
    std::vector<std::string> out;
    auto add = [&](std::string_view text) {
      std::string name;
      for (const char c : text) {
        if (c == '|') {
          if (!name.empty()) out.push_back(std::exchange(name, {}));
        } else if (c != ' ' && c != '\t') {
          name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
      }
      if (!name.empty()) out.push_back(name);  // "" names nothing, as in transformers
    };
    if (!v || v->is_null()) {
      if (fallback != nullptr) add(fallback);
    } else if (v->is_string()) {
      add(v->get_string());
    } else if (v->is_array()) {
      for (const auto& item : v->get_array()) {
        if (!item.is_string()) context.fail(key, "must be a string or a list of strings");
        add(item.get_string());
      }
    } else {
      context.fail(key, "must be a string or a list of strings");
    }
    return out;
  }

  void read_attention_types(const ArchitectureContext& context) {
    for (const auto& name : names(context, "pos_att_type", nullptr)) {
      if (name == "c2p") {
        c2p = true;
      } else if (name == "p2c") {
        p2c = true;
      } else {
        context.fail("pos_att_type", fmt::format("'{}' is not supported (c2p, p2c)", name));
      }
    }
  }

  void read_rel_norm(const ArchitectureContext& context) {
    for (const auto& name : names(context, "norm_rel_ebd", "none")) {
      if (name == "layer_norm") {
        norm_rel = true;
      } else if (name != "none") {
        context.fail("norm_rel_ebd", fmt::format("'{}' is not supported (none, layer_norm)", name));
      }
    }
  }
};

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
    const std::vector<Segment> segments = segments_of(batch, x.scalar_type());
    const std::int64_t total = batch.ids.size(0);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const Layer& l = layers_[i];
      const at::Tensor qkv = at::linear(x, l.qkv_w, l.qkv_b);  // [T, 3H]
      const at::Tensor q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
      const at::Tensor k = qkv.narrow(1, H, H).view({total, heads, head_dim});
      const at::Tensor v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
      at::Tensor context = at::empty({total, H}, x.options());
      for (const Segment& segment : segments) {
        attend_segment(q, k, v, segment, terms_.empty() ? nullptr : &terms_[i], context);
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
    at::Tensor slot;                   // [tokens] int64: each token's row in the padded [count * length] layout
    at::Tensor mask;                   // [count, 1, 1, length] in the model's dtype: 0, or -inf on padding keys
    at::Tensor index;                  // [length, length] int64: the position row of query i and key j, less `first`
    std::int64_t first = 0, rows = 0;  // the position rows the segment reaches: [first, first + rows)
  };

  // The batch's runs of equal-length sequences (DeviceBatch::groups) cut into at most kMaxSegments segments
  // of consecutive runs, each padded to its longest: the cut that costs the least attention work (sequences x
  // padded length², the size of the scores and of the c2p/p2c gathers), each segment charged a fixed
  // kSegmentCost for its calls (a segment is ~25 operations a layer: more of them cost more host time than
  // their padding saves). The planner sorts a request longest first, so the segments are lengths of one
  // range each. Made once per pass; every layer uses them.
  static constexpr std::size_t kMaxSegments = 4;
  static constexpr double kSegmentCost = 64.0 * 64.0 * 64.0;
  static constexpr std::size_t kMaxCutRuns = 1024;

  std::vector<Segment> segments_of(const DeviceBatch& batch, c10::ScalarType dtype) const {
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
      return {finish(batch, std::move(all), padded(longest), dtype)};
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
      out.push_back(finish(batch, std::move(segment), padded(longest), dtype));
    }
    return out;
  }

  Segment finish(const DeviceBatch& batch, Segment s, std::int64_t length, c10::ScalarType dtype) const {
    s.length = length;
    const at::Tensor lengths = batch.lengths.narrow(0, s.sequence_begin, s.count);
    const at::Tensor sequence = at::repeat_interleave(at::arange(s.count, lengths.options()), lengths, 0, s.tokens);
    s.slot = sequence * length + batch.positions.narrow(0, s.token_begin, s.tokens);
    const at::Tensor keys = at::arange(length, lengths.options());
    s.mask = at::zeros({s.count, 1, 1, length}, lengths.options().dtype(dtype))
                 .masked_fill((keys.unsqueeze(0) >= lengths.unsqueeze(1)).view({s.count, 1, 1, length}), -INFINITY);
    if (!terms_.empty()) {
      s.first = index_by_distance_[static_cast<std::size_t>(center_ - (length - 1))];
      s.rows = index_by_distance_[static_cast<std::size_t>(center_ + (length - 1))] - s.first + 1;
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
