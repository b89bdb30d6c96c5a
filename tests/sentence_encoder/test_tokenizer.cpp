// The SentenceEncoder's tokenizer (flowline::models::Tokenizer) on all-MiniLM-L6-v2 against the ids the
// Hugging Face fast tokenizer gave every corpus paragraph (tests/data/goldens/tokens.jsonl).
#include "test_support.hpp"

#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>

#include <fstream>

using namespace flowline;
using flowline::models::Tokenizer;

namespace {
const std::filesystem::path kGoldens = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/goldens";
const std::filesystem::path kModel = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "models/all-MiniLM-L6-v2";

struct TokenGolden {
  std::string book;
  std::string text;
  std::vector<std::int32_t> ids;
};

std::vector<TokenGolden> token_goldens(std::size_t& max_length) {
  std::ifstream in(kGoldens / "tokens.jsonl");
  std::string line;
  std::getline(in, line);
  max_length = boost::json::parse(line).at("max_length").to_number<std::size_t>();
  std::vector<TokenGolden> out;
  while (std::getline(in, line)) {
    const auto v = boost::json::parse(line);
    TokenGolden g{std::string(v.at("book").as_string()), std::string(v.at("text").as_string()), {}};
    for (const auto& id : v.at("ids").as_array()) g.ids.push_back(static_cast<std::int32_t>(id.as_int64()));
    out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

TEST_CASE("tokenizer gives the fast tokenizer's ids for every corpus paragraph and hard case", "[tokenizer]") {
  REQUIRE(std::filesystem::exists(kModel / "tokenizer.json"));
  const auto tokenizer = Tokenizer::from_folder(kModel);
  std::size_t max_length = 0;
  const auto goldens = token_goldens(max_length);
  REQUIRE(goldens.size() == 6001 + 22);
  std::size_t mismatches = 0, tokens = 0;
  for (const auto& g : goldens) {
    const auto ids = tokenizer->encode(g.text, max_length);
    tokens += ids.size();
    if (ids != g.ids) {
      ++mismatches;
      if (mismatches <= 5) {
        INFO("text: " << g.text);
        CHECK(ids == g.ids);
      }
    }
  }
  CHECK(mismatches == 0);
  CHECK(tokens > 400000);
}

TEST_CASE("corpus paragraphs split by flowline are the texts the goldens were made from", "[tokenizer][text]") {
  std::size_t max_length = 0;
  const auto goldens = token_goldens(max_length);
  std::size_t g = 0;
  for (const char* book : {"alice-in-wonderland.txt", "northanger-abbey.txt", "persuasion.txt", "the-lost-world.txt",
                           "the-valley-of-fear.txt"}) {
    const std::string text = read_file(testing::corpus_file(book));
    for (const auto& span : split_paragraphs(text)) {
      REQUIRE(goldens[g].book == book);
      REQUIRE(text.substr(span.byte_begin, span.byte_end - span.byte_begin) == goldens[g].text);
      ++g;
    }
  }
  CHECK(g == 6001);
}

TEST_CASE("tokenizer handles accents, CJK, control characters and long words like BERT", "[tokenizer]") {
  const auto tokenizer = Tokenizer::from_folder(kModel);
  const auto ids = [&](std::initializer_list<const char*> tokens) {
    std::vector<std::int32_t> out{tokenizer->token_id("[CLS]")};
    for (const char* t : tokens) out.push_back(tokenizer->token_id(t));
    out.push_back(tokenizer->token_id("[SEP]"));
    return out;
  };
  CHECK(tokenizer->encode("Crème BRÛLÉE") == ids({"cr", "##eme", "br", "##ule", "##e"}));
  CHECK(tokenizer->encode("日本") == ids({"日", "本"}));
  CHECK(tokenizer->encode("a\u200bb") == ids({"ab"}));
  CHECK(tokenizer->encode(std::string(101, 'a')) == ids({"[UNK]"}));
  CHECK(tokenizer->encode("", 256) == ids({}));
  CHECK(tokenizer->encode("word word word word", 4).size() == 4);
}

TEST_CASE("a vocabulary without the special tokens is rejected", "[tokenizer]") {
  const auto dir = testing::scratch_dir("vocab without specials");
  testing::write_text(dir / "vocab.txt", "[PAD]\nhello\n");
  CHECK_THROWS_WITH(Tokenizer::from_folder(dir), testing::contains("tokenizer '" + (dir / "vocab.txt").string() +
                                                                   "': '[SEP]' is not in the vocabulary"));
  CHECK_THROWS_WITH(Tokenizer::from_folder(dir / "missing"), testing::contains("neither tokenizer.json nor vocab.txt"));
}
