// The normalizers and the table that builds them from tokenizer.json's "normalizer" object: BertNormalizer,
// Lowercase, StripAccents, Strip, NFC/NFD/NFKC/NFKD, Replace (a String pattern here, a Regex one in
// byte_level.cpp), Prepend, Precompiled (sentencepiece.cpp) and Sequence. Adding one: a class here (or in a
// file of its own, its builder declared in pipeline.hpp) and a line in the table.
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

}  // namespace

void add_normalizer(const json::value& v, const Origin& origin, NormalizerList& out) {
  const json::object& o = object_of(v, origin);
  const std::string type = type_of(o, origin);
  const auto& table = normalizer_table();
  const auto it = table.find(type);
  if (it == table.end())
    refuse(origin, fmt::format("normalizer '{}' is not supported (supported: {})", type, names_of(table)));
  it->second(o, origin, out);
}

}  // namespace flowline::models::tokenizers
