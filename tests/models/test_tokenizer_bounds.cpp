// The tokenizer's work per text is bounded (issue 50 §2, "Tokenizers from a checkpoint"): each hostile
// tokenizer.json of the issue, made here, is refused past its bound with an error naming the limit, the
// component's JSON path and the file, in bounded time; the same files keep tokenizing ordinary text; and
// added tokens are matched in time that does not grow with their number, with the ids of a plain reference.
// Part of test_tokenizers (its main).
#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include "flowline/error.hpp"
#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace json = boost::json;
using flowline::models::Tokenizer;

namespace {

// A WordPiece over the letters a-z (and "[UNK]"), whitespace-split unless `pre_tokenizer` says otherwise; a
// word of more than 200 characters is one [UNK].
json::object letters_tokenizer(json::value normalizer, json::value pre_tokenizer) {
  json::object vocab;
  vocab["[UNK]"] = 0;
  for (char c = 'a'; c <= 'z'; ++c) {
    vocab[std::string(1, c)] = 1 + (c - 'a');
    vocab["##" + std::string(1, c)] = 27 + (c - 'a');
  }
  json::object root;
  root["normalizer"] = std::move(normalizer);
  root["pre_tokenizer"] =
      pre_tokenizer.is_null() ? json::value(json::object{{"type", "WhitespaceSplit"}}) : std::move(pre_tokenizer);
  root["model"] = json::object{{"type", "WordPiece"},
                               {"unk_token", "[UNK]"},
                               {"continuing_subword_prefix", "##"},
                               {"max_input_chars_per_word", 200},
                               {"vocab", std::move(vocab)}};
  return root;
}

std::unique_ptr<Tokenizer> load(const json::object& root, const std::string& file) {
  return Tokenizer::from_json_text(json::serialize(root), file);
}

// The message of the flowline::Error that encode(text) throws; empty when it throws none.
std::string refusal(const Tokenizer& tok, std::string_view text) {
  try {
    tok.encode(text);
  } catch (const flowline::Error& e) {
    return e.what();
  }
  return {};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

json::object replace_rule(const char* kind, const std::string& pattern, const std::string& content) {
  return json::object{{"type", "Replace"}, {"pattern", json::object{{kind, pattern}}}, {"content", content}};
}

// What Python tokenizers gives, by the plainest means: at each place the longest added token (the first of
// the file's with that content), the text between tokens tokenized without added tokens.
std::vector<std::int32_t> reference_ids(std::string_view text, const std::vector<std::pair<std::string, int>>& added,
                                        const Tokenizer& plain) {
  std::unordered_map<std::string, int> id_of;
  std::size_t longest = 0;
  for (const auto& [content, id] : added) {
    id_of.try_emplace(content, id);
    longest = std::max(longest, content.size());
  }
  std::vector<std::int32_t> ids;
  std::size_t taken = 0;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t length = std::min(longest, text.size() - i);
    for (; length > 0; --length)
      if (id_of.count(std::string(text.substr(i, length)))) break;
    if (length == 0) {
      ++i;
      continue;
    }
    const auto stretch = plain.encode(text.substr(taken, i - taken));
    ids.insert(ids.end(), stretch.begin(), stretch.end());
    ids.push_back(id_of.at(std::string(text.substr(i, length))));
    i += length;
    taken = i;
  }
  const auto rest = plain.encode(text.substr(taken));
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::string random_word(std::mt19937& rng, std::size_t min_length, std::size_t max_length) {
  std::uniform_int_distribution<std::size_t> length(min_length, max_length);
  std::uniform_int_distribution<int> letter(0, 25);
  std::string word(length(rng), 'a');
  for (char& c : word) c = static_cast<char>('a' + letter(rng));
  return word;
}

}  // namespace

TEST_CASE("a quadratic Split regex on a 600,000-character text is refused quickly, naming the regex bound",
          "[tokenizer][bounds]") {
  const json::object split{
      {"type", "Split"}, {"pattern", json::object{{"Regex", "a+b|a"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const auto tok = load(letters_tokenizer(nullptr, split), "hostile/split-tokenizer.json");
  const auto start = std::chrono::steady_clock::now();
  const std::string what = refusal(*tok, std::string(600000, 'a'));
  CHECK(seconds_since(start) < 2.0);
  INFO(what);
  CHECK(what.find("hostile/split-tokenizer.json") != std::string::npos);
  CHECK(what.find("pre_tokenizer") != std::string::npos);
  CHECK(what.find("regex steps exceed the bound") != std::string::npos);
  // The same pattern over text it splits in linear time is not refused, however long.
  std::string linear;
  for (int i = 0; i < 200000; ++i) linear += "aab";
  const auto ids = tok->encode(linear);
  REQUIRE(ids.size() == 200000 * 3);  // each "aab" one word, cut into a, ##a, ##b
  CHECK(ids[0] == 1);
  CHECK(ids[1] == 27);
  CHECK(ids[2] == 28);
  // A short text of the quadratic kind stays under the floor: Python's split, not a refusal.
  CHECK(tok->encode(std::string(2000, 'a')).size() == 2000);
}

TEST_CASE("a regex whose matches run long is searched in windows without a refusal", "[tokenizer][bounds]") {
  // One match of 300,000 code points (the window doubles up to it), a lookahead at every window's end, and
  // a match that ends at the text's end ($).
  const json::object split{{"type", "Split"},
                           {"pattern", json::object{{"Regex", "\\p{L}+(?=1|$)|1"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}};
  const auto tok = load(letters_tokenizer(nullptr, split), "long-matches/tokenizer.json");
  std::string text;
  for (int i = 0; i < 300000; ++i) text += "\xC3\xA9";  // é: not ASCII, so PCRE2 matches it
  text += "1ab";
  // The é run and "1" are each one [UNK] (not in the vocabulary; the run is past 200 characters), then a, ##b.
  CHECK(tok->encode(text) == std::vector<std::int32_t>{0, 0, 1, 28});
}

TEST_CASE("chained Replace rules that blow a text up are refused naming the normalizer's bound",
          "[tokenizer][bounds]") {
  const std::string many(130, 'a');
  const char* kinds[] = {"String", "Regex"};
  for (const char* kind : kinds) {
    const json::object normalizer{
        {"type", "Sequence"},
        {"normalizers",
         json::array{replace_rule(kind, "a", many), replace_rule(kind, "a", many), replace_rule(kind, "a", many)}}};
    const auto tok = load(letters_tokenizer(normalizer, nullptr), "hostile/replace-tokenizer.json");
    const auto start = std::chrono::steady_clock::now();
    const std::string what = refusal(*tok, std::string(4096, 'a'));
    CHECK(seconds_since(start) < 2.0);
    INFO(kind << ": " << what);
    CHECK(what.find("hostile/replace-tokenizer.json") != std::string::npos);
    CHECK(what.find("normalizer.normalizers[0]") != std::string::npos);
    CHECK(what.find("normalizing makes more than 135168 code points") != std::string::npos);
    // Growth within the bound is Python's: "a" -> 130 a's once, then whitespace-split and cut.
    const json::object once{{"type", "Sequence"}, {"normalizers", json::array{replace_rule(kind, "b", many)}}};
    CHECK(load(letters_tokenizer(once, nullptr), "ok.json")->encode("b b").size() == 2 * 130);
  }
}

TEST_CASE("a text past the bytes bound is refused naming the bound and the file", "[tokenizer][bounds]") {
  const auto tok = load(letters_tokenizer(nullptr, nullptr), "bytes/tokenizer.json");
  const std::string what = refusal(*tok, std::string((std::size_t{8} << 20) + 1, 'a'));
  INFO(what);
  CHECK(what.find("bytes/tokenizer.json") != std::string::npos);
  CHECK(what.find("over the bound of 8388608 bytes per text") != std::string::npos);
  CHECK(tok->encode("a b c").size() == 3);
}

TEST_CASE("100,000 added tokens on a 30 KB text give the reference's ids, fast", "[tokenizer][bounds]") {
  std::mt19937 rng(50);
  std::vector<std::pair<std::string, int>> added;
  json::array list;
  for (int i = 0; i < 100000; ++i) {
    // Short and long tokens sharing prefixes, and a few repeated contents with other ids (the first wins).
    std::string content = i % 1000 == 999 ? added[static_cast<std::size_t>(i) / 2].first : random_word(rng, 2, 12);
    added.emplace_back(content, 100 + i);
    list.push_back(json::object{{"content", content}, {"id", 100 + i}, {"normalized", false}});
  }
  json::object root = letters_tokenizer(nullptr, nullptr);
  const auto plain = load(root, "plain.json");
  root["added_tokens"] = std::move(list);
  const auto tok = load(root, "many-added/tokenizer.json");
  std::string text;
  std::uniform_int_distribution<std::size_t> pick(0, added.size() - 1);
  while (text.size() < 30000)
    text += (text.size() % 3 == 0 ? added[pick(rng)].first : random_word(rng, 1, 8)) + (text.size() % 5 ? " " : "");
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok->encode(text);
  const double took = seconds_since(start);
  CHECK(ids == reference_ids(text, added, *plain));
  CHECK(took < 0.5);  // it took 6.9 s comparing every token at every place
}

TEST_CASE("a few added tokens or many give the same ids, normalized ones included", "[tokenizer][bounds]") {
  // Overlapping prefixes: the longest at a place wins; the same content twice keeps the first id.
  const std::vector<std::pair<std::string, int>> few = {{"ab", 200},  {"abc", 201}, {"abcd", 202}, {"b", 203},
                                                        {"bcd", 204}, {"ab", 205},  {"zz", 206}};
  const std::vector<std::string> padding = {"q", "qq", "qqq", "qqqq", "qqqqq", "qqqqqq", "qqqqqqq", "qqqqqqqq"};
  const std::string text = "xabcdy abcab b bcdzzz abab abc ABCD aBc xyz";
  for (const bool normalized : {false, true}) {
    json::array short_list, long_list;
    for (const auto& [content, id] : few) {
      std::string written = content;  // a normalized one written in capitals: Lowercase makes it the content
      if (normalized)
        for (char& c : written) c = static_cast<char>(c - 'a' + 'A');
      json::object entry{{"content", written}, {"id", id}, {"normalized", normalized}};
      short_list.push_back(entry);
      long_list.push_back(entry);
    }
    for (std::size_t i = 0; i < padding.size(); ++i)  // past the one-by-one comparison: the trie
      long_list.push_back(
          json::object{{"content", padding[i]}, {"id", 300 + static_cast<int>(i)}, {"normalized", normalized}});
    json::object root = letters_tokenizer(json::object{{"type", "Lowercase"}}, nullptr);
    const auto plain = load(root, "plain.json");
    root["added_tokens"] = std::move(short_list);
    const auto compared = load(root, "few.json");
    root["added_tokens"] = std::move(long_list);
    const auto walked = load(root, "many.json");
    const auto ids = compared->encode(text);
    CHECK(ids == walked->encode(text));
    if (!normalized)
      CHECK(ids == reference_ids(text, few, *plain));
    else
      CHECK(ids == reference_ids("xabcdy abcab b bcdzzz abab abc abcd abc xyz", few, *plain));
  }
}
