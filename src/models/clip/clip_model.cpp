// ClipModel (flowline/models/clip_model.hpp): the kinds table, loading a CLIPModel / SiglipModel folder (or
// sentence-transformers' CLIP layout) and the two encode calls.
#include "flowline/models/clip_model.hpp"

#include "flowline/error.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/image_processor.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/torch_support.hpp"

#include "../model_file.hpp"
#include "../transformer.hpp"
#include "clip.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace flowline::models {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace clip {

// One row per kind of CLIP-like checkpoint; a new one (another model_type of the same two-tower shape) is a row.
constexpr ClipKind kKinds[] = {
    {"clip", "CLIP (ViT with class token and pre-LayerNorm, causal text tower pooled at end-of-text)", true, true,
     false, VisionPooling::class_token, TextPooling::end_of_text, "quick_gelu", 1e-5},
    {"siglip", "SigLIP (ViT with attention-pooling head, text tower pooled at the last of 64 positions)", false, false,
     true, VisionPooling::attention_pool, TextPooling::last_position, "gelu_pytorch_tanh", 1e-6},
};

std::span<const ClipKind> clip_kinds() { return kKinds; }

const ClipKind* find_clip_kind(std::string_view model_type) {
  for (const ClipKind& k : kKinds) {
    if (k.model_type == model_type) return &k;
  }
  return nullptr;
}

}  // namespace clip

namespace {

json::object read_object(const fs::path& path) {
  boost::system::error_code ec;
  json::value value = json::parse(read_model_file(path, ModelFile::Json), ec);
  if (ec) throw Error(fmt::format("'{}': invalid JSON: {}", path.string(), ec.message()));
  if (!value.is_object()) throw Error(fmt::format("'{}': not a JSON object", path.string()));
  return std::move(value.get_object());
}

// sentence-transformers' CLIP layout: modules.json names a sentence_transformers.models.CLIPModel module, whose
// folder is a CLIPModel folder. Otherwise the folder itself.
fs::path model_folder(const fs::path& folder) {
  const fs::path modules = folder / "modules.json";
  if (!fs::exists(modules)) return folder;
  boost::system::error_code ec;
  const json::value value = json::parse(read_model_file(modules, ModelFile::Json), ec);
  if (ec || !value.is_array()) throw Error(fmt::format("'{}': not a JSON array of modules", modules.string()));
  for (const json::value& m : value.get_array()) {
    const json::object* o = m.if_object();
    const json::value* type = o == nullptr ? nullptr : o->if_contains("type");
    const json::value* path = o == nullptr ? nullptr : o->if_contains("path");
    if (type == nullptr || !type->is_string() || !std::string_view(type->get_string()).ends_with(".CLIPModel"))
      continue;
    const fs::path relative = path != nullptr && path->is_string() ? fs::path(std::string(path->get_string())) : "";
    if (!stays_inside(relative)) {
      throw Error(fmt::format("'{}': the CLIPModel module's path must be inside the folder", modules.string()));
    }
    return folder / relative;
  }
  throw Error(fmt::format("'{}': no sentence_transformers CLIPModel module; a CLIP or SigLIP folder is expected",
                          modules.string()));
}

// What tokenizer_config.json tells transformers' tokenizer beyond tokenizer.json: whether it gives the model an
// attention_mask (model_input_names; transformers 5's CLIP and SigLIP tokenizers name it when the file does not
// say) and the padding token (pad_token: SigLIP pads with "</s>", which tokenizer.json does not say).
struct TokenizerConfig {
  bool attention_mask = true;
  std::optional<std::string> pad_token;
};

TokenizerConfig read_tokenizer_config(const fs::path& folder) {
  TokenizerConfig t;
  const fs::path file = folder / "tokenizer_config.json";
  if (!fs::exists(file)) return t;
  const json::object config = read_object(file);
  if (const json::value* names = config.if_contains("model_input_names"); names != nullptr && names->is_array()) {
    t.attention_mask = std::any_of(names->get_array().begin(), names->get_array().end(), [](const json::value& v) {
      return v.is_string() && v.get_string() == "attention_mask";
    });
  }
  if (const json::value* pad = config.if_contains("pad_token"); pad != nullptr) {
    const json::value* content = pad->is_object() ? pad->get_object().if_contains("content") : pad;
    if (content != nullptr && content->is_string()) t.pad_token = std::string(content->get_string());
  }
  return t;
}

float scalar(clip::Weights& weights, const std::string& name) {
  if (!weights.contains(name)) {
    throw Error(fmt::format("'{}': no tensor '{}'", weights.file().path().string(), name));
  }
  const at::Tensor t = weights.file().get(name);
  if (t.numel() != 1 || !c10::isFloatingType(t.scalar_type())) {
    throw Error(
        fmt::format("'{}': tensor '{}' must hold one floating point number", weights.file().path().string(), name));
  }
  return t.to(at::kFloat).item<float>();
}

}  // namespace

struct ClipModel::Impl {
  const clip::ClipKind* kind = nullptr;
  ClipModelOptions options;
  fs::path folder;
  std::unique_ptr<Tokenizer> tokenizer;
  ImageProcessorConfig image_processor;  // preprocessor_config.json
  std::optional<clip::VisionTower> vision;
  std::optional<clip::TextTower> text;
  std::size_t max_text_length = 0;
  bool key_mask = false;  // SigLIP's padding masked out as keys (the tokenizer gives an attention_mask)
  std::int64_t pad_id = 0;
  float logit_scale = 1.0f;
  std::optional<float> logit_bias;
  std::size_t weight_bytes = 0;
};

ClipModel::ClipModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipModel::~ClipModel() = default;

std::unique_ptr<ClipModel> ClipModel::load(const fs::path& given, const ClipModelOptions& options) {
  if (options.dtype != at::kFloat && options.dtype != at::kHalf && options.dtype != at::kBFloat16) {
    throw Error(fmt::format("CLIP model '{}': dtype must be float32, float16 or bfloat16", given.string()));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->folder = model_folder(given);
  const fs::path config_file = impl->folder / "config.json";
  const json::object root = read_object(config_file);
  const clip::ConfigReader config(config_file, root);
  const std::string model_type = config.text_or("", "model_type", "");
  impl->kind = clip::find_clip_kind(model_type);
  if (impl->kind == nullptr) {
    config.fail("", "model_type",
                fmt::format("'{}' is not a CLIP-like model (clip, siglip); ClipModel reads CLIPModel and SiglipModel "
                            "folders",
                            model_type));
  }
  const clip::ClipKind& kind = *impl->kind;
  const fs::path weights_file = impl->folder / kWeightsFileName;
  if (!fs::exists(weights_file)) throw Error(fmt::format("'{}': no such file", weights_file.string()));
  clip::Weights weights(weights_file, options.device, options.dtype);
  if (!weights.contains("vision_model.embeddings.patch_embedding.weight")) {
    throw Error(
        fmt::format("'{}': no vision tower (no tensor 'vision_model.embeddings.patch_embedding.weight'); "
                    "ClipModel needs both towers of a {} checkpoint",
                    weights_file.string(), kind.model_type));
  }
  std::int64_t text_dim = 0, vision_dim = 0;
  if (kind.text_pooling == clip::TextPooling::end_of_text) {
    text_dim = vision_dim = config.int_in("", "projection_dim", 512, 1, models::detail::kMaxHidden);
  } else {
    vision_dim = config.int_in("vision_config", "hidden_size", std::nullopt, 1, models::detail::kMaxHidden);
    const std::int64_t text_hidden =
        config.int_in("text_config", "hidden_size", std::nullopt, 1, models::detail::kMaxHidden);
    text_dim = config.int_in("text_config", "projection_size", text_hidden, 1, models::detail::kMaxHidden);
    if (text_dim != vision_dim) {
      config.fail("text_config", "projection_size",
                  fmt::format("{} differs from vision_config.hidden_size {}: the towers' embeddings must share a space",
                              text_dim, vision_dim));
    }
  }
  impl->vision.emplace(weights, config, kind, vision_dim);
  impl->text.emplace(weights, config, kind, text_dim);
  impl->logit_scale = std::exp(scalar(weights, "logit_scale"));
  if (kind.vision_pooling == clip::VisionPooling::attention_pool) impl->logit_bias = scalar(weights, "logit_bias");
  impl->weight_bytes = weights.bytes();

  const auto max_positions = static_cast<std::size_t>(impl->text->max_positions());
  impl->max_text_length = options.max_text_length == 0 ? max_positions : options.max_text_length;
  if (impl->max_text_length > max_positions) {
    throw Error(fmt::format("CLIP model '{}': max_text_length {} is past text_config.max_position_embeddings {}",
                            impl->folder.string(), impl->max_text_length, max_positions));
  }
  impl->tokenizer = Tokenizer::from_folder(impl->folder);
  const TokenizerConfig tokenizer_config = read_tokenizer_config(impl->folder);
  impl->key_mask = tokenizer_config.attention_mask;
  // The padding id as transformers' tokenizer pads: tokenizer_config.json's pad_token, else tokenizer.json's
  // padding, else text_config.pad_token_id.
  std::int32_t pad = tokenizer_config.pad_token ? impl->tokenizer->token_id(*tokenizer_config.pad_token) : -1;
  if (pad < 0) pad = impl->tokenizer->pad_id();
  impl->pad_id = pad >= 0 && pad < impl->text->vocab_size() ? pad : impl->text->pad_token_id();
  impl->image_processor = ImageProcessorConfig::load(impl->folder);
  // A processor whose output has a fixed size must give the vision tower's (-1: the size depends on the image).
  const std::int64_t size = impl->vision->image_size(), h = impl->image_processor.output_height(),
                     w = impl->image_processor.output_width();
  if ((h >= 0 && h != size) || (w >= 0 && w != size)) {
    throw Error(fmt::format("'{}': gives pixel_values of {}x{}, and config.json's vision_config.image_size is {}",
                            (impl->folder / "preprocessor_config.json").string(), h, w, size));
  }
  return std::unique_ptr<ClipModel>(new ClipModel(std::move(impl)));
}

std::string_view ClipModel::kind() const { return impl_->kind->model_type; }
std::int64_t ClipModel::embedding_dim() const { return impl_->vision->output_dim(); }
const ImageProcessorConfig& ClipModel::image_processor() const { return impl_->image_processor; }
const Tokenizer& ClipModel::tokenizer() const { return *impl_->tokenizer; }
float ClipModel::logit_scale() const { return impl_->logit_scale; }
std::optional<float> ClipModel::logit_bias() const { return impl_->logit_bias; }
std::int64_t ClipModel::image_size() const { return impl_->vision->image_size(); }
std::size_t ClipModel::max_text_length() const { return impl_->max_text_length; }
c10::Device ClipModel::device() const { return impl_->options.device; }
c10::ScalarType ClipModel::dtype() const { return impl_->options.dtype; }
std::size_t ClipModel::weight_bytes() const { return impl_->weight_bytes; }

at::Tensor ClipModel::encode_pixels(const at::Tensor& pixel_values) const {
  const std::int64_t s = image_size();
  if (!pixel_values.defined() || pixel_values.dim() != 4 || pixel_values.size(0) < 1 || pixel_values.size(1) != 3 ||
      pixel_values.size(2) != s || pixel_values.size(3) != s || !c10::isFloatingType(pixel_values.scalar_type())) {
    throw InputError({}, fmt::format("CLIP model '{}': pixel_values must be floating point [N >= 1, 3, {}, {}], got {}",
                                     impl_->folder.string(), s, s,
                                     pixel_values.defined() ? c10::str(pixel_values.sizes()) : "none"));
  }
  return impl_->vision->forward(pixel_values.to(device(), dtype()));
}

at::Tensor ClipModel::encode_texts(std::span<const std::string_view> texts) const {
  if (texts.empty()) throw InputError({}, fmt::format("CLIP model '{}': no texts to encode", impl_->folder.string()));
  const clip::TextTower& tower = *impl_->text;
  const bool last_position = impl_->kind->text_pooling == clip::TextPooling::last_position;
  std::vector<std::vector<std::int32_t>> encoded(texts.size());
  std::size_t longest = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    impl_->tokenizer->encode_into(texts[i], impl_->max_text_length, encoded[i]);
    if (encoded[i].empty()) {
      throw InputError({}, fmt::format("CLIP model '{}': text {} gives no tokens (the tokenizer adds no end token)",
                                       impl_->folder.string(), i));
    }
    for (const std::int32_t id : encoded[i]) {
      if (id < 0 || id >= tower.vocab_size()) {
        throw Error(fmt::format("CLIP model '{}': the tokenizer gave id {}, outside text_config.vocab_size {}",
                                impl_->folder.string(), id, tower.vocab_size()));
      }
    }
    longest = std::max(longest, encoded[i].size());
  }
  // SigLIP: padded to max_length as its processor is used (padding="max_length"); the last position pools.
  // CLIP: padded to the longest; the causal tower never lets a token see the padding after it.
  const std::size_t length = last_position ? impl_->max_text_length : std::max<std::size_t>(longest, 1);
  const std::int64_t pad = impl_->pad_id;
  const auto n = static_cast<std::int64_t>(texts.size());
  at::Tensor ids = at::full({n, static_cast<std::int64_t>(length)}, pad, at::kLong);
  at::Tensor mask = at::zeros({n, static_cast<std::int64_t>(length)}, at::kBool);
  at::Tensor pooled = at::zeros({n}, at::kLong);
  auto* id_data = ids.data_ptr<std::int64_t>();
  auto* mask_data = mask.data_ptr<bool>();
  auto* pooled_data = pooled.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& e = encoded[i];
    std::copy(e.begin(), e.end(), id_data + i * length);
    std::fill(mask_data + i * length, mask_data + i * length + e.size(), true);
    // transformers' CLIP: with text eos_token_id 2 (openai's configs) the largest id (first of them), else the
    // first eos_token_id (position 0 when there is none, as its argmax gives).
    std::int64_t at_index = 0;
    if (tower.eos_token_id() == 2) {
      at_index = std::max_element(e.begin(), e.end()) - e.begin();
    } else {
      const auto found = std::find(e.begin(), e.end(), static_cast<std::int32_t>(tower.eos_token_id()));
      at_index = found == e.end() ? 0 : found - e.begin();
    }
    pooled_data[i] = at_index;
  }
  const at::Device device = this->device();
  // Queued copies: the caller tokenizes its next slice while this pass runs.
  const at::Tensor key_mask = last_position && impl_->key_mask ? to_device_queued(mask, device) : at::Tensor();
  return tower.forward(to_device_queued(ids, device), to_device_queued(pooled, device), key_mask);
}

}  // namespace flowline::models
