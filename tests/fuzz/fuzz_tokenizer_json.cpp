// Fuzz targets: flowline::models::Tokenizer (tokenizer.json pipelines) on arbitrary bytes (invalid UTF-8,
// control and format characters, combining marks, CJK, very long words, special tokens), one program per
// model kind: FLOWLINE_FUZZ_KIND names it and picks its tokenizer files (tests/fuzz/CMakeLists.txt). The
// first byte picks the file and the length limit. Properties: no exception, ids inside the vocabulary, at
// most max_length ids, the post-processor's frame around singles and pairs, encode() and encode_into()
// agree, pair type ids one per id.
#include "flowline/models/tokenizer.hpp"

#include "fuzz_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
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

  const std::size_t half = text.size() / 2;
  std::vector<std::int32_t> pair, types;
  const std::size_t n = tok.encode_pair_into(text.substr(0, half), text.substr(half), max_length, pair, &types);
  check_ids(tok, pair, max_length, true);
  if (n != pair.size() || types.size() != pair.size()) flowline::fuzz::broken("a type id per pair id");
  return 0;
}
