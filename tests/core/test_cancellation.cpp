// Cancellation in one process (Flow::submit with a flag): a request given up before it runs is dropped
// without its handler, a running handler sees its request's flag, and a batch merging several requests is
// cancelled only once all of them are.
#include "test_support.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

using namespace flowline;
using namespace std::chrono_literals;

namespace {

// "/wait": runs until its request is cancelled (at most 10 s), checking between steps of 1 ms as a long
// loop would, then throws through throw_if_cancelled; it fails otherwise when the thread's cancellation is
// not the request's. "/count": counts its calls and documents.
class Patient : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"Patient", "waits for its cancellation", {}, {"/wait", "/count"}}; }
  explicit Patient(const ExecutorContext& c) : Executor(c) {
    bind("/wait", [](DocumentArray&, const RequestInfo& request) {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (std::chrono::steady_clock::now() < until) {
        // The thread's cancellation is the request's (read by code below a handler).
        if (this_thread_cancellation() != request.cancellation) throw Error("this_thread_cancellation() differs");
        throw_if_cancelled("the test's loop");
        std::this_thread::sleep_for(1ms);
      }
    });
    bind("/count", [](DocumentArray& docs, const RequestInfo&) {
      calls()++;
      documents() += docs.size();
    });
    bind_default([](DocumentArray&, const RequestInfo&) {});
  }
  static std::atomic<int>& calls() {
    static std::atomic<int> n{0};
    return n;
  }
  static std::atomic<std::size_t>& documents() {
    static std::atomic<std::size_t> n{0};
    return n;
  }
};

Registry& cancellation_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    r->add<Patient>();
    return r;
  }();
  return *registry;
}

using Flag = Cancellation::Flag;

// Submits `docs` to `endpoint` with `cancel`; the future gets the response.
std::future<Response> submit(Flow& flow, const std::string& endpoint, DocumentArray docs,
                             std::shared_ptr<Flag> cancel) {
  auto promise = std::make_shared<std::promise<Response>>();
  auto future = promise->get_future();
  flow.submit(endpoint, std::move(docs), {}, {}, std::move(cancel),
              [promise](Response&& r) { promise->set_value(std::move(r)); });
  return future;
}

}  // namespace

TEST_CASE("a running handler stops at its next check once its request is cancelled", "[flow][cancellation]") {
  Flow flow(FlowOptions{}, cancellation_registry());
  flow.add({.name = "patient", .uses = "Patient"});
  flow.start();
  auto cancel = std::make_shared<Flag>(false);
  auto answer = submit(flow, "/wait", testing::numbered_docs(1), cancel);
  std::this_thread::sleep_for(100ms);
  const auto cancelled_at = std::chrono::steady_clock::now();
  cancel->store(true);
  REQUIRE(answer.wait_for(5s) == std::future_status::ready);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cancelled_at).count();
  const Response r = answer.get();
  CHECK(ms < 1000);
  CHECK(r.request_error);
  CHECK_THAT(r.error, testing::contains("cancelled during the test's loop"));
  flow.close();
}

TEST_CASE("a queued request whose flag is set is dropped before its handler runs", "[flow][cancellation]") {
  Flow flow(FlowOptions{}, cancellation_registry());
  flow.add({.name = "patient", .uses = "Patient"});
  flow.start();
  Patient::calls() = 0;
  auto busy = std::make_shared<Flag>(false);
  auto first = submit(flow, "/wait", testing::numbered_docs(1), busy);  // keeps the one replica busy
  std::this_thread::sleep_for(50ms);
  auto given_up = std::make_shared<Flag>(false);
  auto dropped = submit(flow, "/count", testing::numbered_docs(3), given_up);
  auto kept = submit(flow, "/count", testing::numbered_docs(2), std::make_shared<Flag>(false));
  given_up->store(true);
  busy->store(true);
  REQUIRE(dropped.wait_for(5s) == std::future_status::ready);
  REQUIRE(kept.wait_for(5s) == std::future_status::ready);
  const Response d = dropped.get(), k = kept.get();
  CHECK_THAT(d.error, testing::contains("cancelled before it ran"));
  CHECK(d.request_error);
  CHECK(k.ok());
  CHECK(k.docs.size() == 2);
  CHECK(Patient::calls() == 1);  // the kept request only
  CHECK_THAT(first.get().error, testing::contains("cancelled"));
  flow.close();
}

TEST_CASE("a merged batch runs on while one of its requests is not cancelled", "[flow][cancellation]") {
  Flow flow(FlowOptions{}, cancellation_registry());
  ExecutorConfig e{.name = "patient", .uses = "Patient"};
  e.batching.max_batch_size = 100;
  e.batching.max_delay = 200ms;  // the two requests wait for each other and share one handler call
  flow.add(e);
  flow.start();
  auto a = std::make_shared<Flag>(false), b = std::make_shared<Flag>(false);
  auto first = submit(flow, "/wait", testing::numbered_docs(1), a);
  auto second = submit(flow, "/wait", testing::numbered_docs(1), b);
  std::this_thread::sleep_for(400ms);
  a->store(true);
  // One flag of two: the merged call goes on.
  CHECK(first.wait_for(300ms) == std::future_status::timeout);
  b->store(true);
  REQUIRE(first.wait_for(5s) == std::future_status::ready);
  REQUIRE(second.wait_for(5s) == std::future_status::ready);
  CHECK_THAT(first.get().error, testing::contains("cancelled"));
  CHECK_THAT(second.get().error, testing::contains("cancelled"));
  flow.close();
}
