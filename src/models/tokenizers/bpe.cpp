// The BPE model: each word's characters looked up in the vocabulary (with the continuing-subword prefix
// and end-of-word suffix where they apply, bytes as <0xNN> tokens under byte_fallback, the unknown token,
// fused or not, for the rest), then merged pair by pair, lowest merge rank first, exactly as Hugging Face
// `tokenizers` does (its Word::merge_all, priority queue of (rank, position) and all). Immutable once
// built; the symbols and the queue are the calling thread's (thread_local), so a warmed thread allocates
// nothing per word.
#include "builders.hpp"
#include "word_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

struct MergeRule {
  std::uint32_t rank;
  std::int32_t new_id;
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// The merge rules by pair, open addressing over a power-of-two table at most half full, Fibonacci-hashed:
// merging looks a pair up for every neighbour it makes, and a node-based map's pointer chase was a third
// of a long word's time. A key of two ids is never all ones (ids are not negative), which marks an empty
// entry.
class MergeTable {
 public:
  void reserve(std::size_t rules) {
    std::size_t capacity = 16;
    while (capacity < 2 * rules) capacity *= 2;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c /= 2) --shift_;
    entries_.assign(capacity, Entry{});
  }
  void insert_or_assign(std::uint64_t key, MergeRule rule) {
    std::size_t i = index(key);
    while (entries_[i].key != kEmpty && entries_[i].key != key) i = (i + 1) & (entries_.size() - 1);
    entries_[i] = Entry{key, rule};
  }
  const MergeRule* find(std::uint64_t key) const {
    for (std::size_t i = index(key);; i = (i + 1) & (entries_.size() - 1)) {
      if (entries_[i].key == key) return &entries_[i].rule;
      if (entries_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Entry {
    std::uint64_t key = kEmpty;
    MergeRule rule{};
  };
  std::size_t index(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  std::vector<Entry> entries_;
  int shift_ = 64;
};

struct BpeOptions {
  std::optional<std::string> unk;
  std::string prefix, suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

class Bpe final : public Model {
 public:
  Bpe(Vocabulary vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const Origin& origin)
      : vocab_(std::move(vocab)), by_id_(vocab_), options_(std::move(options)) {
    if (options_.unk) {
      const auto it = vocab_.find(*options_.unk);
      if (it == vocab_.end())
        refuse(origin, fmt::format("the unknown token '{}' is not in the vocabulary", *options_.unk));
      unk_ = it->second;
    }
    merges_.reserve(merges.size());
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      const Origin here{origin.file, origin.at(fmt::format(".merges[{}]", rank))};
      if (b.size() < options_.prefix.size())
        refuse(here, fmt::format("'{}' is shorter than the continuing subword prefix", b));
      const std::int32_t a_id = id_or_refuse(a, here), b_id = id_or_refuse(b, here);
      const std::int32_t new_id = id_or_refuse(a + b.substr(options_.prefix.size()), here);
      merges_.insert_or_assign(pair_key(a_id, b_id), MergeRule{static_cast<std::uint32_t>(rank), new_id});
    }
    std::string key;
    for (char32_t c = 0; c < plain_.size(); ++c) {
      encode_utf8(std::u32string_view(&c, 1), key);
      plain_[c] = token_id(key);
    }
    for (unsigned byte = 0; byte < 256; ++byte) byte_ids_[byte] = token_id(fmt::format("<0x{:02X}>", byte));
    // Without a prefix or suffix a token is the characters it was merged from; not so the unknown token nor
    // byte fallback's, whose places depend on the word.
    if (options_.prefix.empty() && options_.suffix.empty()) {
      for (const auto& [token, id] : vocab_) set_shape(shapes, id, piece_shape(token));
      set_shape(shapes, unk_, {});
      if (options_.byte_fallback)
        for (const std::int32_t id : byte_ids_) set_shape(shapes, id, {});
    }
    cut_at_metaspace_ = options_.prefix.empty() && options_.suffix.empty() && !options_.ignore_merges &&
                        token_id(k_metaspace_utf8) >= 0 &&
                        std::none_of(merges.begin(), merges.end(), [](const auto& m) {
                          return !m.first.ends_with(k_metaspace_utf8) && m.second.starts_with(k_metaspace_utf8);
                        });
  }

  void tokenize(Scratch& s, Span word, std::vector<std::int32_t>& ids) const override {
    const std::u32string_view w = std::u32string_view(s.text).substr(word.begin, word.end - word.begin);
    const std::size_t at = s.cut_places ? word.begin : std::string::npos;  // offsets: no cache, places by symbol
    if (!cut_at_metaspace_) {
      if (s.cut_places)
        return WordCache::cut_with_places(serial_, w, at, ids, s.pieces,
                                          [&](std::size_t where) { merge_word(s, w, ids, where); });
      WordCache::cut(serial_, w, ids, [&] { merge_word(s, w, ids); });
      return;
    }
    for (std::size_t begin = 0; begin < w.size();) {
      std::size_t end = begin + 1;
      while (end < w.size() && !(w[end] == k_metaspace && w[end - 1] != k_metaspace)) ++end;
      const std::u32string_view part = w.substr(begin, end - begin);
      if (s.cut_places)
        WordCache::cut_with_places(serial_, part, at + begin, ids, s.pieces,
                                   [&](std::size_t where) { merge_word(s, part, ids, where); });
      else
        WordCache::cut(serial_, part, ids, [&] { merge_word(s, part, ids); });
      begin = end;
    }
  }

  // With `at` (offsets), each id's code points too, the word starting at s.text[at].
  void merge_word(Scratch& s, std::u32string_view w, std::vector<std::int32_t>& ids,
                  std::size_t at = std::string::npos) const {
    if (options_.ignore_merges) {
      encode_utf8(w, s.utf8);
      if (const std::int32_t id = token_id(s.utf8); id >= 0) {
        ids.push_back(id);
        if (at != std::string::npos) s.pieces.push_back({at, at + w.size()});
        return;
      }
    }
    Work& work = this_thread_work();
    work.symbols.clear();
    bool pending_unk = false;
    std::uint32_t unk_bytes = 0;  // the pending unknown token's length in UTF-8 bytes
    for (std::size_t i = 0; i < w.size(); ++i) {
      const std::uint32_t bytes = w[i] < 0x80 ? 1 : w[i] < 0x800 ? 2 : w[i] < 0x10000 ? 3 : 4;
      const bool first = i == 0, last = i + 1 == w.size();
      std::int32_t id = -1;
      const bool plain = (first || options_.prefix.empty()) && (!last || options_.suffix.empty());
      if (plain && w[i] < plain_.size()) {
        id = plain_[w[i]];
      } else {
        key_of(w[i], first, last, s.utf8);
        id = token_id(s.utf8);
      }
      if (id >= 0) {
        if (pending_unk) add(work, unk_, unk_bytes);
        pending_unk = false;
        add(work, id, bytes);
        continue;
      }
      if (options_.byte_fallback && byte_fallback(w[i], first, last, s.utf8, work)) continue;
      if (options_.unk) {
        if (pending_unk && !options_.fuse_unk) add(work, unk_, unk_bytes);
        unk_bytes = pending_unk && options_.fuse_unk ? unk_bytes + bytes : bytes;
        pending_unk = true;  // fused: the pending unknown token grows over this character too
      }
    }
    if (pending_unk) add(work, unk_, unk_bytes);
    merge_all(work);
    if (at != std::string::npos) return places(s, w, at, ids);
    for (const Symbol& symbol : work.symbols)
      if (symbol.alive()) ids.push_back(symbol.id);
  }

  // The ids with their places. As in tokenizers, a symbol's place is its bytes counted in the order the
  // symbols were made (so a byte token made while an unknown one was pending comes before it), then each
  // byte range widened to its characters.
  void places(Scratch& s, std::u32string_view w, std::size_t at, std::vector<std::int32_t>& ids) const {
    const auto width = [](char32_t c) -> std::uint32_t { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; };
    std::uint32_t total = 0;
    for (const char32_t c : w) total += width(c);
    // The character holding a byte, walked forward: the bytes asked for never go back (each symbol's first
    // byte is at or after the last byte of the one before).
    std::size_t ch = 0;
    std::uint32_t ch_end = w.empty() ? 0 : width(w[0]);  // the byte after character ch
    const auto char_of = [&](std::uint32_t byte) {
      byte = std::min(byte, total - 1);
      while (byte >= ch_end && ch + 1 < w.size()) ch_end += width(w[++ch]);
      return ch;
    };
    std::uint32_t cursor = 0;
    for (const Symbol& symbol : this_thread_work().symbols) {
      if (!symbol.alive()) continue;
      const std::uint32_t begin = cursor, end = std::max(cursor + symbol.len, cursor + 1);
      cursor += symbol.len;
      ids.push_back(symbol.id);
      const std::size_t first = char_of(begin);
      s.pieces.push_back({at + first, at + char_of(end - 1) + 1});
    }
  }

  std::int32_t token_id(std::string_view token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  std::string_view id_to_token(std::int32_t id) const override { return by_id_(id); }
  std::string_view continuing_subword_prefix() const override { return options_.prefix; }
  std::int32_t unk_id() const override { return unk_; }
  std::size_t size() const override { return vocab_.size(); }
  std::string name() const override { return "BPE"; }

 private:
  struct Symbol {
    std::int32_t id;
    std::int32_t prev, next;  // -1: none
    // Its length in the word's UTF-8 bytes (a byte token: 1), for offsets; 0 once merged into its left
    // neighbour (every symbol made is at least a byte long). Sixteen bytes a symbol, as without offsets.
    std::uint32_t len;
    bool alive() const { return len != 0; }
  };
  struct Merge {
    std::uint32_t rank;
    std::uint32_t pos;
    std::int32_t new_id;
    // The heap's top is the lowest rank, then the leftmost position.
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  struct Work {
    std::vector<Symbol> symbols;
    std::vector<Merge> queue;
  };
  static Work& this_thread_work() {
    thread_local Work work;
    return work;
  }

  const std::uint64_t serial_ = WordCache::next_serial();
  // Sentencepiece-style BPE without a pre-tokenizer (Llama, Mistral) sees a whole paragraph as one word,
  // too long to cache and slow to merge. Where no merge joins a token ending in anything but '▁' to one
  // starting with '▁', no token can span the place before a '▁' that follows another character, so the
  // word is merged part by part, each part cached: the same ids, since merges in different parts never
  // meet (the merge order within each part is unchanged).
  static constexpr char32_t k_metaspace = U'\u2581';
  static constexpr std::string_view k_metaspace_utf8 = "\xE2\x96\x81";
  bool cut_at_metaspace_ = false;

  std::int32_t id_or_refuse(const std::string& token, const Origin& origin) const {
    const std::int32_t id = token_id(token);
    if (id < 0) refuse(origin, fmt::format("the merge token '{}' is not in the vocabulary", token));
    return id;
  }

  static void add(Work& work, std::int32_t id, std::uint32_t len) {
    const auto n = static_cast<std::int32_t>(work.symbols.size());
    if (n > 0) work.symbols.back().next = n;
    work.symbols.push_back({id, n - 1, -1, std::max<std::uint32_t>(len, 1)});
  }

  // The vocabulary key of a character: the prefix unless it starts the word, the suffix if it ends it.
  void key_of(char32_t c, bool first, bool last, std::string& key) const {
    encode_utf8(std::u32string_view(&c, 1), key);
    if (!first) key.insert(0, options_.prefix);
    if (last) key.append(options_.suffix);
  }

  // The bytes of the character's key as <0xNN> tokens, all or none (Hugging Face's byte_fallback). A
  // pending unknown token stays pending, as there.
  bool byte_fallback(char32_t c, bool first, bool last, std::string& key, Work& work) const {
    key_of(c, first, last, key);
    for (const char b : key)
      if (byte_ids_[static_cast<unsigned char>(b)] < 0) return false;
    for (const char b : key) add(work, byte_ids_[static_cast<unsigned char>(b)], 1);
    return true;
  }

  void push(Work& work, std::int32_t left, std::int32_t right, std::uint32_t pos) const {
    const MergeRule* rule = merges_.find(pair_key(left, right));
    if (rule == nullptr) return;
    work.queue.push_back({rule->rank, pos, rule->new_id});
    std::push_heap(work.queue.begin(), work.queue.end());
  }

  void merge_all(Work& work) const {
    std::vector<Symbol>& sym = work.symbols;
    work.queue.clear();
    for (std::size_t i = 0; i + 1 < sym.size(); ++i)
      push(work, sym[i].id, sym[i + 1].id, static_cast<std::uint32_t>(i));
    while (!work.queue.empty()) {
      std::pop_heap(work.queue.begin(), work.queue.end());
      const Merge top = work.queue.back();
      work.queue.pop_back();
      Symbol& current = sym[top.pos];
      if (!current.alive() || current.next < 0) continue;
      Symbol& right = sym[static_cast<std::size_t>(current.next)];
      // A queued merge whose pair has changed since is stale, unless the pair now there makes the same token.
      const MergeRule* rule = merges_.find(pair_key(current.id, right.id));
      if (rule == nullptr || rule->new_id != top.new_id) continue;
      current.id = top.new_id;
      current.len += right.len;
      current.next = right.next;
      right.len = 0;
      if (right.next >= 0) sym[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
      if (current.prev >= 0)
        push(work, sym[static_cast<std::size_t>(current.prev)].id, current.id,
             static_cast<std::uint32_t>(current.prev));
      if (current.next >= 0) push(work, current.id, sym[static_cast<std::size_t>(current.next)].id, top.pos);
    }
  }

  Vocabulary vocab_;
  TokensById by_id_;
  BpeOptions options_;
  std::int32_t unk_ = -1;
  MergeTable merges_;
  std::array<std::int32_t, 0x800> plain_{};  // the id of each character below U+0800 on its own, or -1
  std::array<std::int32_t, 256> byte_ids_{};
};

// Both of tokenizer.json's forms: ["a b", ...] (split at the one space) and [["a", "b"], ...].
std::vector<std::pair<std::string, std::string>> read_merges(const json::object& o, const Origin& origin) {
  const json::value* v = field(o, "merges");
  if (v == nullptr || !v->is_array()) refuse(origin, "'merges' must be a list");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(v->as_array().size());
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const json::value& m = v->as_array()[i];
    const Origin here{origin.file, origin.at(fmt::format(".merges[{}]", i))};
    if (m.is_string()) {
      const std::string_view line = m.as_string();
      if (line.starts_with("#version")) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        refuse(here, "a merge must be two tokens separated by one space");
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string()) {
      merges.emplace_back(m.as_array()[0].as_string(), m.as_array()[1].as_string());
    } else {
      refuse(here, "a merge must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

}  // namespace

std::unique_ptr<Model> make_bpe(const json::object& o, const Origin& origin) {
  if (const json::value* dropout = field(o, "dropout");
      dropout != nullptr && !(dropout->is_number() && dropout->to_number<double>() == 0.0))
    refuse(origin, "'dropout' must be null (BPE dropout samples merges at random; flowline tokenizes exactly)");
  BpeOptions options;
  if (field(o, "unk_token") != nullptr) options.unk = text_field(o, "unk_token", origin);
  // Null or absent: empty.
  if (field(o, "continuing_subword_prefix") != nullptr)
    options.prefix = text_field(o, "continuing_subword_prefix", origin);
  if (field(o, "end_of_word_suffix") != nullptr) options.suffix = text_field(o, "end_of_word_suffix", origin);
  options.fuse_unk = flag(o, "fuse_unk", false, origin);
  options.byte_fallback = flag(o, "byte_fallback", false, origin);
  options.ignore_merges = flag(o, "ignore_merges", false, origin);
  return std::make_unique<Bpe>(read_vocab_object(o, origin), read_merges(o, origin), std::move(options), origin);
}

}  // namespace flowline::models::tokenizers
