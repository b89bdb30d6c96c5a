// flowline/models/cross_encoder_replica.hpp — what every executor over a classification head (the Reranker
// and the SequenceClassifier over *ForSequenceClassification checkpoints, the TokenClassifier over
// *ForTokenClassification ones) declares and holds: its shared `with:` parameters, and per replica the model,
// tokenizer, device, stream and pass planner made from them (HeadReplica<Model>; CrossEncoderReplica for the
// sequence heads, warmed up at construction unless `warmup: false`).
//
// An executor lists cross_encoder_params() among its spec's parameters and constructs one replica object in its
// constructor (on its replica thread), then tokenizes into its own buffers and runs `planner`'s passes through
// `model` on `stream`. Replicas on one device share the weights (shared_per_device, flowline/torch_support.hpp);
// the tokenizer, stream and planner are the replica's own. A replica object belongs to one replica thread:
// nothing in it is locked.
#pragma once

#include "flowline/executor.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/torch_support.hpp"

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flowline::models {

// The parameters every such executor takes, in this order: model (a Path, also a hub name, checked by
// `model_check`), device, dtype, max_seq_length (what is truncated: `truncated`, e.g. "pairs"), batch_size
// (default `batch_size`, help `batch_help`), warmup.
std::vector<ParamSpec> cross_encoder_params(
    std::string model_help, std::function<std::optional<std::string>(const boost::json::value&)> model_check,
    std::string truncated, std::int64_t batch_size, std::string batch_help);

// What a head executor's replica holds whatever its model: the parameters above read, and the warm-up.
struct HeadReplicaParts {
  // "(bert, 2 layers, hidden 32; tokenizer ...) on cuda:0 in Half" of `info`: for the executor's start-up line.
  std::string describe(const ModelInfo& info) const;
  // The warm-up passes (warm_up_passes(), pass_planner.hpp) on the replica's stream, each run by `run_pass`,
  // which returns once the device is done with it (its output copied to the host).
  void warm_up_with(const std::function<void(const PackedBatch& pass)>& run_pass) const;

  std::string folder;
  c10::Device device{c10::kCPU};
  c10::ScalarType dtype = c10::kFloat;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<c10::Stream> stream;  // the replica's own on a GPU
  std::size_t max_length = 512;
  PassPlanner planner{{64, 0}};  // batch_size sequences a pass

 protected:
  // The device (`device`, else the flow's), the dtype (fp16 needs a GPU), the tokenizer; returns the checkpoint.
  Checkpoint read(const Params& params, const RuntimeInfo& runtime);
  // max_seq_length within min_length..model_max (0: model_max), batch_size, and the stream on a GPU.
  void size(const Params& params, std::size_t min_length, std::size_t model_max);
};

// A replica over `Model` (CrossEncoderModel, TokenClassifierModel: constructed from (Checkpoint, device, dtype),
// with checkpoint()): the parts above and the shared model. `pairs`: its sequences are pairs (max_seq_length then
// leaves room for the pair template's specials and a token of each text). Throws flowline::Error naming the
// parameter or the file.
template <class Model>
struct HeadReplica : HeadReplicaParts {
  HeadReplica(const Params& params, const RuntimeInfo& runtime, bool pairs) {
    const Checkpoint checkpoint = read(params, runtime);
    model = shared_per_device<Model>(folder, device, dtype,
                                     [&] { return std::make_shared<const Model>(checkpoint, device, dtype); });
    size(params, tokenizer->special_tokens_count(pairs) + (pairs ? 2 : 1),
         static_cast<std::size_t>(model->checkpoint().max_seq_length));
  }
  std::string describe() const { return HeadReplicaParts::describe(model->info()); }

  std::shared_ptr<const Model> model;
};

// The Reranker's and the SequenceClassifier's replica: pairs (or single texts) scored by a sequence head.
struct CrossEncoderReplica : HeadReplica<CrossEncoderModel> {
  // Reads the parameters (HeadReplica), the type ids as transformers passes them, and warms up unless
  // `warmup: false`.
  CrossEncoderReplica(const Params& params, const RuntimeInfo& runtime);
  // The warm-up passes through score(); the constructor runs them when the parameter `warmup` says so.
  void warm_up() const;

  // Whether pairs carry their template's type ids: not when the model has one type, nor when
  // tokenizer_config.json's model_input_names leaves them out (transformers then passes none: all 0).
  bool typed = false;
};

}  // namespace flowline::models
