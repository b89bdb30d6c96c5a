// Character classes of Hugging Face `tokenizers`, answered by utf8proc.
#include "unicode.hpp"

#include "pipeline.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace flowline::models::tokenizers {

namespace {

struct CharRange {
  char32_t first, last;
};
#include "char_tables.inc"

template <std::size_t N>
bool in_table(const CharRange (&table)[N], char32_t c) {
  const auto it = std::upper_bound(std::begin(table), std::end(table), c,
                                   [](char32_t v, const CharRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

}  // namespace

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return in_table(k_whitespace, c);
}

bool is_control(char32_t c) {
  if (c < 0x80) return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
  return in_table(k_control, c);
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return in_table(k_punctuation, c);
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  return in_table(k_word, c);
}

bool is_regex_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return in_table(k_regex_space, c);
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t c) { return c >= 0x300 && in_table(k_nonspacing_mark, c); }
bool is_combining_mark(char32_t c) { return c >= 0x300 && in_table(k_mark, c); }

char32_t lowercase_one(char32_t c) {
  if (c < 0x80) return c - U'A' < 26u ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

void append_lowercase(char32_t c, std::u32string& out) {
  if (c == 0x130) {  // the one code point whose lowercase is two: i and a combining dot above
    out.push_back(U'i');
    out.push_back(0x307);
  } else {
    out.push_back(lowercase_one(c));
  }
}

bool is_ascii(const std::u32string& text) {
  for (const char32_t c : text)
    if (c >= 0x80) return false;
  return true;
}

namespace {

int form_options(NormalForm form) {
  switch (form) {
    case NormalForm::nfc:
      return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case NormalForm::nfd:
      return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case NormalForm::nfkc:
      return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case NormalForm::nfkd:
      return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  return UTF8PROC_STABLE;
}

void map_form(std::u32string& text, NormalForm form, std::string& scratch) {
  encode_utf8(text, scratch);
  utf8proc_uint8_t* mapped = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(scratch.data()),
                              static_cast<utf8proc_ssize_t>(scratch.size()), &mapped,
                              static_cast<utf8proc_option_t>(form_options(form)));
  if (n < 0) throw std::runtime_error(utf8proc_errmsg(n));  // only on allocation failure: the input is valid
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  decode_utf8(std::string_view(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n)), text);
}

// The code points a normal form leaves alone in any text made only of such code points, so that such a
// text (most text: curly quotes, dashes, accented Latin letters, whole scripts) skips utf8proc. Derived
// from utf8proc's own data, once per form (about 7 ms, at its first use), for [0, kLimit) (every
// decomposition lies there); beyond, none.
// A code point c is inert when
//  - its combining class is 0 (nothing reorders around it),
//  - it is no later part of any code point's decomposition (so no composition takes it as the second
//    element; Hangul's vowels and trailing consonants among them),
//  - the form maps c alone to c (so singletons and composition exclusions are out), and
//  - its decomposition does not begin with such a later part (it recomposes on its own).
// Then decomposing, reordering and composing such a text gives it back: every code point is a starter
// that nothing composes onto. The decomposition forms (NFD, NFKD) also need c to have no decomposition.
class InertTable {
 public:
  static constexpr char32_t kLimit = 0x30000;

  explicit InertTable(NormalForm form) : bits_(kLimit / 64, 0) {
    const bool compat = form == NormalForm::nfkc || form == NormalForm::nfkd;
    const bool composes = form == NormalForm::nfc || form == NormalForm::nfkc;
    const int options = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    std::vector<bool> later(kLimit, false);
    std::vector<char32_t> first(kLimit, 0);
    std::vector<bool> decomposes(kLimit, false);
    utf8proc_int32_t buffer[32];
    for (char32_t c = 0; c < kLimit; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      int boundclass = 0;
      const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 32,
                                             static_cast<utf8proc_option_t>(options), &boundclass);
      if (n < 1 || n > 32) continue;
      first[c] = static_cast<char32_t>(buffer[0]);
      decomposes[c] = n != 1 || buffer[0] != static_cast<utf8proc_int32_t>(c);
      for (utf8proc_ssize_t i = 1; i < n; ++i)
        if (static_cast<char32_t>(buffer[i]) < kLimit) later[static_cast<std::size_t>(buffer[i])] = true;
    }
    for (char32_t c = 0x1161; c <= 0x1175; ++c) later[c] = true;  // Hangul vowels (L + V)
    // Hangul trailing consonants (LV + T), and U+11A7 before them, which utf8proc also composes
    for (char32_t c = 0x11A7; c <= 0x11C2; ++c) later[c] = true;
    std::string scratch;
    std::u32string alone;
    for (char32_t c = 0; c < kLimit; ++c) {
      if ((c >= 0xD800 && c <= 0xDFFF) || (first[c] == 0 && c != 0)) continue;
      if (utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class != 0 || later[c]) continue;
      if (decomposes[c]) {
        if (!composes || first[c] >= kLimit || later[first[c]]) continue;
        alone.assign(1, c);
        map_form(alone, form, scratch);
        if (alone.size() != 1 || alone[0] != c) continue;
      }
      bits_[c / 64] |= std::uint64_t{1} << (c % 64);
    }
  }

  bool inert(char32_t c) const { return c < kLimit && ((bits_[c / 64] >> (c % 64)) & 1) != 0; }

 private:
  std::vector<std::uint64_t> bits_;
};

const InertTable& inert_table(NormalForm form) {
  switch (form) {
    case NormalForm::nfc: {
      static const InertTable table(NormalForm::nfc);
      return table;
    }
    case NormalForm::nfd: {
      static const InertTable table(NormalForm::nfd);
      return table;
    }
    case NormalForm::nfkc: {
      static const InertTable table(NormalForm::nfkc);
      return table;
    }
    case NormalForm::nfkd:
      break;
  }
  static const InertTable table(NormalForm::nfkd);
  return table;
}

}  // namespace

bool form_leaves_alone(const std::u32string& text, NormalForm form) {
  if (is_ascii(text)) return true;  // every normal form leaves ASCII as it is
  const InertTable& table = inert_table(form);
  return std::all_of(text.begin(), text.end(), [&](char32_t c) { return c < 0x80 || table.inert(c); });
}

void normalize_form(std::u32string& text, NormalForm form, std::string& scratch) {
  if (!form_leaves_alone(text, form)) map_form(text, form, scratch);
}

}  // namespace flowline::models::tokenizers
