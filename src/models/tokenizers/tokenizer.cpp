// Tokenizer: reading tokenizer.json (or vocab.txt), splitting out added tokens, truncation and framing.
#include "flowline/models/tokenizer.hpp"

#include "../model_file.hpp"
#include "flowline/error.hpp"
#include "builders.hpp"
#include "unicode.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace flowline::models {

namespace tokenizers {

namespace json = boost::json;

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

void refuse(const Origin& origin, const std::string& what) {
  throw Error(fmt::format("tokenizer '{}': {}{}", origin.file, origin.path.empty() ? "" : origin.path + ": ", what));
}

namespace {

const json::value* field(const json::object& o, std::string_view key) {
  const auto it = o.find(key);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

// added_tokens with their options lstrip, rstrip, single_word and normalized. A normalized one is matched
// as the normalizer writes its content (tokenizers' refresh_added_tokens).
void read_added_tokens(const json::object& root, const std::string& file, Pipeline& p) {
  const json::value* list = field(root, "added_tokens");
  if (list == nullptr) return;
  if (!list->is_array()) refuse({file, "added_tokens"}, "must be a list");
  for (std::size_t i = 0; i < list->as_array().size(); ++i) {
    const Origin origin{file, fmt::format("added_tokens[{}]", i)};
    const json::value& v = list->as_array()[i];
    if (!v.is_object() || !v.as_object().contains("content") || !v.as_object().at("content").is_string() ||
        !v.as_object().contains("id") || !v.as_object().at("id").is_number())
      refuse(origin, "an added token needs 'content' (a string) and 'id' (a number)");
    const json::object& o = v.as_object();
    AddedToken t{std::string(o.at("content").as_string()), id_value(o.at("id"), {file, origin.at(".id")}),
                 flag(o, "lstrip", false, origin),         flag(o, "rstrip", false, origin),
                 flag(o, "single_word", false, origin),    flag(o, "normalized", false, origin)};
    if (t.content.empty()) refuse(origin, "an empty added token");
    if (p.model->token_id(t.content) != t.id && t.id >= 0 && static_cast<std::size_t>(t.id) >= p.model->size())
      ++p.added_vocab;
    if (!t.normalized) {
      p.raw_added.first[static_cast<unsigned char>(t.content[0])] = true;
      p.raw_added.entries.push_back({t.content, t});
      p.added_by_id[t.id] = t.content;
    } else {
      Scratch s;
      decode_utf8(t.content, s.text);
      for (const auto& n : p.normalizers) n->normalize(s);
      if (s.text.empty()) refuse(origin, "'normalized': true, and the normalizer leaves nothing of its content");
      p.norm_added.first[s.text[0] & 0xFF] = true;
      p.norm_added.entries.push_back({s.text, t});
      encode_utf8(s.text, p.added_by_id[t.id]);
    }
    p.added.push_back(std::move(t));
  }
  const auto longest_first = [](const auto& x, const auto& y) { return x.content.size() > y.content.size(); };
  std::stable_sort(p.raw_added.entries.begin(), p.raw_added.entries.end(), longest_first);
  std::stable_sort(p.norm_added.entries.begin(), p.norm_added.entries.end(), longest_first);
  p.raw_added.index();
  p.norm_added.index();
}

void read_padding(const json::object& root, const std::string& file, Pipeline& p) {
  if (const json::value* padding = field(root, "padding"); padding != nullptr && padding->is_object())
    if (const json::value* id = field(padding->as_object(), "pad_id"); id != nullptr) {
      p.pad = id_value(*id, {file, "padding.pad_id"});
      return;
    }
  for (const char* name : {"[PAD]", "<pad>"})
    if (const std::int32_t id = p.model->token_id(name); id >= 0) {
      p.pad = id;
      return;
    }
}

std::unique_ptr<Pipeline> build_pipeline(const json::object& root, const std::string& file) {
  auto p = std::make_unique<Pipeline>();
  p->file = file;
  build_components(root, file, *p);
  read_added_tokens(root, file, *p);
  read_padding(root, file, *p);
  return p;
}

json::value parse_json(std::string_view text, const std::string& origin) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) throw Error(fmt::format("tokenizer '{}': not valid JSON: {}", origin, ec.message()));
  return v;
}

// The tokenizer.json that transformers' BertTokenizerFast converter writes for a vocab.txt.
json::object bert_json_from_vocab(const std::filesystem::path& folder) {
  const std::filesystem::path vocab_file = folder / "vocab.txt";
  bool lowercase = true, chinese = true;
  json::value strip_accents = nullptr;
  if (std::filesystem::exists(folder / "tokenizer_config.json")) {
    const std::string config_file = (folder / "tokenizer_config.json").string();
    const json::value config = parse_json(read_model_file(config_file, ModelFile::Json), config_file);
    if (config.is_object()) {
      const json::object& c = config.as_object();
      if (const json::value* v = field(c, "do_lower_case"); v != nullptr && v->is_bool()) lowercase = v->as_bool();
      if (const json::value* v = field(c, "tokenize_chinese_chars"); v != nullptr && v->is_bool())
        chinese = v->as_bool();
      if (const json::value* v = field(c, "strip_accents"); v != nullptr && v->is_bool()) strip_accents = v->as_bool();
    }
  }
  json::object vocab;
  if (!std::filesystem::exists(vocab_file))
    throw Error(
        fmt::format("tokenizer folder '{}': neither tokenizer.json nor vocab.txt can be read", folder.string()));
  std::istringstream in(read_model_file(vocab_file, ModelFile::Vocabulary));
  std::string line;
  for (std::int64_t id = 0; std::getline(in, line); ++id) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab[line] = id;  // a repeated token keeps its last id, as transformers' load_vocab does
  }
  if (vocab.empty()) throw Error(fmt::format("tokenizer '{}': the vocabulary is empty", vocab_file.string()));
  const auto id_of = [&](const char* token) -> json::value {
    const auto it = vocab.find(token);
    if (it == vocab.end())
      throw Error(fmt::format("tokenizer '{}': '{}' is not in the vocabulary", vocab_file.string(), token));
    return it->value();
  };
  json::array added;
  for (const char* token : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (vocab.contains(token))
      added.push_back(json::object{{"content", token}, {"id", id_of(token)}, {"special", true}, {"normalized", false}});
  const json::value sep = id_of("[SEP]"), cls = id_of("[CLS]");
  json::object root;
  root["normalizer"] = json::object{{"type", "BertNormalizer"},
                                    {"clean_text", true},
                                    {"handle_chinese_chars", chinese},
                                    {"strip_accents", strip_accents},
                                    {"lowercase", lowercase}};
  root["pre_tokenizer"] = json::object{{"type", "BertPreTokenizer"}};
  root["model"] = json::object{{"type", "WordPiece"},
                               {"unk_token", "[UNK]"},
                               {"continuing_subword_prefix", "##"},
                               {"max_input_chars_per_word", 100},
                               {"vocab", std::move(vocab)}};
  root["post_processor"] =
      json::object{{"type", "BertProcessing"}, {"sep", json::array{"[SEP]", sep}}, {"cls", json::array{"[CLS]", cls}}};
  root["added_tokens"] = std::move(added);
  return root;
}

// Truncation 'longest_first' of a pair to `budget` tokens (pipeline.hpp's pair_lengths).
void truncate_pair(std::vector<std::int32_t>& a, std::vector<std::int32_t>& b, std::size_t budget, bool left) {
  const auto [n1, n2] = pair_lengths(a.size(), b.size(), budget);
  cut(a, n1, left);
  cut(b, n2, left);
}

// tokenizer_config.json, as transformers reads it: `do_lower_case` for a BertNormalizer whose
// tokenizer.json object does not say `lowercase` (tokenizers' default would be true), `truncation_side`
// (right or left) and `model_input_names` (without token_type_ids the model gets none: all zeros). A vocab.txt
// folder's normalizer is made from the same file (bert_json_from_vocab). `root` is tokenizer.json's object.
void apply_tokenizer_config(const std::filesystem::path& folder, json::object* root, Pipeline* pipeline) {
  const std::filesystem::path path = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return;
  const std::string file = path.string();
  const json::value config = parse_json(read_model_file(path, ModelFile::Json), file);
  if (!config.is_object()) return;
  const json::object& c = config.as_object();
  if (root != nullptr) {
    const json::value* lower = field(c, "do_lower_case");
    if (lower != nullptr && !lower->is_bool()) refuse({file, "do_lower_case"}, "must be true or false");
    json::value* normalizer = root->if_contains("normalizer");
    std::vector<json::object*> bert;
    if (normalizer != nullptr && normalizer->is_object()) {
      json::object& n = normalizer->as_object();
      if (json::value* list = n.if_contains("normalizers"); list != nullptr && list->is_array()) {
        for (json::value& item : list->as_array())
          if (item.is_object()) bert.push_back(&item.as_object());
      } else {
        bert.push_back(&n);
      }
    }
    for (json::object* n : bert) {
      const json::value* type = n->if_contains("type");
      if (lower != nullptr && type != nullptr && type->is_string() && type->as_string() == "BertNormalizer" &&
          field(*n, "lowercase") == nullptr)
        (*n)["lowercase"] = lower->as_bool();
    }
  }
  if (pipeline == nullptr) return;
  if (const json::value* side = field(c, "truncation_side"); side != nullptr) {
    if (!side->is_string() || (side->as_string() != "left" && side->as_string() != "right"))
      refuse({file, "truncation_side"}, "must be \"right\" or \"left\"");
    pipeline->truncate_left = side->as_string() == "left";
  }
  if (const json::value* names = field(c, "model_input_names"); names != nullptr) {
    if (!names->is_array()) refuse({file, "model_input_names"}, "must be a list of names");
    pipeline->type_ids = false;
    for (const json::value& name : names->as_array()) {
      if (!name.is_string()) refuse({file, "model_input_names"}, "must be a list of names");
      pipeline->type_ids |= name.as_string() == "token_type_ids";
    }
  }
}

}  // namespace
}  // namespace tokenizers

using tokenizers::Pipeline;

Tokenizer::Tokenizer(std::unique_ptr<Pipeline> pipeline) : pipeline_(std::move(pipeline)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& origin) {
  return from_json_value(tokenizers::parse_json(json_text, origin), origin);
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_value(const boost::json::value& root, const std::string& origin) {
  if (!root.is_object()) throw Error(fmt::format("tokenizer '{}': expected a JSON object", origin));
  // Every field is read with a check that names its JSON path; this net names at least the file should a
  // value of the wrong type still reach Boost.JSON's own accessors.
  try {
    return std::unique_ptr<Tokenizer>(new Tokenizer(tokenizers::build_pipeline(root.as_object(), origin)));
  } catch (const boost::system::system_error& e) {
    throw Error(fmt::format("tokenizer '{}': a value of the wrong type or range: {}", origin, e.code().message()));
  } catch (const std::logic_error& e) {  // Boost.JSON's as_object() and the like, at() of a missing key
    throw Error(fmt::format("tokenizer '{}': a value of the wrong type: {}", origin, e.what()));
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::filesystem::path& tokenizer_json) {
  return from_json_text(read_model_file(tokenizer_json, ModelFile::TokenizerJson), tokenizer_json.string());
}

std::unique_ptr<Tokenizer> Tokenizer::from_folder(const std::filesystem::path& folder) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (const auto file = folder / "tokenizer.json"; std::filesystem::exists(file)) {
    const std::string origin = file.string();
    boost::json::value root = tokenizers::parse_json(read_model_file(file, ModelFile::TokenizerJson), origin);
    if (root.is_object()) tokenizers::apply_tokenizer_config(folder, &root.as_object(), nullptr);
    tokenizer = from_json_value(root, origin);
  } else {
    const boost::json::object root = tokenizers::bert_json_from_vocab(folder);
    tokenizer.reset(new Tokenizer(tokenizers::build_pipeline(root, (folder / "vocab.txt").string())));
  }
  tokenizers::apply_tokenizer_config(folder, nullptr, tokenizer->pipeline_.get());
  return tokenizer;
}

// The single template holds sequence A once: its tokens go straight into `ids`, between the special
// tokens before and after it, without a copy.
std::size_t Tokenizer::encode_into(std::string_view text, std::size_t max_length,
                                   std::vector<std::int32_t>& ids) const {
  const std::size_t before = ids.size();
  const std::size_t added = pipeline_->post.added(false);
  const std::size_t budget =
      max_length == 0 ? std::numeric_limits<std::size_t>::max() : (max_length > added ? max_length - added : 0);
  for (const tokenizers::TemplatePiece& piece : pipeline_->post.single) {
    if (!piece.is_sequence) {
      ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
      continue;
    }
    const std::size_t start = ids.size();
    pipeline_->tokens(text, ids);
    if (ids.size() - start > budget) {
      if (pipeline_->truncate_left) {  // truncation_side: left keeps the text's last tokens
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end() - static_cast<std::ptrdiff_t>(budget));
      }
      ids.resize(start + budget);
    }
  }
  return ids.size() - before;
}

std::size_t Tokenizer::encode_pair_into(std::string_view a, std::string_view b, std::size_t max_length,
                                        std::vector<std::int32_t>& ids, std::vector<std::int32_t>* type_ids) const {
  tokenizers::Scratch& s = tokenizers::scratch();
  s.first.clear();
  s.second.clear();
  pipeline_->tokens(a, s.first);
  pipeline_->tokens(b, s.second);
  if (max_length != 0) {
    const std::size_t added = pipeline_->post.added(true);
    tokenizers::truncate_pair(s.first, s.second, max_length > added ? max_length - added : 0, pipeline_->truncate_left);
  }
  return pipeline_->frame(s.first, &s.second, ids, type_ids);
}

std::size_t Tokenizer::encode_pairs_into(std::string_view query, std::span<const std::string_view> documents,
                                         std::size_t max_length, std::vector<std::int32_t>& ids,
                                         std::vector<std::int32_t>* type_ids, std::vector<std::size_t>& lengths) const {
  tokenizers::Scratch& s = tokenizers::scratch();
  std::vector<std::int32_t> query_tokens;
  pipeline_->tokens(query, query_tokens);
  const std::size_t added = pipeline_->post.added(true);
  std::size_t total = 0;
  for (const std::string_view document : documents) {
    s.first.assign(query_tokens.begin(), query_tokens.end());
    s.second.clear();
    pipeline_->tokens(document, s.second);
    if (max_length != 0)
      tokenizers::truncate_pair(s.first, s.second, max_length > added ? max_length - added : 0,
                                pipeline_->truncate_left);
    const std::size_t n = pipeline_->frame(s.first, &s.second, ids, type_ids);
    lengths.push_back(n);
    total += n;
  }
  return total;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, std::size_t max_length) const {
  std::vector<std::int32_t> ids;
  encode_into(text, max_length, ids);
  return ids;
}

std::int32_t Tokenizer::token_id(std::string_view token) const {
  for (const tokenizers::AddedToken& t : pipeline_->added)
    if (t.content == token) return t.id;
  return pipeline_->model->token_id(token);
}
std::string_view Tokenizer::id_to_token(std::int32_t id) const {
  if (const auto it = pipeline_->added_by_id.find(id); it != pipeline_->added_by_id.end()) return it->second;
  return pipeline_->model->id_to_token(id);
}

std::string Tokenizer::decode_tokens(std::span<const std::string_view> tokens) const {
  if (!pipeline_->decoder_refusal.empty()) throw Error(pipeline_->decoder_refusal);
  std::string text;
  if (pipeline_->decoder == nullptr) {  // transformers joins the tokens by spaces
    for (std::size_t i = 0; i < tokens.size(); ++i) (text += i == 0 ? "" : " ") += tokens[i];
    return text;
  }
  std::vector<std::string> chain(tokens.begin(), tokens.end());
  pipeline_->decoder->decode_chain(chain);
  for (const std::string& piece : chain) text += piece;
  return text;
}

std::string_view Tokenizer::continuing_subword_prefix() const { return pipeline_->model->continuing_subword_prefix(); }

std::int32_t Tokenizer::pad_id() const { return pipeline_->pad; }
std::int32_t Tokenizer::unk_id() const { return pipeline_->model->unk_id(); }
std::size_t Tokenizer::vocab_size() const { return pipeline_->model->size() + pipeline_->added_vocab; }
std::size_t Tokenizer::special_tokens_count(bool pair) const { return pipeline_->post.added(pair); }
std::string Tokenizer::describe() const { return pipeline_->describe(); }
bool Tokenizer::type_ids_input() const { return pipeline_->type_ids; }
bool Tokenizer::truncates_left() const { return pipeline_->truncate_left; }

}  // namespace flowline::models
