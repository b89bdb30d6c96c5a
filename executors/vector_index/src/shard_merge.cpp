// How a VectorIndex with `shards: N` answers: each shard's answer merged into one (the ShardPlan's merge,
// vector_index.cpp). Split from the executor's file to keep each file short.
#include "backend.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace flowline::vector_index {
namespace {

// A /search request's limit as the shards' handlers read it: the checked request parameter (an int ≥ 1,
// Registry's check), else the executor's `with:` limit.
std::size_t limit_of(const boost::json::object& parameters, const Params& params) {
  const auto* v = parameters.if_contains("limit");
  return v && v->is_int64() ? static_cast<std::size_t>(v->get_int64()) : params.get<std::size_t>("limit");
}

// One answer of a shard set: /search keeps each query's best matches over all shards (the request's limit,
// else the executor's); /status adds the shards' counts and bytes; other endpoints answer as shard 0 did.
}  // namespace

DocumentArray merge_shards(std::string_view endpoint, const boost::json::object& parameters, const Params& params,
                           std::vector<DocumentArray>& parts) {
  DocumentArray out = std::move(parts.front());
  for (std::size_t s = 1; s < parts.size(); ++s) {
    if (parts[s].size() != out.size()) {
      throw Error(
          fmt::format("{}: shard 0 answered {} documents, shard {} {}", endpoint, out.size(), s, parts[s].size()));
    }
  }
  if (endpoint == "/search") {
    const std::size_t limit = limit_of(parameters, params);
    for (std::size_t i = 0; i < out.size(); ++i) {
      DocumentArray& matches = out[i].matches;
      for (std::size_t s = 1; s < parts.size(); ++s) {
        for (Document& m : parts[s][i].matches) matches.push_back(std::move(m));
      }
      if (matches.empty()) continue;
      // Every match is scored under the metric's name (one lookup each, before the sort).
      const std::string metric = matches[0].scores.empty() ? std::string() : matches[0].scores.begin()->first;
      const bool higher = metric.empty() || higher_is_better(parse_metric(metric));
      std::vector<float> score(matches.size(), higher ? -INFINITY : INFINITY);
      for (std::size_t j = 0; j < matches.size(); ++j) {
        if (const auto it = matches[j].scores.find(metric); it != matches[j].scores.end()) score[j] = it->second;
      }
      std::vector<std::size_t> order(matches.size());
      for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return higher ? score[a] > score[b] : score[a] < score[b];
      });
      DocumentArray best;
      best.reserve(std::min(limit, order.size()));
      for (std::size_t j = 0; j < order.size() && j < limit; ++j) best.push_back(std::move(matches[order[j]]));
      matches = std::move(best);
    }
  } else if (endpoint == "/status") {
    for (std::size_t i = 0; i < out.size(); ++i) {
      boost::json::object& tags = out[i].tags;
      std::uint64_t count = 0, bytes = 0;
      boost::json::array where, workspaces;
      for (std::size_t s = 0; s < parts.size(); ++s) {
        const boost::json::object& t = s == 0 ? tags : parts[s][i].tags;  // shard 0's answer is `out`
        if (const auto* c = t.if_contains("count"); c && c->is_number()) count += c->to_number<std::uint64_t>();
        if (const auto* b = t.if_contains("bytes"); b && b->is_number()) bytes += b->to_number<std::uint64_t>();
        if (const auto* w = t.if_contains("where")) where.push_back(*w);
        if (const auto* w = t.if_contains("workspace")) workspaces.push_back(*w);
      }
      tags["count"] = count;
      tags["bytes"] = bytes;
      tags["shards"] = parts.size();
      tags["where"] = std::move(where);
      tags["workspace"] = std::move(workspaces);
    }
  }
  return out;
}

}  // namespace flowline::vector_index
