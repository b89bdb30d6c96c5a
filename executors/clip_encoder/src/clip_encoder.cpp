// The ClipEncoder executor: sorts documents into texts and images, decodes the images slice by slice (JPEGs
// with nvJPEG on a GPU, the rest on CPU threads), runs both towers of a ClipModel, and for /rank scores each query's
// candidates as CLIP-as-service did.
#include "flowline/clip_encoder/clip_encoder.hpp"

#include "decode.hpp"
#include "images/nvjpeg.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/model_folder.hpp"
#include "flowline/models/clip_model.hpp"
#include "flowline/models/image_processor.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <boost/json/parse.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

namespace flowline::clip_encoder {
namespace {

namespace fs = std::filesystem;

// What a `model` parameter must be, said at validate time: a folder whose config.json has model_type clip or
// siglip, or sentence-transformers' CLIP layout (modules.json; ClipModel::load checks the rest).
std::optional<std::string> model_problem(const boost::json::value& v) {
  const fs::path folder(std::string(v.get_string()));
  if (!fs::is_directory(folder)) return fmt::format("'{}' is not a folder", folder.string());
  const fs::path config = folder / "config.json";
  if (!fs::exists(config)) {
    if (fs::exists(folder / "modules.json")) return std::nullopt;
    return fmt::format("'{}' has no config.json: not a CLIPModel or SiglipModel folder", folder.string());
  }
  std::ifstream in(config);
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code ec;
  const boost::json::value json = boost::json::parse(text.str(), ec);
  if (ec || !json.is_object()) return fmt::format("'{}': not a JSON object", config.string());
  const auto* type = json.as_object().if_contains("model_type");
  const std::string model_type = type && type->is_string() ? std::string(type->get_string()) : "";
  if (model_type != "clip" && model_type != "siglip") {
    return fmt::format("'{}': model_type '{}' is not CLIP or SigLIP (expected clip or siglip)", config.string(),
                       model_type);
  }
  return std::nullopt;
}

class ClipEncoder : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "ClipEncoder",
        "Encode texts and images (JPEG, PNG, WebP) into one embedding space with a CLIP or SigLIP checkpoint "
        "(LibTorch); /rank scores each document's matches as CLIP-as-service does",
        {ParamSpec::required_param("model", ParamType::Path,
                                   "CLIPModel or SiglipModel folder (config.json, model.safetensors, tokenizer.json, "
                                   "preprocessor_config.json), or sentence-transformers' CLIP layout")
             .check(model_problem),
         ParamSpec::optional("device", ParamType::String, "",
                             "cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
         ParamSpec::choice("dtype", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}, "fp32",
                           "weights and activations (fp16 needs a GPU)"),
         ParamSpec::optional("batch_size", ParamType::IntOrAuto, 32,
                             "images (or texts) per forward pass; auto: the most that fit memory_fraction of the GPU, "
                             "calibrated at start for each tower (on the CPU auto keeps 32)")
             .min(1),
         ParamSpec::optional("memory_fraction", ParamType::Double, 0.9,
                             "for batch_size auto: the share of the GPU memory free at start that this executor's "
                             "replicas on a device may use together")
             .min(0)
             .max(1),
         ParamSpec::optional("normalize", ParamType::Bool, false,
                             "unit-length embeddings (false: as transformers' get_text_features and "
                             "get_image_features give them, as CLIP-as-service did)"),
         ParamSpec::optional("allowed_uri_roots", ParamType::StringList, boost::json::array{},
                             "folders a document's local path or file:// uri may name, for a served flow too "
                             "(relative ones: to the working folder). `flowline run` reads any local path its "
                             "input names; a served flow reads none outside these"),
         ParamSpec::optional("allow_http", ParamType::Bool, false,
                             "fetch http(s) uris (a served flow then downloads what its clients name: bounded by "
                             "max_image_bytes and the http_ parameters, public addresses only unless "
                             "http_allow_private_addresses)"),
         ParamSpec::optional("http_timeout", ParamType::Double, 10.0,
                             "seconds one download may take in all, redirects included")
             .min(0.001),
         ParamSpec::optional("http_connect_timeout", ParamType::Double, 5.0,
                             "seconds for a download's name lookup, connect and TLS handshake")
             .min(0.001),
         ParamSpec::optional("http_max_redirects", ParamType::Int, 5, "redirects one download may follow").min(0),
         ParamSpec::optional("http_in_flight", ParamType::Int, 8, "downloads at once per replica").min(1),
         ParamSpec::optional("http_allow_private_addresses", ParamType::Bool, false,
                             "let downloads reach loopback, private and link-local addresses (off: a client cannot "
                             "make a served flow fetch from the server's own network)"),
         ParamSpec::optional("max_image_bytes", ParamType::Int, 64 << 20,
                             "the most bytes an image file, data: uri or download may have")
             .min(1),
         ParamSpec::optional("max_image_pixels", ParamType::Int, 89'478'485,
                             "images of more pixels are refused before decoding (PIL's MAX_IMAGE_PIXELS)")
             .min(1),
         ParamSpec::optional("exif_orientation", ParamType::Bool, false,
                             "turn each image upright as its EXIF Orientation says (Pillow's ImageOps.exif_transpose, "
                             "as transformers' load_image does; off: the stored pixels, as Image.open gives them)"),
         ParamSpec::choice("gpu_decode", {"auto", "on", "off"}, "auto",
                           "JPEGs decoded on the GPU with nvJPEG (libnvjpeg.so.13, loaded on demand; other formats and "
                           "JPEGs it cannot take on the CPU): auto (the default) when the device is CUDA and the "
                           "library loads, on (an error at start if it cannot), off (the CPU threads only)"),
         ParamSpec::choice("gpu_decode_backend", {"auto", "default", "hybrid", "gpu_hybrid", "hardware"}, "auto",
                           "nvJPEG's backend for a slice's JPEGs when gpu_decode decodes on the GPU: auto (hardware "
                           "where the GPU has JPEG engines, else gpu_hybrid), default, hybrid (Huffman decoding on "
                           "the CPU), gpu_hybrid (on the GPU, for batches of more than 50 baseline JPEGs) or hardware "
                           "(the A100/H100 JPEG engines; JPEGs they cannot take go one at a time through the default "
                           "backend)"),
         ParamSpec::optional("cpu_decode_share", ParamType::Double, 0.0,
                             "with gpu_decode on the GPU: the share of each pass's images (its last ones) decoded on "
                             "the CPU threads while nvJPEG decodes the others at the same time (0: nvJPEG takes every "
                             "JPEG it can)")
             .min(0)
             .max(1),
         ParamSpec::optional("decode_threads", ParamType::Int, 0,
                             "CPU threads that decode one replica's images (0: ATen's intra-op threads)")
             .min(0),
         ParamSpec::optional("keep_on_device", ParamType::Bool, false,
                             "leave embeddings on the executor's GPU for a next executor on the same device"),
         ParamSpec::optional("warmup", ParamType::Bool, true,
                             "run a text and an image pass at start so the first request does not pay for set-up")},
        {"/encode", "/rank"},
    };
    // Four replicas per GPU: while some decode, others' passes run. On an H200 (docs/images.md) four gave 4,682
    // images/s from JPEG files with CPU decoding against two's 2,845, and 126,971 short texts/s against 107,888;
    // eight gave no more.
    spec.replicas_per_gpu = 4;
    return spec;
  }

  explicit ClipEncoder(const ExecutorContext& context) : Executor(context) {
    const std::string model = params().get<std::string>("model");
    device_ = executor_device(params().get<std::string>("device"), runtime().device);
    dtype_ = parse_dtype(params().get<std::string>("dtype"));
    if (device_.is_cpu() && dtype_ == c10::kHalf) {
      throw Error("parameter 'dtype': fp16 needs a GPU device; use fp32 or bf16 on the CPU");
    }
    auto load = [&]() -> std::shared_ptr<const models::ClipModel> {
      return models::ClipModel::load(model, models::ClipModelOptions{device_, dtype_, 0});
    };
    model_ = shared_per_device<models::ClipModel>(model, device_, dtype_, load);
    if (device_.is_cuda()) stream_ = replica_stream(device_);
    const auto batch_size = params().get<boost::json::value>("batch_size");  // a number, or "auto"
    const bool auto_batch = batch_size.is_string();
    if (!auto_batch) {
      const auto n = static_cast<std::size_t>(batch_size.to_number<std::int64_t>());
      text_budget_.max_sequences = image_budget_.max_sequences = n;
    }
    memory_fraction_ = params().get<double>("memory_fraction");
    if (!(memory_fraction_ > 0 && memory_fraction_ <= 1)) {
      throw Error(fmt::format("parameter 'memory_fraction': {} is outside (0, 1]", memory_fraction_));
    }
    normalize_ = params().get<bool>("normalize");
    keep_on_device_ = params().get<bool>("keep_on_device");
    set_up_decoding();
    spdlog::info("executor '{}' replica {}: {} {} (embeddings {}, images {}px) on {} in {}, {:.1f} MB of weights",
                 runtime().name, runtime().replica, model_->kind(), model, model_->embedding_dim(),
                 model_->image_size(), device_.str(), c10::toString(dtype_), model_->weight_bytes() / 1e6);
    if (const auto warning = random_weights_warning(model, runtime().name, "model", "embeddings and scores");
        !warning.empty() && runtime().replica == 0) {
      spdlog::warn("{}", warning);
    }
    if (auto_batch) choose_batch_sizes();
    if (params().get<bool>("warmup")) warm_up();
    // In --stats; Python's SentenceTransformer reads them (get_embedding_dimension, max_seq_length).
    metrics().set("embedding_dimension", static_cast<double>(model_->embedding_dim()));
    metrics().set("max_seq_length", static_cast<double>(model_->max_text_length()));
    bind("/encode", &ClipEncoder::encode);
    bind("/rank", &ClipEncoder::rank);
    bind_default(&ClipEncoder::encode);
  }

 private:
  void set_up_decoding() {
    auto& policy = decode_.policy;
    for (const auto& root : params().get<std::vector<std::string>>("allowed_uri_roots")) {
      if (root.empty()) throw Error("parameter 'allowed_uri_roots': an empty folder name");
      policy.allowed_roots.push_back(fs::weakly_canonical(fs::absolute(root)));
    }
    policy.any_local_path = runtime().local_input_files;
    policy.allow_http = params().get<bool>("allow_http");
    const auto ms = [&](const char* name) {
      return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(params().get<double>(name) * 1000)));
    };
    policy.http_timeout = ms("http_timeout");
    policy.http_connect_timeout = ms("http_connect_timeout");
    policy.http_max_redirects = params().get<int>("http_max_redirects");
    policy.http_in_flight = params().get<std::size_t>("http_in_flight");
    policy.allow_private_addresses = params().get<bool>("http_allow_private_addresses");
    policy.max_bytes = params().get<std::size_t>("max_image_bytes");
    decode_.limits.max_pixels = params().get<std::uint64_t>("max_image_pixels");
    decode_.threads = params().get<std::size_t>("decode_threads");
    if (decode_.threads == 0) decode_.threads = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
    decode_.cpu_share = params().get<double>("cpu_decode_share");
    decode_.exif_orientation = params().get<bool>("exif_orientation");
    set_up_gpu_decoding(parse_gpu_decode(params().get<std::string>("gpu_decode")),
                        params().get<std::string>("gpu_decode_backend"));
  }

  // nvJPEG for this replica, or why not: said once per process on a GPU, where it was expected.
  void set_up_gpu_decoding(GpuDecode mode, const std::string& backend) {
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    std::string why;
    gpu_decoder_ = GpuJpegDecoder::make(mode, backend, device_, why);
    if (gpu_decoder_) check_gpu_decoder(mode);
    if (gpu_decoder_) {
      if (runtime().replica == 0)
        spdlog::info("executor '{}': JPEGs are decoded on {} with nvJPEG ({} backend)", runtime().name, device_.str(),
                     gpu_decoder_->backend());
    } else if (mode == GpuDecode::automatic && device_.is_cuda()) {
      static std::once_flag once;
      std::call_once(once, [&] {
        spdlog::info("executor '{}': images are decoded on the CPU (gpu_decode auto: {})", runtime().name, why);
      });
    }
  }

  // The decode settings with no share left to the CPU: the start-up check's and the warm-up's two JPEGs both go to
  // nvJPEG (with cpu_decode_share the second would be the CPU's).
  DecodeSettings nvjpeg_only() const {
    DecodeSettings settings = decode_;
    settings.cpu_share = 0;
    return settings;
  }

  // nvJPEG's start-up check: two grey JPEGs (uniform 128, so every decoder gives 128 or next to it) through the
  // replica's decoder on its stream. A GPU whose nvJPEG decodes neither, or decodes them wrong, is not trusted with
  // documents. gpu_decode on: an error at start; auto: this replica decodes on the CPU, said once per replica.
  void check_gpu_decoder(GpuDecode mode) {
    Document a, b;
    a.blob = images::grey_jpeg(48, 40);
    b.blob = images::grey_jpeg(40, 48);
    const Document* both[] = {&a, &b};
    std::string problem;
    try {
      decode_slice(both, nvjpeg_only(), gpu_decoder_.get(), stream_, decoded_);
      if (decoded_.gpu_images != 2) {
        problem = fmt::format("it decoded {} of 2 grey JPEGs", decoded_.gpu_images);
      } else {
        for (const at::Tensor& pixels : decoded_.gpu) {
          const int off = (pixels.to(at::kInt) - 128).abs().max().item<int>();
          if (off > 3) problem = fmt::format("a uniform grey JPEG came out {} levels off 128", off);
        }
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty()) return;
    const std::string what = fmt::format("nvJPEG ({} backend) failed its start-up check on {}: {}",
                                         gpu_decoder_->backend(), device_.str(), problem);
    if (mode == GpuDecode::on) throw Error(fmt::format("parameter 'gpu_decode': on, but {}", what));
    spdlog::warn("executor '{}' replica {}: {}; this replica decodes JPEGs on the CPU", runtime().name,
                 runtime().replica, what);
    gpu_decoder_.reset();
  }

  // Serialises calibrations across the replicas of the process: the allocator's peak statistics are per device.
  static std::mutex& calibration_mutex() {
    static std::mutex mutex;
    return mutex;
  }

  // What batch_size "auto" chose on each device, measured by the first of this executor's replicas to get
  // there and taken by the others (shared through their ReplicaGroup): one budget for them all, measured once.
  struct DeviceBudgets {
    struct Chosen {
      models::PassBudget images, texts;
      int replica = 0;  // the replica that measured them
    };
    std::mutex mutex;  // held while the first replica on a device calibrates: the others wait for it
    std::map<std::string, Chosen> by_device;
  };

  // batch_size "auto": the shared planner's calibration (models::calibrate_budget) run once for each tower, so
  // that this executor's replicas on the device together stay within memory_fraction of the memory free at
  // start: vision passes of gray images (an image counted as one unit), text passes of max_text_length tokens.
  // The first replica on a device measures; the others take its batch sizes (measuring again, after the first
  // replicas' passes, would see less memory free and choose smaller ones). On the CPU, where memory is seldom
  // the limit, auto keeps 32. A pass that still runs out of memory later is split by the flow's replica
  // (c10::OutOfMemoryError is left to propagate: src/core/runtime/replica.hpp).
  void choose_batch_sizes() {
    if (!device_.is_cuda()) {
      spdlog::info("executor '{}' replica {}: batch_size 'auto' calibrates on a GPU; on the CPU it keeps {}",
                   runtime().name, runtime().replica, image_budget_.max_sequences);
      return;
    }
    budgets_ = runtime().group
                   ? runtime().group->shared<DeviceBudgets>([] { return std::make_shared<DeviceBudgets>(); })
                   : std::make_shared<DeviceBudgets>();
    std::lock_guard hold(budgets_->mutex);
    if (const auto found = budgets_->by_device.find(device_.str()); found != budgets_->by_device.end()) {
      image_budget_ = found->second.images;
      text_budget_ = found->second.texts;
      spdlog::info("executor '{}' replica {}: batch_size {} images, {} texts (auto), as replica {} calibrated",
                   runtime().name, runtime().replica, image_budget_.max_sequences, text_budget_.max_sequences,
                   found->second.replica);
      report_batch_sizes(/*calibrated=*/false);
      return;
    }
    std::lock_guard lock(calibration_mutex());
    c10::InferenceMode guard;
    c10::StreamGuard on_stream(*stream_);
    const auto side = model_->image_size();
    auto image_pass = [&](std::size_t n) {
      const at::Tensor pixels =
          at::zeros({static_cast<std::int64_t>(n), 3, side, side}, at::TensorOptions().dtype(dtype_).device(device_));
      (void)model_->encode_pixels(pixels);
      stream_->synchronize();
    };
    std::string long_text;
    for (std::size_t i = 0; i < model_->max_text_length(); ++i) long_text += "word ";
    auto text_pass = [&](std::size_t n) {
      const std::vector<std::string_view> texts(n, long_text);
      (void)model_->encode_texts(texts);
      stream_->synchronize();
    };
    stream_->synchronize();
    const std::size_t replicas = static_cast<std::size_t>(std::max(1, runtime().replicas_on_device));
    const models::Calibration images =
        models::calibrate_budget(image_budget_, {true, false, 1, memory_fraction_, replicas}, device_, image_pass);
    const models::Calibration texts = models::calibrate_budget(
        text_budget_, {true, false, model_->max_text_length(), memory_fraction_, replicas}, device_, text_pass);
    spdlog::info(
        "executor '{}' replica {}: calibrated {:.0f} bytes per image and {:.0f} per text token; budget {:.0f} MiB "
        "({:.0f}% of {:.0f} MiB free{}); batch_size {} images, {} texts (auto)",
        runtime().name, runtime().replica, images.bytes_per_token, texts.bytes_per_token,
        images.budget_bytes / (1 << 20), memory_fraction_ * 100, images.free_bytes / double(1 << 20),
        replicas > 1 ? fmt::format(", shared by {} replicas", replicas) : "", image_budget_.max_sequences,
        text_budget_.max_sequences);
    report_batch_sizes(/*calibrated=*/true);
    budgets_->by_device.emplace(device_.str(), DeviceBudgets::Chosen{image_budget_, text_budget_, runtime().replica});
  }

  // The metrics of batch_size "auto": the sizes, and whether this replica measured them.
  void report_batch_sizes(bool calibrated) {
    metrics().set("batch_size", static_cast<double>(image_budget_.max_sequences));
    metrics().set("text_batch_size", static_cast<double>(text_budget_.max_sequences));
    metrics().set("calibrations", calibrated ? 1 : 0);
  }

  // One text pass and one image pass (a gray square of the vision tower's size) through the model.
  void warm_up() {
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    const std::string_view text = "warm up";
    (void)model_->encode_texts(std::span<const std::string_view>(&text, 1)).to(at::kCPU);
    const auto side = static_cast<std::uint32_t>(model_->image_size());
    at::Tensor pixels;
    if (gpu_decoder_) {  // two grey JPEGs through nvJPEG: its handle's buffers and the batched path set up
      Document a, b;
      a.blob = b.blob = images::grey_jpeg(side, side);
      const Document* both[] = {&a, &b};
      decode_slice(both, nvjpeg_only(), gpu_decoder_.get(), stream_, decoded_);
      if (decoded_.gpu_images != 2)
        spdlog::warn("executor '{}': nvJPEG did not decode the warm-up JPEGs", runtime().name);
      if (!decoded_.failures[0].empty()) throw Error(fmt::format("warm-up: {}", decoded_.failures[0]));
      pixels = models::preprocess_image_tensors(decoded_.pixels(), model_->image_processor(), device_, dtype_);
    } else {
      images::Image gray{side, side, std::vector<std::uint8_t>(std::size_t{side} * side * 3, 128)};
      pixels = models::preprocess_images(std::span<const images::Image>(&gray, 1), model_->image_processor(), device_,
                                         dtype_);
    }
    (void)model_->encode_pixels(pixels).to(at::kCPU);
  }

  // Each handler runs on the replica's stream from its first kernel to its copy back to the host: on another
  // stream (the device's default one, which a replica's stream does not wait for) the normalisation and the
  // copy ran before the passes they read had finished, and whole requests came back with another request's
  // embeddings or NaN at four to eight replicas (docs/images.md).
  void encode(DocumentArray& docs, const RequestInfo&) {
    const c10::OptionalStreamGuard on_stream(stream_);
    std::vector<Document*> items;
    items.reserve(docs.size());
    for (auto& d : docs) items.push_back(&d);
    const at::Tensor embeddings = embed(items);
    set_embeddings(items, embeddings);
  }

  // Every query and candidate embedded at once; then each query's candidates scored, as the header says.
  void rank(DocumentArray& docs, const RequestInfo&) {
    const c10::OptionalStreamGuard on_stream(stream_);
    std::vector<Document*> items;
    std::vector<std::size_t> query_rows;
    for (auto& q : docs) {
      if (q.matches.empty()) {
        throw RequestError(fmt::format(
            "document '{}': /rank needs the candidates in its matches (texts or images), and it has none", q.id));
      }
      query_rows.push_back(items.size());
      items.push_back(&q);
      for (auto& m : q.matches) items.push_back(&m);
    }
    const at::Tensor embeddings = embed(items);
    // Cosines in double on the host, from unit rows whatever `normalize` says.
    const at::Tensor unit = models::normalize_rows(embeddings).to(at::kCPU).to(at::kDouble);
    const double scale = model_->logit_scale();
    const std::optional<float> bias = model_->logit_bias();
    const bool siglip = model_->kind() == "siglip";
    for (std::size_t qi = 0; qi < docs.size(); ++qi) {
      const auto row = static_cast<std::int64_t>(query_rows[qi]);
      const auto count = static_cast<std::int64_t>(docs[qi].matches.size());
      const at::Tensor cosine = unit.narrow(0, row + 1, count).matmul(unit[row]);
      at::Tensor logits = cosine * scale;
      if (bias) logits = logits + static_cast<double>(*bias);
      const at::Tensor probs = (siglip ? logits.sigmoid() : logits.softmax(0)).contiguous();
      const at::Tensor cos = cosine.contiguous();
      auto& matches = docs[qi].matches.docs();
      for (std::int64_t m = 0; m < count; ++m) {
        matches[static_cast<std::size_t>(m)].scores["clip_score"] = static_cast<float>(probs.data_ptr<double>()[m]);
        matches[static_cast<std::size_t>(m)].scores["clip_score_cosine"] =
            static_cast<float>(cos.data_ptr<double>()[m]);
      }
    }
    set_embeddings(items, embeddings);
    for (auto& q : docs) {
      auto& matches = q.matches.docs();
      std::stable_sort(matches.begin(), matches.end(), [](const Document& a, const Document& b) {
        return a.scores.at("clip_score") > b.scores.at("clip_score");
      });
    }
  }

  // Each item's embedding, [items, D] float32 on the executor's device (not normalized), or a RequestError
  // naming every item that is neither a text nor a readable image. Called with the replica's stream current.
  at::Tensor embed(const std::vector<Document*>& items) {
    std::vector<std::size_t> texts, pictures;
    std::vector<std::string> problems;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto modality = modality_of(*items[i]);
      if (!modality) {
        problems.push_back(fmt::format(
            "document '{}': neither a text nor an image (a blob, pixels in its tensor, or a uri naming one)",
            items[i]->id));
      } else {
        (*modality == Modality::text ? texts : pictures).push_back(i);
      }
    }
    if (!problems.empty()) throw RequestError(fmt::format("{}", fmt::join(problems, "; ")));
    c10::InferenceMode guard;
    at::Tensor out = at::empty({static_cast<std::int64_t>(items.size()), model_->embedding_dim()},
                               at::TensorOptions().dtype(at::kFloat).device(device_));
    encode_texts(items, texts, out);
    encode_images(items, pictures, out);
    metrics().add("texts", static_cast<double>(texts.size()));
    metrics().add("images", static_cast<double>(pictures.size()));
    return out;
  }

  // Longest first, so that each pass holds texts of about one length: a CLIP pass is padded to its longest text
  // (a SigLIP one to max_length regardless). The text's bytes stand for its tokens; rows keep each one's place.
  void encode_texts(const std::vector<Document*>& items, std::vector<std::size_t> rows, at::Tensor& out) {
    std::stable_sort(rows.begin(), rows.end(),
                     [&](std::size_t a, std::size_t b) { return items[a]->text.size() > items[b]->text.size(); });
    std::vector<std::string_view> slice;
    const std::size_t per_pass = text_budget_.max_sequences;
    for (std::size_t first = 0; first < rows.size(); first += per_pass) {
      const std::size_t last = std::min(rows.size(), first + per_pass);
      slice.clear();
      for (std::size_t r = first; r < last; ++r) slice.push_back(items[rows[r]]->text);
      put_rows(out, rows, first, last, model_->encode_texts(slice));
      metrics().add("forward_passes", 1);
    }
  }

  // Slice by slice: decode slice k+1 on the CPU while the device runs slice k (its pass only enqueued on a
  // GPU). After a failure the remaining slices are still decoded, so the error names every bad document, but
  // no more passes run.
  void encode_images(const std::vector<Document*>& items, const std::vector<std::size_t>& rows, at::Tensor& out) {
    std::vector<std::string> problems;
    std::vector<const Document*> slice;
    const auto started = std::chrono::steady_clock::now();
    double decode_seconds = 0;
    const std::size_t per_pass = image_budget_.max_sequences;
    for (std::size_t first = 0; first < rows.size(); first += per_pass) {
      const std::size_t last = std::min(rows.size(), first + per_pass);
      slice.clear();
      for (std::size_t r = first; r < last; ++r) slice.push_back(items[rows[r]]);
      const auto decode_start = std::chrono::steady_clock::now();
      decode_slice(slice, decode_, gpu_decoder_.get(), stream_, decoded_);
      decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
      metrics().add("gpu_decode_images", static_cast<double>(decoded_.gpu_images));
      metrics().add("cpu_decode_images", static_cast<double>(decoded_.cpu_images));
      metrics().add("given_pixel_images", static_cast<double>(decoded_.given_images));
      metrics().add("gpu_decode_seconds", decoded_.gpu_seconds);
      metrics().add("cpu_decode_seconds", decoded_.cpu_seconds);
      if (gpu_decoder_) {
        const auto waits = GpuJpegDecoder::take_allocator_waits();
        metrics().add("nvjpeg_allocator_waits", static_cast<double>(waits.calls));
        metrics().add("nvjpeg_allocator_wait_seconds", waits.seconds);
      }
      for (auto& f : decoded_.failures) {
        if (!f.empty()) problems.push_back(std::move(f));
      }
      if (!problems.empty()) continue;
      const at::Tensor pixels =
          models::preprocess_image_tensors(decoded_.pixels(), model_->image_processor(), device_, dtype_);
      put_rows(out, rows, first, last, model_->encode_pixels(pixels));
      metrics().add("forward_passes", 1);
    }
    if (!problems.empty()) throw RequestError(fmt::format("{}", fmt::join(problems, "; ")));
    metrics().add("decode_seconds", decode_seconds);
    metrics().add("image_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }

  // Rows rows[first..last) of `out` take the pass's embeddings [last - first, D].
  void put_rows(at::Tensor& out, const std::vector<std::size_t>& rows, std::size_t first, std::size_t last,
                const at::Tensor& pass) {
    std::vector<std::int64_t> index(rows.begin() + static_cast<std::ptrdiff_t>(first),
                                    rows.begin() + static_cast<std::ptrdiff_t>(last));
    // Queued, not waited for: a wait here would hold the next slice's decoding until this pass is done.
    const at::Tensor where = to_device_queued(at::tensor(index, at::kLong), device_);
    out.index_copy_(0, where, pass.to(at::kFloat));
  }

  // The embeddings onto their documents: normalized when asked, checked finite, on the host unless kept.
  void set_embeddings(const std::vector<Document*>& items, at::Tensor embeddings) {
    if (items.empty()) return;
    if (normalize_) embeddings = models::normalize_rows(embeddings);
    if (keep_on_device_ && device_.is_cuda()) {
      wait_for_stream(*stream_);  // handlers finish their GPU work before returning (executor.hpp)
    } else {
      embeddings = embeddings.to(at::kCPU);
    }
    models::check_finite(embeddings, "embedding");
    for (std::size_t i = 0; i < items.size(); ++i) items[i]->embedding = embeddings[static_cast<std::int64_t>(i)];
  }

  c10::Device device_{c10::kCPU};
  c10::ScalarType dtype_ = c10::kFloat;
  std::shared_ptr<const models::ClipModel> model_;
  std::optional<c10::Stream> stream_;
  // Texts and images per pass: batch_size, or each tower's calibration for auto (only max_sequences is used).
  models::PassBudget text_budget_{32, 0}, image_budget_{32, 0};
  std::shared_ptr<DeviceBudgets> budgets_;  // kept while the replica lives: ReplicaGroup holds it weakly
  double memory_fraction_ = 0.9;
  bool normalize_ = false;
  bool keep_on_device_ = false;
  DecodeSettings decode_;
  std::unique_ptr<GpuJpegDecoder> gpu_decoder_;  // nvJPEG on this replica's device, or nullptr: all on the CPU
  DecodedSlice decoded_;                         // the slice being encoded, reused across slices and requests
};

}  // namespace

void register_clip_encoder(Registry& registry) { registry.add<ClipEncoder>("flowline::clip_encoder"); }

}  // namespace flowline::clip_encoder
