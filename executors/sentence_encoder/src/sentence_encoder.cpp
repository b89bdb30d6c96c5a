#include "flowline/text_models/sentence_encoder.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/text_models/bert.hpp"
#include "flowline/text_models/wordpiece_tokenizer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>

namespace flowline::text_models {
namespace {

// Encoders shared by the replicas of a process: one copy of the weights per (model, device, dtype).
// Entries live as long as a replica holds them.
std::shared_ptr<const BertEncoder> shared_encoder(const std::string& model, c10::Device device, c10::ScalarType dtype) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::string, int>, std::weak_ptr<const BertEncoder>> cache;
  const auto key = std::make_tuple(std::filesystem::weakly_canonical(model).string(), device.str(), static_cast<int>(dtype));
  std::lock_guard lock(mutex);
  if (auto existing = cache[key].lock()) return existing;
  auto encoder = std::make_shared<const BertEncoder>(model, device, dtype);
  cache[key] = encoder;
  return encoder;
}

c10::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return c10::kFloat;
  if (name == "fp16" || name == "float16") return c10::kHalf;
  if (name == "bf16" || name == "bfloat16") return c10::kBFloat16;
  throw Error(fmt::format("parameter 'dtype': expected fp32, fp16 or bf16, got '{}'", name));
}

class SentenceEncoder : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "SentenceEncoder",
        "Encode texts into sentence embeddings with a BERT sentence-transformers checkpoint (LibTorch)",
        {ParamSpec::required_param("model", ParamType::String, "sentence-transformers checkpoint folder"),
         ParamSpec::optional("device", ParamType::String, "",
                             "cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
         ParamSpec::optional("dtype", ParamType::String, "fp32", "fp32, fp16 or bf16"),
         ParamSpec::optional("max_seq_length", ParamType::Int, 0, "truncate texts to this many tokens (0: the model's)"),
         ParamSpec::optional("batch_size", ParamType::Int, 64, "sequences per forward pass"),
         ParamSpec::optional("max_batch_tokens", ParamType::Int, 0, "tokens per forward pass (0: no limit)"),
         ParamSpec::optional("normalize", ParamType::Json, "auto", "auto (as the checkpoint says), true or false"),
         ParamSpec::optional("share_weights", ParamType::Bool, true,
                             "replicas on the same device share one copy of the weights (each on its own CUDA stream)"),
         ParamSpec::optional("warmup", ParamType::Bool, true,
                             "run a few batches at start so the first requests do not pay for CUDA and allocator set-up")},
        {"/encode"},
    };
  }

  explicit SentenceEncoder(const ExecutorContext& context) : Executor(context) {
    const std::string model = params().get<std::string>("model");
    const std::string device_name = params().get<std::string>("device");
    device_ = device_name.empty() ? runtime().device : resolve_device(device_name);
    set_thread_device(device_);
    dtype_ = parse_dtype(params().get<std::string>("dtype"));
    if (device_.is_cpu() && dtype_ == c10::kHalf) {
      throw Error("parameter 'dtype': fp16 needs a GPU device; use fp32 or bf16 on the CPU");
    }
    tokenizer_ = std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_model_folder(model));
    encoder_ = params().get<bool>("share_weights") ? shared_encoder(model, device_, dtype_)
                                                   : std::make_shared<const BertEncoder>(model, device_, dtype_);
    if (device_.is_cuda()) stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    const auto& config = encoder_->config();
    max_seq_length_ = params().get<std::size_t>("max_seq_length");
    if (max_seq_length_ == 0) max_seq_length_ = static_cast<std::size_t>(config.max_seq_length);
    if (max_seq_length_ < 2 || max_seq_length_ > static_cast<std::size_t>(config.bert.max_position_embeddings)) {
      throw Error(fmt::format("parameter 'max_seq_length': {} is outside 2..{}", max_seq_length_,
                              config.bert.max_position_embeddings));
    }
    batch_size_ = params().get<std::size_t>("batch_size");
    if (batch_size_ == 0) throw Error("parameter 'batch_size': must be at least 1");
    max_batch_tokens_ = params().get<std::size_t>("max_batch_tokens");
    if (max_batch_tokens_ != 0 && max_batch_tokens_ < max_seq_length_) {
      throw Error(fmt::format("parameter 'max_batch_tokens': {} is less than max_seq_length {}", max_batch_tokens_,
                              max_seq_length_));
    }
    const auto normalize = params().get<boost::json::value>("normalize");
    if (normalize.is_bool()) {
      normalize_override_ = normalize.get_bool() ? 1 : 0;
    } else if (!(normalize.is_string() && normalize.get_string() == "auto")) {
      throw Error("parameter 'normalize': expected auto, true or false");
    }
    spdlog::info("executor '{}' replica {}: {} ({} layers, hidden {}, {} pooling{}) on {} in {}, {:.1f} MB of weights",
                 runtime().name, runtime().replica, model, config.bert.num_layers, config.bert.hidden_size,
                 to_string(config.pooling), config.normalize ? " + normalize" : "", device_.str(),
                 c10::toString(dtype_), encoder_->weight_bytes() / 1e6);
    if (params().get<bool>("warmup")) warm_up();
    bind("/encode", &SentenceEncoder::encode);
    bind_default(&SentenceEncoder::encode);
  }

  // Forward passes over dummy sequences of the sizes real batches will have, so CUDA context, cuBLAS and
  // attention kernels and the caching allocator are ready before the first request. On the CPU only a
  // tiny batch (the cost there is compute, not set-up).
  void warm_up() {
    c10::InferenceMode guard;
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    std::vector<std::pair<std::size_t, std::size_t>> shapes;  // (sequences, length)
    if (device_.is_cuda()) {
      for (std::size_t len : {max_seq_length_, std::size_t{128}, std::size_t{64}, std::size_t{16}}) {
        const std::size_t length = std::min(len, max_seq_length_);
        std::size_t count = batch_size_;
        if (max_batch_tokens_ != 0) count = std::max<std::size_t>(1, std::min(count, max_batch_tokens_ / length));
        shapes.emplace_back(count, length);
      }
    } else {
      shapes.emplace_back(2, 16);
    }
    for (const auto& [count, length] : shapes) {
      std::vector<std::int32_t> ids(count * length, tokenizer_->unk_id());
      std::vector<int64_t> lengths(count, static_cast<int64_t>(length));
      encoder_->encode(PackedBatch{ids, lengths}).to(at::kCPU);
    }
  }

 private:
  void encode(DocumentArray& docs) {
    if (docs.empty()) return;
    c10::InferenceMode guard;
    // Each replica runs on its own stream, so replicas sharing weights on one GPU overlap.
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    const std::size_t n = docs.size();
    tokenize(docs);
    // Longest first, so forward passes hold sequences of similar length.
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
      return offsets_[a + 1] - offsets_[a] > offsets_[b + 1] - offsets_[b];
    });
    const int64_t hidden = encoder_->config().bert.hidden_size;
    at::Tensor result = at::empty({static_cast<int64_t>(n), hidden}, at::TensorOptions().dtype(at::kFloat).device(device_));
    std::size_t start = 0;
    while (start < n) {
      packed_.clear();
      lengths_.clear();
      std::size_t end = start;
      while (end < n && end - start < batch_size_) {
        const std::size_t doc = order_[end];
        const std::size_t len = offsets_[doc + 1] - offsets_[doc];
        if (max_batch_tokens_ != 0 && !lengths_.empty() && packed_.size() + len > max_batch_tokens_) break;
        packed_.insert(packed_.end(), ids_.begin() + static_cast<std::ptrdiff_t>(offsets_[doc]),
                       ids_.begin() + static_cast<std::ptrdiff_t>(offsets_[doc + 1]));
        lengths_.push_back(static_cast<int64_t>(len));
        ++end;
      }
      at::Tensor pooled = encoder_->encode(PackedBatch{packed_, lengths_});
      if (normalize_override_ == 1 && !encoder_->config().normalize) {
        pooled = pooled / pooled.norm(2, {1}, true).clamp_min(1e-12);
      }
      if (normalize_override_ == 0 && encoder_->config().normalize) {
        throw Error("normalize: false cannot undo the Normalize module of this checkpoint");
      }
      rows_.assign(order_.begin() + static_cast<std::ptrdiff_t>(start), order_.begin() + static_cast<std::ptrdiff_t>(end));
      at::Tensor index = at::tensor(std::vector<int64_t>(rows_.begin(), rows_.end()), at::TensorOptions().dtype(at::kLong))
                             .to(device_);
      result.index_copy_(0, index, pooled);
      start = end;
    }
    docs.set_embeddings(result.to(at::kCPU));
  }

  // Tokenizes every document into ids_ (offsets_[i] .. offsets_[i+1] are document i's ids). Large batches
  // are cut into contiguous chunks tokenized in parallel on ATen's thread pool, then joined in order.
  void tokenize(const DocumentArray& docs) {
    const std::size_t n = docs.size();
    constexpr std::size_t kGrain = 256;
    const std::size_t chunks = std::min<std::size_t>(static_cast<std::size_t>(at::get_num_threads()), (n + kGrain - 1) / kGrain);
    ids_.clear();
    offsets_.assign(n + 1, 0);
    if (chunks <= 1) {
      for (std::size_t i = 0; i < n; ++i) {
        tokenizer_->encode_into(docs[i].text, max_seq_length_, ids_);
        offsets_[i + 1] = ids_.size();
      }
      return;
    }
    chunk_ids_.resize(chunks);
    const std::size_t per_chunk = (n + chunks - 1) / chunks;
    at::parallel_for(0, static_cast<int64_t>(chunks), 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        auto& buffer = chunk_ids_[static_cast<std::size_t>(c)];
        buffer.clear();
        const std::size_t first = static_cast<std::size_t>(c) * per_chunk, last = std::min(n, first + per_chunk);
        for (std::size_t i = first; i < last; ++i) {
          tokenizer_->encode_into(docs[i].text, max_seq_length_, buffer);
          offsets_[i + 1] = buffer.size();  // relative to the chunk; made absolute below
        }
      }
    });
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::size_t base = ids_.size();
      const std::size_t first = c * per_chunk, last = std::min(n, first + per_chunk);
      for (std::size_t i = first; i < last; ++i) offsets_[i + 1] += base;
      ids_.insert(ids_.end(), chunk_ids_[c].begin(), chunk_ids_[c].end());
    }
  }

  c10::Device device_{c10::kCPU};
  c10::ScalarType dtype_ = c10::kFloat;
  std::unique_ptr<WordPieceTokenizer> tokenizer_;
  std::shared_ptr<const BertEncoder> encoder_;
  std::optional<c10::cuda::CUDAStream> stream_;
  std::size_t max_seq_length_ = 0, batch_size_ = 64, max_batch_tokens_ = 0;
  int normalize_override_ = -1;  // -1 auto, 0 off, 1 on
  // Buffers reused across batches: no allocation per document.
  std::vector<std::int32_t> ids_;
  std::vector<std::vector<std::int32_t>> chunk_ids_;
  std::vector<std::size_t> offsets_, order_, rows_;
  std::vector<std::int32_t> packed_;
  std::vector<int64_t> lengths_;
};

}  // namespace

void register_sentence_encoder(Registry& registry) { registry.add<SentenceEncoder>("flowline::sentence_encoder"); }

}  // namespace flowline::text_models
