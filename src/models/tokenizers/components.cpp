// The pipeline's components and the tables that build them from tokenizer.json: normalizers,
// pre-tokenizers, models and post-processors. Adding a component: a class here (or in a file of its own,
// its builder declared in pipeline.hpp) and a line in its table.
#include "pipeline.hpp"
#include "unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

std::string type_of(const json::object& o, const Origin& origin) { return text_field(o, "type", origin); }

// ---- normalizers ----

// s.head after removing the characters `removed` picks: those of the head that stay.
template <class Removed>
std::size_t kept_head(const std::u32string& text, std::size_t head, Removed removed) {
  head = std::min(head, text.size());
  return head - static_cast<std::size_t>(
                    std::count_if(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(head), removed));
}

// s.head after a normal form: the head's own normal form (an ASCII character is its own).
std::size_t form_head(const std::u32string& text, std::size_t head, NormalForm form, std::string& scratch) {
  if (head == 0 || head > text.size() || (head == 1 && text[0] < 0x80)) return std::min(head, text.size());
  std::u32string first = text.substr(0, head);
  normalize_form(first, form, scratch);
  return first.size();
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip_accents, bool lowercase)
      : clean_(clean), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}

  // One pass cleans, pads CJK and lower-cases. Stripping accents needs NFD before lower-casing; text that
  // is all ASCII has no accents and is its own NFD, so only text with other characters takes the long way.
  void normalize(Scratch& s) const override {
    const bool ascii = clean_and_pad(s, lowercase_);
    if (!strip_accents_ || ascii) return;
    if (lowercase_) clean_and_pad(s, false);  // the lower-casing pass left s.text as it was
    s.head = form_head(s.text, s.head, NormalForm::nfd, s.utf8);
    normalize_form(s.text, NormalForm::nfd, s.utf8);
    s.head = kept_head(s.text, s.head, is_nonspacing_mark);
    std::erase_if(s.text, is_nonspacing_mark);
    if (lowercase_) lowercase(s);
  }
  std::string name() const override { return "BertNormalizer"; }

  // Cleans and pads s.text into s.other (lower-cased when asked) and swaps them, unless stripping accents
  // must go back to the original text: then s.text stays. Returns whether the text was all ASCII.
  bool clean_and_pad(Scratch& s, bool lower) const {
    s.other.clear();
    bool ascii = true;
    std::size_t head = s.head == 0 ? 0 : std::string::npos;
    for (std::size_t i = 0; i < s.text.size(); ++i) {
      if (i == s.head) head = s.other.size();
      const char32_t c = s.text[i];
      if (c < 0x80) {
        if (clean_ && c < 0x20 && c != '\t' && c != '\n' && c != '\r') continue;
        if (clean_ && c == 0x7F) continue;
        s.other.push_back(clean_ && c < 0x20 ? U' ' : lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
        continue;
      }
      ascii = false;
      if (clean_ && (c == 0xFFFD || is_control(c))) continue;
      const char32_t d = clean_ && is_whitespace(c) ? U' ' : c;
      if (chinese_ && is_chinese_char(d)) {
        s.other.push_back(U' ');
        s.other.push_back(d);
        s.other.push_back(U' ');
      } else if (lower) {
        append_lowercase(d, s.other);
      } else {
        s.other.push_back(d);
      }
    }
    if (!ascii && strip_accents_ && lower) return false;  // the caller starts again from s.text
    s.head = std::min(head, s.other.size());
    s.text.swap(s.other);
    return ascii;
  }

  static void lowercase(Scratch& s) {
    // In place unless the text holds U+0130, the one code point whose lowercase is two.
    if (std::find(s.text.begin(), s.text.end(), U'\u0130') == s.text.end()) {
      for (char32_t& c : s.text) c = lowercase_one(c);
      return;
    }
    s.other.clear();
    for (std::size_t i = 0; i < s.text.size(); ++i) {
      if (i == s.head) s.head = s.other.size();
      append_lowercase(s.text[i], s.other);
    }
    s.head = std::min(s.head, s.other.size());
    s.text.swap(s.other);
  }

 private:
  bool clean_, chinese_, strip_accents_, lowercase_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(Scratch& s) const override { BertNormalizer::lowercase(s); }
  std::string name() const override { return "Lowercase"; }
};

class StripAccents final : public Normalizer {
 public:
  void normalize(Scratch& s) const override {
    s.head = kept_head(s.text, s.head, is_combining_mark);
    std::erase_if(s.text, is_combining_mark);
  }
  std::string name() const override { return "StripAccents"; }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(Scratch& s) const override {
    std::size_t end = s.text.size(), begin = 0;
    if (right_)
      while (end > 0 && is_whitespace(s.text[end - 1])) --end;
    if (left_)
      while (begin < end && is_whitespace(s.text[begin])) ++begin;
    s.text.erase(end);
    s.text.erase(0, begin);
    s.head = std::min(s.head, end) > begin ? std::min(s.head, end) - begin : 0;
  }
  std::string name() const override { return "Strip"; }

 private:
  bool left_, right_;
};

class UnicodeForm final : public Normalizer {
 public:
  UnicodeForm(NormalForm form, std::string name) : form_(form), name_(std::move(name)) {}
  void normalize(Scratch& s) const override {
    s.head = form_head(s.text, s.head, form_, s.utf8);
    normalize_form(s.text, form_, s.utf8);
  }
  std::string name() const override { return name_; }

 private:
  NormalForm form_;
  std::string name_;
};

// Replace with a literal pattern: every non-overlapping occurrence, left to right.
class Replace final : public Normalizer {
 public:
  Replace(std::u32string pattern, std::u32string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(Scratch& s) const override {
    if (s.text.find(pattern_) == std::u32string::npos) return;
    s.other.clear();
    HeadCount head{s.head};
    std::size_t at = 0;
    for (std::size_t hit; (hit = s.text.find(pattern_, at)) != std::u32string::npos; at = hit + pattern_.size()) {
      head.copied(at, hit);
      head.replaced(hit + pattern_.size(), content_.size());
      s.other.append(s.text, at, hit - at);
      s.other.append(content_);
    }
    head.copied(at, s.text.size());
    s.head = head.kept;
    s.other.append(s.text, at);
    s.text.swap(s.other);
  }
  std::string name() const override { return "Replace"; }

 private:
  std::u32string pattern_, content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(Scratch& s) const override {
    if (s.text.empty()) return;
    s.text.insert(0, prefix_);
    if (s.head > 0) s.head += prefix_.size();
  }
  std::string name() const override { return "Prepend"; }

 private:
  std::u32string prefix_;
};

std::u32string code_points(std::string_view utf8) {
  std::u32string out;
  decode_utf8(utf8, out);
  return out;
}

using NormalizerList = std::vector<std::unique_ptr<Normalizer>>;
void add_normalizer(const json::value& v, const Origin& origin, NormalizerList& out);

using NormalizerBuilder = std::function<void(const json::object&, const Origin&, NormalizerList&)>;
const std::map<std::string, NormalizerBuilder, std::less<>>& normalizer_table() {
  static const std::map<std::string, NormalizerBuilder, std::less<>> table = {
      {"BertNormalizer",
       [](const json::object& o, const Origin& origin, NormalizerList& out) {
         const bool lowercase = flag(o, "lowercase", true, origin);
         out.push_back(std::make_unique<BertNormalizer>(flag(o, "clean_text", true, origin),
                                                        flag(o, "handle_chinese_chars", true, origin),
                                                        flag(o, "strip_accents", lowercase, origin), lowercase));
       }},
      {"Lowercase",
       [](const json::object&, const Origin&, NormalizerList& out) { out.push_back(std::make_unique<Lowercase>()); }},
      {"StripAccents", [](const json::object&, const Origin&,
                          NormalizerList& out) { out.push_back(std::make_unique<StripAccents>()); }},
      {"Strip",
       [](const json::object& o, const Origin& origin, NormalizerList& out) {
         out.push_back(
             std::make_unique<Strip>(flag(o, "strip_left", true, origin), flag(o, "strip_right", true, origin)));
       }},
      {"NFC", [](const json::object&, const Origin&,
                 NormalizerList& out) { out.push_back(std::make_unique<UnicodeForm>(NormalForm::nfc, "NFC")); }},
      {"NFD", [](const json::object&, const Origin&,
                 NormalizerList& out) { out.push_back(std::make_unique<UnicodeForm>(NormalForm::nfd, "NFD")); }},
      {"NFKC", [](const json::object&, const Origin&,
                  NormalizerList& out) { out.push_back(std::make_unique<UnicodeForm>(NormalForm::nfkc, "NFKC")); }},
      {"NFKD", [](const json::object&, const Origin&,
                  NormalizerList& out) { out.push_back(std::make_unique<UnicodeForm>(NormalForm::nfkd, "NFKD")); }},
      {"Replace",
       [](const json::object& o, const Origin& origin, NormalizerList& out) {
         const json::value* pattern = field(o, "pattern");
         if (pattern != nullptr && pattern->is_object() && pattern->as_object().contains("Regex"))
           return out.push_back(make_regex_replace(o, origin));
         if (pattern == nullptr || !pattern->is_object() || !pattern->as_object().contains("String"))
           refuse(origin, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
         const std::string literal = text_field(pattern->as_object(), "String", origin);
         if (literal.empty()) refuse(origin, "an empty pattern");
         out.push_back(std::make_unique<Replace>(code_points(literal), code_points(text_field(o, "content", origin))));
       }},
      {"Precompiled", [](const json::object& o, const Origin& origin,
                         NormalizerList& out) { out.push_back(make_precompiled(o, origin)); }},
      {"Prepend",
       [](const json::object& o, const Origin& origin, NormalizerList& out) {
         out.push_back(std::make_unique<Prepend>(code_points(text_field(o, "prepend", origin))));
       }},
      {"Sequence",
       [](const json::object& o, const Origin& origin, NormalizerList& out) {
         const json::value* list = field(o, "normalizers");
         if (list == nullptr || !list->is_array()) refuse(origin, "'normalizers' must be a list");
         for (std::size_t i = 0; i < list->as_array().size(); ++i)
           add_normalizer(list->as_array()[i], {origin.file, origin.at(fmt::format(".normalizers[{}]", i))}, out);
       }},
  };
  return table;
}

template <class Table>
std::string names_of(const Table& table) {
  std::string names;
  for (const auto& entry : table) names += (names.empty() ? "" : ", ") + entry.first;
  return names;
}

void add_normalizer(const json::value& v, const Origin& origin, NormalizerList& out) {
  const json::object& o = object_of(v, origin);
  const std::string type = type_of(o, origin);
  const auto& table = normalizer_table();
  const auto it = table.find(type);
  if (it == table.end())
    refuse(origin, fmt::format("normalizer '{}' is not supported (supported: {})", type, names_of(table)));
  it->second(o, origin, out);
}

// ---- pre-tokenizers ----

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
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(Scratch& s) const override {
    split_words(s, is_whitespace, [](char32_t) { return false; });
  }
  std::string name() const override { return "WhitespaceSplit"; }
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
};

using PreTokenizerList = std::vector<std::unique_ptr<PreTokenizer>>;
void add_pre_tokenizer(const json::value& v, const Origin& origin, PreTokenizerList& out);

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

void add_pre_tokenizer(const json::value& v, const Origin& origin, PreTokenizerList& out) {
  const json::object& o = object_of(v, origin);
  const std::string type = type_of(o, origin);
  const auto& table = pre_tokenizer_table();
  const auto it = table.find(type);
  if (it == table.end())
    refuse(origin, fmt::format("pre-tokenizer '{}' is not supported (supported: {})", type, names_of(table)));
  it->second(o, origin, out);
}

// ---- models ----

using ModelBuilder = std::function<std::unique_ptr<Model>(const json::object&, const Origin&)>;
const std::map<std::string, ModelBuilder, std::less<>>& model_table() {
  static const std::map<std::string, ModelBuilder, std::less<>> table = {
      {"BPE", make_bpe},
      {"WordPiece", make_wordpiece},
      {"Unigram", make_unigram},
  };
  return table;
}

// ---- post-processors ----

TemplatePiece special(std::int32_t id, std::int32_t type_id) { return {false, 0, {id}, type_id}; }
TemplatePiece sequence(int which, std::int32_t type_id) { return {true, which, {}, type_id}; }

std::int32_t token_pair_id(const json::object& o, std::string_view key, const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr || !v->is_array() || v->as_array().size() != 2 || !v->as_array()[0].is_string())
    refuse(origin, fmt::format("'{}' must be [token, id]", key));
  return id_value(v->as_array()[1], {origin.file, origin.at(fmt::format(".{}[1]", key))});
}

// A template piece's type_id (tokenizers: u32; flowline's type ids are int32).
std::int32_t type_id(const json::object& o, const Origin& origin) {
  const json::value* v = field(o, "type_id");
  return v == nullptr ? 0 : id_value(*v, {origin.file, origin.at(".type_id")}, "a type id");
}

std::vector<TemplatePiece> template_list(const json::object& o, std::string_view key, const json::object& specials,
                                         const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr || !v->is_array()) refuse(origin, fmt::format("'{}' must be a list", key));
  std::vector<TemplatePiece> out;
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const Origin here{origin.file, origin.at(fmt::format(".{}[{}]", key, i))};
    const json::object& piece = object_of(v->as_array()[i], here);
    if (const json::value* seq = field(piece, "Sequence")) {
      const json::object& so = object_of(*seq, here);
      const std::string id = text_field(so, "id", here);
      if (id != "A" && id != "B") refuse(here, fmt::format("sequence '{}' (A or B expected)", id));
      out.push_back(sequence(id == "A" ? 0 : 1, type_id(so, {here.file, here.at(".Sequence")})));
    } else if (const json::value* sp = field(piece, "SpecialToken")) {
      const json::object& so = object_of(*sp, here);
      const std::string name = text_field(so, "id", here);
      const auto found = specials.find(name);
      if (found == specials.end() || !found->value().is_object())
        refuse(here, fmt::format("special token '{}' is not in 'special_tokens'", name));
      const json::value* ids = field(found->value().as_object(), "ids");
      if (ids == nullptr || !ids->is_array()) refuse(here, fmt::format("special token '{}' has no ids", name));
      TemplatePiece p = special(0, type_id(so, {here.file, here.at(".SpecialToken")}));
      p.ids.clear();
      for (std::size_t k = 0; k < ids->as_array().size(); ++k) {
        const Origin at{origin.file, origin.at(fmt::format(".special_tokens[\"{}\"].ids[{}]", name, k))};
        p.ids.push_back(id_value(ids->as_array()[k], at));
      }
      out.push_back(std::move(p));
    } else {
      refuse(here, "a template piece is either {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return out;
}

using PostBuilder = std::function<PostProcessor(const json::object&, const Origin&)>;
const std::map<std::string, PostBuilder, std::less<>>& post_table() {
  static const std::map<std::string, PostBuilder, std::less<>> table = {
      {"BertProcessing",
       [](const json::object& o, const Origin& origin) {
         const std::int32_t cls = token_pair_id(o, "cls", origin), sep = token_pair_id(o, "sep", origin);
         return PostProcessor{"BertProcessing",
                              {special(cls, 0), sequence(0, 0), special(sep, 0)},
                              {special(cls, 0), sequence(0, 0), special(sep, 0), sequence(1, 1), special(sep, 1)}};
       }},
      {"ByteLevel",  // it changes offsets only
       [](const json::object&, const Origin&) {
         return PostProcessor{"ByteLevel", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
       }},
      {"Sequence",  // ByteLevel steps (offsets only) and at most one that adds special tokens
       [](const json::object& o, const Origin& origin) {
         const json::value* list = field(o, "processors");
         if (list == nullptr || !list->is_array()) refuse(origin, "'processors' must be a list");
         PostProcessor framing{"ByteLevel", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
         std::vector<std::string> names;
         for (std::size_t i = 0; i < list->as_array().size(); ++i) {
           const Origin here{origin.file, origin.at(fmt::format(".processors[{}]", i))};
           const json::object& po = object_of(list->as_array()[i], here);
           const std::string type = type_of(po, here);
           const auto found = post_table().find(type);
           if (found == post_table().end() || type == "Sequence")
             refuse(here, fmt::format("post-processor '{}' is not supported in a Sequence", type));
           PostProcessor p = found->second(po, here);
           if (type != "ByteLevel" && framing.name != "ByteLevel")
             refuse(here, "a Sequence with more than one post-processor that adds special tokens");
           if (type != "ByteLevel") framing = std::move(p);
           names.push_back(type);
         }
         framing.name = fmt::format("Sequence[{}]", fmt::join(names, ", "));
         return framing;
       }},
      {"RobertaProcessing",
       [](const json::object& o, const Origin& origin) {
         const std::int32_t cls = token_pair_id(o, "cls", origin), sep = token_pair_id(o, "sep", origin);
         return PostProcessor{
             "RobertaProcessing",
             {special(cls, 0), sequence(0, 0), special(sep, 0)},
             {special(cls, 0), sequence(0, 0), special(sep, 0), special(sep, 0), sequence(1, 0), special(sep, 0)}};
       }},
      {"TemplateProcessing",
       [](const json::object& o, const Origin& origin) {
         const json::value* specials = field(o, "special_tokens");
         static const json::object none;
         const json::object& sp = specials != nullptr && specials->is_object() ? specials->as_object() : none;
         return PostProcessor{"TemplateProcessing", template_list(o, "single", sp, origin),
                              template_list(o, "pair", sp, origin)};
       }},
  };
  return table;
}

}  // namespace

std::size_t PostProcessor::added(bool for_pair) const {
  std::size_t n = 0;
  for (const TemplatePiece& p : for_pair ? pair : single) n += p.ids.size();
  return n;
}

void build_components(const json::object& root, const std::string& file, Pipeline& p) {
  if (const json::value* v = field(root, "normalizer")) add_normalizer(*v, {file, "normalizer"}, p.normalizers);
  if (const json::value* v = field(root, "pre_tokenizer"))
    add_pre_tokenizer(*v, {file, "pre_tokenizer"}, p.pre_tokenizers);

  const json::value* model = field(root, "model");
  if (model == nullptr) refuse({file, "model"}, "no model");
  const Origin model_origin{file, "model"};
  const json::object& mo = object_of(*model, model_origin);
  const std::string type = field(mo, "type") == nullptr ? std::string("(none)") : type_of(mo, model_origin);
  const auto it = model_table().find(type);
  if (it == model_table().end())
    refuse(Origin{file, "model.type"},
           fmt::format("model '{}' is not supported (supported: {})", type, names_of(model_table())));
  p.model = it->second(mo, model_origin);

  if (const json::value* v = field(root, "post_processor")) {
    const Origin origin{file, "post_processor"};
    const json::object& po = object_of(*v, origin);
    const std::string post_type = type_of(po, origin);
    const auto found = post_table().find(post_type);
    if (found == post_table().end())
      refuse(origin,
             fmt::format("post-processor '{}' is not supported (supported: {})", post_type, names_of(post_table())));
    p.post = found->second(po, origin);
    const auto sequences = std::count_if(p.post.single.begin(), p.post.single.end(),
                                         [](const TemplatePiece& piece) { return piece.is_sequence; });
    const auto a = std::count_if(p.post.single.begin(), p.post.single.end(),
                                 [](const TemplatePiece& piece) { return piece.is_sequence && piece.sequence == 0; });
    if (sequences != 1 || a != 1) refuse(origin, "the single template must hold the sequence A once, and not B");
  } else {
    p.post = PostProcessor{"none", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
  }
}

}  // namespace flowline::models::tokenizers
