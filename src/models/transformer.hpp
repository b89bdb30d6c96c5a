// Internal to flowline::models: what an architecture implements and what it is given. Not installed.
//
// An architecture is a detail::Transformer: packed token ids in (a DeviceBatch), token states [T, H] out.
// Each lives in its own file under architectures/ with a `make_<name>` function, and one line of the table
// in architectures/table.cpp names it for the model_type values it runs. Everything around it — batch
// upload and checks, pooling, Dense, Normalize, classifier heads, CUDA graphs — is shared and knows no
// architecture. forward() is const and thread-safe (replicas share one Transformer) and only enqueues work
// on the current stream.
#pragma once

#include "flowline/models/checkpoint.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"

#include "cuda_kernels.hpp"

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowline::models::detail {

// A run of equal-length sequences in a batch (attention that is not packed works group by group).
struct Group {
  std::int64_t token_begin, count, length;
};

// A batch's index tensors on the model's device, and what the host knows of its shape.
struct DeviceBatch {
  at::Tensor ids;              // [T] int64
  at::Tensor positions;        // [T] int64: 0, 1, ... within each sequence (architectures add their offset)
  at::Tensor type_ids;         // [T] int64, or undefined for all 0
  at::Tensor lengths;          // [n] int64
  at::Tensor offsets;          // [n + 1] int64: where each sequence starts, then T
  at::Tensor pool_skip;        // [n] int64 tokens pooling leaves out at each start, or undefined for none
  at::Tensor cu_seqlens;       // [n + 1] int32 (packed attention only)
  at::Tensor attention_tiles;  // packed attention's work list (cuda_kernels.hpp; packed attention only)
  std::int64_t total = 0, longest = 0;
  std::vector<Group> groups;  // runs of equal-length sequences (attention that is not packed)
  bool packed = false;        // attention runs as one kernel over the packed sequences (cu_seqlens)
};

// Checks a batch (lengths 1..max_length, ids in the vocabulary, type ids in range, ids and lengths that
// agree) before anything is enqueued. Returns (total tokens, longest sequence). Throws flowline::Error.
std::pair<std::int64_t, std::int64_t> check_batch(const PackedBatch& batch, const ModelInfo& info);

// Writes a checked batch into an int64 layout: ids at ids[0, T), positions at positions[0, T), lengths
// at lengths[0, n) and offsets at offsets[0, n]. Slots past the batch (up to `slots` sequences) are
// written as empty sequences, so a graph sized for more sequences reduces them to nothing.
void write_layout(const PackedBatch& batch, std::int64_t* ids, std::int64_t* positions, std::int64_t* lengths,
                  std::int64_t* offsets, std::int64_t slots);

// Checks `batch` and moves it to `device` in one copy (pinned and non-blocking on a GPU). With `pad_to` above the
// batch's tokens (packed attention only), the layout holds that many tokens: the ones past the batch's (id 0,
// position 0, type 0) belong to no sequence, so every real row comes out as without them, and the padding rows
// are for the caller to drop (the offsets still end at the batch's last token).
DeviceBatch upload(const PackedBatch& batch, const ModelInfo& info, c10::Device device, bool packed,
                   std::int64_t pad_to = 0);

// The token count a pass of `tokens` tokens is padded to on a GPU: at least 256, then one of eight sizes per power
// of two (at most 1/8 more tokens). cuBLAS picks a GEMM kernel for every new shape it meets (about 0.25 ms a
// GEMM, milliseconds for the first of a kind), so passes of a few sizes, each met once, run as fast as passes of
// one size (docs/benchmarks.md, seed 4's passes); CUDA graphs capture one graph per size.
std::int64_t padded_pass_tokens(std::int64_t tokens) noexcept;

struct ArchitectureContext;

// Loads a checkpoint's tensors onto the device: finds the name prefix the checkpoint uses ("bert.",
// "0.auto_model.", "roberta.", ""), checks each tensor's shape against what config.json implies, and
// counts the bytes kept on the device.
class WeightLoader {
 public:
  // `anchor` is a tensor name every checkpoint of the architecture has (e.g.
  // "embeddings.word_embeddings.weight"); the prefix is whatever comes before it.
  WeightLoader(const std::filesystem::path& file, std::string_view anchor, c10::Device device, c10::ScalarType dtype);
  // The tensor `name` (after the prefix) on the device in the model's dtype. Old checkpoints' LayerNorm
  // gamma/beta are found for weight/bias. Throws naming the file and tensor when absent or misshapen.
  at::Tensor load(const std::string& name, std::vector<std::int64_t> shape);
  // As load(), in float32 whatever the model's dtype (position tables, biases added in float32).
  at::Tensor load_float(const std::string& name, std::vector<std::int64_t> shape);
  bool contains(const std::string& name) const;
  // Checks, from the header only (nothing is read or allocated), that tensor `name` is there, holds floating
  // point numbers and has the shape config.json's keys imply: dims pair each size with the key (or
  // expression) it comes from. Throws naming config.json, the keys and the tensor.
  struct Dim {
    std::string key;
    std::int64_t size;
  };
  void check(const ArchitectureContext& context, const std::string& name, const std::vector<Dim>& dims) const;
  // The number of numbered blocks the checkpoint holds: tensors named `stem`0., `stem`1., ... (after the
  // prefix) — one more than the largest number found, 0 when none.
  std::int64_t count(std::string_view stem) const;
  // Checks that the checkpoint holds exactly `layers` numbered blocks (`stem`N.), naming config.json's `key`.
  void check_count(const ArchitectureContext& context, const char* key, std::int64_t layers,
                   std::string_view stem) const;
  const std::string& prefix() const noexcept { return prefix_; }
  const SafetensorsFile& file() const noexcept { return file_; }
  // Bytes of everything loaded so far; keep() adds a tensor made from loaded ones (a fused copy).
  std::size_t bytes() const noexcept { return bytes_; }
  void keep(const at::Tensor& fused) { bytes_ += fused.numel() * fused.element_size(); }

 private:
  at::Tensor read(const std::string& name, const std::vector<std::int64_t>& shape);
  // The full name of tensor `name` (prefix, and gamma/beta for weight/bias in old checkpoints); throws
  // naming the file when there is none.
  std::string resolve(const std::string& name) const;
  // Throws naming the file and tensor unless the tensor holds floating point numbers.
  void check_float(const std::string& full) const;
  SafetensorsFile file_;
  std::string prefix_;
  c10::Device device_;
  c10::ScalarType dtype_;
  std::size_t bytes_ = 0;
};

// What an architecture's check holds config.json against, as data (each config struct's shapes()): tensors of
// model.safetensors' header with the shapes config.json's keys imply, and the number of layers.
struct TensorShape {
  std::string name;  // after the checkpoint's prefix
  std::vector<WeightLoader::Dim> dims;
  bool if_present = false;  // checked only where the checkpoint holds it (a table made otherwise)
};
struct WeightShapes {
  const char* layers_key;  // config.json's key for the number of layers ("num_hidden_layers")
  std::int64_t layers;
  std::string layer_stem;  // layer N's tensors are "<layer_stem>N.*"
  // In the order checked; the first finds the checkpoint's prefix (WeightLoader's anchor).
  std::vector<TensorShape> tensors;
};
// Runs `shapes` from the header alone (nothing read or allocated): the tensors in order, the layer count
// before the first tensor under layer_stem. Throws as WeightLoader::check and check_count do.
void check_weight_shapes(const ArchitectureContext& context, const WeightShapes& shapes);

// Bounds of config.json's sizes, shared by every architecture: wide enough for every published checkpoint,
// and each size is checked against the weights' shapes too (check_weight). Token ids are int32.
inline constexpr std::int64_t kMaxVocab = 2147483647;
inline constexpr std::int64_t kMaxHidden = 1 << 16;
inline constexpr std::int64_t kMaxIntermediate = 1 << 18;
inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxHeads = 1024;
inline constexpr std::int64_t kMaxHeadDim = 1024;
// Position tables (learned or rotary) are made for every position up front.
inline constexpr std::int64_t kMaxPositions = 1 << 18;

// A range of config.json's numbers: [min, max], either end open.
struct NumberRange {
  double min, max;
  bool min_open = false, max_open = false;
  std::string describe() const;  // "a finite number in (0, 1)"
};
inline constexpr NumberRange kNormEps{0.0, 1.0, true, true};  // layer_norm_eps, norm_eps, rms_norm_eps
inline constexpr NumberRange kRopeTheta{1.0, 1e30};           // rotary frequencies theta^(-2i / head_dim)

// What make_<architecture> gets.
struct ArchitectureContext {
  const Checkpoint& checkpoint;
  c10::Device device;
  c10::ScalarType dtype;

  bool packed_attention() const noexcept { return device.is_cuda() && dtype != c10::kFloat; }
  // config.json's integer `key` in [min, max]: required, or `fallback` when absent or null. Throws naming the
  // file and key when it is missing, not an integer or out of range ("...: must be an integer in 1..65536,
  // got 0"). Every architecture reads its sizes through these, so every value is checked before use.
  std::int64_t int_in(const char* key, std::int64_t min, std::int64_t max) const;
  std::int64_t int_in(const char* key, std::int64_t fallback, std::int64_t min, std::int64_t max) const;
  // A finite number in `range`, or `fallback` when absent or null.
  double number_in(const char* key, double fallback, const NumberRange& range) const;
  // The same for a value found elsewhere (inside an object); `key` names it in errors ("rope_parameters.x").
  double number_in(const boost::json::value* value, const std::string& key, double fallback,
                   const NumberRange& range) const;
  std::string text_or(const char* key, const char* fallback) const;
  // An error about config.json's `key`: "'.../config.json': key: message".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
};

class Transformer {
 public:
  virtual ~Transformer() = default;
  // Token states [T, hidden] in the model's dtype for the packed batch. Enqueues work only.
  virtual at::Tensor forward(const DeviceBatch& batch) const = 0;
  // Whether forward()'s attention can run as one kernel over the packed sequences on this device and dtype
  // (and so be graphed).
  virtual bool uses_packed_attention(const ArchitectureContext& context) const { return context.packed_attention(); }

  const ModelInfo& info() const noexcept { return info_; }
  std::size_t weight_bytes() const noexcept { return weight_bytes_; }

 protected:
  friend std::unique_ptr<Transformer> make_transformer(const ArchitectureContext& context);
  ModelInfo info_;
  std::size_t weight_bytes_ = 0;
};

// A model head: maps the transformer's token states of a pass to outputs per sequence (a classifier on
// the first token) or per token (a token classifier). Heads live in heads.cpp; the architecture table says
// which layout of each kind an architecture's checkpoints carry. forward() is const and thread-safe and
// only enqueues work, as Transformer::forward().
class Head {
 public:
  virtual ~Head() = default;
  // Float32 outputs [sequences, outputs()] (or [T, outputs()] for a per-token head) from the pass's token
  // states [T, hidden] in the model's dtype.
  virtual at::Tensor forward(const at::Tensor& states, const DeviceBatch& batch) const = 0;
  std::int64_t outputs() const noexcept { return outputs_; }
  std::size_t weight_bytes() const noexcept { return weight_bytes_; }

 protected:
  std::int64_t outputs_ = 0;
  std::size_t weight_bytes_ = 0;
};

// The kinds of heads: one column each in the architecture table, one row each in head_kinds(). A new kind
// (token classification, vision) is one more value here, its row, and its layouts in heads.cpp.
enum class HeadKind : std::size_t { SequenceClassification, TokenClassification, Count };
inline constexpr std::size_t kHeadKinds = static_cast<std::size_t>(HeadKind::Count);
struct HeadKindInfo {
  HeadKind kind;
  std::string_view name;          // "sequence classification"
  std::string_view class_suffix;  // config.json's architectures name it: "ForSequenceClassification"
};
std::span<const HeadKindInfo> head_kinds();  // heads.cpp

// What a head's layout gets: the model's checkpoint, device and dtype, its transformer's sizes, and how
// many outputs the checkpoint declares (labels).
struct HeadContext {
  const ArchitectureContext& model;
  const ModelInfo& info;
  std::int64_t outputs = 1;
};
using MakeHead = std::unique_ptr<Head> (*)(const HeadContext& context);

// A checkpoint's transformer and its head of one kind, loaded together: what every model with a head runs
// (CrossEncoderModel, TokenClassifierModel). The head's layout is looked up before the transformer loads, so an
// architecture without one is refused first (head_layout's error). forward() is const and thread-safe and only
// enqueues work: the head's float32 outputs for a packed batch, uploaded to the model's device (with packed
// attention, padded to padded_pass_tokens(); the outputs are the batch's rows only).
class HeadedTransformer {
 public:
  // `checkpoint` must outlive this (its owner's copy); `outputs`: the labels the checkpoint declares.
  HeadedTransformer(const Checkpoint& checkpoint, c10::Device device, c10::ScalarType dtype, HeadKind kind,
                    std::int64_t outputs);
  at::Tensor forward(const PackedBatch& batch) const;
  const ModelInfo& info() const noexcept { return transformer_->info(); }
  std::int64_t outputs() const noexcept { return head_->outputs(); }
  std::size_t weight_bytes() const noexcept { return transformer_->weight_bytes() + head_->weight_bytes(); }

 private:
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<Head> head_;
  c10::Device device_;
  HeadKind kind_;
  bool packed_ = false;
};

// Heads' layouts (heads.cpp), shared by the architectures whose checkpoints name the tensors alike.
// BertForSequenceClassification: the pooler's dense + tanh on the first token, then `classifier`.
std::unique_ptr<Head> make_pooler_classifier(const HeadContext& context);
// RobertaClassificationHead (XLM-R, CamemBERT): `classifier.dense` + tanh on the first token, then
// `classifier.out_proj`.
std::unique_ptr<Head> make_dense_out_proj_classifier(const HeadContext& context);
// DebertaV2ForSequenceClassification (architectures/deberta_v2.cpp): ContextPooler's `pooler.dense` + config.json's
// pooler_hidden_act on the first token, then `classifier`.
std::unique_ptr<Head> make_deberta_pooler_classifier(const HeadContext& context);

// *ForTokenClassification (BERT, RoBERTa/XLM-R/CamemBERT, DistilBERT, MPNet, DeBERTa-v2): `classifier`, a linear
// layer over every token's state.
std::unique_ptr<Head> make_token_classifier(const HeadContext& context);
// ModernBertForTokenClassification: `head.dense` (+ bias when config.json's classifier_bias), config.json's
// classifier_activation, `head.norm` (LayerNorm, its bias when norm_bias), then `classifier`, over every token.
std::unique_ptr<Head> make_modernbert_token_classifier(const HeadContext& context);
// Qwen3ForTokenClassification (transformers' GenericForTokenClassification): `score`, a linear layer over every
// token's state, its bias unless config.json's token_classification_bias is false.
std::unique_ptr<Head> make_score_token_classifier(const HeadContext& context);

// One line of the architecture table.
struct Architecture {
  std::vector<std::string_view> model_types;  // config.json's model_type values it runs
  std::string_view name;                      // short, for executor descriptions: "RoBERTa/XLM-R/CamemBERT"
  std::string_view description;
  std::unique_ptr<Transformer> (*make)(const ArchitectureContext& context);
  // Checks every config.json value the architecture reads (range, and agreement with the shapes of the
  // weights in model.safetensors' header) before anything is allocated: Checkpoint::read() (so
  // validation) and make_transformer() run it, on a context for the CPU in float32, and throw what it
  // throws (naming the file and key).
  void (*check)(const ArchitectureContext& context) = nullptr;
  // Its heads, one column per HeadKind: the layout of that head in its checkpoints, null where flowline runs
  // none.
  std::array<MakeHead, kHeadKinds> heads{};
};
std::span<const Architecture> architectures();  // architectures/table.cpp
const Architecture* find_architecture(std::string_view model_type);
// The transformer of context.checkpoint's model_type, from the table, with info().model_type set; throws
// when the table has no such architecture.
std::unique_ptr<Transformer> make_transformer(const ArchitectureContext& context);
// The layout of the head of `kind` for `checkpoint`'s architecture, from the table's column; throws naming
// config.json and the model types that have one when the architecture has none (Checkpoint::problem() asks
// it too, so validation refuses such a checkpoint).
MakeHead head_layout(HeadKind kind, const Checkpoint& checkpoint);
// Validation's check of a head: its layout (head_layout), made on the CPU in float32 from the checkpoint's
// head tensors alone (the transformer's are not read), the hidden size taken from config.json (hidden_size, or
// DistilBERT's dim). Throws naming model.safetensors and the tensor missing or misshapen.
void check_head(HeadKind kind, const Checkpoint& checkpoint, std::int64_t outputs);
// The model types with a head of `kind`, in the table's order ("bert, roberta, xlm-roberta, camembert").
std::vector<std::string_view> model_types_with(HeadKind kind);

// ---- shared pieces of architectures -----------------------------------------------------------------

// Self-attention over packed tokens. q, k, v: [T, heads, head_dim] (k and v may have fewer heads: grouped
// queries). Packed (a GPU in fp16/bf16): one kernel over all sequences, flowline's own where the head
// dimension is a multiple of 8 up to 128, else LibTorch's varlen FlashAttention-2. Otherwise per group of equal-length
// sequences with scaled_dot_product_attention, `bias` (if defined: [heads, L, L] for a group of length L, from
// bias_for(L)) added to the scores. `window` > 0: each token sees only tokens at most `window` away
// (sliding-window attention). Returns [T, heads * head_dim].
//
// Attention with a bias on a GPU in float32 runs padded instead: the pass padded to its longest sequence (rounded up
// to 8 for the memory-efficient kernel), one scaled_dot_product_attention call with the bias and the
// padding as its mask. prepare_attention() builds that layout and mask once per forward pass; every
// layer's attend() then shares them.
struct PaddedPass;
struct AttentionOptions {
  double scale = 1.0;
  bool causal = false;
  std::int64_t window = 0;
  std::function<at::Tensor(std::int64_t length)> bias_for;  // empty: no bias
  std::shared_ptr<const PaddedPass> padded;                 // set by prepare_attention()
  // A bias that depends only on key position - query position (MPNet's): [heads, 2P - 1] float32, the
  // bias of offset d at column d + P - 1. Packed (a GPU in fp16/bf16), flowline's kernel adds it
  // (cuda_kernels.hpp) instead of running padded; bias_for is still what the other paths use.
  at::Tensor relative_bias;
  // Rotary embeddings to apply to q and k before the scores (ModernBERT, Qwen3), as rotary_rows() made them for
  // the pass (cuda_kernels.hpp); cos undefined: q and k come rotated. Packed on a GPU with head_dim 16, 32,
  // 64 or 128 the attention kernel applies them as it loads q and k; otherwise attend() rotates them first.
  RotaryRows rotary;
};
void prepare_attention(AttentionOptions& options, const DeviceBatch& batch, c10::ScalarType dtype,
                       std::int64_t kv_heads);
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DeviceBatch& batch,
                  const AttentionOptions& options);

// Rotary position embeddings (rotary.cpp), as Hugging Face's default RoPE makes them: cos and sin
// [positions, head_dim / 2] from float32 frequencies theta^(-2i / head_dim), rounded to the model's dtype
// (Hugging Face's tables repeat each half, so half of each suffices).
std::pair<at::Tensor, at::Tensor> rotary_tables(double theta, std::int64_t head_dim, std::int64_t positions,
                                                c10::ScalarType dtype, c10::Device device);
// x [T, heads, head_dim] rotated at each token's position, cos and sin [T, head_dim / 2] being the tables'
// rows at the tokens' positions: each head's halves (x1, x2) become (x1 cos - x2 sin, x2 cos + x1 sin) —
// Hugging Face's x * cos + rotate_half(x) * sin — in the model's dtype. Returns a new [T, heads, head_dim].
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// A module's activation (Dense, classifier heads): embedding_model.cpp.
at::Tensor apply_activation(Activation activation, const at::Tensor& x);

// Activations named in config.json (hidden_act / hidden_activation).
at::Tensor activate(const at::Tensor& x, const std::string& name);
bool known_activation(const std::string& name);

}  // namespace flowline::models::detail
