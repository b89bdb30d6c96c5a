// The Unigram model (sentencepiece's, as Hugging Face `tokenizers` runs it): a word is cut into the
// vocabulary pieces whose scores sum highest (Viterbi over the word's UTF-8 bytes). A character that no
// piece covers on its own is the unknown token, scored min_score - 10; neighbouring unknown pieces fuse into
// one, which byte_fallback then spells as <0xNN> tokens when the vocabulary has them all.
#include "flowline/error.hpp"
#include "pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

constexpr double kUnknownPenalty = 10.0;  // tokenizers' K_UNK_PENALTY

std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
}

class Unigram final : public Model {
 public:
  Unigram(const json::array& pieces, std::int32_t unk, bool byte_fallback, const Origin& origin)
      : unk_(unk), byte_fallback_(byte_fallback) {
    scores_.reserve(pieces.size());
    vocab_.reserve(pieces.size());
    root_.fill(-1);
    double min_score = std::numeric_limits<double>::infinity();
    Building trie;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const json::value& piece = pieces[i];
      if (!piece.is_array() || piece.as_array().size() != 2 || !piece.as_array()[0].is_string() ||
          !piece.as_array()[1].is_number())
        refuse(origin, fmt::format("vocab[{}] must be [piece, score]", i));
      const std::string token(piece.as_array()[0].as_string());
      const double score = piece.as_array()[1].to_number<double>();
      const auto id = static_cast<std::int32_t>(i);
      scores_.push_back(score);
      vocab_.insert_or_assign(token, id);  // a repeated piece keeps its last id, as tokenizers does
      min_score = std::min(min_score, score);
      if (!token.empty()) insert(trie, token, id);
    }
    if (pieces.empty()) refuse(origin, "the vocabulary is empty");
    flatten(trie);
    if (unk_ >= static_cast<std::int32_t>(pieces.size()))
      refuse(origin, fmt::format("'unk_id' {} is outside the vocabulary of {} pieces", unk_, pieces.size()));
    unk_score_ = min_score - kUnknownPenalty;
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
      }
    }
  }

  void tokenize(Scratch& s, Span word, std::vector<std::int32_t>& ids) const override {
    const std::u32string_view w = std::u32string_view(s.text).substr(word.begin, word.end - word.begin);
    WordCache::cut(serial_, w, ids, [&] { cut(s, w, ids); });
  }

  std::int32_t token_id(std::string_view token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  std::int32_t unk_id() const override { return unk_; }
  std::size_t size() const override { return scores_.size(); }
  std::string name() const override { return "Unigram"; }

 private:
  void cut(Scratch& s, std::u32string_view word, std::vector<std::int32_t>& ids) const {
    encode_utf8(word, s.utf8);
    const std::string_view w = s.utf8;
    const std::size_t n = w.size();
    s.best_score.assign(n + 1, 0.0);
    s.best_id.assign(n + 1, -1);
    s.best_start.assign(n + 1, -1);
    const auto offer = [&s](std::size_t end, std::size_t start, std::int32_t id, double score) {
      if (s.best_start[end] < 0 || score > s.best_score[end]) {
        s.best_score[end] = score;
        s.best_start[end] = static_cast<std::int32_t>(start);
        s.best_id[end] = id;
      }
    };
    for (std::size_t start = 0; start < n;) {
      const double here = s.best_score[start];
      const std::size_t char_length = std::min(utf8_length(static_cast<unsigned char>(w[start])), n - start);
      bool covers_character = false;
      std::int32_t node = root_[static_cast<unsigned char>(w[start])];
      for (std::size_t end = start + 1; node >= 0; ++end) {
        if (const std::int32_t id = token_of_node_[node]; id >= 0) {
          offer(end, start, id, here + scores_[id]);
          covers_character = covers_character || end - start == char_length;
        }
        if (end == n) break;
        node = child(node, static_cast<unsigned char>(w[end]));
      }
      if (!covers_character) {
        if (unk_ < 0)
          throw Error(
              fmt::format("tokenizer: the Unigram model has no unknown token for '{}'", w.substr(start, char_length)));
        offer(start + char_length, start, unk_, here + unk_score_);
      }
      start += char_length;
    }
    // Back from the end: the pieces in reverse order, then reversed in place.
    const std::size_t first = ids.size();
    for (std::size_t end = n; end > 0;) {
      std::size_t start = static_cast<std::size_t>(s.best_start[end]);
      const std::int32_t id = s.best_id[end];
      if (id != unk_) {
        ids.push_back(id);
        end = start;
        continue;
      }
      while (start > 0 && s.best_id[start] == unk_) start = static_cast<std::size_t>(s.best_start[start]);
      push_unknown(w.substr(start, end - start), ids);
      end = start;
    }
    std::reverse(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end());
  }

  // A run of unknown characters, fused: its own piece if the vocabulary has it, else its bytes (byte
  // fallback), else the unknown token. Pushed in reverse order (the caller reverses the whole).
  void push_unknown(std::string_view run, std::vector<std::int32_t>& ids) const {
    if (const auto it = vocab_.find(run); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
    if (byte_fallback_ &&
        std::all_of(run.begin(), run.end(), [this](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      for (auto it = run.rbegin(); it != run.rend(); ++it) ids.push_back(byte_ids_[static_cast<unsigned char>(*it)]);
      return;
    }
    ids.push_back(unk_);
  }

  // A byte trie of the pieces, built with a map per node, then flattened: each node's children lie
  // contiguous in labels_/targets_ (first_child_[node] .. first_child_[node + 1]), the root's in an array.
  struct Building {
    std::vector<std::map<unsigned char, std::int32_t>> children{1};
    std::vector<std::int32_t> token{-1};
  };
  static void insert(Building& b, const std::string& token, std::int32_t id) {
    std::int32_t node = 0;
    for (const char ch : token) {
      const auto [it, added] = b.children[static_cast<std::size_t>(node)].try_emplace(
          static_cast<unsigned char>(ch), static_cast<std::int32_t>(b.children.size()));
      if (added) {
        b.children.emplace_back();
        b.token.push_back(-1);
      }
      node = it->second;
    }
    b.token[static_cast<std::size_t>(node)] = id;
  }
  void flatten(const Building& b) {
    token_of_node_ = b.token;
    first_child_.assign(b.children.size() + 1, 0);
    for (std::size_t node = 0; node < b.children.size(); ++node) {
      first_child_[node] = static_cast<std::int32_t>(labels_.size());
      for (const auto& [label, child] : b.children[node]) {
        labels_.push_back(label);
        targets_.push_back(child);
      }
    }
    first_child_.back() = static_cast<std::int32_t>(labels_.size());
    for (const auto& [label, child] : b.children[0]) root_[label] = child;
  }
  std::int32_t child(std::int32_t node, unsigned char byte) const {
    const auto n = static_cast<std::size_t>(node);
    for (std::int32_t i = first_child_[n], end = first_child_[n + 1]; i < end; ++i)
      if (labels_[static_cast<std::size_t>(i)] == byte) return targets_[static_cast<std::size_t>(i)];
    return -1;
  }

  std::vector<double> scores_;
  Vocabulary vocab_;
  std::array<std::int32_t, 256> root_{};
  std::vector<std::int32_t> first_child_, targets_, token_of_node_;
  std::vector<unsigned char> labels_;
  std::array<std::int32_t, 256> byte_ids_{};
  std::int32_t unk_;
  const std::uint64_t serial_ = WordCache::next_serial();
  double unk_score_ = 0;
  bool byte_fallback_;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const json::object& o, const Origin& origin) {
  const json::value* vocab = field(o, "vocab");
  if (vocab == nullptr || !vocab->is_array()) refuse(origin, "'vocab' must be a list of [piece, score]");
  return std::make_unique<Unigram>(vocab->as_array(), static_cast<std::int32_t>(int_field(o, "unk_id", -1, origin)),
                                   flag(o, "byte_fallback", false, origin), origin);
}

}  // namespace flowline::models::tokenizers
