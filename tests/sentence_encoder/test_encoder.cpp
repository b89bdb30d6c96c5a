// Tests of the SentenceEncoder executor over flowline::models: goldens, batching, auto sizes, GPU, CUDA graphs.
// A case about the encoder alone runs it through the harness (executor_runner.hpp, no Flow); the flow's
// start, its stats, replicas and out-of-memory splitting are tested through a Flow.
#include "executor_runner.hpp"
#include "test_support.hpp"

#include "flowline/device.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/sentence_encoder/sentence_encoder.hpp"
#include "flowline/models/tokenizer.hpp"
#include "flowline/vector_index/vector_index.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <fstream>

using namespace flowline;
using namespace flowline::sentence_encoder;
using flowline::models::SafetensorsFile;

namespace {
const std::filesystem::path kData = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data";
const std::filesystem::path kModel = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "models/all-MiniLM-L6-v2";

// The texts of a golden file that have text. Each golden set holds one "" as well, which
// sentence-transformers embeds; the SentenceEncoder passes a document without text through without an
// embedding instead (its contract: a tags-only /update must not overwrite a stored vector).
std::vector<std::string> read_texts(const std::filesystem::path& jsonl) {
  std::ifstream in(jsonl);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    std::string text(boost::json::parse(line).at("text").as_string());
    if (!text.empty()) out.push_back(std::move(text));
  }
  return out;
}

// The rows of a golden tensor that read_texts(jsonl) keeps.
at::Tensor golden_rows(const at::Tensor& goldens, const std::filesystem::path& jsonl) {
  std::ifstream in(jsonl);
  std::vector<std::int64_t> rows;
  std::string line;
  std::int64_t lines = 0;
  for (; std::getline(in, line); ++lines) {
    if (!boost::json::parse(line).at("text").as_string().empty()) rows.push_back(lines);
  }
  REQUIRE(goldens.size(0) == lines);
  return goldens.index_select(0, at::tensor(rows, at::kLong));
}

Registry& encoder_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    register_sentence_encoder(*r);
    vector_index::register_vector_index(*r);  // flows/index.yml and flows/search.yml end with an index
    return r;
  }();
  return *registry;
}

// A SentenceEncoder named "encoder" on `device`, alone: its `with:` checked as a flow checks it.
testing::ExecutorRunner encoder_alone(const std::filesystem::path& model, boost::json::object with = {},
                                      const std::string& device = "cpu") {
  with["model"] = model.string();
  return testing::ExecutorRunner(encoder_registry(), "SentenceEncoder", with,
                                 // resolved as a flow resolves it: "cuda" is cuda:0 (a device of index -1 fails)
                                 RuntimeInfo{.name = "encoder", .device = resolve_device(device)});
}

DocumentArray text_docs(const std::vector<std::string>& texts) {
  DocumentArray docs;
  for (const auto& t : texts) docs.push_back(Document(t));
  return docs;
}

// Encodes texts with one encoder (no Flow) and returns the embeddings in input order.
at::Tensor encode_alone(const std::filesystem::path& model, const std::vector<std::string>& texts,
                        boost::json::object with = {}, const std::string& device = "cpu") {
  return encoder_alone(model, std::move(with), device).post("/encode", text_docs(texts)).embeddings();
}

// Cosine similarity of each row pair.
at::Tensor row_cosines(const at::Tensor& a, const at::Tensor& b) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  return (a64 * b64).sum(1) / (a64.norm(2, {1}) * b64.norm(2, {1})).clamp_min(1e-30);
}

// Copies the tiny checkpoint and sets its pooling mode and whether it normalises.
std::filesystem::path tiny_variant(const std::string& name, const std::string& pooling, bool normalize) {
  const auto dir = testing::scratch_dir("tiny " + name);
  std::filesystem::copy(kData / "tiny-bert", dir, std::filesystem::copy_options::recursive);
  testing::write_text(dir / "1_Pooling/config.json",
                      "{\"embedding_dimension\": 32, \"pooling_mode\": \"" + pooling + "\"}");
  std::string modules =
      "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
      " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}";
  if (normalize)
    modules +=
        ", {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": "
        "\"sentence_transformers.models.Normalize\"}";
  testing::write_text(dir / "modules.json", modules + "]");
  return dir;
}
}  // namespace

TEST_CASE("tiny BERT embeddings equal sentence-transformers for mean, CLS and max pooling", "[encoder]") {
  const auto texts = read_texts(kData / "tiny-bert-goldens/texts.jsonl");
  const SafetensorsFile goldens(kData / "tiny-bert-goldens/embeddings.safetensors");
  for (const auto& [key, pooling, normalize] :
       {std::tuple{"mean_normalize", "mean", true}, std::tuple{"cls", "cls", false}, std::tuple{"max", "max", false}}) {
    INFO(key);
    const at::Tensor expected = golden_rows(goldens.get(key), kData / "tiny-bert-goldens/texts.jsonl");
    const at::Tensor got = encode_alone(tiny_variant(key, pooling, normalize), texts);
    REQUIRE(got.sizes() == expected.sizes());
    CHECK(row_cosines(got, expected).min().item<double>() >= 0.99999);
    CHECK((got - expected).abs().max().item<float>() < 1e-4f);
  }
}

TEST_CASE("a document without text passes the encoder untouched, and the others are encoded as alone", "[encoder]") {
  const std::vector<std::string> texts{"one", "two words", "three little words"};
  const at::Tensor alone = encode_alone(kData / "tiny-bert", texts);
  auto encoder = encoder_alone(kData / "tiny-bert");
  DocumentArray docs;
  docs.push_back(Document(texts[0]));
  Document tags_only(Document::WithId{"kept"});  // a tags-only /update, say
  tags_only.tags["book"] = "persuasion";
  tags_only.embedding = at::full({32}, 0.5f);
  docs.push_back(std::move(tags_only));
  docs.push_back(Document(texts[1]));
  docs.push_back(Document(""));
  docs.push_back(Document(texts[2]));
  const DocumentArray out = encoder.post("/encode", std::move(docs));
  REQUIRE(out.size() == 5);
  CHECK(out[1].id == "kept");
  CHECK(out[1].tags.at("book").as_string() == "persuasion");
  CHECK(at::equal(out[1].embedding, at::full({32}, 0.5f)));  // its own, not the embedding of ""
  CHECK_FALSE(out[3].embedding.defined());
  CHECK(at::allclose(out[0].embedding, alone[0], 1e-5, 1e-6));
  CHECK(at::allclose(out[2].embedding, alone[1], 1e-5, 1e-6));
  CHECK(at::allclose(out[4].embedding, alone[2], 1e-5, 1e-6));
}

TEST_CASE("all-MiniLM-L6-v2 on the CPU in fp32 matches sentence-transformers for every golden", "[encoder][model]") {
  REQUIRE(std::filesystem::exists(kModel / "model.safetensors"));
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  const at::Tensor expected = golden_rows(SafetensorsFile(kData / "goldens/embeddings.safetensors").get("embeddings"),
                                          kData / "goldens/embedding_texts.jsonl");
  REQUIRE(texts.size() == 521);
  const at::Tensor got = encode_alone(kModel, texts, {{"batch_size", 32}});
  const at::Tensor cos = row_cosines(got, expected);
  const double worst = cos.min().item<double>();
  INFO("worst cosine " << worst << " at text " << cos.argmin().item<int64_t>());
  CHECK(worst >= 0.99999);
}

TEST_CASE("the encoder keeps input order whatever the batch size and token budget", "[encoder]") {
  const auto texts = read_texts(kData / "tiny-bert-goldens/texts.jsonl");
  const auto model = kData / "tiny-bert";
  const at::Tensor reference = encode_alone(model, texts, {{"batch_size", 1}});
  for (int batch : {3, 16, 1000}) {
    CHECK(at::allclose(encode_alone(model, texts, {{"batch_size", batch}}), reference, 1e-5, 1e-6));
  }
  CHECK(at::allclose(encode_alone(model, texts, {{"max_batch_tokens", 100}}), reference, 1e-5, 1e-6));
}

TEST_CASE("unsupported model configs are rejected naming the file and key", "[encoder]") {
  const auto dir = tiny_variant("unsupported", "mean", true);
  auto config = boost::json::parse(read_file(dir / "config.json")).as_object();
  config["model_type"] = "gpt2";
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  CHECK_THROWS_WITH(models::Checkpoint::read(dir),
                    "'" + (dir / "config.json").string() +
                        "': model_type 'gpt2' is not supported (supported: bert, camembert, deberta-v2, distilbert, "
                        "modernbert, mpnet, qwen3, roberta, xlm-roberta)");
  CHECK_THROWS_WITH(models::Checkpoint::read(dir / "nowhere"), testing::contains("no such folder"));
  testing::write_text(dir / "1_Pooling/config.json", "{\"pooling_mode\": \"median\"}");
  config["model_type"] = "bert";
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  CHECK_THROWS_WITH(models::Checkpoint::read(dir), testing::contains("pooling_mode 'median' is not supported"));
}

TEST_CASE("every flow shipped in flows/ is valid", "[config][encoder]") {
  const std::map<std::string, std::string> env = {
      {"FLOWLINE_OUT_DIR", testing::scratch_dir("shipped flows").string()},
      {"FLOWLINE_MODEL_DIR", (std::filesystem::path(FLOWLINE_SOURCE_DIR) / "models").string()},
      {"FLOWLINE_MODEL", (kData / "tiny-bert").string()},
      {"FLOWLINE_DEVICE", "cpu"},
      {"FLOWLINE_DTYPE", "fp32"},
      {"FLOWLINE_BATCH_SIZE", "8"},
      {"FLOWLINE_MAX_BATCH_TOKENS", "0"},
      {"FLOWLINE_REQUEST_SIZE", "8"},
      {"FLOWLINE_REPLICAS", "1"},
      {"FLOWLINE_DELAY_MS", "0"},
      {"FLOWLINE_DELAY_REPLICA", "-1"}};
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "flows")) {
    if (entry.path().extension() != ".yml") continue;
    if (entry.path().filename() == "rerank.yml") continue;    // tests/reranker validates it with the Reranker
    if (entry.path().filename() == "classify.yml") continue;  // tests/sequence_classifier runs it
    if (entry.path().filename() == "ner.yml") continue;       // tests/token_classifier runs it
    if (entry.path().filename() == "index-pg.yml" || entry.path().filename() == "load-pg.yml")
      continue;  // tests/pgvector runs them (PgVectorWriter)
    if (entry.path().filename() == "clip.yml" || entry.path().filename().string().starts_with("images-"))
      continue;  // tests/clip_encoder runs them (ClipEncoder)
    INFO(entry.path().string());
    if (entry.path().filename() == "encode-multi.yml" && cuda_device_count() == 0) {
      // `devices: all` needs GPUs; without one the flow is refused with a clear message.
      CHECK_THROWS_WITH(load_flow_config(entry.path(), encoder_registry()),
                        testing::contains(testing::without_gpu("devices: all")));
    } else {
      CHECK_NOTHROW(load_flow_config(entry.path(), encoder_registry()));
    }
    ++checked;
  }
  CHECK(checked >= 3);
}

TEST_CASE("a bad encoder parameter fails the flow's start naming the parameter", "[encoder]") {
  Flow flow(FlowOptions{}, encoder_registry());
  flow.add({.name = "enc",
            .uses = "SentenceEncoder",
            .with = {{"model", (kData / "tiny-bert").string()}, {"dtype", "fp8"}}});
  CHECK_THROWS_WITH(flow.start(), testing::contains("parameter 'dtype': expected one of fp32, fp16, bf16, float32, "
                                                    "float16, bfloat16, got 'fp8'"));
}

TEST_CASE("the encoder reports its tokens and largest forward pass in the flow's stats", "[encoder][stats]") {
  const auto tokenizer = models::Tokenizer::from_folder(kData / "tiny-bert");
  std::vector<std::string> texts;
  std::size_t tokens = 0;
  for (int i = 0; i < 10; ++i) {
    texts.push_back(std::string(static_cast<std::size_t>(i + 1), 'a') + " b c");
    tokens += tokenizer->encode(texts.back(), 512).size();
  }
  Flow flow(FlowOptions{.request_size = 10}, encoder_registry());
  flow.add({.name = "encoder",
            .uses = "SentenceEncoder",
            .with = {{"model", (kData / "tiny-bert").string()}, {"batch_size", 4}}});
  DocumentArray docs;
  for (const auto& t : texts) docs.push_back(Document(t));
  flow.post("/encode", std::move(docs));
  const auto metrics = flow.stats().replicas.at(0).metrics;
  CHECK(metrics.at("tokens") == static_cast<double>(tokens));
  CHECK(metrics.at("forward_passes") == 3);
  CHECK(metrics.at("max_forward_sequences") == 4);
  CHECK(metrics.at("max_forward_tokens") > 0);
}

TEST_CASE("batch sizes 'auto' keep the defaults on the CPU, and a size that is neither is a config error",
          "[encoder]") {
  const auto texts = std::vector<std::string>{"one", "two words", "three little words"};
  const at::Tensor fixed = encode_alone(kData / "tiny-bert", texts);
  const at::Tensor automatic =
      encode_alone(kData / "tiny-bert", texts, {{"batch_size", "auto"}, {"max_batch_tokens", "auto"}});
  CHECK(at::allclose(fixed, automatic));
  const std::string yaml =
      "executors:\n  - name: enc\n    uses: SentenceEncoder\n    with:\n      model: m\n      batch_size: many\n";
  CHECK_THROWS_WITH(
      load_flow_config_text(yaml, "flow.yml", encoder_registry()),
      testing::contains(
          "flow.yml:6:7: executor 'enc': parameter 'batch_size': expected int or auto, got string \"many\""));
}

TEST_CASE("on the GPU batch_size auto calibrates against free memory and NVML agrees with the accounting",
          "[encoder][gpu][stats]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  Flow flow(FlowOptions{.request_size = 512}, encoder_registry());
  flow.add({.name = "encoder",
            .uses = "SentenceEncoder",
            .with = {{"model", kModel.string()}, {"dtype", "fp16"}, {"batch_size", "auto"}, {"memory_fraction", 0.5}},
            .device = "cuda"});
  DocumentArray docs;
  for (const auto& t : texts) docs.push_back(Document(t));
  const DocumentArray out = flow.post("/encode", std::move(docs));
  REQUIRE(out.size() == texts.size());
  const FlowStats stats = flow.stats();
  const auto& metrics = stats.replicas.at(0).metrics;
  WARN("auto: batch_size " << metrics.at("batch_size") << ", " << metrics.at("calibrated_bytes_per_token")
                           << " bytes per token");
  CHECK(metrics.at("batch_size") > 64);
  CHECK(metrics.at("calibrated_bytes_per_token") > 1000);
  CHECK(metrics.at("calibrated_bytes_per_token") < 100000);
  REQUIRE(stats.devices.size() == 1);
  const DeviceStats& d = stats.devices[0];
  REQUIRE(d.has_nvml);
  const double accounted = static_cast<double>(d.accounted_peak_bytes()),
               nvml = static_cast<double>(d.nvml_peak_used_bytes);
  WARN("NVML peak " << nvml / (1 << 20) << " MiB, accounted " << accounted / (1 << 20) << " MiB, outside the allocator "
                    << d.outside_allocator_bytes() / (1 << 20) << " MiB");
  // NVML counts every process on the GPU (ctest runs other GPU tests beside this one), so agreement within
  // 5% is checked where the GPU is not shared: bench/stats_vs_nvml.py and `flowline profile`.
  CHECK(d.nvml_total_bytes > 0);
  CHECK(d.outside_allocator_bytes() > 0);
  CHECK(d.nvml_peak_used_bytes >= d.nvml_used_after_load_bytes);
  CHECK(d.startup_peak_allocated_bytes >= d.load_bytes);
}

TEST_CASE("replicas on one GPU take one calibration's batch size, warm up together and encode as one replica does",
          "[encoder][model][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  const at::Tensor alone = encode_alone(kModel, texts, {{"dtype", "fp16"}, {"batch_size", 64}}, "cuda");
  Flow flow(FlowOptions{.request_size = 100}, encoder_registry());
  flow.add({.name = "encoder",
            .uses = "SentenceEncoder",
            .with = {{"model", kModel.string()}, {"dtype", "fp16"}, {"batch_size", "auto"}, {"memory_fraction", 0.5}},
            .replicas = 4,
            .device = "cuda"});
  DocumentArray docs;
  for (const auto& t : texts) docs.push_back(Document(t));
  const at::Tensor together = flow.post("/encode", std::move(docs)).embeddings();
  const FlowStats stats = flow.stats();
  REQUIRE(stats.replicas.size() == 4);
  const double batch_size = stats.replicas[0].metrics.at("batch_size");
  CHECK(batch_size > 64);
  for (const auto& r : stats.replicas) {
    CHECK(r.metrics.at("batch_size") == batch_size);  // one budget for the four, measured once
    CHECK(r.metrics.at("calibrated_bytes_per_token") == stats.replicas[0].metrics.at("calibrated_bytes_per_token"));
  }
  CHECK(row_cosines(together, alone).min().item<double>() >= 0.9999);
}

TEST_CASE("all-MiniLM-L6-v2 on the GPU in fp16 and bf16 stays within the cosine bounds", "[encoder][model][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  const at::Tensor expected = golden_rows(SafetensorsFile(kData / "goldens/embeddings.safetensors").get("embeddings"),
                                          kData / "goldens/embedding_texts.jsonl");
  for (const auto& [dtype, bound] : {std::pair{"fp32", 0.99999}, std::pair{"fp16", 0.999}, std::pair{"bf16", 0.995}}) {
    const at::Tensor got = encode_alone(kModel, texts, {{"dtype", dtype}, {"batch_size", 128}}, "cuda");
    const double worst = row_cosines(got, expected).min().item<double>();
    WARN("GPU " << dtype << ": worst cosine " << worst << " over " << texts.size() << " texts");
    CHECK(worst >= bound);
  }
}

TEST_CASE("on the GPU an out-of-memory batch is split and every document comes back", "[encoder][gpu][oom]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  // Cap this process's share of the GPU at 1 GiB: one forward pass over the whole batch (2,048 sequences
  // of 256 tokens, about 1.5 GiB for one fp16 feed-forward activation) cannot fit.
  const c10::Device gpu(c10::kCUDA, 0);
  REQUIRE(device_memory(gpu).has_value());  // initialises CUDA and its allocator
  const auto free_total = device_free_total(gpu);
  REQUIRE(free_total.has_value());
  release_cached_memory();
  limit_device_memory(gpu, double(1ull << 30) / double(free_total->second));
  std::string text;
  for (int i = 0; i < 300; ++i) text += "word ";
  Flow flow(FlowOptions{.request_size = 2048}, encoder_registry());
  flow.add({.name = "encoder",
            .uses = "SentenceEncoder",
            .with = {{"model", kModel.string()}, {"dtype", "fp16"}, {"batch_size", 2048}, {"warmup", false}},
            .device = "cuda"});
  DocumentArray docs;
  for (int i = 0; i < 2048; ++i) docs.push_back(Document(text));
  const DocumentArray out = flow.post("/encode", std::move(docs));
  limit_device_memory(gpu, 1.0);
  REQUIRE(out.size() == 2048);
  const at::Tensor e = out.embeddings();
  CHECK(row_cosines(e, e[0].expand_as(e)).min().item<double>() >= 0.999);
}

TEST_CASE("CUDA graph buckets pad a pass by at most an eighth and grow monotonically", "[encoder][graphs]") {
  CHECK(models::GraphedEmbeddingModel::bucket(1) == 256);
  CHECK(models::GraphedEmbeddingModel::bucket(256) == 256);
  CHECK(models::GraphedEmbeddingModel::bucket(257) == 288);
  CHECK(models::GraphedEmbeddingModel::bucket(1000) == 1024);
  CHECK(models::GraphedEmbeddingModel::bucket(1025) == 1152);
  std::int64_t previous = 0;
  for (std::int64_t tokens = 1; tokens <= 200000; ++tokens) {
    const std::int64_t b = models::GraphedEmbeddingModel::bucket(tokens);
    REQUIRE(b >= tokens);
    REQUIRE(b >= previous);
    if (tokens > 256) REQUIRE(static_cast<double>(b - tokens) <= tokens / 8.0);
    previous = b;
  }
}

TEST_CASE("CUDA graphs refuse an encoder without packed attention, naming what they need", "[encoder][graphs]") {
  const auto encoder =
      std::make_shared<const models::EmbeddingModel>(kData / "tiny-bert", c10::Device(c10::kCPU), c10::kFloat);
  CHECK_FALSE(encoder->graphable());
  CHECK_THROWS_WITH(models::GraphedEmbeddingModel(encoder, 64, 4096, 128),
                    "CUDA graphs need a model whose attention runs over packed tokens in one kernel (a GPU in fp16 "
                    "or bf16; not cpu in Float)");
}

TEST_CASE("on the CPU cuda_graphs and keep_on_device change nothing", "[encoder]") {
  const auto model = tiny_variant("cpu knobs", "mean", true);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i)
    texts.push_back(std::string(static_cast<std::size_t>(i % 9 + 1), 'a') + " words " + std::to_string(i));
  const at::Tensor reference = encode_alone(model, texts, {{"cuda_graphs", false}});
  const at::Tensor got = encode_alone(model, texts, {{"cuda_graphs", true}, {"keep_on_device", true}});
  CHECK(got.device().is_cpu());
  CHECK(at::equal(got, reference));
}

TEST_CASE("tokenizing a request on several threads gives the embeddings of one thread", "[encoder]") {
  const auto model = tiny_variant("tokenizer threads", "mean", true);
  std::vector<std::string> texts;
  for (int i = 0; i < 1100; ++i)
    texts.push_back(fmt::format("text {} has {} words", i, std::string(static_cast<std::size_t>(i % 13 + 1), 'w')));
  auto encode = [&](int threads) {
    Flow flow(FlowOptions{.request_size = 1100}, encoder_registry());
    flow.add({.name = "encoder",
              .uses = "SentenceEncoder",
              .with = {{"model", model.string()}, {"batch_size", 128}, {"tokenizer_threads", threads}}});
    DocumentArray docs;
    for (const auto& t : texts) docs.push_back(Document(t));
    DocumentArray out = flow.post("/encode", std::move(docs));
    CHECK(flow.stats().replicas.at(0).metrics.at("tokens") > 1100 * 4);
    return out.embeddings();
  };
  const at::Tensor one = encode(1);
  CHECK(at::equal(encode(4), one));  // 1,100 texts: four chunks, tokenized in parallel and joined in order
}

TEST_CASE("on the GPU CUDA graphs give the eager passes' embeddings and count their passes",
          "[encoder][model][gpu][graphs]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  const auto tokenizer = models::Tokenizer::from_folder(kModel);
  std::size_t expected_tokens = 0;
  for (const auto& t : texts) expected_tokens += tokenizer->encode(t, 256).size();
  for (const auto& [dtype, bound] : {std::pair{"fp16", 0.99999}, std::pair{"bf16", 0.9999}}) {
    const at::Tensor eager =
        encode_alone(kModel, texts, {{"dtype", dtype}, {"batch_size", 64}, {"cuda_graphs", false}}, "cuda");
    Flow flow(FlowOptions{.request_size = 200}, encoder_registry());
    // Two replicas, each with its own graphs for passes of up to 2,048 tokens, sharing the weights.
    flow.add(
        {.name = "encoder",
         .uses = "SentenceEncoder",
         .with = {{"model", kModel.string()}, {"dtype", dtype}, {"batch_size", 64}, {"cuda_graph_max_tokens", 2048}},
         .replicas = 2,
         .device = "cuda"});
    DocumentArray docs;
    for (const auto& t : texts) docs.push_back(Document(t));
    const at::Tensor graphed = flow.post("/encode", std::move(docs)).embeddings();
    double graph_passes = 0, passes = 0, graphs = 0, tokens = 0;
    for (const auto& r : flow.stats().replicas) {
      tokens += r.metrics.at("tokens");
      graph_passes += r.metrics.at("graph_passes");
      passes += r.metrics.at("forward_passes");
      graphs = r.metrics.at("cuda_graphs");
    }
    const double worst = row_cosines(graphed, eager).min().item<double>();
    WARN("GPU " << dtype << ": graphs against eager, worst cosine " << worst << "; " << graph_passes << " of " << passes
                << " passes from " << graphs << " graphs per replica");
    CHECK(worst >= bound);
    CHECK(graph_passes > 0);
    CHECK(graph_passes < passes);  // the longest paragraphs make passes over 2,048 tokens, which run eagerly
    CHECK(graphs == 25);           // buckets 256, then eight per power of two up to 2,048
    CHECK(tokens == static_cast<double>(expected_tokens));  // the warm-up request is not counted
  }
}

TEST_CASE("keep_on_device leaves the encoder's embeddings on its GPU, equal to the copies on the host",
          "[encoder][model][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  const auto texts = read_texts(kData / "goldens/embedding_texts.jsonl");
  const at::Tensor on_host = encode_alone(kModel, texts, {{"dtype", "fp16"}}, "cuda");
  const at::Tensor on_gpu = encode_alone(kModel, texts, {{"dtype", "fp16"}, {"keep_on_device", true}}, "cuda");
  CHECK(on_host.device().is_cpu());
  REQUIRE(on_gpu.device() == c10::Device(c10::kCUDA, 0));
  CHECK(at::equal(on_gpu.cpu(), on_host));
}

TEST_CASE("an XLM-RoBERTa checkpoint with a sentencepiece tokenizer.json encodes texts as sentence-transformers does",
          "[encoder][tokenizers]") {
  // Unigram, Precompiled (nmt_nfkc), Metaspace and <mask> with lstrip, end to end: texts in, embeddings out,
  // some truncated at max_seq_length 128 (scripts/make_tiny_models.py --only xlm-roberta-unigram).
  const auto tiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
  const auto texts = read_texts(tiny / "xlm-roberta-unigram.texts.jsonl");
  const SafetensorsFile expected(tiny / "xlm-roberta-unigram.texts.safetensors");
  const at::Tensor got = encode_alone(tiny / "xlm-roberta-unigram", texts);
  REQUIRE(got.size(0) == static_cast<int64_t>(texts.size()));
  CHECK(row_cosines(got, golden_rows(expected.get("embeddings"), tiny / "xlm-roberta-unigram.texts.jsonl"))
            .min()
            .item<double>() >= 0.99999);
}

TEST_CASE("a Qwen3-Embedding-shaped checkpoint encodes texts as sentence-transformers does, query prompt included",
          "[encoder][tokenizers][qwen3]") {
  // Byte-level BPE with Qwen2's Split pattern, <|endoftext|> appended, last-token pooling, the query prompt
  // by name (scripts/make_tiny_models.py --only qwen3); the executor's batches, not the goldens' one.
  const auto tiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
  const auto texts = read_texts(tiny / "qwen3.texts.jsonl");
  const SafetensorsFile expected(tiny / "qwen3.texts.safetensors");
  for (const auto& [prompt_name, key] : {std::pair{"", "embeddings"}, std::pair{"query", "query"}}) {
    INFO("prompt_name " << prompt_name);
    boost::json::object with{{"batch_size", 8}};
    if (*prompt_name) with["prompt_name"] = prompt_name;
    const at::Tensor got = encode_alone(tiny / "qwen3", texts, with);
    REQUIRE(got.size(0) == static_cast<int64_t>(texts.size()));
    CHECK(row_cosines(got, golden_rows(expected.get(key), tiny / "qwen3.texts.jsonl")).min().item<double>() >= 0.99999);
  }
}

TEST_CASE("prompts are put before the texts as sentence-transformers does, per executor and per request",
          "[encoder][prompts]") {
  // The checkpoint's Pooling leaves prompts out (include_prompt: false), so the prompt changes which tokens
  // are pooled as well as the token states.
  const auto tiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
  const auto texts = read_texts(tiny / "bert-prompt-excluded.prompted.jsonl");
  const SafetensorsFile expected(tiny / "bert-prompt-excluded.prompted.safetensors");
  auto encode = [&](boost::json::object with, boost::json::object parameters) {
    return encoder_alone(tiny / "bert-prompt-excluded", std::move(with))
        .post("/encode", text_docs(texts), parameters)
        .embeddings();
  };
  CHECK(row_cosines(encode({}, {}), expected.get("none")).min().item<double>() >= 0.99999);
  CHECK(row_cosines(encode({}, {{"prompt_name", "query"}}), expected.get("query")).min().item<double>() >= 0.99999);
  CHECK(row_cosines(encode({{"prompt_name", "passage"}}, {}), expected.get("passage")).min().item<double>() >= 0.99999);
  // A request's literal prompt overrides the executor's prompt name.
  CHECK(row_cosines(encode({{"prompt_name", "passage"}}, {{"prompt", "query: "}}), expected.get("query"))
            .min()
            .item<double>() >= 0.99999);
  CHECK_THROWS_WITH(encode({{"prompt_name", "question"}}, {}),
                    testing::contains("prompt_name 'question': the model '" + (tiny / "bert-prompt-excluded").string() +
                                      "' has the prompts document, passage, query"));
}

TEST_CASE("a request's dimensions keeps the first N values normalised again; more than the model has is refused",
          "[encoder][params]") {
  auto encoder = encoder_alone(kData / "tiny-bert");
  const auto post = [&](boost::json::object parameters) {
    DocumentArray docs;
    for (const char* t : {"Alice was beginning to get very tired", "of sitting by her sister on the bank", "x"}) {
      docs.push_back(Document(t));
    }
    return encoder.post("/encode", std::move(docs), parameters).embeddings();
  };
  const at::Tensor full = post({}).to(at::kDouble);
  const at::Tensor eight = post({{"dimensions", 8.0}}).to(at::kDouble);  // Jina's clients send numbers as doubles
  REQUIRE(eight.size(1) == 8);
  const at::Tensor kept = full.narrow(1, 0, 8);
  const at::Tensor expected = kept / kept.norm(2, {1}, true);
  CHECK((eight - expected).abs().max().item<double>() < 1e-6);
  CHECK(post({{"dimensions", full.size(1)}}).size(1) == full.size(1));
  // The request's own error (RequestError: 422 at a gateway), not the executor's.
  CHECK_THROWS_AS(encoder.post("/encode", text_docs({"a"}), {{"dimensions", 1000}}), RequestError);
  CHECK_THROWS_WITH(encoder.post("/encode", text_docs({"a"}), {{"dimensions", 1000}}),
                    testing::contains(fmt::format(
                        "parameter 'dimensions': 1000 is more than the model's embeddings have ({})", full.size(1))));
  CHECK_THROWS_WITH(post({{"dimensions", 2.5}}), testing::contains("parameter 'dimensions': expected an integer"));
}

TEST_CASE("normalize: false on a checkpoint that normalizes fails the start; true normalizes one that does not",
          "[encoder]") {
  // Checked once, when the executor is made, not on every request.
  CHECK_THROWS_WITH(encoder_alone(tiny_variant("normalizing", "mean", true), {{"normalize", false}}),
                    testing::contains("parameter 'normalize': false cannot undo the Normalize module"));
  const std::vector<std::string> texts{"a short text", "another text that is a little longer than the first one"};
  const auto plain = tiny_variant("not normalizing", "mean", false);
  const at::Tensor raw = encode_alone(plain, texts);
  const at::Tensor normalized = encode_alone(plain, texts, {{"normalize", true}});
  CHECK((raw.norm(2, {1}) - 1).abs().max().item<double>() > 1e-3);
  CHECK((normalized - raw / raw.norm(2, {1}, true)).abs().max().item<double>() < 1e-6);
}

TEST_CASE("tokenizer_config.json's truncation_side left makes the encoder keep each text's last tokens",
          "[encoder][tokenizer_config]") {
  // A Qwen3-shaped checkpoint (last-token pooling; its template appends <|endoftext|> after truncation).
  const auto tiny = kData / "tiny-models/qwen3";
  const auto dir = testing::scratch_dir("encoder truncation left");
  std::filesystem::remove_all(dir);
  std::filesystem::copy(tiny, dir, std::filesystem::copy_options::recursive);
  auto config = boost::json::parse(testing::read_text(dir / "tokenizer_config.json")).as_object();
  config["truncation_side"] = "left";
  testing::write_text(dir / "tokenizer_config.json", boost::json::serialize(config));
  const std::vector<std::string> texts{"Alice was beginning to get very tired of sitting by her sister on the bank",
                                       "and of having nothing to do", "once or twice she had peeped into the book"};
  const std::size_t max_length = 8;
  const at::Tensor got = encode_alone(dir, texts, {{"max_seq_length", max_length}});
  // The expectation from flowline itself: each text's full ids cut to their last max_length, as tokenizers
  // truncates from the left before the template's closing token.
  const auto tokenizer = models::Tokenizer::from_folder(tiny);
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  for (const auto& text : texts) {
    const auto full = tokenizer->encode(text);
    const std::size_t n = std::min(full.size(), max_length);
    ids.insert(ids.end(), full.end() - static_cast<std::ptrdiff_t>(n), full.end());
    lengths.push_back(static_cast<std::int64_t>(n));
  }
  const models::EmbeddingModel model(tiny, c10::Device(c10::kCPU), c10::kFloat);
  const at::Tensor expected = model.encode(models::PackedBatch{ids, lengths});
  CHECK((got - expected).abs().max().item<double>() < 1e-6);
  // Truncated at the end instead (the default), the first text's embedding differs.
  const at::Tensor right = encode_alone(tiny, texts, {{"max_seq_length", max_length}});
  CHECK((right[0] - expected[0]).abs().max().item<double>() > 1e-4);
  std::filesystem::remove_all(dir);
}
