// The tokenizer models' per-thread cache of cut words (word_cache.cpp), private to flowline::tokenizers.
#pragma once

#include "pipeline.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowline::models::tokenizers {

// The ids of the words a model cut last, per thread (words repeat; tokenizers keeps such a cache too): BPE
// and Unigram look a word up before cutting it. A thread's cache belongs to the model it served last,
// named by a serial that is never reused (an address could be); it empties when it is full.
class WordCache {
 public:
  static std::uint64_t next_serial();
  // Appends `word`'s ids to `ids`: from this thread's cache, else by calling cut() (which appends them) and
  // keeping what it appended.
  template <class Cut>
  static void cut(std::uint64_t model, std::u32string_view word, std::vector<std::int32_t>& ids, Cut&& cut) {
    if (word.size() > kLongestWord) return cut();
    WordCache& cache = of_thread(model);
    if (cache.append(word, ids)) return;
    const std::size_t first = ids.size();
    cut();
    cache.keep(word, ids.data() + first, ids.data() + ids.size());
  }
  // The same with each id's place (Model::tokenize with s.track), from a second cache of the thread's that
  // keeps them relative to the word: cut(at) appends the ids and their pieces for the word at s.text[at].
  template <class Cut>
  static void cut_with_places(std::uint64_t model, std::u32string_view word, std::size_t at,
                              std::vector<std::int32_t>& ids, std::vector<Span>& pieces, Cut&& cut) {
    if (word.size() > kLongestWord) return cut(at);
    WordCache& cache = of_thread(model, true);
    if (cache.append(word, ids, &pieces, at)) return;
    const std::size_t first = ids.size(), first_piece = pieces.size();
    cut(at);
    cache.keep(word, ids.data() + first, ids.data() + ids.size(), pieces.data() + first_piece, at);
  }

 private:
  // Open addressing over a power-of-two table twice the size of the most words kept: a look-up is one
  // hash of the word's code points and, nearly always, one slot read (a node-based map's pointer chase and
  // division were a sixth of a byte-level BPE's time), then one entry read where the word is. A slot is eight
  // bytes and a word's entry holds its code points and its ids together (two cache lines a look-up, not three:
  // the table is 512 KiB, half a core's L2). hash 0 marks an empty slot.
  static constexpr std::size_t kLongestWord = 48, kWords = 32768, kSlots = 2 * kWords;
  struct Slot {
    std::uint32_t hash = 0;
    std::uint32_t entry = 0;  // data_[entry]: length | count << 8, then the word's code points, then its ids
  };
  static WordCache& of_thread(std::uint64_t model, bool places = false);
  static std::uint32_t hash(std::u32string_view word) noexcept;
  bool append(std::u32string_view word, std::vector<std::int32_t>& ids, std::vector<Span>* pieces = nullptr,
              std::size_t at = 0) const;
  void keep(std::u32string_view word, const std::int32_t* first, const std::int32_t* last, const Span* pieces = nullptr,
            std::size_t at = 0);
  void clear();
  std::uint64_t model_ = 0;
  std::size_t words_ = 0;
  std::vector<Slot> slots_;
  // Every cached word's entry. In the places cache, each id is followed by its characters in the word (begin |
  // end << 8), read in the same cache lines as the id (a separate array of places cost a miss a word).
  std::vector<std::uint32_t> data_;
};

}  // namespace flowline::models::tokenizers
