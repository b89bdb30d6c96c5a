// Regex: tokenizer.json's patterns translated from Oniguruma's meaning to PCRE2's, compiled once, matched
// with the calling thread's match data.
#include "regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <fmt/format.h>

#include "flowline/error.hpp"

#include <cctype>
#include <memory>
#include <new>

namespace flowline::models::tokenizers {

namespace {

#include "regex_tables.inc"

std::string message_of(int code) {
  PCRE2_UCHAR32 buffer[256];
  const int n = pcre2_get_error_message(code, buffer, 256);
  std::string out;
  for (int i = 0; i < n; ++i) out.push_back(buffer[i] < 0x80 ? static_cast<char>(buffer[i]) : '?');
  return out;
}

// Rewrites what Oniguruma (Ruby syntax) and PCRE2 read differently; refuses what it cannot rewrite.
class Translator {
 public:
  Translator(std::string_view pattern, const Origin& origin) : p_(pattern), origin_(origin) {}

  std::string run() {
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\' && i_ + 1 < p_.size()) {
        escape();
      } else if (in_class_) {
        class_character();
      } else if (c == '[') {
        open_class();
      } else if (c == '(' && p_.substr(i_, 2) == "(?") {
        group_flags();
      } else {
        out_.push_back(c);
        ++i_;
      }
    }
    if (in_class_) fail("an unterminated character class");
    return out_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    refuse(origin_,
           fmt::format("pattern '{}': {} (at offset {}); flowline translates Oniguruma's \\s, \\S, \\d, "
                       "\\D, \\p{{L}}, \\p{{N}} and their negations to PCRE2 exactly, and refuses what it "
                       "cannot: \\w, \\W, \\b, \\B, \\h, \\H, \\v, \\V, other Unicode properties, nested classes, "
                       "POSIX brackets, (?m) and (?s)",
                       p_, what, i_));
  }

  void open_class() {
    in_class_ = true;
    out_.push_back('[');
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') out_.push_back(p_[i_++]);
    if (i_ < p_.size() && p_[i_] == ']') out_.push_back(p_[i_++]);  // a leading ']' is literal
  }

  void class_character() {
    const char c = p_[i_];
    if (c == ']') {
      in_class_ = false;
    } else if (c == '[') {
      fail("a nested class or POSIX bracket");
    } else if (c == '&' && p_.substr(i_, 2) == "&&") {
      fail("a class intersection (&&)");
    }
    out_.push_back(c);
    ++i_;
  }

  // (?flags) and (?flags:...): Ruby's m is PCRE2's s, and PCRE2's m does not exist in Ruby.
  void group_flags() {
    std::size_t j = i_ + 2;
    while (j < p_.size() && (std::isalpha(static_cast<unsigned char>(p_[j])) || p_[j] == '-')) {
      if (p_[j] == 'm' || p_[j] == 's') fail(fmt::format("the inline flag '{}'", p_[j]));
      ++j;
    }
    out_.append(p_.substr(i_, j - i_));
    i_ = j;
  }

  // A class of Oniguruma's, as a whole class outside [...] or as class items inside one.
  void emit_class(std::string_view items, bool negated) {
    if (in_class_) {
      if (negated) fail("a negated class escape inside a character class");
      out_.append(items);
    } else {
      out_.append(negated ? "[^" : "[");
      out_.append(items);
      out_.push_back(']');
    }
  }

  void escape() {
    const char e = p_[i_ + 1];
    switch (e) {
      case 's':
      case 'S':
        emit_class(k_onig_space, e == 'S');
        i_ += 2;
        return;
      case 'd':
      case 'D':
        emit_class(std::string("\\d") + k_onig_digit_beyond_pcre2, e == 'D');
        i_ += 2;
        return;
      case 'p':
      case 'P':
        property(e == 'P');
        return;
      case 'w':
      case 'W':
      case 'b':
      case 'B':
      case 'h':
      case 'H':
      case 'v':
      case 'V':
        fail(fmt::format("\\{} (Oniguruma's and PCRE2's differ)", e));
      default:
        out_.append(p_.substr(i_, 2));
        i_ += 2;
    }
  }

  // \p{L}, \p{N}, \pL, \pN, \p{^L}, \P{L}, ...
  void property(bool negated) {
    std::size_t j = i_ + 2;
    std::string name;
    if (j < p_.size() && p_[j] == '{') {
      const std::size_t close = p_.find('}', j);
      if (close == std::string_view::npos) fail("an unterminated \\p{...}");
      name = std::string(p_.substr(j + 1, close - j - 1));
      j = close + 1;
    } else if (j < p_.size()) {
      name = std::string(1, p_[j]);
      ++j;
    }
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
    if (name == "L")
      emit_class(std::string("\\p{L}") + k_onig_letter_beyond_pcre2, negated);
    else if (name == "N")
      emit_class(std::string("\\p{N}") + k_onig_number_beyond_pcre2, negated);
    else
      fail(fmt::format("the Unicode property '{}' (only L and N are translated)", name));
    i_ = j;
  }

  std::string_view p_;
  const Origin& origin_;
  std::size_t i_ = 0;
  bool in_class_ = false;
  std::string out_;
};

// The calling thread's match data, match context and JIT stack (up to 1 MiB, for long runs).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  MatchState() {
    if (data == nullptr || context == nullptr) throw std::bad_alloc();
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern, const Origin& origin)
    : translated_(Translator(pattern, origin).run()),
      pattern_(pattern),
      origin_(origin),
      known_(known_pattern(pattern)) {
  std::u32string units;
  decode_utf8(translated_, units);
  const std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> context(
      pcre2_compile_context_create(nullptr), &pcre2_compile_context_free);
  if (!context) throw std::bad_alloc();
  pcre2_set_newline(context.get(), PCRE2_NEWLINE_LF);  // Oniguruma's newline: \n only
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Ruby's ^ and $ match at every line's start and end: PCRE2's multiline mode.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(units.data()), units.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context.get());
  if (code_ == nullptr)
    refuse(origin, fmt::format("pattern '{}' does not compile with PCRE2: {} (at offset {} of '{}')", pattern,
                               message_of(error), offset, translated_));
  // Without a JIT, the interpreter matches the same. Searches in a window (search()) use partial matching.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::refuse_text(const std::string& limit) const {
  refuse(origin_, fmt::format("pattern '{}': the text is refused: {}", pattern_, limit));
}

void Regex::failed(int rc) const {
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
      rc == PCRE2_ERROR_JIT_STACKLIMIT)
    refuse_text(fmt::format("one search exceeds PCRE2's limit: {}", message_of(rc)));
  throw Error(fmt::format("tokenizer regex '{}': matching failed: {}", translated_, message_of(rc)));
}

// Windowed search: PCRE2 sees text[0, limit) (what lies before `from` stays visible to lookbehinds). Under
// PCRE2_PARTIAL_HARD a search that reaches the window's end answers "partial" instead of guessing, and a
// complete match that ends right at the window's end may have been cut short: either way the window
// doubles. No match at all means none starts before the window's end: the search goes on from there.
bool Regex::search(std::u32string_view text, std::size_t from, std::size_t& begin, std::size_t& end,
                   std::size_t& budget) const {
  if (known_ != KnownPattern::none) {
    const std::size_t known_end = known_match_end(known_, text, from);
    if (known_end != std::u32string_view::npos) {
      begin = from;
      end = known_end;
      return true;
    }
  }
  static const PCRE2_UCHAR32 empty = 0;
  MatchState& state = match_state();
  const auto* subject = text.empty() ? &empty : reinterpret_cast<PCRE2_SPTR>(text.data());
  // A text of up to kWholeText code points is searched whole, as one call: all its searches together cannot
  // give PCRE2 more than the floor of the bound, and a window would only slow the common case down.
  if (text.size() <= kWholeText) {
    const int rc = pcre2_match(code_, subject, text.size(), from, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) failed(rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    begin = ovector[0];
    end = ovector[1];
    return true;
  }
  std::size_t window = 64;
  for (std::size_t start = from;; window *= 2) {
    const std::size_t limit = text.size() - start <= window ? text.size() : start + window;
    const bool whole = limit == text.size();
    if (limit - start + 1 > budget)
      refuse_text(
          fmt::format("its regex steps exceed the bound ({} code points searched per code point of the "
                      "text plus {}; {} code points)",
                      kRegexStepsPerChar, kRegexStepsFloor, text.size()));
    budget -= limit - start + 1;
    const int rc = pcre2_match(code_, subject, limit, start, PCRE2_NO_UTF_CHECK | (whole ? 0 : PCRE2_PARTIAL_HARD),
                               state.data, state.context);
    if (rc == PCRE2_ERROR_PARTIAL) continue;
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (whole) return false;
      start = limit;
      continue;
    }
    if (rc < 0) failed(rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    if (!whole && ovector[1] >= limit) continue;
    begin = ovector[0];
    end = ovector[1];
    return true;
  }
}

}  // namespace flowline::models::tokenizers
