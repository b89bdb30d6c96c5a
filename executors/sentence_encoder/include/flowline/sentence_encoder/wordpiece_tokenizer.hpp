// flowline/sentence_encoder/wordpiece_tokenizer.hpp — BERT WordPiece tokenization, id for id what the Hugging
// Face fast tokenizer gives for BERT checkpoints (BertNormalizer + BertPreTokenizer + WordPiece +
// [CLS]/[SEP] template).
//
// Steps, as the fast tokenizer runs them:
//   1. clean: drop NUL, U+FFFD and characters of general category C* (control, format such as zero-width
//      joiners, unassigned) except \t \n \r; turn white space (Unicode White_Space) into ' '.
//   2. put spaces around CJK ideographs.
//   3. when lower-casing (or strip_accents is set): NFD, then drop non-spacing marks (Mn).
//   4. lower-case each character (simple Unicode mapping; Σ always becomes σ, as in the fast tokenizer).
//   5. split on white space and around punctuation (Unicode P* and ASCII punctuation).
//   6. greedy longest-match word pieces ("##" continuations); a word longer than 100 characters or with an
//      unmatched piece becomes [UNK].
//   7. truncate to max_length - 2 and add [CLS] ... [SEP].
// Unicode data comes from utf8proc. A tokenizer is immutable after construction: encode() may be called
// from any number of threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flowline::sentence_encoder {

struct WordPieceOptions {
  bool lowercase = true;
  bool strip_accents = true;  // the fast tokenizer's default: follows lowercase
  bool handle_chinese_chars = true;
  std::size_t max_input_chars_per_word = 100;
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string continuing_subword_prefix = "##";
};

class WordPieceTokenizer {
 public:
  // Reads vocab.txt (one token per line; the line number is the id). Throws flowline::Error when the file
  // is missing or lacks a special token.
  WordPieceTokenizer(const std::filesystem::path& vocab_file, WordPieceOptions options = {});
  // Reads the options a model folder declares (tokenizer_config.json, tokenizer.json) and its vocab.txt.
  static WordPieceTokenizer from_model_folder(const std::filesystem::path& folder);

  // Token ids with [CLS] and [SEP], at most max_length ids in all (0: no limit).
  std::vector<std::int32_t> encode(std::string_view text, std::size_t max_length = 0) const;
  // Appends the ids to `out` (without clearing it) and returns how many were appended. For batch code that
  // keeps one buffer.
  std::size_t encode_into(std::string_view text, std::size_t max_length, std::vector<std::int32_t>& out) const;
  // The word pieces as strings, without special tokens (for debugging and tests).
  std::vector<std::string> tokenize(std::string_view text) const;

  std::int32_t token_id(std::string_view token) const;  // -1 when absent
  std::int32_t pad_id() const noexcept { return pad_id_; }
  std::int32_t cls_id() const noexcept { return cls_id_; }
  std::int32_t sep_id() const noexcept { return sep_id_; }
  std::int32_t unk_id() const noexcept { return unk_id_; }
  std::size_t vocab_size() const noexcept { return vocab_.size(); }
  const WordPieceOptions& options() const noexcept { return options_; }

 private:
  // Normalises and splits `text` into words (UTF-8), calling `word` for each.
  template <class F>
  void for_each_word(std::string_view text, F&& word) const;
  void word_pieces(std::string_view word, std::vector<std::int32_t>& ids) const;

  WordPieceOptions options_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::int32_t pad_id_ = 0, cls_id_ = 0, sep_id_ = 0, unk_id_ = 0;
};

}  // namespace flowline::sentence_encoder
