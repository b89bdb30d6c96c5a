// Unit tests of the runtime's rooms on their own, without threads: the graph built from a config, the join
// that merges branches, the batcher's taking, merging and splitting back, and the replica worker loop.
#include "test_support.hpp"

#include "runtime/batcher.hpp"
#include "runtime/graph.hpp"
#include "runtime/observers.hpp"
#include "runtime/replica.hpp"

#include <chrono>
#include <ostream>
#include <thread>

using namespace flowline;
using namespace flowline::runtime;

namespace flowline::runtime {
// How Catch prints an edge in a failed check.
std::ostream& operator<<(std::ostream& out, const Edge& e) {
  return e.to_sink() ? out << "sink/" << e.slot : out << e.target << "/" << e.slot;
}
}  // namespace flowline::runtime

namespace {

FlowConfig config_of(std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> executors) {
  FlowConfig config;
  for (auto& [name, needs] : executors) {
    ExecutorConfig e;
    e.name = name;
    e.uses = "NoOp";
    e.needs = needs;
    config.executors.push_back(std::move(e));
  }
  return config;
}

RequestPtr request(PostSession* session, std::uint64_t index, std::vector<std::string> ids) {
  auto r = std::make_unique<Request>();
  r->session = session;
  r->index = index;
  for (auto& id : ids) {
    Document d(id);
    d.id = id;
    r->docs.push_back(std::move(d));
  }
  return r;
}

std::vector<std::string> ids_of(const DocumentArray& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs) out.push_back(d.id);
  return out;
}

}  // namespace

TEST_CASE("a chain of executors is a graph of single-input nodes ending at the sink", "[runtime][graph]") {
  const FlowGraph g = build_flow_graph(config_of({{"a", std::nullopt}, {"b", std::nullopt}, {"c", std::nullopt}}));
  REQUIRE(g.nodes.size() == 3);
  CHECK(g.entries == std::vector<Edge>{Edge{0, 0}});
  CHECK(g.nodes[0].outputs == std::vector<Edge>{Edge{1, 0}});
  CHECK(g.nodes[1].outputs == std::vector<Edge>{Edge{2, 0}});
  CHECK(g.nodes[2].outputs.size() == 1);
  CHECK(g.nodes[2].outputs[0].to_sink());
  for (const auto& n : g.nodes) CHECK(n.inputs == 1);
  CHECK(g.sink_inputs == 1);
}

TEST_CASE("a fan-out joins where an executor needs both branches", "[runtime][graph]") {
  using Needs = std::optional<std::vector<std::string>>;
  const FlowGraph g = build_flow_graph(config_of({{"start", std::nullopt},
                                                  {"left", Needs{{"start"}}},
                                                  {"right", Needs{{"start"}}},
                                                  {"join", Needs{{"left", "right"}}}}));
  CHECK(g.nodes[0].outputs == std::vector<Edge>{Edge{1, 0}, Edge{2, 0}});
  CHECK(g.nodes[1].outputs == std::vector<Edge>{Edge{3, 0}});
  CHECK(g.nodes[2].outputs == std::vector<Edge>{Edge{3, 1}});
  CHECK(g.nodes[3].inputs == 2);
  CHECK(g.sink_inputs == 1);
}

TEST_CASE("executors nobody reads all feed the sink, which joins them", "[runtime][graph]") {
  using Needs = std::optional<std::vector<std::string>>;
  const FlowGraph g =
      build_flow_graph(config_of({{"a", Needs{std::vector<std::string>{}}}, {"b", Needs{std::vector<std::string>{}}}}));
  CHECK(g.entries == std::vector<Edge>{Edge{0, 0}, Edge{1, 0}});
  CHECK(g.nodes[0].outputs == std::vector<Edge>{Edge{Edge::kSink, 0}});
  CHECK(g.nodes[1].outputs == std::vector<Edge>{Edge{Edge::kSink, 1}});
  CHECK(g.sink_inputs == 2);
}

TEST_CASE("a flow without executors sends requests straight to the sink", "[runtime][graph]") {
  const FlowGraph g = build_flow_graph(FlowConfig{});
  CHECK(g.nodes.empty());
  REQUIRE(g.entries.size() == 1);
  CHECK(g.entries[0].to_sink());
  CHECK(g.sink_inputs == 1);
}

TEST_CASE("a join waits for every branch of a request and merges documents by id", "[runtime][join]") {
  PostSession session("/", {});
  JoinPoint join(2);
  auto left = request(&session, 7, {"x", "y"});
  left->docs[0].tags["left"] = 1;
  auto right = request(&session, 7, {"y", "z"});
  right->docs[0].tags["right"] = 2;
  auto other = request(&session, 8, {"q"});
  CHECK(join.arrive(1, std::move(right)) == nullptr);
  CHECK(join.arrive(0, std::move(other)) == nullptr);  // another request waits apart
  CHECK(join.pending() == 2);
  RequestPtr merged = join.arrive(0, std::move(left));
  REQUIRE(merged);
  CHECK(merged->index == 7);
  CHECK(ids_of(merged->docs) == std::vector<std::string>{"x", "y", "z"});
  CHECK(merged->docs[1].tags.at("right").as_int64() == 2);
  CHECK(join.pending() == 1);
}

TEST_CASE("a failed branch fails the joined request with the first failure in branch order", "[runtime][join]") {
  PostSession session("/", {});
  std::vector<RequestPtr> parts;
  parts.push_back(request(&session, 0, {"a"}));
  parts.push_back(request(&session, 0, {"a"}));
  parts.push_back(request(&session, 0, {"a"}));
  parts[1]->error = "second failed";
  parts[1]->error_executor = "two";
  parts[2]->error = "third failed";
  RequestPtr merged = merge_branches(std::move(parts));
  CHECK(merged->error == "second failed");
  CHECK(merged->error_executor == "two");
}

TEST_CASE("a single-input join passes requests through untouched", "[runtime][join]") {
  PostSession session("/", {});
  JoinPoint join(1);
  auto r = request(&session, 3, {"a"});
  Request* raw = r.get();
  CHECK(join.arrive(0, std::move(r)).get() == raw);
}

TEST_CASE("the batcher takes queued requests of one endpoint up to the batch size and carries the rest over",
          "[runtime][batcher]") {
  PostSession first("/", {}), second("/other", {});
  RequestQueue queue(16);
  queue.push(request(&first, 0, {"a", "b"}));
  queue.push(request(&first, 1, {"c", "d"}));
  queue.push(request(&first, 2, {"e", "f"}));
  queue.push(request(&second, 0, {"g"}));
  queue.push(request(&second, 1, {"h", "i", "j", "k", "l"}));
  BatchSource source(queue);
  Batcher batcher(source, BatchingOptions{5, std::chrono::microseconds(0)});

  auto b1 = batcher.take();  // 2 + 2 fit, 2 more would make 6
  REQUIRE(b1.size() == 2);
  CHECK(b1[0]->index == 0);
  CHECK(b1[1]->index == 1);
  auto b2 = batcher.take();  // the carried request; the next is for another endpoint
  REQUIRE(b2.size() == 1);
  CHECK(b2[0]->index == 2);
  auto b3 = batcher.take();
  REQUIRE(b3.size() == 1);
  CHECK(b3[0]->session == &second);
  auto b4 = batcher.take();  // larger than the batch size: a batch of its own
  REQUIRE(b4.size() == 1);
  CHECK(b4[0]->docs.size() == 5);
  queue.close();
  CHECK(batcher.take().empty());
}

TEST_CASE("the batcher merges requests of different posts with the same endpoint, parameters and target",
          "[runtime][batcher]") {
  PostSession a("/encode", {}), b("/encode", {}), c("/encode", {{"k", 1}}), d("/encode", {}, "one");
  RequestQueue queue(16);
  queue.push(request(&a, 0, {"a"}));
  queue.push(request(&b, 0, {"b"}));
  queue.push(request(&c, 0, {"c"}));  // other parameters
  queue.push(request(&d, 0, {"d"}));  // another target
  BatchSource source(queue);
  Batcher batcher(source, BatchingOptions{100, std::chrono::microseconds(0)});
  auto b1 = batcher.take();
  REQUIRE(b1.size() == 2);
  CHECK(b1[0]->session == &a);
  CHECK(b1[1]->session == &b);
  CHECK(batcher.take().front()->session == &c);
  CHECK(batcher.take().front()->session == &d);
}

TEST_CASE("without a max_delay a replica waits for more only while another runs a batch, an eighth of its time",
          "[runtime][batcher]") {
  using std::chrono::microseconds;
  using std::chrono::nanoseconds;
  CHECK(wait_under_load(0, std::chrono::milliseconds(4)) == microseconds(0));  // the others idle: at once
  CHECK(wait_under_load(1, nanoseconds(0)) == microseconds(0));                // no batch finished yet
  CHECK(wait_under_load(1, microseconds(800)) == microseconds(100));
  CHECK(wait_under_load(11, microseconds(960)) == microseconds(120));
  CHECK(wait_under_load(3, std::chrono::milliseconds(80)) == microseconds(1000));  // at most 1 ms
  // A replica alone never waits: its own batch ends when it asks for the next. A request pushed while it
  // collects (another thread, 20 ms later) is not waited for.
  PostSession session("/", {});
  RequestQueue queue(16);
  BatchSource source(queue);
  Batcher only(source, BatchingOptions{8, std::nullopt});
  queue.push(request(&session, 0, {"a"}));
  CHECK(only.take().size() == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a long batch: its eighth would be 3.75 ms
  queue.push(request(&session, 1, {"b"}));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    queue.push(request(&session, 2, {"c"}));
  });
  const auto batch = only.take();
  late.join();
  REQUIRE(batch.size() == 1);
  CHECK(batch[0]->index == 1);
  // While another replica's batch runs, the wait is what wait_under_load says; with an explicit 0, none.
  Batcher other(source, BatchingOptions{8, std::nullopt});
  const auto running = other.take();  // "c": the other replica now runs a batch
  REQUIRE(running.size() == 1);
  queue.push(request(&session, 3, {"d"}));
  const auto start = std::chrono::steady_clock::now();
  CHECK(only.take().size() == 1);  // waited an eighth of the recent batch time (~30 ms), at most 1 ms, for more
  CHECK(std::chrono::steady_clock::now() - start >= microseconds(900));
  Batcher never(source, BatchingOptions{8, microseconds(0)});
  queue.push(request(&session, 4, {"e"}));
  const auto at_once = std::chrono::steady_clock::now();
  CHECK(never.take().size() == 1);
  CHECK(std::chrono::steady_clock::now() - at_once < std::chrono::milliseconds(500));
}

TEST_CASE("without batching options every request is a batch of its own", "[runtime][batcher]") {
  PostSession session("/", {});
  RequestQueue queue(4);
  queue.push(request(&session, 0, {"a"}));
  queue.push(request(&session, 1, {"b"}));
  BatchSource source(queue);
  Batcher batcher(source, BatchingOptions{});
  CHECK(batcher.take().size() == 1);
  CHECK(batcher.take().size() == 1);
}

TEST_CASE("an executor's replicas collect one batch at a time, so a burst fills one batch before the next starts",
          "[runtime][batcher]") {
  PostSession session("/", {});
  RequestQueue queue(16);
  BatchSource source(queue);
  const BatchingOptions options{4, std::chrono::seconds(5)};  // full batches return long before the delay
  Batcher first(source, options), second(source, options);
  std::vector<RequestPtr> a, b;
  queue.push(request(&session, 0, {"r0"}));
  std::thread collecting([&] { a = first.take(); });
  while (queue.size() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // r0 is taken
  std::thread waiting([&] { b = second.take(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the second replica waits for its turn
  for (std::uint64_t i = 1; i < 8; ++i) {                      // one at a time, as clients' requests arrive
    queue.push(request(&session, i, {fmt::format("r{}", i)}));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  collecting.join();
  waiting.join();
  // Replicas racing for each request would have split r1..r3 between the two batches.
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(a[i]->index == i);
    CHECK(b[i]->index == i + 4);
  }
}

TEST_CASE("the request carried over starts the next batch of whichever replica collects next", "[runtime][batcher]") {
  PostSession session("/", {});
  RequestQueue queue(16);
  BatchSource source(queue);
  queue.push(request(&session, 0, {"a", "b"}));
  queue.push(request(&session, 1, {"c", "d", "e"}));  // does not fit beside the first
  Batcher first(source, BatchingOptions{4, std::chrono::microseconds(0)});
  Batcher second(source, BatchingOptions{4, std::chrono::microseconds(0)});
  const auto a = first.take();
  REQUIRE(a.size() == 1);
  CHECK(a[0]->index == 0);
  CHECK_FALSE(second.closed());
  queue.close();
  CHECK_FALSE(second.closed());  // the carried request is still to be taken
  const auto b = second.take();
  REQUIRE(b.size() == 1);
  CHECK(b[0]->index == 1);
  CHECK(second.closed());
  CHECK(first.take().empty());
}

TEST_CASE("merged results go back by position when the count is unchanged", "[runtime][batcher]") {
  PostSession session("/", {});
  std::vector<RequestPtr> requests;
  requests.push_back(request(&session, 0, {"a", "b"}));
  requests.push_back(request(&session, 1, {"c"}));
  MergedBatch merged = merge_requests(requests);
  CHECK(ids_of(merged.docs) == std::vector<std::string>{"a", "b", "c"});
  CHECK(requests[0]->docs.empty());
  for (auto& d : merged.docs) d.text += "!";
  CHECK(split_results(merged, requests).empty());
  CHECK(ids_of(requests[0]->docs) == std::vector<std::string>{"a", "b"});
  CHECK(requests[1]->docs[0].text == "c!");
}

TEST_CASE("merged results go back by id or parent id when the executor changed the count", "[runtime][batcher]") {
  PostSession session("/", {});
  std::vector<RequestPtr> requests;
  requests.push_back(request(&session, 0, {"a"}));
  requests.push_back(request(&session, 1, {"b"}));
  MergedBatch merged = merge_requests(requests);
  Document child("b.1");
  child.id = "b.1";
  child.parent_id = "b";
  merged.docs.push_back(std::move(child));
  CHECK(split_results(merged, requests).empty());
  CHECK(ids_of(requests[0]->docs) == std::vector<std::string>{"a"});
  CHECK(ids_of(requests[1]->docs) == std::vector<std::string>{"b", "b.1"});
}

TEST_CASE("a merged result that belongs to no input fails the batch with an explanation", "[runtime][batcher]") {
  PostSession session("/", {});
  std::vector<RequestPtr> requests;
  requests.push_back(request(&session, 0, {"a"}));
  requests.push_back(request(&session, 1, {"b"}));
  MergedBatch merged = merge_requests(requests);
  Document stranger("?");
  stranger.id = "stranger";
  merged.docs.push_back(std::move(stranger));
  const std::string error = split_results(merged, requests);
  CHECK_THAT(error, flowline::testing::contains("document stranger"));
  CHECK_THAT(error, flowline::testing::contains("turn batching off"));
}

namespace {

// A replica that fails any batch holding a document whose text is "bad".
class ScriptedReplica : public Replica {
 public:
  void open() override {}
  std::string run(const std::string&, DocumentArray& docs, const boost::json::object&) override {
    ++calls;
    for (const auto& d : docs) {
      if (d.text == "bad") return "bad document";
    }
    for (auto& d : docs) d.text += "+";
    return {};
  }
  void close(RunOutcome) noexcept override {}
  int calls = 0;
};

RequestPtr text_request(PostSession* session, std::uint64_t index, std::vector<std::string> texts) {
  auto r = std::make_unique<Request>();
  r->session = session;
  r->index = index;
  for (auto& t : texts) r->docs.push_back(Document(t));
  return r;
}

}  // namespace

TEST_CASE("a replica worker isolates a failing request in a merged batch and forwards every request once",
          "[runtime][replica]") {
  PostSession session("/", {});
  RequestQueue queue(1);
  ScriptedReplica replica;
  ObserverList observers;
  ReplicaPlacement placement{"check", "Scripted", 0, c10::Device(c10::kCPU)};
  std::vector<RequestPtr> forwarded;
  BatchSource source(queue);
  ReplicaWorker worker(
      replica, Batcher(source, {}), [&](RequestPtr r) { forwarded.push_back(std::move(r)); }, observers, placement, 0);
  std::vector<RequestPtr> batch;
  batch.push_back(text_request(&session, 0, {"ok"}));
  batch.push_back(text_request(&session, 1, {"bad"}));
  batch.push_back(text_request(&session, 2, {"fine"}));
  auto upstream = text_request(&session, 3, {"x"});
  upstream->error = "earlier";
  upstream->error_executor = "before";
  batch.push_back(std::move(upstream));
  worker.process(std::move(batch));

  REQUIRE(forwarded.size() == 4);
  CHECK(forwarded[0]->index == 3);  // failed upstream: passed straight through, untouched
  CHECK(forwarded[0]->error_executor == "before");
  CHECK(forwarded[1]->docs[0].text == "ok+");
  CHECK(forwarded[2]->error == "bad document");
  CHECK(forwarded[2]->error_executor == "check");
  CHECK(forwarded[3]->docs[0].text == "fine+");
  CHECK(replica.calls == 4);  // the merged call, then each of the three on its own
}
