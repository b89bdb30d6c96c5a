// SharedSegment (shared_segment.hpp): a memfd per connection to a local worker and its region allocator.
#include "shared_segment.hpp"

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>

namespace flowline::remote {

namespace {

constexpr std::uint64_t kAlign = wire::kSharedAlign;
constexpr std::size_t kTokenBytes = 16;

std::uint64_t round_up(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::mutex registered_mutex;
std::map<std::string, std::size_t> registered;  // offer_shared_memory

}  // namespace

void offer_shared_memory(const std::string& address, std::size_t bytes) {
  std::lock_guard lock(registered_mutex);
  if (bytes == 0)
    registered.erase(address);
  else
    registered[address] = bytes;
}

std::size_t shared_memory_for(const std::string& address) {
  std::lock_guard lock(registered_mutex);
  const auto it = registered.find(address);
  return it == registered.end() ? 0 : it->second;
}

std::shared_ptr<SharedSegment> SharedSegment::create(std::size_t bytes) {
  bytes = round_up(std::max<std::uint64_t>(bytes, 2 * kAlign));
  std::shared_ptr<SharedSegment> s(new SharedSegment());
  s->fd_ = memfd_create("flowline-shared", MFD_CLOEXEC);
  if (s->fd_ < 0) throw std::runtime_error(fmt::format("memfd_create: {}", std::strerror(errno)));
  if (ftruncate(s->fd_, static_cast<off_t>(bytes)) != 0)
    throw std::runtime_error(fmt::format("ftruncate of a {}-byte memfd: {}", bytes, std::strerror(errno)));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd_, 0);
  if (p == MAP_FAILED) throw std::runtime_error(fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno)));
  s->base_ = static_cast<char*>(p);
  s->size_ = bytes;
  std::random_device random;
  for (std::size_t i = 0; i < kTokenBytes; ++i) s->token_.push_back(static_cast<char>(random() & 0xFF));
  std::memcpy(s->base_, s->token_.data(), kTokenBytes);
  s->free_.emplace(kAlign, bytes - kAlign);
  return s;
}

SharedSegment::~SharedSegment() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

wire::SegmentOffer SharedSegment::offer() const {
  return wire::SegmentOffer{size_, static_cast<std::uint32_t>(getpid()), static_cast<std::uint32_t>(fd_), token_};
}

SharedSegment::Region SharedSegment::allocate(std::uint64_t bytes) {
  Region region;
  if (bytes == 0) return region;
  bytes = round_up(bytes);
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t offset = it->first, left = it->second - bytes;
    free_.erase(it);
    if (left > 0) free_.emplace(offset + bytes, left);
    region.segment_ = shared_from_this();
    region.offset_ = offset;
    region.bytes_ = bytes;
    return region;
  }
  return region;
}

std::uint64_t SharedSegment::largest_free() const {
  std::lock_guard lock(mutex_);
  std::uint64_t best = 0;
  for (const auto& [offset, bytes] : free_) best = std::max(best, bytes);
  return best;
}

std::uint64_t SharedSegment::free_bytes() const {
  std::lock_guard lock(mutex_);
  std::uint64_t total = 0;
  for (const auto& [offset, bytes] : free_) total += bytes;
  return total;
}

void SharedSegment::release(std::uint64_t offset, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = free_.emplace(offset, bytes).first;
  const auto next = std::next(it);
  if (next != free_.end() && offset + bytes == next->first) {  // merge with the run after
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {  // and with the run before
    const auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

SharedSegment::Region& SharedSegment::Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    reset();
    segment_ = std::move(other.segment_);
    offset_ = other.offset_;
    bytes_ = other.bytes_;
    other.segment_ = nullptr;
  }
  return *this;
}

void SharedSegment::Region::reset() {
  if (!segment_) return;
  segment_->release(offset_, bytes_);
  segment_.reset();
}

wire::SharedRegion SharedSegment::Region::view(std::size_t min_tensor_bytes) const {
  wire::SharedRegion v;
  if (!segment_) return v;
  v.base = segment_->data();
  v.segment_bytes = segment_->size();
  v.offset = offset_;
  v.bytes = bytes_;
  v.answer_offset = offset_;
  v.min_tensor_bytes = min_tensor_bytes;
  return v;
}

}  // namespace flowline::remote
