// flowline/models/tokenizer.hpp — text to token ids, read from a checkpoint's Hugging Face tokenizer.json.
//
// Contract: a Tokenizer is built once (from_folder / from_json_file, on any thread) and is immutable after
// that: every const method may be called from many threads at once. It owns its vocabulary and pipeline;
// callers own the id vectors they pass in. encode_into() is the hot path: it appends to the caller's
// vector and keeps its working buffers in thread_local scratch, so a warmed thread allocates nothing per
// call beyond what the caller's vector needs. Construction throws flowline::Error naming the file, the JSON
// path of the component it cannot run exactly, and what is supported — never a tokenizer that would give
// different ids than Python `tokenizers` (docs/models.md, "Tokenizers"). encode_with_offsets() and
// encode_pair_with_offsets() also say where each token came from, as Python `tokenizers`' Encoding.offsets do;
// they cut words as the ids-only path does (its word cache) and read each id's place from its token's length
// where the model's tokens are the characters they cover (BPE, Unigram), keeping places per code point only
// through the steps that rewrite the text; the ids-only hot path pays nothing for them.
// The library (flowline::tokenizers) links neither LibTorch nor the core: only utf8proc, PCRE2, Boost.JSON, fmt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

namespace boost::json {
class value;
}

namespace flowline::models {

namespace tokenizers {
class Pipeline;  // src/models/tokenizers/pipeline.hpp
}

// A token's place in the text it came from: Unicode code points [start, end) of that text (for a pair, of
// its own text of the two), exactly as Python `tokenizers`' Encoding.offsets report them (char offsets, with
// their rules: a token from a normalizer's inserted character takes the place of the character before it,
// ByteLevel's trim_offsets leaves a token's spaces out, ...). The post-processor's special tokens: (0, 0).
struct TokenOffsets {
  std::size_t start = 0;
  std::size_t end = 0;
  bool operator==(const TokenOffsets&) const = default;
};

// One text or pair, encoded with offsets: one entry per token in each vector.
struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;
  std::vector<TokenOffsets> offsets;
  std::vector<std::uint8_t> special;  // 1: the post-processor added it (tokenizers' special_tokens_mask)
  std::vector<std::int8_t> sequence;  // 0: the text (a pair's first), 1: a pair's second, -1: special
};

// `offsets` (code points of `text`, as an Encoding gives them) as UTF-8 byte positions of `text`, for slicing it
// (TEI's /tokenize reports bytes: a token's text is text[start, end)). A byte that is not UTF-8 is one code
// point, as encoding reads it.
std::vector<TokenOffsets> byte_offsets(std::string_view text, const std::vector<TokenOffsets>& offsets);
// The same into `out` (cleared and refilled, its capacity kept: the caller's, reused call after call; not
// `offsets` itself).
void byte_offsets_into(std::string_view text, const std::vector<TokenOffsets>& offsets, std::vector<TokenOffsets>& out);

class Tokenizer {
 public:
  // Reads `folder`/tokenizer.json; without it, vocab.txt (+ tokenizer_config.json's do_lower_case,
  // strip_accents, tokenize_chinese_chars) as a BERT WordPiece pipeline. Either way, tokenizer_config.json's
  // keys as transformers reads them: do_lower_case for a BertNormalizer whose tokenizer.json object does not
  // say `lowercase`, truncation_side (right or left) and model_input_names (type_ids_input()).
  static std::unique_ptr<Tokenizer> from_folder(const std::filesystem::path& folder);
  static std::unique_ptr<Tokenizer> from_json_file(const std::filesystem::path& tokenizer_json);
  // The same from tokenizer.json's text; `origin` names it in errors.
  static std::unique_ptr<Tokenizer> from_json_text(std::string_view json, const std::string& origin);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Appends the ids of `text` (the post-processor's special tokens included, the text's tokens truncated
  // so that the whole is at most max_length ids; 0: no limit) to `ids`; returns how many were appended.
  // Bytes that are not UTF-8 read as U+FFFD.
  std::size_t encode_into(std::string_view text, std::size_t max_length, std::vector<std::int32_t>& ids) const;
  // A pair (query, document) for cross-encoders: the post-processor's pair template, truncation
  // 'longest_first' to max_length as Hugging Face does; appends the type ids to `type_ids` when not null.
  std::size_t encode_pair_into(std::string_view a, std::string_view b, std::size_t max_length,
                               std::vector<std::int32_t>& ids, std::vector<std::int32_t>* type_ids) const;
  // One query with many documents (a reranker's candidates): the same ids as encode_pair_into(query, d) for
  // each d in turn, with the query tokenized once. Appends each pair's length to `lengths`; returns the ids
  // appended in all.
  std::size_t encode_pairs_into(std::string_view query, std::span<const std::string_view> documents,
                                std::size_t max_length, std::vector<std::int32_t>& ids,
                                std::vector<std::int32_t>* type_ids, std::vector<std::size_t>& lengths) const;
  std::vector<std::int32_t> encode(std::string_view text, std::size_t max_length = 0) const;
  // The same ids and type ids as encode() and encode_pair_into() (truncation alike), with each token's offsets
  // (TokenOffsets). Bytes that are not UTF-8 count as one code point each, as U+FFFD.
  Encoding encode_with_offsets(std::string_view text, std::size_t max_length = 0) const;
  Encoding encode_pair_with_offsets(std::string_view a, std::string_view b, std::size_t max_length = 0) const;
  // The same into `out`, whose five vectors are cleared and refilled, keeping their capacity: a thread that
  // passes the same Encoding call after call allocates nothing once warm (as encode_into with the same ids).
  // The caller owns `out` and keeps it to one thread at a time (one per thread, or per executor replica, whose
  // calls never overlap); the tokenizer keeps no reference to it past the call.
  void encode_with_offsets_into(std::string_view text, std::size_t max_length, Encoding& out) const;
  void encode_pair_with_offsets_into(std::string_view a, std::string_view b, std::size_t max_length,
                                     Encoding& out) const;

  std::int32_t token_id(std::string_view token) const;  // -1 when absent
  // The token string of `id` as Python `tokenizers`' Tokenizer.id_to_token gives it (transformers'
  // convert_ids_to_tokens): the model's vocabulary or an added token — "##ing", "▁Alice", "ĠAlice", "[CLS]".
  // Empty when the id is outside the vocabulary (never throws). Returns a view into the tokenizer (lives as
  // long as it). A normalized added token's token is its content normalized, as tokenizers 0.23 gives it
  // ("[mask]" under Lowercase).
  std::string_view id_to_token(std::int32_t id) const;
  // `tokens` joined back into text by tokenizer.json's decoder, exactly as Python `tokenizers`'
  // `tokenizer.decoder.decode(tokens)` (transformers' fast convert_tokens_to_string); without a decoder, the
  // tokens joined by single spaces (as transformers does). A decoder type or option flowline does not run does
  // not stop loading (encoding works); decode_tokens throws flowline::Error naming it and the file. Where
  // Python panics (a Strip cutting past a token), it throws too.
  std::string decode_tokens(std::span<const std::string_view> tokens) const;
  // The model's continuing-subword prefix ("##" for WordPiece; BPE's continuing_subword_prefix when set),
  // empty when it has none (Unigram; BPE without one) — what the pipeline reads to tell sub-words. A view into
  // the tokenizer (lives as long as it).
  std::string_view continuing_subword_prefix() const;
  std::int32_t pad_id() const;                        // -1 when the tokenizer names no padding token
  std::int32_t unk_id() const;                        // -1 when the model has no unknown token
  std::size_t vocab_size() const;                     // the model's vocabulary plus added tokens
  std::size_t special_tokens_count(bool pair) const;  // what the post-processor adds
  std::string describe() const;  // "WordPiece (BertNormalizer, BertPreTokenizer, TemplateProcessing)"
  // Whether the model is given the pair template's token type ids: tokenizer_config.json's model_input_names
  // lists token_type_ids, or names nothing (transformers and sentence-transformers pass none otherwise, so
  // the model sees type 0 everywhere).
  bool type_ids_input() const;
  // Whether truncation drops a sequence's first tokens (tokenizer_config.json's truncation_side: left)
  // instead of its last.
  bool truncates_left() const;

 private:
  explicit Tokenizer(std::unique_ptr<tokenizers::Pipeline> pipeline);
  static std::unique_ptr<Tokenizer> from_json_value(const boost::json::value& root, const std::string& origin);
  std::unique_ptr<tokenizers::Pipeline> pipeline_;
};

}  // namespace flowline::models
