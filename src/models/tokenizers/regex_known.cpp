// The pre-tokenizer patterns most checkpoints ship (GPT-2's, Qwen2's, Llama 3's), matched by hand over
// ASCII text: PCRE2 spent about 40% of a byte-level BPE's time finding their matches, one call per word.
// Each matcher answers only what it can decide from ASCII code points alone; at the first other code point
// it needs to look at (a Unicode letter, number or space might continue or end a run) it gives up, and
// Regex::search asks PCRE2 from the same position. tests/models/test_tokenizers.cpp checks every answer
// against PCRE2's.
#include "regex.hpp"

namespace flowline::models::tokenizers {

namespace {

constexpr std::string_view k_qwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view k_llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A code point's class, as far as ASCII decides it: \p{L}, \p{N}, \s (Oniguruma's: tab to carriage
// return and space), or none of them; `unknown` for every other code point.
enum class Kind { letter, number, space, other, unknown };

Kind kind(char32_t c) {
  if (c >= 0x80) return Kind::unknown;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Kind::letter;
  if (c >= '0' && c <= '9') return Kind::number;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return Kind::space;
  return Kind::other;
}

// A run of `k` from `at`: where it ends, or npos when an unknown code point would decide that.
std::size_t run_end(std::u32string_view t, std::size_t at, Kind k) {
  while (at < t.size()) {
    const Kind here = kind(t[at]);
    if (here == Kind::unknown) return std::u32string_view::npos;
    if (here != k) break;
    ++at;
  }
  return at;
}

char32_t lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d at `i` (t[i] is the apostrophe): the match's length, 0 for none, -1 when a code
// point beyond ASCII would decide it (caseless 's' also matches U+017F).
int contraction(std::u32string_view t, std::size_t i, bool caseless) {
  auto at = [&](std::size_t k) -> char32_t { return i + k < t.size() ? t[i + k] : 0; };
  const char32_t c1 = at(1);
  if (c1 >= 0x80) return -1;
  const char32_t l1 = caseless ? lower(c1) : c1;
  if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return 2;
  if (l1 != 'r' && l1 != 'v' && l1 != 'l') return 0;
  const char32_t c2 = at(2);
  if (c2 >= 0x80) return -1;
  const char32_t l2 = caseless ? lower(c2) : c2;
  return (l1 == 'l' ? l2 == 'l' : l2 == 'e') ? 3 : 0;
}

constexpr std::size_t npos = std::u32string_view::npos;

// \s+(?!\S)|\s+ at a run of spaces [i, j): the whole run at the text's end or before another space; else
// all but its last space (which then starts the next word), unless the run is that one space.
std::size_t spaces_end(std::u32string_view t, std::size_t i, std::size_t j) {
  return j == t.size() || j - i < 2 ? j : j - 1;
}

// What each pattern here begins with: the code point at i must be ASCII, and an apostrophe may start a
// contraction. True when that decides the answer: `end` is then the match's end, or npos for PCRE2.
bool decided_at_start(std::u32string_view t, std::size_t i, bool caseless, std::size_t& end) {
  end = npos;
  if (kind(t[i]) == Kind::unknown) return true;
  if (t[i] != '\'') return false;
  const int n = contraction(t, i, caseless);
  if (n > 0) end = i + static_cast<std::size_t>(n);
  return n != 0;
}

// GPT-2's: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::size_t gpt2(std::u32string_view t, std::size_t i) {
  if (std::size_t end; decided_at_start(t, i, false, end)) return end;
  const Kind k0 = kind(t[i]);
  const std::size_t k = t[i] == ' ' ? i + 1 : i;
  if (k < t.size()) {
    const Kind kk = kind(t[k]);
    if (kk == Kind::unknown) return npos;
    if (kk == Kind::letter || kk == Kind::number || kk == Kind::other) return run_end(t, k, kk);
  }
  if (k0 != Kind::space) return npos;  // not reached for ASCII: every other class matched above
  const std::size_t j = run_end(t, i, Kind::space);
  return j == npos ? npos : spaces_end(t, i, j);
}

// Qwen2's pattern (k_qwen2 above, digits 1) and Llama 3's (\p{N}{1,3}: digits 3).
std::size_t qwen(std::u32string_view t, std::size_t i, std::size_t digits) {
  if (std::size_t end; decided_at_start(t, i, true, end)) return end;
  const Kind k0 = kind(t[i]);
  if (k0 == Kind::letter) return run_end(t, i, Kind::letter);
  if (k0 != Kind::number && t[i] != '\r' && t[i] != '\n' && i + 1 < t.size()) {
    const Kind k1 = kind(t[i + 1]);
    if (k1 == Kind::unknown) return npos;
    if (k1 == Kind::letter) return run_end(t, i + 1, Kind::letter);
  }
  if (k0 == Kind::number) {
    std::size_t j = i + 1;
    for (; j < t.size() && j - i < digits; ++j) {
      const Kind k = kind(t[j]);
      if (k == Kind::unknown) return npos;
      if (k != Kind::number) break;
    }
    return j;
  }
  const std::size_t k = t[i] == ' ' ? i + 1 : i;
  if (k < t.size()) {
    const Kind kk = kind(t[k]);
    if (kk == Kind::unknown) return npos;
    if (kk == Kind::other) {
      std::size_t j = run_end(t, k, Kind::other);
      if (j == npos) return npos;
      while (j < t.size() && (t[j] == '\r' || t[j] == '\n')) ++j;
      return j;
    }
  }
  // A run of spaces [i, j): up to its last line break, if it has one; else \s+(?!\S)|\s+.
  const std::size_t j = run_end(t, i, Kind::space);
  if (j == npos) return npos;
  for (std::size_t b = j; b > i; --b)
    if (t[b - 1] == '\r' || t[b - 1] == '\n') return b;
  return spaces_end(t, i, j);
}

}  // namespace

KnownPattern known_pattern(std::string_view pattern) {
  if (pattern == k_gpt2_pattern) return KnownPattern::gpt2;
  if (pattern == k_qwen2) return KnownPattern::qwen2;
  if (pattern == k_llama3) return KnownPattern::llama3;
  return KnownPattern::none;
}

std::size_t known_match_end(KnownPattern pattern, std::u32string_view text, std::size_t at) {
  if (at >= text.size()) return npos;
  switch (pattern) {
    case KnownPattern::gpt2:
      return gpt2(text, at);
    case KnownPattern::qwen2:
      return qwen(text, at, 1);
    case KnownPattern::llama3:
      return qwen(text, at, 3);
    case KnownPattern::none:
      break;
  }
  return npos;
}

}  // namespace flowline::models::tokenizers
