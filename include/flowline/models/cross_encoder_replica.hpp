// flowline/models/cross_encoder_replica.hpp — what every executor over a *ForSequenceClassification
// checkpoint (the Reranker, the SequenceClassifier; a token classifier next) declares and holds: its shared
// `with:` parameters, and per replica the model, tokenizer, device, stream and pass planner made from them
// (warmed up at construction unless `warmup: false`).
//
// An executor lists cross_encoder_params() among its spec's parameters and constructs one
// CrossEncoderReplica in its constructor (on its replica thread), then tokenizes into its own buffers and
// runs `planner`'s passes through `model` on `stream`. Replicas on one device share the weights
// (shared_per_device, flowline/torch_support.hpp); the tokenizer, stream and planner are the replica's own.
// A CrossEncoderReplica belongs to one replica thread: nothing in it is locked.
#pragma once

#include "flowline/executor.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/pass_planner.hpp"
#include "flowline/models/tokenizer.hpp"

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

struct CrossEncoderReplica {
  // Reads the parameters above from `params`: the device (`device`, else the flow's), the dtype (fp16 needs
  // a GPU), the checkpoint and its tokenizer, the shared model, max_seq_length within what the model and
  // the tokenizer's pair template allow, type ids as transformers passes them. Throws flowline::Error
  // naming the parameter or the file.
  CrossEncoderReplica(const Params& params, const RuntimeInfo& runtime);

  // "(bert, 2 layers, hidden 32; tokenizer ...) on cuda:0 in Half": for the executor's start-up line.
  std::string describe() const;
  // The warm-up passes (warm_up_passes(), pass_planner.hpp) on the replica's stream; the constructor runs them
  // when the parameter `warmup` says so.
  void warm_up() const;

  std::string folder;
  c10::Device device{c10::kCPU};
  c10::ScalarType dtype = c10::kFloat;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const CrossEncoderModel> model;
  std::optional<c10::Stream> stream;  // the replica's own on a GPU
  std::size_t max_length = 512;
  // Whether pairs carry their template's type ids: not when the model has one type, nor when
  // tokenizer_config.json's model_input_names leaves them out (transformers then passes none: all 0).
  bool typed = false;
  PassPlanner planner{{64, 0}};  // batch_size sequences a pass
};

}  // namespace flowline::models
