// The SequenceClassifier executor: tokenizes each document's text (or text pair), runs the classifier head
// in length-sorted packed passes, applies the pipeline's function and writes the labels best first.
#include "flowline/sequence_classifier/sequence_classifier.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/model_folder.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/cross_encoder_replica.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

namespace flowline::sequence_classifier {
namespace {

// What turns a label's logit into its score (transformers' ClassificationFunction, and auto: its choice).
enum class Function { Auto, None, Sigmoid, Softmax };

Function parse_function(std::string_view name) {
  if (name == "none") return Function::None;
  if (name == "sigmoid") return Function::Sigmoid;
  if (name == "softmax") return Function::Softmax;
  return Function::Auto;
}

// TextClassificationPipeline.postprocess's choice when it is given no function_to_apply.
Function pipeline_function(const models::Checkpoint& checkpoint, std::int64_t labels) {
  const auto* problem = checkpoint.config.if_contains("problem_type");
  const std::string_view type = problem && problem->is_string() ? std::string_view(problem->get_string()) : "";
  if (type == "regression") return Function::None;
  if (type == "multi_label_classification" || labels == 1) return Function::Sigmoid;
  return Function::Softmax;
}

// config.json's id2label as a list by index; LABEL_i (transformers' names) when it has none. Every index
// 0..labels-1 must be named once, by a string.
std::vector<std::string> read_labels(const models::Checkpoint& checkpoint, std::int64_t labels) {
  const std::string file = checkpoint.config_file.string();
  std::vector<std::string> out(static_cast<std::size_t>(labels));
  const auto* id2label = checkpoint.config.if_contains("id2label");
  if (id2label == nullptr || id2label->is_null()) {
    for (std::int64_t i = 0; i < labels; ++i) out[static_cast<std::size_t>(i)] = fmt::format("LABEL_{}", i);
    return out;
  }
  if (!id2label->is_object()) throw Error(fmt::format("'{}': id2label: must be an object of label names", file));
  if (static_cast<std::int64_t>(id2label->get_object().size()) != labels) {
    throw Error(fmt::format("'{}': id2label: names {} labels, the classifier has {}", file,
                            id2label->get_object().size(), labels));
  }
  for (const auto& [key, name] : id2label->get_object()) {
    std::int64_t index = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
    if (ec != std::errc() || end != key.data() + key.size() || index < 0 || index >= labels) {
      throw Error(
          fmt::format("'{}': id2label: key '{}' is not a label index 0..{}", file, std::string_view(key), labels - 1));
    }
    if (!name.is_string()) {
      throw Error(fmt::format("'{}': id2label.{}: must be a string", file, std::string_view(key)));
    }
    out[static_cast<std::size_t>(index)] = std::string(name.get_string());
  }
  return out;
}

// A document's second text: tags["text_pair"] when it is there.
std::optional<std::string_view> text_pair(const Document& doc) {
  const auto* pair = doc.tags.if_contains("text_pair");
  if (pair == nullptr) return std::nullopt;
  if (!pair->is_string()) throw Error(fmt::format("document '{}': tags.text_pair must be a string", doc.id));
  return std::string_view(pair->get_string());
}

// What validation asks of `model`: a checkpoint the cross-encoder runs, whose id2label names every label.
std::optional<std::string> model_problem(const boost::json::value& value) {
  const std::string folder(value.get_string());
  if (auto problem = models::Checkpoint::problem(folder, models::Checkpoint::Use::CrossEncoder)) return problem;
  try {
    const auto checkpoint = models::Checkpoint::read(folder);
    read_labels(checkpoint, checkpoint.classifier->num_labels);
  } catch (const Error& e) {
    return e.what();
  }
  return std::nullopt;
}

ParamSpec function_param(boost::json::value default_value, std::string help) {
  ParamSpec spec =
      ParamSpec::choice("function_to_apply", {"auto", "none", "sigmoid", "softmax"}, "auto", std::move(help));
  spec.default_value = std::move(default_value);
  return spec;
}

class SequenceClassifier : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "SequenceClassifier",
        fmt::format("Label each text (or text pair) with a *ForSequenceClassification checkpoint ({}; LibTorch)",
                    fmt::join(models::supported_architectures(models::Checkpoint::Use::CrossEncoder), ", ")),
        models::cross_encoder_params(
            "*ForSequenceClassification checkpoint folder, or a model name ORG/NAME in the local Hugging Face "
            "cache ($HF_HOME/hub)",
            model_problem, "texts and pairs", 64, "sequences per forward pass"),
        {"/classify"},
    };
    spec.params.insert(
        spec.params.end(),
        {ParamSpec::optional("top_k", ParamType::Int, 0, "labels kept per document, best first (0: all)").min(0),
         function_param("auto",
                        "what turns logits into scores: auto (as transformers' text-classification pipeline: "
                        "sigmoid for multi-label or one label, none for regression, else softmax), none, sigmoid, "
                        "softmax"),
         ParamSpec::optional("raw_scores", ParamType::Bool, false, "the logits (function_to_apply none)")});
    spec.replicas_per_gpu = 2;
    return spec;
  }

  // What a request may ask of /classify (and of any endpoint); checked by the core first.
  static std::vector<EndpointParams> request_params() {
    return {{std::string(kDefaultEndpoint),
             {ParamSpec::optional("top_k", ParamType::Int, nullptr,
                                  "labels kept per document, best first; 0: all (default: the classifier's `top_k`)")
                  .min(0),
              ParamSpec::optional("raw_scores", ParamType::Bool, nullptr,
                                  "the logits instead of scores (default: the classifier's `raw_scores`)"),
              function_param(nullptr, "auto, none, sigmoid or softmax (default: the classifier's `function_to_apply`)"),
              ParamSpec::optional("count_tokens", ParamType::Bool, false,
                                  "each document's tokens, special ones included, in tags.tokens (the gateway's "
                                  "usage figures)")}}};
  }

  explicit SequenceClassifier(const ExecutorContext& context) : Executor(context), replica_(params(), runtime()) {
    labels_ = read_labels(replica_.model->checkpoint(), replica_.model->num_labels());
    auto_function_ = pipeline_function(replica_.model->checkpoint(), replica_.model->num_labels());
    top_k_ = params().get<std::size_t>("top_k");
    function_ = params().get<std::string>("function_to_apply");
    raw_ = params().get<bool>("raw_scores");
    spdlog::info("executor '{}' replica {}: sequence classifier {} {}, labels {}, {} by default", runtime().name,
                 runtime().replica, replica_.folder, replica_.describe(), fmt::join(labels_, ", "),
                 name_of(resolve(function_, raw_)));
    if (const auto warning = random_weights_warning(replica_.folder, runtime().name, "model", "labels");
        !warning.empty() && runtime().replica == 0) {
      spdlog::warn("{}", warning);
    }
    metrics().set("max_seq_length", static_cast<double>(replica_.max_length));  // --stats; Python's max_length
    bind("/classify", &SequenceClassifier::classify);
    bind_default(&SequenceClassifier::classify);
  }

 private:
  static const char* name_of(Function f) {
    return f == Function::Sigmoid ? "sigmoid" : f == Function::Softmax ? "softmax" : "none";
  }

  Function resolve(std::string_view function, bool raw) const {
    if (raw) return Function::None;
    const Function f = parse_function(function);
    return f == Function::Auto ? auto_function_ : f;
  }

  void classify(DocumentArray& docs, const RequestInfo& request) {
    if (docs.empty()) return;
    const std::size_t top_k = request.param_or<std::size_t>("top_k", top_k_);
    const Function function = resolve(request.param_or<std::string>("function_to_apply", function_),
                                      request.param_or<bool>("raw_scores", raw_));
    at::Tensor scores = logits(docs);  // [documents, labels], float32 on the host
    if (function == Function::Sigmoid) scores = at::sigmoid(scores);
    if (function == Function::Softmax) scores = at::softmax(scores, 1);
    if (const auto bad = models::nonfinite_rows(scores); !bad.empty()) {
      throw models::NonFiniteOutput(bad, "label scores", docs.size());
    }
    scores = scores.contiguous();
    const auto labels = static_cast<std::size_t>(scores.size(1));
    const std::size_t kept = top_k == 0 ? labels : std::min(top_k, labels);
    const bool count_tokens = request.param_or<bool>("count_tokens", false);
    std::vector<std::size_t> order(labels);
    for (std::size_t d = 0; d < docs.size(); ++d) {
      const float* row = scores.data_ptr<float>() + d * labels;
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [row](std::size_t a, std::size_t b) { return row[a] > row[b]; });
      boost::json::array out;
      for (std::size_t k = 0; k < kept; ++k) {
        const std::string& label = labels_[order[k]];
        out.push_back(boost::json::object{{"label", label}, {"score", static_cast<double>(row[order[k]])}});
        docs[d].scores[label] = row[order[k]];
      }
      docs[d].tags["labels"] = std::move(out);
      if (count_tokens) docs[d].tags["tokens"] = static_cast<std::int64_t>(offsets_[d + 1] - offsets_[d]);
    }
    metrics().add("sequences", static_cast<double>(docs.size()));
  }

  // Tokenizes every document (a pair where it has tags.text_pair), then runs the classifier in passes of
  // batch_size sequences of similar length; each pass's logits back to their documents.
  at::Tensor logits(const DocumentArray& docs) {
    ids_.clear();
    types_.clear();
    offsets_.assign(1, 0);
    for (const Document& doc : docs) {
      std::size_t n = 0;
      if (const auto pair = text_pair(doc)) {
        n = replica_.tokenizer->encode_pair_into(doc.text, *pair, replica_.max_length, ids_,
                                                 replica_.typed ? &types_ : nullptr);
      } else {
        n = replica_.tokenizer->encode_into(doc.text, replica_.max_length, ids_);
        if (replica_.typed) types_.resize(types_.size() + n, 0);  // a single text's template is all type 0
      }
      offsets_.push_back(offsets_.back() + n);
    }
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (replica_.stream) on_stream.emplace(*replica_.stream);
    replica_.planner.plan({ids_, offsets_, types_});
    at::Tensor out = at::empty({static_cast<std::int64_t>(docs.size()), replica_.model->num_labels()},
                               at::TensorOptions().dtype(at::kFloat).device(replica_.device));
    std::vector<std::int64_t> order(replica_.planner.order().begin(), replica_.planner.order().end());
    const at::Tensor rows = at::tensor(order, at::kLong).to(replica_.device);
    models::PassFigures figures;
    for (const models::Pass& pass : replica_.planner.passes()) {
      models::scatter_rows(out, rows, pass, replica_.model->score(pass.batch, /*raw=*/true));
      figures.add(pass);
    }
    figures.report(metrics());
    return out.to(at::kCPU);
  }

  models::CrossEncoderReplica replica_;  // model, tokenizer, stream, planner (batch_size sequences a pass)
  std::vector<std::string> labels_;      // by index: config.json's id2label
  Function auto_function_ = Function::Softmax;
  std::string function_ = "auto";
  std::size_t top_k_ = 0;
  bool raw_ = false;
  // Buffers reused across requests.
  std::vector<std::int32_t> ids_, types_;
  std::vector<std::size_t> offsets_;
};

}  // namespace

void register_sequence_classifier(Registry& registry) {
  registry.add<SequenceClassifier>("flowline::sequence_classifier");
}

}  // namespace flowline::sequence_classifier
