// Tests of flowline::models::Tokenizer: token ids identical to Python `tokenizers` on 20,000 texts
// (scripts/tokenizer_reference.py writes them and the reference ids) for every tokenizer file, singles and
// pairs, with and without truncation, and each token's offsets identical to its Encoding.offsets; and clear
// errors for what it cannot run. Under CI=true the first 2,000 of those texts: Python's references for 15
// files take minutes on two cores, and CI's time is bounded. LibTorch-free: this program links
// flowline::tokenizers only. Without the project venv's `tokenizers` the parity cases skip, and fail
// instead under CI=true.
#if defined(FLOWLINE_CATCH3) || __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define FLOWLINE_SKIP_TOKENIZERS(reason) SKIP(reason)
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#define FLOWLINE_SKIP_TOKENIZERS(reason) \
  do {                                   \
    WARN(reason);                        \
    return;                              \
  } while (false)
#endif

#include "../support/ci.hpp"
#include "flowline/error.hpp"
#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using flowline::models::Tokenizer;
using flowline::testing::running_in_ci;

namespace {

const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kReferences = fs::path(FLOWLINE_BINARY_DIR) / "tokenizer-parity";

// The tokenizer files compared, by name: the real MiniLM one and the generated ones (scripts/make_tokenizers.py).
struct TokenizerFile {
  std::string name;
  fs::path json;
};
std::vector<TokenizerFile> tokenizer_files() {
  std::vector<TokenizerFile> files = {{"minilm", kSource / "models/all-MiniLM-L6-v2/tokenizer.json"},
                                      {"tiny-bert", kSource / "tests/data/tiny-bert/tokenizer.json"}};
  for (const char* kind :
       {"wordpiece-cased", "wordpiece-lower", "wordpiece-whitespace", "wordpiece-added-options", "unigram-xlmr",
        "unigram-byte-fallback", "unigram-prepend-first", "unigram-whitespace-first", "unigram-xlmr-first",
        "bpe-bytelevel-roberta", "bpe-bytelevel-modernbert", "bpe-split-qwen", "bpe-bytefallback-llama"})
    files.push_back({kind, kSource / "tests/data/tokenizers" / kind / "tokenizer.json"});
  return files;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// How many texts are compared: 20,000, or 2,000 under CI=true.
std::size_t text_count() { return running_in_ci() ? 2000 : 20000; }

// Each ctest entry is a process of its own: references of the count asked for, newer than the script and
// every tokenizer file, are reused rather than asked of Python again.
bool references_are_current() {
  std::error_code ec;
  const auto made = fs::last_write_time(kReferences / "texts.json", ec);
  if (ec) return false;
  try {
    const boost::json::value texts = boost::json::parse(read_text(kReferences / "texts.json"));
    const auto* count = texts.as_object().if_contains("count");
    if (count == nullptr || count->to_number<std::size_t>() != text_count()) return false;
  } catch (const std::exception&) {
    return false;
  }
  std::vector<fs::path> inputs = {kSource / "scripts/tokenizer_reference.py"};
  for (const TokenizerFile& f : tokenizer_files()) {
    if (!fs::exists(kReferences / (f.name + ".json"))) return false;
    inputs.push_back(f.json);
  }
  for (const fs::path& input : inputs)
    if (fs::last_write_time(input, ec) > made || ec) return false;
  return true;
}

// Runs the reference script once per program; returns why it could not, empty when the references exist.
std::string make_references() {
  static const std::string failure = [] {
    if (!fs::exists(kSource / "models/all-MiniLM-L6-v2/tokenizer.json"))
      return std::string("models/all-MiniLM-L6-v2/tokenizer.json is missing (run scripts/setup.sh)");
    if (references_are_current()) return std::string();
    std::string command = fmt::format("'{}' '{}' --corpus '{}' --out '{}' --count {}", FLOWLINE_TEST_PYTHON,
                                      (kSource / "scripts/tokenizer_reference.py").string(), FLOWLINE_CORPUS_DIR,
                                      kReferences.string(), text_count());
    for (const TokenizerFile& f : tokenizer_files()) command += fmt::format(" '{}={}'", f.name, f.json.string());
    if (std::system((command + " > '" + (kReferences.string() + ".log") + "' 2>&1").c_str()) != 0)
      return fmt::format("the reference script failed (is `tokenizers` in {}?): {}", FLOWLINE_TEST_PYTHON,
                         read_text(kReferences.string() + ".log"));
    return std::string();
  }();
  return failure;
}

std::vector<std::vector<std::int32_t>> id_lists(const boost::json::value& v) {
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& list : v.as_array()) {
    out.emplace_back();
    for (const auto& id : list.as_array())
      out.back().push_back(static_cast<std::int32_t>(id.to_number<std::int64_t>()));
  }
  return out;
}

// Offsets flattened as the reference script writes them: start, end, start, end, ...
std::vector<std::int32_t> flat(const std::vector<flowline::models::TokenOffsets>& offsets) {
  std::vector<std::int32_t> out;
  for (const auto& o : offsets) {
    out.push_back(static_cast<std::int32_t>(o.start));
    out.push_back(static_cast<std::int32_t>(o.end));
  }
  return out;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (const unsigned char c : text)
    out += c < 0x20 || c == 0x7F || c == '\\' ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
  return out.size() > 300 ? out.substr(0, 300) + "..." : out;
}

std::string first_difference(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const auto window = [i](const std::vector<std::int32_t>& v) {
    const std::size_t from = i < 4 ? 0 : i - 4;
    return fmt::format("{}[{}]", from == 0 ? "" : "... ",
                       fmt::join(v.begin() + static_cast<std::ptrdiff_t>(std::min(from, v.size())),
                                 v.begin() + static_cast<std::ptrdiff_t>(std::min(i + 6, v.size())), " "));
  };
  return fmt::format("first difference at id {} of {} / {}: flowline {}, tokenizers {}", i, got.size(), want.size(),
                     window(got), window(want));
}

// Compares every id of every text; reports at most a few mismatches in full, and counts them all.
void check_parity(const Tokenizer& tok, const std::string& reference_name) {
  if (const std::string why = make_references(); !why.empty()) {
    if (running_in_ci()) FAIL(why);
    FLOWLINE_SKIP_TOKENIZERS(why);
  }
  const boost::json::value input = boost::json::parse(read_text(kReferences / "texts.json"));
  const boost::json::value ref = boost::json::parse(read_text(kReferences / (reference_name + ".json")));
  std::vector<std::string> texts;
  for (const auto& t : input.at("texts").as_array()) texts.emplace_back(t.as_string());
  const std::size_t single_max = input.at("single_truncation").to_number<std::size_t>();
  const std::size_t pair_max = input.at("pair_truncation").to_number<std::size_t>();
  const auto single = id_lists(ref.at("single")), single_truncated = id_lists(ref.at("single_truncated"));
  const auto pair = id_lists(ref.at("pair")), pair_types = id_lists(ref.at("pair_types"));
  const auto pair_truncated = id_lists(ref.at("pair_truncated"));
  const auto pair_truncated_types = id_lists(ref.at("pair_truncated_types"));
  const auto single_offsets = id_lists(ref.at("single_offsets"));
  const auto single_truncated_offsets = id_lists(ref.at("single_truncated_offsets"));
  const auto pair_offsets = id_lists(ref.at("pair_offsets"));
  const auto pair_truncated_offsets = id_lists(ref.at("pair_truncated_offsets"));
  REQUIRE(texts.size() == text_count());

  std::size_t mismatches = 0, compared = 0, offset_mismatches = 0, offsets_compared = 0;
  const auto compare = [&](const char* mode, const std::string& text, const std::vector<std::int32_t>& got,
                           const std::vector<std::int32_t>& want) {
    ++compared;
    if (got == want) return;
    if (++mismatches <= 5)
      UNSCOPED_INFO(
          fmt::format("{} {}: text \"{}\": {}", reference_name, mode, escaped(text), first_difference(got, want)));
  };
  // encode_with_offsets: its ids are the reference's too, and its offsets (flattened) Encoding.offsets.
  const auto compare_offsets = [&](const char* mode, const std::string& text, const flowline::models::Encoding& e,
                                   const std::vector<std::int32_t>& want_ids, const std::vector<std::int32_t>& want) {
    ++offsets_compared;
    const std::vector<std::int32_t> got = flat(e.offsets);
    if (e.ids == want_ids && got == want) return;
    if (++offset_mismatches <= 8)
      fmt::print("{}\n", fmt::format("{} {} offsets: text \"{}\": {}", reference_name, mode, escaped(text),
                                     e.ids != want_ids ? "ids: " + first_difference(e.ids, want_ids)
                                                       : first_difference(got, want)));
  };
  std::vector<std::int32_t> ids, types;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    compare("single", texts[i], tok.encode(texts[i]), single[i]);
    compare("single truncated", texts[i], tok.encode(texts[i], single_max), single_truncated[i]);
    compare_offsets("single", texts[i], tok.encode_with_offsets(texts[i]), single[i], single_offsets[i]);
    compare_offsets("single truncated", texts[i], tok.encode_with_offsets(texts[i], single_max), single_truncated[i],
                    single_truncated_offsets[i]);
    const auto& p = input.at("pairs").as_array()[i].as_array();
    const std::string& a = texts[p[0].to_number<std::size_t>()];
    const std::string& b = texts[p[1].to_number<std::size_t>()];
    const std::string both = a + " ||| " + b;
    compare_offsets("pair", both, tok.encode_pair_with_offsets(a, b), pair[i], pair_offsets[i]);
    compare_offsets("pair truncated", both, tok.encode_pair_with_offsets(a, b, pair_max), pair_truncated[i],
                    pair_truncated_offsets[i]);
    ids.clear(), types.clear();
    tok.encode_pair_into(a, b, 0, ids, &types);
    compare("pair", both, ids, pair[i]);
    compare("pair type ids", both, types, pair_types[i]);
    ids.clear(), types.clear();
    tok.encode_pair_into(a, b, pair_max, ids, &types);
    compare("pair truncated", both, ids, pair_truncated[i]);
    compare("pair truncated type ids", both, types, pair_truncated_types[i]);
    // The reranker's path: the query tokenized once for a list of documents (here b and b again).
    ids.clear(), types.clear();
    std::vector<std::size_t> lengths;
    const std::string_view documents[] = {b, b};
    tok.encode_pairs_into(a, documents, pair_max, ids, &types, lengths);
    std::vector<std::int32_t> twice = pair_truncated[i];
    twice.insert(twice.end(), pair_truncated[i].begin(), pair_truncated[i].end());
    compare("pairs of one query, truncated", both, ids, twice);
    if (lengths.size() != 2 || lengths[0] != pair_truncated[i].size() || lengths[1] != lengths[0]) ++mismatches;
  }
  INFO(fmt::format("{} of {} id lists differ", mismatches, compared));
  INFO(fmt::format("{} of {} offset lists differ", offset_mismatches, offsets_compared));
  fmt::print("parity {}: {} of {} id lists and {} of {} offset lists equal to Python tokenizers'\n", reference_name,
             compared - mismatches, compared, offsets_compared - offset_mismatches, offsets_compared);
  CHECK(mismatches == 0);
  CHECK(offset_mismatches == 0);
  CHECK(compared == 7 * texts.size());
  CHECK(offsets_compared == 4 * texts.size());
}

fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(FLOWLINE_BINARY_DIR) / "tokenizer-tests" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string error_of(const std::string& json) {
  try {
    Tokenizer::from_json_text(json, "t.json");
  } catch (const flowline::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the MiniLM tokenizer.json gives the ids of Python tokenizers", "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "models/all-MiniLM-L6-v2");
  CHECK(tok->describe() == "WordPiece (BertNormalizer, BertPreTokenizer, TemplateProcessing)");
  check_parity(*tok, "minilm");
}

TEST_CASE("a folder with only vocab.txt gives the ids of the BERT tokenizer.json", "[tokenizers][parity]") {
  const fs::path dir = scratch_dir("vocab only");
  fs::copy_file(kSource / "models/all-MiniLM-L6-v2/vocab.txt", dir / "vocab.txt");
  write_text(dir / "tokenizer_config.json", R"({"do_lower_case": true, "tokenize_chinese_chars": true})");
  const auto tok = Tokenizer::from_folder(dir);
  CHECK(tok->describe() == "WordPiece (BertNormalizer, BertPreTokenizer, BertProcessing)");
  check_parity(*tok, "minilm");
}

TEST_CASE("a cased WordPiece with NFKC, Strip, Replace and WhitespaceSplit gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/wordpiece-cased");
  check_parity(*tok, "wordpiece-cased");
}

TEST_CASE("a WordPiece with NFD, Lowercase, StripAccents, NFC and RobertaProcessing gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/wordpiece-lower");
  check_parity(*tok, "wordpiece-lower");
}

TEST_CASE("a WordPiece with the Whitespace pre-tokenizer and TemplateProcessing gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/wordpiece-whitespace");
  CHECK(tok->describe() == "WordPiece (BertNormalizer, Whitespace, TemplateProcessing)");
  check_parity(*tok, "wordpiece-whitespace");
}

TEST_CASE(
    "XLM-RoBERTa's layout (Precompiled, Metaspace, Unigram, <mask> with lstrip) gives the ids of Python tokenizers",
    "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/unigram-xlmr");
  CHECK(tok->describe() == "Unigram (Precompiled, Replace, Metaspace, TemplateProcessing)");
  check_parity(*tok, "unigram-xlmr");
}

TEST_CASE(
    "a Unigram with byte fallback, Metaspace without prepending or splitting and an added token with lstrip "
    "and rstrip gives the ids of Python tokenizers",
    "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/unigram-byte-fallback");
  CHECK(tok->describe() == "Unigram (NFKC, Lowercase, Metaspace, none)");
  check_parity(*tok, "unigram-byte-fallback");
}

TEST_CASE(
    "added tokens with single_word, normalized, lstrip and rstrip, alone and together, give the ids of Python "
    "tokenizers",
    "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/wordpiece-added-options");
  CHECK(tok->describe() == "WordPiece (BertNormalizer, BertPreTokenizer, BertProcessing)");
  CHECK(tok->token_id("ion") == 3001);
  check_parity(*tok, "wordpiece-added-options");
}

TEST_CASE(
    "Metaspace with prepend_scheme first (after added tokens, normalizers that drop the first character) gives "
    "the ids of Python tokenizers",
    "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/unigram-prepend-first");
  CHECK(tok->describe() ==
        "Unigram (NFD, StripAccents, Lowercase, NFC, Replace, Replace, Metaspace, "
        "TemplateProcessing)");
  check_parity(*tok, "unigram-prepend-first");
}

TEST_CASE("Metaspace with prepend_scheme first after WhitespaceSplit gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/unigram-whitespace-first");
  CHECK(tok->describe() == "Unigram (BertNormalizer, WhitespaceSplit, Metaspace, TemplateProcessing)");
  check_parity(*tok, "unigram-whitespace-first");
}

TEST_CASE("XLM-RoBERTa's layout with prepend_scheme first gives the ids of Python tokenizers", "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/unigram-xlmr-first");
  check_parity(*tok, "unigram-xlmr-first");
}

TEST_CASE("the tokenizer.json of the tiny test checkpoints gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  // tests/data/tiny-models/* carry this same file.
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tiny-bert");
  check_parity(*tok, "tiny-bert");
}

TEST_CASE("a byte-level BPE in RoBERTa's layout (prefix space, \"a b\" merges) gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/bpe-bytelevel-roberta");
  CHECK(tok->describe() == "BPE (ByteLevel, RobertaProcessing)");
  check_parity(*tok, "bpe-bytelevel-roberta");
}

TEST_CASE("a byte-level BPE in ModernBERT's layout gives the ids of Python tokenizers", "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/bpe-bytelevel-modernbert");
  CHECK(tok->describe() == "BPE (ByteLevel, TemplateProcessing)");
  check_parity(*tok, "bpe-bytelevel-modernbert");
}

TEST_CASE(
    "a BPE in Qwen2's layout (NFC, Split with its pattern, ByteLevel, ignore_merges, a Sequence of "
    "post-processors) gives the ids of Python tokenizers",
    "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/bpe-split-qwen");
  CHECK(tok->describe() == "BPE (NFC, Split, ByteLevel, Sequence[ByteLevel, TemplateProcessing])");
  CHECK(tok->special_tokens_count(false) == 1);
  check_parity(*tok, "bpe-split-qwen");
}

TEST_CASE("a sentencepiece-style BPE with byte_fallback and fuse_unk gives the ids of Python tokenizers",
          "[tokenizers][parity]") {
  const auto tok = Tokenizer::from_folder(kSource / "tests/data/tokenizers/bpe-bytefallback-llama");
  CHECK(tok->describe() == "BPE (Prepend, Replace, TemplateProcessing)");
  check_parity(*tok, "bpe-bytefallback-llama");
}

TEST_CASE("BPE follows tokenizers' merge queue, prefix, suffix and unknown-token rules", "[tokenizers]") {
  // a+b and b+c are both merges; the lower rank wins, then ab+c makes abc.
  const auto tok = Tokenizer::from_json_text(R"({"model": {"type": "BPE", "unk_token": "?", "fuse_unk": false,
      "vocab": {"?": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6},
      "merges": [["a", "b"], "b c", ["ab", "c"]]}})",
                                             "t.json");
  CHECK(tok->encode("abc") == std::vector<std::int32_t>{6});
  CHECK(tok->encode("bca") == std::vector<std::int32_t>{5, 1});
  CHECK(tok->encode("axxb") == std::vector<std::int32_t>{1, 0, 0, 2});
  const auto fused = Tokenizer::from_json_text(R"({"model": {"type": "BPE", "unk_token": "?", "fuse_unk": true,
      "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
      "vocab": {"?": 0, "a": 1, "##b": 2, "##c</w>": 3, "a##b": 4}, "merges": []}})",
                                               "t.json");
  CHECK(fused->encode("abc") == std::vector<std::int32_t>{1, 2, 3});
  CHECK(fused->encode("axxc") == std::vector<std::int32_t>{1, 0, 3});
  // Without a pre-tokenizer a text is one word; it is merged part by part, cut before each '▁' that follows
  // another character, only where no merge could join across such a place. Here "a" + "▁" can: one word.
  const std::string across = R"({"model": {"type": "BPE", "vocab": {"▁": 0, "a": 1, "b": 2, "▁a": 3, "▁b": 4,
      "a▁": 5, "a▁b": 6}, "merges": [["a", "▁"], ["a▁", "b"], ["▁", "a"], ["▁", "b"]]}})";
  CHECK(Tokenizer::from_json_text(across, "t.json")->encode("▁a▁b") == std::vector<std::int32_t>{0, 6});
  const std::string within = R"({"model": {"type": "BPE", "vocab": {"▁": 0, "a": 1, "b": 2, "▁a": 3, "▁b": 4},
      "merges": [["▁", "a"], ["▁", "b"]]}})";
  CHECK(Tokenizer::from_json_text(within, "t.json")->encode("▁a▁b▁▁a") == std::vector<std::int32_t>{3, 4, 0, 3});
}

TEST_CASE("Split's delimiter behaviours and Replace's Regex pattern cut text as tokenizers does", "[tokenizers]") {
  const auto split = [](const std::string& behavior, bool invert) {
    return Tokenizer::from_json_text(
        R"({"pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior +
            R"(", "invert": )" + (invert ? "true" : "false") +
            R"(}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "-": 2, "a-": 3, "-b": 4, "--": 5, "a--": 6,
            "--b": 7}, "merges": [["a", "-"], ["-", "b"], ["-", "-"], ["a", "--"], ["--", "b"]]}})",
        "t.json");
  };
  using Ids = std::vector<std::int32_t>;
  CHECK(split("Removed", false)->encode("a--b") == Ids{0, 1});
  CHECK(split("Isolated", false)->encode("a--b") == Ids{0, 2, 2, 1});
  CHECK(split("MergedWithPrevious", false)->encode("a--b") == Ids{3, 2, 1});
  CHECK(split("MergedWithNext", false)->encode("a--b") == Ids{0, 2, 4});
  CHECK(split("Contiguous", false)->encode("a--b") == Ids{0, 5, 1});
  CHECK(split("Removed", true)->encode("a--b") == Ids{2, 2});
  const auto replace = Tokenizer::from_json_text(
      R"({"normalizer": {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "Isolated", "invert": false},
      "model": {"type": "BPE", "unk_token": "?", "vocab": {"?": 0, "a": 1, " ": 2}, "merges": []}})",
      "t.json");
  CHECK(replace->encode("a    a  a a") == Ids{1, 2, 1, 2, 1, 2, 1});
}

TEST_CASE("a Replace whose Regex matches empty text inserts and places its content as tokenizers does",
          "[tokenizers]") {
  // The ids and offsets Python tokenizers 0.22.2 gives: what an empty match at the start inserts sits at
  // (0, 0), elsewhere in the place of the character before it. (An empty match at the start once left the
  // places one short: every later offset moved by one, the last read past the end.)
  const auto tok = [](const std::string& pattern) {
    return Tokenizer::from_json_text(R"({"normalizer": {"type": "Replace", "pattern": {"Regex": ")" + pattern +
                                         R"("}, "content": "Q"}, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
        "vocab": {"[UNK]": 0, "Q": 1, "a": 2, "##Q": 3, "##a": 4, "b": 5, "##b": 6, "x": 7, "##x": 8}}})",
                                     "t.json");
  };
  using Ids = std::vector<std::int32_t>;
  struct Case {
    std::string pattern, text;
    Ids ids, offsets;
  };
  const Case cases[] = {
      {"^", "ab xxa", {1, 4, 6, 7, 8, 4}, {0, 0, 0, 1, 1, 2, 3, 4, 4, 5, 5, 6}},
      {"^", " b", {1, 5}, {0, 0, 1, 2}},
      {"x*", "ab xxa", {1, 4, 3, 6, 3, 1, 4, 3}, {0, 0, 0, 1, 0, 1, 1, 2, 1, 2, 4, 5, 5, 6, 5, 6}},
      {"x*", " b", {1, 1, 6, 3}, {0, 0, 0, 1, 1, 2, 1, 2}},
      {"", "ab xxa", {1, 4, 3, 6, 3, 1, 8, 3, 8, 3, 4, 3}, {0, 0, 0, 1, 0, 1, 1, 2, 1, 2, 2, 3,
                                                            3, 4, 3, 4, 4, 5, 4, 5, 5, 6, 5, 6}},
      {"", "a", {1, 4, 3}, {0, 0, 0, 1, 0, 1}},
      {"", "", {}, {}},
  };
  for (const Case& c : cases) {
    INFO("pattern \"" << c.pattern << "\", text \"" << c.text << "\"");
    const auto t = tok(c.pattern);
    CHECK(t->encode(c.text) == c.ids);
    const auto e = t->encode_with_offsets(c.text);
    CHECK(e.ids == c.ids);
    CHECK(flat(e.offsets) == c.offsets);
  }
}

TEST_CASE("added tokens' options and Metaspace's prepend scheme first follow tokenizers' rules", "[tokenizers]") {
  // The ids Python tokenizers 0.22.2 gives for this file and these texts.
  const auto unigram = [](const std::string& normalizer, const std::string& added) {
    return Tokenizer::from_json_text(R"({"normalizer": )" + normalizer + R"(, "added_tokens": [)" + added +
                                         R"(], "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
        "prepend_scheme": "first", "split": true}, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0],
        ["▁", -1], ["a", -1], ["b", -1], ["c", -1], ["x", -1], ["X", -1], ["…", -1]]}})",
                                     "t.json");
  };
  using Ids = std::vector<std::int32_t>;
  const auto tok = unigram(R"({"type": "Lowercase"})", R"({"id": 8, "content": "ab", "single_word": true},
      {"id": 9, "content": "bc"}, {"id": 10, "content": "<x>", "normalized": true, "lstrip": true})");
  CHECK(tok->encode("xabc") == Ids{1, 5, 2, 3, 4});  // "ab" inside a word: no match, and no "bc" after it
  CHECK(tok->encode("ab c") == Ids{8, 1, 4});
  CHECK(tok->encode("ab\u0301") == Ids{1, 2, 3, 0});  // a mark is a word character
  CHECK(tok->encode("ab\U0001F600") == Ids{8, 0});
  CHECK(tok->encode("<X>abc") == Ids{10, 2, 3, 4});  // no ▁ after an added token at the start
  CHECK(tok->encode(" <X> a") == Ids{10, 1, 2});
  CHECK(tok->encode("a\u00a0<X>c") == Ids{1, 2, 10, 4});
  // A normalizer that drops the first character: no ▁.
  CHECK(unigram(R"({"type": "StripAccents"})", "")->encode("\u0301a") == Ids{2});
  CHECK(unigram(R"({"type": "Replace", "pattern": {"String": "ab"}, "content": "X"})", "")->encode("abc") == Ids{6, 4});
  CHECK(unigram(R"({"type": "Replace", "pattern": {"String": "a"}, "content": "X"})", "")->encode("abc") ==
        Ids{1, 6, 3, 4});
  CHECK(unigram(R"({"type": "Replace", "pattern": {"Regex": "x{2,}"}, "content": "…"})", "")->encode("xxa") ==
        Ids{7, 2});
  // A first character that grows: every word inside it is at offset 0.
  const auto split_first = [](const std::string& normalizer, const std::string& pre_tokenizer) {
    return Tokenizer::from_json_text(R"({"normalizer": )" + normalizer + R"(, "pre_tokenizer": {"type": "Sequence",
        "pretokenizers": [{"type": ")" + pre_tokenizer +
                                         R"j("}, {"type": "Metaspace", "replacement": "▁",
        "prepend_scheme": "first", "split": true}]}, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0],
        ["▁", -1], ["a", -1], ["b", -1], ["c", -1], ["x", -1], ["(", -1], [")", -1], ["1", -1], ["中", -1]]}})j",
                                     "t.json");
  };
  CHECK(split_first(R"({"type": "NFKC"})", "BertPreTokenizer")->encode("\u2474abc") == Ids{1, 6, 1, 8, 1, 7, 2, 3, 4});
  const std::string bert = R"({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
      "strip_accents": false, "lowercase": false})";
  CHECK(split_first(bert, "WhitespaceSplit")->encode("中abc") == Ids{1, 9, 2, 3, 4});
  CHECK(split_first(bert, "WhitespaceSplit")->encode("\x01中abc") == Ids{9, 2, 3, 4});
}

TEST_CASE("the MiniLM tokenizer answers ids, sizes and special-token counts", "[tokenizers]") {
  const auto tok = Tokenizer::from_folder(kSource / "models/all-MiniLM-L6-v2");
  CHECK(tok->vocab_size() == 30522);
  CHECK(tok->pad_id() == 0);
  CHECK(tok->unk_id() == 100);
  CHECK(tok->token_id("[CLS]") == 101);
  CHECK(tok->token_id("hello") == 7592);
  CHECK(tok->token_id("no such token") == -1);
  CHECK(tok->special_tokens_count(false) == 2);
  CHECK(tok->special_tokens_count(true) == 3);
  CHECK(tok->encode("") == std::vector<std::int32_t>{101, 102});
  CHECK(tok->encode("Hello, world!") == std::vector<std::int32_t>{101, 7592, 1010, 2088, 999, 102});
  CHECK(tok->encode("Hello, world!", 4) == std::vector<std::int32_t>{101, 7592, 1010, 102});
  std::vector<std::int32_t> ids{7};
  CHECK(tok->encode_into("hello", 0, ids) == 3);
  CHECK(ids == std::vector<std::int32_t>{7, 101, 7592, 102});
}

TEST_CASE("offsets count code points of each text, special tokens (0, 0), as Python tokenizers gives them",
          "[tokenizers][offsets]") {
  // The offsets Python tokenizers 0.22.2 gives for these files and texts.
  using flowline::models::TokenOffsets;
  using Offsets = std::vector<TokenOffsets>;
  const auto tok = Tokenizer::from_folder(kSource / "models/all-MiniLM-L6-v2");
  const flowline::models::Encoding one = tok->encode_with_offsets("H\u00e9llo, \u4e16\u754c!");
  CHECK(one.ids == std::vector<std::int32_t>{101, 7592, 1010, 1745, 100, 999, 102});
  CHECK(one.offsets == Offsets{{0, 0}, {0, 5}, {5, 6}, {7, 8}, {8, 9}, {9, 10}, {0, 0}});
  CHECK(one.special == std::vector<std::uint8_t>{1, 0, 0, 0, 0, 0, 1});
  const flowline::models::Encoding pair = tok->encode_pair_with_offsets("Hello, world!", "Bye");
  CHECK(pair.ids == std::vector<std::int32_t>{101, 7592, 1010, 2088, 999, 102, 9061, 102});
  CHECK(pair.offsets == Offsets{{0, 0}, {0, 5}, {5, 6}, {7, 12}, {12, 13}, {0, 0}, {0, 3}, {0, 0}});
  CHECK(pair.sequence == std::vector<std::int8_t>{-1, 0, 0, 0, 0, -1, 1, -1});
  CHECK(pair.type_ids == std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 1, 1});
  const flowline::models::Encoding cut = tok->encode_pair_with_offsets("Hello, world!", "Bye", 5);
  CHECK(cut.ids == std::vector<std::int32_t>{101, 7592, 102, 9061, 102});
  CHECK(cut.offsets == Offsets{{0, 0}, {0, 5}, {0, 0}, {0, 3}, {0, 0}});
  // In bytes, for slicing the UTF-8 text: "é" is two, "世" and "界" three each; a bad byte is one code point.
  CHECK(flowline::models::byte_offsets("H\u00e9llo, \u4e16\u754c!", one.offsets) ==
        Offsets{{0, 0}, {0, 6}, {6, 7}, {8, 11}, {11, 14}, {14, 15}, {0, 0}});
  CHECK(flowline::models::byte_offsets("\xc3\xa9\xff"
                                       "b",
                                       Offsets{{0, 1}, {1, 2}, {2, 3}}) == Offsets{{0, 2}, {2, 3}, {3, 4}});
  // Into a caller's vector and Encoding, reused: what an earlier call left is replaced, not appended to.
  Offsets bytes{{7, 7}};
  flowline::models::byte_offsets_into("H\u00e9llo, \u4e16\u754c!", one.offsets, bytes);
  CHECK(bytes == flowline::models::byte_offsets("H\u00e9llo, \u4e16\u754c!", one.offsets));
  flowline::models::Encoding reused = pair;
  tok->encode_with_offsets_into("H\u00e9llo, \u4e16\u754c!", 0, reused);
  CHECK(reused.ids == one.ids);
  CHECK(reused.type_ids == one.type_ids);
  CHECK(reused.offsets == one.offsets);
  CHECK(reused.special == one.special);
  CHECK(reused.sequence == one.sequence);
  // ByteLevel: the bytes of "é" share its place; trim_offsets leaves a token of spaces empty.
  const auto roberta = Tokenizer::from_folder(kSource / "tests/data/tokenizers/bpe-bytelevel-roberta");
  CHECK(roberta->encode_with_offsets(" caf\u00e9  x").offsets ==
        Offsets{{0, 0}, {0, 2}, {2, 3}, {3, 4}, {4, 5}, {4, 5}, {6, 6}, {7, 7}, {7, 8}, {0, 0}});
}

TEST_CASE("a tokenizer it cannot run exactly is refused naming the file, the JSON path and what is supported",
          "[tokenizers]") {
  CHECK_THAT(error_of(R"({"model": {"type": "Nonsense", "vocab": {}}})"),
             Catch::Matchers::StartsWith("tokenizer 't.json': model.type: model 'Nonsense' is not supported "
                                         "(supported: BPE, Unigram, WordPiece"));
  CHECK_THAT(error_of(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"},
             {"type": "Fancy"}]}, "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}}})"),
             Catch::Matchers::StartsWith("tokenizer 't.json': normalizer.normalizers[1]: normalizer 'Fancy' is not "
                                         "supported (supported: BertNormalizer"));
  CHECK_THAT(error_of(R"({"pre_tokenizer": {"type": "Punctuation"}, "model": {"type": "WordPiece",
             "unk_token": "[UNK]", "vocab": {"[UNK]": 0}}})"),
             Catch::Matchers::StartsWith("tokenizer 't.json': pre_tokenizer: pre-tokenizer 'Punctuation' is not "
                                         "supported"));
  CHECK(error_of(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"a": 0}}})") ==
        "tokenizer 't.json': model: the unknown token '[UNK]' is not in the vocabulary");
  CHECK(error_of(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}},
        "added_tokens": [{"id": 0, "content": "[UNK]"}, {"id": "1", "content": "x"}]})") ==
        "tokenizer 't.json': added_tokens[1]: an added token needs 'content' (a string) and 'id' (a number)");
  CHECK(error_of(R"({"normalizer": {"type": "Replace", "pattern": {"String": "x"}, "content": ""},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0}},
        "added_tokens": [{"id": 1, "content": "xx", "normalized": true}]})") ==
        "tokenizer 't.json': added_tokens[0]: 'normalized': true, and the normalizer leaves nothing of its content");
  // Unigram and Metaspace: what they cannot run exactly, and damaged fields.
  CHECK(error_of(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
        {"type": "Metaspace", "replacement": "_", "prepend_scheme": "sometimes"}]},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}})") ==
        "tokenizer 't.json': pre_tokenizer.pretokenizers[1]: prepend_scheme 'sometimes' is not one of always, first, "
        "never");
  CHECK(error_of(R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["a"]]}})") ==
        "tokenizer 't.json': model: vocab[1] must be [piece, score]");
  CHECK(error_of(R"({"model": {"type": "Unigram", "unk_id": 5, "vocab": [["<unk>", 0.0]]}})") ==
        "tokenizer 't.json': model: 'unk_id' 5 is outside the vocabulary of 1 pieces");
  CHECK(error_of(R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAAAAAA"},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}})") ==
        "tokenizer 't.json': normalizer: 'precompiled_charsmap': a trie of 0 bytes does not fit in 6 bytes");
  CHECK(error_of(R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "#!"},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}})") ==
        "tokenizer 't.json': normalizer: 'precompiled_charsmap' is not base64");
  CHECK_THAT(error_of("{not json"), Catch::Matchers::StartsWith("tokenizer 't.json': not valid JSON"));
  CHECK(error_of(R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}})") ==
        "tokenizer 't.json': model: 'dropout' must be null (BPE dropout samples merges at random; flowline "
        "tokenizes exactly)");
  CHECK(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})") ==
        "tokenizer 't.json': model.merges[0]: the merge token 'b' is not in the vocabulary");
  CHECK_THAT(error_of(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated",
             "invert": false}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
             Catch::Matchers::StartsWith("tokenizer 't.json': pre_tokenizer: pattern '\\w+': \\w (Oniguruma's and "
                                         "PCRE2's differ)"));
  CHECK_THAT(error_of(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated",
             "invert": false}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
             Catch::Matchers::StartsWith("tokenizer 't.json': pre_tokenizer: pattern '(a' does not compile with "
                                         "PCRE2: missing closing parenthesis"));
  const fs::path dir = scratch_dir("empty folder");
  CHECK_THROWS_WITH(
      Tokenizer::from_folder(dir),
      fmt::format("tokenizer folder '{}': neither tokenizer.json nor vocab.txt can be read", dir.string()));
}

TEST_CASE("bytes that are not UTF-8 read as U+FFFD, which BERT's normalizer drops", "[tokenizers]") {
  const auto tok = Tokenizer::from_folder(kSource / "models/all-MiniLM-L6-v2");
  CHECK(tok->encode("hello\xff\xfeworld") == tok->encode("helloworld"));
  CHECK(tok->encode("\xe2\x82") == std::vector<std::int32_t>{101, 102});
}
