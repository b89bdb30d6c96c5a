// Reading a checkpoint folder's declarations: config.json, modules.json and the module configs,
// sentence_bert_config.json, tokenizer_config.json and config_sentence_transformers.json.
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"

#include "flowline/error.hpp"
#include "model_file.hpp"
#include "transformer.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace flowline::models {

namespace fs = std::filesystem;

namespace {

// Dense modules' in_features and out_features.
constexpr std::int64_t kMaxFeatures = 1 << 20;

boost::json::value read_json(const fs::path& path) {
  boost::system::error_code ec;
  auto value = boost::json::parse(read_model_file(path, ModelFile::Json), ec);
  if (ec) throw Error(fmt::format("'{}': invalid JSON: {}", path.string(), ec.message()));
  return value;
}

boost::json::object read_json_object(const fs::path& path) {
  auto value = read_json(path);
  if (!value.is_object()) throw Error(fmt::format("'{}': not a JSON object", path.string()));
  return std::move(value.get_object());
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool flag(const boost::json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v && v->is_bool() && v->get_bool();
}

Pooling parse_pooling(std::string_view name, const fs::path& file) {
  static const std::pair<std::string_view, Pooling> names[] = {{"cls", Pooling::Cls},
                                                               {"max", Pooling::Max},
                                                               {"mean", Pooling::Mean},
                                                               {"mean_sqrt_len_tokens", Pooling::MeanSqrtLen},
                                                               {"weightedmean", Pooling::WeightedMean},
                                                               {"lasttoken", Pooling::LastToken}};
  for (const auto& [n, p] : names) {
    if (n == name) return p;
  }
  throw Error(
      fmt::format("'{}': pooling_mode '{}' is not supported (cls, max, mean, mean_sqrt_len_tokens, "
                  "weightedmean, lasttoken)",
                  file.string(), name));
}

// The Pooling module's config: sentence-transformers 6's pooling_mode (a name or a list), or the older
// pooling_mode_*_tokens booleans, in sentence-transformers' order.
void read_pooling(const fs::path& file, SentenceModules& modules) {
  const auto o = read_json_object(file);
  modules.pooling.clear();
  if (const auto* mode = o.if_contains("pooling_mode"); mode && mode->is_string()) {
    modules.pooling.push_back(parse_pooling(mode->get_string(), file));
  } else if (mode && mode->is_array()) {
    for (const auto& m : mode->get_array()) {
      if (!m.is_string()) throw Error(fmt::format("'{}': pooling_mode: expected names", file.string()));
      modules.pooling.push_back(parse_pooling(m.get_string(), file));
    }
  } else {
    static const std::pair<const char*, Pooling> keys[] = {{"pooling_mode_cls_token", Pooling::Cls},
                                                           {"pooling_mode_max_tokens", Pooling::Max},
                                                           {"pooling_mode_mean_tokens", Pooling::Mean},
                                                           {"pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen},
                                                           {"pooling_mode_weightedmean_tokens", Pooling::WeightedMean},
                                                           {"pooling_mode_lasttoken", Pooling::LastToken}};
    for (const auto& [key, p] : keys) {
      if (flag(o, key)) modules.pooling.push_back(p);
    }
  }
  if (modules.pooling.empty()) throw Error(fmt::format("'{}': no pooling mode is on", file.string()));
  if (const auto* v = o.if_contains("include_prompt"); v && v->is_bool()) modules.include_prompt = v->get_bool();
}

Activation parse_activation(std::string_view name, const fs::path& file, const char* key) {
  static const std::pair<std::string_view, Activation> names[] = {
      {"torch.nn.modules.activation.Tanh", Activation::Tanh},
      {"torch.nn.modules.linear.Identity", Activation::Identity},
      {"torch.nn.modules.activation.ReLU", Activation::Relu},
      {"torch.nn.modules.activation.GELU", Activation::Gelu},
      {"torch.nn.modules.activation.Sigmoid", Activation::Sigmoid}};
  for (const auto& [n, a] : names) {
    if (n == name) return a;
  }
  throw Error(fmt::format("'{}': {} '{}' is not supported (Tanh, Identity, ReLU, GELU, Sigmoid of torch.nn)",
                          file.string(), key, name));
}

// A Dense module's config.json, and its weights' header: linear.weight [out_features, in_features] and
// linear.bias [out_features] (when `bias`), floating point — checked before anything is loaded.
DenseModule read_dense(const fs::path& folder) {
  const auto file = folder / "config.json";
  const auto o = read_json_object(file);
  DenseModule d;
  d.folder = folder;
  auto size = [&](const char* key) {
    const auto* v = o.if_contains(key);
    if (!v || !v->is_int64() || v->get_int64() < 1 || v->get_int64() > kMaxFeatures)
      throw Error(fmt::format("'{}': {} must be an integer in 1..{}", file.string(), key, kMaxFeatures));
    return v->get_int64();
  };
  d.in_features = size("in_features");
  d.out_features = size("out_features");
  if (const auto* v = o.if_contains("bias"); v && v->is_bool()) d.bias = v->get_bool();
  if (const auto* v = o.if_contains("activation_function"); v && v->is_string())
    d.activation = parse_activation(v->get_string(), file, "activation_function");
  if (flag(o, "use_residual")) throw Error(fmt::format("'{}': use_residual is not supported", file.string()));
  if (!fs::exists(d.weights_file())) {
    throw Error(
        fmt::format("'{}': missing {} (flowline reads Dense weights only as safetensors; "
                    "re-save the model with sentence-transformers 3 or later)",
                    folder.string(), kWeightsFileName));
  }
  const SafetensorsFile weights(d.weights_file());
  auto expect = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    if (!weights.contains(name)) throw Error(fmt::format("'{}': no tensor '{}'", weights.path().string(), name));
    if (!c10::isFloatingType(weights.dtype(name))) {
      throw Error(fmt::format("'{}': tensor '{}' holds {}, and a weight must be floating point (F32, F16, BF16, F64)",
                              weights.path().string(), name, weights.dtype_name(name)));
    }
    if (weights.shape(name) != shape) {
      throw Error(fmt::format("'{}': tensor '{}' has shape [{}], '{}' implies [{}]", weights.path().string(), name,
                              fmt::join(weights.shape(name), ", "), file.string(), fmt::join(shape, ", ")));
    }
  };
  expect("linear.weight", {d.out_features, d.in_features});
  if (d.bias) expect("linear.bias", {d.out_features});
  return d;
}

// A module's folder: modules.json's `path`, which must stay inside the model folder.
fs::path module_folder(const fs::path& folder, const fs::path& file, const boost::json::object& module) {
  const auto* path = module.if_contains("path");
  if (!path || path->is_null()) return folder;
  if (!path->is_string()) throw Error(fmt::format("'{}': a module's path must be a string", file.string()));
  const fs::path relative(std::string(path->get_string()));
  if (!stays_inside(relative)) {
    throw Error(
        fmt::format("'{}': module path '{}' leaves the model folder (absolute, or with '..'); a module's "
                    "files must be inside the folder",
                    file.string(), relative.string()));
  }
  return folder / relative;
}

// modules.json, in its order as sentence-transformers runs it: the Transformer first, then Pooling, then
// Dense and Normalize modules in any order. Without it, plain mean pooling (sentence-transformers' default
// for a bare transformer); a list with the Transformer alone keeps that default too.
void read_modules(const fs::path& folder, Checkpoint& c) {
  const auto file = folder / "modules.json";
  if (!fs::exists(file)) return;
  const auto modules = read_json(file);
  if (!modules.is_array()) throw Error(fmt::format("'{}': expected a JSON list", file.string()));
  enum { Start, Transformer, Pooled } seen = Start;
  const char* order =
      "flowline runs modules.json's modules in their order: the Transformer first, then Pooling, then Dense "
      "and Normalize modules in any order";
  for (const auto& m : modules.get_array()) {
    if (!m.is_object()) throw Error(fmt::format("'{}': each module must be a JSON object", file.string()));
    const auto* type = m.get_object().if_contains("type");
    if (!type || !type->is_string()) throw Error(fmt::format("'{}': a module without a type", file.string()));
    const std::string t(type->get_string());
    const fs::path dir = module_folder(folder, file, m.get_object());
    const bool transformer = ends_with(t, ".Transformer"), pooling = ends_with(t, ".Pooling");
    if (!transformer && !pooling && !ends_with(t, ".Dense") && !ends_with(t, ".Normalize")) {
      throw Error(fmt::format("'{}': module type '{}' is not supported (Transformer, Pooling, Dense, Normalize)",
                              file.string(), t));
    }
    if (transformer != (seen == Start) || (pooling && seen != Transformer) || (!transformer && seen == Start) ||
        (!transformer && !pooling && seen != Pooled)) {
      throw Error(fmt::format("'{}': module '{}' cannot come {}: {}", file.string(), t,
                              seen == Start         ? "first"
                              : seen == Transformer ? "right after the Transformer"
                                                    : "after Pooling",
                              order));
    }
    if (transformer) {
      seen = Transformer;
    } else if (pooling) {
      if (!fs::exists(dir / "config.json")) {
        throw Error(
            fmt::format("'{}': missing config.json (the Pooling module's settings, which modules.json "
                        "places there)",
                        dir.string()));
      }
      read_pooling(dir / "config.json", c.modules);
      seen = Pooled;
    } else if (ends_with(t, ".Dense")) {
      c.modules.dense.push_back(read_dense(dir));
      c.modules.order.push_back(SentenceModules::Step::Dense);
    } else {
      c.modules.order.push_back(SentenceModules::Step::Normalize);
    }
  }
  c.modules.normalize = !c.modules.order.empty() && c.modules.order.back() == SentenceModules::Step::Normalize;
}

void read_classifier(const fs::path& folder, Checkpoint& c) {
  const auto* archs = c.config.if_contains("architectures");
  if (!archs || !archs->is_array()) return;
  bool classifier = false;
  for (const auto& a : archs->get_array())
    classifier |= a.is_string() && ends_with(a.get_string(), "ForSequenceClassification");
  if (!classifier) return;
  ClassifierHead head;
  if (const auto* labels = c.config.if_contains("id2label"); labels && labels->is_object())
    head.num_labels = static_cast<std::int64_t>(labels->get_object().size());
  if (const auto* n = c.config.if_contains("num_labels"); n && !n->is_null()) {
    if (!n->is_int64()) throw Error(fmt::format("'{}': num_labels: must be an integer", c.config_file.string()));
    head.num_labels = n->get_int64();
  }
  if (head.num_labels < 1 || head.num_labels > kMaxFeatures) {
    throw Error(fmt::format("'{}': num_labels: must be an integer in 1..{}, got {} (or id2label's count)",
                            c.config_file.string(), kMaxFeatures, head.num_labels));
  }
  head.activation = head.num_labels == 1 ? Activation::Sigmoid : Activation::Identity;
  if (const auto* st = c.config.if_contains("sentence_transformers"); st && st->is_object()) {
    if (const auto* fn = st->get_object().if_contains("activation_fn"); fn && fn->is_string())
      head.activation =
          parse_activation(fn->get_string(), folder / "config.json", "sentence_transformers.activation_fn");
  }
  c.classifier = head;
}

// A *ForTokenClassification checkpoint's labels: config.json's id2label, required.
void read_token_classifier(Checkpoint& c) {
  const auto* archs = c.config.if_contains("architectures");
  if (!archs || !archs->is_array()) return;
  bool token = false;
  for (const auto& a : archs->get_array())
    token |= a.is_string() && ends_with(a.get_string(), "ForTokenClassification");
  if (!token) return;
  const std::string file = c.config_file.string();
  const auto* id2label = c.config.if_contains("id2label");
  if (!id2label || !id2label->is_object() || id2label->get_object().empty()) {
    throw Error(
        fmt::format("'{}': id2label: a *ForTokenClassification checkpoint must name its labels (an object "
                    "of label index to name)",
                    file));
  }
  const auto& names = id2label->get_object();
  const auto count = static_cast<std::int64_t>(names.size());
  if (count > kMaxFeatures) throw Error(fmt::format("'{}': id2label: more than {} labels", file, kMaxFeatures));
  if (const auto* n = c.config.if_contains("num_labels");
      n && !n->is_null() && !(n->is_int64() && n->get_int64() == count)) {
    throw Error(fmt::format("'{}': num_labels: {} disagrees with id2label's {} labels", file, json_excerpt(*n), count));
  }
  TokenClassifierHead head;
  head.labels.resize(static_cast<std::size_t>(count));
  for (const auto& [key, name] : names) {
    std::size_t index = 0, used = 0;
    try {
      index = std::stoul(std::string(key), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || index >= head.labels.size() || !head.labels[index].empty()) {
      throw Error(fmt::format("'{}': id2label: key '{}' is not a label index 0..{} named once", file,
                              std::string_view(key), count - 1));
    }
    if (!name.is_string() || name.get_string().empty()) {
      throw Error(
          fmt::format("'{}': id2label.{}: must be a label name (a non-empty string)", file, std::string_view(key)));
    }
    head.labels[index] = std::string(name.get_string());
  }
  c.token_classifier = std::move(head);
}

void read_lengths_and_prompts(const fs::path& folder, Checkpoint& c) {
  if (const auto* v = c.config.if_contains("max_position_embeddings"); v && v->is_int64())
    c.max_seq_length = v->get_int64();
  for (const auto& [file, key] : {std::pair{"sentence_bert_config.json", "max_seq_length"},
                                  std::pair{"tokenizer_config.json", "model_max_length"}}) {
    if (!fs::exists(folder / file)) continue;
    const auto o = read_json_object(folder / file);
    const auto* v = o.if_contains(key);
    if (v && v->is_int64() && v->get_int64() > 0) {
      c.max_seq_length = std::min(v->get_int64(), c.max_seq_length);
      break;
    }
    // tokenizer_config.json's model_max_length is often transformers' "very large" 1e30 (no limit): skipped.
    // sentence_bert_config.json's max_seq_length is the encoder's own limit: a bad one is refused.
    if (v && !v->is_null() && std::string_view(file) == "sentence_bert_config.json") {
      throw Error(
          fmt::format("'{}': {}: must be a positive integer, got {}", (folder / file).string(), key, json_excerpt(*v)));
    }
  }
  const auto prompts_file = folder / "config_sentence_transformers.json";
  if (!fs::exists(prompts_file)) return;
  const auto o = read_json_object(prompts_file);
  if (const auto* p = o.if_contains("prompts"); p && p->is_object()) {
    for (const auto& [name, text] : p->get_object()) {
      if (!text.is_string())
        throw Error(fmt::format("'{}': prompts.{} must be a string", prompts_file.string(), std::string(name)));
      c.prompts.emplace(std::string(name), std::string(text.get_string()));
    }
  }
  if (const auto* d = o.if_contains("default_prompt_name"); d && d->is_string()) {
    c.default_prompt_name = std::string(d->get_string());
    if (!c.prompts.count(c.default_prompt_name))
      throw Error(fmt::format("'{}': default_prompt_name '{}' is not among the prompts", prompts_file.string(),
                              c.default_prompt_name));
  }
}

}  // namespace

std::string to_string(Pooling pooling) {
  switch (pooling) {
    case Pooling::Cls:
      return "cls";
    case Pooling::Max:
      return "max";
    case Pooling::Mean:
      return "mean";
    case Pooling::MeanSqrtLen:
      return "mean_sqrt_len_tokens";
    case Pooling::WeightedMean:
      return "weightedmean";
    case Pooling::LastToken:
      return "lasttoken";
  }
  return "?";
}

std::string to_string(Activation activation) {
  switch (activation) {
    case Activation::Identity:
      return "identity";
    case Activation::Tanh:
      return "tanh";
    case Activation::Relu:
      return "relu";
    case Activation::Gelu:
      return "gelu";
    case Activation::Sigmoid:
      return "sigmoid";
  }
  return "?";
}

Checkpoint Checkpoint::read(const fs::path& folder) {
  if (!fs::is_directory(folder)) {
    throw Error(
        fmt::format("model '{}': no such folder (expected a Hugging Face / sentence-transformers checkpoint "
                    "folder, or in a flow a model name ORG/NAME found in the local Hugging Face cache; "
                    "docs/models.md says how to get one)",
                    folder.string()));
  }
  for (const char* needed : {"config.json", kWeightsFileName}) {
    if (!fs::exists(folder / needed)) {
      throw Error(
          fmt::format("model '{}': missing {} (expected a Hugging Face / sentence-transformers checkpoint "
                      "folder; docs/models.md says how to get one)",
                      folder.string(), needed));
    }
  }
  Checkpoint c;
  c.folder = folder;
  c.config_file = folder / "config.json";
  c.config = read_json_object(c.config_file);
  const auto* type = c.config.if_contains("model_type");
  c.model_type = type && type->is_string() ? std::string(type->get_string()) : "bert";
  const auto* architecture = detail::find_architecture(c.model_type);
  if (!architecture) {
    throw Error(fmt::format("'{}': model_type '{}' is not supported (supported: {})", c.config_file.string(),
                            c.model_type, fmt::join(supported_model_types(), ", ")));
  }
  if (architecture->check) architecture->check({c, c10::Device(c10::kCPU), c10::kFloat});
  read_modules(folder, c);
  read_classifier(folder, c);
  read_token_classifier(c);
  read_lengths_and_prompts(folder, c);
  return c;
}

std::optional<std::string> Checkpoint::problem(const fs::path& folder, Use use) {
  try {
    const Checkpoint c = read(folder);
    if (!fs::exists(folder / "tokenizer.json") && !fs::exists(folder / "vocab.txt")) {
      return fmt::format("model '{}': no tokenizer (tokenizer.json, or vocab.txt for BERT)", folder.string());
    }
    // A tokenizer that flowline::tokenizers cannot run exactly is refused here, naming its file and part.
    Tokenizer::from_folder(folder);
    if (use == Use::CrossEncoder && !c.classifier) {
      return fmt::format("'{}': not a cross-encoder (config.json's architectures name no *ForSequenceClassification)",
                         c.config_file.string());
    }
    if (use == Use::CrossEncoder) detail::head_layout(detail::HeadKind::SequenceClassification, c);
    if (use == Use::TokenClassifier && !c.token_classifier) {
      return fmt::format("'{}': not a token classifier (config.json's architectures name no *ForTokenClassification)",
                         c.config_file.string());
    }
    if (use == Use::TokenClassifier) {
      detail::check_head(detail::HeadKind::TokenClassification, c,
                         static_cast<std::int64_t>(c.token_classifier->labels.size()));
    }
    if (use == Use::Embedding && c.classifier && !fs::exists(folder / "modules.json")) {
      return fmt::format(
          "'{}': a cross-encoder (*ForSequenceClassification), not a sentence embedding model: run it "
          "as a cross-encoder (CrossEncoderModel)",
          c.config_file.string());
    }
    return std::nullopt;
  } catch (const Error& e) {
    return std::string(e.what());
  }
}

const std::string& Checkpoint::prompt(const std::string& name) const {
  const auto it = prompts.find(name);
  if (it == prompts.end()) {
    std::vector<std::string> names;
    for (const auto& [n, _] : prompts) names.push_back(n);
    throw Error(
        fmt::format("prompt_name '{}': the model '{}' has {}", name, folder.string(),
                    names.empty() ? std::string("no prompts") : fmt::format("the prompts {}", fmt::join(names, ", "))));
  }
  return it->second;
}

}  // namespace flowline::models
