// Character classes of Hugging Face `tokenizers`, answered by utf8proc.
#include "unicode.hpp"

#include "pipeline.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <stdexcept>

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

void append_lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {  // the one code point whose lowercase is two: i and a combining dot above
    out.push_back(U'i');
    out.push_back(0x307);
  } else {
    out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

bool is_ascii(const std::u32string& text) {
  for (const char32_t c : text)
    if (c >= 0x80) return false;
  return true;
}

void normalize_form(std::u32string& text, NormalForm form, std::string& scratch) {
  if (is_ascii(text)) return;  // every normal form leaves ASCII as it is
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  encode_utf8(text, scratch);
  utf8proc_uint8_t* mapped = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(scratch.data()),
                   static_cast<utf8proc_ssize_t>(scratch.size()), &mapped, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::runtime_error(utf8proc_errmsg(n));  // only on allocation failure: the input is valid
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  decode_utf8(std::string_view(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n)), text);
}

}  // namespace flowline::models::tokenizers
