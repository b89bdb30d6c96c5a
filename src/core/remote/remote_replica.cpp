// RemoteReplica (remote_replica.hpp): a replica thread's batch sent through its RemoteHost, the answer
// decoded with the connection's protocol version.
#include "remote_replica.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace flowline::remote {

std::string RemoteReplica::run(const std::string& endpoint, DocumentArray& docs,
                               const boost::json::object& parameters) {
  request_error_ = false;
  const std::uint64_t id = host_.next_id();
  RemoteHost::Answer answer;
  try {
    // The deadline the server is given is remote.timeout: past it this flow stops waiting for the answer
    // (and takes the host for lost), so nothing the server does after it is of use. A request given up
    // sooner (its gateway's deadline, its client gone) reaches the server as a Cancel frame (call()).
    const std::string params = parameters.empty() ? "" : boost::json::serialize(parameters);
    const auto deadline_ms = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(host_.request_timeout().count(), 0, std::numeric_limits<std::uint32_t>::max()));
    answer = host_.call(
        id,
        [&](std::uint16_t version, SharedSegment* segment, SharedSegment::Region& region) {
          wire::SharedRegion view;
          if (segment) {
            // The request's large tensors, and as much again for the answer's (an executor that changes its
            // tensors answers with as many bytes); without that room the answer's new tensors cross inline,
            // and without room for the request's own, the whole request does (a region that holds only part
            // of them would keep the segment from the other request in flight for little).
            const std::uint64_t want = wire::shared_bytes(docs, kSharedMinTensorBytes);
            if (want > 0) region = segment->allocate(2 * want);
            if (want > 0 && !region) region = segment->allocate(want);
            view = region.view(kSharedMinTensorBytes);
          }
          return wire::encode_request(id, endpoint, params, docs, deadline_ms, version, region ? &view : nullptr);
        },
        cancellation_);
  } catch (const runtime::ReplicaUnavailable&) {
    host_.count_requeued();
    throw;
  } catch (const LostInFlight& e) {
    return e.what();
  } catch (const wire::WireError& e) {
    return fmt::format("cannot send the batch to {}: {}", host_.address(), e.what());
  }
  wire::ResponseFrame response;
  try {
    const wire::SharedRegion shared = answer.region.view(0);  // empty: a tensor in a segment is refused
    response = wire::decode_response(answer.frame, answer.version, answer.region ? &shared : nullptr);
  } catch (const std::exception& e) {
    return fmt::format("host {} answered with a bad frame: {}", host_.address(), e.what());
  }
  docs = std::move(response.docs);
  if (response.ok()) return {};
  request_error_ = response.status == wire::ResponseStatus::RequestError;
  return response.error_executor.empty() ? response.error : fmt::format("{} (on {})", response.error, host_.address());
}

runtime::Availability RemoteReplica::wait_available(const std::function<bool()>& stop) {
  switch (host_.wait_up(stop)) {
    case RemoteHost::Wait::Up:
      return runtime::Availability::Ready;
    case RemoteHost::Wait::Stop:
      return runtime::Availability::Stop;
    case RemoteHost::Wait::GiveUp:
      break;
  }
  return runtime::Availability::GiveUp;
}

}  // namespace flowline::remote
