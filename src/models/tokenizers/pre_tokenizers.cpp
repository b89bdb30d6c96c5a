// The pre-tokenizers and the table that builds them from tokenizer.json's "pre_tokenizer" object:
// BertPreTokenizer, Whitespace, WhitespaceSplit here; ByteLevel and Split (byte_level.cpp), Metaspace
// (sentencepiece.cpp) and Sequence. Adding one: a class here (or in a file of its own, its builder declared in
// pipeline.hpp) and a line in the table.
#include "builders.hpp"
#include "unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

// Splits every word at the characters `is_space` names (dropped) and isolates those `is_isolated` names.
template <class IsSpace, class IsIsolated>
void split_words(Scratch& s, IsSpace is_space, IsIsolated is_isolated) {
  s.other_words.clear();
  for (const Span word : s.words) {
    std::size_t start = word.begin;
    for (std::size_t i = word.begin; i < word.end; ++i) {
      const char32_t c = s.text[i];
      if (is_space(c)) {
        if (i > start) s.other_words.push_back({start, i});
        start = i + 1;
      } else if (is_isolated(c)) {
        if (i > start) s.other_words.push_back({start, i});
        s.other_words.push_back({i, i + 1});
        start = i + 1;
      }
    }
    if (word.end > start) s.other_words.push_back({start, word.end});
  }
  s.words.swap(s.other_words);
}

class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(Scratch& s) const override { split_words(s, is_whitespace, is_bert_punctuation); }
  std::string name() const override { return "BertPreTokenizer"; }
  bool keeps_text() const override { return true; }
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(Scratch& s) const override {
    split_words(s, is_whitespace, [](char32_t) { return false; });
  }
  std::string name() const override { return "WhitespaceSplit"; }
  bool keeps_text() const override { return true; }
};

// Whitespace: the regex \w+|[^\w\s]+ — runs of word characters and runs of other non-space characters.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(Scratch& s) const override {
    s.other_words.clear();
    for (const Span word : s.words) {
      std::size_t start = word.begin;
      int run = 0;  // 0: spaces, 1: word characters, 2: others
      for (std::size_t i = word.begin; i <= word.end; ++i) {
        const int kind = i == word.end ? 0 : is_word_char(s.text[i]) ? 1 : is_regex_space(s.text[i]) ? 0 : 2;
        if (kind == run) continue;
        if (run != 0) s.other_words.push_back({start, i});
        run = kind;
        start = i;
      }
    }
    s.words.swap(s.other_words);
  }
  std::string name() const override { return "Whitespace"; }
  bool keeps_text() const override { return true; }
};

using PreTokenizerList = std::vector<std::unique_ptr<PreTokenizer>>;

using PreTokenizerBuilder = std::function<void(const json::object&, const Origin&, PreTokenizerList&)>;
const std::map<std::string, PreTokenizerBuilder, std::less<>>& pre_tokenizer_table() {
  static const std::map<std::string, PreTokenizerBuilder, std::less<>> table = {
      {"BertPreTokenizer", [](const json::object&, const Origin&,
                              PreTokenizerList& out) { out.push_back(std::make_unique<BertPreTokenizer>()); }},
      {"ByteLevel", [](const json::object& o, const Origin& origin,
                       PreTokenizerList& out) { out.push_back(make_byte_level(o, origin)); }},
      {"Split", [](const json::object& o, const Origin& origin,
                   PreTokenizerList& out) { out.push_back(make_split(o, origin)); }},
      {"Whitespace", [](const json::object&, const Origin&,
                        PreTokenizerList& out) { out.push_back(std::make_unique<WhitespacePreTokenizer>()); }},
      {"WhitespaceSplit", [](const json::object&, const Origin&,
                             PreTokenizerList& out) { out.push_back(std::make_unique<WhitespaceSplit>()); }},
      {"Metaspace", [](const json::object& o, const Origin& origin,
                       PreTokenizerList& out) { out.push_back(make_metaspace(o, origin)); }},
      {"Sequence",
       [](const json::object& o, const Origin& origin, PreTokenizerList& out) {
         const json::value* list = field(o, "pretokenizers");
         if (list == nullptr || !list->is_array()) refuse(origin, "'pretokenizers' must be a list");
         for (std::size_t i = 0; i < list->as_array().size(); ++i)
           add_pre_tokenizer(list->as_array()[i], {origin.file, origin.at(fmt::format(".pretokenizers[{}]", i))}, out);
       }},
  };
  return table;
}

}  // namespace

void add_pre_tokenizer(const json::value& v, const Origin& origin, PreTokenizerList& out) {
  const json::object& o = object_of(v, origin);
  const std::string type = type_of(o, origin);
  const auto& table = pre_tokenizer_table();
  const auto it = table.find(type);
  if (it == table.end())
    refuse(origin, fmt::format("pre-tokenizer '{}' is not supported (supported: {})", type, names_of(table)));
  it->second(o, origin, out);
}

}  // namespace flowline::models::tokenizers
