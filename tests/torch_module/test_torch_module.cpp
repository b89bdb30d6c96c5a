// TorchModule: a TorchScript file (saved by scripts/make_torchscript_module.py) run on documents' tensors.
#include "test_support.hpp"

#include "flowline/device.hpp"
#include "flowline/flowline.hpp"
#include "flowline/torch_module/torch_module.hpp"

#include <ATen/ATen.h>

using namespace flowline;

namespace {
const std::string kAffine = (std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/torchscript/affine.pt").string();

Registry& module_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    torch_module::register_torch_module(*r);
    return r;
  }();
  return *registry;
}

// relu(x W^T + b) with the weights the script saves.
at::Tensor expected_affine(const at::Tensor& x) {
  const at::Tensor w = at::tensor({1.f, 2.f, 3.f, 4.f, 0.f, 1.f, 0.f, -1.f, -1.f, 0.f, 0.f, 0.f}).view({3, 4});
  const at::Tensor b = at::tensor({0.5f, -0.5f, 0.f});
  return at::relu(at::matmul(x, w.t()) + b);
}

DocumentArray tensor_docs(const at::Tensor& rows) {
  DocumentArray docs;
  for (int64_t i = 0; i < rows.size(0); ++i) {
    Document d;
    d.tensor = rows[i].clone();
    docs.push_back(std::move(d));
  }
  return docs;
}

DocumentArray run_module(boost::json::object with, DocumentArray docs, const std::string& device = "cpu",
                         int replicas = 1) {
  with["path"] = kAffine;
  Flow flow(FlowOptions{.request_size = 7}, module_registry());
  flow.add({.name = "model", .uses = "TorchModule", .with = std::move(with), .replicas = replicas, .device = device});
  return flow.post("/run", std::move(docs));
}
}  // namespace

TEST_CASE("TorchModule runs a TorchScript file on each document's tensor, in order, across chunks", "[torch_module]") {
  const at::Tensor x = at::randn({50, 4});
  const DocumentArray out = run_module({{"batch_size", 3}}, tensor_docs(x), "cpu", 2);
  REQUIRE(out.size() == 50);
  const at::Tensor got = out.embeddings();
  CHECK(got.sizes() == at::IntArrayRef({50, 3}));
  CHECK(got.device().is_cpu());
  CHECK(at::allclose(got, expected_affine(x), 1e-5, 1e-6));
}

TEST_CASE("TorchModule calls another method and writes the tensor field when asked", "[torch_module]") {
  const at::Tensor x = at::randn({5, 4});
  DocumentArray docs;
  for (int64_t i = 0; i < 5; ++i) {
    Document d;
    d.embedding = x[i].clone();
    docs.push_back(std::move(d));
  }
  const DocumentArray out =
      run_module({{"method", "scale"}, {"input", "embedding"}, {"output", "tensor"}}, std::move(docs));
  for (int64_t i = 0; i < 5; ++i) CHECK(at::allclose(out[static_cast<std::size_t>(i)].tensor, 2 * x[i]));
}

TEST_CASE("TorchModule names the document whose input is missing or has another shape", "[torch_module]") {
  DocumentArray docs = tensor_docs(at::randn({3, 4}));
  docs[2].tensor = at::randn({5});
  const std::string odd = docs[2].id;
  CHECK_THROWS_WITH(run_module({}, std::move(docs)),
                    testing::contains("document " + odd + ": tensor shape 5 differs from the batch's first, 4"));
  DocumentArray missing = tensor_docs(at::randn({2, 4}));
  missing[1].tensor = at::Tensor();
  const std::string id = missing[1].id;
  CHECK_THROWS_WITH(run_module({}, std::move(missing)), testing::contains("document " + id + " has no tensor"));
}

TEST_CASE("TorchModule rejects a missing file, a file that is not TorchScript and an unknown method",
          "[torch_module]") {
  auto start = [](boost::json::object with) {
    Flow flow(FlowOptions{}, module_registry());
    flow.add({.name = "model", .uses = "TorchModule", .with = std::move(with)});
    flow.start();
  };
  CHECK_THROWS_WITH(start({{"path", "/nonexistent/model.pt"}}),
                    testing::contains("parameter 'path': no file '/nonexistent/model.pt'"));
  const auto dir = testing::scratch_dir("torch module bad file");
  testing::write_text(dir / "model.pt", "not a zip archive");
  CHECK_THROWS_WITH(start({{"path", (dir / "model.pt").string()}}),
                    testing::contains("is not a TorchScript file that LibTorch can load"));
  CHECK_THROWS_WITH(start({{"path", kAffine}, {"method", "predict"}}), testing::contains("has no method 'predict'"));
}

TEST_CASE("TorchModule on the GPU in fp32 and fp16 matches the CPU result", "[torch_module][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const at::Tensor x = at::randn({300, 4});
  const at::Tensor fp32 = run_module({{"batch_size", 64}}, tensor_docs(x), "cuda", 2).embeddings();
  const at::Tensor fp16 = run_module({{"batch_size", 64}, {"dtype", "fp16"}}, tensor_docs(x), "cuda").embeddings();
  CHECK(fp32.device().is_cpu());
  CHECK(at::allclose(fp32, expected_affine(x), 1e-4, 1e-4));
  CHECK(at::allclose(fp16, expected_affine(x), 2e-2, 2e-2));
  const DocumentArray kept = run_module({{"keep_on_device", true}}, tensor_docs(x), "cuda");
  CHECK(kept[0].embedding.is_cuda());
}
