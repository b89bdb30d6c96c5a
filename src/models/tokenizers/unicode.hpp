// Character classes as Hugging Face `tokenizers` (Rust) defines them: its own tables, read from it by
// scripts/make_char_tables.py (char_tables.inc), since they differ from utf8proc's newer Unicode; case
// mapping and normal forms come from utf8proc.
#pragma once

#include <string>

namespace flowline::models::tokenizers {

// Rust's char::is_whitespace (the White_Space property).
bool is_whitespace(char32_t c);
// tokenizers' is_control: general category C* except tab, newline and carriage return.
bool is_control(char32_t c);
// BERT's punctuation: ASCII punctuation or general category P*.
bool is_bert_punctuation(char32_t c);
// The Whitespace pre-tokenizer's regex classes: \w (a word character) and \s.
bool is_word_char(char32_t c);
bool is_regex_space(char32_t c);
// The CJK ideograph blocks BERT pads with spaces.
bool is_chinese_char(char32_t c);
// A nonspacing mark (Mn: what BertNormalizer's strip_accents removes).
bool is_nonspacing_mark(char32_t c);
// A combining mark (Mn, Mc, Me: what the StripAccents normalizer removes).
bool is_combining_mark(char32_t c);
// Rust's char::to_lowercase, appended to `out`.
void append_lowercase(char32_t c, std::u32string& out);
// The same for every code point but U+0130 (whose lowercase is two code points).
char32_t lowercase_one(char32_t c);
// Unicode normalization forms through utf8proc; `scratch` is a UTF-8 working buffer.
enum class NormalForm { nfc, nfd, nfkc, nfkd };
void normalize_form(std::u32string& text, NormalForm form, std::string& scratch);
// Whether `form` gives `text` back unchanged, every code point in its place (ASCII, or only code points the form
// leaves alone in any text: normalize_form's shortcut past utf8proc).
bool form_leaves_alone(const std::u32string& text, NormalForm form);
bool is_ascii(const std::u32string& text);

}  // namespace flowline::models::tokenizers
