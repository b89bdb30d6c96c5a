// Tests of the text utilities: UTF-8 checks, paragraph and sentence splitting with their offsets.
#include "test_support.hpp"

using namespace flowline;

TEST_CASE("the corpus splits into 6001 paragraphs, 881 of them in Alice", "[text]") {
  const std::map<std::string, std::size_t> expected = {{"alice-in-wonderland.txt", 881},
                                                       {"northanger-abbey.txt", 1120},
                                                       {"persuasion.txt", 1098},
                                                       {"the-lost-world.txt", 1300},
                                                       {"the-valley-of-fear.txt", 1602}};
  std::size_t total = 0;
  for (const auto& [name, count] : expected) {
    const std::string text = read_file(testing::corpus_file(name));
    const auto spans = split_paragraphs(text);
    CHECK(spans.size() == count);
    total += spans.size();
  }
  CHECK(total == 6001);
}

TEST_CASE("paragraph offsets point back into the source text", "[text]") {
  const std::string text = "\xEF\xBB\xBF  First line\r\nstill first.\r\n\r\n  \r\nSécond paragraph.\n\n\n";
  const auto spans = split_paragraphs(text);
  REQUIRE(spans.size() == 2);
  CHECK(text.substr(spans[0].byte_begin, spans[0].byte_end - spans[0].byte_begin) == "First line\r\nstill first.");
  CHECK(spans[0].char_begin == 3);  // BOM is one character, then two spaces
  CHECK(spans[1].line == 5);
  CHECK(text.substr(spans[1].byte_begin, spans[1].byte_end - spans[1].byte_begin) == "Sécond paragraph.");
  CHECK(spans[1].char_end - spans[1].char_begin == 17);  // é is one character
}

TEST_CASE("sentences end at terminators but not at abbreviations or initials", "[text]") {
  const std::string text = "Mr. Holmes met J. Watson. “Is it so?” he asked! Yes… It was.\n\nNew para";
  const auto spans = split_sentences(text);
  std::vector<std::string> sentences;
  for (const auto& s : spans) sentences.push_back(text.substr(s.byte_begin, s.byte_end - s.byte_begin));
  CHECK(sentences ==
        std::vector<std::string>{"Mr. Holmes met J. Watson.", "“Is it so?” he asked!", "Yes…", "It was.", "New para"});
}
