// WordCache (word_cache.hpp): each thread's cache of the ids of the words a model cut last, an open-addressing
// table over the words' code points.
#include "word_cache.hpp"

#include <atomic>

namespace flowline::models::tokenizers {

std::uint64_t WordCache::next_serial() {
  static std::atomic<std::uint64_t> serial{0};
  return ++serial;
}

WordCache& WordCache::of_thread(std::uint64_t model, bool places) {
  thread_local WordCache ids_only, with_places;
  WordCache& cache = places ? with_places : ids_only;
  if (cache.model_ != model) {
    cache.clear();
    cache.model_ = model;
  }
  return cache;
}

void WordCache::clear() {
  slots_.assign(kSlots, Slot{});
  chars_.clear();
  ids_.clear();
  words_ = 0;
}

// FNV-1a over the code points, then a finalizer that spreads the high bits into the low ones the table
// indexes with (splitmix64's).
std::uint32_t WordCache::hash(std::u32string_view word) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char32_t c : word) h = (h ^ c) * 0x100000001b3ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  const auto folded = static_cast<std::uint32_t>(h ^ (h >> 32));
  return folded == 0 ? 1 : folded;
}

bool WordCache::append(std::u32string_view word, std::vector<std::int32_t>& ids, std::vector<Span>* pieces,
                       std::size_t at) const {
  const std::uint32_t h = hash(word);
  for (std::size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& slot = slots_[i];
    if (slot.hash == 0) return false;
    if (slot.hash == h && slot.length == word.size() &&
        std::u32string_view(chars_).substr(slot.chars, slot.length) == word) {
      if (pieces == nullptr) {
        ids.insert(ids.end(), ids_.begin() + slot.ids, ids_.begin() + slot.ids + slot.count);
        return true;
      }
      // The places cache: each id, then its characters (begin | end << 8, relative to the word) beside it.
      for (std::size_t k = slot.ids; k < slot.ids + 2 * std::size_t{slot.count}; k += 2) {
        ids.push_back(ids_[k]);
        const auto place = static_cast<std::uint32_t>(ids_[k + 1]);
        pieces->push_back({at + (place & 0xFF), at + (place >> 8)});
      }
      return true;
    }
  }
}

void WordCache::keep(std::u32string_view word, const std::int32_t* first, const std::int32_t* last, const Span* pieces,
                     std::size_t at) {
  if (words_ >= kWords) clear();  // at most half the slots are taken: every probe ends at an empty one
  const std::uint32_t h = hash(word);
  std::size_t i = h & (kSlots - 1);
  while (slots_[i].hash != 0) i = (i + 1) & (kSlots - 1);
  slots_[i] = Slot{h, static_cast<std::uint32_t>(chars_.size()), static_cast<std::uint32_t>(ids_.size()),
                   static_cast<std::uint16_t>(word.size()), static_cast<std::uint16_t>(last - first)};
  chars_.append(word);
  if (pieces == nullptr) {
    ids_.insert(ids_.end(), first, last);
  } else {  // a word is at most kLongestWord characters: its places fit a byte each
    for (std::ptrdiff_t k = 0; k < last - first; ++k) {
      ids_.push_back(first[k]);
      ids_.push_back(static_cast<std::int32_t>((pieces[k].begin - at) | (pieces[k].end - at) << 8));
    }
  }
  ++words_;
}

}  // namespace flowline::models::tokenizers
