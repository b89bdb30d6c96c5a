// The normalizers and the table that builds them from tokenizer.json's "normalizer" object: BertNormalizer,
// Lowercase, StripAccents, Strip, NFC/NFD/NFKC/NFKD, Replace (a String pattern here, a Regex one in
// byte_level.cpp), Prepend, Precompiled (sentencepiece.cpp) and Sequence. Adding one: a class here (or in a
// file of its own, its builder declared in pipeline.hpp) and a line in the table.
#include "builders.hpp"
#include "unicode.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

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

// Removes the characters `removed` picks from s.text, and their places from s.align when offsets are tracked.
template <class Removed>
void erase_aligned(Scratch& s, Removed removed) {
  if (s.track) {  // from the first character removed on (most text has none)
    std::size_t kept = static_cast<std::size_t>(std::find_if(s.text.begin(), s.text.end(), removed) - s.text.begin());
    for (std::size_t i = kept; i < s.text.size(); ++i)
      if (!removed(s.text[i])) s.align[kept++] = s.align[i];
    s.align.resize(kept);
  }
  std::erase_if(s.text, removed);
}

// A normal form with offsets, as tokenizers' alignments give them: each character's decomposition is its
// first character taking its place and the rest inserted after it; combining marks reordered carry those
// changes along (so places stay by position); a composed character takes its starter's change less one per
// mark it absorbed. Then the changes are applied in order (transform_aligned).
void aligned_form(Scratch& s, NormalForm form) {
  if (form_leaves_alone(s.text, form)) return;  // the text and its places as they are (most text)
  const bool compat = form == NormalForm::nfkc || form == NormalForm::nfkd;
  const bool compose = form == NormalForm::nfc || form == NormalForm::nfkc;
  std::u32string one;
  thread_local std::vector<std::pair<char32_t, int>> decomposed;
  thread_local std::vector<int> changes;
  thread_local std::vector<bool> taken;
  decomposed.clear();
  for (const char32_t c : s.text) {
    if (c < 0x80) {  // ASCII is its own decomposition
      decomposed.emplace_back(c, 0);
      continue;
    }
    one.assign(1, c);
    normalize_form(one, compat ? NormalForm::nfkd : NormalForm::nfd, s.utf8);
    for (std::size_t k = 0; k < one.size(); ++k) decomposed.emplace_back(one[k], k == 0 ? 0 : 1);
  }
  const auto ccc = [](char32_t c) { return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class; };
  for (std::size_t i = 0; i < decomposed.size();) {  // canonical order: marks sorted by class, stably
    std::size_t j = i;
    while (j < decomposed.size() && ccc(decomposed[j].first) != 0) ++j;
    std::stable_sort(decomposed.begin() + static_cast<std::ptrdiff_t>(i),
                     decomposed.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](const auto& x, const auto& y) { return ccc(x.first) < ccc(y.first); });
    i = j == i ? i + 1 : j;
  }
  normalize_form(s.text, form, s.utf8);
  taken.assign(decomposed.size(), false);
  changes.clear();
  std::size_t at = 0;
  for (const char32_t c : s.text) {
    while (at < decomposed.size() && taken[at]) ++at;
    if (at >= decomposed.size()) {
      changes.push_back(1);
      continue;
    }
    int change = decomposed[at].second;
    taken[at] = true;
    if (compose && c >= 0x80) {
      one.assign(1, c);
      normalize_form(one, NormalForm::nfd, s.utf8);
      for (std::size_t k = 1; k < one.size(); ++k)
        for (std::size_t j = at + 1; j < decomposed.size() && j <= at + 16; ++j)
          if (!taken[j] && decomposed[j].first == one[k]) {
            taken[j] = true;
            change += decomposed[j].second - 1;
            break;
          }
    }
    changes.push_back(change);
  }
  transform_aligned(s, changes);
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
    if (s.track)
      aligned_form(s, NormalForm::nfd);
    else
      normalize_form(s.text, NormalForm::nfd, s.utf8);
    s.head = kept_head(s.text, s.head, is_nonspacing_mark);
    erase_aligned(s, is_nonspacing_mark);
    if (lowercase_) lowercase(s);
  }
  std::string name() const override { return "BertNormalizer"; }

  // Cleans and pads s.text into s.other (lower-cased when asked) and swaps them, unless stripping accents
  // must go back to the original text: then s.text stays. Returns whether the text was all ASCII.
  // With offsets, the places stay s.align's while each character makes one in its place (most text): they are
  // copied into s.other_align only from the first character dropped or made into several on (moved_places).
  bool clean_and_pad(Scratch& s, bool lower) const {
    s.other.clear();
    s.other_align.clear();
    bool ascii = true, same_places = true;
    std::size_t head = s.head == 0 ? 0 : std::string::npos;
    for (std::size_t i = 0; i < s.text.size(); ++i) {
      if (i == s.head) head = s.other.size();
      const char32_t c = s.text[i];
      if (c < 0x80) {
        if (clean_ && c < 0x20 && c != '\t' && c != '\n' && c != '\r') continue;
        if (clean_ && c == 0x7F) continue;
        s.other.push_back(clean_ && c < 0x20 ? U' ' : lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
        if (s.track && !(same_places && s.other.size() == i + 1)) moved_places(s, i, 1, same_places);
        continue;
      }
      ascii = false;
      if (clean_ && (c == 0xFFFD || is_control(c))) continue;
      const char32_t d = clean_ && is_whitespace(c) ? U' ' : c;
      const std::size_t made = s.other.size();
      if (chinese_ && is_chinese_char(d)) {
        s.other.push_back(U' ');
        s.other.push_back(d);
        s.other.push_back(U' ');
      } else if (lower) {
        append_lowercase(d, s.other);
      } else {
        s.other.push_back(d);
      }
      if (s.track && !(same_places && made == i && s.other.size() == i + 1))  // CJK padding, case: one place
        moved_places(s, i, s.other.size() - made, same_places);
    }
    if (!ascii && strip_accents_ && lower) return false;  // the caller starts again from s.text
    s.head = std::min(head, s.other.size());
    s.text.swap(s.other);
    if (s.track && same_places) s.align.resize(s.text.size());  // the first places, as they were
    if (s.track && !same_places) s.align.swap(s.other_align);
    return ascii;
  }
  // The places of the `made` characters s.text[i] made last in s.other; the first time, the places of those
  // before them (each in its own character's place so far) copied first.
  static void moved_places(Scratch& s, std::size_t i, std::size_t made, bool& same_places) {
    if (same_places) {
      s.other_align.assign(s.align.begin(), s.align.begin() + static_cast<std::ptrdiff_t>(s.other.size() - made));
      same_places = false;
    }
    fill_places(s.other_align, s.other.size(), s.align[i]);
  }

  static void lowercase(Scratch& s) {
    // In place unless the text holds U+0130, the one code point whose lowercase is two.
    if (std::find(s.text.begin(), s.text.end(), U'\u0130') == s.text.end()) {
      for (char32_t& c : s.text) c = lowercase_one(c);
      return;
    }
    s.other.clear();
    s.other_align.clear();
    for (std::size_t i = 0; i < s.text.size(); ++i) {
      if (i == s.head) s.head = s.other.size();
      append_lowercase(s.text[i], s.other);
      if (s.track) fill_places(s.other_align, s.other.size(), s.align[i]);
    }
    s.head = std::min(s.head, s.other.size());
    s.text.swap(s.other);
    if (s.track) s.align.swap(s.other_align);
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
    erase_aligned(s, is_combining_mark);
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
    if (s.track) {
      s.align.resize(end);
      s.align.erase(s.align.begin(), s.align.begin() + static_cast<std::ptrdiff_t>(begin));
    }
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
    if (s.track)
      aligned_form(s, form_);
    else
      normalize_form(s.text, form_, s.utf8);
  }
  std::string name() const override { return name_; }
  bool keeps_places() const override { return true; }

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
    if (pattern_.size() == 1 && content_.size() == 1) {
      // One character for one (Llama's " " -> "▁"): each keeps its place, the head its length.
      std::replace(s.text.begin(), s.text.end(), pattern_[0], content_[0]);
      return;
    }
    if (s.text.find(pattern_) == std::u32string::npos) return;
    s.other.clear();
    s.other_align.clear();
    HeadCount head{s.head};
    std::size_t at = 0;
    for (std::size_t hit; (hit = s.text.find(pattern_, at)) != std::u32string::npos; at = hit + pattern_.size()) {
      head.copied(at, hit);
      head.replaced(hit + pattern_.size(), content_.size());
      s.other.append(s.text, at, hit - at);
      s.other.append(content_);
      past_bound(s, s.other.size());
      if (s.track) replaced_aligned(s, at, hit, hit + pattern_.size(), content_.size());
    }
    head.copied(at, s.text.size());
    s.head = head.kept;
    s.other.append(s.text, at);
    if (s.track) replaced_aligned(s, at, s.text.size(), s.text.size(), 0);
    s.text.swap(s.other);
    if (s.track) s.align.swap(s.other_align);
  }
  std::string name() const override { return "Replace"; }
  bool keeps_places() const override { return true; }

 private:
  std::u32string pattern_, content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(Scratch& s) const override {
    if (s.text.empty()) return;
    s.text.insert(0, prefix_);
    if (s.track) s.align.insert(s.align.begin(), prefix_.size(), s.align.front());
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

void replaced_aligned(Scratch& s, std::size_t from, std::size_t to, std::size_t match_end, std::size_t content) {
  end_identity(s);
  s.other_align.insert(s.other_align.end(), s.align.begin() + static_cast<std::ptrdiff_t>(from),
                       s.align.begin() + static_cast<std::ptrdiff_t>(to));
  if (content == 0) return;
  // An empty match at the start (a Regex such as "^" or "x*") has no character before it: tokenizers places
  // what it inserts there where the text starts, as transform_aligned() does.
  const Align place = match_end > 0     ? s.align[match_end - 1]
                      : s.align.empty() ? Align{}
                                        : Align{s.align.front().begin, s.align.front().begin};
  s.other_align.insert(s.other_align.end(), content, place);
}

void replaced_places(Scratch& s, const std::vector<Span>& matches, std::size_t content) {
  const bool shifts = s.identity && s.shifts.empty() && content == 1 &&
                      std::all_of(matches.begin(), matches.end(), [](Span m) { return m.end > m.begin; });
  if (shifts) {
    // The replacement of a match of n characters, at its start less what the matches before took (less one each),
    // takes the place of the match's last: the places from it on move by n - 1 more.
    std::uint32_t shift = 0;
    for (const Span m : matches) {
      if (m.end - m.begin == 1) continue;
      const auto at = static_cast<std::uint32_t>(m.begin - shift);
      shift += static_cast<std::uint32_t>(m.end - m.begin - 1);
      s.shifts.push_back({at, shift});
    }
    s.identity_chars = s.other.size();
    return;
  }
  s.other_align.clear();
  std::size_t previous = 0;
  for (const Span m : matches) {
    replaced_aligned(s, previous, m.begin, m.end, content);
    previous = m.end;
  }
  replaced_aligned(s, previous, s.text.size(), s.text.size(), 0);
  s.align.swap(s.other_align);
}

void transform_aligned(Scratch& s, const std::vector<int>& changes) {
  end_identity(s);
  s.other_align.clear();
  std::size_t taken = 0;
  const Align none = s.align.empty() ? Align{} : Align{s.align.front().begin, s.align.front().begin};
  const auto at = [&](std::size_t i) {
    return i < s.align.size() ? s.align[i] : s.align.empty() ? none : s.align.back();
  };
  for (const int change : changes) {
    if (change > 0) {
      s.other_align.push_back(taken == 0 ? none : at(taken - 1));
      continue;
    }
    s.other_align.push_back(at(taken));
    taken += 1 + static_cast<std::size_t>(-change);
  }
  s.align.swap(s.other_align);
}

void add_normalizer(const json::value& v, const Origin& origin, NormalizerList& out) {
  const json::object& o = object_of(v, origin);
  const std::string type = type_of(o, origin);
  const auto& table = normalizer_table();
  const auto it = table.find(type);
  if (it == table.end())
    refuse(origin, fmt::format("normalizer '{}' is not supported (supported: {})", type, names_of(table)));
  const std::size_t before = out.size();
  it->second(o, origin, out);
  for (std::size_t i = before; i < out.size(); ++i)  // a Sequence's members have their own already
    if (out[i]->origin.file.empty() && out[i]->origin.path.empty()) out[i]->origin = origin;
}

}  // namespace flowline::models::tokenizers
