// The TorchModule executor: runs a TorchScript module on the documents' tensors on the executor's device.
#include "flowline/torch_module/torch_module.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>

namespace flowline::torch_module {
namespace {

// A loaded module; `call` is serialised only for modules not shared (shared ones are called concurrently,
// which TorchScript allows for modules that keep no state between calls).
struct LoadedModule {
  torch::jit::Module module;
};

std::shared_ptr<const LoadedModule> load_module(const std::string& path, c10::Device device, c10::ScalarType dtype) {
  if (!std::filesystem::is_regular_file(path)) throw Error(fmt::format("parameter 'path': no file '{}'", path));
  auto loaded = std::make_shared<LoadedModule>();
  try {
    loaded->module = torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw Error(fmt::format("parameter 'path': '{}' is not a TorchScript file that LibTorch can load: {}", path,
                            e.what_without_backtrace()));
  }
  loaded->module.eval();
  if (dtype != c10::kFloat) loaded->module.to(dtype);
  return loaded;
}

enum class Field { Tensor, Embedding };

// input / output: a declared choice, checked by validation.
Field parse_field(const std::string& name) { return name == "tensor" ? Field::Tensor : Field::Embedding; }

class TorchModule : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "TorchModule",
        "Run a TorchScript model on each document's tensor or embedding (LibTorch JIT)",
        {ParamSpec::required_param("path", ParamType::Path, "TorchScript file (torch.jit.save)"),
         ParamSpec::optional("method", ParamType::String, "forward", "the module's method to call"),
         ParamSpec::choice("input", {"tensor", "embedding"}, "tensor", "the field read"),
         ParamSpec::choice("output", {"embedding", "tensor"}, "embedding", "the field written"),
         ParamSpec::optional("device", ParamType::String, "",
                             "cpu, cuda, cuda:N or auto; empty: the executor's device in the flow"),
         ParamSpec::choice("dtype", {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}, "fp32",
                           "module and floating-point inputs; outputs are float32"),
         ParamSpec::optional("batch_size", ParamType::Int, 64, "rows per call").min(1),
         ParamSpec::optional("keep_on_device", ParamType::Bool, false,
                             "leave outputs on the executor's device (for a next executor on the same device)"),
         ParamSpec::optional("share_weights", ParamType::Bool, true,
                             "replicas on the same device share one loaded module (each on its own CUDA stream)")},
        {"/run"},
    };
  }

  explicit TorchModule(const ExecutorContext& context) : Executor(context) {
    const std::string path = params().get<std::string>("path");
    device_ = executor_device(params().get<std::string>("device"), runtime().device);
    dtype_ = parse_dtype(params().get<std::string>("dtype"));
    input_ = parse_field(params().get<std::string>("input"));
    output_ = parse_field(params().get<std::string>("output"));
    method_ = params().get<std::string>("method");
    batch_size_ = params().get<std::size_t>("batch_size");
    keep_on_device_ = params().get<bool>("keep_on_device");
    auto load = [&] { return load_module(path, device_, dtype_); };
    module_ =
        params().get<bool>("share_weights") ? shared_per_device<LoadedModule>(path, device_, dtype_, load) : load();
    if (!module_->module.find_method(method_)) {
      throw Error(fmt::format("parameter 'method': '{}' has no method '{}'", path, method_));
    }
    stream_ = replica_stream(device_);
    spdlog::info("executor '{}' replica {}: TorchScript {} on {} in {}", runtime().name, runtime().replica, path,
                 device_.str(), c10::toString(dtype_));
    bind("/run", &TorchModule::run);
    bind_default(&TorchModule::run);
  }

 private:
  at::Tensor& field(Document& doc, Field which) { return which == Field::Tensor ? doc.tensor : doc.embedding; }
  static const char* name(Field which) { return which == Field::Tensor ? "tensor" : "embedding"; }

  void run(DocumentArray& docs) {
    if (docs.empty()) return;
    c10::InferenceMode guard;
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    // Check every input first, so a bad document fails the batch before any work.
    const at::Tensor& first = field(docs[0], input_);
    for (auto& doc : docs) {
      const at::Tensor& t = field(doc, input_);
      if (!t.defined()) throw Error(fmt::format("document {} has no {}", doc.id, name(input_)));
      if (t.sizes() != first.sizes()) {
        throw Error(fmt::format("document {}: {} shape {} differs from the batch's first, {}", doc.id, name(input_),
                                fmt::join(t.sizes(), "x"), fmt::join(first.sizes(), "x")));
      }
    }
    const auto n = static_cast<int64_t>(docs.size());
    std::vector<at::Tensor> rows;
    rows.reserve(docs.size());
    for (auto& doc : docs) rows.push_back(field(doc, input_));
    at::Tensor stacked = at::stack(rows);  // on the inputs' device
    if (device_.is_cuda() && !stacked.is_cuda()) stacked = stacked.pin_memory();
    stacked = stacked.to(device_, /*non_blocking=*/true);
    if (stacked.is_floating_point() && stacked.scalar_type() != dtype_) stacked = stacked.to(dtype_);

    auto method = module_->module.get_method(method_);
    std::vector<at::Tensor> outputs;
    for (int64_t start = 0; start < n; start += static_cast<int64_t>(batch_size_)) {
      const int64_t count = std::min<int64_t>(static_cast<int64_t>(batch_size_), n - start);
      const c10::IValue result = method({stacked.narrow(0, start, count)});
      if (!result.isTensor()) {
        throw Error(fmt::format("method '{}' returned {}, expected a tensor", method_, result.tagKind()));
      }
      at::Tensor out = result.toTensor();
      if (out.dim() == 0 || out.size(0) != count) {
        throw Error(fmt::format("method '{}' returned shape [{}] for {} rows; expected {} rows first", method_,
                                fmt::join(out.sizes(), ", "), count, count));
      }
      outputs.push_back(out.is_floating_point() ? out.to(at::kFloat) : out);
    }
    at::Tensor all = outputs.size() == 1 ? outputs.front() : at::cat(outputs);
    if (!keep_on_device_ && stream_) {
      all = staging_.to_host(all, *stream_);
    } else if (stream_) {
      // Outputs left on the GPU are complete before the handler returns (executor.hpp).
      wait_for_stream(*stream_);
    }
    metrics().add("rows", static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) field(docs[static_cast<std::size_t>(i)], output_) = all[i];
  }

  c10::Device device_{c10::kCPU};
  c10::ScalarType dtype_ = c10::kFloat;
  Field input_ = Field::Tensor, output_ = Field::Embedding;
  std::string method_;
  std::size_t batch_size_ = 64;
  bool keep_on_device_ = false;
  std::shared_ptr<const LoadedModule> module_;
  std::optional<c10::Stream> stream_;
  HostStaging staging_{true};  // outputs coming back from the GPU
};

}  // namespace

void register_torch_module(Registry& registry) { registry.add<TorchModule>("flowline::torch_module"); }

}  // namespace flowline::torch_module
