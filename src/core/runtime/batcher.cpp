// Dynamic batching: taking batches from a queue, merging requests and splitting results back.
#include "batcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace flowline::runtime {

std::chrono::microseconds wait_under_load(int others_running, std::chrono::nanoseconds recent) {
  using std::chrono::microseconds;
  if (others_running <= 0) return microseconds(0);  // the device has nothing else to do: go at once
  return std::min(std::chrono::duration_cast<microseconds>(recent / 8), microseconds(1000));
}

std::chrono::microseconds Batcher::wait_for_more() const {
  if (options_.max_delay) return *options_.max_delay;
  // This replica's own batch was finished by take(): what runs is the others'.
  return wait_under_load(source_.running_.load(std::memory_order_relaxed),
                         std::chrono::nanoseconds(source_.recent_batch_ns_.load(std::memory_order_relaxed)));
}

void Batcher::start_batch() {
  running_ = true;
  started_ = std::chrono::steady_clock::now();
  source_.running_.fetch_add(1, std::memory_order_relaxed);
}

void Batcher::finish_batch() noexcept {
  if (!running_) return;
  running_ = false;
  source_.running_.fetch_sub(1, std::memory_order_relaxed);
  const std::int64_t took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started_).count();
  // A new batch weighs an eighth. Replicas store without a lock: one that loses a race drops one sample.
  const std::int64_t old = source_.recent_batch_ns_.load(std::memory_order_relaxed);
  source_.recent_batch_ns_.store(old == 0 ? took : old + (took - old) / 8, std::memory_order_relaxed);
}

std::vector<RequestPtr> Batcher::take() {
  finish_batch();
  std::vector<RequestPtr> batch;
  RequestQueue& queue = source_.queue_;
  if (options_.max_batch_size == 0) {
    if (auto first = queue.pop()) batch.push_back(std::move(*first));
    return batch;
  }
  std::lock_guard turn(source_.turn_);
  if (source_.carry_) {
    batch.push_back(std::move(source_.carry_));
    source_.carrying_ = false;
  } else if (auto first = queue.pop()) {
    batch.push_back(std::move(*first));
  } else {
    return batch;
  }
  std::size_t size = batch.front()->docs.size();
  const std::chrono::microseconds wait = wait_for_more();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (size < options_.max_batch_size) {
    auto next = wait.count() > 0 ? queue.pop_until(deadline) : queue.try_pop();
    if (!next) break;
    RequestPtr& request = *next;
    if (!request->session->batches_with(*batch.front()->session) ||
        size + request->docs.size() > options_.max_batch_size) {
      source_.carry_ = std::move(request);
      source_.carrying_ = true;
      break;
    }
    size += request->docs.size();
    batch.push_back(std::move(request));
  }
  start_batch();
  return batch;
}

MergedBatch merge_requests(std::vector<RequestPtr>& requests) {
  MergedBatch merged;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    merged.counts.push_back(requests[i]->docs.size());
    for (const auto& doc : requests[i]->docs) merged.owner.emplace(doc.id, i);
    merged.docs.append(std::move(requests[i]->docs));
    requests[i]->docs.clear();
  }
  return merged;
}

std::string split_results(MergedBatch& merged, std::vector<RequestPtr>& requests) {
  std::size_t total = 0;
  for (std::size_t count : merged.counts) total += count;
  if (merged.docs.size() == total) {
    for (std::size_t i = 0; i < requests.size(); ++i) requests[i]->docs = merged.docs.take(0, merged.counts[i]);
    return {};
  }
  for (auto& doc : merged.docs) {
    auto it = merged.owner.find(doc.id);
    if (it == merged.owner.end()) it = merged.owner.find(doc.parent_id);
    if (it == merged.owner.end()) {
      return fmt::format(
          "document {} in a merged batch has neither the id nor the parent_id of an input document, "
          "so its request is unknown; turn batching off for this executor",
          doc.id);
    }
    requests[it->second]->docs.push_back(std::move(doc));
  }
  merged.docs.clear();
  return {};
}

}  // namespace flowline::runtime
