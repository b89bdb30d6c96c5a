// Tests of the WordPiece tokenizer against the reference tokenizer's token ids.
#include "test_support.hpp"

#include "flowline/sentence_encoder/wordpiece_tokenizer.hpp"

#include <boost/json.hpp>

#include <fstream>

using namespace flowline;
using flowline::sentence_encoder::WordPieceTokenizer;

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
  REQUIRE(std::filesystem::exists(kModel / "vocab.txt"));
  const auto tokenizer = WordPieceTokenizer::from_model_folder(kModel);
  std::size_t max_length = 0;
  const auto goldens = token_goldens(max_length);
  REQUIRE(goldens.size() == 6001 + 22);
  std::size_t mismatches = 0, tokens = 0;
  for (const auto& g : goldens) {
    const auto ids = tokenizer.encode(g.text, max_length);
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
  const auto tokenizer = WordPieceTokenizer::from_model_folder(kModel);
  CHECK(tokenizer.tokenize("Crème BRÛLÉE") == std::vector<std::string>{"cr", "##eme", "br", "##ule", "##e"});
  CHECK(tokenizer.tokenize("日本") == std::vector<std::string>{"日", "本"});
  CHECK(tokenizer.tokenize("a\u200bb") == std::vector<std::string>{"ab"});
  CHECK(tokenizer.tokenize(std::string(101, 'a')) == std::vector<std::string>{"[UNK]"});
  CHECK(tokenizer.encode("", 256) == std::vector<std::int32_t>{tokenizer.cls_id(), tokenizer.sep_id()});
  CHECK(tokenizer.encode("word word word word", 4).size() == 4);
}

TEST_CASE("a vocabulary without the special tokens is rejected", "[tokenizer]") {
  const auto dir = testing::scratch_dir("vocab without specials");
  testing::write_text(dir / "vocab.txt", "[PAD]\nhello\n");
  CHECK_THROWS_WITH(WordPieceTokenizer(dir / "vocab.txt"),
                    "tokenizer: vocabulary '" + (dir / "vocab.txt").string() + "' has no token '[UNK]'");
  CHECK_THROWS_WITH(WordPieceTokenizer(dir / "missing.txt"), testing::contains("cannot open vocabulary"));
}
