// Per-document outputs (issue 50 §4, flowline/models/outputs.hpp): a NaN or an infinity is found in the rows
// of the documents it belongs to and named, never returned as a number; L2 normalization gives the unit
// vector of a float32 vector whose squared norm overflows.
#include "test_support.hpp"

#include "flowline/device.hpp"
#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/outputs.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

using namespace flowline;
using namespace flowline::models;

namespace {

const std::filesystem::path kTiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows padded with zeros to the longest (zeros change no norm).
at::Tensor rows_of(std::vector<std::vector<float>> rows) {
  std::size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<at::Tensor> parts;
  for (auto& r : rows) {
    r.resize(width, 0.0f);
    parts.push_back(at::tensor(r, at::kFloat));
  }
  return at::stack(parts);
}

// A copy of tiny checkpoint `name` whose word embedding of `token` is `value` everywhere.
std::filesystem::path with_token_embedding(const std::string& name, std::int64_t token, float value) {
  const auto dir = testing::scratch_dir("non-finite " + name);
  std::filesystem::copy(kTiny / name, dir, std::filesystem::copy_options::recursive);
  const SafetensorsFile file(dir / "model.safetensors");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& n : file.names()) tensors[n] = file.get(n).clone();
  bool found = false;
  for (auto& [n, t] : tensors) {
    if (n.find("word_embeddings.weight") == std::string::npos && n.find("tok_embeddings.weight") == std::string::npos)
      continue;
    t[token].fill_(value);
    found = true;
  }
  REQUIRE(found);
  save_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

// Within a relative `tolerance` of `want` (Catch2 v2 and v3 spell Approx differently).
bool close(double got, double want, double tolerance) { return std::abs(got - want) <= tolerance * std::abs(want); }

}  // namespace

TEST_CASE("normalize_rows gives the unit vector of a finite float32 vector whose squared norm overflows",
          "[models][outputs]") {
  const at::Tensor x = rows_of({std::vector<float>(8, 3e38f),
                                {1e20f, 0.0f, -1e20f},
                                {0.0f, 0.0f, 0.0f},
                                {3.0f, 4.0f, 0.0f},
                                {1e-30f, 1e-30f, 0.0f},
                                {-2e-45f, 0.0f, 0.0f}});
  // The old way overflows: [3e38] x 8 has norm inf in float32, so it became a zero vector.
  CHECK(at::isinf(x.narrow(0, 0, 1).norm(2, {1})).item<bool>());
  const at::Tensor y = normalize_rows(x);
  CHECK(nonfinite_rows(y).empty());
  CHECK((y[0] - 1.0 / std::sqrt(8.0)).abs().max().item<double>() < 1e-6);
  CHECK(close(y[1][0].item<double>(), 1.0 / std::sqrt(2.0), 1e-6));
  CHECK(y[1][1].item<double>() == 0.0);
  CHECK(close(y[1][2].item<double>(), -1.0 / std::sqrt(2.0), 1e-6));
  CHECK(y[2].abs().max().item<double>() == 0.0);  // a zero vector stays zero
  CHECK(close(y[3][0].item<double>(), 0.6, 1e-6));
  CHECK(close(y[3][1].item<double>(), 0.8, 1e-6));
  // Below the 1e-12 floor, divided by it, as torch.nn.functional.normalize (sentence-transformers) does.
  CHECK(close(y[4][0].item<double>(), 1e-18, 1e-5));
  CHECK(close(y[5][0].item<double>(), -2e-45 / 1e-12, 0.3));  // a subnormal, no NaN
}

TEST_CASE("normalize_rows equals x / |x| computed in double on ordinary vectors", "[models][outputs]") {
  const at::Tensor x = at::randn({64, 384}, at::TensorOptions().dtype(at::kFloat)) * 3.0;
  const at::Tensor x64 = x.to(at::kDouble);
  const at::Tensor want = x64 / x64.norm(2, {1}, true);
  CHECK((normalize_rows(x).to(at::kDouble) - want).abs().max().item<double>() < 1e-7);
}

TEST_CASE("a row holding NaN or infinity stays non-finite through normalize_rows and is named by its position",
          "[models][outputs]") {
  const at::Tensor x = rows_of({{1.0f, 2.0f}, {kNaN, 1.0f}, {3.0f, 4.0f}, {kInf, 1.0f}, {-kInf, -kInf}, {0.0f, 0.0f}});
  CHECK(nonfinite_rows(x) == std::vector<std::size_t>{1, 3, 4});
  CHECK(nonfinite_rows(normalize_rows(x)) == std::vector<std::size_t>{1, 3, 4});
  // Scores: one per document, or [n, labels].
  CHECK(nonfinite_rows(at::tensor(std::vector<float>{0.5f, kNaN, 0.1f, kInf})) == std::vector<std::size_t>{1, 3});
  CHECK(nonfinite_rows(rows_of({{0.1f, 0.2f}, {0.3f, kNaN}})) == std::vector<std::size_t>{1});
  CHECK(nonfinite_rows(at::empty({0, 4})).empty());
  const std::vector<float> host{0.5f, kNaN, 0.1f, -kInf, 1e38f};
  CHECK(nonfinite_rows(std::span<const float>(host)) == std::vector<std::size_t>{1, 3});
  CHECK_NOTHROW(check_finite(rows_of({{1.0f}, {2.0f}}), "score"));
  try {
    check_finite(x, "embedding");
    FAIL("check_finite accepted NaN and infinity");
  } catch (const NonFiniteOutput& e) {
    CHECK(e.rows() == std::vector<std::size_t>{1, 3, 4});
    CHECK_THAT(std::string(e.what()),
               testing::starts_with("documents 1, 3, 4 of 6: their embeddings hold NaN or infinity ("));
  }
  CHECK_THROWS_WITH(check_finite(at::tensor(std::vector<float>{0.5f, kNaN}), "score"),
                    testing::starts_with("document 1 of 2: its score holds NaN or infinity ("));
  std::vector<float> many(25, kNaN);
  CHECK_THROWS_WITH(check_finite(at::tensor(many), "score"),
                    testing::starts_with("documents 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 15 more of 25: "));
}

TEST_CASE(
    "FiniteCheck names the rows holding NaN or infinity after the wait, as check_finite does, on the host and a GPU",
    "[models][outputs][gpu]") {
  const at::Tensor x = rows_of({{1.0f, 2.0f}, {kNaN, 1.0f}, {3.0f, 4.0f}, {kInf, 1.0f}, {-kInf, -kInf}, {0.0f, 0.0f}});
  std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
  if (cuda_device_count() > 0) devices.emplace_back(c10::kCUDA, 0);
  for (const c10::Device& device : devices) {
    INFO(device.str());
    const FiniteCheck bad(x.to(device));
    if (device.is_cuda()) wait_for_stream(c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device));
    try {
      bad.check("embedding");
      FAIL("FiniteCheck accepted NaN and infinity");
    } catch (const NonFiniteOutput& e) {
      CHECK(e.rows() == std::vector<std::size_t>{1, 3, 4});
      CHECK_THAT(std::string(e.what()),
                 testing::starts_with("documents 1, 3, 4 of 6: their embeddings hold NaN or infinity ("));
    }
    const FiniteCheck fine(rows_of({{1.0f}, {2.0f}}).to(device));
    if (device.is_cuda()) wait_for_stream(c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStream(device));
    CHECK_NOTHROW(fine.check("score"));
    CHECK_NOTHROW(FiniteCheck(at::empty({0, 4}, at::TensorOptions().device(device))).check("embedding"));
  }
}

TEST_CASE("a token whose weights are NaN makes only the documents holding it non-finite, through Normalize",
          "[models][outputs]") {
  // xlm-roberta: mean pooling then Normalize; distilbert: CLS pooling, no Normalize. Packed sequences share
  // no padding or softmax with each other, so the NaN stays in its documents.
  const auto name = GENERATE(as<std::string>{}, "xlm-roberta", "distilbert");
  INFO(name);
  const auto dir = with_token_embedding(name, 77, kNaN);
  const EmbeddingModel model(dir, c10::Device(c10::kCPU), c10::kFloat);
  const std::vector<std::int32_t> ids{0, 10, 11, 2, 0, 77, 12, 2, 0, 13, 2, 0, 14, 77, 15, 16, 2, 0, 2};
  const std::vector<std::int64_t> lengths{4, 4, 3, 6, 2};
  const at::Tensor embeddings = model.encode(PackedBatch{ids, lengths});
  CHECK(nonfinite_rows(embeddings) == std::vector<std::size_t>{1, 3});
  CHECK_THROWS_AS(check_finite(embeddings, "embedding"), NonFiniteOutput);
  // The same documents alone, without the bad ones: finite, and the same numbers.
  const EmbeddingModel clean(kTiny / name, c10::Device(c10::kCPU), c10::kFloat);
  const at::Tensor reference = clean.encode(PackedBatch{ids, lengths});
  for (const std::int64_t row : {0, 2, 4}) {
    CHECK((embeddings[row] - reference[row]).abs().max().item<double>() < 1e-6);
  }
}

TEST_CASE("a cross-encoder's non-finite score is found in its pair's row", "[models][outputs]") {
  const auto dir = with_token_embedding("bert-cross-encoder", 77, kInf);
  const CrossEncoderModel model(Checkpoint::read(dir), c10::Device(c10::kCPU), c10::kFloat);
  const std::vector<std::int32_t> ids{2, 10, 3, 11, 3, 2, 77, 3, 12, 3, 2, 13, 3, 14, 3};
  const std::vector<std::int64_t> lengths{5, 5, 5};
  const at::Tensor scores = model.score(PackedBatch{ids, lengths}, /*raw=*/true);
  CHECK(nonfinite_rows(scores) == std::vector<std::size_t>{1});
  CHECK_THROWS_WITH(check_finite(scores, "score"), testing::starts_with("document 1 of 3: its score holds NaN"));
}

TEST_CASE("to_device_queued returns while the stream is still busy, and the copy holds what the host had at the call",
          "[models][gpu]") {
  const at::Tensor host = at::arange(4096, at::kLong);
  CHECK(at::equal(to_device_queued(host, c10::Device(c10::kCPU)), host));
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const c10::Device gpu(c10::kCUDA, 0);
  const auto stream = replica_stream(gpu);
  c10::StreamGuard on_stream(*stream);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().dtype(at::kHalf).device(gpu));
  for (int k = 0; k < 64; ++k) (void)at::mm(a, a);  // some tens of milliseconds of work queued
  at::Tensor changing = host.clone();
  const at::Tensor on_gpu = to_device_queued(changing, gpu);
  // A plain .to(gpu) from ordinary memory would have waited for the matrix products; this call only queued.
  CHECK_FALSE(stream->query());
  changing.fill_(-1);  // the copy was taken from a pinned copy of the values at the call
  CHECK(at::equal(on_gpu.cpu(), host));
  CHECK(stream->query());
}
