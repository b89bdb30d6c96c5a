// Tests of BoundedQueue: order, blocking and rejecting when full, closing while producers and consumers wait.
#include "test_support.hpp"

#include <atomic>
#include <thread>

using namespace flowline;
using namespace std::chrono_literals;

TEST_CASE("bounded queue blocks producer when full", "[queue]") {
  BoundedQueue<int> queue(2);
  REQUIRE(queue.push(1));
  REQUIRE(queue.push(2));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    queue.push(3);
    pushed = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(pushed.load());
  CHECK(queue.pop() == 1);
  producer.join();
  CHECK(pushed.load());
  CHECK(queue.size() == 2);
}

TEST_CASE("bounded queue with reject policy refuses items when full", "[queue]") {
  BoundedQueue<int> queue(1, OverflowPolicy::Reject);
  CHECK(queue.push(1));
  int item = 2;
  CHECK_FALSE(queue.push(item));
  CHECK(item == 2);
}

TEST_CASE("closing a queue lets consumers drain it and then stop", "[queue]") {
  BoundedQueue<int> queue(4);
  queue.push(1);
  queue.push(2);
  queue.close();
  CHECK_FALSE(queue.push(3));
  CHECK(queue.pop() == 1);
  CHECK(queue.pop() == 2);
  CHECK_FALSE(queue.pop().has_value());
}

TEST_CASE("an item put back goes to the front, past the capacity and after close", "[queue]") {
  BoundedQueue<int> queue(2);
  queue.push(1);
  queue.push(2);
  queue.push_front(0);  // full, yet it never waits
  CHECK(queue.size() == 3);
  queue.close();
  queue.push_front(-1);
  CHECK(queue.pop() == -1);
  CHECK(queue.pop() == 0);
  CHECK(queue.pop() == 1);
  CHECK(queue.pop() == 2);
  CHECK_FALSE(queue.pop().has_value());
}

TEST_CASE("pop_until gives up at the deadline", "[queue]") {
  BoundedQueue<int> queue(1);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(queue.pop_until(start + 20ms).has_value());
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
}

TEST_CASE("many producers and consumers pass every item exactly once", "[queue]") {
  BoundedQueue<int> queue(8);
  constexpr int kPerProducer = 20000;
  std::atomic<long> sum{0};
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < 3; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) queue.push(p * kPerProducer + i);
    });
  }
  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.emplace_back([&] {
      while (auto v = queue.pop()) {
        sum += *v;
        ++count;
      }
    });
  }
  for (auto& t : threads) t.join();
  queue.close();
  for (auto& t : consumers) t.join();
  const long n = 3L * kPerProducer;
  CHECK(count == n);
  CHECK(sum == n * (n - 1) / 2);
}
