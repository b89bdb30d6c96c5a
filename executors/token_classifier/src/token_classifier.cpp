// The TokenClassifier executor: tokenizes each document's text with offsets, cuts it into windows, runs the
// token-classification head over the windows in packed passes, and turns each window's scores into entities
// as transformers' TokenClassificationPipeline does (aggregation.hpp).
#include "flowline/token_classifier/token_classifier.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/model_folder.hpp"
#include "flowline/models/cross_encoder_replica.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/models/token_classifier.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/token_classifier/aggregation.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

namespace flowline::token_classifier {
namespace {

constexpr const char* kStrategies = "none, simple, first, average or max";

std::optional<std::string> model_problem(const boost::json::value& value) {
  return models::Checkpoint::problem(std::string(value.get_string()), models::Checkpoint::Use::TokenClassifier);
}

// What a replica holds: the head executors' parts (models::HeadReplica) over a token-classification model, and
// the tokenizer's count of special tokens around one text.
struct Replica : models::HeadReplica<models::TokenClassifierModel> {
  Replica(const Params& params, const RuntimeInfo& runtime)
      : HeadReplica(params, runtime, /*pairs=*/false), specials(tokenizer->special_tokens_count(false)) {}

  std::size_t specials = 0;
};

// What one request asks for.
struct Settings {
  Strategy strategy = Strategy::Simple;
  std::vector<std::string> ignore_labels{"O"};
  std::size_t stride = 0;
};

// A window: the template's leading specials, content tokens [begin, end) of the document's encoding, the
// trailing specials; `row` is its first token's row among the request's packed ids.
struct Window {
  std::size_t begin = 0, end = 0, row = 0;
};

// A document's encoding and its windows. Leading and trailing specials: the post-processor's template. The replica
// keeps its Work from request to request (encode_with_offsets_into refills the encoding in place).
struct Work {
  models::Encoding encoding;
  std::vector<models::TokenOffsets> bytes;  // the offsets as UTF-8 byte positions of the text
  std::size_t prefix = 0, suffix = 0;
  std::vector<Window> windows;
  bool truncated = false;
};

// The code points of a token string (valid UTF-8: the tokenizer's own).
std::size_t code_points(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

class TokenClassifier : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "TokenClassifier",
        fmt::format("Named entities (token labels) of each text with a *ForTokenClassification checkpoint, as "
                    "transformers' token-classification pipeline finds them, as chunks ({}; LibTorch)",
                    fmt::join(models::supported_architectures(models::Checkpoint::Use::TokenClassifier), ", ")),
        models::cross_encoder_params(
            "*ForTokenClassification checkpoint folder, or a model name ORG/NAME in the local Hugging Face cache "
            "($HF_HOME/hub)",
            model_problem, "texts (stride: windows of this many)", 64, "windows (texts) per forward pass"),
        {"/token-classification"},
    };
    spec.params.insert(spec.params.end(), {strategy_param("simple",
                                                          "none (each token), simple (B-/I- groups of tokens), first, "
                                                          "average, max (groups of words, labelled by their first "
                                                          "token, mean scores, best token); the pipeline's default is "
                                                          "none"),
                                           ignore_param(boost::json::array{"O"}, "labels left out"),
                                           stride_param(0,
                                                        "tokens shared by consecutive windows of a text longer "
                                                        "than max_seq_length; 0: such a text is truncated")});
    spec.replicas_per_gpu = 2;
    return spec;
  }

  static std::vector<EndpointParams> request_params() {
    return {{std::string(kDefaultEndpoint),
             {strategy_param(nullptr, "none, simple, first, average or max (default: the tagger's)"),
              ignore_param(nullptr, "labels left out (default: the tagger's `ignore_labels`)"),
              stride_param(nullptr, "window overlap in tokens, 0: truncate (default: the tagger's `stride`)")}}};
  }

  explicit TokenClassifier(const ExecutorContext& context) : Executor(context), replica_(params(), runtime()) {
    defaults_.strategy = *parse_strategy(params().get<std::string>("aggregation_strategy"));
    defaults_.ignore_labels = params().get<std::vector<std::string>>("ignore_labels");
    defaults_.stride = params().get<std::size_t>("stride");
    if (const auto problem = settings_problem(defaults_)) throw Error(*problem);
    const std::string_view prefix = replica_.tokenizer->continuing_subword_prefix();
    subword_prefix_ = !prefix.empty();
    spdlog::info("executor '{}' replica {}: token classifier {} {}, labels {}, {} aggregation, sub-words by {}",
                 runtime().name, runtime().replica, replica_.folder, replica_.describe(),
                 fmt::join(replica_.model->labels(), ", "), to_string(defaults_.strategy),
                 subword_prefix_ ? fmt::format("the prefix '{}'", prefix) : std::string("the previous character"));
    if (const auto warning = random_weights_warning(replica_.folder, runtime().name, "model", "entities");
        !warning.empty() && runtime().replica == 0) {
      spdlog::warn("{}", warning);
    }
    if (params().get<bool>("warmup")) warm_up();
    bind("/token-classification", &TokenClassifier::tag);
    bind_default(&TokenClassifier::tag);
  }

 private:
  // The warm-up passes (models::warm_up_passes: on a GPU the largest pass a request can make, then every padded
  // power of two of tokens below it), each one's logits back on the host.
  void warm_up() {
    replica_.warm_up_with([&](const models::PackedBatch& pass) { (void)replica_.model->logits(pass).to(at::kCPU); });
  }

  static ParamSpec strategy_param(boost::json::value default_value, std::string help) {
    ParamSpec spec = ParamSpec::choice("aggregation_strategy", {"none", "simple", "first", "average", "max"}, "simple",
                                       std::move(help));
    spec.default_value = std::move(default_value);
    return spec;
  }
  static ParamSpec ignore_param(boost::json::value default_value, std::string help) {
    return ParamSpec::optional("ignore_labels", ParamType::StringList, std::move(default_value), std::move(help));
  }
  static ParamSpec stride_param(boost::json::value default_value, std::string help) {
    return ParamSpec::optional("stride", ParamType::Int, std::move(default_value), std::move(help)).min(0);
  }

  // The pipeline's refusals of a stride: with strategy none, and not less than a window's content.
  std::optional<std::string> settings_problem(const Settings& s) const {
    if (s.stride == 0) return std::nullopt;
    const std::size_t content = replica_.max_length - replica_.specials;
    if (s.strategy == Strategy::None) {
      return "parameter 'stride': windows need an aggregation_strategy other than none (as the pipeline's)";
    }
    if (s.stride >= content) {
      return fmt::format(
          "parameter 'stride': {} must be less than a window's {} text tokens (max_seq_length {} "
          "less {} special tokens)",
          s.stride, content, replica_.max_length, replica_.specials);
    }
    if (replica_.tokenizer->truncates_left()) {
      return "parameter 'stride': windows of a tokenizer whose tokenizer_config.json says truncation_side: left are "
             "not supported";
    }
    return std::nullopt;
  }

  Settings settings(const RequestInfo& request) const {
    Settings s;
    const auto strategy =
        request.param_or<std::string>("aggregation_strategy", std::string(to_string(defaults_.strategy)));
    const auto parsed = parse_strategy(strategy);
    if (!parsed)
      throw RequestError(fmt::format("parameter 'aggregation_strategy': '{}' is not {}", strategy, kStrategies));
    s.strategy = *parsed;
    s.ignore_labels = request.param_or<std::vector<std::string>>("ignore_labels", defaults_.ignore_labels);
    s.stride = request.param_or<std::size_t>("stride", defaults_.stride);
    if (const auto problem = settings_problem(s)) throw RequestError(*problem);
    return s;
  }

  void tag(DocumentArray& docs, const RequestInfo& request) {
    if (docs.empty()) return;
    const auto started = std::chrono::steady_clock::now();
    const Settings s = settings(request);
    work_.resize(docs.size());
    ids_.clear();
    offsets_.assign(1, 0);
    std::size_t truncated = 0;
    for (std::size_t d = 0; d < docs.size(); ++d) {
      prepare(docs[d].text, s.stride, work_[d]);
      truncated += work_[d].truncated ? 1 : 0;
    }
    if (truncated > 0) {
      metrics().add("truncated", static_cast<double>(truncated));
      if (!warned_) {
        warned_ = true;
        spdlog::warn(
            "executor '{}': {} text(s) longer than max_seq_length {} tokens were truncated, as the pipeline "
            "truncates them without stride (set `stride` to read them whole in windows); said once",
            runtime().name, truncated, replica_.max_length);
      }
    }
    const auto tokenized = std::chrono::steady_clock::now();
    at::Tensor scores = token_logits();  // [T, labels] float32 on the host, contiguous: ours to overwrite
    const auto scored = std::chrono::steady_clock::now();
    softmax_rows(scores.data_ptr<float>(), ids_.size(), replica_.model->labels().size());
    std::size_t found = 0;
    for (std::size_t d = 0; d < docs.size(); ++d) {
      std::vector<Entity> entities = find_entities(docs[d].text, work_[d], scores.data_ptr<float>(), s);
      found += entities.size();
      write_chunks(docs[d], entities, s.strategy == Strategy::None);
    }
    metrics().add("texts", static_cast<double>(docs.size()));
    metrics().add("entities", static_cast<double>(found));
    const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
    metrics().add("tokenize_seconds", seconds(started, tokenized));
    metrics().add("model_seconds", seconds(tokenized, scored));
    metrics().add("post_seconds", seconds(scored, std::chrono::steady_clock::now()));
  }

  // Tokenizes `text` and cuts it into windows (one without stride), appending each window's ids.
  void prepare(const std::string& text, std::size_t stride, Work& w) {
    const std::size_t content_max = replica_.max_length - replica_.specials;
    // Right truncation keeps the first tokens of the whole encoding, so the whole text is encoded once and
    // cut here (one window), which also tells whether it was cut; truncation_side left goes through the
    // tokenizer's own truncation and, when that filled max_length, a second encoding (ids alone) to tell.
    const bool cut_here = stride == 0 && !replica_.tokenizer->truncates_left();
    replica_.tokenizer->encode_with_offsets_into(text, stride > 0 || cut_here ? 0 : replica_.max_length, w.encoding);
    w.truncated = false;
    if (stride == 0 && !cut_here && w.encoding.ids.size() == replica_.max_length) {
      whole_.clear();
      w.truncated = replica_.tokenizer->encode_into(text, 0, whole_) > replica_.max_length;
    }
    const auto& special = w.encoding.special;
    const std::size_t n = special.size();
    w.prefix = 0;
    while (w.prefix < n && special[w.prefix]) ++w.prefix;
    w.suffix = 0;
    while (w.suffix < n - w.prefix && special[n - 1 - w.suffix]) ++w.suffix;
    models::byte_offsets_into(text, w.encoding.offsets, w.bytes);
    w.windows.clear();
    const std::size_t first = w.prefix, last = n - w.suffix, length = last - first;
    if (cut_here) {
      w.truncated = length > content_max;
      w.windows.push_back({first, first + std::min(length, content_max), 0});
    } else if (stride == 0 || length <= content_max) {
      w.windows.push_back({first, last, 0});
    } else {  // tokenizers' Encoding::truncate with a stride: windows step by content_max - stride
      for (std::size_t start = 0; start < length; start += content_max - stride) {
        const std::size_t stop = std::min(start + content_max, length);
        w.windows.push_back({first + start, first + stop, 0});
        if (stop == length) break;
      }
    }
    for (Window& window : w.windows) {
      window.row = ids_.size();
      const auto& ids = w.encoding.ids;
      ids_.insert(ids_.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(w.prefix));
      ids_.insert(ids_.end(), ids.begin() + static_cast<std::ptrdiff_t>(window.begin),
                  ids.begin() + static_cast<std::ptrdiff_t>(window.end));
      ids_.insert(ids_.end(), ids.end() - static_cast<std::ptrdiff_t>(w.suffix), ids.end());
      offsets_.push_back(ids_.size());
    }
  }

  // Every packed token's logits: the model's passes, back in the request's token order, on the host.
  at::Tensor token_logits() {
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (replica_.stream) on_stream.emplace(*replica_.stream);
    replica_.planner.plan({ids_, offsets_, {}});
    const auto labels = static_cast<std::int64_t>(replica_.model->labels().size());
    at::Tensor out = at::empty({static_cast<std::int64_t>(ids_.size()), labels},
                               at::TensorOptions().dtype(at::kFloat).device(replica_.device));
    const at::Tensor tokens = at::tensor(replica_.planner.token_order(), at::kLong).to(replica_.device);
    models::PassFigures figures;
    for (const models::Pass& pass : replica_.planner.passes()) {
      models::scatter_tokens(out, tokens, pass, replica_.model->logits(pass.batch));
      figures.add(pass);
    }
    figures.report(metrics());
    return out.to(at::kCPU).contiguous();
  }

  // The pipeline's softmax in place, row by row over `rows` x `labels` logits (exp of each less the row's
  // maximum, over their sum, in float as numpy computes it); a row holding NaN or infinity fails the request.
  static void softmax_rows(float* values, std::size_t rows, std::size_t labels) {
    std::vector<std::size_t> bad;
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = values + r * labels;
      const float top = *std::max_element(row, row + labels);
      float sum = 0;
      for (std::size_t l = 0; l < labels; ++l) {
        row[l] = std::exp(row[l] - top);
        sum += row[l];
      }
      bool finite = true;
      for (std::size_t l = 0; l < labels; ++l) {
        row[l] /= sum;
        finite = finite && std::isfinite(row[l]);
      }
      if (!finite) bad.push_back(r);
    }
    if (!bad.empty()) throw models::NonFiniteOutput(std::move(bad), "token label scores", rows);
  }

  // gather_pre_entities for one window, then aggregate and ignore_labels; windows merged. `scores`: the
  // request's softmax rows.
  std::vector<Entity> find_entities(const std::string& text, const Work& w, const float* scores, const Settings& s) {
    const auto& labels = replica_.model->labels();
    const auto decode = [this](std::span<const std::string_view> tokens) {
      return replica_.tokenizer->decode_tokens(tokens);
    };
    std::vector<Entity> all;
    for (const Window& window : w.windows) {
      tokens_.clear();
      for (std::size_t t = window.begin; t < window.end; ++t) {
        const std::size_t index = w.prefix + (t - window.begin);  // in the window, specials counted
        tokens_.push_back(pre_entity(text, w, t, index, t == window.begin && t != w.prefix));
        tokens_.back().scores = {scores + (window.row + index) * labels.size(), labels.size()};
      }
      std::vector<Entity> found = aggregate(tokens_, s.strategy, labels, decode, s.ignore_labels);
      if (w.windows.size() == 1) return found;
      all.insert(all.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
    }
    return merge_overlapping(std::move(all));
  }

  // Token t of the encoding as the pipeline's pre-entity (its scores left to the caller). `opens_window`: the
  // first text token of a window after the first.
  PreEntity pre_entity(const std::string& text, const Work& w, std::size_t t, std::size_t index,
                       bool opens_window) const {
    PreEntity p;
    const std::int32_t id = w.encoding.ids[t];
    p.word = replica_.tokenizer->id_to_token(id);
    p.start = w.encoding.offsets[t].start;
    p.end = w.encoding.offsets[t].end;
    p.index = index;
    std::size_t byte_start = w.bytes[t].start;
    const std::size_t byte_end = w.bytes[t].end;
    // ByteLevel's trim_offsets (RoBERTa's post-processor) leaves the space of an encoding's first token that
    // has one "Ġ": tokenizers trims each overflowing window as an encoding of its own, so a window's first
    // token keeps the space its offsets lost in the whole text's encoding.
    if (opens_window && p.word.starts_with("\u0120") && !p.word.substr(2).starts_with("\u0120") && byte_start > 0 &&
        text[byte_start - 1] == ' ' && (byte_start == text.size() || text[byte_start] != ' ')) {
      --byte_start;
      --p.start;
    }
    if (subword_prefix_) {
      p.is_subword = code_points(p.word) != p.end - p.start;
    } else {  // the pipeline's heuristic: sentence[start - 1 : start + 1] holds no space
      const bool space_before = byte_start > 0 && text[byte_start - 1] == ' ';
      const bool space_at = byte_start < text.size() && text[byte_start] == ' ';
      p.is_subword = p.start > 0 && !space_before && !space_at;
    }
    if (id == replica_.tokenizer->unk_id()) {
      p.word = std::string_view(text).substr(byte_start, byte_end - byte_start);
      p.is_subword = false;
    }
    return p;
  }

  static void write_chunks(Document& doc, const std::vector<Entity>& entities, bool tokens) {
    for (const Entity& e : entities) {
      Document chunk;
      chunk.text = e.word;
      chunk.parent_id = doc.id;
      chunk.tags[tokens ? "entity" : "entity_group"] = e.label;
      chunk.tags["score"] = e.score;
      if (e.index) chunk.tags["index"] = static_cast<std::int64_t>(*e.index);
      chunk.tags["start"] = static_cast<std::int64_t>(e.start);
      chunk.tags["end"] = static_cast<std::int64_t>(e.end);
      doc.chunks.push_back(std::move(chunk));
    }
  }

  Replica replica_;
  Settings defaults_;
  bool subword_prefix_ = false;
  bool warned_ = false;
  // Buffers reused across requests.
  std::vector<Work> work_;  // a request's documents', kept (and their vectors' capacity) for the next request
  std::vector<std::int32_t> ids_;
  std::vector<std::int32_t> whole_;  // a text's ids untruncated (truncation_side left: whether it was cut)
  std::vector<std::size_t> offsets_;
  std::vector<PreEntity> tokens_;  // a window's pre-entities
};

}  // namespace

void register_token_classifier(Registry& registry) { registry.add<TokenClassifier>("flowline::token_classifier"); }

}  // namespace flowline::token_classifier
