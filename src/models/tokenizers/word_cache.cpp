// WordCache (word_cache.hpp): each thread's cache of the ids of the words a model cut last, an open-addressing
// table over the words' code points.
#include "word_cache.hpp"

#include <algorithm>
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
  data_.clear();
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
    if (slot.hash != h) continue;
    const std::uint32_t* const entry = data_.data() + slot.entry;
    const std::size_t length = entry[0] & 0xFF, count = entry[0] >> 8;
    if (length != word.size() || !std::equal(word.begin(), word.end(), entry + 1)) continue;
    const std::uint32_t* const kept = entry + 1 + length;
    if (pieces == nullptr) {
      ids.insert(ids.end(), reinterpret_cast<const std::int32_t*>(kept),
                 reinterpret_cast<const std::int32_t*>(kept) + count);
      return true;
    }
    // The places cache: each id, then its characters (begin | end << 8, relative to the word) beside it.
    for (std::size_t k = 0; k < 2 * count; k += 2) {
      ids.push_back(static_cast<std::int32_t>(kept[k]));
      pieces->push_back({at + (kept[k + 1] & 0xFF), at + (kept[k + 1] >> 8)});
    }
    return true;
  }
}

void WordCache::keep(std::u32string_view word, const std::int32_t* first, const std::int32_t* last, const Span* pieces,
                     std::size_t at) {
  if (words_ >= kWords) clear();  // at most half the slots are taken: every probe ends at an empty one
  const std::uint32_t h = hash(word);
  std::size_t i = h & (kSlots - 1);
  while (slots_[i].hash != 0) i = (i + 1) & (kSlots - 1);
  // A word is at most kLongestWord code points, cut into at most as many ids (each covers one at least, but a
  // character's bytes: four at most): its length and count fit in the entry's first word.
  const auto count = static_cast<std::uint32_t>(last - first);
  slots_[i] = Slot{h, static_cast<std::uint32_t>(data_.size())};
  data_.push_back(static_cast<std::uint32_t>(word.size()) | count << 8);
  data_.insert(data_.end(), word.begin(), word.end());
  if (pieces == nullptr) {
    for (const std::int32_t* id = first; id != last; ++id) data_.push_back(static_cast<std::uint32_t>(*id));
  } else {  // its places fit a byte each
    for (std::uint32_t k = 0; k < count; ++k) {
      data_.push_back(static_cast<std::uint32_t>(first[k]));
      data_.push_back(static_cast<std::uint32_t>((pieces[k].begin - at) | (pieces[k].end - at) << 8));
    }
  }
  ++words_;
}

}  // namespace flowline::models::tokenizers
