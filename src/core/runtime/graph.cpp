// Building a flow's DAG from its config, and merging branches where they join.
#include "graph.hpp"

#include <string>

namespace flowline::runtime {

FlowGraph build_flow_graph(const FlowConfig& config) {
  FlowGraph graph;
  graph.nodes.resize(config.executors.size());
  std::map<std::string, std::size_t> index_of;
  for (std::size_t i = 0; i < config.executors.size(); ++i) index_of[config.executors[i].name] = i;

  for (std::size_t i = 0; i < config.executors.size(); ++i) {
    const ExecutorConfig& executor = config.executors[i];
    GraphNode& node = graph.nodes[i];
    std::vector<std::string> needs;
    if (executor.needs) {
      needs = *executor.needs;
    } else if (i > 0) {
      needs = {config.executors[i - 1].name};
    }
    if (needs.empty()) graph.entries.push_back(Edge{i, node.inputs++});
    for (const auto& need : needs) graph.nodes[index_of.at(need)].outputs.push_back(Edge{i, node.inputs++});
  }
  for (auto& node : graph.nodes) {
    if (node.outputs.empty()) node.outputs.push_back(Edge{Edge::kSink, graph.sink_inputs++});
  }
  if (graph.nodes.empty()) graph.entries.push_back(Edge{Edge::kSink, graph.sink_inputs++});
  return graph;
}

RequestPtr merge_branches(std::vector<RequestPtr> parts) {
  RequestPtr merged = std::move(parts.at(0));
  for (std::size_t i = 1; i < parts.size(); ++i) {
    Request& part = *parts[i];
    if (merged->failed()) continue;
    if (part.failed()) {
      merged->error = std::move(part.error);
      merged->error_executor = std::move(part.error_executor);
      merged->request_error = part.request_error;
      continue;
    }
    for (auto& doc : part.docs) {
      if (Document* existing = merged->docs.find(doc.id)) {
        existing->merge_from(std::move(doc));
      } else {
        merged->docs.push_back(std::move(doc));
      }
    }
  }
  return merged;
}

RequestPtr JoinPoint::arrive(std::size_t slot, RequestPtr request) {
  if (inputs_ <= 1) return request;
  std::vector<RequestPtr> parts;
  {
    std::lock_guard lock(mutex_);
    const std::pair<const PostSession*, std::uint64_t> key{request->session, request->index};
    auto& waiting = pending_[key];
    if (waiting.empty()) waiting.resize(inputs_);
    waiting.at(slot) = std::move(request);
    for (const auto& part : waiting) {
      if (!part) return nullptr;
    }
    parts = std::move(waiting);
    pending_.erase(key);
  }
  return merge_branches(std::move(parts));
}

std::size_t JoinPoint::pending() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

}  // namespace flowline::runtime
