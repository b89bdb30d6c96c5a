// CrossEncoderReplica and the shared parameters of executors over classification heads
// (flowline/models/cross_encoder_replica.hpp).
#include "flowline/models/cross_encoder_replica.hpp"

#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <fmt/format.h>

namespace flowline::models {

std::vector<ParamSpec> cross_encoder_params(
    std::string model_help, std::function<std::optional<std::string>(const boost::json::value&)> model_check,
    std::string truncated, std::int64_t batch_size, std::string batch_help) {
  return {ParamSpec::required_param("model", ParamType::Path, std::move(model_help))
              .hub_model_name()
              .check(std::move(model_check)),
          ParamSpec::optional("device", ParamType::String, "",
                              "cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
          ParamSpec::choice("dtype", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}, "fp32",
                            "weights and activations (fp16 needs a GPU)"),
          ParamSpec::optional("max_seq_length", ParamType::Int, 0,
                              fmt::format("truncate {} to this many tokens (0: the model's)", truncated))
              .min(0),
          ParamSpec::optional("batch_size", ParamType::Int, batch_size, std::move(batch_help)).min(1),
          ParamSpec::optional("warmup", ParamType::Bool, true,
                              "run passes at start (on a GPU the largest a request can make, then each padded size "
                              "below it) so the first requests do not pay for CUDA, cuBLAS and allocator set-up")};
}

Checkpoint HeadReplicaParts::read(const Params& params, const RuntimeInfo& runtime) {
  folder = params.get<std::string>("model");
  device = executor_device(params.get<std::string>("device"), runtime.device);
  dtype = parse_dtype(params.get<std::string>("dtype"));
  if (device.is_cpu() && dtype == c10::kHalf) {
    throw Error("parameter 'dtype': fp16 needs a GPU device; use fp32 or bf16 on the CPU");
  }
  Checkpoint checkpoint = Checkpoint::read(folder);
  tokenizer = Tokenizer::from_folder(folder);
  return checkpoint;
}

void HeadReplicaParts::size(const Params& params, std::size_t min_length, std::size_t model_max) {
  max_length = params.get<std::size_t>("max_seq_length");
  if (max_length == 0) max_length = model_max;
  if (max_length < min_length || max_length > model_max) {
    throw Error(fmt::format("parameter 'max_seq_length': {} is outside {}..{}", max_length, min_length, model_max));
  }
  planner.set_budget({params.get<std::size_t>("batch_size"), 0});
  if (device.is_cuda()) stream = replica_stream(device);
}

void HeadReplicaParts::warm_up_with(const std::function<void(const PackedBatch& pass)>& run_pass) const {
  c10::InferenceMode guard;
  std::optional<c10::StreamGuard> on_stream;
  if (stream) on_stream.emplace(*stream);
  const std::vector<std::int32_t> text = tokenizer->encode("warm up");  // real ids, specials too
  if (text.empty()) return;
  warm_up_passes(device, planner.budget().max_sequences, max_length, text, run_pass);
}

std::string HeadReplicaParts::describe(const ModelInfo& info) const {
  return fmt::format("({}, {} layers, hidden {}; tokenizer {}) on {} in {}", info.model_type, info.num_layers,
                     info.hidden_size, tokenizer->describe(), device.str(), c10::toString(dtype));
}

CrossEncoderReplica::CrossEncoderReplica(const Params& params, const RuntimeInfo& runtime)
    : HeadReplica(params, runtime, /*pairs=*/true) {
  typed = model->info().type_vocab_size > 1 && tokenizer->type_ids_input();
  if (params.get<bool>("warmup")) warm_up();
}

void CrossEncoderReplica::warm_up() const {
  warm_up_with([&](const PackedBatch& pass) { (void)model->score(pass).to(at::kCPU); });
}

}  // namespace flowline::models
