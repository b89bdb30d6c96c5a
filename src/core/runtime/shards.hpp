// The shards of one executor (`shards: N`): ShardRouter splits each request over the shards as the
// executor's ShardPlan says (documents routed by a stable hash of their id, or the whole request to every
// shard), and gathers the shards' answers of one request into one, in request order or through the plan's
// merge. Private to flowline::core.
//
// Threads: scatter() runs on the thread that delivers the request (an upstream replica's, or the poster's);
// gather() on the shards' replica threads, concurrently. Both are thread-safe. A request is registered by
// scatter() before any of its parts can reach a shard, so gather() always finds it.
#pragma once

#include "request.hpp"

#include "flowline/executor.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowline::runtime {

class ShardRouter {
 public:
  // `params`: the executor's `with:`, and `request_params` its declared request parameters, for the plan's merge.
  ShardRouter(std::string executor, std::size_t shards, std::shared_ptr<const ShardPlan> plan, Params params,
              std::vector<EndpointParams> request_params = {});

  // The shard a document id belongs to: FNV-1a (64 bits) of the id's bytes, modulo `shards`. Stable across
  // processes, machines and versions: durable shards depend on it.
  static std::size_t shard_of(std::string_view id, std::size_t shards) noexcept;

  // The parts of `request`, one per shard; parts[s] is null when shard s gets nothing (a by-id endpoint
  // none of whose documents live there). A request without documents goes to shard 0 alone on a by-id
  // endpoint.
  std::vector<RequestPtr> scatter(RequestPtr request);

  // Shard `shard`'s answer to its part. Returns the whole answer when this was the last part outstanding,
  // else nullptr. A part that failed fails the whole (its error, naming the shard); otherwise documents of
  // a by-id endpoint go back to their places in the request, and the answers of an endpoint sent to every
  // shard are merged by the plan.
  RequestPtr gather(std::size_t shard, RequestPtr part);

 private:
  struct Pending {
    bool by_id = false;
    std::size_t waiting = 0;                       // parts not yet answered
    std::vector<RequestPtr> parts;                 // the answers so far, by shard
    std::vector<std::vector<std::size_t>> places;  // by id: where shard s's documents were in the request
  };
  RequestPtr combine(Pending& pending) const;

  const std::string executor_;
  const std::size_t shards_;
  const std::shared_ptr<const ShardPlan> plan_;
  const Params params_;
  const std::vector<EndpointParams> request_params_;
  std::mutex mutex_;
  std::map<std::pair<const PostSession*, std::uint64_t>, Pending> pending_;
};

}  // namespace flowline::runtime
