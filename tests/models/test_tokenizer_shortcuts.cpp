// The tokenizers' two shortcuts past their libraries, checked against those libraries: GPT-2's, Qwen2's and
// Llama 3's patterns matched by hand over ASCII (regex_known.cpp) against PCRE2, and the normal forms'
// skipping of utf8proc for text they leave alone (unicode.cpp) against utf8proc itself, for every code point
// after the starters that compose. Part of test_tokenizers (its main).
#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include "regex.hpp"
#include "unicode.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using namespace flowline::models::tokenizers;

namespace {

using Matches = std::vector<std::pair<std::size_t, std::size_t>>;

Matches matches(const Regex& regex, std::u32string_view text) {
  Matches out;
  regex.for_each_match(text, [&](std::size_t b, std::size_t e) { out.emplace_back(b, e); });
  return out;
}

// The corpus's paragraphs (blank-line separated; the books' lines end in CR LF, kept), as code points.
std::vector<std::u32string> corpus_texts() {
  std::vector<std::u32string> texts;
  for (const auto& entry : fs::directory_iterator(FLOWLINE_CORPUS_DIR)) {
    std::ifstream in(entry.path());
    std::string line, paragraph;
    const auto flush = [&] {
      if (paragraph.empty()) return;
      std::u32string text;
      decode_utf8(paragraph, text);
      texts.push_back(std::move(text));
      paragraph.clear();
    };
    while (std::getline(in, line)) {
      if (line.empty() || line == "\r") {
        flush();
      } else {
        if (!paragraph.empty()) paragraph += '\n';
        paragraph += line;
      }
    }
    flush();
  }
  return texts;
}

// Random texts over the characters the patterns tell apart: contractions in both cases, long s (which
// caseless 's' matches), letters, digits and spaces beyond ASCII, line breaks, punctuation.
std::vector<std::u32string> random_texts(std::size_t count) {
  const std::u32string alphabet =
      U"aZsStTrReEvVmMlLdDx09 \t\n\r\v\f'-.!,\u00e9\u017f\u00a0\u2019\u0663\u3000\u4e00\u0085\u2028\u00b2";
  std::mt19937 random(20261126);
  std::uniform_int_distribution<std::size_t> length(0, 24), pick(0, alphabet.size() - 1);
  std::vector<std::u32string> texts(count);
  for (auto& text : texts) {
    const std::size_t n = length(random);
    for (std::size_t i = 0; i < n; ++i) text.push_back(alphabet[pick(random)]);
  }
  return texts;
}

std::u32string utf8proc_form(const std::u32string& text, int options) {
  std::string utf8;
  encode_utf8(text, utf8);
  utf8proc_uint8_t* mapped = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()), static_cast<utf8proc_ssize_t>(utf8.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::runtime_error(utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  std::u32string out;
  decode_utf8(std::string_view(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n)), out);
  return out;
}

}  // namespace

TEST_CASE("GPT-2's, Qwen2's and Llama 3's patterns matched by hand give PCRE2's matches", "[tokenizers]") {
  const Origin origin{"test.json", "pre_tokenizer"};
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  std::string llama3 = qwen2;
  llama3.replace(llama3.find(R"(|\p{N}|)"), 7, R"(|\p{N}{1,3}|)");
  std::vector<std::u32string> texts = corpus_texts();
  REQUIRE(texts.size() > 6000);
  for (auto& text : random_texts(20000)) texts.push_back(std::move(text));
  for (const auto& [pattern, known] :
       std::vector<std::pair<std::string, KnownPattern>>{{std::string(k_gpt2_pattern), KnownPattern::gpt2},
                                                         {qwen2, KnownPattern::qwen2},
                                                         {llama3, KnownPattern::llama3}}) {
    INFO(pattern);
    REQUIRE(known_pattern(pattern) == known);
    const Regex by_hand(pattern, origin);
    const Regex pcre2_only("(?:" + pattern + ")", origin);  // the same pattern, not recognized
    REQUIRE(known_pattern("(?:" + pattern + ")") == KnownPattern::none);
    std::size_t differing = 0;
    for (const auto& text : texts) {
      if (matches(by_hand, text) != matches(pcre2_only, text)) {
        std::string utf8;
        encode_utf8(text, utf8);
        if (++differing <= 5) UNSCOPED_INFO("differs on: " << utf8);
      }
    }
    CHECK(differing == 0);
  }
}

TEST_CASE("a normal form skips utf8proc only for text utf8proc leaves as it is", "[tokenizers]") {
  const std::vector<std::pair<NormalForm, int>> forms = {
      {NormalForm::nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE},
      {NormalForm::nfd, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
      {NormalForm::nfkc, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
      {NormalForm::nfkd, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
  // Starters that take a following code point into a composition: Latin, Hangul's leading consonant and
  // LV syllable, and Indic, Sinhala and Myanmar vowels whose second part is a starter too.
  const std::u32string starters = U"Ae\u1100\uac00\u0b47\u0dd9\u1025\u0cc6";
  std::string scratch;
  for (const auto& [form, options] : forms) {
    std::size_t differing = 0;
    std::string first;
    for (char32_t c = 0x80; c < 0x30000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      for (const char32_t starter : starters + std::u32string(1, c)) {
        for (const std::u32string text : {std::u32string{starter, c}, std::u32string{c, starter}}) {
          std::u32string ours = text;
          normalize_form(ours, form, scratch);
          if (ours != utf8proc_form(text, options) && ++differing <= 5)
            first += fmt::format(" U+{:04X} U+{:04X};", static_cast<std::uint32_t>(text[0]),
                                 static_cast<std::uint32_t>(text[1]));
        }
      }
    }
    INFO("form " << static_cast<int>(form) << " differs on" << first);
    CHECK(differing == 0);
  }
}
