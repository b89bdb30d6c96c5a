// The BERT encoder of sentence-transformers checkpoints in LibTorch: weights from safetensors, forward
// passes on packed batches, then pooling.
#include "flowline/sentence_encoder/bert.hpp"

#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "flowline/sentence_encoder/safetensors.hpp"
#include "bert_internal.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace flowline::sentence_encoder {

namespace {

boost::json::object read_json_object(const std::filesystem::path& path) {
  boost::system::error_code ec;
  auto value = boost::json::parse(read_file(path), ec);
  if (ec || !value.is_object()) throw Error(fmt::format("'{}': not a JSON object", path.string()));
  return value.get_object();
}

std::int64_t require_int(const boost::json::object& o, const char* key, const std::filesystem::path& file) {
  const auto* v = o.if_contains(key);
  if (!v || !v->is_int64()) throw Error(fmt::format("'{}': key '{}' must be an integer", file.string(), key));
  return v->get_int64();
}

}  // namespace

std::string to_string(Pooling pooling) {
  switch (pooling) {
    case Pooling::Mean:
      return "mean";
    case Pooling::Cls:
      return "cls";
    case Pooling::Max:
      return "max";
    case Pooling::MeanSqrtLen:
      return "mean_sqrt_len_tokens";
  }
  return "?";
}

BertConfig BertConfig::from_file(const std::filesystem::path& path) {
  const auto o = read_json_object(path);
  auto text = [&](const char* key, const char* fallback) -> std::string {
    const auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->get_string()) : fallback;
  };
  const std::string model_type = text("model_type", "bert");
  if (model_type != "bert") {
    throw Error(fmt::format("'{}': model_type '{}' is not supported; flowline's encoder runs BERT checkpoints",
                            path.string(), model_type));
  }
  const std::string position = text("position_embedding_type", "absolute");
  if (position != "absolute") {
    throw Error(
        fmt::format("'{}': position_embedding_type '{}' is not supported (only 'absolute')", path.string(), position));
  }
  BertConfig c;
  c.vocab_size = require_int(o, "vocab_size", path);
  c.hidden_size = require_int(o, "hidden_size", path);
  c.num_layers = require_int(o, "num_hidden_layers", path);
  c.num_heads = require_int(o, "num_attention_heads", path);
  c.intermediate_size = require_int(o, "intermediate_size", path);
  c.max_position_embeddings = require_int(o, "max_position_embeddings", path);
  if (const auto* v = o.if_contains("type_vocab_size"); v && v->is_int64()) c.type_vocab_size = v->get_int64();
  if (const auto* v = o.if_contains("layer_norm_eps"); v && v->is_number()) c.layer_norm_eps = v->to_number<double>();
  c.hidden_act = text("hidden_act", "gelu");
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_new" && c.hidden_act != "gelu_pytorch_tanh" &&
      c.hidden_act != "relu") {
    throw Error(fmt::format("'{}': hidden_act '{}' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)",
                            path.string(), c.hidden_act));
  }
  if (c.hidden_size <= 0 || c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
    throw Error(fmt::format("'{}': hidden_size {} must be a positive multiple of num_attention_heads {}", path.string(),
                            c.hidden_size, c.num_heads));
  }
  return c;
}

SentenceModelConfig SentenceModelConfig::from_folder(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(folder)) throw Error(fmt::format("model '{}': no such folder", folder.string()));
  for (const char* needed : {"config.json", "model.safetensors", "vocab.txt"}) {
    if (!fs::exists(folder / needed)) {
      throw Error(fmt::format("model '{}': missing {} (expected a sentence-transformers checkpoint folder)",
                              folder.string(), needed));
    }
  }
  SentenceModelConfig c;
  c.bert = BertConfig::from_file(folder / "config.json");
  c.max_seq_length = c.bert.max_position_embeddings;

  // Pooling and Normalize come from modules.json; without it, plain mean pooling (sentence-transformers'
  // default for a bare transformer).
  fs::path pooling_dir;
  if (fs::exists(folder / "modules.json")) {
    boost::system::error_code ec;
    const auto modules = boost::json::parse(read_file(folder / "modules.json"), ec);
    if (ec || !modules.is_array())
      throw Error(fmt::format("'{}': expected a JSON list", (folder / "modules.json").string()));
    for (const auto& m : modules.get_array()) {
      if (!m.is_object()) continue;
      const auto* type = m.get_object().if_contains("type");
      const auto* path = m.get_object().if_contains("path");
      if (!type || !type->is_string()) continue;
      const std::string t(type->get_string());
      auto ends_with = [&](const char* suffix) {
        const std::string s(suffix);
        return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0;
      };
      if (ends_with(".Pooling")) {
        pooling_dir = folder / (path && path->is_string() ? std::string(path->get_string()) : "1_Pooling");
      } else if (ends_with(".Normalize")) {
        c.normalize = true;
      } else if (!ends_with(".Transformer")) {
        throw Error(fmt::format("'{}': module type '{}' is not supported (Transformer, Pooling, Normalize)",
                                (folder / "modules.json").string(), t));
      }
    }
  }
  if (!pooling_dir.empty() && fs::exists(pooling_dir / "config.json")) {
    const auto file = pooling_dir / "config.json";
    const auto o = read_json_object(file);
    std::vector<Pooling> modes;
    if (const auto* mode = o.if_contains("pooling_mode"); mode && mode->is_string()) {  // sentence-transformers 6
      const std::string m(mode->get_string());
      if (m == "mean")
        modes.push_back(Pooling::Mean);
      else if (m == "cls")
        modes.push_back(Pooling::Cls);
      else if (m == "max")
        modes.push_back(Pooling::Max);
      else if (m == "mean_sqrt_len_tokens")
        modes.push_back(Pooling::MeanSqrtLen);
      else
        throw Error(fmt::format("'{}': pooling_mode '{}' is not supported (mean, cls, max, mean_sqrt_len_tokens)",
                                file.string(), m));
    } else {  // sentence-transformers 2.x booleans
      auto flag = [&](const char* key) {
        const auto* v = o.if_contains(key);
        return v && v->is_bool() && v->get_bool();
      };
      if (flag("pooling_mode_cls_token")) modes.push_back(Pooling::Cls);
      if (flag("pooling_mode_mean_tokens")) modes.push_back(Pooling::Mean);
      if (flag("pooling_mode_max_tokens")) modes.push_back(Pooling::Max);
      if (flag("pooling_mode_mean_sqrt_len_tokens")) modes.push_back(Pooling::MeanSqrtLen);
      for (const char* unsupported : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"}) {
        if (flag(unsupported)) throw Error(fmt::format("'{}': {} is not supported", file.string(), unsupported));
      }
    }
    if (modes.size() != 1) {
      throw Error(fmt::format("'{}': exactly one pooling mode must be on, found {}", file.string(), modes.size()));
    }
    c.pooling = modes.front();
  }
  for (const auto& [file, key] : {std::pair{"sentence_bert_config.json", "max_seq_length"},
                                  std::pair{"tokenizer_config.json", "model_max_length"}}) {
    if (!fs::exists(folder / file)) continue;
    const auto o = read_json_object(folder / file);
    if (const auto* v = o.if_contains(key); v && v->is_int64() && v->get_int64() > 0) {
      c.max_seq_length = std::min(v->get_int64(), c.bert.max_position_embeddings);
      break;
    }
  }
  return c;
}

struct BertEncoder::Weights {
  struct Layer {
    at::Tensor qkv_w, qkv_b;    // fused [3H, H], [3H]
    at::Tensor out_w, out_b;    // attention output dense
    at::Tensor ln1_w, ln1_b;    // attention output LayerNorm
    at::Tensor up_w, up_b;      // intermediate dense
    at::Tensor down_w, down_b;  // output dense
    at::Tensor ln2_w, ln2_b;    // output LayerNorm
  };
  at::Tensor word, position, token_type0;  // token_type0: row 0 of token type embeddings
  at::Tensor emb_ln_w, emb_ln_b;
  std::vector<Layer> layers;
  std::size_t bytes = 0;
};

BertEncoder::BertEncoder(const std::filesystem::path& folder, c10::Device device, c10::ScalarType dtype)
    : config_(SentenceModelConfig::from_folder(folder)),
      device_(device),
      dtype_(dtype),
      weights_(std::make_unique<Weights>()) {
  if (dtype != c10::kFloat && dtype != c10::kHalf && dtype != c10::kBFloat16) {
    throw Error(fmt::format("model '{}': dtype must be float32, float16 or bfloat16", folder.string()));
  }
  c10::InferenceMode guard;
  const SafetensorsFile file(folder / "model.safetensors");
  // Checkpoints name tensors with or without a prefix ("bert.", "0.auto_model.").
  std::string prefix;
  bool found = false;
  for (const auto& name : file.names()) {
    const std::string key = "embeddings.word_embeddings.weight";
    if (name.size() >= key.size() && name.compare(name.size() - key.size(), key.size(), key) == 0) {
      prefix = name.substr(0, name.size() - key.size());
      found = true;
      break;
    }
  }
  if (!found) {
    throw Error(fmt::format("'{}': no tensor named '...embeddings.word_embeddings.weight'; not a BERT checkpoint",
                            file.path().string()));
  }
  const auto& b = config_.bert;
  auto load = [&](const std::string& name, std::vector<int64_t> shape) {
    std::string full = prefix + name;
    // Old checkpoints call LayerNorm parameters gamma and beta.
    if (!file.contains(full)) {
      const auto dot = full.rfind('.');
      const std::string tail = full.substr(dot + 1);
      const std::string alt = full.substr(0, dot + 1) + (tail == "weight" ? "gamma" : tail == "bias" ? "beta" : tail);
      if (file.contains(alt)) full = alt;
    }
    at::Tensor t = file.get(full);
    if (t.sizes() != at::IntArrayRef(shape)) {
      throw Error(fmt::format("'{}': tensor '{}' has shape {}, config.json implies [{}]", file.path().string(), full,
                              c10::str(t.sizes()), fmt::join(shape, ", ")));
    }
    at::Tensor on_device = t.to(device_, dtype_, /*non_blocking=*/false, /*copy=*/true).contiguous();
    weights_->bytes += on_device.numel() * on_device.element_size();
    return on_device;
  };
  const int64_t H = b.hidden_size, I = b.intermediate_size;
  weights_->word = load("embeddings.word_embeddings.weight", {b.vocab_size, H});
  weights_->position = load("embeddings.position_embeddings.weight", {b.max_position_embeddings, H});
  weights_->token_type0 = load("embeddings.token_type_embeddings.weight", {b.type_vocab_size, H})[0].contiguous();
  weights_->emb_ln_w = load("embeddings.LayerNorm.weight", {H});
  weights_->emb_ln_b = load("embeddings.LayerNorm.bias", {H});
  for (int64_t i = 0; i < b.num_layers; ++i) {
    const std::string p = fmt::format("encoder.layer.{}.", i);
    Weights::Layer l;
    l.qkv_w = at::cat({load(p + "attention.self.query.weight", {H, H}), load(p + "attention.self.key.weight", {H, H}),
                       load(p + "attention.self.value.weight", {H, H})});
    l.qkv_b = at::cat({load(p + "attention.self.query.bias", {H}), load(p + "attention.self.key.bias", {H}),
                       load(p + "attention.self.value.bias", {H})});
    l.out_w = load(p + "attention.output.dense.weight", {H, H});
    l.out_b = load(p + "attention.output.dense.bias", {H});
    l.ln1_w = load(p + "attention.output.LayerNorm.weight", {H});
    l.ln1_b = load(p + "attention.output.LayerNorm.bias", {H});
    l.up_w = load(p + "intermediate.dense.weight", {I, H});
    l.up_b = load(p + "intermediate.dense.bias", {I});
    l.down_w = load(p + "output.dense.weight", {H, I});
    l.down_b = load(p + "output.dense.bias", {H});
    l.ln2_w = load(p + "output.LayerNorm.weight", {H});
    l.ln2_b = load(p + "output.LayerNorm.bias", {H});
    weights_->layers.push_back(std::move(l));
  }
  // The separate q/k/v tensors were concatenated; count the fused copies, not the loaded pieces.
  weights_->bytes = 0;
  auto count = [&](const at::Tensor& t) { weights_->bytes += t.numel() * t.element_size(); };
  count(weights_->word);
  count(weights_->position);
  count(weights_->token_type0);
  for (const auto& l : weights_->layers) {
    for (const auto* t : {&l.qkv_w, &l.qkv_b, &l.out_w, &l.out_b, &l.ln1_w, &l.ln1_b, &l.up_w, &l.up_b, &l.down_w,
                          &l.down_b, &l.ln2_w, &l.ln2_b}) {
      count(*t);
    }
  }
}

BertEncoder::~BertEncoder() = default;

std::size_t BertEncoder::weight_bytes() const noexcept { return weights_->bytes; }

namespace detail {

// The checks every batch gets before anything is enqueued: lengths in range, ids in the vocabulary, and
// ids and lengths that agree. Returns (total tokens, longest sequence).
std::pair<int64_t, int64_t> check_batch(const PackedBatch& batch, const BertConfig& b) {
  int64_t total = 0, longest = 0;
  for (auto len : batch.lengths) {
    if (len < 1 || len > b.max_position_embeddings) {
      throw Error(fmt::format("sequence length {} outside 1..{}", len, b.max_position_embeddings));
    }
    total += len;
    longest = std::max(longest, len);
  }
  if (total != static_cast<int64_t>(batch.ids.size())) {
    throw Error(fmt::format("packed batch: {} ids but lengths add up to {}", batch.ids.size(), total));
  }
  for (const auto id : batch.ids) {
    if (id < 0 || id >= b.vocab_size) throw Error(fmt::format("token id {} outside the vocabulary", id));
  }
  return {total, longest};
}

// Writes a checked batch into an int64 layout: ids at ids[0, T), positions at positions[0, T), lengths
// at lengths[0, n) and offsets at offsets[0, n]. Slots past the batch (up to `slots` sequences) are
// written as empty sequences, so a graph sized for more sequences reduces them to nothing.
void write_layout(const PackedBatch& batch, int64_t* ids, int64_t* positions, int64_t* lengths, int64_t* offsets,
                  int64_t slots) {
  const auto n = static_cast<int64_t>(batch.lengths.size());
  int64_t t = 0;
  offsets[0] = 0;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t len = batch.lengths[static_cast<std::size_t>(s)];
    lengths[s] = len;
    offsets[s + 1] = offsets[s] + len;
    for (int64_t k = 0; k < len; ++k, ++t) {
      ids[t] = batch.ids[static_cast<std::size_t>(t)];
      positions[t] = k;
    }
  }
  for (int64_t s = n; s < slots; ++s) {
    lengths[s] = 0;
    offsets[s + 1] = t;
  }
}

}  // namespace detail

// Checks the batch and moves ids, positions, lengths and offsets to the device in one copy. On a GPU the
// host side is pinned memory from the caching host allocator, which does not hand the block out again
// before the copy has completed, so the copy is asynchronous and safe.
BertEncoder::DeviceBatch BertEncoder::upload(const PackedBatch& batch) const {
  const auto n = static_cast<int64_t>(batch.lengths.size());
  DeviceBatch out;
  std::tie(out.total, out.longest) = detail::check_batch(batch, config_.bert);
  const int64_t total = out.total;
  const bool cuda = device_.is_cuda();
  // Layout: ids [T] | positions [T] | lengths [n] | offsets [n + 1].
  at::Tensor host = at::empty({2 * total + 2 * n + 1}, at::TensorOptions().dtype(at::kLong).pinned_memory(cuda));
  auto* ids = host.data_ptr<int64_t>();
  detail::write_layout(batch, ids, ids + total, ids + 2 * total, ids + 2 * total + n, n);
  at::Tensor on_device = cuda ? host.to(device_, /*non_blocking=*/true) : host;
  out.ids = on_device.narrow(0, 0, total);
  out.positions = on_device.narrow(0, total, total);
  out.lengths = on_device.narrow(0, 2 * total, n);
  out.offsets = on_device.narrow(0, 2 * total + n, n + 1);
  if (uses_flash_attention()) {
    out.cu_seqlens = out.offsets.to(at::kInt);
  } else {
    int64_t t = 0;
    for (int64_t s = 0; s < n;) {
      int64_t e = s;
      while (e < n && batch.lengths[e] == batch.lengths[s]) ++e;
      out.groups.push_back(Group{t, e - s, batch.lengths[s]});
      t += (e - s) * batch.lengths[s];
      s = e;
    }
  }
  return out;
}

bool BertEncoder::uses_flash_attention() const noexcept { return device_.is_cuda() && dtype_ != c10::kFloat; }

at::Tensor BertEncoder::token_states(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  return forward(upload(batch));
}

// The transformer over packed tokens. Enqueues work only: nothing here waits for the device.
at::Tensor BertEncoder::forward(const DeviceBatch& batch) const {
  const auto& b = config_.bert;
  const int64_t H = b.hidden_size, heads = b.num_heads, head_dim = H / heads;
  const int64_t total = batch.ids.size(0), longest = batch.longest;
  const Weights& w = *weights_;
  at::Tensor x = at::embedding(w.word, batch.ids) + at::embedding(w.position, batch.positions) + w.token_type0;
  x = at::layer_norm(x, {H}, w.emb_ln_w, w.emb_ln_b, b.layer_norm_eps);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));

  for (const auto& l : w.layers) {
    at::Tensor qkv = at::linear(x, l.qkv_w, l.qkv_b);  // [T, 3H]
    at::Tensor context;
    if (uses_flash_attention()) {
      // Variable-length flash attention over the packed tokens: no padding, one kernel. Tokens past
      // the last offset (a graph's padding) belong to no sequence and are left alone.
      auto q = qkv.narrow(1, 0, H).view({total, heads, head_dim});
      auto k = qkv.narrow(1, H, H).view({total, heads, head_dim});
      auto v = qkv.narrow(1, 2 * H, H).view({total, heads, head_dim});
      auto out = at::_flash_attention_forward(q, k, v, batch.cu_seqlens, batch.cu_seqlens, longest, longest, 0.0,
                                              /*is_causal=*/false, /*return_debug_mask=*/false, scale);
      context = std::get<0>(out).reshape({total, H});
    } else {
      context = at::empty({total, H}, x.options());
      for (const auto& g : batch.groups) {
        auto part = qkv.narrow(0, g.token_begin, g.count * g.length).view({g.count, g.length, 3, heads, head_dim});
        auto q = part.select(2, 0).transpose(1, 2);
        auto k = part.select(2, 1).transpose(1, 2);
        auto v = part.select(2, 2).transpose(1, 2);
        auto attended = at::scaled_dot_product_attention(q, k, v, {}, 0.0, false, scale);  // [B, heads, L, d]
        context.narrow(0, g.token_begin, g.count * g.length)
            .view({g.count, g.length, heads, head_dim})
            .copy_(attended.transpose(1, 2));
      }
    }
    x = at::layer_norm(at::linear(context, l.out_w, l.out_b) + x, {H}, l.ln1_w, l.ln1_b, b.layer_norm_eps);
    at::Tensor hidden = at::linear(x, l.up_w, l.up_b);
    if (b.hidden_act == "gelu") {
      hidden = at::gelu(hidden);
    } else if (b.hidden_act == "relu") {
      hidden = at::relu(hidden);
    } else {
      hidden = at::gelu(hidden, "tanh");
    }
    x = at::layer_norm(at::linear(hidden, l.down_w, l.down_b) + x, {H}, l.ln2_w, l.ln2_b, b.layer_norm_eps);
  }
  return x;
}

// Pooling and Normalize over packed token states, driven by the offsets on the device: no value is read
// back to the host (segment_reduce's own checks would wait for the GPU; the lengths were checked on the
// host). Empty sequences (a graph's unused slots) pool to NaN or -inf rows that nobody reads.
at::Tensor BertEncoder::pool(const at::Tensor& states, const DeviceBatch& batch) const {
  const int64_t n = batch.lengths.size(0);
  const at::Tensor tokens = states.to(at::kFloat);  // pooling and Normalize in float32
  at::Tensor pooled;
  switch (config_.pooling) {
    case Pooling::Mean:
    case Pooling::MeanSqrtLen: {
      at::Tensor sums = at::segment_reduce(tokens, "sum", {}, {}, batch.offsets, 0, /*unsafe=*/true);
      at::Tensor counts = batch.lengths.to(at::kFloat).unsqueeze(1);
      pooled = sums / (config_.pooling == Pooling::Mean ? counts : counts.sqrt());
      break;
    }
    case Pooling::Max:
      pooled = at::segment_reduce(tokens, "max", {}, {}, batch.offsets, 0, /*unsafe=*/true);
      break;
    case Pooling::Cls:
      pooled = tokens.index_select(0, batch.offsets.narrow(0, 0, n));
      break;
  }
  if (config_.normalize) {
    pooled = pooled / pooled.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
  }
  return pooled;
}

at::Tensor BertEncoder::encode(const PackedBatch& batch) const {
  c10::InferenceMode guard;
  const DeviceBatch device_batch = upload(batch);
  return pool(forward(device_batch), device_batch);
}

// ---- CUDA graphs -------------------------------------------------------------------------------------

}  // namespace flowline::sentence_encoder
