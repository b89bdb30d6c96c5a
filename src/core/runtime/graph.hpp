// The shape of a flow: which executor feeds which, where branches join, and the join that merges the
// branches of one request by document id. No threads here; the runtime walks this graph. Private to
// flowline::core (tests include it directly).
#pragma once

#include "request.hpp"

#include "flowline/flow_config.hpp"

#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace flowline::runtime {

// Where a request goes next: executor `target` (its index in the flow), arriving in input `slot`, or the
// sink (the response to the client) when target is kSink.
struct Edge {
  static constexpr std::size_t kSink = std::numeric_limits<std::size_t>::max();
  std::size_t target = kSink;
  std::size_t slot = 0;
  bool to_sink() const noexcept { return target == kSink; }
  bool operator==(const Edge&) const = default;
};

struct GraphNode {
  std::vector<Edge> outputs;  // never empty: an executor nobody needs feeds the sink
  std::size_t inputs = 0;     // branches arriving here (1 for a chain; a join when more)
};

// The DAG of a validated FlowConfig. An executor without `needs` follows the one before it (the first
// follows the client); with `needs: []` it follows the client too. Executors whose output nobody reads
// feed the sink, which joins them like any other join point.
struct FlowGraph {
  std::vector<GraphNode> nodes;  // one per executor, in config order
  std::vector<Edge> entries;     // where the client's requests go
  std::size_t sink_inputs = 0;   // branches the sink waits for
};

// Builds the graph. The config must have passed validate_flow_config (names unique, needs resolvable,
// acyclic); an unknown `needs` name throws std::out_of_range.
FlowGraph build_flow_graph(const FlowConfig& config);

// Merges the branches of one request, part 0 first: documents of later parts merge into the document of
// the same id (Document::merge_from), or are appended when new. When a part failed, the first failure in
// slot order is the result's error. The parts must all be the same request of the same post.
RequestPtr merge_branches(std::vector<RequestPtr> parts);

// Where `inputs` branches meet: arrive() keeps each part until every branch has delivered the same
// request, then returns the merged request. Thread-safe: branches arrive from their replicas' threads.
class JoinPoint {
 public:
  explicit JoinPoint(std::size_t inputs) : inputs_(inputs) {}

  // The merged request when this arrival completes it, else nullptr. With one input, `request` itself.
  RequestPtr arrive(std::size_t slot, RequestPtr request);
  std::size_t inputs() const noexcept { return inputs_; }
  // Requests with some but not all branches arrived (0 between posts).
  std::size_t pending() const;

 private:
  const std::size_t inputs_;
  mutable std::mutex mutex_;
  std::map<std::pair<const PostSession*, std::uint64_t>, std::vector<RequestPtr>> pending_;
};

}  // namespace flowline::runtime
