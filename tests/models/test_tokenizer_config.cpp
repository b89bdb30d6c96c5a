// Tests of tokenizer_config.json read as transformers reads it (issue 49 §2): model_input_names without
// token_type_ids (no type ids), do_lower_case where tokenizer.json's BertNormalizer does not say lowercase,
// truncation_side left for single texts and pairs, model_max_length, and the refusal of bad values.
#include "test_support.hpp"

#include "flowline/models/checkpoint.hpp"
#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>

#include <functional>

#include <unistd.h>

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace flowline;
using namespace flowline::models;

namespace {

const fs::path kTiny = fs::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";

// A copy of tiny checkpoint `name` whose tokenizer_config.json gets `config`'s keys (null removes one) and
// whose tokenizer.json is changed by `change`.
struct Variant {
  fs::path dir;
  Variant(
      const std::string& name, const json::object& config,
      const std::function<void(json::object&)>& change = [](json::object&) {}) {
    // ctest runs this binary's cases in parallel processes: the pid keeps their copies apart.
    static int made = 0;
    dir = testing::scratch_dir("tokenizer config " + name + " " + std::to_string(::getpid()) + " " +
                               std::to_string(++made));
    fs::remove_all(dir);
    fs::copy(kTiny / name, dir, fs::copy_options::recursive);
    auto c = json::parse(testing::read_text(dir / "tokenizer_config.json")).as_object();
    for (const auto& [key, value] : config) {
      if (value.is_null()) {
        c.erase(key);
      } else {
        c[key] = value;
      }
    }
    testing::write_text(dir / "tokenizer_config.json", json::serialize(c));
    auto t = json::parse(testing::read_text(dir / "tokenizer.json")).as_object();
    change(t);
    testing::write_text(dir / "tokenizer.json", json::serialize(t));
  }
  ~Variant() { fs::remove_all(dir); }
};

void set_lowercase(json::object& tokenizer, const json::value& lowercase) {
  auto& normalizer = tokenizer["normalizer"].as_object();
  if (lowercase.is_null()) {
    normalizer.erase("lowercase");
  } else {
    normalizer["lowercase"] = lowercase;
  }
}

const std::string kMixedCase = "Alice Was Beginning TO get Very Tired";

}  // namespace

TEST_CASE("do_lower_case decides a BertNormalizer's case where tokenizer.json does not say it", "[models][tokenizer]") {
  const auto lower = Tokenizer::from_folder(kTiny / "bert-cross-encoder")->encode(kMixedCase);
  const Variant cased_reference("bert-cross-encoder", {}, [](json::object& t) { set_lowercase(t, false); });
  const auto cased = Tokenizer::from_folder(cased_reference.dir)->encode(kMixedCase);
  REQUIRE(cased != lower);  // the text shows the difference
  // tokenizer.json without `lowercase`: tokenizer_config.json's do_lower_case (true when absent, as
  // transformers' BertTokenizer defaults).
  const auto absent = [](json::object& t) { set_lowercase(t, nullptr); };
  CHECK(Tokenizer::from_folder(Variant("bert-cross-encoder", {{"do_lower_case", false}}, absent).dir)
            ->encode(kMixedCase) == cased);
  CHECK(Tokenizer::from_folder(Variant("bert-cross-encoder", {{"do_lower_case", true}}, absent).dir)
            ->encode(kMixedCase) == lower);
  CHECK(Tokenizer::from_folder(Variant("bert-cross-encoder", {{"do_lower_case", nullptr}}, absent).dir)
            ->encode(kMixedCase) == lower);
  // Where tokenizer.json says it, tokenizer.json's word stands.
  CHECK(Tokenizer::from_folder(Variant("bert-cross-encoder", {{"do_lower_case", false}}).dir)->encode(kMixedCase) ==
        lower);
  const Variant bad("bert-cross-encoder", {{"do_lower_case", "yes"}}, absent);
  CHECK_THROWS_WITH(Tokenizer::from_folder(bad.dir),
                    testing::contains("tokenizer_config.json") && testing::contains("do_lower_case"));
}

TEST_CASE("truncation_side left keeps a text's last tokens, before the template's closing token",
          "[models][tokenizer]") {
  const std::string text = "Alice was beginning to get very tired of sitting by her sister on the bank";
  const auto plain = Tokenizer::from_folder(kTiny / "qwen3");
  CHECK_FALSE(plain->truncates_left());
  const auto full = plain->encode(text);  // its tokens, then <|endoftext|>
  REQUIRE(full.size() > 10);
  const Variant left("qwen3", {{"truncation_side", "left"}});
  const auto tokenizer = Tokenizer::from_folder(left.dir);
  CHECK(tokenizer->truncates_left());
  CHECK(tokenizer->encode(text, 8) == std::vector<std::int32_t>(full.end() - 8, full.end()));
  CHECK(tokenizer->encode(text) == full);
  std::vector<std::int32_t> kept_start(full.begin(), full.begin() + 7);  // the default: the text's first tokens
  kept_start.push_back(full.back());
  CHECK(plain->encode(text, 8) == kept_start);
  const Variant right("qwen3", {{"truncation_side", "right"}});
  CHECK(Tokenizer::from_folder(right.dir)->encode(text, 8) == plain->encode(text, 8));
  const Variant bad("qwen3", {{"truncation_side", "middle"}});
  CHECK_THROWS_WITH(Tokenizer::from_folder(bad.dir),
                    testing::contains("tokenizer_config.json") && testing::contains("truncation_side"));
}

TEST_CASE("truncation_side left cuts each of a pair's texts at its start, longest first", "[models][tokenizer]") {
  const std::string query = "Alice was beginning to get very tired", document = "of sitting by her sister on the bank";
  const auto plain = Tokenizer::from_folder(kTiny / "bert-cross-encoder");
  // Each text's tokens without [CLS] and [SEP].
  auto inner = [&](const std::string& text) {
    const auto ids = plain->encode(text);
    return std::vector<std::int32_t>(ids.begin() + 1, ids.end() - 1);
  };
  const auto a = inner(query), b = inner(document);
  REQUIRE(a.size() + b.size() > 12);
  const Variant left("bert-cross-encoder", {{"truncation_side", "left"}});
  const auto tokenizer = Tokenizer::from_folder(left.dir);
  const std::size_t max_length = 12, budget = max_length - 3;  // [CLS] a [SEP] b [SEP]
  // tokenizers' longest_first: the shorter keeps up to half, the longer the rest.
  std::size_t n1 = a.size(), n2 = b.size();
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  const auto cls = plain->token_id("[CLS]"), sep = plain->token_id("[SEP]");
  std::vector<std::int32_t> expected{cls};
  expected.insert(expected.end(), a.end() - static_cast<std::ptrdiff_t>(std::min(n1, a.size())), a.end());
  expected.push_back(sep);
  expected.insert(expected.end(), b.end() - static_cast<std::ptrdiff_t>(std::min(n2, b.size())), b.end());
  expected.push_back(sep);
  std::vector<std::int32_t> ids, types;
  tokenizer->encode_pair_into(query, document, max_length, ids, &types);
  CHECK(ids == expected);
  // The many-documents form agrees.
  std::vector<std::int32_t> many;
  std::vector<std::size_t> lengths;
  const std::string_view documents[] = {document, document};
  tokenizer->encode_pairs_into(query, documents, max_length, many, nullptr, lengths);
  CHECK(lengths == std::vector<std::size_t>{expected.size(), expected.size()});
  CHECK(std::vector<std::int32_t>(many.begin(), many.begin() + static_cast<std::ptrdiff_t>(expected.size())) ==
        expected);
}

TEST_CASE("model_input_names without token_type_ids means the model gets no type ids", "[models][tokenizer]") {
  CHECK(Tokenizer::from_folder(kTiny / "bert-cross-encoder")->type_ids_input());
  const json::array without{"input_ids", "attention_mask"}, with{"input_ids", "token_type_ids", "attention_mask"};
  CHECK_FALSE(
      Tokenizer::from_folder(Variant("bert-cross-encoder", {{"model_input_names", without}}).dir)->type_ids_input());
  CHECK(Tokenizer::from_folder(Variant("bert-cross-encoder", {{"model_input_names", with}}).dir)->type_ids_input());
  const Variant bad("bert-cross-encoder", {{"model_input_names", "input_ids"}});
  CHECK_THROWS_WITH(Tokenizer::from_folder(bad.dir),
                    testing::contains("tokenizer_config.json") && testing::contains("model_input_names"));
  // Validation builds the tokenizer, so it names the problem too.
  CHECK_THAT(Checkpoint::problem(bad.dir, Checkpoint::Use::CrossEncoder).value_or(""),
             testing::contains("model_input_names"));
}

TEST_CASE("model_max_length bounds a checkpoint's sequences where no sentence_bert_config.json does",
          "[models][tokenizer]") {
  CHECK(Checkpoint::read(kTiny / "bert-cross-encoder").max_seq_length == 64);
  CHECK(Checkpoint::read(Variant("bert-cross-encoder", {{"model_max_length", 16}}).dir).max_seq_length == 16);
  // transformers' "no limit" (1e30) leaves the positions' bound.
  CHECK(Checkpoint::read(Variant("bert-cross-encoder", {{"model_max_length", 1e30}}).dir).max_seq_length == 512);
}
