// Fuzz target: WordPiece tokenization of arbitrary bytes (invalid UTF-8, control and format characters,
// combining marks, CJK, very long words) with the test model's vocabulary. The first byte picks the
// options and the length limit. Properties: no exception, ids in the vocabulary, [CLS] first and [SEP]
// last, at most max_length ids, encode() and encode_into() agree, and tokenize() has one piece per id
// between the special tokens.
#include "flowline/sentence_encoder/wordpiece_tokenizer.hpp"

#include "fuzz_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#ifndef FLOWLINE_FUZZ_VOCAB
#error "FLOWLINE_FUZZ_VOCAB names the vocab.txt the tokenizer target reads"
#endif

namespace {

using flowline::sentence_encoder::WordPieceOptions;
using flowline::sentence_encoder::WordPieceTokenizer;

const WordPieceTokenizer& tokenizer(unsigned variant) {
  static const WordPieceTokenizer variants[4] = {
      WordPieceTokenizer(FLOWLINE_FUZZ_VOCAB),
      WordPieceTokenizer(FLOWLINE_FUZZ_VOCAB, WordPieceOptions{.lowercase = false, .strip_accents = false}),
      WordPieceTokenizer(FLOWLINE_FUZZ_VOCAB, WordPieceOptions{.handle_chinese_chars = false}),
      WordPieceTokenizer(FLOWLINE_FUZZ_VOCAB,
                         WordPieceOptions{.lowercase = false, .strip_accents = true, .max_input_chars_per_word = 8}),
  };
  return variants[variant % 4];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const WordPieceTokenizer& tok = tokenizer(data[0] & 3u);
  const std::size_t max_length = (data[0] >> 2) == 0 ? 0 : 2 + (data[0] >> 2);  // 0: no limit, else 3..65
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<std::int32_t> ids = tok.encode(text, max_length);
  if (ids.size() < 2 || ids.front() != tok.cls_id() || ids.back() != tok.sep_id())
    flowline::fuzz::broken("ids not framed by [CLS] and [SEP]");
  if (max_length != 0 && ids.size() > max_length) flowline::fuzz::broken("more ids than max_length");
  for (const std::int32_t id : ids)
    if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size())
      flowline::fuzz::broken("an id outside the vocabulary");

  std::vector<std::int32_t> into{7};  // encode_into appends after what is there
  const std::size_t appended = tok.encode_into(text, max_length, into);
  if (appended != ids.size() || !std::equal(ids.begin(), ids.end(), into.begin() + 1))
    flowline::fuzz::broken("encode_into differs from encode");
  if (max_length == 0 && tok.tokenize(text).size() != ids.size() - 2)
    flowline::fuzz::broken("tokenize() and encode() disagree on the number of pieces");
  return 0;
}
