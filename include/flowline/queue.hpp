// flowline/queue.hpp — a bounded multi-producer multi-consumer queue with a named overflow policy.
//
// Any number of threads may push and pop concurrently. close() wakes everybody: pushes after it fail,
// pops drain what is left and then return std::nullopt. The Flow uses one per executor, shared by its
// replicas, so a faster replica simply takes more work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace flowline {

// What push() does when the queue is full.
enum class OverflowPolicy {
  Block,   // wait for room: backpressure on the producer
  Reject,  // return false at once, leaving the item with the caller
};

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity, OverflowPolicy policy = OverflowPolicy::Block)
      : capacity_(capacity), policy_(policy) {
    if (capacity_ == 0) throw std::invalid_argument("BoundedQueue capacity must be at least 1");
  }

  // Adds an item. Returns false when the queue is closed, or full under OverflowPolicy::Reject; the item
  // is then left untouched.
  bool push(T& item) {
    std::unique_lock lock(mutex_);
    if (policy_ == OverflowPolicy::Block) {
      not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    }
    if (closed_ || items_.size() >= capacity_) return false;
    items_.push_back(std::move(item));
    lock.unlock();
    not_empty_.notify_one();
    return true;
  }
  bool push(T&& item) { return push(item); }

  // Puts an item taken from this queue back at its front, to be taken next: room was made for it when it
  // was taken, so this never waits and may exceed the capacity by the items being put back. Works after
  // close() too (the closed queue drains it).
  void push_front(T item) {
    {
      std::lock_guard lock(mutex_);
      items_.push_front(std::move(item));
    }
    not_empty_.notify_one();
  }

  // Takes the oldest item, waiting for one. std::nullopt once the queue is closed and empty.
  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    return take(lock);
  }

  // Like pop(), but gives up at `deadline` (std::nullopt then too).
  template <class Clock, class Duration>
  std::optional<T> pop_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock lock(mutex_);
    not_empty_.wait_until(lock, deadline, [&] { return closed_ || !items_.empty(); });
    return take(lock);
  }

  // Takes the oldest item if there is one, without waiting.
  std::optional<T> try_pop() {
    std::unique_lock lock(mutex_);
    return take(lock);
  }

  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::optional<T> take(std::unique_lock<std::mutex>& lock) {
    if (items_.empty()) return std::nullopt;
    std::optional<T> item(std::move(items_.front()));
    items_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return item;
  }

  const std::size_t capacity_;
  const OverflowPolicy policy_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace flowline
