// flowline/models/checkpoint.hpp — what a Hugging Face / sentence-transformers checkpoint folder declares,
// read once before any weight is loaded.
//
// A checkpoint folder holds config.json (the transformer: model_type and its sizes), model.safetensors,
// a tokenizer (tokenizer.json or vocab.txt) and, for sentence-transformers models, modules.json with the
// modules after the transformer (Pooling, Dense, Normalize) in their own folders, sentence_bert_config.json
// (max_seq_length) and config_sentence_transformers.json (prompts). Both module-name layouts are read:
// sentence-transformers 2-5 (`sentence_transformers.models.Pooling`) and 6.x
// (`sentence_transformers.sentence_transformer.modules.pooling.Pooling`, ...); both pooling spellings: the
// `pooling_mode_*_tokens` booleans and 6.x's `pooling_mode`.
//
// Checkpoint::read() checks everything it can without loading weights: an unknown model_type, module or
// pooling mode, a Dense activation flowline cannot run, a missing file, every config.json value the
// architecture reads (its range, and its agreement with the shapes in model.safetensors' header), a
// modules.json order flowline does not run (Transformer first, then Pooling, then Dense and Normalize in
// any order) or a module path that leaves the folder — each a flowline::Error naming the file, the key and
// what is supported. A model folder is untrusted input: every file is read as a regular file within a size
// bound for its kind (src/models/model_file.hpp). Validation calls it (flowline validate), so a bad
// checkpoint is refused before a flow starts. A Checkpoint is a plain value: copy it, read it from any thread.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace flowline::models {

// sentence-transformers' pooling modes. Several may be on at once: the pooled vectors are concatenated in
// sentence-transformers' order (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken).
enum class Pooling { Cls, Max, Mean, MeanSqrtLen, WeightedMean, LastToken };
std::string to_string(Pooling pooling);

// Activation functions of Dense modules and classifier heads.
enum class Activation { Identity, Tanh, Relu, Gelu, Sigmoid };
std::string to_string(Activation activation);

// The weights' file name of a checkpoint folder and of a module's folder.
inline constexpr const char* kWeightsFileName = "model.safetensors";

// A sentence-transformers Dense module: y = activation(W x + b), weights in its folder's model.safetensors.
struct DenseModule {
  std::filesystem::path folder;
  std::int64_t in_features = 0, out_features = 0;
  bool bias = true;
  Activation activation = Activation::Tanh;

  std::filesystem::path weights_file() const { return folder / kWeightsFileName; }
};

// What comes after the transformer in a sentence-transformers model: Pooling, then Dense and Normalize
// modules in modules.json's order (sentence-transformers runs them in the order listed).
struct SentenceModules {
  std::vector<Pooling> pooling{Pooling::Mean};  // at least one; sentence-transformers' order
  bool include_prompt = true;                   // false: prompt tokens are left out of the pooling
  std::vector<DenseModule> dense;               // in order
  // Whether the embeddings come out normalized: the last module is Normalize.
  bool normalize = false;
  // The modules after Pooling in modules.json's order: each Dense is the next of `dense`. Empty (a
  // SentenceModules made in code): every Dense in order, then Normalize when `normalize`.
  enum class Step { Dense, Normalize };
  std::vector<Step> order;
};

// A cross-encoder's head (`*ForSequenceClassification`), scores from the first token's state.
struct ClassifierHead {
  std::int64_t num_labels = 1;
  // sentence-transformers' CrossEncoder activation: sigmoid for one label unless the checkpoint names
  // another (config.json's sentence_transformers.activation_fn); identity for several labels.
  Activation activation = Activation::Sigmoid;
};

// A token classifier's head (`*ForTokenClassification`): logits for every token. Its labels by index are
// config.json's id2label, which such a checkpoint must have (every index 0..n-1 named once, by a string; n
// equal to num_labels where config.json says it).
struct TokenClassifierHead {
  std::vector<std::string> labels;
};

struct Checkpoint {
  std::filesystem::path folder;
  std::filesystem::path config_file;  // folder/config.json
  std::string model_type;             // as config.json says ("bert", "xlm-roberta", ...)
  boost::json::object config;         // config.json, for the architecture to read its sizes from
  SentenceModules modules;
  std::optional<ClassifierHead> classifier;             // set for *ForSequenceClassification checkpoints
  std::optional<TokenClassifierHead> token_classifier;  // set for *ForTokenClassification checkpoints
  std::int64_t max_seq_length = 512;           // sentence_bert_config.json, tokenizer_config.json, or positions
  std::map<std::string, std::string> prompts;  // config_sentence_transformers.json: name -> text
  std::string default_prompt_name;             // empty: no prompt unless a request names one

  // Reads and checks the folder (see above). Throws flowline::Error.
  static Checkpoint read(const std::filesystem::path& folder);

  // The transformer's weights: folder/model.safetensors.
  std::filesystem::path weights_file() const { return folder / kWeightsFileName; }

  // What validation asks of a `model` parameter (ParamSpec::check): read() succeeds, the tokenizer
  // (tokenizer.json, or vocab.txt) is one flowline::tokenizers runs exactly (it is built, so a component it
  // cannot run is named), and for a cross-encoder the architecture table has its head. Returns the problem,
  // or nullopt. Reads only JSON and vocabulary files; loads no weight of the transformer. For a token
  // classifier also: config.json names *ForTokenClassification, the table has the architecture's token head,
  // and model.safetensors holds that head's tensors in their shapes (the head alone is read, on the CPU).
  enum class Use { Embedding, CrossEncoder, TokenClassifier };
  static std::optional<std::string> problem(const std::filesystem::path& folder, Use use);

  // The text of prompt `name`; throws flowline::Error listing the checkpoint's prompts when it has none
  // of that name.
  const std::string& prompt(const std::string& name) const;
};

}  // namespace flowline::models
