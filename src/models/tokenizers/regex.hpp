// The regular expressions of tokenizer.json (ByteLevel's GPT-2 pattern, Split's and Replace's patterns),
// private to flowline::tokenizers: PCRE2 in UTF-32 mode with Unicode properties (UTF + UCP), JIT-compiled
// where PCRE2 has a JIT, matching Hugging Face `tokenizers`, which uses Oniguruma (Ruby syntax).
//
// GPT-2's, Qwen2's and Llama 3's patterns are matched by hand where the text is ASCII, PCRE2 elsewhere
// (known_match_end below); the matches are PCRE2's either way.
//
// Contract: a Regex is compiled once, when its component is built (on any thread), and is immutable after
// that; for_each_match() may be called from many threads at once: the match data it needs is the calling
// thread's own (thread_local), so a warmed thread allocates nothing per call. A pattern PCRE2 cannot
// compile, or one whose meaning differs between Oniguruma and PCRE2 and that the wrapper cannot translate
// exactly (\w, \b, \h, \v, \p{...} other than L and N, nested classes, (?m), (?s)), is refused with a
// flowline::Error naming the file and the JSON path (refuse() in pipeline.hpp).
//
// The work per text is bounded (a pattern such as `a+b|a` costs quadratic time on a long run of a's, in
// Oniguruma too): in a text of more than kWholeText code points, each search gives PCRE2 a window of the
// text past its start (64 code points, doubled while a match or a partial match reaches the window's end,
// PCRE2_PARTIAL_HARD), so the code points it is given bound what it can read; one for_each_match() may give it at most
// kRegexStepsPerChar per code point of the text plus kRegexStepsFloor in all. Past that, or past PCRE2's own match
// limit inside one search, the text is refused with a flowline::Error naming the limit, the pattern, the JSON path and
// the file — never mis-split.
//
// Oniguruma's classes differ from PCRE2 10.42's: its Unicode tables are newer (letters and numbers added
// since) and its \s lacks U+180E. The pattern is translated before it is compiled: \s and \S become
// Oniguruma's exact set, \p{L}, \p{N} and \d get the code points Oniguruma adds (regex_tables.inc, made by
// scripts/make_regex_tables.py).
#pragma once

#include "pipeline.hpp"

#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_32;

namespace flowline::models::tokenizers {

// The patterns matched by hand over ASCII text (regex_known.cpp): GPT-2's (ByteLevel's), Qwen2's and
// Llama 3's (Split's), recognized by their exact text.
enum class KnownPattern { none, gpt2, qwen2, llama3 };
inline constexpr std::string_view k_gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
KnownPattern known_pattern(std::string_view pattern);
// Where `pattern`'s match at `at` ends, when ASCII code points alone decide it (every position of these
// patterns starts a match); npos when PCRE2 must answer.
std::size_t known_match_end(KnownPattern pattern, std::u32string_view text, std::size_t at);

// The regex-step bound of one for_each_match() over n code points: kRegexStepsPerChar * (n + 1) +
// kRegexStepsFloor code points given to PCRE2 (a pattern whose matches read no further than they reach
// needs at most ~132 per code point).
inline constexpr std::size_t kRegexStepsPerChar = 256;
inline constexpr std::size_t kRegexStepsFloor = std::size_t{1} << 24;
inline constexpr std::size_t kWholeText = 4096;  // texts searched whole, not in windows (regex.cpp)

class Regex {
 public:
  // `pattern` in UTF-8, as tokenizer.json writes it; `origin` names it in errors.
  Regex(std::string_view pattern, const Origin& origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls found(begin, end) for each match in `text`, left to right, offsets in code points: the matches
  // of Oniguruma's find_iter (after a match, the search goes on at its end; an empty match right where the
  // last match ended is skipped, one character further on).
  template <class Found>
  void for_each_match(std::u32string_view text, Found&& found) const {
    std::size_t from = 0, begin = 0, end = 0;
    bool matched_before = false;
    std::size_t last_end = 0;
    std::size_t budget = kRegexStepsPerChar * (text.size() + 1) + kRegexStepsFloor;
    while (from <= text.size() && search(text, from, begin, end, budget)) {
      if (begin == end && matched_before && last_end == end) {
        ++from;
        continue;
      }
      from = last_end = end;
      matched_before = true;
      found(begin, end);
    }
  }

  // The pattern PCRE2 compiled (after translation), for tests and error messages.
  const std::string& translated() const { return translated_; }

 private:
  // The first match at or after `from`; false when there is none. Takes the code points given to PCRE2 off
  // `budget`; refuses the text when it runs out.
  bool search(std::u32string_view text, std::size_t from, std::size_t& begin, std::size_t& end,
              std::size_t& budget) const;
  [[noreturn]] void refuse_text(const std::string& limit) const;
  [[noreturn]] void failed(int rc) const;  // a PCRE2 error: a limit refuses the text, others throw

  pcre2_real_code_32* code_ = nullptr;
  std::string translated_;
  std::string pattern_;
  Origin origin_;
  KnownPattern known_ = KnownPattern::none;
};

}  // namespace flowline::models::tokenizers
