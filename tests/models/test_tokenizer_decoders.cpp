// The tokenizer's way back from ids: id_to_token, continuing_subword_prefix and decode_tokens (tokenizer.json's
// decoders) against Python `tokenizers` 0.23 — tests/data/tokenizers/decode-goldens.json, written by
// scripts/tokenizer_decode_reference.py: every id of every tokenizer file the tests hold, and decoder.decode
// over whole encodings and spans of 1 to 5 tokens under every decoder type. Part of test_tokenizers (its main).
#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include "flowline/error.hpp"
#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using flowline::models::Tokenizer;

namespace {

const fs::path kSource(FLOWLINE_SOURCE_DIR);

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::uint64_t fnv64(std::string_view data) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : data) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return h;
}
std::string hex64(std::string_view data) { return fmt::format("{:016x}", fnv64(data)); }
std::string hex32(std::string_view data) { return hex64(data).substr(8); }

// The tokenizer file with `decoder` in place of its own (null: none).
std::unique_ptr<Tokenizer> with_decoder(const fs::path& path, const boost::json::value& decoder) {
  boost::json::value root = boost::json::parse(file_text(path));
  root.as_object()["decoder"] = decoder;
  return Tokenizer::from_json_text(boost::json::serialize(root), path.string());
}

std::optional<std::string> decoded(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  std::vector<std::string_view> tokens;
  for (const std::int32_t id : ids) tokens.push_back(tok.id_to_token(id));
  try {
    return tok.decode_tokens(tokens);
  } catch (const flowline::Error&) {
    return std::nullopt;  // Python panics there too (the goldens hold null)
  }
}

const boost::json::array& golden_files() {
  static const boost::json::value goldens =
      boost::json::parse(file_text(kSource / "tests/data/tokenizers/decode-goldens.json"));
  return goldens.at("files").as_array();
}

void check_id_to_token(const boost::json::object& golden, const Tokenizer& tok) {
  const auto count = golden.at("ids").to_number<std::int64_t>();
  std::string joined;
  for (std::int64_t id = 0; id < count; ++id) {
    const std::string_view token = tok.id_to_token(static_cast<std::int32_t>(id));
    (joined += id == 0 ? "" : "\n") += token.empty() ? std::string_view("\x01") : token;
  }
  for (const auto& pair : golden.at("sample").as_array()) {
    const auto id = static_cast<std::int32_t>(pair.as_array()[0].to_number<std::int64_t>());
    const boost::json::value& want = pair.as_array()[1];
    INFO(fmt::format("id {}", id));
    CHECK(std::string(tok.id_to_token(id)) == (want.is_null() ? std::string() : std::string(want.as_string())));
  }
  CHECK(hex64(joined) == std::string(golden.at("id_to_token_hash").as_string()));
  CHECK(std::string(tok.continuing_subword_prefix()) ==
        std::string(golden.at("continuing_subword_prefix").as_string()));
  CHECK(tok.id_to_token(-1).empty());
  CHECK(tok.id_to_token(static_cast<std::int32_t>(count) + 1000).empty());
}

// Every case of one decoder: the whole encodings and spans, then every single token of the vocabulary.
void check_decoder(const boost::json::object& golden, const boost::json::object& variant, const Tokenizer& tok) {
  const boost::json::array& cases = golden.at("cases").as_array();
  const boost::json::array& hashes = variant.at("hashes").as_array();
  const boost::json::array& shown = variant.at("shown").as_array();
  REQUIRE(cases.size() == hashes.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::int32_t> ids;
    for (const auto& id : cases[i].as_array()) ids.push_back(static_cast<std::int32_t>(id.to_number<std::int64_t>()));
    const std::optional<std::string> got = decoded(tok, ids);
    const std::string got_hash = got ? hex32(*got) : "null";
    const std::string want_hash = hashes[i].is_null() ? "null" : std::string(hashes[i].as_string());
    if (got_hash == want_hash) continue;
    if (++mismatches <= 3)
      fmt::print("{} decoder {}: case {} ({} ids) gives \"{}\"{}\n", golden.at("name").as_string(),
                 boost::json::serialize(variant.at("decoder")), i, ids.size(), got.value_or("(error)"),
                 i < shown.size() ? fmt::format(", Python \"{}\"", boost::json::serialize(shown[i])) : "");
  }
  CHECK(mismatches == 0);
  const auto count = golden.at("ids").to_number<std::int64_t>();
  std::string singles;
  for (std::int64_t id = 0; id + 3 < count; ++id) {
    const std::string_view token = tok.id_to_token(static_cast<std::int32_t>(id));
    const std::optional<std::string> one =
        token.empty() ? std::optional<std::string>("\x02") : decoded(tok, {static_cast<std::int32_t>(id)});
    (singles += id == 0 ? "" : "\n") += one.value_or("\x01");
  }
  CHECK(hex64(singles) == std::string(variant.at("singles_hash").as_string()));
}

}  // namespace

TEST_CASE("id_to_token and decode_tokens give what Python tokenizers' id_to_token and decoder.decode give",
          "[tokenizers][decoders]") {
  std::size_t files = 0, decoders = 0;
  for (const auto& entry : golden_files()) {
    const boost::json::object& golden = entry.as_object();
    const fs::path path = kSource / std::string(golden.at("path").as_string());
    if (!fs::exists(path)) continue;  // models/all-MiniLM-L6-v2 comes from scripts/setup.sh
    INFO(std::string(golden.at("name").as_string()));
    ++files;
    check_id_to_token(golden, *Tokenizer::from_json_file(path));
    for (const auto& variant : golden.at("decoders").as_array()) {
      INFO(boost::json::serialize(variant.at("decoder")));
      check_decoder(golden, variant.as_object(), *with_decoder(path, variant.at("decoder")));
      ++decoders;
    }
  }
  fmt::print("decoders: {} tokenizer files, {} decoders compared with Python tokenizers\n", files, decoders);
  CHECK(files >= 16);
}

TEST_CASE("a decoder flowline does not run leaves encoding alone and makes decode_tokens say which and where",
          "[tokenizers][decoders]") {
  const fs::path path = kSource / "tests/data/tokenizers/wordpiece-cased/tokenizer.json";
  const auto tok = with_decoder(path, boost::json::object{{"type", "Mystery"}});
  CHECK(!tok->encode("The house").empty());
  const std::vector<std::string_view> tokens = {"The", "house"};
  try {
    tok->decode_tokens(tokens);
    FAIL("decode_tokens should have thrown");
  } catch (const flowline::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("decoder 'Mystery' is not supported") != std::string::npos);
    CHECK(what.find("wordpiece-cased/tokenizer.json") != std::string::npos);
    CHECK(what.find("decoder.type") != std::string::npos);
  }
  // Inside a Sequence, the path names its place.
  const auto nested =
      with_decoder(path, boost::json::object{{"type", "Sequence"},
                                             {"decoders", boost::json::array{boost::json::object{{"type", "Fuse"}},
                                                                             boost::json::object{{"type", "X"}}}}});
  std::string nested_error;
  try {
    nested->decode_tokens(tokens);
  } catch (const flowline::Error& e) {
    nested_error = e.what();
  }
  CHECK(nested_error.find("decoder.decoders[1].type: decoder 'X' is not supported") != std::string::npos);
}

TEST_CASE("without a decoder the tokens are joined by spaces, and a Strip past a token is an error",
          "[tokenizers][decoders]") {
  const fs::path path = kSource / "tests/data/tokenizers/wordpiece-cased/tokenizer.json";
  const std::vector<std::string_view> tokens = {"The", "##re", "!"};
  CHECK(with_decoder(path, nullptr)->decode_tokens(tokens) == "The ##re !");
  CHECK(with_decoder(path, boost::json::object{{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}})
            ->decode_tokens(tokens) == "There!");
  // transformers 5.24's convert_tokens_to_string on tiny-bert gives this whatever clean_up_tokenization_spaces
  // says (that flag is decode(ids)'s): only the decoder's own cleanup applies.
  const std::vector<std::string_view> ner = {"hello", ",", "world", "!", "do", "n", "'", "t", "##s"};
  CHECK(Tokenizer::from_folder(kSource / "tests/data/tiny-bert")->decode_tokens(ner) == "hello, world! do n ' ts");
  const auto strip =
      with_decoder(path, boost::json::object{{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 3}});
  const std::vector<std::string_view> spaces = {"  "};
  CHECK_THROWS_AS(strip->decode_tokens(spaces), flowline::Error);
  const std::vector<std::string_view> none;
  CHECK(strip->decode_tokens(none).empty());
}
