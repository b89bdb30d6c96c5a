// Internal to the remote room: a frame's body read with memory bounded by what arrived, not by the length
// its peer declared (issue 33). Both ends of the wire use it: ExecutorServer's sessions for requests,
// RemoteHost for answers.
//
// FrameBody grows its buffer as bytes arrive — to at most twice what has arrived plus one step (64 KiB),
// never to the declared length up front — so a peer that declares 256 MiB and sends nothing costs one step.
// Growth past the first step is reserved from a PartialFrameBudget shared by every connection of a process
// side; when the budget is spent, next() gives no buffer and the caller waits before reading on (TCP's
// window then stops the peer). finish() releases the reservation and keeps at most one step of capacity.
//
// A FrameBody belongs to one connection and is used from its handlers only (one at a time); the budget is
// thread-safe.
#pragma once

#include <boost/asio/buffer.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace flowline::remote {

class PartialFrameBudget {
 public:
  explicit PartialFrameBudget(std::size_t limit) : limit_(limit) {}
  // Takes `bytes` from the budget, or nothing (and returns false) when that would pass the limit.
  bool reserve(std::size_t bytes) {
    std::size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (used + bytes > limit_) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void release(std::size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::size_t used() const { return used_.load(std::memory_order_relaxed); }
  std::size_t limit() const { return limit_; }

 private:
  const std::size_t limit_;
  std::atomic<std::size_t> used_{0};
};

class FrameBody {
 public:
  static constexpr std::size_t kStep = 64 * 1024;

  explicit FrameBody(PartialFrameBudget& budget) : budget_(budget) {}
  ~FrameBody() { budget_.release(reserved_); }
  FrameBody(const FrameBody&) = delete;
  FrameBody& operator=(const FrameBody&) = delete;

  // A frame of `length` bytes is next.
  void start(std::size_t length) {
    finish();  // whatever an abandoned frame left
    expected_ = length;
  }
  // Where the next read goes: the buffer grown by up to max(one step, what has arrived) and at most to the
  // frame's end. nullopt when that growth is not in the budget: wait, then ask again.
  std::optional<boost::asio::mutable_buffer> next() {
    if (data_.size() <= received_) {
      const std::size_t want = std::min(expected_ - received_, std::max(kStep, received_));
      const std::size_t size = received_ + want;
      const std::size_t counted = size > kStep ? size - std::max(kStep, data_.size()) : 0;
      if (counted && !budget_.reserve(counted)) return std::nullopt;
      reserved_ += counted;
      data_.resize(size);
    }
    return boost::asio::buffer(data_.data() + received_, std::min(data_.size(), expected_) - received_);
  }
  // `n` bytes arrived in the buffer next() gave. True when the frame is whole.
  bool arrived(std::size_t n) {
    received_ += n;
    return received_ == expected_;
  }
  std::string_view frame() const { return std::string_view(data_).substr(0, received_); }
  std::size_t received() const { return received_; }
  std::size_t expected() const { return expected_; }
  // The whole frame, moved out (for a caller that decodes it later, elsewhere); as finish() otherwise.
  std::string take() {
    data_.resize(received_);
    std::string out = std::move(data_);
    data_ = std::string();
    finish();
    return out;
  }
  // The frame has been handled: give back what was reserved, keep one step's capacity at most.
  void finish() {
    budget_.release(reserved_);
    reserved_ = 0;
    if (data_.capacity() > kStep) {
      std::string().swap(data_);
    } else {
      data_.clear();
    }
    expected_ = received_ = 0;
  }

 private:
  PartialFrameBudget& budget_;
  std::string data_;
  std::size_t expected_ = 0, received_ = 0, reserved_ = 0;
};

}  // namespace flowline::remote
