// The Unigram model (sentencepiece's, as Hugging Face `tokenizers` runs it): a word is cut into the
// vocabulary pieces whose scores sum highest (Viterbi over the word). A character that no piece covers on
// its own is the unknown token, scored min_score - 10; neighbouring unknown pieces fuse into one, which
// byte_fallback then spells as <0xNN> tokens when the vocabulary has them all.
//
// tokenizers runs the Viterbi over the word's UTF-8 bytes; this one runs it over the word's characters,
// through a trie of characters. The cuts are the same (a piece, UTF-8 itself, matches only bytes that are
// whole characters, and the unknown token is one character), and the walks take fewer steps: one a
// character, where bytes take two or three for anything beyond ASCII ('▁', Metaspace's space, among them),
// and the word needs no UTF-8 but for its unknown runs.
#include "flowline/error.hpp"
#include "builders.hpp"
#include "word_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <utility>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

constexpr double kUnknownPenalty = 10.0;  // tokenizers' K_UNK_PENALTY

class Unigram final : public Model {
 public:
  Unigram(const json::array& pieces, std::int32_t unk, bool byte_fallback, const Origin& origin)
      : unk_(unk), byte_fallback_(byte_fallback) {
    scores_.reserve(pieces.size());
    vocab_.reserve(pieces.size());
    double min_score = std::numeric_limits<double>::infinity();
    Building trie;
    std::u32string chars;
    std::string spelled;
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
      // A piece that is not UTF-8 (JSON text always is) could match no run of a word's whole characters,
      // so tokenizers could never cut it out of a word: the trie leaves it out.
      decode_utf8(token, chars);
      encode_utf8(chars, spelled);
      if (!chars.empty() && spelled == token) insert(trie, chars, id);
    }
    if (pieces.empty()) refuse(origin, "the vocabulary is empty");
    // Every piece's own id, a repeated one's too (tokenizers reads the list): a view of its key.
    for (std::size_t i = 0; i < pieces.size(); ++i)
      by_id_.add(static_cast<std::int32_t>(i),
                 vocab_.find(std::string_view(pieces[i].as_array()[0].as_string()))->first);
    build_double_array(trie);
    if (unk_ >= static_cast<std::int32_t>(pieces.size()))
      refuse(origin, fmt::format("'unk_id' {} is outside the vocabulary of {} pieces", unk_, pieces.size()));
    unk_score_ = min_score - kUnknownPenalty;
    // The root's Piece (no piece is empty) stands for the unknown token, one character long, in the cuts.
    pieces_[0] = Piece{unk_score_, unk_, 1};
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
      }
    }
    // A piece covers its own characters; the unknown token and byte fallback's depend on the word.
    for (std::size_t i = 0; i < pieces.size(); ++i)
      set_shape(shapes, static_cast<std::int32_t>(i), piece_shape(pieces[i].as_array()[0].as_string()));
    set_shape(shapes, unk_, {});
    if (byte_fallback_)
      for (const std::int32_t id : byte_ids_) set_shape(shapes, id, {});
  }

  void tokenize(Scratch& s, Span word, std::vector<std::int32_t>& ids) const override {
    const std::u32string_view w = std::u32string_view(s.text).substr(word.begin, word.end - word.begin);
    if (s.cut_places)
      return WordCache::cut_with_places(serial_, w, word.begin, ids, s.pieces,
                                        [&](std::size_t at) { cut(s, w, ids, at); });
    WordCache::cut(serial_, w, ids, [&] { cut(s, w, ids); });
  }

  std::int32_t token_id(std::string_view token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  std::string_view id_to_token(std::int32_t id) const override { return by_id_(id); }
  std::int32_t unk_id() const override { return unk_; }
  std::size_t size() const override { return scores_.size(); }
  std::string name() const override { return "Unigram"; }

 private:
  // With `at` (offsets), each id's code points too, the word starting at s.text[at].
  void cut(Scratch& s, std::u32string_view word, std::vector<std::int32_t>& ids,
           std::size_t at = std::string::npos) const {
    const std::size_t n = word.size();
    // The word's characters as trie labels, and 0 (no edge's label) after it, where every walk ends.
    std::vector<std::uint32_t>& labels = s.labels;
    labels.resize(n + 1);
    for (std::size_t i = 0; i < n; ++i) labels[i] = label_of(word[i]);
    labels[n] = 0;
    const Unit* const units = units_.data();
    const Piece* const pieces = pieces_.data();
    if (unk_ < 0) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t child = static_cast<std::size_t>(units[0].base) + labels[i];
        if (units[child].check != 0 || pieces[child].id < 0) {
          encode_utf8(word.substr(i, 1), s.utf8);
          throw Error(fmt::format("tokenizer: the Unigram model has no unknown token for '{}'", s.utf8));
        }
      }
    }
    // best_score/best_unit[end]: the best cut of the first `end` characters, its score and the unit of its
    // last piece (the root for the unknown token). A better score replaces; an equal one does not (the first
    // offered stays, as in tokenizers).
    s.best_score.assign(n + 1, -std::numeric_limits<double>::infinity());
    s.best_unit.assign(n + 1, 0);
    double* const best_score = s.best_score.data();
    std::int32_t* const best_unit = s.best_unit.data();
    best_score[0] = 0.0;
    for (std::size_t start = 0; start < n; ++start) {
      const double here = best_score[start];
      // The walk down the trie: one dependent load a character (the node's base), the check that the child
      // exists beside it. Every node offers its piece's score without a branch (-inf where no piece ends),
      // so the walk's end is the only branch the predictor has to guess.
      std::size_t node = 0;
      for (std::size_t end = start + 1;; ++end) {
        const std::size_t next = static_cast<std::size_t>(units[node].base) + labels[end - 1];
        if (units[next].check != static_cast<std::int32_t>(node)) break;
        node = next;
        const double score = here + pieces[node].score, old = best_score[end];
        const std::int32_t keep = static_cast<std::int32_t>(score > old) - 1;  // 0 where better, else all ones
        best_score[end] = std::max(old, score);
        best_unit[end] = (best_unit[end] & keep) | (static_cast<std::int32_t>(node) & ~keep);
      }
      // The unknown token over the start's character, offered after its pieces. It is offered even where a
      // piece covers the character, and then never wins: that piece, offered first, scores no lower.
      if (here + unk_score_ > best_score[start + 1]) {
        best_score[start + 1] = here + unk_score_;
        best_unit[start + 1] = 0;
      }
    }
    // Back from the end: the pieces in reverse order, then reversed in place.
    const std::size_t first = ids.size(), first_piece = s.pieces.size();
    for (std::size_t end = n; end > 0;) {
      const Piece& piece = pieces[best_unit[end]];
      std::size_t start = end - piece.length;
      if (piece.id != unk_) {
        ids.push_back(piece.id);
        if (at != std::string::npos) s.pieces.push_back({at + start, at + end});
        end = start;
        continue;
      }
      while (start > 0 && pieces[best_unit[start]].id == unk_) start -= pieces[best_unit[start]].length;
      encode_utf8(word.substr(start, end - start), s.utf8);
      const std::size_t before = ids.size();
      push_unknown(s.utf8, ids);
      if (at != std::string::npos) s.pieces.insert(s.pieces.end(), ids.size() - before, Span{at + start, at + end});
      end = start;
    }
    std::reverse(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end());
    if (at != std::string::npos)
      std::reverse(s.pieces.begin() + static_cast<std::ptrdiff_t>(first_piece), s.pieces.end());
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

  // A character's label: its number among the pieces' characters, from 1; 0 for one in no piece.
  std::uint32_t label_of(char32_t c) const {
    const std::size_t page = c >> 8;
    return page < page_of_.size() ? label_pages_[page_of_[page] + (c & 0xFF)] : 0;
  }
  std::uint32_t add_label(char32_t c) {
    const std::size_t page = c >> 8;  // a decoded character is at most U+10FFFF
    if (page_of_[page] == 0) {
      page_of_[page] = static_cast<std::uint32_t>(label_pages_.size());
      label_pages_.resize(label_pages_.size() + 256);
    }
    std::uint32_t& slot = label_pages_[page_of_[page] + (c & 0xFF)];
    if (slot == 0) slot = ++alphabet_;
    return slot;
  }

  // A trie of the pieces' characters, built with a map per node, then laid out as a double array (the
  // layout of sentencepiece's Darts): the child of unit u labelled l is unit units_[u].base + l, if that
  // unit's check names u. The root is unit 0. Every base leaves alphabet_ units after it, so no look-up
  // leaves the array.
  struct Building {
    std::vector<std::map<std::uint32_t, std::int32_t>> children{1};
    std::vector<std::int32_t> token{-1};
    std::vector<std::uint32_t> depth{0};
  };
  void insert(Building& b, std::u32string_view chars, std::int32_t id) {
    std::int32_t node = 0;
    for (const char32_t c : chars) {
      const auto [it, added] = b.children[static_cast<std::size_t>(node)].try_emplace(
          add_label(c), static_cast<std::int32_t>(b.children.size()));
      if (added) {
        b.children.emplace_back();
        b.token.push_back(-1);
        b.depth.push_back(b.depth[static_cast<std::size_t>(node)] + 1);
      }
      node = it->second;
    }
    b.token[static_cast<std::size_t>(node)] = id;
  }
  struct Unit {
    std::int32_t base = 0;
    std::int32_t check = -1;  // the parent unit; -1 free (the root's own check, -2, is nobody's index)
  };
  struct Piece {  // the piece that ends at a unit, if any
    double score = -std::numeric_limits<double>::infinity();
    std::int32_t id = -1;
    std::uint32_t length = 0;  // its characters
  };
  // Each node's children go to the first base where all their units are free. Free units are found through
  // `next_free` (the smallest free unit >= u, a union-find with path compression), and a free unit that 32
  // bases were tried at is given up (left empty), so a vocabulary of 250,000 pieces lays out in linear time.
  void build_double_array(const Building& b) {
    const std::size_t span = std::size_t{alphabet_} + 1;  // base + label, label in [0, alphabet_]
    units_.assign(1024, Unit{});
    pieces_.assign(1024, Piece{});
    std::vector<std::uint32_t> next_free(units_.size());
    std::vector<std::uint8_t> tries(units_.size());
    for (std::size_t u = 0; u < next_free.size(); ++u) next_free[u] = static_cast<std::uint32_t>(u);
    const auto grow = [&] {
      const std::size_t old = units_.size();
      units_.resize(old * 2, Unit{});
      pieces_.resize(old * 2, Piece{});
      tries.resize(old * 2);
      next_free.resize(old * 2);
      for (std::size_t u = old; u < next_free.size(); ++u) next_free[u] = static_cast<std::uint32_t>(u);
    };
    const auto find = [&](std::size_t u) {
      while (u >= next_free.size()) grow();
      std::size_t r = u;
      while (next_free[r] != r) {
        r = next_free[r];
        while (r >= next_free.size()) grow();
      }
      while (next_free[u] != u) u = std::exchange(next_free[u], static_cast<std::uint32_t>(r));
      return r;
    };
    const auto take = [&](std::size_t u) { next_free[u] = static_cast<std::uint32_t>(u + 1); };
    units_[0].check = -2;
    take(0);
    // Nodes in the order they were made (a parent before its children), which keeps the building trie's
    // reads sequential; a node's unit is known once its parent is placed.
    std::vector<std::int32_t> unit_of(b.children.size(), 0);
    std::size_t top = 0;  // the highest base given
    for (std::size_t node = 0; node < b.children.size(); ++node) {
      const std::int32_t unit = unit_of[node];
      const auto& children = b.children[node];
      if (const std::int32_t id = b.token[node]; id >= 0)
        pieces_[static_cast<std::size_t>(unit)] = Piece{scores_[static_cast<std::size_t>(id)], id, b.depth[node]};
      if (children.empty()) continue;
      const std::size_t lowest = children.begin()->first;
      std::size_t base = 0;
      for (std::size_t free = find(lowest);; free = find(free + 1)) {
        base = free - lowest;
        while (base + span >= units_.size()) grow();
        bool fits = true;
        for (const auto& child : children)
          if (units_[base + child.first].check != -1) {
            fits = false;
            break;
          }
        if (fits) break;
        if (++tries[free] == 32) take(free);
      }
      units_[static_cast<std::size_t>(unit)].base = static_cast<std::int32_t>(base);
      top = std::max(top, base);
      for (const auto& [label, child] : children) {
        units_[base + label].check = unit;
        take(base + label);
        unit_of[static_cast<std::size_t>(child)] = static_cast<std::int32_t>(base + label);
      }
    }
    units_.resize(top + span);  // every look-up's unit (base + label) stays inside
    units_.shrink_to_fit();
    pieces_.resize(units_.size());
    pieces_.shrink_to_fit();
  }

  std::vector<double> scores_;
  Vocabulary vocab_;
  TokensById by_id_;
  std::vector<Unit> units_;
  std::vector<Piece> pieces_;  // by unit
  // Labels by character: label_pages_[page_of_[c >> 8] + (c & 0xFF)]; page 0, all zeros, serves the
  // characters in no piece.
  std::vector<std::uint32_t> page_of_ = std::vector<std::uint32_t>(0x110000 >> 8);
  std::vector<std::uint32_t> label_pages_ = std::vector<std::uint32_t>(256);
  std::uint32_t alphabet_ = 0;  // the labels given
  std::array<std::int32_t, 256> byte_ids_{};
  std::int32_t unk_;
  const std::uint64_t serial_ = WordCache::next_serial();
  double unk_score_ = 0;
  bool byte_fallback_;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const json::object& o, const Origin& origin) {
  constexpr std::uint64_t kNoUnknown = std::numeric_limits<std::uint64_t>::max();
  const json::value* vocab = field(o, "vocab");
  if (vocab == nullptr || !vocab->is_array()) refuse(origin, "'vocab' must be a list of [piece, score]");
  // tokenizers reads unk_id as an index (usize); it must name a piece.
  const std::uint64_t unk = count_field(o, "unk_id", kNoUnknown, kNoUnknown - 1, origin);
  if (unk != kNoUnknown && unk >= vocab->as_array().size())
    refuse(origin, fmt::format("'unk_id' {} is outside the vocabulary of {} pieces", unk, vocab->as_array().size()));
  return std::make_unique<Unigram>(vocab->as_array(), unk == kNoUnknown ? -1 : static_cast<std::int32_t>(unk),
                                   flag(o, "byte_fallback", false, origin), origin);
}

}  // namespace flowline::models::tokenizers
