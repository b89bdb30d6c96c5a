// What the model tests share over the tiny checkpoints of tests/data/tiny-models (scripts/make_tiny_models.py):
// the folder, a checkpoint's token-id goldens (<name>.goldens.safetensors: ids, lengths, type ids, prompt length and
// the reference outputs), those ids encoded in batches, JSONL inputs, and cosines between rows. Header-only: each
// test binary that includes it gets its own copies.
#pragma once

#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace flowline::testing {

inline const std::filesystem::path kTinyModels = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";

struct TinyGoldens {
  std::vector<std::int32_t> ids, type_ids;
  std::vector<std::int64_t> lengths;
  at::Tensor expected;  // the reference outputs under `key`
  std::int64_t prompt_length = 0;
};

inline TinyGoldens read_tiny_goldens(const std::string& name, const char* key = "embeddings") {
  const models::SafetensorsFile file(kTinyModels / (name + ".goldens.safetensors"));
  TinyGoldens g;
  const at::Tensor ids = file.get("ids").contiguous(), lengths = file.get("lengths").contiguous();
  g.ids.assign(ids.data_ptr<std::int32_t>(), ids.data_ptr<std::int32_t>() + ids.numel());
  g.lengths.assign(lengths.data_ptr<std::int64_t>(), lengths.data_ptr<std::int64_t>() + lengths.numel());
  if (file.contains("type_ids")) {
    const at::Tensor t = file.get("type_ids").contiguous();
    g.type_ids.assign(t.data_ptr<std::int32_t>(), t.data_ptr<std::int32_t>() + t.numel());
  }
  if (file.contains("prompt_length")) g.prompt_length = file.get("prompt_length").item<std::int64_t>();
  g.expected = file.get(key).clone();
  return g;
}

// The golden sequences encoded by `model` on its device, in batches of `batch_size` sequences (their lengths
// mixed, so attention runs several groups), back on the CPU in the goldens' order.
inline at::Tensor encode_tiny_goldens(const models::EmbeddingModel& model, const TinyGoldens& g,
                                      std::size_t batch_size) {
  std::vector<at::Tensor> parts;
  std::size_t token = 0;
  for (std::size_t s = 0; s < g.lengths.size(); s += batch_size) {
    const std::size_t end = std::min(g.lengths.size(), s + batch_size);
    std::size_t tokens = 0;
    for (std::size_t i = s; i < end; ++i) tokens += static_cast<std::size_t>(g.lengths[i]);
    std::vector<std::int64_t> skips(end - s, g.prompt_length);
    models::PackedBatch batch{std::span(g.ids).subspan(token, tokens), std::span(g.lengths).subspan(s, end - s)};
    if (g.prompt_length) batch.pooling_skip = skips;
    parts.push_back(model.encode(batch).cpu());
    token += tokens;
  }
  return at::cat(parts);
}

inline at::Tensor row_cosines(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 * b64).sum(1) / (a64.norm(2, {1}) * b64.norm(2, {1})).clamp_min(1e-30);
}

inline double worst_cosine(const at::Tensor& a, const at::Tensor& b) { return row_cosines(a, b).min().item<double>(); }

// Each line of a JSONL file as an object (the tiny checkpoints' <name>.texts.jsonl inputs).
inline std::vector<boost::json::object> read_json_lines(const std::filesystem::path& file) {
  std::vector<boost::json::object> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(boost::json::parse(line).as_object());
  return lines;
}

}  // namespace flowline::testing
