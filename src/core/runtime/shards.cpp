// ShardRouter (shards.hpp): splitting a request over an executor's shards and gathering their answers.
#include "shards.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace flowline::runtime {

ShardRouter::ShardRouter(std::string executor, std::size_t shards, std::shared_ptr<const ShardPlan> plan, Params params,
                         std::vector<EndpointParams> request_params)
    : executor_(std::move(executor)),
      shards_(std::max<std::size_t>(shards, 1)),
      plan_(std::move(plan)),
      params_(std::move(params)),
      request_params_(std::move(request_params)) {}

std::size_t ShardRouter::shard_of(std::string_view id, std::size_t shards) noexcept {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : id) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return static_cast<std::size_t>(hash % std::max<std::size_t>(shards, 1));
}

std::vector<RequestPtr> ShardRouter::scatter(RequestPtr request) {
  const auto key = std::make_pair(static_cast<const PostSession*>(request->session), request->index);
  std::vector<RequestPtr> parts(shards_);
  Pending pending;
  pending.parts.resize(shards_);
  const std::string& endpoint = request->session->endpoint;
  pending.by_id = plan_ && std::find(plan_->by_id.begin(), plan_->by_id.end(), endpoint) != plan_->by_id.end();
  if (pending.by_id && !request->docs.empty()) {
    pending.places.resize(shards_);
    std::vector<DocumentArray> split(shards_);
    for (std::size_t i = 0; i < request->docs.size(); ++i) {
      const std::size_t s = shard_of(request->docs[i].id, shards_);
      pending.places[s].push_back(i);
      split[s].push_back(std::move(request->docs[i]));
    }
    for (std::size_t s = 0; s < shards_; ++s) {
      if (split[s].empty()) continue;
      parts[s] = std::make_unique<Request>();
      parts[s]->index = request->index;
      parts[s]->session = request->session;
      parts[s]->docs = std::move(split[s]);
    }
  } else if (pending.by_id) {
    parts[0] = std::move(request);
  } else {
    for (std::size_t s = 1; s < shards_; ++s) parts[s] = std::make_unique<Request>(*request);
    parts[0] = std::move(request);
  }
  for (const RequestPtr& part : parts) pending.waiting += part ? 1 : 0;
  std::lock_guard lock(mutex_);
  pending_.emplace(key, std::move(pending));
  return parts;
}

RequestPtr ShardRouter::gather(std::size_t shard, RequestPtr part) {
  Pending done;
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find({part->session, part->index});
    if (it == pending_.end()) return part;  // not scattered here (cannot happen): passed on as it is
    it->second.parts[shard] = std::move(part);
    if (--it->second.waiting > 0) return nullptr;
    done = std::move(it->second);
    pending_.erase(it);
  }
  return combine(done);
}

RequestPtr ShardRouter::combine(Pending& pending) const {
  RequestPtr whole;
  for (std::size_t s = 0; s < shards_; ++s) {
    RequestPtr& part = pending.parts[s];
    if (part && part->failed()) {
      part->error = fmt::format("shard {} of {}: {}", s, shards_, part->error);
      return std::move(part);
    }
  }
  for (const auto& part : pending.parts) {
    if (!part || whole) continue;
    whole = std::make_unique<Request>();
    whole->index = part->index;
    whole->session = part->session;
  }
  if (pending.by_id && !pending.places.empty()) {
    // Back to their places when every shard answered as many documents as it was sent; otherwise (a handler
    // that dropped or added documents) in shard order.
    bool same = true;
    std::size_t total = 0;
    for (std::size_t s = 0; s < shards_; ++s) {
      const std::size_t got = pending.parts[s] ? pending.parts[s]->docs.size() : 0;
      same = same && got == pending.places[s].size();
      total += got;
    }
    std::vector<std::pair<std::size_t, std::size_t>> order;  // (shard, index in its answer) per place
    if (same) {
      order.resize(total);
      for (std::size_t s = 0; s < shards_; ++s) {
        for (std::size_t j = 0; j < pending.places[s].size(); ++j) order[pending.places[s][j]] = {s, j};
      }
    } else {
      order.reserve(total);
      for (std::size_t s = 0; s < shards_; ++s) {
        for (std::size_t j = 0; pending.parts[s] && j < pending.parts[s]->docs.size(); ++j) order.emplace_back(s, j);
      }
    }
    whole->docs.reserve(total);
    for (const auto& [s, j] : order) whole->docs.push_back(std::move(pending.parts[s]->docs[j]));
    return whole;
  }
  std::vector<DocumentArray> answers;
  answers.reserve(shards_);
  for (auto& part : pending.parts) {
    if (part) answers.push_back(std::move(part->docs));
  }
  if (answers.size() == 1 || !plan_ || !plan_->merge) {
    whole->docs = std::move(answers.front());
    return whole;
  }
  try {
    // The merge reads the parameters as the shards' handlers did: checked (every shard passed the check).
    const std::string& endpoint = whole->session->endpoint;
    const CheckedRequestParams request =
        check_request_params(request_params_, executor_, endpoint, whole->session->parameters);
    whole->docs = plan_->merge(endpoint, request.parameters, params_, answers);
  } catch (const std::exception& e) {
    whole->error = fmt::format("merging the answers of {} shards: {}", shards_, e.what());
    whole->error_executor = executor_;
  }
  return whole;
}

}  // namespace flowline::runtime
