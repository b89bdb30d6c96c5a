// flowline/text.hpp — splitting text into paragraphs and sentences with offsets into the source.
//
// Pure functions, thread-safe. Offsets are given twice: in bytes (for slicing the UTF-8 string) and in
// characters (Unicode code points, as Python and most NLP tools count them).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace flowline {

struct TextSpan {
  std::size_t byte_begin = 0;
  std::size_t byte_end = 0;
  std::size_t char_begin = 0;
  std::size_t char_end = 0;
  std::size_t line = 1;  // 1-based line of the first character
};

// Paragraphs: runs of lines separated by lines holding only white space; each span is trimmed of white
// space at both ends. A byte-order mark at the start of the text is skipped.
std::vector<TextSpan> split_paragraphs(std::string_view text);

// Sentences: ends at '.', '!', '?' or '…' (with closing quotes and brackets) followed by white space, or
// at a blank line; common abbreviations (Mr., Mrs., Dr., St., e.g., i.e.), initials, and a terminator
// followed by a lower-case word (“Is it so?” he asked) do not end one.
std::vector<TextSpan> split_sentences(std::string_view text);

}  // namespace flowline
