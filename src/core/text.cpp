// Text utilities: paragraph and sentence splitting with byte and character offsets (BOM, whitespace, abbreviations).
#include "flowline/text.hpp"

#include <array>
#include <string>

namespace flowline {

namespace {
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n'; }
bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Counts code points in [from, to) of text; used to turn byte offsets into character offsets.
std::size_t count_chars(std::string_view text, std::size_t from, std::size_t to) {
  std::size_t n = 0;
  for (std::size_t i = from; i < to; ++i) n += !is_continuation(static_cast<unsigned char>(text[i]));
  return n;
}

// Converts byte spans (sorted, non-overlapping) into TextSpans with character offsets and line numbers.
std::vector<TextSpan> with_char_offsets(std::string_view text,
                                        const std::vector<std::pair<std::size_t, std::size_t>>& spans) {
  std::vector<TextSpan> out;
  out.reserve(spans.size());
  std::size_t byte = 0, chars = 0, line = 1;
  for (const auto& [begin, end] : spans) {
    for (; byte < begin; ++byte) {
      const auto c = static_cast<unsigned char>(text[byte]);
      chars += !is_continuation(c);
      line += c == '\n';
    }
    TextSpan span;
    span.byte_begin = begin;
    span.byte_end = end;
    span.char_begin = chars;
    span.char_end = chars + count_chars(text, begin, end);
    span.line = line;
    out.push_back(span);
  }
  return out;
}

std::size_t skip_bom(std::string_view text) { return text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0; }

// Trims white space from both ends of [begin, end); returns an empty range when nothing is left.
std::pair<std::size_t, std::size_t> trim(std::string_view text, std::size_t begin, std::size_t end) {
  while (begin < end && is_space(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && is_space(static_cast<unsigned char>(text[end - 1]))) --end;
  return {begin, end};
}

std::vector<std::pair<std::size_t, std::size_t>> paragraph_bytes(std::string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t paragraph_start = skip_bom(text);
  std::size_t pos = paragraph_start;
  auto flush = [&](std::size_t end) {
    auto [b, e] = trim(text, paragraph_start, end);
    if (b < e) spans.emplace_back(b, e);
  };
  while (pos < text.size()) {
    std::size_t line_end = text.find('\n', pos);
    if (line_end == std::string_view::npos) line_end = text.size();
    bool blank = true;
    for (std::size_t i = pos; i < line_end; ++i) {
      if (!is_space(static_cast<unsigned char>(text[i]))) {
        blank = false;
        break;
      }
    }
    if (blank) {
      flush(pos);
      paragraph_start = line_end;
    }
    pos = line_end + 1;
  }
  flush(text.size());
  return spans;
}

bool is_abbreviation(std::string_view text, std::size_t dot) {
  // The word before the dot.
  std::size_t begin = dot;
  while (begin > 0 && !is_space(static_cast<unsigned char>(text[begin - 1])) && text[begin - 1] != '(' &&
         text[begin - 1] != '"') {
    --begin;
  }
  const std::string_view word = text.substr(begin, dot - begin);
  static constexpr std::array<std::string_view, 14> kAbbreviations = {"Mr",   "Mrs",  "Ms",  "Dr",  "St", "Sr",  "Jr",
                                                                      "Prof", "Capt", "Col", "Gen", "Lt", "e.g", "i.e"};
  for (auto a : kAbbreviations) {
    if (word == a) return true;
  }
  // A single capital letter: an initial ("J. Smith").
  return word.size() == 1 && word[0] >= 'A' && word[0] <= 'Z';
}
}  // namespace

std::vector<TextSpan> split_paragraphs(std::string_view text) { return with_char_offsets(text, paragraph_bytes(text)); }

std::vector<TextSpan> split_sentences(std::string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (const auto& [p_begin, p_end] : paragraph_bytes(text)) {
    std::size_t start = p_begin;
    std::size_t i = p_begin;
    while (i < p_end) {
      std::size_t terminator_end = 0;
      const char c = text[i];
      if (c == '.' || c == '!' || c == '?') {
        terminator_end = i + 1;
      } else if (text.substr(i, 3) == "\xE2\x80\xA6") {  // …
        terminator_end = i + 3;
      }
      if (terminator_end == 0 || (c == '.' && is_abbreviation(text, i))) {
        ++i;
        continue;
      }
      // Absorb repeated terminators and closing quotes or brackets: ?!, ." , .’ , .)
      std::size_t end = terminator_end;
      while (end < p_end) {
        const char d = text[end];
        if (d == '.' || d == '!' || d == '?' || d == '"' || d == '\'' || d == ')' || d == ']') {
          ++end;
        } else if (text.substr(end, 3) == "\xE2\x80\x99" || text.substr(end, 3) == "\xE2\x80\x9D") {  // ’ ”
          end += 3;
        } else {
          break;
        }
      }
      std::size_t next = end;
      while (next < p_end && is_space(static_cast<unsigned char>(text[next]))) ++next;
      const bool continues_lower = next < p_end && text[next] >= 'a' && text[next] <= 'z';
      if (end >= p_end || (is_space(static_cast<unsigned char>(text[end])) && !continues_lower)) {
        auto [b, e] = trim(text, start, end);
        if (b < e) spans.emplace_back(b, e);
        start = end;
      }
      i = end;
    }
    auto [b, e] = trim(text, start, p_end);
    if (b < e) spans.emplace_back(b, e);
  }
  return with_char_offsets(text, spans);
}

}  // namespace flowline
