// The SentenceEncoder executor: tokenizes texts, sizes batches to the device, runs the BERT encoder and
// pools the embeddings back onto the documents.
#include "flowline/sentence_encoder/sentence_encoder.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/model_folder.hpp"
#include "flowline/torch_support.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <shared_mutex>

namespace flowline::sentence_encoder {
namespace {

// normalize: auto, true or false (a choice of a text and two bools, hence Json with choices).
ParamSpec normalize_spec() {
  ParamSpec spec = ParamSpec::optional("normalize", ParamType::Json, "auto", "auto: as the checkpoint says");
  spec.choices = {boost::json::value("auto"), boost::json::value(true), boost::json::value(false)};
  return spec;
}

class SentenceEncoder : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "SentenceEncoder",
        fmt::format("Encode texts into sentence embeddings with a sentence-transformers checkpoint: {} (LibTorch); "
                    "documents without text pass through without an embedding",
                    fmt::join(models::supported_architectures(models::Checkpoint::Use::Embedding), ", ")),
        {ParamSpec::required_param("model", ParamType::Path,
                                   "sentence-transformers checkpoint folder, or a model name ORG/NAME in the local "
                                   "Hugging Face cache ($HF_HOME/hub)")
             .hub_model_name()
             .check([](const boost::json::value& v) {
               return models::Checkpoint::problem(std::string(v.get_string()), models::Checkpoint::Use::Embedding);
             }),
         ParamSpec::optional("device", ParamType::String, "",
                             "cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
         ParamSpec::choice("dtype", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}, "fp32",
                           "weights and activations (fp16 needs a GPU)"),
         ParamSpec::optional("max_seq_length", ParamType::Int, 0, "truncate texts to this many tokens (0: the model's)")
             .min(0),
         ParamSpec::optional("batch_size", ParamType::IntOrAuto, 64,
                             "sequences per forward pass; auto: the most that fit the memory budget at "
                             "max_seq_length, from a calibration at start (GPU)")
             .min(1),
         ParamSpec::optional("max_batch_tokens", ParamType::IntOrAuto, 0,
                             "tokens per forward pass (0: no limit); auto: the most that fit the memory budget, "
                             "from a calibration at start (GPU)")
             .min(0),
         ParamSpec::optional("memory_fraction", ParamType::Double, 0.9,
                             "for auto sizes: the share of the GPU memory free at start that this executor's "
                             "replicas on a device may use together")
             .min(0)
             .max(1),
         normalize_spec(),
         ParamSpec::optional("share_weights", ParamType::Bool, true,
                             "replicas on the same device share one copy of the weights (each on its own CUDA stream)"),
         ParamSpec::optional("cuda_graphs", ParamType::Bool, true,
                             "GPU, fp16/bf16: replay forward passes of up to cuda_graph_max_tokens tokens from CUDA "
                             "graphs (captured at start), so short passes are not bound by kernel launches"),
         ParamSpec::optional("cuda_graph_max_tokens", ParamType::Int, 16384,
                             "the largest pass (in tokens) replayed from a CUDA graph; larger passes run eagerly")
             .min(0),
         ParamSpec::optional("keep_on_device", ParamType::Bool, false,
                             "leave embeddings on the executor's GPU for a next executor on the same device; "
                             "they are copied to the host only where an output needs them"),
         ParamSpec::optional("prompt_name", ParamType::String, "",
                             "a prompt of the checkpoint's config_sentence_transformers.json put before every text "
                             "(e5's query, passage); empty: the checkpoint's default_prompt_name, if it has one. A "
                             "request's parameters prompt_name (a name) or prompt (the text) override it"),
         ParamSpec::optional("tokenizer_threads", ParamType::Int, 0,
                             "threads that tokenize one request (0: one when the executor has several replicas, "
                             "which tokenize side by side, else ATen's intra-op threads)")
             .min(0),
         ParamSpec::optional(
             "warmup", ParamType::Bool, true,
             "run a few batches at start so the first requests do not pay for CUDA and allocator set-up (passes "
             "and a request of the flow's size by one replica per GPU, a small pass and request by each other)")},
        {"/encode"},
    };
    // replicas: auto. Several replicas overlap one's tokenizing and launching with another's GPU work. On
    // one H100 (docs/benchmarks.md, session 19) eight gave MiniLM 124,046 docs/s against four's 109,432, and
    // base-size models the same within 2%; batch_size: auto sizes each replica's share of the memory.
    spec.replicas_per_gpu = 8;
    return spec;
  }

  // What a request may ask of /encode (and of any endpoint, which encodes too); checked by the core first.
  static std::vector<EndpointParams> request_params() {
    return {{std::string(kDefaultEndpoint),
             {ParamSpec::optional("prompt_name", ParamType::String, nullptr,
                                  "a prompt of the checkpoint (config_sentence_transformers.json) put before each "
                                  "text; a name it lacks is refused (default: the encoder's `prompt_name`)"),
              ParamSpec::optional("prompt", ParamType::String, nullptr,
                                  "a text put before each text, instead of any prompt_name"),
              ParamSpec::optional("count_tokens", ParamType::Bool, false,
                                  "each document's tokens, special ones included, in tags.tokens (the gateway's "
                                  "usage figures)"),
              ParamSpec::optional("dimensions", ParamType::Int, nullptr,
                                  "the first N values of each embedding, L2-normalised again (Matryoshka, as "
                                  "OpenAI's and TEI's `dimensions`); more than the model gives is refused")
                  .min(1)}}};
  }

  explicit SentenceEncoder(const ExecutorContext& context) : Executor(context) {
    const std::string model = params().get<std::string>("model");
    device_ = executor_device(params().get<std::string>("device"), runtime().device);
    dtype_ = parse_dtype(params().get<std::string>("dtype"));
    if (device_.is_cpu() && dtype_ == c10::kHalf) {
      throw Error("parameter 'dtype': fp16 needs a GPU device; use fp32 or bf16 on the CPU");
    }
    // tokenizer.json (any kind flowline::tokenizers runs), else vocab.txt as BERT's WordPiece.
    tokenizer_ = models::Tokenizer::from_folder(model);
    auto load = [&]() -> std::shared_ptr<const models::EmbeddingModel> {
      return std::make_shared<const models::EmbeddingModel>(model, device_, dtype_);
    };
    // Replicas on one device share one copy of the weights.
    encoder_ = params().get<bool>("share_weights")
                   ? shared_per_device<models::EmbeddingModel>(model, device_, dtype_, load)
                   : load();
    if (device_.is_cuda()) {
      start_up_ = runtime().group
                      ? runtime().group->shared<DeviceStartUp>([] { return std::make_shared<DeviceStartUp>(); })
                      : std::make_shared<DeviceStartUp>();
      stream_ = replica_stream(device_);
      index_staging_ = HostStaging(/*pinned=*/true);
      output_staging_ = HostStaging(/*pinned=*/true);
    }
    const auto& info = encoder_->info();
    const auto& checkpoint = encoder_->checkpoint();
    max_seq_length_ = params().get<std::size_t>("max_seq_length");
    if (max_seq_length_ == 0) max_seq_length_ = static_cast<std::size_t>(checkpoint.max_seq_length);
    if (max_seq_length_ < 2 || max_seq_length_ > static_cast<std::size_t>(info.max_positions)) {
      throw Error(fmt::format("parameter 'max_seq_length': {} is outside 2..{}", max_seq_length_, info.max_positions));
    }
    const auto batch_size = size_or_auto("batch_size");
    const auto max_batch_tokens = size_or_auto("max_batch_tokens");
    planner_.set_budget({batch_size.value_or(64), max_batch_tokens.value_or(0)});
    if (max_batch_tokens && *max_batch_tokens != 0 && *max_batch_tokens < max_seq_length_) {
      throw Error(fmt::format("parameter 'max_batch_tokens': {} is less than max_seq_length {}", *max_batch_tokens,
                              max_seq_length_));
    }
    const std::string prompt_name = params().get<std::string>("prompt_name");
    if (!prompt_name.empty()) {
      default_prompt_ = checkpoint.prompt(prompt_name);
    } else if (!checkpoint.default_prompt_name.empty()) {
      default_prompt_ = checkpoint.prompt(checkpoint.default_prompt_name);
    }
    memory_fraction_ = params().get<double>("memory_fraction");
    if (!(memory_fraction_ > 0 && memory_fraction_ <= 1)) {
      throw Error(fmt::format("parameter 'memory_fraction': {} is outside (0, 1]", memory_fraction_));
    }
    // normalize: true adds a normalization where the checkpoint has none; false cannot take one away.
    const auto normalize = params().get<boost::json::value>("normalize");  // else "auto" (a declared choice)
    if (normalize.is_bool() && !normalize.get_bool() && checkpoint.modules.normalize) {
      throw Error("parameter 'normalize': false cannot undo the Normalize module of this checkpoint");
    }
    normalize_ = normalize.is_bool() && normalize.get_bool() && !checkpoint.modules.normalize;
    std::vector<std::string> pooling;
    for (const auto p : checkpoint.modules.pooling) pooling.push_back(models::to_string(p));
    spdlog::info(
        "executor '{}' replica {}: {} ({}, {} layers, hidden {}, {} pooling{}{}) on {} in {}, {:.1f} MB of weights",
        runtime().name, runtime().replica, model, info.model_type, info.num_layers, info.hidden_size,
        fmt::join(pooling, "+"),
        checkpoint.modules.dense.empty() ? "" : fmt::format(" + {} dense", checkpoint.modules.dense.size()),
        checkpoint.modules.normalize ? " + normalize" : "", device_.str(), c10::toString(dtype_),
        encoder_->weight_bytes() / 1e6);
    if (!batch_size || !max_batch_tokens) choose_batch_sizes(!batch_size, !max_batch_tokens);
    keep_on_device_ = params().get<bool>("keep_on_device");
    tokenizer_threads_ = params().get<std::size_t>("tokenizer_threads");
    if (tokenizer_threads_ == 0)
      tokenizer_threads_ = runtime().replicas > 1 ? 1 : static_cast<std::size_t>(at::get_num_threads());
    if (params().get<bool>("cuda_graphs")) set_up_graphs(params().get<std::size_t>("cuda_graph_max_tokens"));
    if (params().get<bool>("warmup")) warm_up();
    const auto warning = random_weights_warning(model, runtime().name, "model", "embeddings");
    if (!warning.empty() && runtime().replica == 0) spdlog::warn("{}", warning);
    // In --stats; Python's SentenceTransformer reads them (get_embedding_dimension, max_seq_length).
    metrics().set("embedding_dimension", static_cast<double>(encoder_->dimension()));
    metrics().set("max_seq_length", static_cast<double>(max_seq_length_));
    bind("/encode", &SentenceEncoder::encode);
    bind_default(&SentenceEncoder::encode);
  }

  // Start-up work of every SentenceEncoder replica in the process: a calibration (it reads the device's
  // allocator peaks, per device and not per replica, and empties the allocator's cache) and a CUDA graph
  // capture hold it alone; warm-up passes hold it shared, so replicas warm up side by side, each on its
  // own stream, and never while a calibration measures.
  static std::shared_mutex& start_up_mutex() {
    static std::shared_mutex mutex;
    return mutex;
  }

  // What this executor's replicas on each device do once for all of them, shared through their
  // ReplicaGroup: the batch sizes that 'auto' chose, measured by the first replica to get there (the budget
  // is theirs together: memory_fraction of the memory free at start, over replicas_on_device), and the
  // warm-up passes and request, which load the kernels and library workspaces of the process for every
  // replica (the others run a small pass and request on their own stream).
  struct DeviceStartUp {
    struct Chosen {
      models::PassBudget budget;
      models::Calibration calibration;
      int replica = 0;  // the replica that measured it
    };
    std::mutex mutex;  // held while the first replica on a device calibrates: the others wait for it
    std::map<std::string, Chosen> budgets;  // by device
    std::set<std::string> warmed;           // devices where a replica has run the warm-up passes
  };

  // A size parameter: its value, or nullopt for "auto".
  std::optional<std::size_t> size_or_auto(const char* name) const {
    const auto value = params().get<boost::json::value>(name);
    if (value.is_string()) return std::nullopt;                        // "auto", as validation allows
    return static_cast<std::size_t>(value.to_number<std::int64_t>());  // bounds checked by validation
  }

  // batch_size / max_batch_tokens "auto": the planner's calibration (models::calibrate_budget) on passes
  // of max_seq_length tokens, so that this executor's replicas on the device together stay within
  // memory_fraction of the memory free at start. Replicas calibrate one at a time per device. On the CPU,
  // where memory is seldom the limit, auto keeps the defaults.
  void choose_batch_sizes(bool auto_batch, bool auto_tokens) {
    if (!device_.is_cuda()) {
      spdlog::info(
          "executor '{}' replica {}: batch sizing 'auto' calibrates on a GPU; on the CPU it keeps "
          "batch_size {} and max_batch_tokens {}",
          runtime().name, runtime().replica, planner_.budget().max_sequences, planner_.budget().max_tokens);
      return;
    }
    std::lock_guard hold(start_up_->mutex);
    if (const auto found = start_up_->budgets.find(device_.str()); found != start_up_->budgets.end()) {
      const DeviceStartUp::Chosen& chosen = found->second;
      planner_.set_budget(chosen.budget);
      spdlog::info("executor '{}' replica {}: batch_size {}{}, max_batch_tokens {}{}, as replica {} calibrated",
                   runtime().name, runtime().replica, chosen.budget.max_sequences, auto_batch ? " (auto)" : "",
                   chosen.budget.max_tokens, auto_tokens ? " (auto)" : "", chosen.replica);
      report_budget(chosen.calibration);
      return;
    }
    std::unique_lock lock(start_up_mutex());
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    auto run_pass = [&](std::size_t sequences) {
      std::vector<std::int32_t> ids(sequences * max_seq_length_, filler_id());
      std::vector<int64_t> lengths(sequences, static_cast<int64_t>(max_seq_length_));
      at::Tensor out = encoder_->encode(models::PackedBatch{ids, lengths});
      stream_->synchronize();
    };
    stream_->synchronize();
    models::PassBudget budget = planner_.budget();
    const std::size_t replicas = static_cast<std::size_t>(std::max(1, runtime().replicas_on_device));
    const models::Calibration c = models::calibrate_budget(
        budget, {auto_batch, auto_tokens, max_seq_length_, memory_fraction_, replicas}, device_, run_pass);
    planner_.set_budget(budget);
    spdlog::info(
        "executor '{}' replica {}: calibrated {:.0f} bytes per token + {:.1f} MiB per pass; budget {:.0f} MiB "
        "({:.0f}% of {:.0f} MiB free{}); batch_size {}{}, max_batch_tokens {}{}",
        runtime().name, runtime().replica, c.bytes_per_token, c.fixed_bytes / (1 << 20), c.budget_bytes / (1 << 20),
        memory_fraction_ * 100, c.free_bytes / double(1 << 20),
        runtime().replicas_on_device > 1 ? fmt::format(", shared by {} replicas", runtime().replicas_on_device) : "",
        budget.max_sequences, auto_batch ? " (auto)" : "", budget.max_tokens, auto_tokens ? " (auto)" : "");
    start_up_->budgets.emplace(device_.str(), DeviceStartUp::Chosen{budget, c, runtime().replica});
    report_budget(c);
  }

  void report_budget(const models::Calibration& c) {
    metrics().set("calibrated_bytes_per_token", c.bytes_per_token);
    metrics().set("batch_size", static_cast<double>(planner_.budget().max_sequences));
    metrics().set("max_batch_tokens", static_cast<double>(planner_.budget().max_tokens));
  }

  // CUDA graphs for passes of up to `max_tokens` tokens, where the encoder's attention allows them (a GPU
  // in fp16 or bf16); elsewhere the parameter has no effect and the log says so.
  void set_up_graphs(std::size_t max_tokens) {
    if (max_tokens == 0) return;
    if (!encoder_->graphable()) {
      if (device_.is_cuda()) {
        spdlog::info("executor '{}' replica {}: cuda_graphs apply to fp16 and bf16; {} passes run eagerly",
                     runtime().name, runtime().replica, c10::toString(dtype_));
      }
      return;
    }
    const models::PassBudget& budget = planner_.budget();
    std::size_t largest_pass = budget.max_sequences * max_seq_length_;
    if (budget.max_tokens != 0) largest_pass = std::min(largest_pass, budget.max_tokens);
    graphs_ = std::make_unique<models::GraphedEmbeddingModel>(encoder_, static_cast<int64_t>(budget.max_sequences),
                                                              static_cast<int64_t>(std::min(max_tokens, largest_pass)),
                                                              static_cast<int64_t>(max_seq_length_));
  }

  // Passes over dummy sequences of the lengths real batches have, so CUDA context, cuBLAS and attention kernels
  // and the caching allocator are ready before the first request: by the first of this executor's replicas on
  // each GPU (the kernels are the process's), a tiny pass by the others and on the CPU. Each of at most
  // kMaxWarmupTokens, none at the full length when batch sizing ran such passes (H200, MiniLM fp32: 2^17 tokens
  // cost 0.4 s of every start for no faster first requests). Then each replica's CUDA graphs and one request
  // through encode(). Replicas warm up side by side (start_up_mutex() shared), except for the graph capture.
  void warm_up() {
    const auto began = std::chrono::steady_clock::now();
    bool first_on_device = false, calibrated_here = false;
    if (device_.is_cuda()) {
      // Before start_up_mutex(): choose_batch_sizes() takes the two the other way round.
      std::lock_guard hold(start_up_->mutex);
      first_on_device = start_up_->warmed.insert(device_.str()).second;
      calibrated_here = start_up_->budgets.count(device_.str()) != 0;
    }
    std::shared_lock passes_lock(start_up_mutex());
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    std::vector<std::pair<std::size_t, std::size_t>> shapes;  // (sequences, length)
    const models::PassBudget& budget = planner_.budget();
    if (first_on_device) {
      for (std::size_t len : {max_seq_length_, std::size_t{128}, std::size_t{64}, std::size_t{16}}) {
        const std::size_t length = std::min(len, max_seq_length_);
        if (calibrated_here && length == max_seq_length_) continue;
        std::size_t count = budget.max_sequences;
        if (budget.max_tokens != 0) count = std::max<std::size_t>(1, std::min(count, budget.max_tokens / length));
        shapes.emplace_back(count, length);
      }
    } else {
      shapes.emplace_back(2, 16);  // the CPU, or a replica whose device another replica warmed up
    }
    for (auto [count, length] : shapes) {
      count = std::max<std::size_t>(1, std::min(count, kMaxWarmupTokens / length));  // auto sizes can be huge
      std::vector<std::int32_t> ids(count * length, filler_id());
      std::vector<int64_t> lengths(count, static_cast<int64_t>(length));
      encoder_->encode(models::PackedBatch{ids, lengths}).to(at::kCPU);
    }
    const std::chrono::duration<double> passes_took = std::chrono::steady_clock::now() - began;
    if (graphs_) {
      passes_lock.unlock();
      std::unique_lock capture_lock(start_up_mutex());
      graphs_->capture_all();
      stream_->synchronize();
      spdlog::info(
          "executor '{}' replica {}: {} CUDA graphs captured in {:.2f} s (passes of up to {} tokens, {} sequences)",
          runtime().name, runtime().replica, graphs_->graph_count(), graphs_->capture_seconds(), graphs_->max_tokens(),
          graphs_->max_sequences());
      metrics().set("cuda_graphs", static_cast<double>(graphs_->graph_count()));
    }
    if (device_.is_cuda()) {
      if (!passes_lock.owns_lock()) passes_lock.lock();
      // One request through encode() (not in the metrics) loads the kernels only it uses (CUDA loads them lazily):
      // of the flow's size on the GPU's first replica, pinning its buffers, 16 rows on the others (H200: eight of
      // 3,280 rows took 0.13 s of every start; first requests without them paid under 0.02 s).
      constexpr std::size_t kMaxWarmupRows = 1 << 16;  // larger requests grow the buffers once, later
      const std::size_t flow_size = std::min(kMaxWarmupRows, std::max(budget.max_sequences, runtime().request_size));
      const std::size_t rows = first_on_device ? flow_size : 16;
      DocumentArray docs;
      for (std::size_t i = 0; i < rows; ++i) docs.push_back(Document("warm up"));
      warming_up_ = true;
      const boost::json::object no_parameters;
      encode_texts(docs, RequestInfo{"/encode", no_parameters});
      warming_up_ = false;
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - began;
    spdlog::debug("executor '{}' replica {}: warmed up in {:.3f} s ({} passes {:.3f} s)", runtime().name,
                  runtime().replica, took.count(), shapes.size(), passes_took.count());
  }

 private:
  // Documents without text pass through untouched: none is embedded as "" (a tags-only /update through a
  // search flow must leave the stored vector as it is). The others are encoded together, in place.
  void encode(DocumentArray& docs, const RequestInfo& request) {
    const auto has_text = [](const Document& d) { return !d.text.empty(); };
    if (std::all_of(docs.begin(), docs.end(), has_text)) return encode_texts(docs, request);
    DocumentArray texts;
    std::vector<std::size_t> from;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (!has_text(docs[i])) continue;
      from.push_back(i);
      texts.push_back(std::move(docs[i]));
    }
    // Back where they came from whatever happens: a failed request still holds its documents.
    const auto put_back = [&] {
      for (std::size_t j = 0; j < from.size(); ++j) docs[from[j]] = std::move(texts[j]);
    };
    try {
      encode_texts(texts, request);
    } catch (const models::NonFiniteOutput& e) {
      put_back();
      std::vector<std::size_t> rows;  // as positions in the request, not among its texts
      for (const std::size_t r : e.rows()) rows.push_back(from[r]);
      throw models::NonFiniteOutput(std::move(rows), "embedding", docs.size());
    } catch (...) {
      put_back();
      throw;
    }
    put_back();
  }

  // With the request parameter count_tokens: true (the gateway's OpenAI route sends it), each document's
  // tags["tokens"] is set to its token count, special tokens included, after truncation.
  void encode_texts(DocumentArray& docs, const RequestInfo& request) {
    if (docs.empty()) return;
    c10::InferenceMode guard;
    // Each replica runs on its own stream, so replicas sharing weights on one GPU overlap.
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    // A request that failed half-way (an out-of-memory pass the flow will retry in halves) may have left
    // copies from the staging buffers queued: let them finish before the buffers are written again.
    if (unfinished_ && stream_) stream_->synchronize();
    unfinished_ = true;
    const std::size_t n = docs.size();
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    set_prompt(request);
    tokenize(docs);
    const auto tokenized = Clock::now();
    if (request.param_or<bool>("count_tokens", false)) {
      for (std::size_t i = 0; i < n; ++i) {
        docs[i].tags["tokens"] = static_cast<std::int64_t>(offsets_[i + 1] - offsets_[i]);
      }
    }
    // Longest first, cut into passes within the budget and packed (models::PassPlanner).
    planner_.plan({ids_, offsets_, {}, prompt_skip_});
    at::Tensor result = at::empty({static_cast<int64_t>(n), encoder_->dimension()},
                                  at::TensorOptions().dtype(at::kFloat).device(device_));
    // Where each pass's rows go: the plan's order, copied up once without blocking.
    at::Tensor order = index_staging_.view({static_cast<int64_t>(n)}, at::kLong);
    std::copy(planner_.order().begin(), planner_.order().end(), order.data_ptr<int64_t>());
    const at::Tensor rows = device_.is_cuda() ? order.to(device_, /*non_blocking=*/true) : order;
    models::PassFigures figures;
    double launch_seconds = 0;  // of the enqueueing, the time in the encoder's calls
    for (const models::Pass& pass : planner_.passes()) {
      // A request given up stops between passes (what was queued finishes: unfinished_ syncs it next time).
      throw_if_cancelled("the encoder's forward passes");
      const bool graphed = graphs_ && graphs_->fits(pass.batch);
      const auto launch_start = Clock::now();
      at::Tensor pooled = graphed ? graphs_->encode(pass.batch) : encoder_->encode(pass.batch);
      launch_seconds += std::chrono::duration<double>(Clock::now() - launch_start).count();
      if (normalize_) pooled = models::normalize_rows(pooled);
      models::scatter_rows(result, rows, pass, pooled);
      figures.add(pass, graphed);
    }
    if (const auto dims = request.param_or<std::size_t>("dimensions", 0); dims != 0) result = sized(result, dims);
    const auto enqueued = Clock::now();
    // NaN or infinity is never handed out as an embedding: the request fails, naming its documents.
    if (keep_on_device_ && device_.is_cuda()) {
      // Handlers finish their GPU work before returning (executor.hpp): the next executor reads these rows
      // from its own stream. The rows' finiteness comes back with that one wait.
      const models::FiniteCheck finite(result);
      wait_for_stream(*stream_);
      finite.check("embedding");
    } else {
      if (stream_) result = output_staging_.to_host(result, *stream_);
      models::check_finite(result, "embedding");
    }
    docs.set_embeddings(result);
    const auto done = Clock::now();
    unfinished_ = false;
    if (warming_up_) return;
    figures.report(metrics());
    // Where a request's time goes: tokenizing on the host, enqueueing the passes (of which launching them
    // in the encoder), and waiting for the device to finish them (plus the copy back).
    metrics().add("tokenize_seconds", std::chrono::duration<double>(tokenized - started).count());
    metrics().add("enqueue_seconds", std::chrono::duration<double>(enqueued - tokenized).count());
    metrics().add("launch_seconds", launch_seconds);
    metrics().add("wait_seconds", std::chrono::duration<double>(done - enqueued).count());
  }

  // The request's `dimensions`: each row's first `dims` values, normalised again in double (a zero row stays
  // zero), as the gateway's OpenAI and TEI routes give them. More than the model gives is the client's mistake.
  at::Tensor sized(const at::Tensor& rows, std::size_t dims) const {
    const auto size = static_cast<std::size_t>(rows.size(1));
    if (dims == size) return rows;
    if (dims > size) {
      throw RequestError(
          fmt::format("parameter 'dimensions': {} is more than the model's embeddings have ({})", dims, size));
    }
    const at::Tensor kept = rows.narrow(1, 0, static_cast<std::int64_t>(dims)).to(at::kDouble);
    return (kept / kept.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-300)).to(rows.scalar_type()).contiguous();
  }

  // The prompt of this request: its parameters' prompt (a text) or prompt_name (the checkpoint's), else the
  // executor's. With a Pooling module that leaves prompts out (include_prompt: false), the prompt's tokens
  // but its closing special token are skipped by pooling, as sentence-transformers counts them.
  // A prompt_name the checkpoint does not have is the client's mistake (RequestError: 422 over HTTP).
  void set_prompt(const RequestInfo& request) {
    prompt_ = default_prompt_;
    if (auto prompt = request.param_or<std::string>("prompt", {}); request.parameters.contains("prompt")) {
      prompt_ = std::move(prompt);
    } else if (auto name = request.param_or<std::string>("prompt_name", {}); !name.empty()) {
      try {
        prompt_ = encoder_->checkpoint().prompt(name);
      } catch (const RequestError&) {
        throw;
      } catch (const Error& e) {
        throw RequestError(e.what());
      }
    }
    prompt_skip_ = 0;
    if (prompt_.empty() || encoder_->checkpoint().modules.include_prompt) return;
    // As sentence-transformers counts a prompt: its ids less the closing special token ([SEP], </s>) that
    // the post-processor puts after the text; the frame of an empty text shows which that is.
    const auto ids = tokenizer_->encode(prompt_);
    const auto frame = tokenizer_->encode("");
    prompt_skip_ =
        static_cast<int64_t>(ids.size()) - (!ids.empty() && !frame.empty() && ids.back() == frame.back() ? 1 : 0);
  }

  // Document i's text, after the request's prompt.
  std::string_view text_of(const DocumentArray& docs, std::size_t i, std::string& scratch) const {
    if (prompt_.empty()) return docs[i].text;
    scratch.assign(prompt_).append(docs[i].text);
    return scratch;
  }

  // Tokenizes every document into ids_ (offsets_[i] .. offsets_[i+1] are document i's ids); large batches in
  // up to tokenizer_threads contiguous chunks, in parallel on ATen's thread pool, joined in order.
  void tokenize(const DocumentArray& docs) {
    const std::size_t n = docs.size();
    constexpr std::size_t kGrain = 256;
    const std::size_t chunks = std::min<std::size_t>(tokenizer_threads_, (n + kGrain - 1) / kGrain);
    ids_.clear();
    offsets_.assign(n + 1, 0);
    if (chunks <= 1) {
      std::string scratch;
      for (std::size_t i = 0; i < n; ++i) {
        tokenizer_->encode_into(text_of(docs, i, scratch), max_seq_length_, ids_);
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
        std::string scratch;
        for (std::size_t i = first; i < last; ++i) {
          tokenizer_->encode_into(text_of(docs, i, scratch), max_seq_length_, buffer);
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
  // A token id that every vocabulary has, to fill the batches that measure memory and warm up.
  std::int32_t filler_id() const { return std::max<std::int32_t>(0, tokenizer_->unk_id()); }

  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::shared_ptr<const models::EmbeddingModel> encoder_;
  std::unique_ptr<models::GraphedEmbeddingModel> graphs_;  // this replica's CUDA graphs, when enabled
  bool keep_on_device_ = false;
  std::size_t tokenizer_threads_ = 1;
  std::optional<c10::Stream> stream_;
  std::shared_ptr<DeviceStartUp> start_up_;  // kept while the replica lives: ReplicaGroup holds it weakly
  static constexpr std::size_t kMaxWarmupTokens = 1 << 14;
  std::size_t max_seq_length_ = 0;
  models::PassPlanner planner_;  // the budget (batch_size, max_batch_tokens) and this request's passes
  double memory_fraction_ = 0.9;
  bool normalize_ = false;  // normalize: true on a checkpoint without a Normalize module
  // Buffers reused across batches: no allocation per document.
  std::vector<std::int32_t> ids_;
  std::vector<std::vector<std::int32_t>> chunk_ids_;
  std::vector<std::size_t> offsets_;
  std::string default_prompt_, prompt_;  // the executor's prompt, and this request's
  int64_t prompt_skip_ = 0;              // tokens pooling leaves out at each start (include_prompt: false)
  // Rows' order going up and embeddings coming down, through pinned buffers kept across requests.
  HostStaging index_staging_{false}, output_staging_{false};  // made pinned in the constructor on a GPU
  bool unfinished_ = false;  // the last request threw before its closing synchronisation
  bool warming_up_ = false;  // encode() runs for warm-up: no metrics
};

}  // namespace

void register_sentence_encoder(Registry& registry) { registry.add<SentenceEncoder>("flowline::sentence_encoder"); }

}  // namespace flowline::sentence_encoder
