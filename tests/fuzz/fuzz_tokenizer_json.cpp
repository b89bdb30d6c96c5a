// Fuzz targets: flowline::models::Tokenizer (tokenizer.json pipelines) on arbitrary bytes (invalid UTF-8,
// control and format characters, combining marks, CJK, very long words, special tokens), one program per
// model kind: FLOWLINE_FUZZ_KIND names it and picks its tokenizer files (tests/fuzz/CMakeLists.txt). The
// first byte picks the file and the length limit. Properties: no exception, ids inside the vocabulary, at
// most max_length ids, the post-processor's frame around singles and pairs, encode() and encode_into()
// agree, pair type ids one per id; encode_with_offsets() gives the same ids, and offsets that are ordered
// (start <= end; within a sequence the starts of non-empty ones never decrease: trim_offsets may leave a
// token of spaces empty at its end, before the next one, as Python tokenizers does) and inside their text's
// code points. The way back: every id has its token (id_to_token), and the kind's decoders (on the kind's
// first file) turn the encoding's tokens, spans of them and the raw bytes cut into tokens into text without
// a crash; from the tokenizer's own tokens, UTF-8 text.
#include "flowline/models/tokenizer.hpp"

#include "fuzz_support.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <sstream>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if !defined(FLOWLINE_FUZZ_SOURCE) || !defined(FLOWLINE_FUZZ_KIND)
#error "FLOWLINE_FUZZ_SOURCE names the source tree that holds the tokenizer files, FLOWLINE_FUZZ_KIND the kind"
#endif

namespace {

using flowline::models::Tokenizer;

// The tokenizer folders of each kind, under the source tree.
const std::map<std::string_view, std::vector<std::string_view>> kKinds = {
    {"wordpiece",
     {"tests/data/tokenizers/wordpiece-cased", "tests/data/tokenizers/wordpiece-lower", "tests/data/tiny-bert",
      "tests/data/tokenizers/wordpiece-added-options"}},
    {"unigram",
     {"tests/data/tokenizers/unigram-xlmr", "tests/data/tokenizers/unigram-byte-fallback",
      "tests/data/tokenizers/unigram-prepend-first", "tests/data/tokenizers/unigram-whitespace-first",
      "tests/data/tokenizers/unigram-xlmr-first"}},
    // Byte-level BPE with GPT-2's pattern (RoBERTa's and ModernBERT's layouts), with Qwen2's Split pattern,
    // and sentencepiece-style BPE with byte_fallback and fuse_unk.
    {"bpe",
     {"tests/data/tokenizers/bpe-bytelevel-roberta", "tests/data/tokenizers/bpe-bytelevel-modernbert",
      "tests/data/tokenizers/bpe-split-qwen", "tests/data/tokenizers/bpe-bytefallback-llama"}},
};

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> all = [] {
    std::vector<std::unique_ptr<Tokenizer>> out;
    for (const std::string_view folder : kKinds.at(FLOWLINE_FUZZ_KIND))
      out.push_back(Tokenizer::from_folder(std::string(FLOWLINE_FUZZ_SOURCE "/") + std::string(folder)));
    return out;
  }();
  return all;
}

// Decoders of each kind's family, put into its first file in place of its own.
const std::map<std::string_view, std::vector<std::string_view>> kDecoders = {
    {"wordpiece",
     {R"({"type":"WordPiece","prefix":"##","cleanup":true})",
      R"({"type":"CTC","pad_token":"[PAD]","word_delimiter_token":"##","cleanup":true})"}},
    {"unigram",
     {R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first"})",
      R"({"type":"Sequence","decoders":[{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always"},
          {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Replace","pattern":{"Regex":"\\s+"},"content":"_"}]})"}},
    {"bpe",
     {R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})",
      R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
          {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})",
      R"({"type":"BPEDecoder","suffix":"\u0120"})"}},
};

const std::vector<std::unique_ptr<Tokenizer>>& decoding_tokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> all = [] {
    const std::string file =
        std::string(FLOWLINE_FUZZ_SOURCE "/") + std::string(kKinds.at(FLOWLINE_FUZZ_KIND)[0]) + "/tokenizer.json";
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    std::vector<std::unique_ptr<Tokenizer>> out;
    for (const std::string_view decoder : kDecoders.at(FLOWLINE_FUZZ_KIND)) {
      boost::json::value root = boost::json::parse(text.str());
      root.as_object()["decoder"] = boost::json::parse(decoder);
      out.push_back(Tokenizer::from_json_text(boost::json::serialize(root), file));
    }
    return out;
  }();
  return all;
}

bool valid_utf8(std::string_view text);

// Every id's token, and each decoder over the encoding's tokens, a span of them and the raw bytes as tokens.
void check_decoding(const std::vector<std::int32_t>& ids, std::string_view text) {
  for (const auto& tok : decoding_tokenizers()) {
    std::vector<std::string_view> tokens;
    for (const std::int32_t id : ids) {
      tokens.push_back(tok->id_to_token(id));
      if (tokens.back().empty()) flowline::fuzz::broken("an id of the encoding without a token");
    }
    if (!valid_utf8(tok->decode_tokens(tokens))) flowline::fuzz::broken("decoded tokens that are not UTF-8");
    if (tokens.size() > 2 && !valid_utf8(tok->decode_tokens(std::span(tokens).subspan(1, tokens.size() / 2))))
      flowline::fuzz::broken("a decoded span that is not UTF-8");
    std::vector<std::string_view> raw;
    for (std::size_t i = 0; i < text.size(); i += 3) raw.push_back(text.substr(i, 3));
    tok->decode_tokens(raw);  // arbitrary bytes: no crash, no exception
  }
}

bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > text.size()) return false;
    char32_t c = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    for (std::size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
      c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    const char32_t min = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::size_t code_points(std::string_view text) {  // as the tokenizer reads it: a bad byte is one U+FFFD
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size(); ++n) {
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = len != 0 && i + len <= text.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok) {  // the same checks as the tokenizer's decoder: shortest form, no surrogates, at most U+10FFFF
      char32_t c = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
      for (std::size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
      const char32_t min = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      ok = c >= min && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
    }
    i += ok ? len : 1;
  }
  return n;
}

// Offsets of each sequence's tokens ordered and inside that sequence's text; specials (0, 0).
void check_offsets(const flowline::models::Encoding& e, std::string_view a, std::string_view b) {
  if (e.offsets.size() != e.ids.size() || e.special.size() != e.ids.size() || e.sequence.size() != e.ids.size())
    flowline::fuzz::broken("an offset, a special flag and a sequence per id");
  const std::size_t length[2] = {code_points(a), code_points(b)};
  std::size_t last[2] = {0, 0};
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    const auto& o = e.offsets[i];
    if (e.sequence[i] < 0) {
      if (o.start != 0 || o.end != 0 || e.special[i] != 1)
        flowline::fuzz::broken("a special token's offsets are (0, 0)");
      continue;
    }
    const auto s = static_cast<std::size_t>(e.sequence[i]);
    if (o.start > o.end) flowline::fuzz::broken("an offset that ends before it starts");
    if (o.end > length[s]) flowline::fuzz::broken("an offset outside its text");
    if (o.start == o.end) continue;
    if (o.start < last[s]) flowline::fuzz::broken("offsets out of order");
    last[s] = o.start;
  }
}

void check_ids(const Tokenizer& tok, const std::vector<std::int32_t>& ids, std::size_t max_length, bool pair) {
  if (max_length != 0 && ids.size() > max_length) flowline::fuzz::broken("more ids than max_length");
  if (max_length == 0 && ids.size() < tok.special_tokens_count(pair))
    flowline::fuzz::broken("fewer ids than the post-processor's special tokens");
  for (const std::int32_t id : ids)
    if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size())
      flowline::fuzz::broken("an id outside the vocabulary");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const Tokenizer& tok = *all[data[0] % all.size()];
  const std::size_t limit = data[0] / all.size();  // 0: no limit, else from 5 up
  const std::size_t max_length = limit == 0 ? 0 : 4 + limit;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<std::int32_t> ids = tok.encode(text, max_length);
  check_ids(tok, ids, max_length, false);
  std::vector<std::int32_t> into{7};  // encode_into appends after what is there
  if (tok.encode_into(text, max_length, into) != ids.size() || !std::equal(ids.begin(), ids.end(), into.begin() + 1))
    flowline::fuzz::broken("encode_into differs from encode");

  const flowline::models::Encoding with = tok.encode_with_offsets(text, max_length);
  if (with.ids != ids) flowline::fuzz::broken("encode_with_offsets gives other ids than encode");
  check_offsets(with, text, {});
  if (&tok == all[0].get()) check_decoding(ids, text);  // the decoders are on the kind's first file

  const std::size_t half = text.size() / 2;
  std::vector<std::int32_t> pair, types;
  const std::size_t n = tok.encode_pair_into(text.substr(0, half), text.substr(half), max_length, pair, &types);
  check_ids(tok, pair, max_length, true);
  if (n != pair.size() || types.size() != pair.size()) flowline::fuzz::broken("a type id per pair id");
  const flowline::models::Encoding pair_with =
      tok.encode_pair_with_offsets(text.substr(0, half), text.substr(half), max_length);
  if (pair_with.ids != pair || pair_with.type_ids != types)
    flowline::fuzz::broken("encode_pair_with_offsets gives other ids than encode_pair_into");
  check_offsets(pair_with, text.substr(0, half), text.substr(half));
  return 0;
}
