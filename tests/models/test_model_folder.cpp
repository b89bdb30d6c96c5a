// Tests of a model folder as untrusted input (issue 50 §3): files that are not regular or too large, config
// values out of range or at odds with the weights, modules.json's order and paths, tokenizer.json integers,
// weights of the wrong dtype — each refused at validation, naming the file and the key, never a hang, a
// crash or a model that runs other than sentence-transformers would. Bad folders are made from the tiny
// checkpoints; the launcher runs as a child process where the issue saw it hang or crash.
#include "child_process.hpp"
#include "test_support.hpp"

#include "flowline/error.hpp"
#include "flowline/models/checkpoint.hpp"
#include "flowline/models/embedding_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <future>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace flowline;
using namespace flowline::models;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

const fs::path kTiny = fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
const std::string kLauncher = std::string(FLOWLINE_BINARY_DIR) + "/src/flowline";

// The folders a test made, removed when it ends however it ends (FIFOs, links to devices, sparse files).
struct Folders {
  std::vector<fs::path> made;
  ~Folders() {
    std::error_code ec;
    for (const auto& dir : made) fs::remove_all(dir, ec);
  }
  fs::path scratch(const std::string& test) { return made.emplace_back(testing::scratch_dir(test)); }
};
thread_local Folders* folders = nullptr;

// A fresh folder for `test`, removed with the test's Folders.
fs::path scratch(const std::string& test) { return folders->scratch(test); }

// A copy of the tiny checkpoint `name` in a fresh folder for `test`.
fs::path copy_model(const std::string& name, const std::string& test) {
  const auto dir = scratch(test);
  fs::copy(kTiny / name, dir, fs::copy_options::recursive);
  return dir;
}

// Declares the test's Folders.
struct CleanUp {
  Folders owned;
  CleanUp() { folders = &owned; }
  ~CleanUp() { folders = nullptr; }
};

json::value read_json(const fs::path& file) { return json::parse(testing::read_text(file)); }
void write_json(const fs::path& file, const json::value& value) {
  std::ofstream(file, std::ios::trunc) << json::serialize(value);
}

// What validation says of the folder (empty when it accepts it).
std::string problem(const fs::path& dir) { return Checkpoint::problem(dir, Checkpoint::Use::Embedding).value_or(""); }

// Runs `f` on a thread and waits at most 30 s. A FIFO holds an open for reading until a writer comes: when
// the bound passes, one is opened (and closed) so the thread ends, and the test fails.
std::string bounded(const std::function<std::string()>& f, const fs::path& fifo) {
  std::packaged_task<std::string()> task(f);
  auto answer = task.get_future();
  std::thread thread(std::move(task));
  const bool in_time = answer.wait_for(30s) == std::future_status::ready;
  if (!in_time) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  thread.join();
  CHECK(in_time);
  return answer.get();
}

// A one-executor flow over `model`.
fs::path encoder_flow(const fs::path& dir, const fs::path& model) {
  testing::write_text(dir / "flow.yml", "executors:\n  - name: enc\n    uses: SentenceEncoder\n    with: {model: '" +
                                            model.string() + "', warmup: false}\n");
  testing::write_text(dir / "texts.txt", "a first text\nand a second one\n");
  return dir / "flow.yml";
}

// `flowline validate` and `flowline run` on the flow, each given 120 s; their exit status and output.
struct Launched {
  std::string ended, log;
};
Launched launch(const fs::path& dir, const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> all{kLauncher};
  all.insert(all.end(), args.begin(), args.end());
  testing::ChildProcess child(all, dir / (name + ".log"));
  const auto status = child.wait(120s);
  if (!status) return {"still running after 120 s", child.log()};
  return {testing::describe_status(*status), child.log()};
}

}  // namespace

TEST_CASE("a model folder's file that is a FIFO, a device or a folder is refused naming the file, without blocking",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-prompt-excluded", "untrusted file types");
  const auto original = dir / "tokenizer.original.json";
  fs::rename(dir / "tokenizer.json", original);
  REQUIRE(::mkfifo((dir / "tokenizer.json").c_str(), 0600) == 0);
  const std::string fifo = bounded([&] { return problem(dir); }, dir / "tokenizer.json");
  CHECK_THAT(fifo, testing::contains("'" + (dir / "tokenizer.json").string() + "': not a regular file (a FIFO)"));
  fs::remove(dir / "tokenizer.json");
  fs::rename(original, dir / "tokenizer.json");
  REQUIRE(problem(dir).empty());

  // /dev/zero would be read until memory runs out; a folder in a file's place is refused the same way.
  for (const char* name : {"config.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json"}) {
    INFO(name);
    const auto file = dir / name;
    fs::rename(file, dir / "kept");
    fs::create_symlink("/dev/zero", file);
    CHECK_THAT(problem(dir), testing::contains("'" + file.string() + "': not a regular file (a character device)"));
    fs::remove(file);
    fs::create_directory(file);
    CHECK_THAT(problem(dir), testing::contains("'" + file.string() + "': not a regular file (a directory)"));
    fs::remove(file);
    fs::rename(dir / "kept", file);
  }
  CHECK(problem(dir).empty());
}

TEST_CASE("a model folder's file larger than the bound of its kind is refused naming the file and the bound",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-prompt-excluded", "untrusted file sizes");
  // Sparse files: they take no disk.
  const auto grow = [&](const char* name, std::uintmax_t bytes) {
    fs::rename(dir / name, dir / (std::string(name) + ".kept"));
    testing::write_text(dir / name, "{");
    fs::resize_file(dir / name, bytes);
  };
  const auto restore = [&](const char* name) { fs::rename(dir / (std::string(name) + ".kept"), dir / name); };
  grow("config.json", (16u << 20) + 1);
  CHECK_THAT(problem(dir), testing::contains("'" + (dir / "config.json").string() +
                                             "': 16777217 bytes, over the 16 MiB a JSON config may hold"));
  restore("config.json");
  grow("sentence_bert_config.json", 1u << 30);
  CHECK_THAT(problem(dir), testing::contains("sentence_bert_config.json': 1073741824 bytes, over the 16 MiB"));
  restore("sentence_bert_config.json");
  grow("tokenizer.json", (256u << 20) + 1);
  CHECK_THAT(problem(dir), testing::contains("tokenizer.json': 268435457 bytes, over the 256 MiB a tokenizer.json "
                                             "may hold"));
  fs::remove(dir / "tokenizer.json");  // then vocab.txt is the tokenizer
  fs::resize_file(dir / "vocab.txt", (64u << 20) + 1);
  CHECK_THAT(problem(dir), testing::contains("vocab.txt': 67108865 bytes, over the 64 MiB a vocab.txt may hold"));
}

TEST_CASE("flowline validate and run refuse a FIFO tokenizer.json with exit 2 instead of hanging",
          "[models][untrusted][launcher]") {
  const CleanUp clean_up;
  const auto dir = scratch("untrusted fifo launcher");
  const auto model = copy_model("bert-prompt-excluded", "untrusted fifo launcher model");
  fs::remove(model / "tokenizer.json");
  REQUIRE(::mkfifo((model / "tokenizer.json").c_str(), 0600) == 0);
  const auto flow = encoder_flow(dir, model);
  const std::string expected = "'" + (model / "tokenizer.json").string() + "': not a regular file (a FIFO)";
  const auto validated = launch(dir, {"validate", flow.string()}, "validate");
  INFO(validated.log);
  CHECK(validated.ended == "exit code 2");
  CHECK_THAT(validated.log, testing::contains(expected));
  const auto ran =
      launch(dir, {"run", flow.string(), "--input", (dir / "texts.txt").string(), "--input-format", "lines"}, "run");
  INFO(ran.log);
  CHECK(ran.ended == "exit code 2");
  CHECK_THAT(ran.log, testing::contains(expected));
}

TEST_CASE("flowline validate and run refuse num_attention_heads 0 naming the key instead of crashing with SIGFPE",
          "[models][untrusted][launcher]") {
  const CleanUp clean_up;
  for (const char* name : {"modernbert", "mpnet"}) {
    INFO(name);
    const auto dir = scratch(std::string("untrusted heads launcher ") + name);
    const auto model = copy_model(name, std::string("untrusted heads model ") + name);
    auto config = read_json(model / "config.json");
    config.as_object()["num_attention_heads"] = 0;
    write_json(model / "config.json", config);
    const auto flow = encoder_flow(dir, model);
    const std::string expected =
        "'" + (model / "config.json").string() + "': num_attention_heads: must be an integer in 1..1024, got 0";
    const auto validated = launch(dir, {"validate", flow.string()}, "validate");
    INFO(validated.log);
    CHECK(validated.ended == "exit code 2");
    CHECK_THAT(validated.log, testing::contains(expected));
    const auto ran =
        launch(dir, {"run", flow.string(), "--input", (dir / "texts.txt").string(), "--input-format", "lines"}, "run");
    INFO(ran.log);
    CHECK(ran.ended == "exit code 2");
    CHECK_THAT(ran.log, testing::contains(expected));
  }
}

TEST_CASE("every config.json value an architecture reads is checked at validation, naming the key",
          "[models][untrusted]") {
  const CleanUp clean_up;
  struct Case {
    const char* model;
    std::vector<std::string> key;  // a path into config.json
    json::value value;
    std::string message;  // after "'.../config.json': "
  };
  const std::vector<Case> cases = {
      {"bert-prompt-excluded", {"num_attention_heads"}, 0, "num_attention_heads: must be an integer in 1..1024, got 0"},
      {"bert-prompt-excluded",
       {"num_attention_heads"},
       -4,
       "num_attention_heads: must be an integer in 1..1024, got -4"},
      {"bert-prompt-excluded", {"hidden_size"}, 1000000000, "hidden_size: must be an integer in 1..65536"},
      {"bert-prompt-excluded", {"hidden_size"}, "32", "hidden_size: must be an integer in 1..65536, got \"32\""},
      {"bert-prompt-excluded",
       {"max_position_embeddings"},
       100000000,
       "max_position_embeddings: must be an integer in 1..262144, got 100000000"},
      {"bert-prompt-excluded",
       {"max_position_embeddings"},
       256,
       "max_position_embeddings, hidden_size: [256, 32] disagrees with the weights"},
      {"bert-prompt-excluded", {"num_hidden_layers"}, 0, "num_hidden_layers: must be an integer in 1..1024, got 0"},
      {"bert-prompt-excluded", {"num_hidden_layers"}, -1, "num_hidden_layers: must be an integer in 1..1024, got -1"},
      {"bert-prompt-excluded", {"num_hidden_layers"}, 1, "num_hidden_layers: 1, but '"},
      {"bert-prompt-excluded",
       {"num_hidden_layers"},
       3,
       "num_hidden_layers: 3, but '{dir}/model.safetensors' holds 2 (encoder.layer.0 to encoder.layer.1)"},
      {"bert-prompt-excluded", {"vocab_size"}, 1601, "vocab_size, hidden_size: [1601, 32] disagrees with the weights"},
      {"bert-prompt-excluded", {"intermediate_size"}, 65, "intermediate_size, hidden_size: [65, 32] disagrees"},
      {"bert-prompt-excluded", {"type_vocab_size"}, 0, "type_vocab_size: must be an integer in 1..2147483647, got 0"},
      {"bert-prompt-excluded", {"layer_norm_eps"}, -1e-5, "layer_norm_eps: must be a finite number in (0, 1), got -1"},
      {"xlm-roberta", {"pad_token_id"}, -1, "pad_token_id: must be an integer in 0..262144, got -1"},
      {"xlm-roberta",
       {"max_position_embeddings"},
       2,
       "max_position_embeddings: 2 leaves no position after the offset 2"},
      {"mpnet", {"num_attention_heads"}, 0, "num_attention_heads: must be an integer in 1..1024, got 0"},
      {"mpnet", {"max_position_embeddings"}, 1000000000, "max_position_embeddings: must be an integer in 1..4096"},
      {"mpnet", {"relative_attention_num_buckets"}, 8, "relative_attention_num_buckets: must be an integer in 32.."},
      {"mpnet",
       {"relative_attention_num_buckets"},
       64,
       "relative_attention_num_buckets, num_attention_heads: [64, 4] disagrees with the weights"},
      {"mpnet", {"num_hidden_layers"}, 2, "num_hidden_layers: 2, but '"},
      {"modernbert", {"num_attention_heads"}, 0, "num_attention_heads: must be an integer in 1..1024, got 0"},
      {"modernbert", {"hidden_size"}, 1000000000, "hidden_size: must be an integer in 1..65536"},
      {"modernbert",
       {"max_position_embeddings"},
       1000000000,
       "max_position_embeddings: must be an integer in 1..262144"},
      {"modernbert", {"num_hidden_layers"}, -1, "num_hidden_layers: must be an integer in 1..1024, got -1"},
      {"modernbert", {"num_hidden_layers"}, 3, "layer_types: must list 3 layers"},
      {"modernbert", {"layer_types"}, json::array{"full_attention"}, "layer_types: must list 4 layers"},
      {"modernbert", {"norm_eps"}, -1e-5, "norm_eps: must be a finite number in (0, 1)"},
      {"modernbert", {"local_attention"}, 0, "local_attention: must be an integer in 2..524288, got 0"},
      {"modernbert", {"global_rope_theta"}, 0, "global_rope_theta: must be a finite number in [1, 1e+30], got 0"},
      {"modernbert",
       {"rope_parameters", "full_attention", "rope_theta"},
       0,
       "rope_parameters.full_attention.rope_theta: must be a finite number in [1, 1e+30], got 0"},
      {"modernbert", {"num_attention_heads"}, 32, "hidden_size: hidden_size / num_attention_heads must be even"},
      {"modernbert", {"intermediate_size"}, 40, "2 * intermediate_size, hidden_size: [80, 32] disagrees"},
      {"qwen3", {"num_attention_heads"}, 0, "num_attention_heads: must be an integer in 1..1024, got 0"},
      {"qwen3", {"num_key_value_heads"}, 0, "num_key_value_heads: must be an integer in 1..1024, got 0"},
      {"qwen3", {"head_dim"}, 0, "head_dim: must be an integer in 1..1024, got 0"},
      {"qwen3", {"head_dim"}, 8, "num_attention_heads * head_dim, hidden_size: [32, 32] disagrees"},
      {"qwen3", {"rms_norm_eps"}, -1, "rms_norm_eps: must be a finite number in (0, 1), got -1"},
      {"qwen3", {"rope_parameters", "rope_theta"}, 0, "rope_parameters.rope_theta: must be a finite number in [1,"},
      {"qwen3", {"rope_theta"}, -5.0, "rope_theta: must be a finite number in [1, 1e+30]"},
      {"qwen3", {"max_position_embeddings"}, 1000000000, "max_position_embeddings: must be an integer in 1..262144"},
      {"qwen3", {"num_hidden_layers"}, 0, "num_hidden_layers: must be an integer in 1..1024, got 0"},
      {"qwen3",
       {"num_hidden_layers"},
       1,
       "num_hidden_layers: 1, but '{dir}/model.safetensors' holds 2 (layers.0 to layers.1)"},
  };
  std::map<std::string, fs::path> dirs;
  for (const auto& c : cases) {
    INFO(c.model << " " << c.key.back() << " = " << json::serialize(c.value));
    auto& dir = dirs[c.model];
    if (dir.empty()) dir = copy_model(c.model, std::string("untrusted config ") + c.model);
    const auto original = read_json(dir / "config.json");
    auto config = original;
    json::object* at = &config.as_object();
    for (std::size_t i = 0; i + 1 < c.key.size(); ++i) at = &(*at)[c.key[i]].as_object();
    (*at)[c.key.back()] = c.value;
    if (c.key.front() == "rope_theta") config.as_object().erase("rope_parameters");
    write_json(dir / "config.json", config);
    const std::string file = "'" + (dir / "config.json").string() + "': ";
    std::string message = c.message;
    if (const auto at = message.find("{dir}"); at != std::string::npos) message.replace(at, 5, dir.string());
    CHECK_THAT(problem(dir), testing::contains(file + message));
    // A Checkpoint read before the change is checked again when the model is made: nothing is allocated first.
    write_json(dir / "config.json", original);
    Checkpoint checkpoint = Checkpoint::read(dir);
    checkpoint.config = config.as_object();
    CHECK_THROWS_WITH(EmbeddingModel(checkpoint, c10::Device(c10::kCPU), c10::kFloat),
                      testing::contains(file + message));
  }
}

namespace {

json::object module(const std::string& path, const std::string& type) {
  return {{"path", path}, {"type", "sentence_transformers.models." + type}};
}

at::Tensor read_ids(const std::string& name, std::vector<std::int32_t>& ids, std::vector<std::int64_t>& lengths) {
  const SafetensorsFile file(kTiny / (name + ".goldens.safetensors"));
  const at::Tensor i = file.get("ids").contiguous(), l = file.get("lengths").contiguous();
  ids.assign(i.data_ptr<std::int32_t>(), i.data_ptr<std::int32_t>() + i.numel());
  lengths.assign(l.data_ptr<std::int64_t>(), l.data_ptr<std::int64_t>() + l.numel());
  return file.get("embeddings").clone();
}

// A Dense module's function, from its folder, as sentence-transformers runs it.
at::Tensor dense(const fs::path& folder, const at::Tensor& x) {
  const SafetensorsFile weights(folder / "model.safetensors");
  const std::string activation(read_json(folder / "config.json").at("activation_function").as_string());
  const at::Tensor y = at::linear(x, weights.get("linear.weight"), weights.get("linear.bias"));
  if (activation == "torch.nn.modules.activation.Tanh") return at::tanh(y);
  REQUIRE(activation == "torch.nn.modules.linear.Identity");
  return y;
}

}  // namespace

TEST_CASE("modules.json's Dense and Normalize modules run in the order listed, as sentence-transformers runs them",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-all-poolings-dense", "untrusted module order");
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
  const at::Tensor goldens = read_ids("bert-all-poolings-dense", ids, lengths);
  const PackedBatch batch{ids, lengths};
  const c10::Device cpu(c10::kCPU);
  // As saved (Pooling, Dense, Dense, Normalize): sentence-transformers' embeddings.
  CHECK((EmbeddingModel(dir, cpu, c10::kFloat).encode(batch) - goldens).abs().max().item<double>() < 1e-5);

  // The pooled vectors alone, then the modules by hand in another order: Normalize, Dense, Dense.
  write_json(dir / "modules.json", json::array{module("", "Transformer"), module("1_Pooling", "Pooling")});
  const at::Tensor pooled = EmbeddingModel(dir, cpu, c10::kFloat).encode(batch);
  const at::Tensor normalized = pooled / pooled.norm(2, {1}, true).clamp_min(1e-12);
  const at::Tensor expected = dense(dir / "3_Dense", dense(dir / "2_Dense", normalized));
  write_json(dir / "modules.json",
             json::array{module("", "Transformer"), module("1_Pooling", "Pooling"), module("4_Normalize", "Normalize"),
                         module("2_Dense", "Dense"), module("3_Dense", "Dense")});
  const Checkpoint checkpoint = Checkpoint::read(dir);
  CHECK_FALSE(checkpoint.modules.normalize);  // the embeddings do not come out normalized
  CHECK((checkpoint.modules.order ==
         std::vector{SentenceModules::Step::Normalize, SentenceModules::Step::Dense, SentenceModules::Step::Dense}));
  const at::Tensor got = EmbeddingModel(checkpoint, cpu, c10::kFloat).encode(batch);
  REQUIRE(got.sizes() == expected.sizes());
  CHECK((got - expected).abs().max().item<double>() < 1e-5);
  CHECK((got - goldens).abs().max().item<double>() > 1e-2);  // not the saved order's embeddings
}

TEST_CASE("a modules.json order sentence-transformers cannot run is refused at validation, naming the module",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-all-poolings-dense", "untrusted module order refused");
  const std::string file = "'" + (dir / "modules.json").string() + "': module 'sentence_transformers.models.";
  const auto refused = [&](const json::array& modules, const std::string& message) {
    write_json(dir / "modules.json", modules);
    CHECK_THAT(problem(dir), testing::contains(file + message));
  };
  refused({module("1_Pooling", "Pooling"), module("", "Transformer")}, "Pooling' cannot come first");
  refused({module("", "Transformer"), module("2_Dense", "Dense"), module("1_Pooling", "Pooling")},
          "Dense' cannot come right after the Transformer");
  refused({module("", "Transformer"), module("4_Normalize", "Normalize")},
          "Normalize' cannot come right after the Transformer");
  refused({module("", "Transformer"), module("1_Pooling", "Pooling"), module("1_Pooling", "Pooling")},
          "Pooling' cannot come after Pooling");
  refused({module("", "Transformer"), module("1_Pooling", "Pooling"), module("", "Transformer")},
          "Transformer' cannot come after Pooling");
}

TEST_CASE("a module path that leaves the model folder, and a Pooling folder without its config, are refused",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-all-poolings-dense", "untrusted module paths");
  const std::string file = "'" + (dir / "modules.json").string() + "': ";
  for (const std::string path : {"../../../etc", "/etc", "2_Dense/../../outside", "1_Pooling/.."}) {
    INFO(path);
    write_json(dir / "modules.json", json::array{module("", "Transformer"), module(path, "Pooling")});
    CHECK_THAT(problem(dir), testing::contains(file + "module path '" + path + "' leaves the model folder"));
    write_json(dir / "modules.json",
               json::array{module("", "Transformer"), module("1_Pooling", "Pooling"), module(path, "Dense")});
    CHECK_THAT(problem(dir), testing::contains(file + "module path '" + path + "' leaves the model folder"));
  }
  write_json(dir / "modules.json", json::array{module("", "Transformer"), module("1_Pooling", "Pooling")});
  REQUIRE(problem(dir).empty());
  fs::remove(dir / "1_Pooling/config.json");
  CHECK_THAT(problem(dir), testing::contains("'" + (dir / "1_Pooling").string() + "': missing config.json"));
}

TEST_CASE("sentence_bert_config.json's max_seq_length and a cross-encoder's num_labels are checked at validation",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-prompt-excluded", "untrusted lengths");
  for (const json::value bad : {json::value(-1), json::value(0), json::value("128"), json::value(1.5)}) {
    write_json(dir / "sentence_bert_config.json", json::object{{"max_seq_length", bad}});
    CHECK_THAT(problem(dir), testing::contains("sentence_bert_config.json': max_seq_length: must be a positive "
                                               "integer, got " +
                                               json::serialize(bad)));
  }
  const auto cross = copy_model("bert-cross-encoder", "untrusted labels");
  auto config = read_json(cross / "config.json");
  config.as_object()["num_labels"] = 0;
  config.as_object().erase("id2label");
  write_json(cross / "config.json", config);
  CHECK_THAT(Checkpoint::problem(cross, Checkpoint::Use::CrossEncoder).value_or(""),
             testing::contains("config.json': num_labels: must be an integer in 1..1048576, got 0"));
}

namespace {

// Writes a changed copy of `source`'s tokenizer.json to `dir` and returns what building it says.
std::string tokenizer_problem(const fs::path& source, const fs::path& dir,
                              const std::function<void(json::object&)>& change) {
  auto root = read_json(source / "tokenizer.json");
  change(root.as_object());
  write_json(dir / "tokenizer.json", root);
  try {
    Tokenizer::from_json_file(dir / "tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a flowline::Error: ") + e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("tokenizer.json integers out of tokenizers' range are refused naming the file and the JSON path",
          "[models][untrusted][tokenizers]") {
  const CleanUp clean_up;
  const auto dir = scratch("untrusted tokenizer integers");
  const auto bert = kTiny / "bert-prompt-excluded";
  const std::string file = "tokenizer '" + (dir / "tokenizer.json").string() + "': ";
  const auto model = [](json::object& root) -> json::object& { return root["model"].as_object(); };
  const auto vocab = [&](json::object& root) -> json::object& { return model(root)["vocab"].as_object(); };
  auto check = [&](const fs::path& source, const std::function<void(json::object&)>& change,
                   const std::string& message) {
    CHECK_THAT(tokenizer_problem(source, dir, change), testing::contains(file + message));
  };
  check(
      bert, [&](json::object& r) { vocab(r)["foo"] = -1; },
      "model.vocab[\"foo\"]: expected an id in 0..4294967295, got -1");
  check(
      bert, [&](json::object& r) { vocab(r)["foo"] = 4294967298; },
      "model.vocab[\"foo\"]: expected an id in 0..4294967295, got 4294967298");
  check(
      bert, [&](json::object& r) { vocab(r)["foo"] = 2.0; }, "model.vocab[\"foo\"]: expected an id in 0..4294967295");
  check(
      bert, [&](json::object& r) { vocab(r)["foo"] = 2147483648; },
      "model.vocab[\"foo\"]: 2147483648 is larger than flowline runs (at most 2147483647)");
  // 2^32 + 2 wrapped to 2 ([CLS]) before: the added token became [CLS].
  check(
      bert,
      [&](json::object& r) {
        r["added_tokens"].as_array().push_back(json::object{{"content", "zzz"}, {"id", 4294967298}});
      },
      "added_tokens[5].id: expected an id in 0..4294967295, got 4294967298");
  check(
      bert, [&](json::object& r) { r["added_tokens"].as_array()[0].as_object()["lstrip"] = "yes"; },
      "added_tokens[0]: 'lstrip' must be true or false");
  check(
      bert, [&](json::object& r) { model(r)["max_input_chars_per_word"] = -1; },
      "model.max_input_chars_per_word: expected an integer in 0..18446744073709551615, got -1");
  check(
      bert,
      [&](json::object& r) {
        r["padding"] = json::object{{"pad_id", -1}};
      },
      "padding.pad_id: expected an id in 0..4294967295, got -1");
  check(
      bert,
      [&](json::object& r) {
        r["post_processor"].as_object()["single"].as_array()[1].as_object()["Sequence"].as_object()["type_id"] = -1;
      },
      "post_processor.single[1].Sequence.type_id: expected a type id in 0..4294967295, got -1");
  // A value of the wrong type reached Boost.JSON's accessors before: its message named no file or key.
  check(
      bert,
      [&](json::object& r) {
        r["post_processor"].as_object()["special_tokens"].as_object()["[CLS]"].as_object()["ids"] = json::array{"x"};
      },
      "post_processor.special_tokens[\"[CLS]\"].ids[0]: expected an id in 0..4294967295, got \"x\"");
  check(
      bert,
      [&](json::object& r) {
        r["post_processor"] = json::object{{"type", "BertProcessing"},
                                           {"sep", json::array{"[SEP]", 3}},
                                           {"cls", json::array{"[CLS]", 18446744073709551615ull}}};
      },
      "post_processor.cls[1]: expected an id in 0..4294967295, got 18446744073709551615");
  const auto unigram = fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tokenizers/unigram-xlmr";
  check(
      unigram, [&](json::object& r) { model(r)["unk_id"] = -1; },
      "model.unk_id: expected an integer in 0..18446744073709551614, got -1");
  check(
      unigram, [&](json::object& r) { model(r)["unk_id"] = 4294967299; },
      "model: 'unk_id' 4294967299 is outside the vocabulary of");
}

TEST_CASE("an integer tensor where float weights belong is refused naming the tensor, not converted",
          "[models][untrusted]") {
  const CleanUp clean_up;
  const auto dir = copy_model("bert-all-poolings-dense", "untrusted weight dtypes");
  auto retype = [](const fs::path& file, const std::string& name) {
    const SafetensorsFile weights(file);
    std::map<std::string, at::Tensor> tensors;
    for (const auto& n : weights.names()) tensors[n] = weights.get(n).clone();
    tensors[name] = tensors[name].to(at::kInt);
    save_safetensors(file, tensors);
  };
  const auto copy = dir / "model.original.safetensors";
  fs::copy_file(dir / "model.safetensors", copy);
  // Validation reads the header: the embedding table is checked there.
  retype(dir / "model.safetensors", "embeddings.word_embeddings.weight");
  CHECK_THAT(problem(dir), testing::contains("model.safetensors': tensor 'embeddings.word_embeddings.weight' holds "
                                             "I32, and a weight must be floating point"));
  // Any other weight: when it is loaded.
  fs::copy_file(copy, dir / "model.safetensors", fs::copy_options::overwrite_existing);
  retype(dir / "model.safetensors", "encoder.layer.1.output.dense.weight");
  CHECK_THROWS_WITH(EmbeddingModel(dir, c10::Device(c10::kCPU), c10::kFloat),
                    testing::contains("model.safetensors': tensor 'encoder.layer.1.output.dense.weight' holds I32, "
                                      "and a weight must be floating point"));
  // A Dense module's weights: at validation.
  fs::copy_file(copy, dir / "model.safetensors", fs::copy_options::overwrite_existing);
  REQUIRE(problem(dir).empty());
  retype(dir / "3_Dense/model.safetensors", "linear.weight");
  CHECK_THAT(problem(dir), testing::contains("3_Dense/model.safetensors': tensor 'linear.weight' holds I32, and a "
                                             "weight must be floating point"));
}
