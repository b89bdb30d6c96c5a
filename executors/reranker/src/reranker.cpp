// The Reranker executor: gathers each query's candidates, scores every (query, candidate) pair with the
// cross-encoder in length-sorted packed passes, then sorts and cuts each query's matches.
#include "flowline/reranker/reranker.hpp"

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
#include <optional>
#include <string_view>
#include <vector>

namespace flowline::reranker {
namespace {

// One (query, candidate) pair of a request.
struct Pair {
  std::size_t query = 0, match = 0;  // document index, match index within it
};

class Reranker : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "Reranker",
        fmt::format("Score and sort each query's candidates with a cross-encoder checkpoint ({}; LibTorch)",
                    fmt::join(models::supported_architectures(models::Checkpoint::Use::CrossEncoder), ", ")),
        models::cross_encoder_params(
            "cross-encoder checkpoint folder (one label), or a model name ORG/NAME in the local Hugging Face cache "
            "($HF_HOME/hub)",
            [](const boost::json::value& v) {
              return models::Checkpoint::problem(std::string(v.get_string()), models::Checkpoint::Use::CrossEncoder);
            },
            "pairs", 128, "pairs per forward pass"),
        {"/rerank"},
    };
    spec.params.insert(
        spec.params.end(),
        {ParamSpec::optional("top_n", ParamType::Int, 0, "matches kept per query, best first (0: all)").min(0),
         ParamSpec::optional("raw_scores", ParamType::Bool, false,
                             "the cross-encoder's logits instead of its activation (sigmoid for one label)")});
    spec.replicas_per_gpu = 2;
    return spec;
  }

  // What a request may ask of /rerank (and of any endpoint, which reranks too); checked by the core first.
  static std::vector<EndpointParams> request_params() {
    return {{std::string(kDefaultEndpoint),
             {ParamSpec::optional("top_n", ParamType::Int, nullptr,
                                  "matches kept per query, best first; 0: all (default: the reranker's `top_n`)")
                  .min(0),
              ParamSpec::optional("raw_scores", ParamType::Bool, nullptr,
                                  "the cross-encoder's logits instead of its activation (default: the reranker's "
                                  "`raw_scores`)"),
              ParamSpec::optional("count_tokens", ParamType::Bool, false,
                                  "each query's tokens over its pairs in tags.tokens (the gateway's usage figures)")}}};
  }

  explicit Reranker(const ExecutorContext& context) : Executor(context), replica_(params(), runtime()) {
    if (replica_.model->num_labels() != 1) {
      throw Error(fmt::format("model '{}': {} labels; a reranker needs a cross-encoder with one", replica_.folder,
                              replica_.model->num_labels()));
    }
    top_n_ = params().get<std::size_t>("top_n");
    raw_ = params().get<bool>("raw_scores");
    spdlog::info("executor '{}' replica {}: cross-encoder {} {}", runtime().name, runtime().replica, replica_.folder,
                 replica_.describe());
    if (const auto warning = random_weights_warning(replica_.folder, runtime().name, "model", "scores");
        !warning.empty() && runtime().replica == 0) {
      spdlog::warn("{}", warning);
    }
    metrics().set("max_seq_length", static_cast<double>(replica_.max_length));  // --stats; Python's max_length
    bind("/rerank", &Reranker::rerank);
    bind_default(&Reranker::rerank);
  }

 private:
  void rerank(DocumentArray& docs, const RequestInfo& request) {
    const std::size_t top_n = request.param_or<std::size_t>("top_n", top_n_);
    const bool raw = request.param_or<bool>("raw_scores", raw_);
    std::vector<Pair> pairs;
    for (std::size_t q = 0; q < docs.size(); ++q) {
      take_candidates(docs[q]);
      for (std::size_t m = 0; m < docs[q].matches.size(); ++m) pairs.push_back({q, m});
    }
    const std::vector<float> scores = score(docs, pairs, raw);
    // NaN or infinity is never handed out as a score: the request fails, naming the queries it came from.
    if (const auto bad = models::nonfinite_rows(std::span<const float>(scores)); !bad.empty()) {
      std::vector<std::size_t> queries;
      for (const std::size_t i : bad) {
        if (queries.empty() || queries.back() != pairs[i].query) queries.push_back(pairs[i].query);
      }
      throw models::NonFiniteOutput(std::move(queries), "score", docs.size());
    }
    const bool count_tokens = request.param_or<bool>("count_tokens", false);
    std::vector<std::int64_t> tokens(count_tokens ? docs.size() : 0);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      Document& match = docs[pairs[i].query].matches[pairs[i].match];
      match.scores["relevance_score"] = scores[i];
      match.tags["index"] = static_cast<std::int64_t>(pairs[i].match);
      if (count_tokens) tokens[pairs[i].query] += static_cast<std::int64_t>(offsets_[i + 1] - offsets_[i]);
    }
    for (std::size_t q = 0; q < tokens.size(); ++q) docs[q].tags["tokens"] = tokens[q];
    for (auto& doc : docs) {
      auto& matches = doc.matches.docs();
      std::stable_sort(matches.begin(), matches.end(), [](const Document& a, const Document& b) {
        return a.scores.at("relevance_score") > b.scores.at("relevance_score");
      });
      if (top_n != 0 && matches.size() > top_n) matches.resize(top_n);
    }
    metrics().add("pairs", static_cast<double>(pairs.size()));
  }

  // A query without matches takes its candidates from tags["documents"] or tags["texts"] (strings).
  static void take_candidates(Document& query) {
    if (!query.matches.empty()) return;
    for (const char* key : {"documents", "texts"}) {
      const auto* list = query.tags.if_contains(key);
      if (!list) continue;
      if (!list->is_array())
        throw Error(fmt::format("document '{}': tags.{} must be a list of strings", query.id, key));
      for (const auto& item : list->get_array()) {
        if (!item.is_string()) {
          throw Error(fmt::format("document '{}': tags.{} must be a list of strings", query.id, key));
        }
        query.matches.push_back(Document(std::string(item.get_string())));
      }
      query.tags.erase(key);
      return;
    }
  }

  // Tokenizes every pair, then scores them in passes of batch_size pairs of similar length.
  std::vector<float> score(const DocumentArray& docs, const std::vector<Pair>& pairs, bool raw) {
    std::vector<float> out(pairs.size());
    if (pairs.empty()) return out;
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (replica_.stream) on_stream.emplace(*replica_.stream);
    ids_.clear();
    types_.clear();
    lengths_of_pairs_.clear();
    // Pairs come query by query: each query is tokenized once for all its candidates.
    for (std::size_t first = 0; first < pairs.size();) {
      const Document& query = docs[pairs[first].query];
      std::size_t last = first;
      candidates_.clear();
      while (last < pairs.size() && pairs[last].query == pairs[first].query) {
        candidates_.push_back(query.matches[pairs[last].match].text);
        ++last;
      }
      replica_.tokenizer->encode_pairs_into(query.text, candidates_, replica_.max_length, ids_,
                                            replica_.typed ? &types_ : nullptr, lengths_of_pairs_);
      first = last;
    }
    offsets_.assign(1, 0);
    for (const std::size_t n : lengths_of_pairs_) offsets_.push_back(offsets_.back() + n);
    // Longest first, batch_size pairs a pass (models::PassPlanner); each pass's scores back to their pairs.
    replica_.planner.plan({ids_, offsets_, types_});
    models::PassFigures figures;
    for (const models::Pass& pass : replica_.planner.passes()) {
      throw_if_cancelled("the reranker's forward passes");  // a request given up stops between passes
      const at::Tensor scores = replica_.model->score(pass.batch, raw).select(1, 0).to(at::kCPU);
      const float* s = scores.data_ptr<float>();
      for (std::size_t r = 0; r < pass.sequences.size(); ++r) out[pass.sequences[r]] = s[r];
      figures.add(pass);
    }
    figures.report(metrics());
    return out;
  }

  models::CrossEncoderReplica replica_;  // model, tokenizer, stream, planner (batch_size pairs a pass)
  std::size_t top_n_ = 0;
  bool raw_ = false;
  // Buffers reused across requests.
  std::vector<std::int32_t> ids_, types_;
  std::vector<std::size_t> offsets_, lengths_of_pairs_;
  std::vector<std::string_view> candidates_;
};

}  // namespace

void register_reranker(Registry& registry) { registry.add<Reranker>("flowline::reranker"); }

}  // namespace flowline::reranker
