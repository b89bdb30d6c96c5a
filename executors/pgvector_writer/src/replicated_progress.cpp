// The committed input ranges of a PgVectorWriter's replicas (replicated_progress.hpp).
#include "replicated_progress.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace flowline::pgvector_writer {

void InputRanges::add(std::uint64_t begin, std::uint64_t end, const std::string& last_id) {
  if (end <= begin) return;
  std::uint64_t first = begin, last = end;
  std::string id = last_id;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second.end >= begin) it = before;
  }
  // Every range from `it` that overlaps or touches [first, last) joins it.
  while (it != ranges_.end() && it->first <= last) {
    first = std::min(first, it->first);
    if (it->second.end > last) {
      last = it->second.end;
      id = it->second.last_id;
    }
    it = ranges_.erase(it);
  }
  ranges_.emplace(first, Range{last, std::move(id)});
}

void InputRanges::add(const InputRanges& other) {
  for (const auto& [begin, range] : other.ranges_) add(begin, range.end, range.last_id);
}

bool InputRanges::contains(std::uint64_t position) const {
  auto it = ranges_.upper_bound(position);
  if (it == ranges_.begin()) return false;
  return std::prev(it)->second.end > position;
}

std::uint64_t InputRanges::prefix() const {
  return !ranges_.empty() && ranges_.begin()->first == 0 ? ranges_.begin()->second.end : 0;
}

std::string InputRanges::prefix_last_id() const { return prefix() > 0 ? ranges_.begin()->second.last_id : ""; }

InputRanges InputRanges::from(std::uint64_t position) const {
  InputRanges out;
  for (const auto& [begin, range] : ranges_)
    if (range.end > position) out.ranges_.emplace(std::max(begin, position), range);
  return out;
}

InputRanges InputRanges::intersect(const InputRanges& other) const {
  InputRanges out;
  auto a = ranges_.begin(), b = other.ranges_.begin();
  while (a != ranges_.end() && b != other.ranges_.end()) {
    const std::uint64_t begin = std::max(a->first, b->first);
    const std::uint64_t end = std::min(a->second.end, b->second.end);
    if (begin < end) out.add(begin, end, a->second.end == end ? a->second.last_id : b->second.last_id);
    if (a->second.end < b->second.end) {
      ++a;
    } else {
      ++b;
    }
  }
  return out;
}

bool InputRanges::operator==(const InputRanges& other) const {
  return std::equal(ranges_.begin(), ranges_.end(), other.ranges_.begin(), other.ranges_.end(),
                    [](const auto& x, const auto& y) {
                      return x.first == y.first && x.second.end == y.second.end && x.second.last_id == y.second.last_id;
                    });
}

ProgressRecord ProgressRecord::of(const InputRanges& committed) {
  const std::uint64_t prefix = committed.prefix();
  return {SinkPoint{prefix, committed.prefix_last_id(), 0}, committed.from(prefix)};
}

InputRanges ReplicatedProgress::committed() const {
  std::lock_guard lock(mutex_);
  return committed_;
}

void ReplicatedProgress::add(const InputRanges& request) {
  std::lock_guard lock(mutex_);
  committed_.add(request);
}

bool ReplicatedProgress::give_up() {
  std::lock_guard lock(mutex_);
  return !std::exchange(gave_up_, true);
}

bool ReplicatedProgress::gave_up() const {
  std::lock_guard lock(mutex_);
  return gave_up_;
}

bool ReplicatedProgress::last_to_close(std::size_t replicas) {
  std::lock_guard lock(mutex_);
  return ++closed_ == replicas;
}

}  // namespace flowline::pgvector_writer
