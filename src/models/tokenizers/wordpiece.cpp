// The WordPiece model (BERT's): greedy longest-match-first within each word, continuations marked by a
// prefix ("##"); a word it cannot cover, or longer than max_input_chars_per_word, is one unknown token.
#include "builders.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

// WordPiece: greedy longest-match-first within each word; a word it cannot cover is one unknown token.
class WordPiece final : public Model {
 public:
  WordPiece(Vocabulary vocab, const std::string& prefix, const std::string& unk, std::size_t max_chars,
            const Origin& origin)
      : vocab_(std::move(vocab)), by_id_(vocab_), prefix_(prefix), max_chars_(max_chars) {
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) refuse(origin, fmt::format("the unknown token '{}' is not in the vocabulary", unk));
    unk_ = it->second;
    for (const auto& [token, id] : vocab_) {
      longest_ = std::max(longest_, token.size());
      if (!prefix.empty() && token.size() > prefix.size() && token.starts_with(prefix))
        continuing_.emplace(token.substr(prefix.size()), id);
    }
    if (prefix.empty()) continuing_ = vocab_;
  }

  void tokenize(Scratch& s, Span word, std::vector<std::int32_t>& ids) const override {
    if (word.end - word.begin > max_chars_) {
      ids.push_back(unk_);
      if (s.cut_places) s.pieces.push_back(word);
      return;
    }
    encode_utf8(std::u32string_view(s.text).substr(word.begin, word.end - word.begin), s.utf8);
    const std::string_view w = s.utf8;
    const std::size_t first = ids.size(), first_piece = s.pieces.size();
    std::size_t at = word.begin;  // the code point where `start` is
    for (std::size_t start = 0; start < w.size();) {
      const Vocabulary& table = start == 0 ? vocab_ : continuing_;
      std::size_t end = std::min(w.size(), start + longest_);
      while (end < w.size() && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) --end;  // a character's start
      std::int32_t found = -1;
      while (end > start) {
        const auto it = table.find(w.substr(start, end - start));
        if (it != table.end()) {
          found = it->second;
          break;
        }
        do --end;
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        ids.resize(first);
        ids.push_back(unk_);
        if (s.cut_places) {
          s.pieces.resize(first_piece);
          s.pieces.push_back(word);
        }
        return;
      }
      ids.push_back(found);
      if (s.cut_places) {
        const std::size_t from = at;
        for (std::size_t i = start; i < end; ++i) at += (static_cast<unsigned char>(w[i]) & 0xC0) != 0x80;
        s.pieces.push_back({from, at});
      }
      start = end;
    }
  }
  std::int32_t token_id(std::string_view token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  std::string_view id_to_token(std::int32_t id) const override { return by_id_(id); }
  std::string_view continuing_subword_prefix() const override { return prefix_; }
  std::int32_t unk_id() const override { return unk_; }
  std::size_t size() const override { return vocab_.size(); }
  std::string name() const override { return "WordPiece"; }

 private:
  Vocabulary vocab_;
  TokensById by_id_;
  std::string prefix_;
  Vocabulary continuing_;
  std::int32_t unk_ = -1;
  std::size_t max_chars_;
  std::size_t longest_ = 1;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const json::object& o, const Origin& origin) {
  return std::make_unique<WordPiece>(
      read_vocab_object(o, origin),
      field(o, "continuing_subword_prefix") == nullptr ? std::string("##")
                                                       : text_field(o, "continuing_subword_prefix", origin),
      text_field(o, "unk_token", origin),
      count_field(o, "max_input_chars_per_word", 100, std::numeric_limits<std::size_t>::max(), origin), origin);
}

}  // namespace flowline::models::tokenizers
